"""What `provision up` would do now (plan) and where every node stands (status).

Both are documented JSON (docs/up.md): the pydantic models below are the schema, and
tests check the CLI's output against them and the docs against the models.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from provisioner import bmc as bmc_mod
from provisioner import power
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.topology import HostPlan, host_plans, servers
from provisioner.lifecycle import BEFORE_POWER_ON, POWERED, Phase, steps_from
from provisioner.profile import Profile, for_site
from provisioner.results import Out, dump
from provisioner.state import NodeState, StateStore, backup_dir, backups, open_read_only
from provisioner.upgrade import firmware
from provisioner.workflows.steps.bmc import blocked_racks, compare_facts

PLAN_SCHEMA = "provisioner.plan/v1"
STATUS_SCHEMA = "provisioner.status/v1"
__all__ = ["PlanReport", "StatusReport", "dump", "json_schemas", "plan", "status"]

Action = Literal["add", "resume", "retry", "unchanged", "blocked", "maintenance", "unknown"]


class BmcView(Out):
    """What the BMC said with --refresh."""

    power: str | None
    problems: list[str]
    notes: list[str]
    error: str | None


class PlanNode(Out):
    hostname: str
    rack: str | None
    block: str | None
    action: Action
    phase: str | None  # None: not in the state store yet
    failed_phase: str | None
    reason: str | None
    steps: list[str]  # what `up` would run for it, in order
    bmc: BmcView | None


class RackGate(Out):
    name: str
    ok: bool
    reason: str | None


class PlanReport(Out):
    schema_: Literal["provisioner.plan/v1"] = Field(alias="schema")
    site: str
    lab: bool
    state_path: str
    generated_at: str
    summary: dict[Action, int]
    nodes: list[PlanNode]
    racks: list[RackGate]


class ExecutionAttempt(Out):
    """One try of a playbook step of the node on an execution node (execution/dispatch.py),
    as the state store's `execution` events record it."""

    run_id: int | None
    step: str
    playbook: str
    worker: str  # the execution node
    attempt: int  # 1; 2 when its share ran again after the first node was lost
    lost: str | None  # why that node could not finish it; None: it ran the playbook


class StatusNode(Out):
    hostname: str
    rack: str | None
    in_inventory: bool
    phase: str
    failed_phase: str | None
    reason: str | None
    updated_at: str
    # the node's latest run on execution nodes: which node ran which step (empty when the
    # site has none, or no playbook ran yet)
    execution: list[ExecutionAttempt] = Field(default_factory=list)
    # firmware component -> version, as the BMC reported them at the node's last read
    # (`up`'s inspection or `bmc inventory`; empty when never recorded)
    firmware: dict[str, str] = Field(default_factory=dict)


class RackPower(Out):
    name: str
    usable_va: float
    nameplate_w: float
    powered_w: float  # nameplate of chassis that are on: switches, and servers `up` booted
    powered_va: float
    utilization: float  # powered_va / usable_va


class RunView(Out):
    id: int
    command: str
    started_at: str
    ended_at: str | None
    status: str
    pid: int


class BackupView(Out):
    """The newest copy of the state store, taken before the latest run (state.py)."""

    path: str
    taken_at: str
    kept: int  # copies in the backup directory, newest first, at most state.KEEP_BACKUPS
    directory: str


class StatusReport(Out):
    schema_: Literal["provisioner.status/v1"] = Field(alias="schema")
    site: str
    lab: bool
    state_path: str
    generated_at: str
    phases: dict[str, int]
    nodes: list[StatusNode]
    racks: list[RackPower]
    runs: list[RunView]
    backup: BackupView | None  # None: no run has started on this store yet


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _known(loaded: LoadedSite, path: Path
           ) -> tuple[list[HostPlan], dict[str, NodeState], StateStore | None]:
    store = open_read_only(path)
    states = {n.hostname: n for n in store.nodes()} if store else {}
    return servers(loaded), states, store


