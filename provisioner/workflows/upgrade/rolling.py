"""The rolling logic of `upgrade apply` on the step engine, apart from where its steps come
from, so the lab run and the simulation in the tests drive the same code.

Each batch: node stage [cordon, drain (begin), drain] → the installer (roles at the
bundle's versions, reboot) → health gate (cluster checks + the installer's host checks) →
node stage [uncordon]. The batches come from `upgrade.schedule.Scheduler` one at a time through the
engine's BatchStage, given what is down *now*, so a node that failed (and stays cordoned)
keeps using its failure domain's allowance. The stage stops between batches when the
failure budget is spent or a stop was requested; a stop (Ctrl-C) inside a batch lets the
step in flight finish and starts no roles, gate or uncordon after it, so an interrupted
node stays cordoned where it was recorded. Nodes a killed or stopped run left half-way are
resumed first, as one batch: they are down already. Not taken on trust: one uncordoned
since is cordoned again (and drained again if the roles had not run), one found verified is
gated again before its uncordon, and a control plane whose restart would take etcd below
quorum now waits (not started, exit 9).

When the bundle moves Kubernetes, every control plane first runs kubeadm's upgrade in
place, one at a time (kubeadm's order: `kubeadm upgrade apply|node` before the drain; the
node keeps serving while kubeadm restarts its static pods, one control plane at a time).
Once every API server serves the new version, no kubelet can be newer than an API server,
so the workers need not wait for the control planes' full rounds (drain, roles, reboot,
gate): they go alongside them, as for a bundle that changes no Kubernetes version. If
one control plane's in-place upgrade fails, the run notes why and falls back to control
planes alone first, whose full round runs kubeadm's upgrade again and fails it there.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from provisioner.errors import ProvisionerError
from provisioner.kube import Down, KubeClient
from provisioner.lifecycle import UPGRADE_PATH, Phase
from provisioner.upgrade.host import Installer
from provisioner.upgrade.plan import minor_of
from provisioner.upgrade.schedule import Scheduler
from provisioner.workflows import engine
from provisioner.workflows.engine import Journal, Progress
from provisioner.workflows.upgrade.steps import (
    Clock,
    Cordon,
    Drain,
    DrainBegin,
    Uncordon,
    cluster_gate,
)

# Where a killed run can leave a node that is part-way through its upgrade.
MID_UPGRADE = frozenset(UPGRADE_PATH) - {Phase.READY}
# Part-way with its roles (and reboot) still ahead.
BEFORE_ROLES = frozenset({Phase.CORDONED, Phase.DRAINING, Phase.UPGRADING})


@dataclass(frozen=True)
class DrainOptions:
    timeout_s: float = 600.0
    retry_s: float = 5.0
    fallback_delete: bool = False  # --drain-fallback delete: the operator's explicit word
    force: bool = False  # --drain-force: pods no controller owns are evicted too
    delete_emptydir_data: bool = False  # --drain-delete-emptydir-data


@dataclass(frozen=True)
class Rolling:
    """One rolling run's fixed inputs."""

    journal: Journal
    kube: KubeClient
    installer: Installer
    scheduler: Scheduler
    servers: Sequence[str]  # every server of the site (what is down counts across them)
    reboot: frozenset[str]  # nodes whose kernel modules change
    gpus: Mapping[str, int]  # allocatable GPUs expected per node
    max_failures: int
    drain: DrainOptions = field(default_factory=DrainOptions)
    clock: Clock = field(default_factory=Clock)
    on_upgraded: Callable[[str], None] = lambda _h: None
    bundle: str = ""  # recorded with each cordon: what the node's upgrade moves it to
    # After a reboot the node's Ready condition and its allocatable GPUs come back late
    # (kubelet, then the device plugin): the gate's cluster checks are retried this long.
    gate_timeout_s: float = 300.0
    gate_retry_s: float = 10.0
    # The Kubernetes version ("v1.32.4") the gate expects a node's kubelet (and a control
    # plane's API server) to report: nodes whose Kubernetes the bundle moves, or that an
    # earlier run left part-way (apply._kubernetes_checked).
    kubernetes: Mapping[str, str] = field(default_factory=dict)
    # Servers that are no Kubernetes nodes (steps.outside_kubernetes): their upgrade has no
    # cordon, drain, cluster gate or uncordon; the host side and the host gate still run.
    outside_kube: frozenset[str] = frozenset()


