"""Terminal output of `provision discover` and `provision add` (kept out of console.py,
which holds the other commands' tables)."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from provisioner.console import Console
from provisioner.results.discover import DiscoverReport


def discover_table(out: Console, report: DiscoverReport) -> None:
    if not report.nodes:
        out.info(f"no unknown BMC among {report.probed_addresses} address(es) "
                 f"({report.known_skipped} known BMC(s) skipped)")
        return
    table = Table(title=f"discovered on site {report.site}", title_justify="left")
    for col in ("id", "BMC", "hardware", "block", "why"):
        table.add_column(col)
    for n in report.nodes:
        gpus = ", ".join(f"{g.count}x {g.model}" for g in n.gpus) or "no GPUs"
        hw = f"{n.vendor or '?'} {n.model or '?'} #{n.serial or '?'}; {gpus}" \
            if not n.error else f"[red]{escape(n.error)}[/]"
        block = (f"[green]{n.block}[/] {n.confidence:.0%}" if n.block
                 else "[yellow]unknown[/]")
        why = "; ".join(n.reasons[:6])
        table.add_row(n.id + ("" if n.new else " (seen before)"),
                      f"{n.protocol} {n.address}:{n.port}", escape(hw), block, escape(why))
    out.out.print(table)
    out.info(f"{len(report.nodes)} new BMC(s) recorded as discovered; "
             f"{report.known_skipped} known skipped; login: {report.credentials}. "
             "Next: provision add --discovered ID")
