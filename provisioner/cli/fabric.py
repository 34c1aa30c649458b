"""provision fabric check|diff|push|render: RoCE switch configs from the inventory."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from provisioner import fabric as fabric_mod
from provisioner import profile
from provisioner import results as results_mod
from provisioner.cli.common import (
    JsonOpt,
    SiteArg,
    console,
    handle_errors,
    load_checked,
)
from provisioner.console import Console
from provisioner.errors import ExitCode
from provisioner.fabric.live import Unverifiable
from provisioner.state import StateStore, open_read_only
from provisioner.state.dir import state_dir
from provisioner.switches import ops, standins

app = typer.Typer(help="RoCE fabric: switch configs rendered, checked against hosts, pushed.",
                  no_args_is_help=True)

LimitOpt = Annotated[str | None, typer.Option(
    "--limit", "-l", help="Only these switches: comma-separated globs.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run",
                                         help="Show what would be sent; send nothing.")]


LiveOpt = Annotated[bool, typer.Option(
    "--live", help="Read both ends: each switch's running config and each host's mlnx_qos.")]


@app.command()
@handle_errors
def check(site: SiteArg = None, live: LiveOpt = False, json_out: JsonOpt = False) -> None:
    """Hosts vs switches: lossless priority, DSCP map, CNP priority and MTU agree on every
    RoCE link (static: as rendered; --live: as the devices report). Exit 10 on any
    mismatch; an end that cannot be read is listed as not verifiable, never as agreeing."""
    loaded = load_checked(site)
    out = console(json_out)
    unverifiable: tuple[Unverifiable, ...] = ()
    notes: tuple[str, ...] = ()
    if live:
        from provisioner.switches import live as switch_live  # SSH clients, loaded late

        rep = switch_live.run(loaded, os.environ, profile.for_site(loaded))
        ok, links, mismatches, unverifiable, notes = (
            rep.ok, rep.links_checked, rep.mismatches, rep.unverifiable, rep.notes)
    else:
        report = fabric_mod.check(loaded)
        ok, links, mismatches = report.ok, report.links_checked, report.mismatches
    code = ExitCode.OK if ok else ExitCode.FABRIC
    if json_out:
        out.emit_json(results_mod.dump(results_mod.check_report(
            loaded.site.site.name, ok, links, int(code), mismatches, live, unverifiable,
            notes)))
    else:
        _notes(out, notes)
        for m in mismatches:
            out.out.print(f"[red]mismatch[/] {escape(m.format())}")
        for u in unverifiable:
            out.out.print(f"[yellow]not verifiable[/] {u.end} {escape(u.name)}: {escape(u.why)}")
        n = len(mismatches)
        verdict = "[green]agree[/]" if ok else f"[red]disagree: {n} mismatch(es)[/]"
        if live and ok and not links:
            verdict = "[yellow]not verified: no link had both ends readable[/]"
        how = "read live" if live else "checked"
        out.out.print(f"{links} RoCE link(s) {how}: hosts and switches {verdict}"
                      + (f"; {len(unverifiable)} end(s) not verifiable" if unverifiable else ""))
    raise typer.Exit(int(code))


def _notes(out: Console, notes: Sequence[str]) -> None:
    """The lab's stand-ins, before the verdicts they qualify."""
    for note in notes:
        out.out.print(f"[yellow]note:[/] {escape(note)}")


@app.command()
@handle_errors
def render(site: SiteArg = None,
           out_dir: Annotated[Path | None, typer.Option(
               "--out", help="Directory to write into. Default: .provision/fabric next to "
               "the site (never inside it: the site's *.yaml files are its inventory)."
           )] = None) -> None:
    """Write each switch's rendered config to OUT/<switch>/<file> (secret-free)."""
    loaded = load_checked(site)
    out = console()
    target = out_dir or state_dir(loaded.base_dir) / "fabric"
    for r in fabric_mod.render_all(loaded):
        path = target / r.spec.hostname / r.renderer.file_name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(r.text)
        out.out.print(f"{r.spec.hostname} ({r.spec.nos}): {path}")


PruneOpt = Annotated[bool, typer.Option(
    "--prune", help="Also remove stale lines: port settings shaped like rendered ones (PFC "
    "on a priority the policy left) that the rendering lacks. Without it they are listed.")]


def _run(site: Path | None, push: bool, dry_run: bool, limit: str | None,
         json_out: bool, prune: bool = False) -> None:
    loaded = load_checked(site)
    prof = profile.for_site(loaded)
    # a diff reads the store (a killed push left a switch unsaved) and never creates it
    store = (StateStore(prof.state_path) if push and not dry_run
             else open_read_only(prof.state_path))
    results = ops.run(loaded, os.environ, push=push, dry_run=dry_run, limit=limit,
                      store=store, prune=prune, stand_ins=prof.stand_ins)
    notes = standins.notes(loaded, [r.switch for r in results], prof, live=False)
    out = console(json_out)
    failed = [r for r in results if not r.ok]
    code = ExitCode.FABRIC if failed else ExitCode.OK
    if json_out:
        out.emit_json(results_mod.dump(results_mod.switches_report(
            push, loaded.site.site.name, dry_run, int(code), results, notes)))
    else:
        _notes(out, notes)
        for r in results:
            color = "green" if r.ok else "red"
            out.out.print(f"[bold]{r.switch}[/] ({r.nos}): [{color}]{r.status}[/]"
                          + (f": {escape(r.error)}" if r.error else ""))
            if r.note:
                out.out.print(f"  [yellow]{escape(r.note)}[/]"
                              + ("" if r.saved or push else "; `fabric push` saves it"))
            if r.diff and (not push or dry_run or r.status != "pushed"):
                out.out.print(escape(r.diff), end="")
            for line in r.pruned:
                out.out.print(f"  [green]removed[/] {escape(line)}")
            for line in r.stale:
                out.out.print(f"  [yellow]stale, left in place[/] {escape(line)}")
            if r.stale and r.ok:
                out.out.print("  (not rendered; `fabric push --prune` removes those still "
                              "there after the push)")
        out.out.print(f"{len(results) - len(failed)} ok, {len(failed)} failed")
    raise typer.Exit(int(code))


@app.command()
@handle_errors
def diff(site: SiteArg = None, limit: LimitOpt = None, json_out: JsonOpt = False) -> None:
    """Running config vs rendered, per switch (reads the switches; changes nothing)."""
    _run(site, False, True, limit, json_out)


@app.command()
@handle_errors
def push(site: SiteArg = None, limit: LimitOpt = None, dry_run: DryRunOpt = False,
         prune: PruneOpt = False, json_out: JsonOpt = False) -> None:
    """Send only the difference, read back, verify, save; undo on a refused line. Exit 10
    when any switch failed (the others still went on)."""
    _run(site, True, dry_run, limit, json_out, prune)
