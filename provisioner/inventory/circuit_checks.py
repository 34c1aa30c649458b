"""Shared upstream circuits: the names feeds point at, and the budget summed per circuit.

One panel or floor-PDU breaker, or one busway, often feeds several racks. A rack's own feed
can be within its breaker while the circuit upstream of it is not: the circuit carries the
sum. power.circuit_budgets does the arithmetic; this turns it into findings with the
circuit's and each rack feed's file:line. No I/O.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

from provisioner import power
from provisioner.inventory.findings import Category, Severity
from provisioner.inventory.loader import KeyPath, LoadedSite

Emit = Callable[..., None]


def check(loaded: LoadedSite, emit: Emit, report: power.BudgetReport) -> None:
    """Circuit names (duplicates, unknown references), 2N pairs on one circuit, feed names
    that look shared but declare no circuit, and circuits over their derated capacity."""
    site = loaded.site
    circuits: dict[str, int] = {}
    for ci, c in enumerate(site.circuits):
        if c.name in circuits:
            first = loaded.sources.locate(("circuits", circuits[c.name]))
            emit("duplicate-circuit", ("circuits", ci, "name"),
                 f"circuit '{c.name}' is defined twice (also at {first.file}:{first.line})",
                 "give every circuit a unique name")
        else:
            circuits[c.name] = ci
    by_name: dict[str, list[tuple[int, int]]] = {}  # feed name -> (rack, feed) indexes
    for ri, rack in enumerate(site.racks):
        for fi, feed in enumerate(rack.feeds):
            by_name.setdefault(feed.name, []).append((ri, fi))
            if feed.circuit is not None and feed.circuit not in circuits:
                close = difflib.get_close_matches(feed.circuit, list(circuits), n=1)
                emit("unknown-circuit", ("racks", ri, "feeds", fi, "circuit"),
                     f"rack {rack.name} feed {feed.name}: unknown circuit '{feed.circuit}'",
                     f"did you mean '{close[0]}'?" if close else
                     "declare it under circuits: {name, phase, voltage_v, breaker_a} "
                     f"(known: {', '.join(sorted(circuits)) or 'none'})")
        on_one = {f.circuit for f in rack.feeds}
        if rack.redundancy == "2N" and len(on_one) == 1 and None not in on_one:
            emit("2n-shared-circuit", ("racks", ri, "feeds"),
                 f"rack {rack.name}: both 2N feeds come from circuit '{rack.feeds[0].circuit}',"
                 " so one tripped breaker drops the whole rack",
                 "wire feed B from another circuit (another PDU or panel)",
                 severity=Severity.WARNING, category=Category.BUDGET)
    _shared_names(loaded, emit, by_name)
    _over(loaded, emit, report, circuits)


def _shared_names(loaded: LoadedSite, emit: Emit,
                  by_name: dict[str, list[tuple[int, int]]]) -> None:
    """A feed name used in more than one rack, where some of those feeds declare no
    circuit, may be one breaker counted as several (its load not summed). Single-character
    names are the A/B side labels of a 2N pair (every rack has an A and a B), not circuit
    names: never warned."""
    racks = loaded.site.racks
    for name, at in by_name.items():
        bare = [(ri, fi) for ri, fi in at if racks[ri].feeds[fi].circuit is None]
        if len(name) == 1 or not bare or len({ri for ri, _ in at}) < 2:
            continue
        names = ", ".join(dict.fromkeys(racks[ri].name for ri, _ in at))
        without = ", ".join(dict.fromkeys(racks[ri].name for ri, _ in bare))
        ri, fi = bare[0]
        emit("feed-name-shared", ("racks", ri, "feeds", fi, "name"),
             f"feed name '{name}' is used in racks {names} and declares no circuit in "
             f"{without}: if these feeds hang off one breaker or busway, their loads are not "
             "summed against it",
             "declare it under circuits: and set circuit: on each of these feeds, "
             "or give the feeds distinct names",
             severity=Severity.WARNING, category=Category.BUDGET)


def _over(loaded: LoadedSite, emit: Emit, report: power.BudgetReport,
          circuits: dict[str, int]) -> None:
    """One finding per circuit over its derated capacity, at the circuit, with where each
    rack's feed on it is written."""
    rack_index = {r.name: i for i, r in enumerate(loaded.site.racks)}
    for cb in report.circuits:
        for f in cb.failures:
            where = []
            for ld in cb.loads:
                ri = rack_index[ld.rack]
                fi = next((k for k, fd in enumerate(loaded.site.racks[ri].feeds)
                           if fd.name == ld.feeds[0]), 0)  # 0: a rack name given twice
                loc = loaded.sources.locate(("racks", ri, "feeds", fi))
                where.append(f"{ld.rack} {ld.feeds[0]} at {loc.file}:{loc.line}")
            path: KeyPath = ("circuits", circuits[cb.name])
            emit("circuit-over-budget", path, f"{f.message}; the feeds: {', '.join(where)}",
                 "move racks to another circuit or provision a larger one",
                 category=Category.BUDGET)
