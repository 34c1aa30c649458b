"""Backups of the state store: one consistent copy before every run, the last few kept."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from provisioner.errors import StateError

KEEP_BACKUPS = 5  # copies of the state store kept, one per run, newest first


@dataclass(frozen=True)
class Backup:
    path: Path
    taken_at: float


def backup_dir(path: Path) -> Path:
    """Where the copies of the store at `path` go: beside it, `<name>.backups/`."""
    return path.with_name(path.name + ".backups")


def backups(path: Path) -> list[Backup]:
    """The backups of the store at `path`, newest first (none when there is no directory)."""
    where = backup_dir(path)
    if not where.is_dir():
        return []
    found = [Backup(p, p.stat().st_mtime) for p in where.glob(f"{path.stem}-*.db")]
    return sorted(found, key=lambda b: b.path.name, reverse=True)


def take(connect: Callable[[], AbstractContextManager[sqlite3.Connection]], path: Path,
         keep: int = KEEP_BACKUPS) -> Path:
    """Copy the whole store with SQLite's online backup API (a consistent snapshot, WAL
    included, even while another reader has it open) into a new owner-only file, then
    drop all but the newest `keep` copies. Returns the new copy's path."""
    where = backup_dir(path)
    now_ns = time.time_ns()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now_ns // 10**9))
    try:
        where.mkdir(mode=0o700, exist_ok=True)
        where.chmod(0o700)
        target = where / f"{path.stem}-{stamp}.{now_ns % 10**9:09d}Z.db"
        # Created 0600 before SQLite opens it: the copy is never readable by others.
        os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        dst = sqlite3.connect(target)
        try:
            with connect() as src:
                src.backup(dst)
        finally:
            dst.close()
        for old in backups(path)[keep:]:
            old.path.unlink(missing_ok=True)
    except (OSError, sqlite3.Error) as exc:
        raise StateError(f"cannot back up the state store {path} to {where}: {exc}",
                         hint="free disk space or fix the directory's permissions; "
                         "no run starts without a backup") from None
    return target