def plan(loaded: LoadedSite, *, refresh: bool = False, profile: Profile | None = None,
         env: Mapping[str, str] | None = None) -> PlanReport:
    """Per node: what `up` would do now, from the inventory against the state store."""
    profile = profile or for_site(loaded)
    servers_, states, _ = _known(loaded, profile.state_path)
    blocked = blocked_racks(loaded)
    views: dict[str, BmcView] = {}
    if refresh:
        views = _refresh(loaded, servers_, os.environ if env is None else env)
    nodes: list[PlanNode] = []
    for s in servers_:
        st = states.get(s.hostname)
        phase = st.phase if st else None
        action: Action
        if st is None:
            action, steps = "add", steps_from(Phase.ENROLLED)
        elif st.phase is Phase.READY:
            action, steps = "unchanged", []
        elif st.phase is Phase.MAINTENANCE:
            action, steps = "maintenance", []
        elif st.phase is Phase.FAILED:
            action, steps = "retry", steps_from(st.failed_phase or Phase.ENROLLED)
        else:
            action, steps = "resume", steps_from(st.phase)
        start = (st.failed_phase if st and st.phase is Phase.FAILED else phase) or Phase.ENROLLED
        reason = st.reason if st else None
        if s.placement.rack in blocked and start in BEFORE_POWER_ON:
            action, reason = "blocked", f"rack over budget: {blocked[s.placement.rack]}"
        nodes.append(PlanNode(
            hostname=s.hostname, rack=s.placement.rack, block=s.block.name, action=action,
            phase=phase.value if phase else None,
            failed_phase=st.failed_phase.value if st and st.failed_phase else None,
            reason=reason, steps=steps, bmc=views.get(s.hostname)))
    names = {s.hostname for s in servers_}
    for host, st in sorted(states.items()):
        if host not in names:
            nodes.append(PlanNode(hostname=host, rack=None, block=None, action="unknown",
                                  phase=st.phase.value, failed_phase=None,
                                  reason="in the state store but no longer in the inventory",
                                  steps=[], bmc=None))
    summary: dict[Action, int] = {a: 0 for a in ("add", "resume", "retry", "unchanged",
                                                   "blocked", "maintenance", "unknown")}
    for n in nodes:
        summary[n.action] += 1
    racks = [RackGate(name=r.name, ok=r.name not in blocked, reason=blocked.get(r.name))
             for r in loaded.site.racks]
    return PlanReport(schema_=PLAN_SCHEMA, site=loaded.site.site.name,
                      lab=profile.lab, state_path=str(profile.state_path),
                      generated_at=_now(), summary=summary, nodes=nodes, racks=racks)


def _refresh(loaded: LoadedSite, servers_: list[HostPlan],
             env: Mapping[str, str]) -> dict[str, BmcView]:
    by_name = {s.hostname: s for s in servers_}
    targets = bmc_mod.targets(loaded, env)
    results = bmc_mod.run_many(targets, lambda d: d.hardware_facts(), bmc_mod.make_driver,
                               node_timeout_s=60.0)
    views = {}
    for r in results:
        if not r.ok or r.value is None or r.node not in by_name:
            views[r.node] = BmcView(power=None, problems=[], notes=[], error=r.error)
            continue
        problems, notes = compare_facts(by_name[r.node], r.value)
        views[r.node] = BmcView(power=r.value.power_state.value, problems=problems,
                                notes=notes, error=None)
    return views


def status(loaded: LoadedSite, profile: Profile | None = None) -> StatusReport:
    """Every node's phase and failure, rack power in use, and the latest runs."""
    profile = profile or for_site(loaded)
    servers_, states, store = _known(loaded, profile.state_path)
    rack_of = {s.hostname: s.placement.rack for s in servers_}
    ran = _execution(store) if store else {}
    held = cordoned_by(store, states) if store else {}
    versions = firmware.recorded(store.events(), list(states)) if store else {}
    nodes = [StatusNode(hostname=h, rack=rack_of.get(h), in_inventory=h in rack_of,
                        phase=st.phase.value,
                        failed_phase=st.failed_phase.value if st.failed_phase else None,
                        reason=st.reason or held.get(h), updated_at=_iso(st.updated_at),
                        execution=ran.get(h, []), firmware=versions.get(h, {}))
             for h, st in sorted(states.items())]
    phases: dict[str, int] = {}
    for st in states.values():
        phases[st.phase.value] = phases.get(st.phase.value, 0) + 1
    report = power.budget(loaded.site, loaded.catalog)
    racks = []
    # A chassis draws power when it is a switch or any of its nodes was powered on.
    chassis_on: dict[int, tuple[str, float, bool]] = {}
    for h in host_plans(loaded):
        rack, watts, on = chassis_on.get(id(h.placement), (h.placement.rack,
                                                           h.block.max_power_w, False))
        on = on or not h.is_server or (h.hostname in states
                                       and states[h.hostname].phase in POWERED)
        chassis_on[id(h.placement)] = (rack, watts, on)
    # summed per rack in one pass (per rack over every chassis was quadratic: 100,000 nodes)
    on_w: dict[str, float] = {}
    for rack, w, on in chassis_on.values():
        if on:
            on_w[rack] = on_w.get(rack, 0.0) + w
    for rb in report.racks:
        powered_w = on_w.get(rb.name, 0.0)
        powered_va = powered_w / rb.power_factor
        racks.append(RackPower(name=rb.name, usable_va=round(rb.usable_va, 1),
                               nameplate_w=round(rb.load_w, 1), powered_w=round(powered_w, 1),
                               powered_va=round(powered_va, 1),
                               utilization=round(powered_va / rb.usable_va, 4)
                               if rb.usable_va else 0.0))
    runs = [RunView(id=r["id"], command=r["command"], started_at=_iso(r["started_at"]),
                    ended_at=_iso(r["ended_at"]) if r["ended_at"] else None,
                    status=r["status"], pid=r["pid"]) for r in (store.runs(10) if store else [])]
    copies = backups(profile.state_path)
    backup = (BackupView(path=str(copies[0].path), taken_at=_iso(copies[0].taken_at),
                         kept=len(copies), directory=str(backup_dir(profile.state_path)))
              if copies else None)
    return StatusReport(schema_=STATUS_SCHEMA, site=loaded.site.site.name,
                        lab=profile.lab, state_path=str(profile.state_path),
                        generated_at=_now(), phases=phases, nodes=nodes, racks=racks,
                        runs=runs, backup=backup)


