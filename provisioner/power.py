"""Rack space, power and cooling budgets: pure arithmetic, no I/O.

Formulas and constants (each with its source; NEC = NFPA 70, the National Electrical Code):
- single phase VA = V x A; three phase VA = sqrt(3) x V(line-to-line) x A;
- usable = VA x derating (NEC 210.20(A) continuous load: 80 %);
- A+B (2N): each feed must carry the whole rack alone, so usable = one feed's, never the sum;
- a shared upstream circuit (breaker, busway) carries, in the worst case, the whole load of
  every rack with a feed on it (each 2N partner lost at once: a whole B side down), summed;
  a rack with both feeds on one circuit counts once (it never draws more than its load);
- heat BTU/h = W x 3.412;
- airflow CFM = 3,412 x kW / (1.085 x dT_F) ~= 3.145 x W / dT_F (sensible-heat factor 1.085,
  insidehpc.com / Dell). NVIDIA's own figures fit it: DGX H100 10.2 kW at 1,105 CFM gives
  dT ~= 29 F.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # annotations only: the arithmetic needs no pydantic at import
    from provisioner.inventory.models import BlockType, Circuit, Feed, Placement, Rack, Site

Basis = Literal["nameplate", "typical"]

BTU_PER_W = 3.412
SENSIBLE_HEAT_FACTOR = 1.085
CFM_PER_W_PER_F = BTU_PER_W / SENSIBLE_HEAT_FACTOR  # ~3.1447


def feed_capacity_va(feed: Feed | Circuit) -> float:
    """Nameplate capacity of one feed (or upstream circuit) in VA."""
    factor = math.sqrt(3) if feed.phase == "three" else 1.0
    return factor * feed.voltage_v * feed.breaker_a


def feed_usable_va(feed: Feed | Circuit) -> float:
    """What the feed (or upstream circuit) may carry continuously (derated)."""
    return feed_capacity_va(feed) * feed.derating


def rack_usable_va(rack: Rack) -> float:
    """Usable rack capacity: a single feed's, or for 2N the weaker of A and B (never the sum)."""
    return min(feed_usable_va(f) for f in rack.feeds)


def btu_per_hour(watts: float) -> float:
    return watts * BTU_PER_W


def airflow_cfm(watts: float, delta_t_f: float) -> float:
    return watts * CFM_PER_W_PER_F / delta_t_f


@dataclass(frozen=True)
class Supply:
    """A feed or an upstream circuit: its rating, what it may carry, and what it carries."""

    name: str
    phase: str
    voltage_v: float
    breaker_a: float
    derating: float
    capacity_va: float
    usable_va: float
    # a feed: the whole rack on either side of a 2N pair; a circuit: every rack on it so
    load_va: float
    utilization: float


@dataclass(frozen=True)
class FeedBudget(Supply):
    ok: bool
    circuit: str | None = None  # the upstream circuit it hangs off, if declared


@dataclass(frozen=True)
class BudgetFailure:
    check: Literal["power", "cooling", "space", "airflow"]
    subject: str
    over_by: float
    unit: str
    message: str


