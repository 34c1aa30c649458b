"""Geometry for the report's drawings: rack elevations and budget bars, as plain numbers.

Only layout lives here (pixels from U, watts and VA); the SVG markup is written by the
Jinja2 templates in templates/report/, which escape every inventory string. Keeping the
arithmetic apart makes "a chassis's drawn height is proportional to its U" a unit-testable
fact, and the browser test checks the same fact after layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from provisioner.inventory.models import BlockKind, BlockType, Placement, Rack

U_PX = 16  # one rack unit, drawn (a real U is 44.45 mm; only the ratio matters)
GUTTER_PX = 30  # U numbers left and right of the rails
RAIL_PX = 8
SLOT_PX = 250  # the width of a 19" slot between the rails
TOP_PX = 10
BOTTOM_PX = 10
ERROR_INSET_PX = 14  # an overlapping chassis is drawn narrower, so both stay visible
WIDTH_PX = 2 * GUTTER_PX + 2 * RAIL_PX + SLOT_PX
CHAR_PX = 6.2  # average glyph width of the 11 px sans-serif label font, for truncation

# Fill per block kind; a light tint keeps black labels readable on screen and on paper.
KIND_FILL: dict[str, str] = {
    BlockKind.GPU_SERVER.value: "#b9e08a",
    BlockKind.HCI.value: "#a9cbee",
    BlockKind.COMPUTE.value: "#cdbdf0",
    BlockKind.STORAGE.value: "#f6cf8e",
    BlockKind.SWITCH.value: "#c9c9c9",
}
ERROR_FILL = "#f7b3b3"
MARK_PX = 10  # spacing of the per-node phase marks at a chassis's right edge

# Colour of a node's phase mark (state store phases; absent = not enrolled yet).
PHASE_FILL: dict[str, str] = {"ready": "#1b7a2f", "failed": "#b3261e", "maintenance": "#6b4fa0"}
PHASE_FILL_BUSY = "#d39a00"  # on the way: enrolled .. verified


@dataclass(frozen=True)
class PhaseMark:
    """A dot per node on its chassis: the node's phase at a glance."""

    hostname: str
    phase: str
    cx_px: float
    cy_px: float
    fill: str


@dataclass(frozen=True)
class Chassis:
    """One placement as drawn: where, how big, what it says, and what is wrong with it."""

    index: int  # position in site.placements, for cross-reference with findings
    block: str
    kind: str
    u: int
    rack_units: int
    nodes: tuple[str, ...]
    x_px: float
    y_px: float
    width_px: float
    height_px: float
    fill: str
    label: str  # first line (or the only line of a 1 U chassis)
    sublabel: str  # node names on a second line when the chassis is 2 U or more
    error: str | None  # "above the top of the rack ...", "overlaps ...", or None
    marks: tuple[PhaseMark, ...] = ()

    @property
    def top_u(self) -> int:
        return self.u + self.rack_units - 1

    @property
    def title(self) -> str:
        nodes = ", ".join(self.nodes)
        text = f"{self.block} U{self.u}-U{self.top_u} ({self.rack_units} U): {nodes}"
        return f"{text} - {self.error}" if self.error else text


@dataclass(frozen=True)
class FreeRun:
    """Consecutive empty rack units, drawn as an outlined gap with its size."""

    low_u: int
    high_u: int
    y_px: float
    height_px: float

    @property
    def units(self) -> int:
        return self.high_u - self.low_u + 1


@dataclass(frozen=True)
class Elevation:
    """A rack's front view: frame, U scale, chassis and free space."""

    rack: str
    height_u: int
    width_px: float
    height_px: float
    frame_y_px: float  # top of the rack's U1..height_u frame (lower when a chassis overhangs)
    frame_height_px: float
    u_marks: tuple[tuple[int, float], ...]  # (U number, y of its centre)
    chassis: tuple[Chassis, ...]
    free: tuple[FreeRun, ...]

    @property
    def free_u(self) -> int:
        return sum(f.units for f in self.free)

    @property
    def errors(self) -> tuple[Chassis, ...]:
        return tuple(c for c in self.chassis if c.error)


def _fit(text: str, width_px: float) -> str:
    """Cut a label to what fits in width_px (SVG text does not wrap)."""
    room = max(int(width_px / CHAR_PX), 4)
    return text if len(text) <= room else text[: room - 1] + "…"


