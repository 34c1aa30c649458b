"""Terminal views of the state store: `provision plan` and `provision status`, and the
shared circuits of `provision power` (a part of console.Console, kept apart to keep each
module short)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console as RichConsole
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from provisioner.power import BudgetReport
    from provisioner.workflows.report import ExecutionAttempt, PlanReport, StatusReport

PHASE_COLOR = {"ready": "green", "failed": "red", "maintenance": "magenta"}


def ran_on(attempts: Sequence[ExecutionAttempt]) -> str:
    """Which execution node ran which step: `configure ex1 (lost), ex2; verify ex2`."""
    steps: dict[str, list[str]] = {}
    for a in attempts:
        steps.setdefault(a.step, []).append(a.worker + (" (lost)" if a.lost else ""))
    return "; ".join(f"{step} {', '.join(workers)}" for step, workers in steps.items()) or "-"


class StateViews:
    out: RichConsole

    def plan(self, report: PlanReport) -> None:
        table = Table(title=f"provision plan: site {report.site}", title_justify="left")
        for col in ("node", "rack", "phase", "action", "steps", "note"):
            table.add_column(col)
        for n in report.nodes:
            note = n.reason or ""
            if n.bmc is not None:
                note = "; ".join(filter(None, [note, f"power {n.bmc.power}" if n.bmc.power
                                               else "", *n.bmc.problems, n.bmc.error or ""]))
            table.add_row(n.hostname, n.rack or "-", n.phase or "(new)", n.action,
                          ", ".join(n.steps) or "-", escape(note))
        self.out.print(table)
        self.out.print(", ".join(f"{v} {k}" for k, v in report.summary.items() if v)
                       + f" (state: {report.state_path})")

    def status(self, report: StatusReport) -> None:
        if not report.nodes:
            self.out.print(f"no node enrolled yet (state: {report.state_path}); "
                           "`provision plan` shows what `provision up` would do")
        else:
            table = Table(title=f"provision status: site {report.site}", title_justify="left")
            remote = any(n.execution for n in report.nodes)
            versions = any(n.firmware for n in report.nodes)
            for col in ("node", "rack", "phase", "since", "reason",
                        *(["execution nodes"] if remote else []),
                        *(["firmware"] if versions else [])):
                table.add_column(col)
            for n in report.nodes:
                color = PHASE_COLOR.get(n.phase, "yellow")
                phase = n.phase + (f" ({n.failed_phase})" if n.failed_phase else "")
                table.add_row(n.hostname + ("" if n.in_inventory else " (not in inventory)"),
                              n.rack or "-", f"[{color}]{phase}[/]", n.updated_at,
                              escape(n.reason or ""),
                              *([escape(ran_on(n.execution))] if remote else []),
                              *([escape(", ".join(f"{k} {v}" for k, v in n.firmware.items()))]
                                if versions else []))
            self.out.print(table)
        power_t = Table(title="rack power in use (nameplate of what is on)",
                        title_justify="left")
        for col in ("rack", "powered W", "powered VA", "usable VA", "use"):
            power_t.add_column(col, justify="left" if col == "rack" else "right")
        for r in report.racks:
            power_t.add_row(r.name, f"{r.powered_w:,.0f}", f"{r.powered_va:,.0f}",
                            f"{r.usable_va:,.0f}", f"{r.utilization:.0%}")
        self.out.print(power_t)
        if report.runs:
            last = report.runs[0]
            self.out.print(f"last run #{last.id}: {last.command} started {last.started_at}, "
                           f"{last.status}")
        if report.backup:
            b = report.backup
            self.out.print(f"state backup (taken before the latest run, {b.taken_at}): "
                           f"{escape(b.path)} ({b.kept} kept in {escape(b.directory)})")
        else:
            self.out.print("state backup: none yet (one is taken before every run)")

    def power_circuits(self, report: BudgetReport) -> None:
        """One line per shared upstream circuit: what every rack on it may draw at worst."""
        table = Table(title="Upstream circuits (worst case: every rack on one carried whole)",
                      title_justify="left")
        for col, just in (("circuit", "left"), ("rating", "left"), ("usable VA", "right"),
                          ("load VA", "right"), ("util", "right"), ("racks (feeds)", "left"),
                          ("status", "left")):
            table.add_column(col, justify=just)  # type: ignore[arg-type]
        for c in report.circuits:
            table.add_row(
                c.name, f"{c.phase}-phase {c.voltage_v:g} V/{c.breaker_a:g} A x{c.derating:g}",
                f"{c.usable_va:,.0f}", f"{c.load_va:,.0f}", f"{c.utilization:.0%}",
                ", ".join(f"{ld.rack} ({'+'.join(ld.feeds)})" for ld in c.loads) or "-",
                "[green]ok[/]" if c.ok else "[red]OVER[/]")
        self.out.print(table)
        for c in report.circuits:
            for f in c.failures:
                self.out.print(f"  [red]over budget[/] (circuit): {escape(f.message)}")
