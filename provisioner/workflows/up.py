"""provision up: every server from power-off to a verified, ready cluster member.

`up` is this list, run by the step engine over the state store (each step's code is one
import away):

    gate       steps.bmc.budget_gate     nodes of an over-budget rack are never powered on
    node stage steps.bmc.Inspect         enrolled  -> inspected  (facts vs building block)
               steps.bmc.Boot            inspected -> booting    (one-time PXE/media, on;
                                         refused for an installed node: steps.guard)
               steps.os.WaitOs           booting   -> os_ready   (SSH login + install marker)
    site step  steps.fabric.run          switches cabled to os_ready nodes: check, push
                                         (`add`: only the added nodes' ports)
    batches    steps.ansible.Playbook    os_ready  -> configured (site.yml, waves of forks;
                                         `add` in the lab: then steps.join in check mode)
    batches    steps.verify.gate         configured -> verified  (verify.yml)
    node stage steps.verify.Ready        verified  -> ready

A node that fails is marked failed with the reason and the phase it failed in; the others
go on. A killed run leaves every node at its last committed phase and the next run resumes
there; a failed node is retried from the phase it failed in. Before anything, a run that
would configure a node at the site's pins below the bundle `upgrade apply` recorded for it
is refused unless --allow-downgrade names it (refuse_downgrades). Nothing here prints.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from provisioner import bmc as bmc_mod
from provisioner import install, leftovers
from provisioner.bmc import BmcDriver, BmcTarget
from provisioner.errors import ConfigError, InventoryError, StateError, UpgradeRefused
from provisioner.inventory import checks
from provisioner.inventory.findings import Severity
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.topology import select, servers
from provisioner.inventory.valid import refusing
from provisioner.lifecycle import (
    BEFORE_POWER_ON,
    LIFECYCLE,
    STEP_FROM,
    UP_STEPS,
    Phase,
)
from provisioner.profile import LAB_SKIP_NEEDS, Profile, for_site, skipped_tasks
from provisioner.state import StateStore
from provisioner.upgrade import drift
from provisioner.workflows import engine
from provisioner.workflows.engine import NodeOutcome, Progress, ProgressFn
from provisioner.workflows.steps import Context
from provisioner.workflows.steps import fabric as fabric_step
from provisioner.workflows.steps import join as join_step
from provisioner.workflows.steps.ansible import Playbook
from provisioner.workflows.steps.bmc import (
    Boot,
    Inspect,
    blocked_racks,
    budget_gate,
    compare_facts,
    driver_session,
)
from provisioner.workflows.steps.os import LAB_OS_NOTE, WaitOs
from provisioner.workflows.steps.verify import Ready, gate

__all__ = ["BEFORE_POWER_ON", "LAB_OS_NOTE", "STEPS", "STEP_FROM", "NodeOutcome", "Progress",
           "ProgressFn", "UpOptions", "UpResult", "blocked_racks", "checks", "compare_facts",
           "preflight", "servers", "state_path", "up", "waves"]

STEPS = UP_STEPS
waves = engine.batches  # playbook waves are the engine's batches


@dataclass(frozen=True)
class UpOptions:
    limit: str | None = None
    from_phase: Phase | None = None
    forks: int = 20
    concurrency: int | None = None  # default: the site's provisioning.concurrency
    os_timeout_s: float | None = None  # default: the site's (60 s in the lab)
    power_timeout_s: float = 180.0
    request_timeout_s: float = 10.0
    node_deadline_s: float | None = None  # default: room for inspect, boot and wait_os
    playbook: str = "site.yml"
    verify_playbook: str = "verify.yml"
    reinstall: str | None = None  # nodes (globs, like limit) Boot may reinstall when installed
    adopt: str | None = None  # nodes (globs) taken as installed: no boot, their OS as it is
    # nodes (globs) this run may configure at site pins older than their recorded bundle
    allow_downgrade: str | None = None
    # The nodes `provision add` just placed: their switch ports alone are pushed, and in the
    # lab the cluster side of their join runs in check mode (steps/join.py).
    adding: bool = False


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
    skipped_by_tag: dict[str, int] = field(default_factory=dict)  # tasks not run, per tag

    @property
    def failed(self) -> list[NodeOutcome]:
        return [n for n in self.nodes if n.phase is Phase.FAILED]

    @property
    def nothing_to_do(self) -> bool:
        return all(not n.steps and n.phase is n.start_phase for n in self.nodes)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.interrupted


def preflight(loaded: LoadedSite) -> list[str]:
    """Refuse an inventory with errors before touching anything (budget errors stop only
    their rack's nodes, in the run). Returns the warnings."""
    findings = checks.check(loaded)
    errors = refusing(findings)
    if errors:
        raise InventoryError(f"the inventory has {len(errors)} error(s); nothing was touched",
                             hint="run `provision validate` to see them", findings=errors)
    return [f.message for f in findings if f.severity is Severity.WARNING]


def _rewind(store: StateStore, hosts: Sequence[str], target: Phase, run_id: int) -> None:
    """--from-phase: nodes past that phase go back to it (and run on from there); a node
    not yet there is never moved forward."""
    rank = LIFECYCLE.index(target)
    for host in hosts:
        st = store.node(host)
        here = st.failed_phase if st.phase is Phase.FAILED else st.phase
        if here is None or here not in LIFECYCLE:
            continue
        if LIFECYCLE.index(here) > rank:
            store.transition(host, target, run_id=run_id,
                             detail={"from_phase": target.value, "rewind": True})


def configured_by(store: StateStore, hosts: Sequence[str], from_phase: Phase | None
                  ) -> set[str]:
    """The nodes a run will configure (the playbooks at the site's pins): those at or
    before os_ready once --from-phase rewound them, a failed one where it failed."""
    out = set()
    rank = LIFECYCLE.index(Phase.OS_READY)
    for host in hosts:
        try:
            st = store.node(host)
        except StateError:
            continue  # never enrolled: a new node, with no bundle of its own
        here = st.failed_phase if st.phase is Phase.FAILED else st.phase
        if here not in LIFECYCLE:
            continue
        if from_phase is not None and LIFECYCLE.index(here) > LIFECYCLE.index(from_phase):
            here = from_phase
        if LIFECYCLE.index(here) <= rank:
            out.add(host)
    return out


def refuse_downgrades(loaded: LoadedSite, store: StateStore, hosts: Sequence[str],
                      opts: UpOptions) -> list[str]:
    """Refused (exit 11, nothing touched): configuring a node below the bundle `upgrade
    apply` recorded for it, unless --allow-downgrade names it. The notes for those it
    names."""
    allowed = frozenset(select(list(hosts), opts.allow_downgrade)) \
        if opts.allow_downgrade else frozenset()
    if opts.allow_downgrade and not allowed:
        raise ConfigError(f"--allow-downgrade {opts.allow_downgrade!r} matches none of the "
                          "selected nodes", hint="patterns are globs on host names")
    found = drift.downgrades(loaded, store, configured_by(store, hosts, opts.from_phase))
    refused = [d for d in found if d.hostname not in allowed]
    if refused:
        d = refused[0]
        others = [f"{o.hostname} (bundle {o.bundle})" for o in refused[1:]]
        raise UpgradeRefused(
            f"up would move {d.hostname} below bundle {d.bundle}, which `upgrade apply` "
            f"put on it: the site's software: pins take {', '.join(d.rows)}"
            + (f"; and {', '.join(others)}" if others else "") + "; nothing was touched",
            hint=f"set software: to bundle {d.bundle}'s versions (docs/upgrade.md, 'After "
            "an upgrade'), or, to move it back on purpose, name it with --allow-downgrade "
            f"{','.join(o.hostname for o in refused)} (kubeadm cannot take Kubernetes back)")
    return [f"{d.hostname}: configured at the site's pins below bundle {d.bundle} "
            f"(--allow-downgrade): {', '.join(d.rows)}" for d in found]


def _retry_failed(ctx: Context, hosts: Sequence[str], reinstall: frozenset[str]) -> None:
    """A failed node is retried from the phase it failed in. One whose installer refused
    its disks is booted again only when --reinstall names it now; else it stays failed."""
    for host in hosts:
        out = ctx.journal.outcomes[host]
        if out.phase is Phase.FAILED and out.failed_phase is not None:
            to = out.failed_phase
            if to is Phase.BOOTING and (out.reason or "").startswith(install.REFUSED):
                if host not in reinstall:
                    ctx.journal.emit(Progress(host, "boot", "note", "not retried: "
                                              f"{out.reason} (--reinstall {host})"))
                    continue
                to = Phase.INSPECTED  # the boot again, this time with the grant
            ctx.journal.restart(host, to, {"retry": True, "last_reason": out.reason})
            ctx.journal.emit(Progress(host, STEP_FROM.get(out.phase, "ready"), "note",
                                      f"retrying from {out.phase.value}"))


def _run(ctx: Context, hosts: list[str], opts: UpOptions,
         make_driver: Callable[[BmcTarget], BmcDriver], reinstall: frozenset[str],
         adopt: frozenset[str]) -> None:
    """Resume every selected node through up's stages, in order."""
    journal, prov = ctx.journal, ctx.loaded.site.provisioning
    journal.store.enroll(hosts, run_id=journal.run_id)
    if opts.from_phase is not None:
        _rewind(journal.store, hosts, opts.from_phase, journal.run_id)
    journal.load(hosts)
    _retry_failed(ctx, hosts, reinstall)
    todo = [h for h in hosts if journal.phase(h) not in (Phase.READY, Phase.MAINTENANCE)]
    if not todo:
        return
    os_timeout_s = opts.os_timeout_s or ctx.profile.os_timeout_s
    concurrency = opts.concurrency or prov.concurrency
    # Room for inspect, power off and on, and the OS wait; past it a node is abandoned.
    deadline_s = opts.node_deadline_s or (os_timeout_s + 2 * opts.power_timeout_s
                                          + 6 * opts.request_timeout_s + 60)
    first = [h for h in todo if ctx.plans[h].control_plane]
    budget_gate(ctx, todo)
    engine.NodeStage([Inspect(ctx), Boot(ctx, opts.power_timeout_s, reinstall, adopt),
                      WaitOs(ctx, os_timeout_s, adopt)],
                     concurrency=concurrency, deadline_s=deadline_s,
                     session=driver_session(ctx, todo, opts.request_timeout_s, make_driver)
                     ).run(journal, todo, ctx.stop)
    # before the host RoCE step: the switch ports first (only the added nodes' for `add`)
    fabric_step.run(ctx, todo, ports_only=opts.adding)
    join = (functools.partial(join_step.check_mode, ctx, forks=opts.forks)
            if opts.adding and ctx.profile.lab else None)
    engine.BatchStage(Phase.OS_READY, Playbook(ctx, opts.playbook, "configure", Phase.OS_READY,
                                               Phase.CONFIGURED, opts.forks, then=join),
                      serial=opts.forks, first=first).run(journal, todo, ctx.stop)
    engine.BatchStage(Phase.CONFIGURED, gate(ctx, opts.verify_playbook, opts.forks),
                      serial=opts.forks, first=first).run(journal, todo, ctx.stop)
    engine.NodeStage([Ready(ctx)], concurrency=concurrency).run(journal, todo, ctx.stop)
    if ctx.stop.is_set():
        for h in todo:
            phase = journal.phase(h)
            if phase not in (Phase.READY, Phase.FAILED) and h not in journal.interrupted:
                journal.stopped(h, STEP_FROM[phase], "not started")


def _either(items: Iterable[str]) -> str:
    """a, b or c: what the skipped tasks need, as the operator reads it."""
    words = list(items)
    return " or ".join([", ".join(words[:-1]), words[-1]]) if len(words) > 1 else "".join(words)


def state_path(loaded: LoadedSite) -> Path:
    """Where `up` keeps this site's state (the lab's own store while the lab runs)."""
    return for_site(loaded).state_path


def up(loaded: LoadedSite, env: Mapping[str, str] | None = None,
       opts: UpOptions | None = None, *, progress: ProgressFn | None = None,
       stop: threading.Event | None = None, abort: threading.Event | None = None,
       make_driver: Callable[[BmcTarget], BmcDriver] | None = None,
       profile: Profile | None = None) -> UpResult:
    """Bring every selected server to ready, resuming from the state store."""
    opts = opts or UpOptions()
    profile = profile or for_site(loaded)
    preflight(loaded)
    plans = {s.hostname: s for s in servers(loaded)}
    hosts = bmc_mod.select_hosts(list(plans), opts.limit)
    reinstall = frozenset(select(hosts, opts.reinstall)) if opts.reinstall else frozenset()
    if opts.reinstall and not reinstall:
        raise ConfigError(f"--reinstall {opts.reinstall!r} matches none of the selected nodes",
                          hint="patterns are globs on host names, for example 'dgx01,cp*'")
    adopt = frozenset(select(hosts, opts.adopt)) if opts.adopt else frozenset()
    if opts.adopt and not adopt:
        raise ConfigError(f"--adopt {opts.adopt!r} matches none of the selected nodes",
                          hint="patterns are globs on host names, for example 'dgx*'")
    if both := sorted(adopt & reinstall):
        raise ConfigError(f"{', '.join(both)}: named by both --adopt and --reinstall",
                          hint="adopt keeps the installed OS; reinstall wipes it: name one")
    store = StateStore(profile.state_path)
    command = "up" + (f" --limit {opts.limit}" if opts.limit else "") + (
        f" --from-phase {opts.from_phase.value}" if opts.from_phase else "") + (
        f" --reinstall {opts.reinstall}" if opts.reinstall else "") + (
        f" --adopt {opts.adopt}" if opts.adopt else "") + (
        f" --allow-downgrade {opts.allow_downgrade}" if opts.allow_downgrade else "")
    t0 = time.monotonic()
    with store.exclusive():
        moved_back = refuse_downgrades(loaded, store, hosts, opts)
        notes = leftovers.after_killed_runs(store)
        if (behind := drift.note(loaded, store)) is not None:
            notes.append(behind)
        notes += moved_back
        run_id = store.start_run(command)
        ctx = Context(loaded, os.environ if env is None else env,
                      engine.Journal(store, run_id, progress), stop or threading.Event(),
                      plans, profile, notes=notes, abort=abort or threading.Event())
        status = "failed"
        try:
            _run(ctx, hosts, opts, make_driver or bmc_mod.make_driver, reinstall, adopt)
            status = ("interrupted" if ctx.stop.is_set()
                      else "failed" if any(o.phase is Phase.FAILED
                                           for o in ctx.journal.outcomes.values()) else "ok")
        finally:
            store.end_run(run_id, status)
    skipped: dict[str, int] = {}
    if ctx.project_dir is not None:
        skipped = skipped_tasks(ctx.project_dir / "project" / "roles", profile.skip_tags)
    if profile.lab:
        ctx.notes.append("lab: OS install skipped (the lab provides the OS); "
                         f"{sum(skipped.values())} task(s) a lab host cannot do were skipped "
                         "by tag (" + ", ".join(f"{t}: {n}" for t, n in skipped.items())
                         + ")" + ("; they need " + _either(LAB_SKIP_NEEDS.get(t, t)
                                                           for t, n in skipped.items() if n)
                                  if any(skipped.values()) else "")
                         + "; GPU and Kubernetes Ready checks are reported as not verified")
    return UpResult(run_id=run_id, site=loaded.site.site.name, lab=profile.lab,
                    state_path=store.path, project_dir=ctx.project_dir,
                    nodes=[ctx.journal.outcomes[h] for h in hosts], notes=ctx.notes,
                    interrupted=ctx.stop.is_set(), elapsed_s=time.monotonic() - t0,
                    ansible_s=ctx.ansible_s, artifact_dirs=ctx.artifact_dirs,
                    skipped_by_tag=skipped)