@dataclass(frozen=True)
class RollingOutcome:
    stopped: str | None  # why the run stopped early, or None
    budget_spent: bool
    failed: list[str]
    not_started: list[str]


def _down(r: Rolling, pending: Sequence[str]) -> set[str]:
    waiting = set(pending)
    return {h for h in r.servers if h not in waiting and r.journal.phase(h) is not Phase.READY}


def run_batch(r: Rolling, batch: list[str], stop: threading.Event) -> None:
    """Take one batch through cordon, drain, install, gate and uncordon."""
    j = r.journal
    drain = Drain(r.kube, j, r.drain.timeout_s, r.drain.retry_s, r.drain.fallback_delete,
                  r.clock, force=r.drain.force,
                  delete_emptydir_data=r.drain.delete_emptydir_data, outside=r.outside_kube)
    for h in batch:
        if h in r.outside_kube and j.phase(h) is Phase.READY:
            j.note(h, "upgrade", "note", "not a Kubernetes node: upgraded without cordon, "
                   "drain or the cluster's checks")
    engine.NodeStage([Cordon(r.kube, r.bundle, r.outside_kube), DrainBegin(), drain],
                     concurrency=max(1, len(batch))).run(j, batch, stop)
    todo = [h for h in batch if j.phase(h) is Phase.UPGRADING]
    if stop.is_set():  # Ctrl-C: no new roles or gates; nodes stay as recorded, resumable
        return
    if todo:
        for h in todo:
            j.emit(Progress(h, "upgrade", "start"))
        try:
            installed = r.installer.install(todo, [h for h in todo if h in r.reboot])
        except ProvisionerError as exc:  # the project did not render or run: the batch fails
            installed = dict.fromkeys(todo, f"the roles did not run: {exc}")
        for h, why in installed.items():
            if why is None:
                j.move(h, Phase.CONFIGURED, "upgrade", {"reboot": h in r.reboot,
                                                        **({"bundle": r.bundle}
                                                           if r.bundle else {})})
            else:
                j.fail(h, "upgrade", why)
    todo = [h for h in batch if j.phase(h) is Phase.CONFIGURED]
    if stop.is_set():
        return
    if todo:
        try:
            host_checks: Mapping[str, object] = r.installer.gate(todo)
        except ProvisionerError as exc:
            host_checks = dict.fromkeys(todo, f"the gate's playbooks did not run: {exc}")
        cluster = _cluster_gate_until(r, todo)
        if cluster is None:  # a stop was requested while waiting: resumable from here
            return
        for h in todo:
            problems = list(cluster[h])
            if host_checks.get(h):
                problems.append(str(host_checks[h]))
            if problems:
                j.fail(h, "verify", "health gate: " + "; ".join(problems)
                       + " (the node stays cordoned)")
            else:
                j.move(h, Phase.VERIFIED, "verify", {"gate": "passed"})
    engine.NodeStage([Uncordon(r.kube, r.on_upgraded, r.outside_kube)],
                     concurrency=max(1, len(batch))).run(j, batch, stop)


