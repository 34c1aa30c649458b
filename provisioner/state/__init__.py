"""Durable per-node state: SQLite (standard library) in WAL mode under the site's .provision/.

Tables: nodes (current phase), runs, and an append-only event log. Every phase transition
is one transaction that updates the node and appends its event together, so a run killed
at any point leaves either the old state or the new one, never half of each, and the next
run resumes from what is recorded. Every transition is checked against the lifecycle
(lifecycle.py): a move it does not allow is a StateError and changes nothing.

Before every run (`start_run`) the whole database is copied with SQLite's online backup
API into `<state>.backups/` (owner-only files, the last KEEP_BACKUPS kept): a store damaged
or deleted later can be put back from there (`provision status` names the newest copy).
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.errors import StateError, redact
from provisioner.lifecycle import LIFECYCLE, Phase, allowed, next_phase
from provisioner.state.backup import KEEP_BACKUPS, Backup, backup_dir, backups
from provisioner.state.backup import take as take_backup
from provisioner.state.errors import gone, translate
from provisioner.state.lease import hold as hold_lease
from provisioner.state.lease import read as read_lease
from provisioner.state.schema import SCHEMA_VERSION
from provisioner.state.sqlite import StateFile, empty

__all__ = ["KEEP_BACKUPS", "LIFECYCLE", "SCHEMA_VERSION", "Backup", "Event", "NodeState",
           "Phase", "StateStore", "backup_dir", "backups", "next_phase", "open_read_only"]


@dataclass(frozen=True)
class NodeState:
    hostname: str
    phase: Phase
    failed_phase: Phase | None
    reason: str | None
    updated_at: float


@dataclass(frozen=True)
class Event:
    id: int
    run_id: int | None
    at: float
    hostname: str | None
    kind: str
    from_phase: str | None
    to_phase: str | None
    detail: dict[str, Any]


class StateStore(StateFile):
    """One site's state database. Safe for several threads (one connection per call).

    `read_only`: for commands that only look (status, plan, report): the file is opened
    with SQLite's mode=ro and nothing is created, migrated or written, so a store on
    read-only media still reads; every SQLite failure is a StateError saying what it means
    (state/errors.py), never SQLite's own words alone. Opening, connections and
    transactions: state/sqlite.py, StateFile."""

    # -------------------------------------------------------- runs

    def backup(self, keep: int = KEEP_BACKUPS) -> Path:
        """A consistent, checked copy of the whole store before a run (backup.take);
        a failed one leaves nothing behind and no run starts."""
        try:
            return take_backup(self._sqlite, self.path, keep)
        except (OSError, sqlite3.Error) as exc:
            raise translate(
                exc, self.path, f"cannot back up the state store {self.path} (no run starts "
                "without a backup)") from exc

    def start_run(self, command: str, *, backup: bool = True) -> int:
        """Record a run as started; first back the store up (see `backup`)."""
        if backup:
            self.backup()
        with self._tx() as db:
            cur = db.execute("INSERT INTO runs (command, started_at, pid) VALUES (?, ?, ?)",
                             (command, time.time(), os.getpid()))
            run_id = int(cur.lastrowid or 0)
            db.execute("INSERT INTO events (run_id, at, kind, detail) VALUES (?, ?, ?, ?)",
                       (run_id, time.time(), "run_started", json.dumps({"command": command})))
        return run_id

    def end_run(self, run_id: int, status: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE runs SET ended_at = ?, status = ? WHERE id = ?",
                       (time.time(), status, run_id))
            db.execute("INSERT INTO events (run_id, at, kind, detail) VALUES (?, ?, ?, ?)",
                       (run_id, time.time(), "run_ended", json.dumps({"status": status})))

    def close_stale_runs(self) -> list[int]:
        """Mark runs still recorded as running as killed. Call only while holding the site
        lock (`exclusive`): then no other run can be live, so 'running' means it died."""
        with self._tx() as db:
            stale = [int(r[0]) for r in db.execute("SELECT id FROM runs WHERE status = 'running'")]
            for run_id in stale:
                db.execute("UPDATE runs SET status = 'killed' WHERE id = ?", (run_id,))
                db.execute("INSERT INTO events (run_id, at, kind, detail) VALUES (?, ?, ?, ?)",
                           (run_id, time.time(), "run_ended",
                            json.dumps({"status": "killed", "noticed_by_pid": os.getpid()})))
        return stale

    def runs(self, limit: int = 20) -> list[dict[str, Any]]:
        """The latest runs, newest first."""
        with self._connect() as db:
            rows = db.execute("SELECT id, command, started_at, ended_at, status, pid FROM runs "
                              "ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [{"id": r[0], "command": r[1], "started_at": r[2], "ended_at": r[3],
                 "status": r[4], "pid": r[5]} for r in rows]

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the site's lock for a run that changes nodes: a second `up` on the same site
        is refused instead of racing the first for its nodes."""
        lock_path = Path(str(self.path) + ".lock")
        what = f"cannot take the site lock {lock_path}"
        try:
            fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as exc:
            raise translate(exc, self.path, what) from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                raise StateError(f"another run (pid {holder}) holds {lock_path}",
                                 hint="wait for it to finish; `provision status` shows it"
                                 ) from None
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
            except OSError as exc:  # a full disk: not even the holder's pid fits
                raise translate(exc, self.path, what) from exc
            yield
        finally:
            os.close(fd)  # releases the lock; the kernel also releases it if we are killed

    def lease(self, command: str, *, stale_after_s: float = 600.0,
              heartbeat_s: float = 30.0, on_lost: Callable[[], None] | None = None
              ) -> AbstractContextManager[list[str]]:
        """The site lease (state/lease.py): one changing run per site, across machines
        sharing the state; a stale one is taken over and said so (the notes yielded)."""
        return hold_lease(self._tx, command, stale_after_s=stale_after_s,
                          heartbeat_s=heartbeat_s, on_lost=on_lost)

    def lease_holder(self) -> dict[str, Any] | None:
        return read_lease(self._connect)

    # -------------------------------------------------------- nodes

    def enroll(self, hostnames: Sequence[str], run_id: int | None = None,
               phase: Phase = Phase.ENROLLED) -> list[str]:
        """Add nodes not yet known, in phase enrolled (or discovered, for a node found on
        the network that the inventory does not name yet). Returns the ones added."""
        if phase not in (Phase.ENROLLED, Phase.DISCOVERED):
            raise StateError(f"a new node starts enrolled or discovered, not {phase.value}")
        added = []
        with self._tx() as db:
            known = {r[0] for r in db.execute("SELECT hostname FROM nodes")}
            now = time.time()
            for host in hostnames:
                if host in known:
                    continue
                db.execute("INSERT INTO nodes (hostname, phase, updated_at) VALUES (?, ?, ?)",
                           (host, phase.value, now))
                db.execute("INSERT INTO events (run_id, at, hostname, kind, to_phase) "
                           "VALUES (?, ?, ?, ?, ?)",
                           (run_id, now, host, phase.value, phase.value))
                added.append(host)
        return added

    def transition(self, hostname: str, to: Phase, *, run_id: int | None = None,
                   expect: Phase | None = None, reason: str | None = None,
                   detail: dict[str, Any] | None = None) -> NodeState:
        """Move a node to `to` (one transaction with its event). With `expect`, refuse if the
        node is not in that phase (two runs racing for one node)."""
        with self._tx() as db:
            row = db.execute("SELECT phase, failed_phase FROM nodes WHERE hostname = ?",
                             (hostname,)).fetchone()
            if row is None:
                raise StateError(f"{hostname} is not enrolled in the state store")
            current = Phase(row[0])
            if expect is not None and current is not expect:
                raise StateError(f"{hostname} is {current.value}, not {expect.value}",
                                 hint="another run may be working on this node")
            if allowed(current, to, Phase(row[1]) if row[1] else None) is None:
                raise StateError(f"{hostname}: the lifecycle allows no move from "
                                 f"{current.value} to {to.value}",
                                 hint="see provisioner/lifecycle.py for the allowed moves")
            failed_phase = current.value if to is Phase.FAILED else None
            now = time.time()
            db.execute("UPDATE nodes SET phase = ?, failed_phase = ?, reason = ?, updated_at = ?"
                       " WHERE hostname = ?",
                       (to.value, failed_phase, redact(reason or "") or None, now, hostname))
            db.execute("INSERT INTO events (run_id, at, hostname, kind, from_phase, to_phase,"
                       " detail) VALUES (?, ?, ?, 'transition', ?, ?, ?)",
                       (run_id, now, hostname, current.value, to.value,
                        redact(json.dumps({**(detail or {}),
                                           **({"reason": reason} if reason else {})},
                                          sort_keys=True))))
        return self.node(hostname)

    def adopt(self, ident: str, hostname: str, *, run_id: int | None = None,
              detail: dict[str, Any] | None = None) -> NodeState:
        """The discovered node `ident` becomes `hostname` (`provision add` placed it), moving
        on to enrolled: one transaction, so no stale discovered row is left. The id's events
        stay (the history), the last one `added`, naming the host."""
        with self._tx() as db:
            row = db.execute("SELECT phase FROM nodes WHERE hostname = ?", (ident,)).fetchone()
            if row is None or row[0] != Phase.DISCOVERED.value:
                raise StateError(f"{ident} is not a discovered node in the state store")
            if db.execute("SELECT 1 FROM nodes WHERE hostname = ?", (hostname,)).fetchone():
                raise StateError(f"{hostname} is in the state store already",
                                 hint="choose another name with --name")
            now, before = time.time(), Phase.DISCOVERED.value
            db.execute("UPDATE nodes SET hostname = ?, phase = ?, updated_at = ? WHERE "
                       "hostname = ?", (hostname, Phase.ENROLLED.value, now, ident))
            db.execute("INSERT INTO events (run_id, at, hostname, kind, detail) VALUES (?, ?, ?,"
                       " 'added', ?)", (run_id, now, ident, json.dumps({"hostname": hostname})))
            db.execute("INSERT INTO events (run_id, at, hostname, kind, from_phase, to_phase,"
                       " detail) VALUES (?, ?, ?, 'transition', ?, ?, ?)",
                       (run_id, now, hostname, before, Phase.ENROLLED.value,
                        json.dumps(detail or {}, sort_keys=True)))
        return self.node(hostname)

    def record(self, hostname: str | None, kind: str, detail: dict[str, Any],
               run_id: int | None = None) -> None:
        """Append an event that changes no phase (for example: OS install skipped in the lab)."""
        with self._tx() as db:
            db.execute("INSERT INTO events (run_id, at, hostname, kind, detail) "
                       "VALUES (?, ?, ?, ?, ?)",
                       (run_id, time.time(), hostname, kind,
                        redact(json.dumps(detail, sort_keys=True))))

    def node(self, hostname: str) -> NodeState:
        with self._connect() as db:
            row = db.execute("SELECT hostname, phase, failed_phase, reason, updated_at "
                             "FROM nodes WHERE hostname = ?", (hostname,)).fetchone()
        if row is None:
            raise StateError(f"{hostname} is not enrolled in the state store")
        return _node(row)

    def nodes(self) -> list[NodeState]:
        with self._connect() as db:
            rows = db.execute("SELECT hostname, phase, failed_phase, reason, updated_at "
                              "FROM nodes ORDER BY hostname").fetchall()
        return [_node(r) for r in rows]

    def events(self, hostname: str | None = None, kind: str | None = None) -> list[Event]:
        query = ("SELECT id, run_id, at, hostname, kind, from_phase, to_phase, detail "
                 "FROM events")
        where = [(c, v) for c, v in (("hostname", hostname), ("kind", kind)) if v is not None]
        args: tuple[Any, ...] = tuple(v for _, v in where)
        if where:
            query += " WHERE " + " AND ".join(f"{c} = ?" for c, _ in where)
        with self._connect() as db:
            rows = db.execute(query + " ORDER BY id", args).fetchall()
        return [Event(r[0], r[1], r[2], r[3], r[4], r[5], r[6], json.loads(r[7] or "{}"))
                for r in rows]

    def check_consistency(self) -> list[str]:
        """Problems a crash could have caused (none expected): every node's phase must be
        the to_phase of its last transition event, and the database must pass SQLite's own
        integrity check."""
        problems = []
        with self._connect() as db:
            if db.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
                problems.append("sqlite integrity_check failed")
            for host, phase in db.execute("SELECT hostname, phase FROM nodes"):
                last = db.execute("SELECT to_phase FROM events WHERE hostname = ? AND "
                                  "to_phase IS NOT NULL ORDER BY id DESC LIMIT 1",
                                  (host,)).fetchone()
                if last is None or last[0] != phase:
                    problems.append(f"{host}: phase {phase} but last event says "
                                    f"{last[0] if last else None}")
        return problems


def open_read_only(path: Path) -> StateStore | None:
    """The store at `path` for a command that only reads it; None when there is none yet,
    and a StateError when it is gone but its backups are there (deleted, not never made)."""
    if empty(path):
        if kept := backups(path):
            raise gone(path, kept[0].path)
        return None
    return StateStore(path, read_only=True)


def _node(row: Sequence[Any]) -> NodeState:
    return NodeState(hostname=row[0], phase=Phase(row[1]),
                     failed_phase=Phase(row[2]) if row[2] else None, reason=row[3],
                     updated_at=float(row[4]))
