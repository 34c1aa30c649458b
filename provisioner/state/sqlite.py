"""The state store's SQLite file, kept apart from its queries (__init__.py) to keep each module
short: opened read-write (created 0600, WAL mode, the schema migrated under the write lock)
or read-only (mode=ro; immutable on read-only media when no WAL content is left), a
connection per call whose SQLite failures say what they mean (errors.py), and
transactions that roll back without hiding the first error."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from provisioner.errors import StateError
from provisioner.state.backup import backups, immutable_uri
from provisioner.state.dir import ensure_parent
from provisioner.state.errors import gone, read_only_media, translate
from provisioner.state.schema import MIGRATIONS, SCHEMA_VERSION, statements

__all__ = ["StateFile", "empty", "rollback"]


class StateFile:
    """One site's state database file: opening it and a connection per call (StateStore
    holds the queries)."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self._uri = f"file:{quote(str(path))}?mode=ro"
        try:
            if read_only:
                self._open_read_only()
                return
            if empty(path) and (kept := backups(path)):
                raise gone(path, kept[0].path)  # never start a new one over it
            ensure_parent(path)  # .provision/: 0700, with a .gitignore of '*'
            if not path.exists():
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            self._open_once()
            for suffix in ("-wal", "-shm"):
                # another process's last connection may delete it meanwhile (SQLite removes
                # the WAL on a clean close): gone is fine
                with contextlib.suppress(FileNotFoundError):
                    Path(str(path) + suffix).chmod(0o600)
        except (OSError, sqlite3.Error) as exc:
            raise translate(exc, path) from exc

    def _open_read_only(self) -> None:
        """mode=ro; on read-only media, where SQLite cannot make the WAL index beside a
        WAL database, immutable=1 when no WAL content is left (nobody can write there)."""
        wal = Path(f"{self.path}-wal")
        wal_b = wal.stat().st_size if wal.exists() else 0
        media_ro = read_only_media(self.path)
        if media_ro and wal_b == 0:
            self._uri = immutable_uri(self.path)
        try:
            with self._sqlite() as db:
                current = db.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.Error as exc:
            if not (media_ro and wal_b):
                raise
            raise StateError(f"state store {self.path}: its last changes are still in {wal} "
                             "(it was not closed cleanly), and on read-only media SQLite "
                             "cannot read them", hint="remount it read-write once (opening "
                             "the store there merges them), or copy the whole directory to "
                             "writable media") from exc
        if current > SCHEMA_VERSION:
            raise StateError(f"state store {self.path} has schema {current}, newer than "
                             f"this tool's {SCHEMA_VERSION}", hint="upgrade provisioner")

    def _open_once(self) -> None:
        """WAL mode and the schema. Switching the journal mode needs the database alone, and
        SQLite answers "locked" at once, without its busy wait, while another process opening
        the same new store holds it: retried briefly (processes opening a store at once)."""
        for attempt in range(100):
            try:
                with self._sqlite() as db:
                    db.execute("PRAGMA journal_mode=WAL")
                    self._migrate(db)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == 99:
                    raise
                time.sleep(0.02 * (1 + attempt % 10))

    @contextmanager
    def _sqlite(self) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            db = sqlite3.connect(self._uri, uri=True, timeout=30, isolation_level=None)
        else:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.execute("PRAGMA foreign_keys=ON")
            if not self.read_only:
                db.execute("PRAGMA synchronous=FULL")
            yield db
        finally:
            db.close()

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection whose SQLite failures, the caller's queries included, come out as
        the StateError that says what they mean (a damaged page, a full disk)."""
        try:
            with self._sqlite() as db:
                yield db
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                rollback(db)
                raise
            db.execute("COMMIT")

    def _migrate(self, db: sqlite3.Connection) -> None:
        if db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
            return
        # The version is read again under the write lock: two processes opening a new store
        # at once (a run and a `status`) must not both create its tables. One transaction:
        # a crash leaves the old schema or the new one.
        db.execute("BEGIN IMMEDIATE")
        try:
            current = db.execute("PRAGMA user_version").fetchone()[0]
            if current > SCHEMA_VERSION:
                raise StateError(f"state store {self.path} has schema {current}, newer than "
                                 f"this tool's {SCHEMA_VERSION}", hint="upgrade provisioner")
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in statements(MIGRATIONS[version]):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {version}")
        except BaseException:
            rollback(db)
            raise
        db.execute("COMMIT")

    @property
    def schema_version(self) -> int:
        with self._connect() as db:
            return int(db.execute("PRAGMA user_version").fetchone()[0])


def rollback(db: sqlite3.Connection) -> None:
    """Undo the open transaction, when SQLite has not already (it rolls back by itself on
    a full disk): a second error here would hide the first, the one that says why."""
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")


def empty(path: Path) -> bool:
    """No store: no file, or the empty file a first open that failed may leave."""
    try:
        return path.stat().st_size == 0
    except FileNotFoundError:
        return True
