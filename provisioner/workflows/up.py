"""provision up: every server from power-off to a verified, ready cluster member.

Per node, each step moves it one phase along the lifecycle (state.py), one transaction per
step, committed only after the step finished:

    enrolled --inspect--> inspected --boot--> booting --wait_os--> os_ready
             --configure--> configured --verify--> verified --> ready

The BMC and boot steps run per node in parallel (bounded); configure and verify run the
rendered playbooks for all nodes that got that far, in waves of `forks` hosts. A node that
fails is marked failed with the reason and the phase it failed in; the others go on. A run
that is killed leaves every node at its last committed phase, so the next run resumes
there and never repeats a finished step. Nothing here prints: progress goes to a callback.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner import bmc as bmc_mod
from provisioner import power
from provisioner import render as render_mod
from provisioner import runner as runner_mod
from provisioner.bmc import BmcDriver, BmcTarget, BootDevice, PowerAction, PowerState
from provisioner.bmc.base import HardwareFacts
from provisioner.bmc.retry import poll_until
from provisioner.errors import BmcError, InventoryError
from provisioner.inventory import checks
from provisioner.inventory.findings import Category, Severity
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.models import BlockKind
from provisioner.render import HostPlan
from provisioner.state import LIFECYCLE, Phase, StateStore

# The step that moves a node out of each phase.
STEP_FROM: dict[Phase, str] = {
    Phase.ENROLLED: "inspect",
    Phase.INSPECTED: "boot",
    Phase.BOOTING: "wait_os",
    Phase.OS_READY: "configure",
    Phase.CONFIGURED: "verify",
    Phase.VERIFIED: "ready",
}
STEPS: tuple[str, ...] = tuple(STEP_FROM.values())
# Not yet powered on by `up`: the BMC steps are ahead, and the rack budget gate applies.
BEFORE_POWER_ON = frozenset({Phase.ENROLLED, Phase.INSPECTED})
# The per-node steps before the playbooks (run in threads, one node each).
EARLY = BEFORE_POWER_ON | {Phase.BOOTING}
LAB_OS_NOTE = ("OS install skipped: the lab provides the OS (an SSH test host in a network "
               "namespace); the BMC boot and power steps ran for real")


@dataclass(frozen=True)
class Progress:
    """One thing that happened, for the console (live table, plain lines or JSON lines)."""

    node: str | None
    step: str
    status: str  # start | ok | failed | note | task | interrupted
    detail: str = ""
    at: float = field(default_factory=time.time)


ProgressFn = Callable[[Progress], None]


@dataclass(frozen=True)
class UpOptions:
    limit: str | None = None
    from_phase: Phase | None = None
    forks: int = 20
    concurrency: int | None = None  # default: the site's provisioning.concurrency
    os_timeout_s: float | None = None  # default: the site's (60 s in the lab)
    power_timeout_s: float = 180.0
    request_timeout_s: float = 10.0
    playbook: str = "site.yml"
    verify_playbook: str = "verify.yml"


@dataclass
class NodeOutcome:
    hostname: str
    start_phase: Phase
    phase: Phase
    failed_phase: Phase | None = None
    reason: str | None = None
    steps: list[str] = field(default_factory=list)


@dataclass
class UpResult:
    run_id: int
    site: str
    lab: bool
    state_path: Path
    project_dir: Path | None
    nodes: list[NodeOutcome]
    notes: list[str]
    interrupted: bool
    elapsed_s: float
    ansible_s: float
    artifact_dirs: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[NodeOutcome]:
        return [n for n in self.nodes if n.phase is Phase.FAILED]

    @property
    def nothing_to_do(self) -> bool:
        return all(not n.steps and n.phase is n.start_phase for n in self.nodes)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.interrupted


class StepFailed(Exception):
    """A node's step failed; the message is the reason recorded for it."""


class StepInterrupted(Exception):
    """Ctrl-C arrived before this step started or while it waited."""


