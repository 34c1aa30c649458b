"""The state store under faults, on real file systems: a full disk (a tmpfs of a few hundred
KiB, filled), read-only media (that tmpfs remounted read-only), damaged pages (bytes of the
SQLite file overwritten at a table's root page) and a deleted store with its backups beside
it. Each is a StateError (exit 8) naming the true cause and, where a restore is the fix, the
newest complete backup; never SQLite's words alone, never an internal error."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner.cli import app
from provisioner.errors import ExitCode, StateError
from provisioner.inventory.loader import load
from provisioner.lifecycle import Phase
from provisioner.state import KEEP_BACKUPS, StateStore, backup_dir, backups, open_read_only
from provisioner.state.dir import GITIGNORE, ensure_private_dir
from provisioner.workflows import report
from tests.conftest import EXAMPLE


class SmallDisk:
    """A tmpfs mounted at `path`: filled to the last byte, freed, remounted read-only."""

    def __init__(self, path: Path, size_kib: int) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0700",
                               "tmpfs", str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
        self.filler = path / "filler"

    def fill(self) -> None:
        fd = os.open(self.filler, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
        try:
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * 4096)
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0")
        finally:
            os.close(fd)
        assert os.statvfs(self.path).f_bavail == 0

    def free(self) -> None:
        self.filler.unlink()

    def remount(self, mode: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{mode}", str(self.path)], check=True)

    def unmount(self) -> None:
        if subprocess.run(["umount", str(self.path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(self.path)], check=True)


@pytest.fixture
def mount_small_disk() -> Iterator[Callable[..., SmallDisk]]:
    """Mount a small disk where a test says; every one is unmounted at the end."""
    mounted: list[SmallDisk] = []

    def mount(path: Path, size_kib: int = 256) -> SmallDisk:
        mounted.append(SmallDisk(path, size_kib))
        return mounted[-1]

    try:
        yield mount
    finally:
        for disk in reversed(mounted):
            disk.unmount()


@pytest.fixture
def small_disk(mount_small_disk, tmp_path: Path) -> SmallDisk:
    return mount_small_disk(tmp_path / "disk")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    dest = tmp_path / "site"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns(".provision"))
    return dest


def _store_with_history(path: Path, runs: int = 3) -> StateStore:
    store = StateStore(path)
    store.enroll(["dgx01", "dgx02"])
    store.transition("dgx01", Phase.INSPECTED)
    for _ in range(runs):
        run = store.start_run("up")
        store.record("dgx01", "note", {"pad": "x" * 300}, run_id=run)
        store.end_run(run, "ok")
    return store


def _files(where: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(where.iterdir())}


def _cli(*args: str) -> tuple[int, str]:
    """Exit code and everything printed (stdout and stderr)."""
    done = CliRunner().invoke(app, list(args), terminal_width=400)
    return done.exit_code, done.output


# ----------------------------------------------------------------------- full disk


def test_refused_backups_on_a_full_disk_leave_nothing_and_keep_the_good_ones(small_disk):
    """Four runs refused on a full disk, then one that works: the refusals left no file, the
    message says the disk is full (not "disk I/O error"), and the rotation kept every good
    backup (it used to keep four 0-byte files and delete the good copies)."""
    store = _store_with_history(small_disk.path / ".provision" / "state.db")
    good = [b.path for b in backups(store.path)]
    assert len(good) == 3
    before = _files(backup_dir(store.path))
    small_disk.fill()
    for _ in range(4):
        with pytest.raises(StateError) as err:
            store.start_run("up")
        assert "disk is full" in err.value.message
        assert "cannot back up" in err.value.message
        assert "intact" in (err.value.hint or "")
        assert "disk I/O error" not in str(err.value)
    assert _files(backup_dir(store.path)) == before  # no 0-byte or partial copy left
    small_disk.free()
    assert [r["command"] for r in store.runs()] == ["up"] * 3  # no run was recorded
    store.end_run(store.start_run("up"), "ok")
    kept = [b.path for b in backups(store.path)]
    assert len(kept) == 4 and kept[1:] == good
    for p in kept:
        copy = open_read_only(p)
        assert copy is not None and copy.node("dgx01").phase is Phase.INSPECTED


def test_a_write_on_a_full_disk_says_so_and_changes_nothing(small_disk):
    store = _store_with_history(small_disk.path / ".provision" / "state.db", runs=1)
    small_disk.fill()
    with pytest.raises(StateError) as err:
        store.transition("dgx01", Phase.BOOTING, detail={"pad": "y" * 20_000})
    assert "disk is full" in err.value.message and "nothing needs restoring" in (
        err.value.hint or "")
    small_disk.free()
    assert store.node("dgx01").phase is Phase.INSPECTED
    assert store.check_consistency() == []


def test_the_site_lock_on_a_full_disk_says_so(small_disk):
    """Writing the holder's pid into a new lock file needs a block the full disk lacks: an
    OSError that used to reach the user as `internal error`."""
    store = _store_with_history(small_disk.path / ".provision" / "state.db", runs=0)
    keep = sqlite3.connect(store.path)  # holds the WAL index, so reads need no new space
    try:
        keep.execute("SELECT 1 FROM nodes").fetchall()
        small_disk.fill()
        with pytest.raises(StateError, match="cannot take the site lock") as err, \
                store.exclusive():
            pass
        assert "disk is full" in err.value.message
    finally:
        keep.close()


def test_status_on_a_full_disk_is_exit_8_saying_disk_full(mount_small_disk, site):
    """`status` on a full disk: SQLite cannot grow the WAL index and said "disk I/O error",
    which the tool passed on with "restore it from a backup" (the store was fine)."""
    disk = mount_small_disk(site / ".provision")
    store = _store_with_history(disk.path / "state.db", runs=1)
    disk.fill()
    code, out = _cli("status", str(site))
    assert code == ExitCode.STATE, out
    assert "disk is full" in out and "restore" not in out and "internal error" not in out
    disk.free()
    assert store.node("dgx01").phase is Phase.INSPECTED


def test_rotation_counts_only_complete_backups(tmp_path):
    """Files an earlier failure left in the backup directory (0-byte, cut short) are neither
    counted by the rotation nor named as the newest backup."""
    store = _store_with_history(tmp_path / ".provision" / "state.db", runs=KEEP_BACKUPS)
    good = [b.path for b in backups(store.path)]
    assert len(good) == KEEP_BACKUPS
    where = backup_dir(store.path)
    cut = where / "state-29990101T000000.000000001Z.db"
    cut.write_bytes(good[0].read_bytes()[: 4096 * 3])  # a copy cut short, newest by name
    for i in range(4):
        (where / f"state-29990101T000000.00000000{i + 2}Z.db").touch()  # 0-byte leftovers
    assert [b.path for b in backups(store.path)] == good  # neither kind is a backup
    newest = store.backup()
    assert [b.path for b in backups(store.path)] == [newest, *good[:-1]]
    assert cut.exists()  # not empty: left for whoever wants to look at it, never counted
    assert not any(p.stat().st_size == 0 for p in where.iterdir())


def test_a_private_dir_on_a_full_disk_never_gets_an_empty_gitignore(small_disk):
    """A .gitignore half-written on a full disk used to stay empty for good (it was only
    written when missing): the site's git would then commit .provision/."""
    target = small_disk.path / ".provision"
    target.mkdir()
    small_disk.fill()
    with pytest.raises(StateError, match="cannot prepare") as err:
        ensure_private_dir(target)
    assert "disk is full" in (err.value.hint or "")
    assert not (target / ".gitignore").exists() or (target / ".gitignore").read_text()
    small_disk.free()
    (target / ".gitignore").write_text("")  # what an earlier version left
    ensure_private_dir(target)
    assert (target / ".gitignore").read_text() == GITIGNORE
    assert sorted(p.name for p in target.iterdir()) == [".gitignore"]


