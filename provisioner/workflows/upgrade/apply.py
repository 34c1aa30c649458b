"""provision upgrade plan | apply: a site to a release bundle, node by node, from CI.

    plan   bundle file → checks (upgrade.plan.make_plan) → what changes where, batches, time
    apply  the plan (refused: UpgradeRefused, nothing touched) → the site lease and the
           site lock → rolling.roll over the state store → per-node outcome

What each node runs now is the last bundle recorded for it in the state store (an
`upgraded` event, written when it is uncordoned), or the site's `software:` pins before any
bundle was applied. A re-run with the same bundle retries the failed nodes from the phase
they failed in, resumes the ones a killed run left part-way, and skips the done ones.
Nothing here prints; the CLI turns the result into output and an exit code.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from provisioner import bmc as bmc_mod
from provisioner import leftovers
from provisioner.errors import UpgradeRefused
from provisioner.inventory.bundle_models import Bundle, from_software, load_bundle
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.topology import HostPlan, servers
from provisioner.kube import KubeClient
from provisioner.lifecycle import Phase
from provisioner.profile import Profile, for_site
from provisioner.state import StateStore, open_read_only
from provisioner.upgrade import firmware
from provisioner.upgrade.drift import UPGRADED, latest_upgraded
from provisioner.upgrade.host import AnsibleInstaller, Installer
from provisioner.upgrade.plan import (
    PlanOptions,
    Refusal,
    UpgradePlan,
    effective,
    make_plan,
    scheduler,
    site_at,
)
from provisioner.workflows import engine
from provisioner.workflows.engine import NodeOutcome, Progress, ProgressFn
from provisioner.workflows.upgrade.rolling import DrainOptions, Rolling, RollingOutcome, roll
from provisioner.workflows.upgrade.steps import Clock, outside_kubernetes


@dataclass(frozen=True)
class ApplyOptions:
    plan: PlanOptions = field(default_factory=PlanOptions)
    limit: str | None = None
    max_failures: int = 1
    drain: DrainOptions = field(default_factory=DrainOptions)
    forks: int = 20
    lease_stale_s: float = 600.0  # a lease without a heartbeat this long is a dead holder
    lease_heartbeat_s: float = 30.0  # how often the run refreshes its lease
    gate_timeout_s: float = 300.0  # how long the gate waits for Ready and allocatable GPUs


@dataclass
class UpgradeRun:
    run_id: int
    site: str
    bundle: str
    lab: bool
    plan: UpgradePlan
    nodes: list[NodeOutcome]
    rolling: RollingOutcome
    interrupted: bool
    elapsed_s: float
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[NodeOutcome]:
        return [n for n in self.nodes if n.phase is Phase.FAILED]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.interrupted and not self.rolling.not_started


def recorded_versions(store: StateStore | None, hosts: Sequence[str],
                      default: Mapping[str, str | None]) -> dict[str, dict[str, str | None]]:
    """What each node runs now: its last `upgraded` event, or the site's pins."""
    latest = latest_upgraded(store) if store is not None else {}
    return {h: dict(latest[h][1]) if h in latest else dict(default) for h in hosts}


def in_flight(store: StateStore, hosts: Collection[str]) -> dict[str, str | None]:
    """The bundle each node's unfinished upgrade moves it to: the one it was cordoned for
    (or last retargeted to, or whose roles ran last), until it is ready again. None: no
    upgrade in flight (a node `up` has not finished is on the bring-up path); "": cordoned
    by a run that did not record its bundle."""
    out: dict[str, str | None] = dict.fromkeys(hosts)
    for ev in store.events():
        if ev.kind != "transition" or ev.hostname not in out:
            continue
        if ev.to_phase == Phase.READY.value:
            out[ev.hostname] = None
        elif ev.to_phase == Phase.CORDONED.value:
            out[ev.hostname] = str(ev.detail.get("bundle", ""))
        elif "bundle" in ev.detail:
            out[ev.hostname] = str(ev.detail["bundle"])  # retargeted, or the roles ran at it
    return out


