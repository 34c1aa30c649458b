"""Node states for the report, read from the site's state store without changing it.

The store is opened read-only and only when its file exists (`open_read_only`): a report
must not leave anything behind in the site, and it reads a store on read-only media.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from provisioner.inventory.loader import LoadedSite
from provisioner.inventory.topology import servers
from provisioner.profile import for_site
from provisioner.state import Phase, open_read_only

RUNS_SHOWN = 10


@dataclass(frozen=True)
class NodeRow:
    hostname: str
    rack: str | None  # None: in the store, no longer in the inventory
    phase: str
    since: str  # ISO 8601 UTC
    age: str  # "3 h" before the report was made
    failed_phase: str | None
    reason: str | None

    @property
    def failed(self) -> bool:
        return self.phase == Phase.FAILED.value


@dataclass(frozen=True)
class RunRow:
    id: int
    command: str
    started_at: str
    ended_at: str | None
    status: str


@dataclass(frozen=True)
class StateView:
    path: str
    exists: bool
    nodes: tuple[NodeRow, ...]
    runs: tuple[RunRow, ...]
    not_enrolled: tuple[str, ...]  # inventory servers the store does not know yet

    @property
    def phases(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.phase] = counts.get(n.phase, 0) + 1
        return counts


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def _age(seconds: float) -> str:
    s = max(seconds, 0.0)
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if s >= size:
            return f"{s / size:.0f} {unit}"
    return f"{s:.0f} s"


def read_state(loaded: LoadedSite, *, wanted: bool, now: datetime) -> StateView | None:
    """The state section: None when not asked for and no store exists."""
    path = for_site(loaded).state_path
    store = open_read_only(path)
    if store is None:
        if not wanted:
            return None
        return StateView(path=str(path), exists=False, nodes=(), runs=(), not_enrolled=())
    rack_of = {n.hostname: p.rack for p in loaded.site.placements for n in p.nodes}
    now_ts = now.timestamp()
    nodes = tuple(
        NodeRow(hostname=s.hostname, rack=rack_of.get(s.hostname), phase=s.phase.value,
                since=_iso(s.updated_at), age=_age(now_ts - s.updated_at),
                failed_phase=s.failed_phase.value if s.failed_phase else None, reason=s.reason)
        for s in store.nodes())
    known = {n.hostname for n in nodes}
    missing = tuple(s.hostname for s in servers(loaded) if s.hostname not in known)
    runs = tuple(RunRow(id=r["id"], command=r["command"], started_at=_iso(r["started_at"]),
                        ended_at=_iso(r["ended_at"]) if r["ended_at"] else None,
                        status=r["status"]) for r in store.runs(RUNS_SHOWN))
    return StateView(path=str(path), exists=True, nodes=nodes, runs=runs, not_enrolled=missing)
