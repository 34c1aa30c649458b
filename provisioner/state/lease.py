"""The site lease, in the state database: one changing run per site even when CI runners on
several machines share the state (where the site lock's flock may not reach).

It survives a crash (the row stays). Whether its holder still lives is decided by what can
be known about it:

- the same machine and PID namespace (same host name, boot id and PID namespace): the
  holder is that exact process (PID and start time), so a crashed holder is taken over at
  once and a reused PID, our own included, is never mistaken for it;
- anything else (another machine; a runner container that shares the host name but not
  the PID namespace; a machine rebooted since): only its heartbeat tells, and the lease is
  stale once no heartbeat came for `stale_after_s`.

A holder whose heartbeat finds the row gone or taken over has lost the lease: it is told
(`on_lost`) and stops, instead of upgrading alongside the new holder.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from provisioner import pids
from provisioner.errors import StateError

Tx = Callable[[], AbstractContextManager[sqlite3.Connection]]
FIELDS = ("command", "host", "pid", "started_at", "heartbeat_at", "holder")
SELECT = "SELECT command, host, pid, started_at, heartbeat_at, holder FROM lease WHERE id = 1"


def identity(pid: int | None = None) -> str:
    """boot id / PID namespace / start time of `pid` (this process by default)."""
    pid = os.getpid() if pid is None else pid
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        pidns = os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return ""
    return f"{boot}/{pidns}/{pids.start_ticks(pid) or 0}"


def holder_alive(row: dict[str, Any], stale_after_s: float) -> tuple[bool, str]:
    """(whether the lease's holder lives, why it counts as gone when it does not)."""
    age_s = time.time() - float(row["heartbeat_at"])
    mine = identity().split("/")
    theirs = str(row.get("holder") or "").split("/")
    if row["host"] == socket.gethostname() and len(theirs) == 3 and len(mine) == 3 \
            and theirs[:2] == mine[:2]:
        alive = pids.start_ticks(int(row["pid"])) == int(theirs[2] or -1)
        return alive, "its process is gone"
    return age_s < stale_after_s, f"no heartbeat for {age_s:.0f} s"


def read(connect: Tx) -> dict[str, Any] | None:
    with connect() as db:
        row = db.execute(SELECT).fetchone()
    return None if row is None else dict(zip(FIELDS, row, strict=True))


@contextmanager
def hold(tx: Tx, command: str, *, stale_after_s: float, heartbeat_s: float,
         on_lost: Callable[[], None] | None = None) -> Iterator[list[str]]:
    """Take the lease (or refuse: StateError naming the holder); the notes say what was
    taken over. Heartbeats every `heartbeat_s` while held; released at the end."""
    me, pid, ident, notes = socket.gethostname(), os.getpid(), identity(), []
    with tx() as db:
        row = db.execute(SELECT).fetchone()
        if row is not None:
            held = dict(zip(FIELDS, row, strict=True))
            alive, why = holder_alive(held, stale_after_s)
            if alive:
                since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(held["started_at"]))
                raise StateError(
                    f"the site is held by `{held['command']}` (pid {held['pid']} on "
                    f"{held['host']}, since {since} UTC)",
                    hint="wait for it to finish; a crashed holder's lease is taken over "
                    f"once its process is gone (or after {stale_after_s:g} s without a "
                    "heartbeat from another machine)")
            notes.append(f"took over the stale lease of `{held['command']}` (pid "
                         f"{held['pid']} on {held['host']}): {why}")
        now = time.time()
        db.execute("INSERT OR REPLACE INTO lease (id, command, host, pid, started_at, "
                   "heartbeat_at, holder) VALUES (1, ?, ?, ?, ?, ?, ?)",
                   (command, me, pid, now, now, ident))
    done = threading.Event()

    def beat() -> None:
        while not done.wait(heartbeat_s):
            with contextlib.suppress(StateError, sqlite3.Error), tx() as db:
                cur = db.execute("UPDATE lease SET heartbeat_at = ? WHERE id = 1 AND "
                                 "host = ? AND pid = ? AND holder = ?",
                                 (time.time(), me, pid, ident))
                if cur.rowcount == 0 and not done.is_set():
                    notes.append("lost the site lease (another run took it over after "
                                 "this one's heartbeat went stale): stopped")
                    if on_lost is not None:
                        on_lost()
                    return

    threading.Thread(target=beat, daemon=True, name="lease-heartbeat").start()
    try:
        yield notes
    finally:
        done.set()
        with tx() as db:
            db.execute("DELETE FROM lease WHERE id = 1 AND host = ? AND pid = ? AND "
                       "holder = ?", (me, pid, ident))