# ---------------------------------------------------------------- pure helpers


def state_path(loaded: LoadedSite) -> Path:
    """The site's state store. The lab is a separate, throwaway site: its nodes' state
    lives with the lab and goes when `provision lab down` removes it."""
    base = loaded.base_dir.resolve() / ".provision"
    return base / "lab" / "state.db" if loaded.lab_hosts else base / "state.db"


def servers(loaded: LoadedSite) -> list[HostPlan]:
    """Every node `up` brings up: all but switches, in inventory order."""
    return [h for h in render_mod.host_plans(loaded) if h.block.kind is not BlockKind.SWITCH]


def compare_facts(server: HostPlan, facts: HardwareFacts) -> tuple[list[str], list[str]]:
    """(problems, notes) from what the BMC reports against the declared building block.
    Facts a BMC does not report are notes, not problems (many report no GPUs)."""
    problems: list[str] = []
    notes: list[str] = []
    want_gpus = server.block.gpu.count if server.block.gpu else 0
    if facts.gpus:
        if facts.gpu_count != want_gpus:
            problems.append(f"the BMC reports {facts.gpu_count} GPU(s); block "
                            f"{server.block.name} has {want_gpus}")
    elif want_gpus:
        notes.append("the BMC reports no GPU inventory; GPUs are counted at verify")
    declared = {m.lower(): net for net, m in server.node.macs.items()}
    reported = {m.lower() for m in facts.macs}
    if declared and reported:
        for mac, net in sorted(declared.items()):
            if mac not in reported:
                problems.append(f"MAC {mac} ({net}) is not among the BMC's NICs "
                                f"({', '.join(sorted(reported))})")
    elif declared:
        notes.append("the BMC reports no NIC MACs; the declared MACs are not checked")
    return problems, notes


def waves(hosts: Sequence[str], size: int, first: Iterable[str] = ()) -> list[list[str]]:
    """Split hosts into waves of `size`, the `first` ones (control planes) leading."""
    lead = set(first)
    ordered = [h for h in hosts if h in lead] + [h for h in hosts if h not in lead]
    return [ordered[i:i + size] for i in range(0, len(ordered), max(1, size))]


def blocked_racks(loaded: LoadedSite) -> dict[str, str]:
    """Racks whose feeds or cooling cannot carry what is placed in them -> why."""
    report = power.budget(loaded.site, loaded.catalog)
    return {r.name: "; ".join(f.message for f in r.failures)
            for r in report.racks if any(f.check in ("power", "cooling") for f in r.failures)}


