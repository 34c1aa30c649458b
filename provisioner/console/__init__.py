"""All terminal output: rich tables for people, stable JSON for CI.

The core returns data; only this module decides how it looks. Errors go to stderr so that
`--json` on stdout stays parseable. Everything it writes passes `errors.redact` on the way
out: a credential that slipped into a message never reaches a terminal or a CI log.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from rich.console import Console as RichConsole
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from provisioner.console.state import StateViews
from provisioner.console.up import UpViews
from provisioner.errors import ProvisionerError, redact
from provisioner.inventory.findings import Finding, Severity
from provisioner.inventory.models import BlockType
from provisioner.power import BudgetReport, RackBudget
from provisioner.secrets import RedactingStream

if TYPE_CHECKING:
    from provisioner.bmc.pool import NodeResult
    from provisioner.lab import LabState
    from provisioner.runner import RunResult, TaskEvent

class Console(StateViews, UpViews):
    def __init__(self, *, json_mode: bool = False, quiet: bool = False,
                 no_color: bool = False) -> None:
        self.json_mode = json_mode
        self.quiet = quiet
        # Pipes and CI logs get a wide fixed width instead of rich's 80 columns.
        width = None if sys.stdout.isatty() else 160
        # Both write through RedactingStream (a TextIOBase: rich needs only write and flush).
        self.out = RichConsole(file=cast(IO[str], RedactingStream(lambda: sys.stdout)),
                               highlight=False, no_color=no_color, soft_wrap=True, width=width)
        self.err = RichConsole(file=cast(IO[str], RedactingStream(lambda: sys.stderr)),
                               highlight=False, no_color=no_color, soft_wrap=True, width=width)
        # `up`'s plain progress lines of steps outside the nodes' table (a switch's fabric
        # step), as a run's note would say them: up_result does not print them again
        self._said: set[str] = set()

    # -------------------------------------------------------------- generic

    def emit_json(self, data: Mapping[str, Any]) -> None:
        """One JSON document, redacted (the value classes of `redact` keep it JSON)."""
        sys.stdout.write(redact(json.dumps(data, indent=2, sort_keys=False, default=str)) + "\n")
        sys.stdout.flush()

    def info(self, text: str) -> None:
        if not self.quiet and not self.json_mode:
            self.out.print(text)

    def warn(self, text: str) -> None:
        """A warning on stderr, so that it reaches the operator in --json mode too."""
        self.err.print(f"warning: {text}", markup=False)

    def error(self, exc: ProvisionerError) -> None:
        findings: Iterable[Finding] = getattr(exc, "findings", None) or []
        findings = list(findings)
        if findings:
            for f in findings:
                self.err.print(self._finding_line(f))
        else:
            self.err.print(f"[bold red]error:[/] {escape(redact(str(exc)))}")

    def _finding_line(self, f: Finding) -> str:
        color = "red" if f.severity is Severity.ERROR else "yellow"
        where = f"{escape(str(f.location))}: " if f.location else ""
        hint = f" [dim](hint: {escape(redact(f.hint))})[/]" if f.hint else ""
        return f"{where}[{color}]{f.severity.value}[/]: {escape(redact(f.message))}{hint}"

    # -------------------------------------------------------------- validate

    def findings(self, findings: list[Finding]) -> None:
        for f in findings:
            self.out.print(self._finding_line(f))

    # -------------------------------------------------------------- power

    def power_report(self, report: BudgetReport) -> None:
        table = Table(title=f"Site {report.site}: rack budgets ({report.basis} power)",
                      title_justify="left")
        for col, just in (("rack", "left"), ("U used/free", "right"), ("load W", "right"),
                          ("load VA", "right"), ("usable VA", "right"), ("util", "right"),
                          ("heat BTU/h", "right"), ("airflow CFM", "right"),
                          ("cooling headroom W", "right"), ("status", "left")):
            table.add_column(col, justify=just)  # type: ignore[arg-type]
        for r in report.racks:
            table.add_row(
                r.name, f"{r.used_u}/{r.free_u}", f"{r.load_w:,.0f}", f"{r.load_va:,.0f}",
                f"{r.usable_va:,.0f} ({r.redundancy})", f"{r.utilization:.0%}",
                f"{r.heat_btu_h:,.0f}", f"{r.airflow_required_cfm:,.0f}",
                f"{r.cooling_headroom_w:,.0f}", self._status(r),
            )
        self.out.print(table)
        for r in report.racks:
            feeds = "; ".join(
                f"{f.name}: {f.phase}-phase {f.voltage_v:g} V/{f.breaker_a:g} A = "
                f"{f.capacity_va:,.0f} VA, x{f.derating:g} = {f.usable_va:,.0f} VA usable"
                + (f", on circuit {f.circuit}" if f.circuit else "")
                for f in r.feeds)
            self.out.print(f"[bold]{r.name}[/] feeds: {feeds}")
            if r.redundancy == "2N":
                self.out.print("  2N: each feed must carry the whole rack, so usable capacity "
                               "is one feed's, not the sum")
            for f in r.failures:
                self.out.print(f"  [red]over budget[/] ({f.check}): {escape(f.message)}")
            if r.estimated_blocks:
                self.out.print(f"  [yellow]estimate:[/] power of {', '.join(r.estimated_blocks)}"
                               " has no vendor source; see the catalog")
        self.out.print("[dim]Heat = W x 3.412 BTU/h; airflow = W x 3.412 / (1.085 x dT F), "
                       "dT per rack (default 20 F). Load VA = W / power factor.[/]")
        if report.circuits:
            self.power_circuits(report)

    @staticmethod
    def _status(r: RackBudget) -> str:
        if r.ok:
            return "[green]ok[/]"
        return "[red]OVER: " + ", ".join(sorted({f.check for f in r.failures})) + "[/]"

    # -------------------------------------------------------------- catalog

    def catalog(self, blocks: Iterable[BlockType]) -> None:
        table = Table(title="Building-block catalog", title_justify="left")
        for col in ("name", "kind", "U", "nodes", "max W", "typical W", "PSUs", "GPUs",
                    "NVSwitch", "airflow CFM"):
            table.add_column(col)
        for b in blocks:
            est = set(b.estimated)
            table.add_row(
                b.name, b.kind.value, str(b.rack_units), str(b.nodes_per_chassis),
                f"{b.max_power_w:,.0f}" + ("*" if "max_power_w" in est else ""),
                f"{b.typical_power_w:,.0f}" + ("*" if "typical_power_w" in est else ""),
                (f"{b.psu.count}x{b.psu.rating_w:,.0f} {b.psu.redundancy}"
                 + ("*" if "psu" in est else "")) if b.psu else "-",
                f"{b.gpu.count}x {b.gpu.model} ({b.gpu.architecture.value})" if b.gpu else "-",
                "yes" if b.nvswitch else "no",
                f"{b.airflow_cfm:,.0f}" if b.airflow_cfm else "-",
            )
        self.out.print(table)
        self.out.print("[dim]* estimate: no vendor figure found; sources are cited in "
                       "provisioner/inventory/catalog.yaml[/]")

    # -------------------------------------------------------------- per-node operations

    @contextmanager
    def node_progress(self, label: str, nodes: Sequence[str]
                      ) -> Iterator[Callable[[str, str, str], None]]:
        """A progress callback for fan-out work: a live bar on a terminal, one line per
        finished node otherwise, nothing in --json mode. Safe to call from worker threads."""
        lock = threading.Lock()
        if self.json_mode or self.quiet:
            yield lambda node, phase, detail: None
            return
        if not self.err.is_terminal:
            def plain(node: str, phase: str, detail: str) -> None:
                if phase != "start":
                    with lock:
                        self.err.print(f"{label}: {node}: {phase}"
                                       + (f": {escape(detail)}" if detail else ""))
            yield plain
            return
        progress = Progress(TextColumn(f"[bold]{escape(label)}[/]"), BarColumn(),
                            MofNCompleteColumn(), TextColumn("{task.fields[failed]} failed"),
                            TimeElapsedColumn(), console=self.err, transient=True)
        task = progress.add_task(label, total=len(nodes), failed=0)
        failed = 0

        def live(node: str, phase: str, detail: str) -> None:
            nonlocal failed
            if phase == "start":
                return
            with lock:
                failed += phase == "failed"
                progress.update(task, advance=1, failed=failed)

        with progress:
            yield live

    def bmc_results(self, operation: str, results: Sequence[NodeResult[Any]]) -> None:
        table = Table(title=f"bmc {operation}", title_justify="left")
        for col in ("node", "result", "time s"):
            table.add_column(col)
        for r in results:
            if r.ok:
                shown = _describe(r.value)
                table.add_row(r.node, f"[green]{escape(shown)}[/]", f"{r.elapsed_s:.1f}")
            else:
                table.add_row(r.node, f"[red]FAILED[/] {escape(r.error or '')}",
                              f"{r.elapsed_s:.1f}")
        self.out.print(table)
        failed = sum(not r.ok for r in results)
        self.out.print(f"{len(results) - failed} ok, {failed} failed")

    def artifacts(self, items: Sequence[Mapping[str, str]]) -> None:
        table = Table(title="What the rendered roles fetch (fill the mirror with these)",
                      title_justify="left")
        for col in ("kind", "name", "version", "role", "hosts"):
            table.add_column(col)
        for it in items:
            table.add_row(it["kind"], it["name"], it["version"] or "(any)", it["role"],
                          it["hosts"])
        self.out.print(table)

    def lab_state(self, state: LabState, where: Path) -> None:
        table = Table(title=f"lab for site {state.site} (latency {state.latency_ms} ms)",
                      title_justify="left")
        for col in ("process", "pid", "state"):
            table.add_column(col)
        for p in state.processes:
            table.add_row(p.role, str(p.pid), "[green]running[/]" if p.alive() else "[red]dead[/]")
        self.out.print(table)
        eps = Table(title="BMC endpoints", title_justify="left")
        for col in ("node", "endpoint"):
            eps.add_column(col)
        for node, ep in sorted(state.endpoints.items()):
            proto = "redfish" if "system_id" in ep else "ipmi"
            eps.add_row(node, f"{proto} {ep['address']}:{ep['port']}")
        self.out.print(eps)
        dead = set(state.dead())
        for kind, group in (("SSH test hosts", state.ssh_hosts),
                            ("execution nodes", state.execution_hosts)):
            if group:
                what = "ssh host" if group is state.ssh_hosts else "execution node"
                self.out.print(f"{kind}: " + ", ".join(
                    f"{h.name} {h.address}" + (" [red]dead[/]" if f"{what} {h.name}" in dead
                                               else "") for h in group))
        if state.mirror:
            m = state.mirror
            self.out.print(f"signed apt mirror: {m['url']} ({m['real_debs']} Debian "
                           f"packages, {m['standin_debs']} stand-ins; built in "
                           f"{m['build_s']:g} s; key {m['key_file']})")
            if m.get("wheelhouse"):
                self.out.print(f"Python wheelhouse for the execution nodes: {m['url']}wheels/ "
                               f"(cached in {m['wheelhouse']}; installed in "
                               f"{m.get('wheels_install_s', 0):g} s)")
        if state.switches:
            self.out.print("switch stand-ins (FRR vtysh over SSH, IOS-style dialect): "
                           + ", ".join(f"{s.name} 127.0.0.1:{s.port}" for s in state.switches))
        for note in state.notes:
            self.out.print(f"note: {escape(note)}")
        self.out.print(f"state and logs: {where}")


    # -------------------------------------------------------------- playbooks

    @contextmanager
    def playbook_progress(self, playbook: str) -> Iterator[Callable[[TaskEvent], None]]:
        """Per-host progress: changed and failed results as they happen (stderr)."""
        if self.json_mode or self.quiet:
            yield lambda ev: None
            return
        self.err.print(f"[bold]running {escape(playbook)}[/]")
        colors = {"changed": "yellow", "failed": "red", "unreachable": "red"}

        def show(ev: TaskEvent) -> None:
            if ev.status in colors:
                note = f": {escape(ev.message)}" if ev.message else ""
                mode = " (check mode)" if ev.check_mode else ""
                self.err.print(f"  [{colors[ev.status]}]{ev.status}[/] {ev.host} | "
                               f"{escape(ev.task)}{mode}{note}")

        yield show

    def run_result(self, result: RunResult) -> None:
        table = Table(title=f"{result.playbook}: {result.status}", title_justify="left")
        for col in ("host", "ok", "changed", "failed", "unreachable", "skipped"):
            table.add_column(col, justify="left" if col == "host" else "right")
        for host, s in result.hosts.items():
            table.add_row(host, str(s.ok), str(s.changed), str(s.failed), str(s.unreachable),
                          str(s.skipped))
        self.out.print(table)
        simulated = [e for e in result.simulated if e.status == "changed"]
        if simulated:
            self.out.print(f"{len(simulated)} of the changes were check-mode predictions "
                           "(steps the lab cannot run: "
                           + ", ".join(sorted({e.task for e in simulated})) + ")")
        for ev in result.failures:
            self.out.print(f"[red]{ev.status}[/] {ev.host} | {escape(ev.task)}: "
                           f"{escape(ev.message)}")
        self.out.print(f"logs: {result.artifact_dir}")


def _describe(value: Any) -> str:
    """One line for a per-node result."""
    if value is None:
        return "no reading"
    if isinstance(value, float):
        return f"{value:,.0f} W"
    device = getattr(value, "device", None)
    if device is not None:  # BootSetting
        once = {True: "persistent", False: "once", None: "once?"}[value.persistent]
        mode = value.mode.value if value.mode else "mode?"
        note = "" if value.verified else " (accepted; BMC cannot report it back)"
        return f"{device.value} {once} {mode}{note}"
    if hasattr(value, "gpus"):  # HardwareFacts
        gpus = ", ".join(f"{g.count}x {g.model}" for g in value.gpus) or "no GPUs reported"
        macs = ", ".join(value.macs) or "no MACs reported"
        firmware = ", ".join(f"{f.id} {f.version}" for f in value.firmware) or \
            "no firmware versions reported"
        return (f"{value.vendor or '?'} {value.model or ''} sn {value.serial or '?'}; "
                f"{gpus}; {macs}; firmware {firmware}")
    return str(value)