# ----------------------------------------------------------------------- damaged pages


def _damage(path: Path, table: str) -> None:
    """Overwrite `table`'s root page with garbage (the store closed, its WAL checkpointed)."""
    db = sqlite3.connect(path)
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    (root,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?",
                         (table,)).fetchone()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    with path.open("r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xa5" * page_size)


@pytest.mark.parametrize("table", ["runs", "events"])
def test_a_damaged_page_is_a_state_error_naming_the_backup(tmp_path, table):
    store = _store_with_history(tmp_path / ".provision" / "state.db")
    newest = backups(store.path)[0].path
    _damage(store.path, table)
    read = open_read_only(store.path)
    assert read is not None
    reader = read.runs if table == "runs" else read.events
    with pytest.raises(StateError) as err:
        reader()
    assert "damaged" in err.value.message
    assert f"cp {newest} {store.path}" in (err.value.hint or "")
    # a run refuses, and does not copy the damaged store over the good backups
    before = backups(store.path)
    with pytest.raises(StateError, match="damaged") as err:
        StateStore(store.path).start_run("up")
    assert str(newest) in (err.value.hint or "")
    assert backups(store.path) == before
    assert not [p for p in backup_dir(store.path).iterdir() if p.name.endswith(".partial")]


# what reads which table: status and report read nodes and runs, plan nodes, up all three
READERS = {"nodes": ("status", "report", "plan", "up"), "runs": ("status", "report", "up"),
           "events": ("up",)}


@pytest.mark.parametrize("table", sorted(READERS))
def test_status_report_plan_and_up_on_a_damaged_store_exit_8(site, table):
    """They used to end in `internal error: DatabaseError`."""
    store = _store_with_history(site / ".provision" / "state.db")
    newest = backups(store.path)[0].path
    _damage(store.path, table)
    for command in READERS[table]:
        args = [command, str(site), *(["--state", "--out", str(site.parent / "page")]
                                      if command == "report" else [])]
        code, out = _cli(*args)
        assert code == ExitCode.STATE, (args, out)
        assert "damaged" in out and newest.name in out, (args, out)
        assert "internal error" not in out