def ssh_banner(address: str, port: int, timeout_s: float = 2.0) -> bool:
    """True when an SSH server answers there (its banner starts with SSH-)."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            return sock.recv(64).startswith(b"SSH-")
    except OSError:
        return False


# ---------------------------------------------------------------- the run


class _Up:
    def __init__(self, loaded: LoadedSite, env: Mapping[str, str], opts: UpOptions,
                 progress: ProgressFn | None, stop: threading.Event,
                 make_driver: Callable[[BmcTarget], BmcDriver]) -> None:
        self.loaded = loaded
        self.env = env
        self.opts = opts
        self.emit: ProgressFn = progress or (lambda _p: None)
        self.stop = stop
        self.make_driver = make_driver
        self.lab = bool(loaded.lab_hosts)
        self.store = StateStore(state_path(loaded))
        self.run_id = 0
        self.outcomes: dict[str, NodeOutcome] = {}
        self.notes: list[str] = []
        self.interrupted: set[str] = set()
        self.ansible_s = 0.0
        self.artifact_dirs: list[str] = []
        self.project_dir: Path | None = None
        prov = loaded.site.provisioning
        self.concurrency = opts.concurrency or prov.concurrency
        self.os_timeout_s = opts.os_timeout_s or (60.0 if self.lab else prov.os_timeout_s)

    # ------------------------------------------------ bookkeeping

    def _move(self, host: str, to: Phase, step: str, detail: dict[str, Any] | None = None,
              reason: str | None = None) -> None:
        st = self.store.transition(host, to, run_id=self.run_id, reason=reason, detail=detail)
        out = self.outcomes[host]
        out.phase, out.failed_phase, out.reason = st.phase, st.failed_phase, st.reason
        if to is not Phase.FAILED:
            out.steps.append(step)
        self.emit(Progress(host, step, "failed" if to is Phase.FAILED else "ok",
                           reason or _summary(detail)))

    def _fail(self, host: str, step: str, reason: str) -> None:
        self._move(host, Phase.FAILED, step, {"step": step}, reason=reason)

    def _interrupted(self, host: str, step: str, detail: str) -> None:
        self.interrupted.add(host)
        self.store.record(host, "interrupted", {"step": step, "detail": detail},
                          run_id=self.run_id)
        self.emit(Progress(host, step, "interrupted", detail))

    def _note(self, host: str | None, step: str, kind: str, text: str) -> None:
        self.store.record(host, kind, {"step": step, "note": text}, run_id=self.run_id)
        self.emit(Progress(host, step, "note", text))

    # ------------------------------------------------ entry

    def run(self, selected: list[HostPlan]) -> None:
        hosts = [s.hostname for s in selected]
        self.store.enroll(hosts, run_id=self.run_id)
        self._rewind(hosts)
        for s in selected:
            st = self.store.node(s.hostname)
            self.outcomes[s.hostname] = NodeOutcome(s.hostname, st.phase, st.phase,
                                                    st.failed_phase, st.reason)
        self._retry_failed(hosts)
        todo = [s for s in selected if self.outcomes[s.hostname].phase is not Phase.READY
                and self.outcomes[s.hostname].phase is not Phase.MAINTENANCE]
        if not todo:
            return
        self._budget(todo)
        self._early_phases(todo)
        self._playbook_phase(todo, Phase.OS_READY, Phase.CONFIGURED, "configure",
                             self.opts.playbook)
        self._playbook_phase(todo, Phase.CONFIGURED, Phase.VERIFIED, "verify",
                             self.opts.verify_playbook)
        for s in todo:
            if self.outcomes[s.hostname].phase is Phase.VERIFIED and not self.stop.is_set():
                self._move(s.hostname, Phase.READY, "ready", {"lab": self.lab})
        if self.stop.is_set():
            for s in todo:
                out = self.outcomes[s.hostname]
                if out.phase not in (Phase.READY, Phase.FAILED) \
                        and s.hostname not in self.interrupted:
                    self._interrupted(s.hostname, STEP_FROM[out.phase], "not started")

    def _rewind(self, hosts: list[str]) -> None:
        """--from-phase: nodes past that phase go back to it (and run on from there)."""
        target = self.opts.from_phase
        if target is None:
            return
        rank = LIFECYCLE.index(target)
        for host in hosts:
            st = self.store.node(host)
            here = st.failed_phase if st.phase is Phase.FAILED else st.phase
            if here is None or here is Phase.MAINTENANCE:
                continue
            if LIFECYCLE.index(here) > rank:  # never forward: a node not yet there runs on
                self.store.transition(host, target, run_id=self.run_id,
                                      detail={"from_phase": target.value, "rewind": True})

    def _retry_failed(self, hosts: list[str]) -> None:
        """A failed node is retried from the phase it failed in."""
        for host in hosts:
            out = self.outcomes[host]
            if out.phase is Phase.FAILED and out.failed_phase is not None:
                st = self.store.transition(host, out.failed_phase, run_id=self.run_id,
                                           detail={"retry": True, "last_reason": out.reason})
                out.phase, out.failed_phase, out.reason = st.phase, None, None
                out.start_phase = st.phase
                self.emit(Progress(host, STEP_FROM.get(st.phase, "ready"), "note",
                                   f"retrying from {st.phase.value}"))

    def _budget(self, todo: list[HostPlan]) -> None:
        """Refuse to power on nodes in a rack whose feeds or cooling cannot carry it."""
        blocked = blocked_racks(self.loaded)
        for s in todo:
            phase = self.outcomes[s.hostname].phase
            why = blocked.get(s.placement.rack)
            if why and phase in BEFORE_POWER_ON:
                self._fail(s.hostname, STEP_FROM[phase],
                           f"not powered on: rack {s.placement.rack} is over budget ({why})")

    # ------------------------------------------------ inspect, boot, wait for the OS

    def _early_phases(self, todo: list[HostPlan]) -> None:
        early = [s for s in todo if self.outcomes[s.hostname].phase in EARLY]
        if not early:
            return
        with_bmc = [s for s in early if s.node.bmc is not None]
        targets = {t.node: t for t in bmc_mod.targets(
            self.loaded, self.env, ",".join(s.hostname for s in with_bmc) or None,
            request_timeout_s=self.opts.request_timeout_s)} if with_bmc else {}
        with ThreadPoolExecutor(max_workers=max(1, min(self.concurrency, len(early))),
                                thread_name_prefix="up-node") as pool:
            for s in early:
                pool.submit(self._node_early, s, targets.get(s.hostname))

    def _node_early(self, s: HostPlan, target: BmcTarget | None) -> None:
        host = s.hostname
        driver: BmcDriver | None = None
        step = STEP_FROM[self.outcomes[host].phase]
        try:
            if target is not None and self.outcomes[host].phase in BEFORE_POWER_ON:
                driver = self.make_driver(target)
                driver.validate()
            elif self.outcomes[host].phase in BEFORE_POWER_ON:  # a node without a BMC
                self._note(host, step, "no_bmc", "no BMC: inspect and boot skipped; the OS "
                           "must already be installed")
                if self.outcomes[host].phase is Phase.ENROLLED:
                    self._move(host, Phase.INSPECTED, "inspect", {"bmc": False})
                self._move(host, Phase.BOOTING, "boot", {"bmc": False})
            while self.outcomes[host].phase in EARLY:
                if self.stop.is_set():
                    raise StepInterrupted
                phase = self.outcomes[host].phase
                step = STEP_FROM[phase]
                self.emit(Progress(host, step, "start"))
                if phase is Phase.ENROLLED:
                    assert driver is not None
                    self._move(host, Phase.INSPECTED, step, self._inspect(s, driver))
                elif phase is Phase.INSPECTED:
                    assert driver is not None
                    self._move(host, Phase.BOOTING, step, self._boot(s, driver))
                else:
                    self._move(host, Phase.OS_READY, step, self._wait_os(s))
        except StepInterrupted:
            self._interrupted(host, step, "stopped before it finished")
        except (StepFailed, BmcError) as exc:
            self._fail(host, step, str(exc))
        except Exception as exc:  # a bug or an unexpected library error: this node only
            self._fail(host, step, f"unexpected {type(exc).__name__}: {exc}"[:300])
        finally:
            if driver is not None:
                with contextlib.suppress(Exception):  # closing is best effort
                    driver.close()

    def _inspect(self, s: HostPlan, driver: BmcDriver) -> dict[str, Any]:
        facts = driver.hardware_facts()
        problems, notes = compare_facts(s, facts)
        if problems:
            raise StepFailed("hardware does not match the inventory: " + "; ".join(problems))
        return {"vendor": facts.vendor, "model": facts.model, "serial": facts.serial,
                "gpus": facts.gpu_count, "macs": list(facts.macs),
                "power": facts.power_state.value, "notes": notes}

    def _boot(self, s: HostPlan, driver: BmcDriver) -> dict[str, Any]:
        method = s.node.boot or self.loaded.site.provisioning.boot
        device = BootDevice.PXE
        if method == "virtual_media":
            iso = self.loaded.site.provisioning.iso_url
            if not iso:
                raise StepFailed("boot: virtual_media but provisioning.iso_url is not set")
            driver.insert_virtual_media(iso)
            device = BootDevice.CD
        setting = driver.set_boot_device(device, persistent=False)
        was = driver.get_power_state()
        if was is not PowerState.OFF:  # a running node boots its installer only from off
            driver.set_power(PowerAction.OFF, self.opts.power_timeout_s)
        driver.set_power(PowerAction.ON, self.opts.power_timeout_s)
        return {"boot": method, "device": setting.device.value, "verified": setting.verified,
                "was": was.value, "power": "on"}

    def _wait_os(self, s: HostPlan) -> dict[str, Any]:
        host = s.hostname
        if self.lab:
            self._note(host, "wait_os", "os_install_skipped", LAB_OS_NOTE)
        address = render_mod.ansible_host(s.node)
        if address is None:
            raise StepFailed("no management address to reach the OS on")
        port = self.loaded.site.site.ssh.port

        def pause(seconds: float) -> None:
            if self.stop.wait(seconds):
                raise StepInterrupted

        start = time.monotonic()
        answered = poll_until(lambda: ssh_banner(address, port), bool,
                              start + self.os_timeout_s, interval_s=1.0, max_interval_s=10.0,
                              sleep=pause)
        if not answered:
            raise StepFailed(f"no SSH answer from {address}:{port} after "
                             f"{self.os_timeout_s:g} s (OS install did not finish, or the "
                             "node is not on the management network)")
        return {"ssh": f"{address}:{port}", "waited_s": round(time.monotonic() - start, 1),
                "os_install": "skipped (lab)" if self.lab else "network boot"}

    # ------------------------------------------------ configure and verify

    def _project(self) -> Path:
        if self.project_dir is None:
            out = self.store.path.parent / "ansible"
            self.project_dir = render_mod.render(self.loaded, out, lab=self.lab).out
        return self.project_dir

    def _playbook_phase(self, todo: list[HostPlan], source: Phase, target: Phase, step: str,
                        playbook: str) -> None:
        hosts = [s.hostname for s in todo if self.outcomes[s.hostname].phase is source]
        if not hosts or self.stop.is_set():
            return
        project = self._project()
        first = [s.hostname for s in todo if s.control_plane]
        for wave in waves(hosts, self.opts.forks, first):
            if self.stop.is_set():
                break
            for h in wave:
                self.emit(Progress(h, step, "start", playbook))

            def on_task(ev: runner_mod.TaskEvent, step: str = step) -> None:
                self.emit(Progress(ev.host, step, "task",
                                   f"{ev.status}: {ev.task}" + (f" - {ev.message}"
                                                                if ev.message else "")))

            t0 = time.monotonic()
            result = runner_mod.run_playbook(project, playbook, limit=",".join(wave),
                                             forks=self.opts.forks, on_event=on_task,
                                             cancel=self.stop.is_set)
            self.ansible_s += time.monotonic() - t0
            self.artifact_dirs.append(result.artifact_dir)
            self._apply(result, wave, target, step)

    def _apply(self, result: runner_mod.RunResult, wave: list[str], target: Phase,
               step: str) -> None:
        for h in wave:
            failures = [e for e in result.failures if e.host == h]
            if failures:
                first = failures[0]
                self._fail(h, step, f"{first.status} at '{first.task}': {first.message}"
                           f" (log: {result.artifact_dir})")
            elif result.status == "canceled" or self.stop.is_set():
                self._interrupted(h, step, "playbook stopped")
            elif not result.ok and not result.failures:
                self._fail(h, step, f"{result.playbook} ended {result.status} (rc "
                           f"{result.rc}) without a task failure; see {result.artifact_dir}")
            elif not result.ok and result.aborted:
                self._note(h, step, "not_finished", "the playbook stopped after another "
                           "host failed; this node runs again next time")
            else:
                self._move(h, target, step, _playbook_detail(result, h))


def _playbook_detail(result: runner_mod.RunResult, host: str) -> dict[str, Any]:
    stats = result.hosts.get(host)
    mine = [e for e in result.events if e.host == host]
    detail: dict[str, Any] = {
        "playbook": result.playbook,
        "changed": len([e for e in mine if e.status == "changed" and not e.check_mode]),
        "simulated": len([e for e in mine if e.check_mode]),
        "ok": stats.ok if stats else 0,
    }
    not_verified = [e.message for e in mine if e.message.startswith("not verified:")]
    if not_verified:
        detail["not_verified"] = not_verified
    checks_ok = [e.task for e in mine if e.task.startswith("Verify") and e.status == "ok"]
    if checks_ok:
        detail["checks"] = checks_ok
    return detail


def _summary(detail: dict[str, Any] | None) -> str:
    if not detail:
        return ""
    keys = ("boot", "power", "ssh", "waited_s", "changed", "simulated", "gpus")
    parts = [f"{k}={detail[k]}" for k in keys if k in detail]
    parts += [str(n) for n in detail.get("not_verified", [])]
    parts += [str(n) for n in detail.get("notes", [])]
    return ", ".join(parts)


def preflight(loaded: LoadedSite) -> list[str]:
    """Refuse an inventory with errors before touching anything (budget errors stop only
    their rack's nodes, in the run). Returns the warnings."""
    findings = checks.check(loaded)
    errors = [f for f in findings if f.severity is Severity.ERROR
              and f.category is not Category.BUDGET]
    if errors:
        raise InventoryError(f"the inventory has {len(errors)} error(s); nothing was touched",
                             hint="run `provision validate` to see them", findings=errors)
    return [f.message for f in findings if f.severity is Severity.WARNING]


def up(loaded: LoadedSite, env: Mapping[str, str] | None = None,
       opts: UpOptions | None = None, *, progress: ProgressFn | None = None,
       stop: threading.Event | None = None,
       make_driver: Callable[[BmcTarget], BmcDriver] | None = None) -> UpResult:
    """Bring every selected server to ready, resuming from the state store."""
    opts = opts or UpOptions()
    env = os.environ if env is None else env
    preflight(loaded)
    selected_names = set(bmc_mod.select_hosts([s.hostname for s in servers(loaded)],
                                              opts.limit))
    selected = [s for s in servers(loaded) if s.hostname in selected_names]
    job = _Up(loaded, env, opts, progress, stop or threading.Event(),
              make_driver or bmc_mod.make_driver)
    t0 = time.monotonic()
    command = "up" + (f" --limit {opts.limit}" if opts.limit else "") + (
        f" --from-phase {opts.from_phase.value}" if opts.from_phase else "")
    with job.store.exclusive():
        killed = job.store.close_stale_runs()
        if killed:
            job.notes.append(f"earlier run(s) {', '.join(map(str, killed))} were killed; "
                             "resuming from the recorded phases")
        job.run_id = job.store.start_run(command)
        status = "failed"
        try:
            job.run(selected)
            status = ("interrupted" if job.stop.is_set()
                      else "failed" if any(o.phase is Phase.FAILED
                                           for o in job.outcomes.values()) else "ok")
        finally:
            job.store.end_run(job.run_id, status)
    if job.lab:
        job.notes.append("lab: OS install skipped (the lab provides the OS); GPU and "
                         "Kubernetes Ready checks cannot run on lab hosts, and the "
                         "Kubernetes join ran in check mode")
    return UpResult(run_id=job.run_id, site=loaded.site.site.name, lab=job.lab,
                    state_path=job.store.path, project_dir=job.project_dir,
                    nodes=[job.outcomes[s.hostname] for s in selected], notes=job.notes,
                    interrupted=job.stop.is_set(), elapsed_s=time.monotonic() - t0,
                    ansible_s=job.ansible_s, artifact_dirs=job.artifact_dirs)
