"""The site report: one self-contained static HTML page (inline SVG and CSS, no script).

A reviewer opens it from a CI artifact, offline, on a laptop or on paper. Every number on
it comes from the core that the commands use: budgets from `power.budget` (the report
`provision power` prints), findings from `checks.check`, node states from the state store.
Nothing here prints, exits or reads the environment; the CLI decides where the page goes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import jinja2

from provisioner import __version__, power, resources
from provisioner.inventory.findings import Finding, Severity
from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.models import BlockKind, Placement
from provisioner.report import svg
from provisioner.report.fabric import FabricView
from provisioner.report.fabric import build as build_fabric
from provisioner.report.nodes import StateView

PAGE_NAME = "index.html"


@dataclass(frozen=True)
class RackView:
    """One rack's elevation and budgets; nameplate decides over/under, as in `power`."""

    name: str
    elevation: svg.Elevation
    nameplate: power.RackBudget
    typical: power.RackBudget
    feeds: tuple[svg.Bar, ...]
    heat: svg.Bar
    airflow: svg.Bar

    @property
    def ok(self) -> bool:
        return self.nameplate.ok and not self.elevation.errors

    @property
    def over(self) -> list[str]:
        """The budget checks that fail, in `provision power`'s words (power, cooling...)."""
        return sorted({f.check for f in self.nameplate.failures})


@dataclass(frozen=True)
class Report:
    site: str
    description: str
    source: str
    generated_at: str
    racks: tuple[RackView, ...]
    findings: tuple[Finding, ...]
    state: StateView | None
    kinds: tuple[tuple[str, str], ...]  # legend: (block kind, fill)
    # The switch fabric and cabling (report/fabric.py); None without managed switches.
    fabric: FabricView | None = None
    # The shared upstream circuits the site declares (circuits:), nameplate: the racks on
    # each add up there, as `provision power` and `validate` sum them; none declared: ()
    circuits: tuple[power.CircuitBudget, ...] = ()

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.WARNING]

    @property
    def ok(self) -> bool:
        return (not self.errors and all(r.ok for r in self.racks)
                and all(c.ok for c in self.circuits))


def _rack_view(rack_index: int, loaded: LoadedSite, nameplate: power.RackBudget,
               typical: power.RackBudget, phases: dict[str, str],
               mine: list[tuple[int, Placement]]) -> RackView:
    rack = loaded.site.racks[rack_index]
    elevation = svg.elevation(rack, mine, loaded.catalog, phases)
    feeds = tuple(
        svg.bar(f"feed {fn.name}", "VA", fn.load_va, ft.load_va, fn.usable_va,
                over=not fn.ok, capacity=fn.capacity_va)
        for fn, ft in zip(nameplate.feeds, typical.feeds, strict=True))
    checks = {f.check for f in nameplate.failures}
    heat = svg.bar("heat", "W", nameplate.load_w, typical.load_w, nameplate.cooling_limit_w,
                   over="cooling" in checks)
    airflow = svg.bar("airflow", "CFM", nameplate.airflow_required_cfm,
                      typical.airflow_required_cfm, nameplate.airflow_limit_cfm,
                      over="airflow" in checks)
    return RackView(name=rack.name, elevation=elevation, nameplate=nameplate, typical=typical,
                    feeds=feeds, heat=heat, airflow=airflow)


def build(loaded: LoadedSite, findings: list[Finding], *, state: StateView | None,
          generated_at: datetime) -> Report:
    """Everything the page shows, computed once (the page and --json read the same)."""
    nameplate = power.budget(loaded.site, loaded.catalog, "nameplate")
    typical = power.budget(loaded.site, loaded.catalog, "typical")
    phases = {n.hostname: n.phase for n in state.nodes} if state else {}
    by_rack: dict[str, list[tuple[int, Placement]]] = {}
    for i, p in enumerate(loaded.site.placements):
        by_rack.setdefault(p.rack, []).append((i, p))
    racks = tuple(
        _rack_view(i, loaded, n, t, phases, by_rack.get(loaded.site.racks[i].name, []))
        for i, (n, t) in enumerate(zip(nameplate.racks, typical.racks, strict=True)))
    return Report(
        site=loaded.site.site.name, description=loaded.site.site.description,
        source=str(loaded.root), generated_at=generated_at.isoformat(timespec="seconds"),
        racks=racks, findings=tuple(findings), state=state,
        kinds=tuple((k.value, svg.KIND_FILL[k.value]) for k in BlockKind),
        fabric=build_fabric(loaded), circuits=nameplate.circuits)


def build_unloadable(source: Path, findings: list[Finding], *,
                     generated_at: datetime) -> Report:
    """The page for an inventory that does not load (schema or YAML errors): no rack can be
    drawn, but the findings, each with file:line, are what the reviewer needs to see."""
    return Report(
        site=source.stem if source.is_file() else source.name,
        description="The inventory could not be loaded; fix the findings below.",
        source=str(source), generated_at=generated_at.isoformat(timespec="seconds"),
        racks=(), findings=tuple(findings), state=None, kinds=())


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(resources.templates_dir("report")),
        autoescape=True,  # every inventory string is escaped, in HTML and in the inline SVG
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["n0"] = lambda x: f"{x:,.0f}"
    env.filters["pct"] = lambda x: f"{x:.0%}"
    env.filters["g"] = lambda x: f"{x:g}"
    env.filters["zip"] = lambda a, b: list(zip(a, b, strict=True))
    return env


def render_html(report: Report) -> str:
    """The page as text (UTF-8, self-contained)."""
    phase_legend = [("ready", svg.PHASE_FILL["ready"]),
                    ("on the way (enrolled to verified)", svg.PHASE_FILL_BUSY),
                    ("failed", svg.PHASE_FILL["failed"]),
                    ("maintenance", svg.PHASE_FILL["maintenance"])]
    return _env().get_template("page.html.j2").render(
        r=report, version=__version__, u_px=svg.U_PX, bar_px=svg.BAR_WIDTH_PX,
        phase_legend=phase_legend)


def write(report: Report, out_dir: Path) -> Path:
    """Write the page into out_dir (created if needed) and return its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    page = out_dir / PAGE_NAME
    page.write_text(render_html(report), encoding="utf-8")
    return page
