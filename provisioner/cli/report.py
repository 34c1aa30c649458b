"""report, schema: a static HTML page of the site for people and CI; the inventory's JSON
Schema for editors. Thin: parse -> provisioner.report / inventory.schema -> console."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from provisioner import report as report_mod
from provisioner import results
from provisioner.cli.common import (
    JsonOpt,
    SiteArg,
    console,
    exit_code,
    handle_errors,
    resolve_site,
)
from provisioner.errors import InventoryError
from provisioner.inventory import load
from provisioner.inventory.schema import site_schema
from provisioner.inventory.valid import site_findings
from provisioner.state.dir import state_dir

OutDirOpt = Annotated[Path | None, typer.Option(
    "--out", help="Directory for index.html. Default: .provision/report next to the site; for "
    "the embedded example of an installed provisioner, in the current directory.")]
StateOpt = Annotated[bool, typer.Option(
    "--state", help="Show node states even when no state store exists yet "
    "(they are shown anyway when it exists).")]
SchemaOutOpt = Annotated[Path | None, typer.Option(
    "--out", help="Write the schema to this file instead of standard output.")]


def _base_dir(path: Path) -> Path:
    return path if path.is_dir() else path.parent


@handle_errors
def report(site: SiteArg = None, out_dir: OutDirOpt = None, state: StateOpt = False,
           json_out: JsonOpt = False) -> None:
    """Write the site as one self-contained HTML page: rack elevations, power and cooling
    per feed, node states, validation findings. No script, no network: a CI artifact.

    The page is written even when the site has problems; the exit code is then validate's
    (3 inventory errors, 4 only budget errors), so a pipeline can publish it and still fail.
    """
    path = resolve_site(site)
    now = datetime.now(UTC)
    try:
        loaded = load(path)
    except InventoryError as exc:
        if not exc.findings:
            raise
        # Schema or YAML errors: still a page, with the findings, for the CI artifact.
        built = report_mod.build_unloadable(path, exc.findings, generated_at=now)
        page = report_mod.write(built, out_dir or state_dir(_base_dir(path)) / "report")
        out = console(json_out)
        if json_out:
            out.emit_json(results.dump(results.site_report(built, page)))
        else:
            out.error(exc)
            out.out.print(str(page))
        raise typer.Exit(int(exc.exit_code)) from None
    findings = site_findings(loaded)
    built = report_mod.build(loaded, findings, generated_at=now,
                             state=report_mod.read_state(loaded, wanted=state, now=now))
    page = report_mod.write(built, out_dir or state_dir(loaded.base_dir) / "report")
    code = exit_code(findings)
    out = console(json_out)
    if json_out:
        out.emit_json(results.dump(results.site_report(built, page)))
    else:
        racks = ", ".join(
            f"{r.name} " + ("ok" if r.ok else f"over budget ({', '.join(r.over)})" if r.over
                            else "layout errors") for r in built.racks)
        out.out.print(f"site {built.site}: {racks}; {len(built.errors)} error(s), "
                      f"{len(built.warnings)} warning(s)")
        out.out.print(str(page))
    raise typer.Exit(int(code))


@handle_errors
def schema(out_file: SchemaOutOpt = None) -> None:
    """Print the inventory's JSON Schema (from the models), for editors' YAML language
    server: validation and completion as a site is typed. See docs/inventory.md."""
    text = json.dumps(site_schema(), indent=2, sort_keys=False) + "\n"
    if out_file is None:
        typer.echo(text, nl=False)
    else:
        out_file.write_text(text, encoding="utf-8")
        console().out.print(str(out_file))


def register(app: typer.Typer) -> None:
    """Add `report` and `schema` to the root app (one line in cli/__init__.py)."""
    app.command()(report)
    app.command()(schema)