# A node in these phases is cordoned, and so is one the upgrade path moved on from there
# (configured, verified) until its uncordon.
HELD = (Phase.CORDONED, Phase.DRAINING, Phase.UPGRADING)
UPGRADE_TAIL = (Phase.CONFIGURED, Phase.VERIFIED)


def cordoned_by(store: StateStore, states: Mapping[str, NodeState]) -> dict[str, str]:
    """Why each node an upgrade left part-way is cordoned: the run that moved it last, how
    that run ended (interrupted at which step, failed, killed, or still running) and the
    command that resumes it. A stopped `upgrade apply` leaves its nodes cordoned where they
    are; without this, `status` showed them cordoned with no reason at all."""
    held = [h for h, st in states.items() if st.phase in HELD or st.phase in UPGRADE_TAIL]
    if not held:  # the usual case: no read of the whole event log for status
        return {}
    moved: dict[str, tuple[int, str]] = {}
    stopped_at: dict[tuple[int, str], str] = {}
    for ev in store.events():
        if ev.hostname is None or ev.run_id is None:
            continue
        if ev.to_phase is not None:
            moved[ev.hostname] = (ev.run_id, ev.to_phase)
        elif ev.kind == "interrupted":
            stopped_at[(ev.run_id, ev.hostname)] = str(ev.detail.get("step", ""))
    runs = {r["id"]: r for r in store.runs(1_000_000)}
    out: dict[str, str] = {}
    for host in held:
        last = moved.get(host)
        if last is None:
            continue
        run = runs.get(last[0])
        if run is None or not str(run["command"]).startswith("upgrade"):
            continue
        step = stopped_at.get((last[0], host))
        how = (f"stopped at its {step} step" if step
               else "still running" if run["status"] in (None, "running")
               else str(run["status"]))
        out[host] = (f"cordoned by run {run['id']} `provision {run['command']}` ({how}); "
                     f"`provision {run['command']}` resumes it")
    return out


def _execution(store: StateStore) -> dict[str, list[ExecutionAttempt]]:
    """Per node, the attempts of its latest run that used execution nodes."""
    out: dict[str, list[ExecutionAttempt]] = {}
    for ev in store.events(kind="execution"):
        if ev.hostname is None:
            continue
        d = ev.detail
        seen = out.setdefault(ev.hostname, [])
        if seen and seen[-1].run_id != ev.run_id:
            seen.clear()  # a later run: only the latest one is shown
        seen.append(ExecutionAttempt(run_id=ev.run_id, step=str(d.get("step", "")),
                                     playbook=str(d.get("playbook", "")),
                                     worker=str(d.get("worker", "")),
                                     attempt=int(d.get("attempt", 1)), lost=d.get("lost")))
    return out


def json_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schemas documented in docs/up.md (kept equal by a test)."""
    return {PLAN_SCHEMA: PlanReport.model_json_schema(by_alias=True),
            STATUS_SCHEMA: StatusReport.model_json_schema(by_alias=True)}
