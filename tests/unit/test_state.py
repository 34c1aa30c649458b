"""State store: transitions with their events in one transaction, resume, append-only log,
migrations, crash consistency under kill -9."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from provisioner.errors import StateError
from provisioner.state import (
    LIFECYCLE,
    SCHEMA_VERSION,
    Phase,
    StateStore,
    backup_dir,
    next_phase,
)


@pytest.fixture
def store(tmp_path):
    return StateStore(tmp_path / ".provision" / "state.db")


def test_file_is_private_and_schema_versioned(store):
    assert oct(store.path.stat().st_mode & 0o777) == "0o600"
    assert store.schema_version == SCHEMA_VERSION
    # re-opening runs no migration twice
    assert StateStore(store.path).schema_version == SCHEMA_VERSION


def test_processes_opening_a_new_store_at_once_create_it_once(tmp_path):
    """A run and a `status` (or a test polling the store) opening a store that does not
    exist yet: the schema is created once, and neither fails (CI saw 'table nodes already
    exists' when the version was read outside the write lock)."""
    code = ("import sys; from provisioner.state import StateStore; "
            "StateStore(__import__('pathlib').Path(sys.argv[1])); print('ok')")
    for i in range(6):
        path = tmp_path / f"s{i}" / "state.db"
        procs = [subprocess.Popen([sys.executable, "-c", code, str(path)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(6)]
        results = [p.communicate(timeout=120) for p in procs]
        assert [(p.returncode, out.strip()) for p, (out, _) in zip(procs, results, strict=True)
                ] == [(0, "ok")] * 6, [err for _, err in results]
        assert StateStore(path).schema_version == SCHEMA_VERSION


def test_refuses_a_newer_schema(store):
    db = sqlite3.connect(store.path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StateError, match="newer than this tool"):
        StateStore(store.path)


def test_lifecycle_and_events(store):
    run = store.start_run("up")
    assert store.enroll(["n1", "n2"], run) == ["n1", "n2"]
    assert store.enroll(["n1", "n3"], run) == ["n3"]  # idempotent
    phase = Phase.ENROLLED
    while (nxt := next_phase(phase)) is not None:
        store.transition("n1", nxt, run_id=run, expect=phase)
        phase = nxt
    assert store.node("n1").phase is Phase.READY
    transitions = [(e.from_phase, e.to_phase) for e in store.events("n1")
                   if e.kind == "transition"]
    assert transitions == list(zip([p.value for p in LIFECYCLE[:-1]],
                                   [p.value for p in LIFECYCLE[1:]], strict=True))
    store.end_run(run, "ok")
    assert store.check_consistency() == []


def test_failure_keeps_the_phase_it_failed_in_and_the_reason(store):
    store.enroll(["n1"])
    store.transition("n1", Phase.INSPECTED)
    n = store.transition("n1", Phase.FAILED, reason="BMC timeout after 120 s")
    assert n.phase is Phase.FAILED and n.failed_phase is Phase.INSPECTED
    assert n.reason == "BMC timeout after 120 s"
    assert store.events("n1")[-1].detail["reason"] == "BMC timeout after 120 s"


def test_expect_guards_against_a_racing_run(store):
    store.enroll(["n1"])
    store.transition("n1", Phase.INSPECTED)
    with pytest.raises(StateError, match="is inspected, not enrolled"):
        store.transition("n1", Phase.INSPECTED, expect=Phase.ENROLLED)
    with pytest.raises(StateError, match="not enrolled"):
        store.transition("ghost", Phase.READY)


def test_event_log_is_append_only(store):
    store.enroll(["n1"])
    db = sqlite3.connect(store.path)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db.execute("UPDATE events SET kind = 'x'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db.execute("DELETE FROM events")
    db.close()


WRITER = """
import sys, time
from pathlib import Path
from provisioner.state import StateStore, LIFECYCLE
s = StateStore(Path(sys.argv[1]))
hosts = [f"n{i}" for i in range(20)]
s.enroll(hosts)
print("ready", flush=True)
while True:
    for h in hosts:
        cur = s.node(h).phase
        nxt = LIFECYCLE[(LIFECYCLE.index(cur) + 1) % len(LIFECYCLE)]
        s.transition(h, nxt, expect=cur, detail={"pad": "x" * 200})
"""


def test_kill_9_mid_transition_leaves_a_consistent_store(tmp_path):
    """SIGKILL a writer at 20 random moments: every time the store opens, passes SQLite's
    integrity check, and each node's phase matches its last transition event."""
    import random

    path = tmp_path / "state.db"
    rng = random.Random(1234)
    for _ in range(20):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.25))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        store = StateStore(path)
        assert store.check_consistency() == []
        assert len(store.nodes()) == 20
    assert len(StateStore(path).events()) > 20


def test_every_run_starts_with_a_private_online_backup(store):
    """start_run copies the store first (SQLite online backup): the copy holds what was
    committed before the run, is 0600 in a 0700 directory, and only the newest are kept."""
    from provisioner.state import KEEP_BACKUPS, backup_dir, backups

    assert backups(store.path) == []
    store.enroll(["dgx01"])
    store.transition("dgx01", Phase.INSPECTED)
    run = store.start_run("up")
    (first,) = backups(store.path)
    assert oct(first.path.stat().st_mode & 0o777) == "0o600"
    assert oct(backup_dir(store.path).stat().st_mode & 0o777) == "0o700"
    copy = StateStore(first.path)
    assert [(n.hostname, n.phase) for n in copy.nodes()] == [("dgx01", Phase.INSPECTED)]
    assert copy.runs() == []  # taken before this run was recorded
    assert copy.check_consistency() == []
    store.transition("dgx01", Phase.BOOTING, run_id=run)
    store.end_run(run, "ok")
    for _ in range(KEEP_BACKUPS + 2):
        store.start_run("up")
    kept = backups(store.path)
    assert len(kept) == KEEP_BACKUPS
    assert first.path not in {b.path for b in kept}
    # the newest copy has the phase committed by the earlier run
    assert StateStore(kept[0].path).node("dgx01").phase is Phase.BOOTING


def test_no_run_starts_without_a_backup(store):
    backup_dir(store.path).write_text("in the way")  # a file where the directory goes
    with pytest.raises(StateError, match="cannot back up"):
        store.start_run("up")
    assert store.runs() == []
