"""Results of the commands that read the inventory: validate, catalog, power, report."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from provisioner.inventory.models import BlockType
from provisioner.power import (
    BTU_PER_W,
    CFM_PER_W_PER_F,
    BudgetFailure,
    BudgetReport,
    CircuitBudget,
)
from provisioner.results.base import Out

if TYPE_CHECKING:
    from pathlib import Path

    from provisioner.inventory.findings import Finding
    from provisioner.report.html import Report


# ---------------------------------------------------------------- validate

class LocationView(Out):
    file: str
    line: int
    column: int
    key_path: str


class FindingView(Out):
    code: str
    severity: str  # error | warning
    message: str
    hint: str | None
    location: LocationView | None
    category: str  # inventory | budget


class ValidateReport(Out):
    schema_: Literal["provisioner.validate/v1"] = Field("provisioner.validate/v1",
                                                        alias="schema")
    site: str | None  # None when the inventory could not be read
    valid: bool
    exit_code: int
    errors: list[FindingView]
    warnings: list[FindingView]


def finding_view(f: Finding) -> FindingView:
    data = dataclasses.asdict(f)
    return FindingView.model_validate(data | {"severity": f.severity.value,
                                              "category": f.category.value})


def validate_report(site: str | None, exit_code: int, errs: Sequence[Finding],
                    warns: Sequence[Finding]) -> ValidateReport:
    return ValidateReport(site=site, valid=not errs, exit_code=exit_code,
                          errors=[finding_view(f) for f in errs],
                          warnings=[finding_view(f) for f in warns])


# ---------------------------------------------------------------- catalog

class CatalogReport(Out):
    schema_: Literal["provisioner.catalog/v1"] = Field("provisioner.catalog/v1",
                                                       alias="schema")
    blocks: list[BlockType]


# ---------------------------------------------------------------- power (docs/power.md)

class PowerConstants(Out):
    btu_per_w: float
    cfm_formula: str
    cfm_per_w_per_f: float


class PowerTotals(Out):
    used_u: int
    load_w: float


class SpaceView(Out):
    height_u: int
    reserved_u: int
    used_u: int
    free_u: int


class SupplyView(Out):
    """A feed's or a circuit's rating and load (power.Supply)."""

    name: str
    phase: str
    voltage_v: float
    breaker_a: float
    derating: float
    capacity_va: float
    usable_va: float
    load_va: float  # a circuit: worst case, every rack on it carried whole (2N partners lost)
    utilization: float


class FeedView(SupplyView):
    ok: bool
    circuit: str | None  # the upstream circuit under circuits:, if declared


class RackPowerView(Out):
    load_w: float
    power_factor: float
    load_va: float
    redundancy: str
    usable_va: float
    utilization: float
    feeds: list[FeedView]


class CoolingView(Out):
    heat_btu_h: float
    limit_w: float
    headroom_w: float
    delta_t_f: float
    airflow_required_cfm: float
    airflow_limit_cfm: float | None


class FailureView(Out):
    check: str  # power | cooling | space | airflow
    subject: str
    over_by: float
    unit: str
    message: str


class RackView(Out):
    name: str
    ok: bool
    space: SpaceView
    chassis: int
    nodes: int
    power: RackPowerView
    cooling: CoolingView
    estimated_blocks: list[str]
    failures: list[FailureView]


class CircuitLoadView(Out):
    rack: str
    feeds: list[str]
    load_va: float


class CircuitView(SupplyView):
    ok: bool
    loads: list[CircuitLoadView]
    failures: list[FailureView]


class PowerReport(Out):
    schema_: Literal["provisioner.power/v1"] = Field("provisioner.power/v1", alias="schema")
    site: str
    basis: str  # nameplate | typical
    ok: bool
    constants: PowerConstants
    totals: PowerTotals
    racks: list[RackView]
    circuits: list[CircuitView]  # shared upstream circuits; empty when none are declared


def _r1(x: float) -> float:
    return round(x, 1)


def power_report(report: BudgetReport) -> PowerReport:
    """The stable --json shape of `provision power` (documented in docs/power.md)."""
    return PowerReport(
        site=report.site, basis=report.basis, ok=report.ok,
        constants=PowerConstants(btu_per_w=BTU_PER_W,
                                 cfm_formula="CFM = W * 3.412 / (1.085 * delta_t_f)",
                                 cfm_per_w_per_f=round(CFM_PER_W_PER_F, 4)),
        totals=PowerTotals(used_u=report.total_used_u, load_w=_r1(report.total_load_w)),
        racks=[RackView(
            name=r.name, ok=r.ok,
            space=SpaceView(height_u=r.height_u, reserved_u=r.reserved_u, used_u=r.used_u,
                            free_u=r.free_u),
            chassis=r.chassis, nodes=r.nodes,
            power=RackPowerView(
                load_w=_r1(r.load_w), power_factor=r.power_factor, load_va=_r1(r.load_va),
                redundancy=r.redundancy, usable_va=_r1(r.usable_va),
                utilization=round(r.utilization, 4),
                feeds=[FeedView(name=f.name, phase=f.phase, voltage_v=f.voltage_v,
                                breaker_a=f.breaker_a, derating=f.derating,
                                capacity_va=_r1(f.capacity_va), usable_va=_r1(f.usable_va),
                                load_va=_r1(f.load_va), utilization=round(f.utilization, 4),
                                ok=f.ok, circuit=f.circuit) for f in r.feeds]),
            cooling=CoolingView(heat_btu_h=_r1(r.heat_btu_h), limit_w=_r1(r.cooling_limit_w),
                                headroom_w=_r1(r.cooling_headroom_w), delta_t_f=r.delta_t_f,
                                airflow_required_cfm=_r1(r.airflow_required_cfm),
                                airflow_limit_cfm=r.airflow_limit_cfm),
            estimated_blocks=list(r.estimated_blocks),
            failures=_failures(r.failures))
            for r in report.racks],
        circuits=circuit_views(report.circuits))


def circuit_views(circuits: Sequence[CircuitBudget]) -> list[CircuitView]:
    """The shared upstream circuits as `power --json` and `report --json` both print them."""
    return [CircuitView(
        name=c.name, ok=c.ok, phase=c.phase, voltage_v=c.voltage_v, breaker_a=c.breaker_a,
        derating=c.derating, capacity_va=_r1(c.capacity_va), usable_va=_r1(c.usable_va),
        load_va=_r1(c.load_va), utilization=round(c.utilization, 4),
        loads=[CircuitLoadView(rack=ld.rack, feeds=list(ld.feeds), load_va=_r1(ld.load_va))
               for ld in c.loads],
        failures=_failures(c.failures)) for c in circuits]


def _failures(failures: Sequence[BudgetFailure]) -> list[FailureView]:
    return [FailureView(check=f.check, subject=f.subject, over_by=_r1(f.over_by), unit=f.unit,
                        message=f.message) for f in failures]


# ---------------------------------------------------------------- report (docs/report.md)

class ReportChassis(Out):
    block: str
    u: int
    rack_units: int
    nodes: list[str]
    error: str | None


class ReportRack(Out):
    name: str
    ok: bool
    over_budget: list[str]  # the budget checks this rack fails (power, cooling, ...)
    used_u: int
    free_u: int
    chassis: list[ReportChassis]


class ReportFindings(Out):
    errors: int
    warnings: int


class ReportState(Out):
    path: str
    exists: bool
    phases: dict[str, int]


class SiteReport(Out):
    schema_: Literal["provisioner.report/v1"] = Field("provisioner.report/v1",
                                                      alias="schema")
    site: str
    page: str
    ok: bool
    generated_at: str
    racks: list[ReportRack]
    # shared upstream circuits at nameplate, as `power --json`'s; empty when none are declared
    circuits: list[CircuitView]
    findings: ReportFindings
    state: ReportState | None


def site_report(report: Report, page: Path) -> SiteReport:
    """The --json document of `provision report`: where the page is and what it says."""
    state = report.state
    return SiteReport(
        site=report.site, page=str(page), ok=report.ok, generated_at=report.generated_at,
        racks=[ReportRack(name=r.name, ok=r.ok, over_budget=list(r.over),
                          used_u=r.nameplate.used_u, free_u=r.elevation.free_u,
                          chassis=[ReportChassis(block=c.block, u=c.u,
                                                 rack_units=c.rack_units,
                                                 nodes=list(c.nodes), error=c.error)
                                   for c in r.elevation.chassis])
               for r in report.racks],
        circuits=circuit_views(report.circuits),
        findings=ReportFindings(errors=len(report.errors), warnings=len(report.warnings)),
        state=None if state is None else ReportState(path=state.path, exists=state.exists,
                                                     phases=dict(state.phases)))


RESULTS: tuple[type[Out], ...] = (ValidateReport, CatalogReport, PowerReport, SiteReport)
