"""validate, power, catalog: read-only commands over the inventory (no I/O beyond reading it)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from provisioner import power as power_mod
from provisioner import results
from provisioner.cli.common import (
    JsonOpt,
    SiteArg,
    console,
    exit_code,
    handle_errors,
    load_checked,
    resolve_site,
)
from provisioner.console import Console
from provisioner.errors import ExitCode, InventoryError
from provisioner.inventory import (
    Finding,
    Severity,
    load,
    shipped_catalog,
)
from provisioner.inventory.findings import errors, warnings
from provisioner.inventory.valid import site_findings


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
    try:
        loaded = load(path)
    except InventoryError as exc:
        if not json_out:
            raise
        # Load and syntax errors are findings too: CI reads them from stdout like the rest.
        _emit_validate(out, None, ExitCode.INVENTORY, exc.findings or [_unlocated(exc)], [])
        raise typer.Exit(int(ExitCode.INVENTORY)) from None
    findings = site_findings(loaded, basis.value)
    errs, warns = errors(findings), warnings(findings)
    code = exit_code(findings)
    if json_out:
        _emit_validate(out, loaded.site.site.name, code, errs, warns)
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


def _unlocated(exc: InventoryError) -> Finding:
    return Finding("inventory-file", Severity.ERROR, exc.message, exc.hint)


def _emit_validate(out: Console, site: str | None, code: ExitCode, errs: list[Finding],
                   warns: list[Finding]) -> None:
    out.emit_json(results.dump(results.validate_report(site, int(code), errs, warns)))


@handle_errors
def power(site: SiteArg = None, json_out: JsonOpt = False,
          basis: BasisOpt = BasisChoice.nameplate) -> None:
    """Rack space, power and cooling budgets. Exit 4 when any rack is over budget, 3 when the
    inventory is invalid (the same checks as validate)."""
    loaded = load_checked(site, basis.value)
    report = power_mod.budget(loaded.site, loaded.catalog, basis.value)
    out = console(json_out)
    if json_out:
        out.emit_json(results.dump(results.power_report(report)))
    else:
        out.power_report(report)
    raise typer.Exit(int(ExitCode.OK if report.ok else ExitCode.BUDGET))


@handle_errors
def catalog(json_out: JsonOpt = False) -> None:
    """List the building blocks shipped with the tool (estimates are marked)."""
    blocks = list(shipped_catalog().values())
    out = console(json_out)
    if json_out:
        out.emit_json(results.dump(results.CatalogReport(blocks=blocks)))
    else:
        out.catalog(blocks)
