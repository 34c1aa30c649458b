"""The site lease (StateStore.lease): one changing run per site, surviving crashes, with a
stale rule by the holder's liveness: on this machine its process must exist, from another
machine its heartbeat must be recent."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from provisioner.errors import StateError
from provisioner.state import StateStore
from provisioner.state.lease import identity
from tests.conftest import ROOT

HOLDER = """
import sys
from pathlib import Path
from provisioner.state import StateStore
with StateStore(Path(sys.argv[1])).lease("upgrade apply --to 2026.11"):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_live_holder_refuses_a_second_run_and_a_killed_one_is_taken_over(
        tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    StateStore(db)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        store = StateStore(db)
        with pytest.raises(StateError, match=rf"pid {proc.pid} .*upgrade apply|"
                           rf"upgrade apply.*pid {proc.pid}"), store.lease("second"):
            pass
        proc.send_signal(signal.SIGKILL)  # a crash: no cleanup runs
        proc.wait()
        holder = store.lease_holder()
        assert holder is not None and holder["pid"] == proc.pid  # the row survived
        with store.lease("upgrade apply (re-run)") as notes:
            assert len(notes) == 1 and "its process is gone" in notes[0]
            assert store.lease_holder()["pid"] == os.getpid()  # type: ignore[index]
        assert store.lease_holder() is None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _foreign(db: Path, heartbeat_age_s: float) -> None:
    """A lease row as a runner on another machine leaves it."""
    now = time.time()
    with sqlite3.connect(db) as con:
        con.execute("INSERT OR REPLACE INTO lease (id, command, host, pid, started_at, "
                    "heartbeat_at) VALUES (1, 'upgrade apply', 'runner-on-another-host', "
                    "4242, ?, ?)", (now - 3600, now - heartbeat_age_s))


def test_another_machines_holder_is_stale_only_without_a_recent_heartbeat(
        tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    store = StateStore(db)
    _foreign(db, heartbeat_age_s=10)
    with pytest.raises(StateError, match="runner-on-another-host"), \
            store.lease("x", stale_after_s=600):
        pass
    _foreign(db, heartbeat_age_s=900)
    with store.lease("x", stale_after_s=600) as notes:
        assert "no heartbeat for 900 s" in notes[0]
    assert store.lease_holder() is None


def _held(db: Path, *, pid: int, holder: str, heartbeat_age_s: float) -> None:
    """A lease row on this machine's host name with the given holder identity."""
    now = time.time()
    with sqlite3.connect(db) as con:
        con.execute("INSERT OR REPLACE INTO lease (id, command, host, pid, started_at, "
                    "heartbeat_at, holder) VALUES (1, 'upgrade apply', ?, ?, ?, ?, ?)",
                    (socket.gethostname(), pid, now - 3600, now - heartbeat_age_s, holder))


def test_a_reused_pid_is_not_a_live_holder(tmp_path: Path) -> None:
    """The crashed holder had our PID (fixed PIDs in CI containers): same machine and PID
    namespace, another start time, so it is gone, taken over at once."""
    db = tmp_path / "state.db"
    store = StateStore(db)
    boot, pidns, ticks = identity().split("/")
    _held(db, pid=os.getpid(), holder=f"{boot}/{pidns}/{int(ticks) - 1}", heartbeat_age_s=1)
    with store.lease("x") as notes:
        assert "its process is gone" in notes[0]


def test_a_holder_this_process_cannot_see_is_judged_by_its_heartbeat(tmp_path: Path) -> None:
    """Same host name, another PID namespace (a runner container sharing the host name):
    its PID means nothing here, so a recent heartbeat keeps it, however its PID looks."""
    db = tmp_path / "state.db"
    store = StateStore(db)
    boot = identity().split("/")[0]
    _held(db, pid=999_999_999, holder=f"{boot}/1/1", heartbeat_age_s=5)
    with pytest.raises(StateError, match="held by `upgrade apply`"), store.lease("x"):
        pass
    _held(db, pid=999_999_999, holder=f"{boot}/1/1", heartbeat_age_s=900)
    with store.lease("x", stale_after_s=600) as notes:
        assert "no heartbeat for 900 s" in notes[0]


def test_a_holder_whose_lease_was_taken_over_is_told_at_its_next_heartbeat(
        tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    store = StateStore(db)
    lost = threading.Event()
    with store.lease("first", heartbeat_s=0.05, on_lost=lost.set) as notes:
        _foreign(db, heartbeat_age_s=0)  # another machine took it over meanwhile
        assert lost.wait(30)
        assert any("lost the site lease" in n for n in notes)
    assert store.lease_holder() is not None  # the new holder's row is left alone
