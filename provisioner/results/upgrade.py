"""JSON of `provision upgrade plan` and `provision upgrade apply` (docs/upgrade.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from provisioner.results.base import Out

if TYPE_CHECKING:  # read, not built here: results sit below the workflows
    from provisioner.upgrade.plan import UpgradePlan
    from provisioner.workflows.upgrade.apply import UpgradeRun


class RefusalView(Out):
    code: str
    message: str
    hint: str | None


class ChangeView(Out):
    component: str
    old: str | None
    new: str | None
    direction: str  # upgrade | downgrade | change
    nodes: list[str]  # empty for cluster-wide components (operator charts)


class FirmwareMoveView(Out):
    hostname: str
    component: str  # as the BMC names it: BMC, BIOS, ...
    old: str | None  # null: never recorded (no read of the node's BMC reported it)
    new: str
    reset: str  # power_cycle | bmc_reset | next_boot | none
    direction: str  # upgrade | downgrade | change


class PlanNode(Out):
    hostname: str
    domain: str
    control_plane: bool
    changes: list[str]
    reboot: bool
    node_s: float


class UpgradePlanReport(Out):
    schema_: Literal["provisioner.upgrade.plan/v1"] = Field(
        "provisioner.upgrade.plan/v1", alias="schema")
    site: str
    bundle: str
    ok: bool  # false: refused, exit code 11
    # true: every selected node already runs the bundle (a re-run after apply finished):
    # apply would touch nothing; `summary` says so in words
    nothing_to_do: bool
    summary: str
    refusals: list[RefusalView]
    warnings: list[str]
    rollback: list[str]  # components that cannot be moved back by a later bundle
    changes: list[ChangeView]
    nodes: list[PlanNode]
    batches: list[list[str]]
    # true: the bundle changes Kubernetes, no worker starts before every API server is on
    # it; false: worker batches go alongside the control-plane rounds (`order` says which
    # and why)
    workers_wait: bool
    order: str
    # the control planes whose kubeadm upgrade runs in place, one at a time, before any
    # batch (a bundle that changes Kubernetes); the batches then carry workers alongside
    # the control planes' rounds
    control_planes_first: list[str]
    max_unavailable: dict[str, int]  # per failure domain
    planned_s: float
    # firmware the bundle moves, per node, in order (BMC, BIOS, then the rest); planned and
    # shown: `upgrade apply` refuses a bundle that moves firmware (firmware-not-applied)
    firmware: list[FirmwareMoveView]


class UpgradeNode(Out):
    hostname: str
    start_phase: str
    phase: str
    failed_phase: str | None
    reason: str | None
    steps: list[str]


class UpgradeReport(Out):
    schema_: Literal["provisioner.upgrade/v1"] = Field("provisioner.upgrade/v1", alias="schema")
    site: str
    bundle: str
    ok: bool
    lab: bool
    run_id: int
    interrupted: bool
    budget_spent: bool
    stopped: str | None  # why the run stopped before every node was tried
    failed: list[str]
    not_started: list[str]
    elapsed_s: float
    notes: list[str]
    nodes: list[UpgradeNode]


def plan_summary(p: UpgradePlan) -> str:
    """One plain line: what the plan amounts to (the last line `plan` prints)."""
    if not p.ok:
        return f"refused: {len(p.refusals)} rule(s) broken; nothing would be touched"
    which = "selected " if p.selected_of > len(p.nodes) else ""
    if p.nothing_to_do:
        who = (f"{p.nodes[0].hostname} is" if len(p.nodes) == 1
               else f"all {len(p.nodes)} {which}nodes are")
        return (f"nothing to do: {who} on bundle {p.bundle} (every version it pins is "
                "what runs)")
    to_flash = {m.hostname for m in p.firmware}
    moving = sum(1 for n in p.nodes if n.changes or n.hostname in p.resumed
                 or n.hostname in to_flash)
    return (f"{moving} of {len(p.nodes)} {which}nodes move to bundle {p.bundle} in "
            f"{len(p.batches)} batch(es), planned {p.planned_s / 60:.0f} min")


def plan_report(p: UpgradePlan) -> UpgradePlanReport:
    return UpgradePlanReport(
        site=p.site, bundle=p.bundle, ok=p.ok, nothing_to_do=p.nothing_to_do,
        summary=plan_summary(p),
        refusals=[RefusalView(code=r.code, message=r.message, hint=r.hint)
                  for r in p.refusals],
        warnings=p.warnings, rollback=p.rollback,
        changes=[ChangeView(component=c.component, old=c.old, new=c.new,
                            direction=c.direction, nodes=list(c.hosts)) for c in p.changes],
        nodes=[PlanNode(hostname=n.hostname, domain=n.domain, control_plane=n.control_plane,
                        changes=list(n.changes), reboot=n.reboot, node_s=n.node_s)
               for n in p.nodes],
        firmware=[FirmwareMoveView(hostname=m.hostname, component=m.component, old=m.old,
                                   new=m.new, reset=m.reset, direction=m.direction)
                  for m in p.firmware],
        batches=p.batches, workers_wait=p.workers_wait, order=p.order,
        control_planes_first=p.control_planes_first,
        max_unavailable=p.max_unavailable,
        planned_s=round(p.planned_s, 1))


def upgrade_report(r: UpgradeRun) -> UpgradeReport:
    return UpgradeReport(
        site=r.site, bundle=r.bundle, ok=r.ok, lab=r.lab, run_id=r.run_id,
        interrupted=r.interrupted, budget_spent=r.rolling.budget_spent,
        stopped=r.rolling.stopped, failed=r.rolling.failed,
        not_started=r.rolling.not_started, elapsed_s=round(r.elapsed_s, 2), notes=r.notes,
        nodes=[UpgradeNode(hostname=n.hostname, start_phase=n.start_phase.value,
                           phase=n.phase.value,
                           failed_phase=n.failed_phase.value if n.failed_phase else None,
                           reason=n.reason, steps=n.steps) for n in r.nodes])


RESULTS: tuple[type[Out], ...] = (UpgradePlanReport, UpgradeReport)