@dataclass(frozen=True)
class RackBudget:
    name: str
    height_u: int
    reserved_u: int
    used_u: int
    free_u: int
    chassis: int
    nodes: int
    load_w: float
    power_factor: float
    load_va: float
    redundancy: str
    usable_va: float
    utilization: float
    feeds: tuple[FeedBudget, ...]
    heat_btu_h: float
    delta_t_f: float
    airflow_required_cfm: float
    airflow_limit_cfm: float | None
    cooling_limit_w: float
    cooling_headroom_w: float
    estimated_blocks: tuple[str, ...]
    failures: tuple[BudgetFailure, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass(frozen=True)
class CircuitLoad:
    """What one rack puts on a circuit in the worst case, and through which of its feeds."""

    rack: str
    feeds: tuple[str, ...]
    load_va: float


@dataclass(frozen=True)
class CircuitBudget(Supply):  # load_va, the worst case: the sum of loads[].load_va
    loads: tuple[CircuitLoad, ...]
    failures: tuple[BudgetFailure, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def racks(self) -> tuple[str, ...]:
        return tuple(ld.rack for ld in self.loads)


@dataclass(frozen=True)
class BudgetReport:
    site: str
    basis: Basis
    racks: tuple[RackBudget, ...]
    circuits: tuple[CircuitBudget, ...] = ()

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.racks) and all(c.ok for c in self.circuits)

    @property
    def total_load_w(self) -> float:
        return sum(r.load_w for r in self.racks)

    @property
    def total_used_u(self) -> int:
        return sum(r.used_u for r in self.racks)


def rack_budget(rack: Rack, placements: Iterable[Placement],
                catalog: Mapping[str, BlockType], basis: Basis = "nameplate") -> RackBudget:
    """Budget of one rack. Placements of unknown block types are skipped (checks report them)."""
    used_u = load_w = 0.0
    chassis = nodes = 0
    estimated: set[str] = set()
    for p in placements:
        block = catalog.get(p.block)
        if block is None:
            continue
        chassis += 1
        nodes += len(p.nodes)
        used_u += block.rack_units
        load_w += block.power_w(basis)
        if block.is_estimated(basis):
            estimated.add(block.name)
    used = int(used_u)
    load_va = load_w / rack.power_factor
    feeds = tuple(
        FeedBudget(
            name=f.name, phase=f.phase, voltage_v=f.voltage_v, breaker_a=f.breaker_a,
            derating=f.derating, capacity_va=feed_capacity_va(f), usable_va=feed_usable_va(f),
            load_va=load_va, utilization=load_va / feed_usable_va(f),
            ok=load_va <= feed_usable_va(f), circuit=f.circuit,
        )
        for f in rack.feeds
    )
    usable_va = rack_usable_va(rack)
    cooling_w = rack.cooling_kw * 1000.0
    need_cfm = airflow_cfm(load_w, rack.delta_t_f)
    failures: list[BudgetFailure] = []
    for fb in feeds:
        if not fb.ok:
            side = " (in 2N each feed must carry the whole rack)" if rack.redundancy == "2N" else ""
            failures.append(BudgetFailure(
                "power", f"feed {fb.name}", fb.load_va - fb.usable_va, "VA",
                f"rack {rack.name} feed {fb.name}: load {load_w:,.0f} W = {load_va:,.0f} VA "
                f"at PF {rack.power_factor} exceeds usable {fb.usable_va:,.0f} VA by "
                f"{fb.load_va - fb.usable_va:,.0f} VA{side}"))
    if load_w > cooling_w:
        failures.append(BudgetFailure(
            "cooling", "cooling", load_w - cooling_w, "W",
            f"rack {rack.name}: heat {load_w:,.0f} W exceeds the cooling limit "
            f"{cooling_w:,.0f} W by {load_w - cooling_w:,.0f} W"))
    if rack.airflow_limit_cfm is not None and need_cfm > rack.airflow_limit_cfm:
        failures.append(BudgetFailure(
            "airflow", "airflow", need_cfm - rack.airflow_limit_cfm, "CFM",
            f"rack {rack.name}: needs {need_cfm:,.0f} CFM at dT {rack.delta_t_f:g} F, "
            f"more than the {rack.airflow_limit_cfm:,.0f} CFM available"))
    capacity_u = rack.height_u - rack.reserved_u
    if used > capacity_u:
        failures.append(BudgetFailure(
            "space", "rack units", used - capacity_u, "U",
            f"rack {rack.name}: {used} U of equipment in {capacity_u} U of usable space "
            f"({rack.height_u} U high, {rack.reserved_u} U reserved): "
            f"over by {used - capacity_u} U"))
    return RackBudget(
        name=rack.name, height_u=rack.height_u, reserved_u=rack.reserved_u, used_u=used,
        free_u=capacity_u - used, chassis=chassis, nodes=nodes, load_w=load_w,
        power_factor=rack.power_factor, load_va=load_va, redundancy=rack.redundancy,
        usable_va=usable_va, utilization=load_va / usable_va, feeds=feeds,
        heat_btu_h=btu_per_hour(load_w), delta_t_f=rack.delta_t_f,
        airflow_required_cfm=need_cfm, airflow_limit_cfm=rack.airflow_limit_cfm,
        cooling_limit_w=cooling_w, cooling_headroom_w=cooling_w - load_w,
        estimated_blocks=tuple(sorted(estimated)), failures=tuple(failures),
    )


def budget(site: Site, catalog: Mapping[str, BlockType],
           basis: Basis = "nameplate") -> BudgetReport:
    """Budget of every rack of a site."""
    by_rack: dict[str, list[Placement]] = {r.name: [] for r in site.racks}
    for p in site.placements:
        if p.rack in by_rack:
            by_rack[p.rack].append(p)
    racks = tuple(rack_budget(r, by_rack[r.name], catalog, basis) for r in site.racks)
    return BudgetReport(site=site.site.name, basis=basis, racks=racks,
                        circuits=circuit_budgets(site.circuits, racks))


def circuit_budgets(circuits: Iterable[Circuit],
                    racks: Sequence[RackBudget]) -> tuple[CircuitBudget, ...]:
    """Per declared circuit, the worst-case load of the rack feeds on it against its derated
    capacity. A feed naming an undeclared circuit is skipped (checks report it); a circuit
    declared twice is budgeted once, the first (checks report the second)."""
    on: dict[str, dict[str, list[FeedBudget]]] = {}  # circuit -> rack -> its feeds there
    two_n = {rb.name for rb in racks if rb.redundancy == "2N"}
    for rb in racks:
        for fb in rb.feeds:
            if fb.circuit is not None:
                on.setdefault(fb.circuit, {}).setdefault(rb.name, []).append(fb)
    out: list[CircuitBudget] = []
    seen: set[str] = set()
    for c in circuits:
        if c.name in seen:
            continue
        seen.add(c.name)
        # every feed of a rack carries the whole rack (FeedBudget.load_va): with both of a
        # 2N pair on this circuit the rack still draws its load once, not twice
        loads = tuple(CircuitLoad(rack, tuple(f.name for f in fbs), max(f.load_va for f in fbs))
                      for rack, fbs in on.get(c.name, {}).items())
        usable = feed_usable_va(c)
        load = sum(ld.load_va for ld in loads)
        failures: tuple[BudgetFailure, ...] = ()
        if load > usable:
            parts = " + ".join(f"{ld.rack} (feed {'+'.join(ld.feeds)}) {ld.load_va:,.0f} VA"
                               for ld in loads)
            failures = (BudgetFailure(
                "power", f"circuit {c.name}", load - usable, "VA",
                f"circuit {c.name}: worst-case load {parts} = {load:,.0f} VA is "
                f"{load / usable:.0%} of its usable {usable:,.0f} VA ({c.phase}-phase "
                f"{c.voltage_v:g} V/{c.breaker_a:g} A x{c.derating:g}), over by "
                f"{load - usable:,.0f} VA"
                + (" (a 2N feed counts its whole rack: it carries it when its partner fails)"
                   if two_n & {ld.rack for ld in loads} else "")),)
        out.append(CircuitBudget(
            name=c.name, phase=c.phase, voltage_v=c.voltage_v, breaker_a=c.breaker_a,
            derating=c.derating, capacity_va=feed_capacity_va(c), usable_va=usable,
            load_va=load, utilization=load / usable, loads=loads, failures=failures))
    return tuple(out)