def _cluster_gate_until(r: Rolling, hosts: Sequence[str]) -> dict[str, list[str]] | None:
    """The cluster checks for each node, retried until they pass or `gate_timeout_s`
    passed (None when a stop was requested meanwhile)."""
    out: dict[str, list[str]] = {h: [] for h in hosts if h in r.outside_kube}
    left = [h for h in hosts if h not in r.outside_kube]
    start = r.clock.now()
    while True:
        for h in left:
            try:
                out[h] = cluster_gate(r.kube, h, r.gpus.get(h, 0), r.kubernetes.get(h),
                                      h in r.scheduler.control_planes)
            except ProvisionerError as exc:
                out[h] = [str(exc)]
        left = [h for h in left if out[h]]
        if not left or r.clock.now() - start >= r.gate_timeout_s:
            return out
        if r.clock.sleep(min(r.gate_retry_s, r.gate_timeout_s)):
            return None


def control_planes_first(r: Rolling, fresh: Sequence[str], stop: threading.Event) -> bool:
    """kubeadm's upgrade on each control plane in turn, in place, never below etcd quorum,
    each API server's version then read back from the cluster: True when every control
    plane's API server (selected or not) is on the bundle, so the workers need not wait for
    the control planes (Scheduler.control_planes_first says when it is tried)."""
    first = r.scheduler.control_planes_first(fresh, _down(r, fresh))
    if not first:
        return False
    j = r.journal
    cps = r.scheduler.control_planes

    def fall_back(host: str | None, why: str) -> bool:
        j.note(host, "upgrade", "note", f"control planes first, in place, stopped: {why}; "
               "every control plane goes alone before the workers")
        return False

    # one cordoned by hand (left alone) or NotReady is not touched: none is, then
    down = {h: why for h, why in r.kube.unavailable().items() if h in set(first)}
    if down:
        return fall_back(None, ", ".join(f"{h} {why}" for h, why in sorted(down.items()))
                         + " in the cluster")
    want = next(iter(r.kubernetes.values()), None)  # None in the lab: nothing to ask
    for h in first:
        if stop.is_set():
            return False
        # kubeadm restarts this node's etcd: as if it went down now (an operator's cordon
        # leaves etcd serving; NotReady may not), as the batches count it. The API not
        # answering here ends the run (exit 13), as between batches.
        etcd_down = {c for c, why in r.kube.unavailable().items()
                     if c in cps and c != h and why is not Down.CORDONED}
        if not r.scheduler.cp_allowed(etcd_down):
            return fall_back(h, f"{', '.join(sorted(etcd_down))} down (etcd quorum)")
        try:
            if want is not None and r.kube.apiserver_version(h) == want:
                continue  # an earlier run moved it
            j.note(h, "upgrade", "note", "kubeadm upgrade in place, before any drain "
                   "(control planes first)")
            why = r.installer.control_plane_first(h)
            if why is None and want is not None:
                why = _apiserver_until(r, h, want)
        except ProvisionerError as exc:
            why = str(exc)
        if why is not None:
            return fall_back(h, why)
        j.note(h, "upgrade", "note", (f"kubeadm upgrade done in place (its API server "
                                      f"reports {want})" if want else
                                      "the in-place tasks passed (not checked: no API "
                                      "server here)") + "; its kubelet moves in its own round")
    if want is None:
        j.note(None, "upgrade", "note", "control planes first, in place: every control "
               "plane's tasks passed (API server versions not checked: no API server "
               "here); the workers go alongside the control planes' rounds")
        return True
    # The others (done earlier, resumed, or left out by --limit) serve the bundle's minor
    # at least: the plan's rule (a kubelet is never a minor ahead of an API server).
    try:
        others = {c: r.kube.apiserver_version(c) for c in sorted(cps - set(first))}
    except ProvisionerError as exc:
        return fall_back(None, str(exc))
    behind = {c: v for c, v in others.items()
              if (minor_of(v) or (0, 0)) < (minor_of(want) or (0, 0))}
    if behind:
        return fall_back(None, f"API server(s) behind {want}: " + ", ".join(
            f"{c} ({v or 'no version'})" for c, v in behind.items()))
    j.note(None, "upgrade", "note", f"the API servers are on {want} (any left out of this "
           "run on its minor): the workers go alongside the control planes' rounds")
    return True