def elevation(rack: Rack, placements: Sequence[tuple[int, Placement]],
              catalog: Mapping[str, BlockType],
              phases: Mapping[str, str] | None = None) -> Elevation:
    """Lay out one rack. `placements` are (index in the site, placement) of this rack.

    A chassis reaching above the top is drawn where it would be, over the frame; one that
    overlaps an earlier placement is drawn inset and both are marked, as checks.py reports
    them (the first placement keeps its U). With `phases` (hostname -> phase from the
    state store), each known node gets a coloured mark at the chassis's right edge.
    """
    phases = phases or {}
    known = [(i, p, catalog[p.block]) for i, p in placements if p.block in catalog]
    overhang_u = max([0] + [p.u + b.rack_units - 1 - rack.height_u for _, p, b in known])
    frame_y = TOP_PX + overhang_u * U_PX
    x0 = GUTTER_PX + RAIL_PX

    def y_of_top(top_u: int) -> float:
        return frame_y + (rack.height_u - top_u) * U_PX

    owner: dict[int, tuple[int, Placement, BlockType]] = {}
    drawn: list[Chassis] = []
    for i, p, b in known:
        top = p.u + b.rack_units - 1
        error = None
        clash = next((owner[u] for u in range(p.u, top + 1) if u in owner), None)
        if clash is not None:
            _, op, ob = clash
            error = (f"overlaps {ob.name} at U{op.u}-U{op.u + ob.rack_units - 1} "
                     f"({', '.join(n.hostname for n in op.nodes)})")
        elif top > rack.height_u:
            error = f"above the top of the rack: reaches U{top} of {rack.height_u}"
        if clash is None:
            for u in range(p.u, min(top, rack.height_u) + 1):
                owner[u] = (i, p, b)
        inset = ERROR_INSET_PX if clash is not None else 0
        width = SLOT_PX - 2 * inset
        names = tuple(n.hostname for n in p.nodes)
        y = y_of_top(top)
        known_nodes = [h for h in names if h in phases]
        right = x0 + inset + width - 4 - MARK_PX * len(known_nodes)
        marks = tuple(
            PhaseMark(h, phases[h], right + MARK_PX * (k + 0.5), y + min(U_PX / 2, 8),
                      PHASE_FILL.get(phases[h], PHASE_FILL_BUSY))
            for k, h in enumerate(known_nodes))
        room = width - 8 - MARK_PX * len(marks)
        if b.rack_units >= 2:
            label, sub = _fit(b.name, room), _fit(" ".join(names), width - 8)
        else:
            label, sub = _fit(f"{b.name}: {' '.join(names)}", room), ""
        drawn.append(Chassis(
            index=i, block=b.name, kind=b.kind.value, u=p.u, rack_units=b.rack_units,
            nodes=names, x_px=x0 + inset, y_px=y, width_px=width,
            height_px=b.rack_units * U_PX, fill=ERROR_FILL if error else KIND_FILL[b.kind.value],
            label=label, sublabel=sub, error=error, marks=marks))
    free: list[FreeRun] = []
    u = 1
    while u <= rack.height_u:
        if u in owner:
            u += 1
            continue
        low = u
        while u <= rack.height_u and u not in owner:
            u += 1
        free.append(FreeRun(low, u - 1, y_of_top(u - 1), (u - low) * U_PX))
    frame_h = rack.height_u * U_PX
    return Elevation(
        rack=rack.name, height_u=rack.height_u, width_px=WIDTH_PX,
        height_px=frame_y + frame_h + BOTTOM_PX, frame_y_px=frame_y, frame_height_px=frame_h,
        u_marks=tuple((n, y_of_top(n) + U_PX / 2) for n in range(1, rack.height_u + 1)),
        chassis=tuple(drawn), free=tuple(free))


# ---------------------------------------------------------------- budget bars

BAR_WIDTH_PX = 320


@dataclass(frozen=True)
class Bar:
    """A load against a limit on one scale: nameplate and typical load, the limit line."""

    label: str
    unit: str
    nameplate: float
    typical: float
    limit: float | None  # usable capacity after derating (and 2N), cooling limit, airflow
    capacity: float | None  # a feed's nameplate capacity before derating
    full_scale: float
    over: bool

    def px(self, value: float) -> float:
        return round(BAR_WIDTH_PX * min(value, self.full_scale) / self.full_scale, 1)

    @property
    def utilization(self) -> float | None:
        return self.nameplate / self.limit if self.limit else None


def bar(label: str, unit: str, nameplate: float, typical: float, limit: float | None, *,
        over: bool, capacity: float | None = None) -> Bar:
    """Scale so that the larger of load, limit and nameplate capacity fits with a margin.
    `over` comes from power.py's verdict, never from a comparison made here."""
    top = max(nameplate, typical, limit or 0.0, capacity or 0.0, 1.0) * 1.08
    return Bar(label=label, unit=unit, nameplate=nameplate, typical=typical, limit=limit,
               capacity=capacity, full_scale=top, over=over)
