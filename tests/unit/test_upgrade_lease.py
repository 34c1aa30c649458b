"""The site lease (StateStore.lease): one changing run per site, surviving crashes, with a
stale rule by the holder's liveness: on this machine its process must exist, from another
machine its heartbeat must be recent."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provisioner.errors import StateError
from provisioner.state import StateStore
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
        con.execute("INSERT OR REPLACE INTO lease VALUES (1, 'upgrade apply', "
                    "'runner-on-another-host', 4242, ?, ?)",
                    (now - 3600, now - heartbeat_age_s))


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
