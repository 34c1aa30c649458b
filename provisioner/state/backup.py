"""Backups of the state store: one consistent copy before every run, the last few kept.

A copy counts only once it is complete: it is written under a `.partial` name, checked by
SQLite (quick_check) and only then renamed into place, so a copy cut short (a full disk, a
kill) never takes the place of a good one in the rotation, and a store already damaged is
refused instead of being copied over the good copies. Listing opens every copy (header,
size, schema): files left by a failure elsewhere are never counted or named as a backup.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from shlex import quote as shell_quote
from urllib.parse import quote

from provisioner.errors import StateError

KEEP_BACKUPS = 5  # complete copies of the state store kept, one per run, newest first
PARTIAL = ".partial"  # a copy being written; never listed
HEADER = b"SQLite format 3\x00"
TABLES = frozenset({"nodes", "runs", "events"})  # the schema's first version (schema.py)


@dataclass(frozen=True)
class Backup:
    path: Path
    taken_at: float


def backup_dir(path: Path) -> Path:
    """Where the copies of the store at `path` go: beside it, `<name>.backups/`."""
    return path.with_name(path.name + ".backups")


def immutable_uri(path: Path) -> str:
    """A read-only URI for a file nobody writes (a finished copy): no -wal or -shm files are
    made beside it, so it also opens on read-only media."""
    return f"file:{quote(str(path))}?mode=ro&immutable=1"


def complete(path: Path) -> bool:
    """Whether `path` is a whole SQLite copy of a state store: the header's page count
    matches the file's size (a copy cut short does not) and its schema reads."""
    try:
        with path.open("rb") as f:
            head = f.read(100)
        size = path.stat().st_size
    except OSError:
        return False
    if len(head) < 100 or not head.startswith(HEADER):
        return False
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    if head[24:28] != head[92:96] or pages * page_size != size:
        return False  # the page count in the header is not valid, or the file is cut
    try:
        db = sqlite3.connect(immutable_uri(path), uri=True)
        try:
            names = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        finally:
            db.close()
    except sqlite3.Error:
        return False
    return names >= TABLES


def _candidates(path: Path) -> list[Path]:
    where = backup_dir(path)
    if not where.is_dir():
        return []
    return sorted(where.glob(f"{path.stem}-*.db"), key=lambda p: p.name, reverse=True)


def backups(path: Path) -> list[Backup]:
    """The complete backups of the store at `path`, newest first (none without a directory);
    a file that is not a whole copy is not one of them."""
    found = []
    for p in _candidates(path):
        if complete(p):
            with contextlib.suppress(OSError):  # removed meanwhile by another run's rotation
                found.append(Backup(p, p.stat().st_mtime))
    return found


def restore_hint(path: Path) -> str:
    """How to put the store at `path` back: the newest complete backup, as commands."""
    kept = backups(path)
    if not kept:
        return (f"no complete backup of it exists in {backup_dir(path)}: move it aside "
                "to start a new, empty store (every node starts over from enrolled)")
    newest = kept[0]
    when = datetime.fromtimestamp(newest.taken_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
    store, aside = shell_quote(str(path)), shell_quote(f"{path}.damaged")
    wal, shm = shell_quote(f"{path}-wal"), shell_quote(f"{path}-shm")
    return (f"with no run going, restore the newest complete backup (taken {when} UTC; what "
            f"happened since is lost): mv {store} {aside}; rm -f {wal} {shm}; "
            f"cp {shell_quote(str(newest.path))} {store}")


def _fsync(path: Path, flags: int = os.O_RDONLY) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def take(connect: Callable[[], AbstractContextManager[sqlite3.Connection]], path: Path,
         keep: int = KEEP_BACKUPS) -> Path:
    """Copy the whole store with SQLite's online backup API (a consistent snapshot, WAL
    included, even while another reader has it open) into a new owner-only file, check it,
    then drop all but the newest `keep` complete copies. Returns the new copy's path.
    OSError and sqlite3.Error go to the caller (which says what they mean); nothing of a
    copy that failed is left behind."""
    where = backup_dir(path)
    now_ns = time.time_ns()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now_ns // 10**9))
    where.mkdir(mode=0o700, exist_ok=True)
    where.chmod(0o700)
    target = where / f"{path.stem}-{stamp}.{now_ns % 10**9:09d}Z.db"
    partial = target.with_name(target.name + PARTIAL)
    # Created 0600 before SQLite opens it: the copy is never readable by others.
    os.close(os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    try:
        dst = sqlite3.connect(partial)
        try:
            with connect() as src:
                src.backup(dst)
            # one self-contained file: opened read-only, it makes no -wal or -shm beside it
            dst.execute("PRAGMA journal_mode=DELETE")
            problems = [r[0] for r in dst.execute("PRAGMA quick_check")]
        finally:
            dst.close()
        if problems != ["ok"]:
            raise StateError(f"the state store {path} is damaged (SQLite's quick_check: "
                             f"{'; '.join(problems[:3])}); no run starts on it",
                             hint=restore_hint(path))
        _fsync(partial)
        partial.rename(target)
        _fsync(where, os.O_RDONLY | os.O_DIRECTORY)  # the rename itself survives a crash
    except BaseException:
        for leftover in (partial, *(Path(f"{partial}{s}") for s in ("-journal", "-wal", "-shm"))):
            with contextlib.suppress(OSError):
                leftover.unlink()
        raise
    for old in backups(path)[keep:]:
        old.path.unlink(missing_ok=True)
    for empty in _candidates(path):  # 0-byte files an older version left after a failure
        with contextlib.suppress(OSError):
            if empty.stat().st_size == 0:
                empty.unlink()
    return target
