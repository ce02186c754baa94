"""The SQLite store: :class:`SQLiteStore`, its state and its lifecycle (open, read-only,
close); what it does is in the classes it is made of (see :mod:`chatkernel.core.store.sqlite`)."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import chatkernel.core.store.sqlite.schema as schema
from chatkernel.core.store.base import Store, StoreError
from chatkernel.core.store.sqlite.access import SQLiteAccess
from chatkernel.core.store.sqlite.failed import SQLiteFailedSends
from chatkernel.core.store.sqlite.file import DatabaseFile
from chatkernel.core.store.sqlite.jobs import SQLiteJobs
from chatkernel.core.store.sqlite.journal import SQLiteJournal
from chatkernel.core.store.sqlite.outbox import SQLiteOutbox
from chatkernel.core.store.sqlite.schema import SchemaMigrations
from chatkernel.core.store.sqlite.state import SQLiteState

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from chatkernel.core.config import KernelConfig

__all__ = ["SQLiteStore", "Synchronous"]

log = logging.getLogger("chatkernel.store")

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]


class SQLiteStore(SQLiteJournal, SQLiteFailedSends, SQLiteOutbox, SQLiteState, SQLiteAccess,
                  SQLiteJobs, SchemaMigrations, DatabaseFile, Store):
    """The store in one SQLite file (see :mod:`chatkernel.core.store.sqlite` for durability).

    ``SQLiteStore(config)`` uses ``config.store_path()``; ``SQLiteStore.at(path)``
    takes a path directly (``":memory:"`` for a throwaway database in tests).
    Use it from the event loop's thread only (``sqlite3`` checks): its methods
    never await while a statement runs, so concurrent tasks cannot interleave
    inside one. ``async with store:`` opens and closes it.
    """

    name = "sqlite"

    def __init__(self, config: KernelConfig | None = None, *,
                 path: str | os.PathLike[str] | None = None,
                 synchronous: Synchronous = "NORMAL", busy_timeout: float = 5.0,
                 read_only: bool = False) -> None:
        if path is None:
            if config is None:
                raise TypeError("SQLiteStore needs a config or a path")
            path = config.store_path()
        self.memory = os.fspath(path) == ":memory:"
        self.path = Path(path) if not self.memory else Path(":memory:")
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, "
                             f"not {synchronous!r}")
        self.synchronous = synchronous.upper()
        # How long a write waits for another process's lock (e.g. a CLI command
        # reading the file); the event loop is blocked while it waits.
        self.busy_timeout = busy_timeout
        #: Open without creating, migrating or writing anything (``chatkernel status``).
        self.read_only = read_only
        self._conn: sqlite3.Connection | None = None
        # Group commit: whether one is scheduled, and the futures of those waiting
        # for it (each caller's own, so a cancelled caller cancels only its wait).
        self._commit_scheduled = False
        # The loop the scheduled commit runs on, where its waiters' futures are made (one
        # asyncio.get_running_loop() a commit, not one a waiter: each asks the OS its pid).
        self._commit_loop: asyncio.AbstractEventLoop | None = None
        self._commit_handle: asyncio.Handle | None = None
        self._commit_waiters: list[asyncio.Future[None]] = []
        # journal_inbound's waiters: a failed commit drops their entries and tells them.
        self._journal_waiters: list[asyncio.Future[None]] = []
        self._commit_callbacks: list[Callable[[Exception | None], None]] = []
        self._writer: sqlite3.Cursor | None = None  # see _write
        self._last_commit = -math.inf
        # Whether the last commit carried several journal entries (then the next one
        # waits out COMMIT_INTERVAL for more company: see commit.py).
        self._last_shared = False
        self._journaled = 0  # journal rows in the open transaction
        # A webhook request alone committed at once in this turn of the loop: the
        # next one in the same turn came with it (journal.py, journal_inbound_shared).
        self._committed_now = False
        #: Transactions committed since the store opened (the group commit's measure:
        #: writes per commit).
        self.commits = 0
        # Coalesced marks, written by _write_marks before the next commit.
        self._sending_marks: set[int] = set()
        self._sent_marks: set[int] = set()
        self._done_marks: set[int] = set()
        # The statements of the open transaction, in order: written again after a
        # failed commit (see "A failed commit" in commit.py's docstring).
        self._redo: list[tuple[str, Sequence[Any]]] = []
        # Failed commits in a row, and since when (the loop's clock).
        self._commit_failures = 0
        self._failing_since: float | None = None
        # Background WAL checkpoints (see commit.CHECKPOINT_INTERVAL): their own connection,
        # used only by the one checkpoint running at a time.
        self._checkpointer: sqlite3.Connection | None = None
        self._checkpointing: asyncio.Future[None] | None = None
        self._last_checkpoint = -math.inf
        self._claim_fd: int | None = None  # see claim

    @classmethod
    def at(cls, path: str | os.PathLike[str], **options: Any) -> "SQLiteStore":
        """A store on ``path``, without a config."""
        return cls(path=path, **options)

    def __repr__(self) -> str:
        state = "open" if self._conn is not None else "closed"
        return f"<SQLiteStore {os.fspath(self.path)!r} {state}>"

    async def __aenter__(self) -> "SQLiteStore":
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- lifecycle -----------------------------------------------------------------------

    async def open(self) -> None:
        """Create the file (mode 0600) and its directory, connect, migrate. Idempotent."""
        if self._conn is not None:
            return
        if self.read_only:
            self._conn = self._open_read_only()
            return
        existed = not self.memory and self.path.exists()
        if not self.memory:
            try:
                self._prepare_file()
            except OSError as exc:
                raise self._unavailable(exc, existed) from None
        try:
            conn = sqlite3.connect(
                ":memory:" if self.memory else self.path,
                timeout=self.busy_timeout,
                isolation_level=None,  # autocommit: each statement commits; BEGIN explicitly
            )
        except sqlite3.Error as exc:
            raise self._unavailable(exc, existed) from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            if not self.memory:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    log.warning("%s: WAL mode unavailable (journal_mode is %s)",
                                self.path, mode)
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA foreign_keys = ON")
            if not self.memory:
                conn.execute("PRAGMA wal_autocheckpoint = 0")  # ours run in a thread
            self._migrate(conn)
        except StoreError:
            conn.close()
            raise
        except sqlite3.Error as exc:
            conn.close()
            raise self._unavailable(exc, existed) from None
        self._conn = conn

    def _open_read_only(self) -> sqlite3.Connection:
        """A connection that cannot write: no file is created, no schema migrated."""
        if self.memory or not self.path.exists():
            raise StoreError(f"{self.path}: no state database yet")
        # With no -wal file everything is in the main file and nobody is writing:
        # "immutable" then reads it without creating -wal/-shm files. Otherwise they
        # exist already, and a plain read-only connection sees the latest commits.
        wal = Path(f"{self.path}-wal").exists()
        query = "mode=ro" if wal else "mode=ro&immutable=1"
        try:
            conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?{query}", uri=True,
                                   timeout=self.busy_timeout, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            version = self._user_version(conn)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot read the state database: {exc}") from None
        known = len(schema.MIGRATIONS)
        try:
            self._check_version(version)
            if version < known:
                raise StoreError(f"{self.path}: the state database has schema version "
                                 f"{version}; the gateway migrates it to {known} on "
                                 "its next start")
        except StoreError:
            conn.close()
            raise
        return conn

    async def close(self) -> None:
        """Close the connection (the last one also checkpoints the WAL). Idempotent."""
        try:
            await self._close()
        finally:
            self._release_claim()

    async def _close(self) -> None:
        if self._conn is not None and not self.read_only:
            self._commit(final=True)
        if self._checkpointing is not None:
            await asyncio.shield(self._checkpointing)
        checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            checkpointer.close()
        conn, self._conn = self._conn, None
        self._writer = None
        if conn is None:
            return
        if self.read_only:
            conn.close()
            return
        try:
            conn.execute("PRAGMA optimize")
        except sqlite3.Error:  # pragma: no cover - advisory only
            pass
        conn.close()
