"""validate, power, catalog: read-only commands over the inventory (no I/O beyond reading it)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from provisioner import power as power_mod
from provisioner.cli.common import JsonOpt, SiteArg, console, handle_errors, resolve_site
from provisioner.errors import ExitCode
from provisioner.inventory import Category, check, load, shipped_catalog
from provisioner.inventory.findings import errors, warnings


class BasisChoice(StrEnum):
    nameplate = "nameplate"
    typical = "typical"


BasisOpt = Annotated[
    BasisChoice,
    typer.Option("--basis", help="Power figure per block: nameplate (max) or typical."),
]


@handle_errors
def validate(site: SiteArg = None, json_out: JsonOpt = False,
             basis: BasisOpt = BasisChoice.nameplate) -> None:
    """Check an inventory without touching hardware: schema, cross-references, budgets.

    Exit 0 when valid (warnings allowed), 3 on inventory errors, 4 when the only errors are
    racks over their power, cooling or space budget.
    """
    path = resolve_site(site)
    out = console(json_out)
    loaded = load(path)
    findings = check(loaded, basis.value)
    errs, warns = errors(findings), warnings(findings)
    if all(f.category is Category.BUDGET for f in errs) and errs:
        code = ExitCode.BUDGET
    elif errs:
        code = ExitCode.INVENTORY
    else:
        code = ExitCode.OK
    if json_out:
        out.emit_json({
            "schema": "provisioner.validate/v1",
            "site": loaded.site.site.name,
            "valid": not errs,
            "exit_code": int(code),
            "errors": [f.to_json() for f in errs],
            "warnings": [f.to_json() for f in warns],
        })
    else:
        out.findings(errs + warns)
        nodes = sum(len(p.nodes) for p in loaded.site.placements)
        summary = (f"site {loaded.site.site.name} ({path}): {len(loaded.site.racks)} rack(s), "
                   f"{len(loaded.site.placements)} chassis, {nodes} node(s): ")
        if errs:
            out.out.print(summary + f"[red]{len(errs)} error(s)[/], {len(warns)} warning(s)")
        else:
            out.out.print(summary + f"[green]valid[/], {len(warns)} warning(s)")
    raise typer.Exit(int(code))


@handle_errors
def power(site: SiteArg = None, json_out: JsonOpt = False,
          basis: BasisOpt = BasisChoice.nameplate) -> None:
    """Rack space, power and cooling budgets. Exit 4 when any rack is over budget."""
    path = resolve_site(site)
    loaded = load(path)
    report = power_mod.budget(loaded.site, loaded.catalog, basis.value)
    out = console(json_out)
    if json_out:
        out.emit_json(power_mod.report_to_json(report))
    else:
        out.power_report(report)
    raise typer.Exit(int(ExitCode.OK if report.ok else ExitCode.BUDGET))


@handle_errors
def catalog(json_out: JsonOpt = False) -> None:
    """List the building blocks shipped with the tool (estimates are marked)."""
    blocks = list(shipped_catalog().values())
    out = console(json_out)
    if json_out:
        out.emit_json({"schema": "provisioner.catalog/v1",
                       "blocks": [b.model_dump(mode="json") for b in blocks]})
    else:
        out.catalog(blocks)
