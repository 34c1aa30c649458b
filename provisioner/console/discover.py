"""Terminal output of `provision discover` and `provision add` (kept out of console/__init__.py,
which holds the other commands' tables)."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from provisioner.console import Console
from provisioner.results.discover import AddReport, DiscoverReport


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


def add_summary(out: Console, report: AddReport) -> None:
    """Where the node goes, the budgets after it, the diff, and what happened to it."""
    conf = f" ({report.confidence:.0%} fingerprint)" if report.confidence is not None else ""
    out.info(f"[bold]{report.hostname}[/]: {report.block}{conf} in rack {report.rack} at "
             f"U{report.u}; BMC {report.bmc_address}"
             + (f":{report.bmc_port}" if report.bmc_port else ""))
    addrs = ", ".join(f"{k} {v}" for k, v in report.addresses.items())
    out.info(f"  addresses: {addrs}")
    for link in report.links:
        out.info(f"  {link.nic}: {link.switch} {link.switch_port}")
    for r in report.racks:
        if r.rack == report.rack:
            out.info(f"  rack {r.rack} after: {r.load_w_after:,.0f} W of "
                     f"{r.usable_va:,.0f} VA usable per feed, cooling {r.cooling_limit_w:,.0f} W")
    out.out.print(escape(report.diff), end="")
    if report.applied:
        out.info(f"written to {report.file}; {report.hostname} enrolled")
    elif report.patch:
        out.info(f"not written (no --yes); the change is in {report.patch} "
                 f"(git apply, or patch -p1 in the site directory)")
    if report.imex_peers_to_refresh:
        peers = ",".join(report.imex_peers_to_refresh)
        out.warn(f"IMEX: {report.hostname} joins the NVLink domain of rack {report.rack}, "
                 f"whose other nodes ({peers}) list it in nodes_config.cfg only once "
                 f"`provision up --limit {peers}` runs on them; that restarts their IMEX "
                 "and ends the domain's running multi-node jobs (a maintenance window)")