def _apiserver_until(r: Rolling, host: str, want: str) -> str | None:
    """None once `host`'s API server reports `want`, else why not after gate_timeout_s."""
    start = r.clock.now()
    while True:
        got = r.kube.apiserver_version(host)
        if got == want:
            return None
        if (r.clock.now() - start >= r.gate_timeout_s
                or r.clock.sleep(min(r.gate_retry_s, r.gate_timeout_s))):
            return f"its API server reports {got or 'no version'}, not {want}"


def _resume_checked(r: Rolling, resumed: Sequence[str]) -> tuple[list[str], list[str]]:
    """The part-way nodes this run resumes, and those it holds back. The store says where a
    node was when the last run stopped, maybe days ago; the cluster says where it is now
    (kubespray's pre-upgrade reads the node's schedulability each run, too)."""
    j = r.journal
    cps = r.scheduler.control_planes
    outside = r.kube.unavailable()
    go: list[str] = []
    held: list[str] = []
    restarting: list[str] = []  # control planes resumed through their drain or roles
    for h in resumed:
        if h in r.outside_kube:  # no Node object: nothing was cordoned, nothing to check
            if j.phase(h) is Phase.VERIFIED:
                j.move(h, Phase.CONFIGURED, "regate", {"gate": "again"})
            go.append(h)
            continue
        uncordoned = not r.kube.health(h).unschedulable  # by an operator, since
        # past its drain and uncordoned since: pods may have landed on it, so it is drained
        # again and its roles run again (the gate's diagnostic needs idle GPUs)
        again = uncordoned and j.phase(h) in (Phase.UPGRADING, Phase.CONFIGURED,
                                              Phase.VERIFIED)
        restarts = j.phase(h) in BEFORE_ROLES or again
        if h in cps and restarts and restarting:
            # the resumed nodes go as one batch, and control planes restart one at a time
            j.note(h, "upgrade", "note", f"not resumed now: control plane {restarting[0]} "
                   f"resumes first, one at a time; it stays {j.phase(h).value}")
            held.append(h)
            continue
        # one still serving etcd (a failed drain, say) whose drain or roles are ahead: its
        # restart is one member more down. Past its roles (gate, uncordon) nothing restarts;
        # already down (NotReady), it takes nothing more away.
        serving = outside.get(h) in (None, Down.CORDONED)
        if h in cps and serving and restarts:
            etcd_down = {c for c, why in outside.items()
                         if c in cps and c != h and why is not Down.CORDONED}
            etcd_down |= set(restarting)
            if not r.scheduler.cp_allowed(etcd_down):
                j.note(h, "upgrade", "note", f"not resumed now: {', '.join(sorted(etcd_down))}"
                       f" down or going down (etcd quorum); it stays {j.phase(h).value}")
                held.append(h)
                continue
        if uncordoned:
            r.kube.cordon(h)
            if again:
                j.move(h, Phase.CORDONED, "recordon",
                      {"unschedulable": True, **({"bundle": r.bundle} if r.bundle else {})})
            j.note(h, "upgrade", "note", "uncordoned since the last run: cordoned again"
                   + (", and drained again before its roles (which run again) and gate"
                      if again else ""))
        if h in cps and restarts:
            restarting.append(h)
        if j.phase(h) is Phase.VERIFIED:  # gated by an earlier run: the gate runs again
            j.move(h, Phase.CONFIGURED, "regate", {"gate": "again"})
        go.append(h)
    return go, held


