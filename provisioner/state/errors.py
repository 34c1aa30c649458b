"""What a failed SQLite or file operation on the state store means, as one StateError.

SQLite's own words mislead here: a full disk comes back as "disk I/O error" (it cannot grow
the WAL index), read-only media as "unable to open database file". Each is told apart
(SQLite's result codes, https://www.sqlite.org/rescode.html, and the file system's free
space and flags) so the operator gets the real cause and the one thing to do: free space
(the store is intact: SQLite rolled the change back), restore the newest complete backup
(named, as commands), or remount.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path
from shlex import quote

from provisioner.errors import StateError
from provisioner.state.backup import backup_dir, restore_hint

# SQLite's primary result codes (the low byte of an extended code)
SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY, SQLITE_IOERR = 5, 6, 8, 10
SQLITE_CORRUPT, SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_NOTADB = 11, 13, 14, 26
LOW_SPACE_B = 1 << 20  # below this much free space, an I/O error is the disk being full


def _fs(path: Path) -> Path:
    """The nearest existing directory of `path` (the store or its directory may be gone)."""
    for p in (path.parent, *path.parents):
        if p.is_dir():
            return p
    return Path("/")


def _mount_point(path: Path) -> Path:
    """Where the file system holding `path` is mounted: what the operator frees or remounts."""
    here = _fs(path)
    try:
        dev = here.stat().st_dev
        while here.parent != here and here.parent.stat().st_dev == dev:
            here = here.parent
    except OSError:
        pass
    return here


def disk_full(path: Path) -> bool:
    """Whether the file system holding `path` is out of space or of inodes."""
    try:
        st = os.statvfs(_fs(path))
    except OSError:
        return False
    low_b = min(LOW_SPACE_B, st.f_blocks * st.f_frsize // 20)  # a small file system: 5 %
    return st.f_bavail * st.f_frsize <= low_b or (st.f_files > 0 and st.f_favail == 0)


def read_only_media(path: Path) -> bool:
    """Whether `path` lies on a file system mounted read-only (or a read-only bind mount)."""
    try:
        return bool(os.statvfs(_fs(path)).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _size(n_bytes: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n_bytes >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{n_bytes} bytes"


def _free(path: Path) -> str:
    try:
        st = os.statvfs(_fs(path))
    except OSError:
        return "?"
    return _size(st.f_bavail * st.f_frsize)


def full(path: Path, what: str) -> StateError:
    return StateError(f"{what}: the disk is full ({_free(path)} free on the file system "
                      f"mounted at {_mount_point(path)})",
                      hint="free space there and run it again; the state store is intact "
                      "(SQLite rolled the unfinished change back), nothing needs restoring")


def read_only(path: Path, what: str) -> StateError:
    return StateError(f"{what}: the file system mounted at {_mount_point(path)} is "
                      "read-only",
                      hint="status, plan and report still read the store; a run writes it: "
                      "remount that file system read-write, or copy the site to writable "
                      "media")


def gone(path: Path, newest: Path) -> StateError:
    """The store is missing, and copies of it are beside it (`newest` the latest): deleted,
    not never made."""
    return StateError(f"the state store {path} is gone, but backups of it exist in "
                      f"{backup_dir(path)}",
                      hint=f"restore the newest: cp {quote(str(newest))} "
                      f"{quote(str(path))}; or, to start a new, empty store on purpose, "
                      "move the backups aside first")


def translate(exc: sqlite3.Error | OSError, path: Path, what: str | None = None
              ) -> StateError:
    """The StateError that says what `exc`, raised on the store at `path`, means for the
    operator; `what` starts the message (by default: the store's path)."""
    what = what or f"state store {path}"
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return full(path, what)
        if exc.errno == errno.EROFS:
            return read_only(path, what)
        return StateError(f"{what}: {exc.strerror or exc} ({exc.filename or path})",
                          hint="check the owner and permissions of the directory")
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    if code == SQLITE_FULL or (code == SQLITE_IOERR and disk_full(path)):
        return full(path, what)
    if code in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return StateError(f"{what}: the file is damaged ({exc})", hint=restore_hint(path))
    if code in (SQLITE_READONLY, SQLITE_CANTOPEN, SQLITE_IOERR) and read_only_media(path):
        return read_only(path, what)
    if code in (SQLITE_BUSY, SQLITE_LOCKED):
        return StateError(f"{what}: it stayed locked ({exc})",
                          hint="another process holds it; `provision status` shows the runs")
    if code in (SQLITE_READONLY, SQLITE_CANTOPEN):
        return StateError(f"{what}: {exc}",
                          hint=f"check the owner and permissions of the file and of "
                          f"{path.parent}")
    if code == SQLITE_IOERR:
        return StateError(f"{what}: the disk failed ({exc}; {_free(path)} free)",
                          hint="check the disk (dmesg); if the store is damaged: "
                          + restore_hint(path))
    return StateError(f"{what}: {exc}", hint="if the store is damaged: " + restore_hint(path))
