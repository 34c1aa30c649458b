"""The state store's SQLite schema, one migration per version (sqlite.py applies them in
order and records the version in PRAGMA user_version)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

SCHEMA_VERSION = 3
MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE nodes (
        hostname     TEXT PRIMARY KEY,
        phase        TEXT NOT NULL,
        failed_phase TEXT,
        reason       TEXT,
        updated_at   REAL NOT NULL
    );
    CREATE TABLE runs (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        command     TEXT NOT NULL,
        started_at  REAL NOT NULL,
        ended_at    REAL,
        status      TEXT NOT NULL DEFAULT 'running',
        pid         INTEGER NOT NULL
    );
    CREATE TABLE events (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id      INTEGER REFERENCES runs(id),
        at          REAL NOT NULL,
        hostname    TEXT,
        kind        TEXT NOT NULL,
        from_phase  TEXT,
        to_phase    TEXT,
        detail      TEXT
    );
    CREATE INDEX events_host ON events(hostname, id);
    CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
        BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
    CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
        BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
    """,
    # The site lease (`lease`): one row while a changing run holds the site.
    2: """
    CREATE TABLE lease (
        id           INTEGER PRIMARY KEY CHECK (id = 1),
        command      TEXT NOT NULL,
        host         TEXT NOT NULL,
        pid          INTEGER NOT NULL,
        started_at   REAL NOT NULL,
        heartbeat_at REAL NOT NULL
    );
    """,
    # Who holds the lease, exactly (lease.identity): boot id, PID namespace and the
    # process's start time, so a reused PID is never taken for a live holder.
    3: """
    ALTER TABLE lease ADD COLUMN holder TEXT NOT NULL DEFAULT '';
    """,
}


def statements(script: str) -> Iterator[str]:
    """A migration's statements one by one (a trigger's body holds semicolons), so that they
    run inside the caller's transaction: executescript() would commit it first."""
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            yield buf
            buf = ""
    if buf.strip():
        raise ValueError(f"incomplete SQL statement at the end of a migration: {buf!r}")