def test_a_malformed_file_names_the_backup_to_restore(tmp_path):
    """A store whose header is gone: "restore it from a backup" used to name none."""
    store = _store_with_history(tmp_path / ".provision" / "state.db")
    newest = backups(store.path)[0].path
    db = sqlite3.connect(store.path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    with store.path.open("r+b") as f:
        f.write(b"not a database at all, " * 8)
    for opened in (lambda: StateStore(store.path), lambda: open_read_only(store.path)):
        with pytest.raises(StateError) as err:
            opened()
        assert "damaged" in err.value.message
        assert f"cp {newest} {store.path}" in (err.value.hint or "")


def test_without_a_backup_the_hint_says_there_is_none(tmp_path):
    store = StateStore(tmp_path / ".provision" / "state.db")
    store.enroll(["dgx01"])
    _damage(store.path, "nodes")
    with pytest.raises(StateError, match="damaged") as err:
        store.nodes()
    assert "no complete backup" in (err.value.hint or "")


# ----------------------------------------------------------------------- read-only media


def test_read_only_commands_read_a_store_on_read_only_media(mount_small_disk, site):
    state = site / ".provision"
    disk = mount_small_disk(state, 512)
    store = _store_with_history(state / "state.db")
    newest = backups(store.path)[0].path
    assert not Path(f"{store.path}-wal").exists()  # closed cleanly
    disk.remount("ro")
    try:
        loaded = load(site)
        status = report.status(loaded)
        assert {n.hostname: n.phase for n in status.nodes} == {"dgx01": "inspected",
                                                                "dgx02": "enrolled"}
        assert [r.status for r in status.runs] == ["ok"] * 3
        assert status.backup is not None and status.backup.path == str(newest)
        assert {n.hostname: n.action for n in report.plan(loaded).nodes}["dgx01"] == "resume"
        code, out = _cli("status", str(site), "--json")
        assert code == 0, out
        assert json.loads(out)["phases"] == {"enrolled": 1, "inspected": 1}
        code, out = _cli("report", str(site), "--state", "--out", str(site.parent / "page"))
        assert code in (0, ExitCode.INVENTORY, ExitCode.BUDGET), out
        assert "dgx01" in next((site.parent / "page").glob("*.html")).read_text()
        # a command that writes says why it cannot
        with pytest.raises(StateError, match="read-only") as err:
            StateStore(state / "state.db").start_run("up")
        assert "remount" in (err.value.hint or "")
    finally:
        disk.remount("rw")


LEFT_IN_WAL = """
import os, sqlite3, sys
from pathlib import Path
from provisioner.state import StateStore
held = sqlite3.connect(sys.argv[1])  # no checkpoint while it is open
held.execute("PRAGMA wal_autocheckpoint=0")
held.execute("SELECT 1 FROM nodes").fetchall()
StateStore(Path(sys.argv[1])).enroll(["dgx02"])
os._exit(0)  # killed, as it were: the WAL keeps the change
"""


def test_read_only_media_with_changes_left_in_the_wal(small_disk):
    """A store not closed cleanly keeps its last changes in the -wal file: read-only, they
    are read where SQLite's WAL index is there, and said plainly where it is not."""
    path = small_disk.path / ".provision" / "state.db"
    StateStore(path).enroll(["dgx01"])
    subprocess.run([sys.executable, "-c", LEFT_IN_WAL, str(path)], check=True)
    assert Path(f"{path}-wal").stat().st_size > 0
    small_disk.remount("ro")
    try:
        read = open_read_only(path)
        assert read is not None and [n.hostname for n in read.nodes()] == ["dgx01", "dgx02"]
        small_disk.remount("rw")
        Path(f"{path}-shm").unlink()
        small_disk.remount("ro")
        with pytest.raises(StateError, match="not closed cleanly") as err:
            open_read_only(path)
        assert "remount it read-write once" in (err.value.hint or "")
    finally:
        small_disk.remount("rw")
    assert [n.hostname for n in StateStore(path).nodes()] == ["dgx01", "dgx02"]


# ----------------------------------------------------------------------- deleted store


def test_a_deleted_store_with_backups_is_not_an_empty_site(site):
    """It used to read as "no node enrolled yet", and `up` started a new store over it."""
    store = _store_with_history(site / ".provision" / "state.db")
    newest = backups(store.path)[0].path
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store.path}{suffix}").unlink(missing_ok=True)
    for opened in (lambda: open_read_only(store.path), lambda: StateStore(store.path)):
        with pytest.raises(StateError, match="is gone, but backups of it exist") as err:
            opened()
        assert f"cp {newest} {store.path}" in (err.value.hint or "")
    assert not store.path.exists()  # nothing was created over it
    for args in (["status", str(site)], ["plan", str(site)], ["up", str(site)],
                 ["report", str(site), "--state", "--out", str(site.parent / "page")]):
        code, out = _cli(*args)
        assert code == ExitCode.STATE, (args, out)
        assert "is gone" in out and newest.name in out and "no node enrolled" not in out
    assert not store.path.exists()  # `up` did not start a new store over it either
    # restored as the hint says, it reads again
    shutil.copy(newest, store.path)
    restored = open_read_only(store.path)
    assert restored is not None and restored.node("dgx01").phase is Phase.INSPECTED