def _selected(loaded: LoadedSite, limit: str | None) -> tuple[list[HostPlan], list[str]]:
    plans = servers(loaded)
    names = set(bmc_mod.select_hosts([p.hostname for p in plans], limit))
    return [p for p in plans if p.hostname in names], \
        [p.hostname for p in plans if p.control_plane]


def plan(loaded: LoadedSite, bundle_name: str, opts: PlanOptions | None = None,
         limit: str | None = None, profile: Profile | None = None
         ) -> tuple[UpgradePlan, Bundle]:
    """The plan for moving the selected nodes to `bundle_name` (reads state, changes none)."""
    opts = opts or PlanOptions()
    profile = profile or for_site(loaded)
    target = effective(loaded, load_bundle(loaded.base_dir, bundle_name).bundle)
    hosts, cps = _selected(loaded, limit)
    store = open_read_only(profile.state_path)
    names = [p.hostname for p in servers(loaded)]
    current = recorded_versions(store, names, from_software(loaded.site.software).components())
    down, resumed = _as_apply_finds(store, names, {p.hostname for p in hosts})
    made = make_plan(loaded, hosts, target, current, opts, cps, servers(loaded), down, resumed)
    placed = {p.block for p in loaded.site.placements}
    seen = firmware.recorded(store.events() if store is not None else (), names)
    moves, refusals, warnings = firmware.moves(hosts, target, placed, seen)
    return dataclasses.replace(made, firmware=moves, refusals=made.refusals + refusals,
                               warnings=made.warnings + warnings), target


def _as_apply_finds(store: StateStore | None, names: Sequence[str], selected: Collection[str]
                    ) -> tuple[set[str], set[str]]:
    """How `apply` will find the servers before its first batch, as far as the plan needs
    it (control planes first): (down: not ready and not resumed by this run, or not in
    the store; resumed: selected and part-way, or failed part-way, taken first and assumed
    to pass). No store: nothing was brought up, nothing is known; none."""
    if store is None:
        return set(), set()
    nodes = {n.hostname: n for n in store.nodes()}
    flight = in_flight(store, [h for h in selected if h in nodes])
    down, resumed = {h for h in names if h not in nodes}, set()
    for h, n in nodes.items():
        where = _where(n.phase, n.failed_phase)
        if h in selected and where in MID_OR_READY and not _left_by_up(where, flight[h]):
            if where is not Phase.READY:
                resumed.add(h)
        elif n.phase is not Phase.READY:
            down.add(h)
    return down, resumed


def _where(phase: Phase, failed_phase: Phase | None) -> Phase | None:
    """Where an upgrade takes a node up: the phase it failed in, or the one it is in."""
    return failed_phase if phase is Phase.FAILED else phase


def _left_by_up(where: Phase | None, flight: str | None) -> bool:
    """Configured or verified by `provision up`, not by an upgrade (none in flight):
    apply leaves it alone, to be finished by `up`."""
    return where in AFTER_ROLES and flight is None


def _refuse(p: UpgradePlan) -> None:
    if p.firmware and not p.refusals:  # planned and shown, not applied (yet)
        p = dataclasses.replace(p, refusals=[Refusal(
            "firmware-not-applied", f"the bundle moves firmware on "
            f"{len({m.hostname for m in p.firmware})} node(s) ({p.firmware[0].hostname}: "
            f"{p.firmware[0].component} {p.firmware[0].old or 'unknown'} -> "
            f"{p.firmware[0].new}), and upgrade apply does not update firmware",
            "update it with the vendor's tool (or the BMC's own update page), let `up` or "
            "`bmc inventory` read the new versions, then apply; or drop the firmware pins")])
    if p.refusals:
        raise UpgradeRefused(f"upgrade to {p.bundle} refused: {p.refusals[0].message}"
                             + (f" (and {len(p.refusals) - 1} more)"
                                if len(p.refusals) > 1 else ""),
                             hint=p.refusals[0].hint, refusals=p.refusals)