def roll(r: Rolling, todo: Sequence[str], stop: threading.Event) -> RollingOutcome:
    """Upgrade `todo` (nodes in ready, or part-way from a killed run), batch by batch."""
    j = r.journal
    resumed = [h for h in todo if j.phase(h) in MID_UPGRADE]
    held: list[str] = []
    if resumed and not stop.is_set():
        resumed, held = _resume_checked(r, resumed)
    if resumed and not stop.is_set():
        j.note(None, "upgrade", "resumed", f"resuming {len(resumed)} node(s) left part-way "
               "by an earlier run: " + ", ".join(resumed))
        run_batch(r, resumed, stop)
    taken = set(resumed) | set(held)
    fresh = [h for h in todo if h not in taken]
    failed_early = sum(1 for h in resumed if j.phase(h) is Phase.FAILED)
    # only when the run goes on: kubeadm cannot take the cluster back
    if failed_early < r.max_failures and not stop.is_set() \
            and control_planes_first(r, fresh, stop):
        r = dataclasses.replace(r, scheduler=dataclasses.replace(r.scheduler,
                                                                 workers_wait=False))
    workers_total = sum(1 for h in fresh if h not in r.scheduler.control_planes)

    why: list[str] = []  # the scheduler's reason when it found nothing to start

    seen_outside: set[str] = set()

    def pick(remaining: Sequence[str]) -> list[str]:
        ours = _down(r, remaining)  # down because this upgrade has not finished them
        # Down by the cluster's word too: a node cordoned by hand for maintenance, or
        # NotReady, uses its domain's allowance (and counts for quorum) although the state
        # store says ready. A pending one cordoned by someone else is left alone (never
        # drained, upgraded or uncordoned by this run: the operator's cordon stays) and
        # ends as not started. The API not answering here ends the run with its KubeError
        # (exit 13), between batches.
        servers = set(r.servers)
        outside = {h: why for h, why in r.kube.unavailable().items() if h in servers}
        cordoned_by_others = {h for h, why in outside.items() if why is Down.CORDONED}
        # a selected control plane left alone still serves the old API version: it holds
        # the workers as one this upgrade has not finished
        unfinished = ours | {h for h in remaining if h in cordoned_by_others
                             and h in r.scheduler.control_planes}
        for h in sorted(set(outside) - ours - seen_outside):
            j.note(h, "upgrade", "note", f"{outside[h]} in the cluster (not by this "
                   "upgrade): counted as down in its failure domain"
                   + (", and left alone" if h in remaining and h in cordoned_by_others
                      else ""))
        seen_outside.update(outside)
        candidates = [h for h in remaining if h not in cordoned_by_others]
        down = ours | set(outside)
        # an operator's cordon leaves etcd serving; NotReady, or our own unrecorded
        # cordon (a killed run mid-upgrade), may not
        etcd_down = ours | {h for h, why in outside.items() if why is not Down.CORDONED}
        batch = r.scheduler.next_batch(candidates, down, workers_total, unfinished=unfinished,
                                       etcd_down=etcd_down)
        if not batch:
            left_alone = sorted(set(remaining) & cordoned_by_others)
            why.append(r.scheduler.why_none(candidates, down, unfinished=unfinished,
                                            etcd_down=etcd_down)
                       if candidates else "left alone, cordoned in the cluster (not by "
                       f"this upgrade): {', '.join(left_alone)}")
        return batch

    stopped: str | None = None
    if failed_early >= r.max_failures and fresh:
        stopped = (f"failure budget spent: {failed_early} failed, {r.max_failures} allowed")
    elif fresh:
        stage = engine.BatchStage(Phase.READY, lambda b: run_batch(r, b, stop), serial=1,
                                  max_failures=r.max_failures - failed_early, pick=pick)
        stopped = stage.run(j, fresh, stop).stopped
        if why and stopped is not None and stopped.startswith("no node may go down"):
            stopped = why[-1]
    failed = [h for h in todo if j.phase(h) is Phase.FAILED]
    not_started = [h for h in fresh if j.phase(h) is Phase.READY
                   and not j.outcomes[h].steps] + held
    # spent = it stopped the run with work left (exit 12); failures in the last batch that
    # end the run anyway are failures within the run (exit 9)
    spent = stopped is not None and stopped.startswith("failure budget spent")
    return RollingOutcome(stopped, spent, failed, not_started)