def apply(loaded: LoadedSite, bundle_name: str, kube: KubeClient, env: Mapping[str, str],
          opts: ApplyOptions | None = None, *, progress: ProgressFn | None = None,
          stop: threading.Event | None = None, profile: Profile | None = None,
          installer: Installer | None = None) -> UpgradeRun:
    """Upgrade the selected nodes to the bundle in rolling batches; resumable."""
    opts = opts or ApplyOptions()
    profile = profile or for_site(loaded)
    stop = stop or threading.Event()
    the_plan, target = plan(loaded, bundle_name, opts.plan, opts.limit, profile)
    _refuse(the_plan)
    all_hosts = [p.hostname for p in servers(loaded)]
    store = StateStore(profile.state_path)
    t0 = time.monotonic()
    command = f"upgrade apply --to {bundle_name}" + (f" --limit {opts.limit}"
                                                     if opts.limit else "")
    # a run that lost its lease (taken over after its heartbeat went stale) stops like Ctrl-C
    with store.lease(command, stale_after_s=opts.lease_stale_s,
                     heartbeat_s=opts.lease_heartbeat_s, on_lost=stop.set) as lease_notes, \
            store.exclusive():
        taken_over = len(lease_notes)  # the heartbeat appends a lost lease's note later
        # the plan again, under the lease: a run that held it until now may have moved nodes
        # since the plan above (which refused early, before waiting on anything)
        the_plan, target = plan(loaded, bundle_name, opts.plan, opts.limit, profile)
        _refuse(the_plan)
        notes = list(lease_notes) + leftovers.after_killed_runs(store)
        run_id = store.start_run(command)
        journal = engine.Journal(store, run_id, progress)
        store.enroll(all_hosts, run_id=run_id)
        journal.load(all_hosts)
        selected = {n.hostname for n in the_plan.nodes}
        flight = in_flight(store, selected)
        not_upgrading: set[str] = set()  # configured/verified by `up`, not by an upgrade
        retarget: set[str] = set()  # part-way to another bundle: the roles run again
        for h in sorted(selected):  # a node a failed upgrade left behind is retried
            out = journal.outcomes[h]
            back_to = out.failed_phase  # read before restart() resets the outcome
            where = _where(out.phase, back_to)
            if _left_by_up(where, flight[h]):
                not_upgrading.add(h)
                notes.append(f"{h} is {out.phase.value} from `provision up`, not from an "
                             "upgrade: left alone (finish it with `provision up`)")
                continue
            if out.phase is Phase.FAILED and back_to is not None and back_to in MID_OR_READY:
                journal.restart(h, back_to, {"retry": True, "last_reason": out.reason})
                journal.emit(Progress(h, "upgrade", "note", f"retrying from {back_to.value}"))
            if journal.phase(h) in AFTER_ROLES and flight[h] != target.name:
                # the roles ran at another bundle's versions: its gate says nothing of this one
                journal.move(h, Phase.UPGRADING, "retarget",
                             {"from_bundle": flight[h], "bundle": target.name})
                retarget.add(h)
        todo = [n.hostname for n in the_plan.nodes if n.hostname not in not_upgrading and (
                (n.changes and journal.phase(n.hostname) is Phase.READY)
                or journal.phase(n.hostname) in MID_OR_READY - {Phase.READY})]
        # A selected node the store does not hold as ready or part-way (never brought up
        # from this store, in maintenance, failed in bring-up) is not upgraded: said, and
        # not started (exit 9), never a green run that upgraded nothing.
        changed = {n.hostname for n in the_plan.nodes if n.changes}
        unknown = sorted(changed - set(todo) - not_upgrading)
        for h in unknown:
            notes.append(f"{h} is {journal.phase(h).value} in this state store, not ready: "
                         "not upgraded (bring it up with `provision up`, or give --state the "
                         "store `provision up` keeps for this site)")
        versions = target.components()

        def upgraded(host: str) -> None:
            store.record(host, UPGRADED, {"bundle": target.name, "versions": versions},
                         run_id=run_id)

        bundle_site = site_at(loaded, target)
        inst = installer or ansible_installer(bundle_site, profile, env, target.name,
                                              journal, opts.forks)
        plans = {p.hostname: p for p in servers(loaded)}
        outside = outside_kubernetes(list(plans.values()))  # storage nodes: no cordon
        # every server's domain and role: one already down counts, selected or not
        sched = scheduler(loaded, list(plans.values()), opts.plan, the_plan.workers_wait)
        # a node retargeted from another bundle may have moved its driver: reboot step too
        # (skipped when the roles rebooted it)
        r = Rolling(journal, kube, inst, sched, all_hosts,
                    frozenset(n.hostname for n in the_plan.nodes if n.reboot) | retarget,
                    {h: (p.block.gpu.count if p.block.gpu else 0) for h, p in plans.items()},
                    opts.max_failures, opts.drain, Clock(sleep=stop.wait),
                    on_upgraded=upgraded, bundle=target.name,
                    gate_timeout_s=opts.gate_timeout_s,
                    kubernetes=_kubernetes_checked(the_plan, target, profile, {
                        h for h, b in flight.items() if b is not None} - outside),
                    outside_kube=outside)
        status = "failed"
        try:
            outcome = roll(r, todo, stop)
            # a node `up` has not finished is not on the bundle either: not started (exit 9)
            outcome = dataclasses.replace(outcome, not_started=outcome.not_started
                                          + sorted(not_upgrading & changed) + unknown)
            status = ("interrupted" if stop.is_set() else
                      "failed" if outcome.failed or outcome.not_started else "ok")
        finally:
            store.end_run(run_id, status)
        notes += lease_notes[taken_over:]
    if profile.lab:
        fm = any(p.block.nvswitch or p.block.imex for p in servers(loaded))  # not a DGX-1
        notes.append("lab: the Kubernetes API is the stand-in server; GPU checks of the "
                     f"health gate (driver{' and fabric manager' if fm else ''} versions, "
                     "GPU count, DCGM diagnostic) are skipped by the needs_gpu tag and "
                     "reported not verified"
                     + ("; so are the kubelet and API server versions (the roles' kubeadm "
                        "upgrade is needs_cluster: nothing moves them in the lab)"
                        if any("kubernetes" in n.changes for n in the_plan.nodes) else ""))
    return UpgradeRun(run_id=run_id, site=loaded.site.site.name, bundle=target.name,
                       lab=profile.lab, plan=the_plan,
                       nodes=[journal.outcomes[h] for h in all_hosts if h in selected],
                       rolling=outcome, interrupted=stop.is_set(),
                       elapsed_s=time.monotonic() - t0, notes=notes)


def _kubernetes_checked(p: UpgradePlan, target: Bundle, profile: Profile,
                        in_flight: Collection[str]) -> dict[str, str]:
    """The nodes whose Kubernetes the bundle moves, or that an unfinished upgrade left
    part-way (retargeted ones included: its roles may have run at another bundle, which may
    have moved them: the plan
    compares only the versions recorded when a node was last done), and the version their
    kubelet (and a control plane's API server) must then report. None in the lab: nothing
    there runs kubeadm upgrade (needs_cluster), so the stand-in keeps the old versions."""
    if profile.lab or not target.kubernetes:
        return {}
    return {n.hostname: f"v{target.kubernetes}" for n in p.nodes
            if "kubernetes" in n.changes or n.hostname in in_flight}


def ansible_installer(bundle_site: LoadedSite, profile: Profile, env: Mapping[str, str],
                      bundle: str, journal: engine.Journal, forks: int = 20
                      ) -> AnsibleInstaller:
    """The real host side, its notes (a reboot through the OS that failed, the BMC power
    cycle that followed) written to the run's event log."""
    return AnsibleInstaller(bundle_site, profile, env, bundle, forks, profile.os_timeout_s,
                            on_note=lambda h, t: journal.note(h, "upgrade", "note", t))


# Past the roles on the upgrade path, and also on the bring-up path: which one a node is on
# is what `in_flight` tells.
AFTER_ROLES = frozenset({Phase.CONFIGURED, Phase.VERIFIED})
MID_OR_READY = frozenset({Phase.READY, Phase.CORDONED, Phase.DRAINING, Phase.UPGRADING,
                          Phase.CONFIGURED, Phase.VERIFIED})


def state_file(profile: Profile, override: Path | None) -> Profile:
    """--state: keep the site's state on a path CI runners share (see docs/upgrade.md)."""
    if override is None:
        return profile
    from dataclasses import replace

    return replace(profile, state_path=override)
