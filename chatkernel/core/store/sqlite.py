"""The SQLite store: the default backend, for one gateway process.

One connection, used on the event loop thread with the stdlib ``sqlite3``
module: every statement is short (an indexed insert, update or lookup), and
measured, running it inline is faster than a hop to a worker thread. Each
method runs its statement without awaiting, so it is atomic with respect to
the other coroutines of the loop.

Group commit. A write runs at once inside an open transaction whose commit
is scheduled for the next turn of the event loop (and, when commits come
thick and fast, no sooner than ``COMMIT_INTERVAL`` after the previous one), so
every write made by every task meanwhile shares one commit, and writes are
committed in the order they were made. The writes a caller's durability rests on —
``journal_inbound`` (a receive loop advances its platform cursor after it) and
``set_cursor`` — return only after their commit; the others return at once and
are committed with it (``await store.flush()`` waits for everything written so
far). Because commits keep order, a message's journal entry is always durable
before anything written about it later. The store therefore needs the asyncio
event loop, which is what the kernel runs on; ``bench/pipeline.py`` measures
the pipeline with it.

Coalesced marks. The status marks every message gets — the outbox entry's
``sending`` and ``sent``, the journal entry's ``done`` — are kept in memory
and written at the commit that would have carried them, as one ``UPDATE ...
WHERE id IN (...)`` per status: an update per row cost as much again as the
row's insert. They are still committed in the same transaction as the writes
made before them (``done`` with its reply's outbox rows), a durable mark
(``sending``) still returns only once committed, and every read or delete of
those tables, and any other status for the same row, writes or drops them
first. A mark for a row that does not exist is not an error then: it changes
nothing.

A failed commit (a full disk) loses nothing the gateway has acted on. The
store keeps the statements of the open transaction; when its COMMIT fails
(SQLite then rolls the whole transaction back), it writes them again into a
new transaction and tries the commit again, :data:`RETRY_FIRST` later, then
doubling up to :data:`RETRY_MAX`, until it goes through: the writes keep their
order and their ids, and whoever waits for them (a durable ``sending`` mark, a
``flush``) waits on. Only the journal entries of the failed transaction are
dropped and raised to their callers: a message not journaled is not
acknowledged, so its platform sends it again (see ``journal_inbound``).
``on_commit`` is told of every failed attempt and of the commit that went
through, so health is red exactly while commits fail.

Durability. The database runs in WAL mode with ``synchronous = NORMAL``: once
``journal_inbound`` returns, the message survives a crash of the process (an exception, ``kill
-9``, the OOM killer), because the commit is in the operating system's
hands. A power loss or kernel panic may lose the last transactions committed
before it (WAL with ``NORMAL`` does not fsync on each commit); the database
itself stays consistent. Pass ``synchronous="FULL"`` to :class:`SQLiteStore`
to fsync every commit, at a large cost in throughput.

Dedupe. A journal row is the dedupe key of its platform message, so dedupe
holds as long as rows are kept: :meth:`SQLiteStore.prune_journal` deletes
finished rows older than a cutoff, and the retention window
(:data:`JOURNAL_RETENTION`, 7 days by default) is how long a redelivery is
still recognized.

The schema evolves through numbered :data:`MIGRATIONS`; the number applied is
the database's ``PRAGMA user_version``. A database written by a newer
chatkernel (a higher version than this code knows) is refused, not guessed at.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import json
import logging
import math
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from chatkernel.sdk.models import InboundMessage, Route
from chatkernel.core.store.base import (
    JOURNAL_STATUSES,
    OUTBOX_STATUSES,
    HeartbeatState,
    JournalEntry,
    LogEntry,
    LogRow,
    OutboxEntry,
    RecentSend,
    SessionRecord,
    Store,
    StoreError,
    StoreUnavailable,
    TranscriptEntry,
)
from chatkernel.sdk.codec import (
    decode_json,
    decode_message,
    decode_payload,
    decode_route,
    encode_json,
    encode_message,
    encode_payload,
    encode_route,
)

if TYPE_CHECKING:
    from chatkernel.core.config import KernelConfig

__all__ = [
    "JOURNAL_RETENTION",
    "JOURNAL_STATUSES",
    "MIGRATIONS",
    "SQLiteStore",
    "StoreError",
    "StoreUnavailable",
]

log = logging.getLogger("chatkernel.store")

#: How long finished journal rows (the dedupe keys) are kept, in seconds: 7 days.
JOURNAL_RETENTION: float = 7 * 24 * 3600.0

#: The shortest time between two commits when writes keep coming: under load
#: more writes share a commit; an idle store still commits on the next loop turn.
COMMIT_INTERVAL: float = 0.002
#: Seconds between WAL checkpoints. SQLite's automatic checkpoint would run inside a
#: commit, on the event loop, fsync included (stalls of 10+ ms under load); the store
#: turns it off and checkpoints from a thread of its own instead, at most this often.
CHECKPOINT_INTERVAL: float = 1.0
#: The most ids one coalesced mark statement takes (see "Coalesced marks").
MARKS_PER_STATEMENT = 64
#: How soon, then how seldom at most, a failed commit is tried again (doubling).
RETRY_FIRST: float = 0.1
RETRY_MAX: float = 2.0


Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]


# -- schema ------------------------------------------------------------------------------------

#: The schema, one script per version; ``MIGRATIONS[n - 1]`` takes a database from
#: version ``n - 1`` to ``n``. Append only: never edit a released script.
MIGRATIONS: list[str] = [
    # 1: the initial schema.
    """
    CREATE TABLE inbound_journal (
        seq          INTEGER PRIMARY KEY AUTOINCREMENT,
        channel      TEXT NOT NULL,
        account      TEXT NOT NULL,
        message_id   TEXT NOT NULL,
        message      TEXT NOT NULL,  -- JSON, chatkernel.sdk.codec
        status       TEXT NOT NULL DEFAULT 'received'
                     CHECK (status IN ('received', 'queued', 'done', 'rejected')),
        received_at  REAL NOT NULL,
        UNIQUE (channel, account, message_id)
    );
    -- Only the few unfinished rows: crash recovery reads them without a scan.
    CREATE INDEX inbound_journal_unfinished ON inbound_journal (seq)
        WHERE status IN ('received', 'queued');

    CREATE TABLE cursors (
        channel     TEXT NOT NULL,
        account     TEXT NOT NULL,
        cursor      TEXT NOT NULL,
        updated_at  REAL NOT NULL,
        PRIMARY KEY (channel, account)
    );

    CREATE TABLE sessions (
        key             TEXT PRIMARY KEY,
        session_id      TEXT NOT NULL,
        channel         TEXT NOT NULL,
        account         TEXT NOT NULL,
        chat_id         TEXT NOT NULL,
        thread_id       TEXT,
        created_at      REAL NOT NULL,
        last_active_at  REAL NOT NULL,
        settings        TEXT NOT NULL DEFAULT '{}'  -- JSON object
    );
    CREATE INDEX sessions_last_active ON sessions (last_active_at);

    CREATE TABLE routes (
        session_key  TEXT PRIMARY KEY,
        route        TEXT NOT NULL,  -- JSON, chatkernel.sdk.codec
        updated_at   REAL NOT NULL
    );

    CREATE TABLE account_state (
        channel     TEXT NOT NULL,
        account     TEXT NOT NULL,
        key         TEXT NOT NULL,
        value       TEXT NOT NULL,  -- JSON
        updated_at  REAL NOT NULL,
        PRIMARY KEY (channel, account, key)
    );

    CREATE TABLE session_log (
        seq          INTEGER PRIMARY KEY AUTOINCREMENT,
        session_key  TEXT NOT NULL,
        session_id   TEXT NOT NULL,
        role         TEXT NOT NULL,
        text         TEXT NOT NULL,
        ts           REAL NOT NULL,
        meta         TEXT  -- JSON object, NULL when empty
    );
    CREATE INDEX session_log_key_seq ON session_log (session_key, seq);
    """,
    # 2: the outbox.
    """
    CREATE TABLE outbox (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,
        reply_id     TEXT NOT NULL,
        session_key  TEXT NOT NULL,
        session_id   TEXT NOT NULL,
        channel      TEXT NOT NULL,
        account      TEXT NOT NULL,
        route        TEXT NOT NULL,  -- JSON, chatkernel.sdk.codec
        payload      TEXT NOT NULL,  -- JSON, chatkernel.sdk.codec
        status       TEXT NOT NULL
                     CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'unknown')),
        error        TEXT,
        created_at   REAL NOT NULL,
        updated_at   REAL NOT NULL
    );
    CREATE INDEX outbox_unfinished ON outbox (id) WHERE status IN ('pending', 'sending');
    """,
    # 3: heartbeat scheduler state.
    """
    CREATE TABLE heartbeats (
        id            TEXT PRIMARY KEY,  -- "main" or "session:<key>"
        session_key   TEXT,
        settings      TEXT NOT NULL DEFAULT '{}',  -- JSON object
        paused        INTEGER NOT NULL DEFAULT 0,
        anchor_at     REAL,
        last_run_at   REAL,
        last_outcome  TEXT,
        task_runs     TEXT NOT NULL DEFAULT '{}',  -- JSON object: task name -> time
        wake_texts    TEXT NOT NULL DEFAULT '[]',  -- JSON list
        updated_at    REAL NOT NULL
    );
    """,
    # 4: the status CHECKs of the journal and the outbox as ORs. SQLite runs an
    # `IN` list of three or more constants by building a temporary b-tree each
    # time the check runs: on every insert and status update, ~3 µs a row, five
    # times a message. A CHECK cannot be altered, so both tables are rebuilt
    # (rows, ids and the AUTOINCREMENT high-water marks kept).
    """
    CREATE TABLE inbound_journal_v4 (
        seq          INTEGER PRIMARY KEY AUTOINCREMENT,
        channel      TEXT NOT NULL,
        account      TEXT NOT NULL,
        message_id   TEXT NOT NULL,
        message      TEXT NOT NULL,  -- JSON, chatkernel.sdk.codec
        status       TEXT NOT NULL DEFAULT 'received'
                     CHECK (status = 'done' OR status = 'received' OR status = 'queued'
                            OR status = 'rejected'),
        received_at  REAL NOT NULL,
        UNIQUE (channel, account, message_id)
    );
    INSERT INTO inbound_journal_v4 (seq, channel, account, message_id, message, status,
                                    received_at)
        SELECT seq, channel, account, message_id, message, status, received_at
        FROM inbound_journal ORDER BY seq;

    CREATE TABLE outbox_v4 (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,
        reply_id     TEXT NOT NULL,
        session_key  TEXT NOT NULL,
        session_id   TEXT NOT NULL,
        channel      TEXT NOT NULL,
        account      TEXT NOT NULL,
        route        TEXT NOT NULL,  -- JSON, chatkernel.sdk.codec
        payload      TEXT NOT NULL,  -- JSON, chatkernel.sdk.codec
        status       TEXT NOT NULL
                     CHECK (status = 'sent' OR status = 'sending' OR status = 'pending'
                            OR status = 'failed' OR status = 'unknown'),
        error        TEXT,
        created_at   REAL NOT NULL,
        updated_at   REAL NOT NULL
    );
    INSERT INTO outbox_v4 (id, reply_id, session_key, session_id, channel, account, route,
                           payload, status, error, created_at, updated_at)
        SELECT id, reply_id, session_key, session_id, channel, account, route, payload,
               status, error, created_at, updated_at
        FROM outbox ORDER BY id;

    -- The copies' high-water marks are the highest id copied; the old tables' may be
    -- higher (their newest rows pruned): carry those over, so no id is ever reused.
    DELETE FROM sqlite_sequence WHERE name IN ('inbound_journal_v4', 'outbox_v4');
    UPDATE sqlite_sequence SET name = name || '_v4'
        WHERE name IN ('inbound_journal', 'outbox');
    DROP TABLE inbound_journal;
    DROP TABLE outbox;
    ALTER TABLE inbound_journal_v4 RENAME TO inbound_journal;
    ALTER TABLE outbox_v4 RENAME TO outbox;
    CREATE INDEX inbound_journal_unfinished ON inbound_journal (seq)
        WHERE status IN ('received', 'queued');
    CREATE INDEX outbox_unfinished ON outbox (id) WHERE status IN ('pending', 'sending');
    """,
    # 5: the journal without the status `queued`. Nothing writes it any more (an
    # entry stays `received` until its turn finishes), and each constant of the
    # CHECK is a comparison on every insert and status update. The journal is
    # rebuilt as in 4; a row an older version left `queued` becomes `received`,
    # unfinished as before, so it is still replayed at start.
    """
    CREATE TABLE inbound_journal_v5 (
        seq          INTEGER PRIMARY KEY AUTOINCREMENT,
        channel      TEXT NOT NULL,
        account      TEXT NOT NULL,
        message_id   TEXT NOT NULL,
        message      TEXT NOT NULL,  -- JSON, chatkernel.sdk.codec
        status       TEXT NOT NULL DEFAULT 'received'
                     CHECK (status = 'done' OR status = 'received' OR status = 'rejected'),
        received_at  REAL NOT NULL,
        UNIQUE (channel, account, message_id)
    );
    INSERT INTO inbound_journal_v5 (seq, channel, account, message_id, message, status,
                                    received_at)
        SELECT seq, channel, account, message_id, message,
               CASE status WHEN 'queued' THEN 'received' ELSE status END, received_at
        FROM inbound_journal ORDER BY seq;

    -- The old table's high-water mark, not the copy's (see 4): no seq is ever reused.
    DELETE FROM sqlite_sequence WHERE name = 'inbound_journal_v5';
    UPDATE sqlite_sequence SET name = 'inbound_journal_v5' WHERE name = 'inbound_journal';
    DROP TABLE inbound_journal;
    ALTER TABLE inbound_journal_v5 RENAME TO inbound_journal;
    CREATE INDEX inbound_journal_unfinished ON inbound_journal (seq)
        WHERE status = 'received';
    """,
    # 6: The transcript of the chats whose platform is the gateway itself (the web chat):
    # what each chat showed, so its page shows the conversation again after a restart.
    # The session log cannot stand in for it: it holds a reply whole and before it is
    # sent (also one the send policy then blocked), and neither command answers, hints
    # nor proactive sends. AUTOINCREMENT: ids are never reused, so a page that saw entry
    # N before a restart asks for the entries after N, and gets them.
    """
    CREATE TABLE transcript (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        channel    TEXT NOT NULL,
        account    TEXT NOT NULL,
        chat_id    TEXT NOT NULL,
        role       TEXT NOT NULL,
        text       TEXT NOT NULL,
        media      TEXT,          -- JSON list, NULL for none
        client_id  TEXT,
        ts         REAL NOT NULL
    );
    CREATE INDEX transcript_chat ON transcript (channel, account, chat_id, id);
    CREATE UNIQUE INDEX transcript_client ON transcript (channel, account, chat_id, client_id)
        WHERE client_id IS NOT NULL;
    """,
    # 7: the platform's id of a sent payload (SendResult.message_id), kept for channels
    # whose platform reports a message's fate later (WhatsApp's statuses), so a late
    # "failed" finds the payload, its session and its reply. Only those channels write
    # it: a column left NULL costs the other channels nothing.
    """
    ALTER TABLE outbox ADD COLUMN platform_id TEXT;
    CREATE INDEX outbox_platform_id ON outbox (channel, account, platform_id)
        WHERE platform_id IS NOT NULL;
    """,
    # 8: the agent a session's conversation is with (docs/agents.md). Sessions from
    # before there were several agents are the default agent's.
    """
    ALTER TABLE sessions ADD COLUMN agent TEXT NOT NULL DEFAULT 'default';
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)


def _in_use_message(path: Path, holder: dict[str, Any]) -> str:
    """A claimed database's holder, in one line: who, of which home, where it serves."""
    from chatkernel.core.gateway_state import read_state

    pid = holder.get("pid") if isinstance(holder.get("pid"), int) else None
    role = str(holder.get("role") or "another process")
    who = f"{role} pid {pid}" if pid else role
    home = holder.get("home")
    where = ""
    if isinstance(home, str):
        info = read_state(Path(home))
        served = f", at {info.url}" if info is not None and info.pid == pid else ""
        where = f" (home {home}{served})"
    return (f"the state database {path} is in use by {who}{where}: one process per "
            "database. Two homes whose store.path lead to one file would answer the same "
            "messages twice; give each home its own store.path, or stop that one first")


def _user_name() -> str:
    """Who this process runs as, for error messages."""
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError, AttributeError):  # Windows, or a uid with no name
        return f"uid {os.geteuid()}" if hasattr(os, "geteuid") else "this user"


def _read_only_file_system(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def _chunks(marks: set[int]) -> Iterator[tuple[int, ...]]:
    """The marked ids, sorted, in chunks of at most MARKS_PER_STATEMENT, each padded
    to a power of two by repeating its last id (``IN`` ignores the repeats): a
    handful of statement texts, so the connection's statement cache keeps them all
    prepared."""
    ids = sorted(marks)
    for start in range(0, len(ids), MARKS_PER_STATEMENT):
        chunk = ids[start:start + MARKS_PER_STATEMENT]
        size = 1 << (len(chunk) - 1).bit_length()
        yield (*chunk, *[chunk[-1]] * (size - len(chunk)))


def _placeholders(count: int) -> str:
    return ", ".join("?" * count)


@functools.lru_cache(maxsize=16)
def _log_insert(rows: int) -> str:
    """The session-log INSERT of ``rows`` rows (one text per count, so the
    connection's statement cache keeps it)."""
    values = ", ".join(["(?, ?, ?, ?, ?, ?)"] * rows)
    return ("INSERT INTO session_log (session_key, session_id, role, text, ts, meta)"
            f" VALUES {values}")


def _statements(script: str) -> Iterator[str]:
    """The statements of a migration script, one by one (so they run in our transaction)."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            yield pending.strip()
            pending = ""
    rest = "\n".join(line for line in pending.splitlines()
                     if line.strip() and not line.strip().startswith("--"))
    if rest:
        raise ValueError(f"incomplete SQL statement in migration: {rest!r}")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _clean(params: Sequence[Any]) -> tuple[Any, ...]:
    """Parameters with lone surrogates replaced by U+FFFD: SQLite stores only valid UTF-8."""
    return tuple(_SURROGATE.sub("\ufffd", p) if isinstance(p, str) else p for p in params)


# -- the store -----------------------------------------------------------------------------------


class SQLiteStore(Store):
    """The store in one SQLite file (see the module's docstring for durability).

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
        #: Transactions committed since the store opened (the group commit's measure:
        #: writes per commit).
        self.commits = 0
        # Coalesced marks, written by _write_marks before the next commit.
        self._sending_marks: set[int] = set()
        self._sent_marks: set[int] = set()
        self._done_marks: set[int] = set()
        # The statements of the open transaction, in order: written again after a
        # failed commit (see "A failed commit" in the module's docstring).
        self._redo: list[tuple[str, Sequence[Any]]] = []
        # Failed commits in a row, and since when (the loop's clock).
        self._commit_failures = 0
        self._failing_since: float | None = None
        # Background WAL checkpoints (see CHECKPOINT_INTERVAL): their own connection,
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

    def _unavailable(self, exc: OSError | sqlite3.Error, existed: bool) -> StoreUnavailable:
        """Why the database cannot be opened (or created): the file, the reason, what to
        do. SQLite says "unable to open database file" or "attempt to write a readonly
        database" whatever the cause; the file system says which it is."""
        path, directory = self.path, self.path.parent
        user = _user_name()
        what = f"cannot {'open' if existed else 'create'} the state database {path}"
        elsewhere = "or set store.path to a file in a writable directory"
        if _read_only_file_system(directory):
            return StoreUnavailable(
                f"{what}: {directory} is on a read-only file system. Set store.path (or "
                "CHATKERNEL_HOME) to a place on a writable one.")
        if directory.is_dir() and not os.access(directory, os.W_OK | os.X_OK):
            why = f"the directory {directory} is not writable by {user}"
            # The file is there: what SQLite could not make is its write-ahead log.
            missing = [file for file in (Path(f"{path}-wal"), Path(f"{path}-shm"))
                       if existed and not file.exists()]
            if missing:
                why = f"SQLite must create {missing[0]} next to it (its write-ahead log), and {why}"
            return StoreUnavailable(f"{what}: {why}. Make {directory} writable for {user} "
                                    f"(chown or chmod), {elsewhere}.")
        for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            if file.exists() and not os.access(file, os.R_OK | os.W_OK):
                return StoreUnavailable(
                    f"{what}: {file} is not readable and writable by {user}. Give {user} "
                    f"read and write access to it (chown or chmod), {elsewhere}.")
        blocker = next((parent for parent in path.parents if parent.exists()), None)
        if blocker is not None and not blocker.is_dir():
            return StoreUnavailable(f"{what}: {blocker} is a file, not a directory. Set "
                                    "store.path to a file in a directory.")
        if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
            return StoreUnavailable(
                f"{what}: the file is not an SQLite database, or it is damaged. Move it "
                "aside to start afresh (what it held is lost to the gateway), or set "
                "store.path to another file.")
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return StoreUnavailable(f"{what}: {reason}. Check the file, {elsewhere}.")

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
        try:
            self._check_version(version)
            if version < len(MIGRATIONS):
                raise StoreError(f"{self.path}: the state database has schema version "
                                 f"{version}; the gateway migrates it to {len(MIGRATIONS)} on "
                                 "its next start")
        except StoreError:
            conn.close()
            raise
        return conn

    @property
    def lock_path(self) -> Path:
        """The file :meth:`claim` locks: beside the database, ``state.db.lock``."""
        return self.path.with_name(self.path.name + ".lock")

    def claim(self, holder: dict[str, Any]) -> None:
        """An exclusive ``flock`` on :attr:`lock_path`, held until :meth:`close`: one
        process writes a SQLite store, whichever home's ``store.path`` leads to it (the
        home's own lock cannot see a second home). The operating system releases it when
        the process ends, so a crash leaves no stale lock; the file keeps the holder."""
        if self.memory or self._claim_fd is not None:
            return
        path = self.lock_path
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StoreUnavailable(f"cannot lock the state database {self.path}: cannot "
                                   f"open {path} ({exc.strerror or exc})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                other = json.loads(os.read(fd, 4096) or b"{}")
            except (OSError, ValueError):
                other = {}
            os.close(fd)
            raise StoreUnavailable(_in_use_message(self.path, other)) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        self._claim_fd = fd

    def _release_claim(self) -> None:
        fd, self._claim_fd = self._claim_fd, None
        if fd is not None:
            os.close(fd)

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

    def _prepare_file(self) -> None:
        """The parent directory (0700 when created) and the file, 0600 from the start."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(fd)
        # The file may predate us; SQLite gives -wal and -shm the file's mode.
        for file in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm")):
            try:
                if file.stat().st_mode & 0o777 != 0o600:
                    os.chmod(file, 0o600)
            except FileNotFoundError:
                pass
            except PermissionError:
                log.warning("%s: cannot set mode 0600 (not the owner?)", file)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Apply the migrations the database lacks, each in its own transaction."""
        known = len(MIGRATIONS)
        version = self._user_version(conn)
        self._check_version(version)
        for number in range(version + 1, known + 1):
            conn.execute("BEGIN IMMEDIATE")  # another process may be migrating too
            try:
                current = self._user_version(conn)
                self._check_version(current)
                if current < number:
                    for statement in _statements(MIGRATIONS[number - 1]):
                        conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {number}")
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"{self.path}: schema migration {number} failed: "
                                     f"{exc}") from None
                raise
            if current < number:
                log.info("%s: schema migrated to version %d", self.path, number)

    @staticmethod
    def _user_version(conn: sqlite3.Connection) -> int:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])

    def _check_version(self, version: int) -> None:
        if version > len(MIGRATIONS):
            raise StoreUnavailable(
                f"{self.path}: the state database has schema version {version}, but this "
                f"chatkernel knows versions up to {len(MIGRATIONS)}: it was written by a "
                f"newer chatkernel. Upgrade chatkernel, or set [store] path to another file.")

    @property
    def schema_version(self) -> int:
        """The database's ``PRAGMA user_version``."""
        return self._user_version(self._db)

    @property
    def _db(self) -> sqlite3.Connection:
        conn = self._conn
        if conn is None:
            raise self._not_open()
        return conn

    def _not_open(self) -> StoreError:
        return StoreError(f"{self.path}: the store is not open (await store.open() first)")

    def _run(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """Execute one statement (autocommit: a write is committed when this returns)."""
        db = self._db
        try:
            return db.execute(sql, params)
        except UnicodeEncodeError:  # a lone surrogate: store U+FFFD rather than fail
            return db.execute(sql, _clean(params))

    def _write(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """Execute a write in the shared transaction and make sure its commit is scheduled.

        Every write goes through one cursor (a new one per statement cost a good
        part of a small insert): read its ``lastrowid`` / ``rowcount`` at once.
        """
        cursor = self._writer
        if cursor is None:  # made on the first write after open; close() drops it
            cursor = self._writer = self._db.cursor()
        db = self._conn  # open: it has a writer
        if not db.in_transaction:  # type: ignore[union-attr]
            db.execute("BEGIN")  # type: ignore[union-attr]
        try:
            try:
                cursor.execute(sql, params)
            except UnicodeEncodeError:  # a lone surrogate: store U+FFFD rather than fail
                params = _clean(params)
                cursor.execute(sql, params)
        except sqlite3.Error as exc:
            # This statement failed (its caller is told). SQLite may have rolled back
            # the whole transaction with it (a full disk): write the others again.
            if not db.in_transaction and self._redo:  # type: ignore[union-attr]
                self._rewrite(self._redo, StoreError(f"{self.path}: {exc}"))
            raise
        self._redo.append((sql, params))
        if not self._commit_scheduled:
            self._schedule_commit()
        return cursor

    def _schedule_commit(self) -> None:
        """Schedule the commit of the open transaction (callers check it is not yet)."""
        loop = self._commit_loop = asyncio.get_running_loop()
        self._commit_scheduled = True
        # Idle: commit on the next loop turn. Busy: at most one commit per
        # COMMIT_INTERVAL, so more writes share each (a commit costs more
        # than several inserts).
        delay = self._last_commit + COMMIT_INTERVAL - loop.time()
        if delay > 0:
            self._commit_handle = loop.call_later(delay, self._commit)
        else:
            self._commit_handle = loop.call_soon(self._commit)

    def _mark(self, marks: set[int], row_id: int) -> None:
        """Coalesce a ``sending`` / ``sent`` / ``done`` mark into the next commit."""
        if self._conn is None:  # a closed store refuses now, not at the commit
            raise self._not_open()
        marks.add(row_id)
        if not self._commit_scheduled:
            self._schedule_commit()

    def _write_marks(self) -> None:
        """Write the coalesced marks in the open transaction (before a commit or a read)."""
        sending, sent, done = self._sending_marks, self._sent_marks, self._done_marks
        if not sending and not sent and not done:
            return
        self._sending_marks, self._sent_marks, self._done_marks = set(), set(), set()
        db = self._db
        if not db.in_transaction:
            db.execute("BEGIN")
        now = time.time()
        redo = self._redo
        try:
            for status, marked in (("sending", sending), ("sent", sent)):
                for ids in _chunks(marked):
                    sql = (f"UPDATE outbox SET status = '{status}', error = NULL,"
                           f" updated_at = ? WHERE id IN ({_placeholders(len(ids))})")
                    db.execute(sql, (now, *ids))
                    redo.append((sql, (now, *ids)))
            for seqs in _chunks(done):
                sql = ("UPDATE inbound_journal SET status = 'done'"
                       f" WHERE seq IN ({_placeholders(len(seqs))})")
                db.execute(sql, seqs)
                redo.append((sql, seqs))
        except sqlite3.Error as exc:
            # Kept for the next commit (writing a mark twice changes nothing); the
            # transaction's other writes are made again if SQLite rolled them back.
            self._sending_marks |= sending
            self._sent_marks |= sent
            self._done_marks |= done
            if not db.in_transaction and self._redo:
                self._rewrite(self._redo, StoreError(f"{self.path}: {exc}"))
            raise StoreError(f"{self.path}: writing status marks failed: {exc}") from exc

    async def _committed(self) -> None:
        """Wait for the commit of this loop turn's writes (scheduled once per turn)."""
        if self._commit_scheduled:
            await self._commit_waiter()

    def _commit_waiter(self) -> asyncio.Future[None]:
        """A future of the caller's own, done at the scheduled commit (callers check that
        one is). (The hot paths await it inline rather than through _committed: a
        coroutine less a wait.)"""
        waiter = self._commit_loop.create_future()  # type: ignore[union-attr]
        self._commit_waiters.append(waiter)
        return waiter

    def _journal_waiter(self) -> asyncio.Future[None]:
        """A waiter for the commit of journal entries (callers check that one is
        scheduled): a failed commit drops them, and raises to this waiter rather than
        trying them again (see journal_inbound)."""
        waiter = self._commit_loop.create_future()  # type: ignore[union-attr]
        self._journal_waiters.append(waiter)
        return waiter

    def after_commit(self, callback: Callable[[Exception | None], None]) -> None:
        if self._commit_scheduled:
            self._commit_callbacks.append(callback)
        else:  # nothing waits for a commit: what was written is committed
            callback(None)

    async def flush(self) -> None:
        """Wait until everything written so far is committed."""
        if self._commit_scheduled:
            await self._commit_waiter()

    async def checkpoint(self) -> None:
        """Checkpoint the WAL now, in a thread (the store also does it by itself)."""
        if self._checkpointing is None:
            self._start_checkpoint(asyncio.get_running_loop())
        if self._checkpointing is not None:
            await asyncio.shield(self._checkpointing)

    def _start_checkpoint(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.memory or self.read_only or self._conn is None:
            return
        self._last_checkpoint = loop.time()
        future = self._checkpointing = loop.run_in_executor(None, self._checkpoint_now)
        future.add_done_callback(self._checkpoint_done)

    def _checkpoint_now(self) -> None:
        """In a worker thread: copy the WAL into the database (PASSIVE: never waits
        for readers or writers, so the event loop's writes go on meanwhile)."""
        conn = self._checkpointer
        if conn is None:
            conn = self._checkpointer = sqlite3.connect(
                self.path, timeout=self.busy_timeout, isolation_level=None,
                check_same_thread=False)
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _checkpoint_done(self, future: asyncio.Future[None]) -> None:
        self._checkpointing = None
        if not future.cancelled() and future.exception() is not None:
            # Not fatal: the WAL keeps everything; the next checkpoint tries again.
            log.warning("%s: WAL checkpoint failed: %s", self.path, future.exception())

    def _commit(self, *, final: bool = False) -> StoreError | None:
        """Commit the open transaction and wake its waiters; returns the error, if any.

        A failed commit is tried again later with the same writes, save its journal
        entries (see the module's docstring); ``final`` (closing): it is not, and
        what it carried is lost, which is logged.
        """
        scheduled, self._commit_scheduled = self._commit_scheduled, False
        handle, self._commit_handle = self._commit_handle, None
        if handle is not None:
            handle.cancel()  # a commit now makes the one scheduled needless
        journal_waiters, self._journal_waiters = self._journal_waiters, []
        loop = asyncio.get_running_loop()  # always called on the loop: a callback or a method
        if scheduled:
            self._last_commit = loop.time()
        conn = self._conn
        error = None
        try:
            if conn is not None:
                self._write_marks()
            if conn is not None and conn.in_transaction:
                conn.execute("COMMIT")
                self.commits += 1
        except (sqlite3.Error, StoreError) as exc:
            with contextlib.suppress(sqlite3.Error):
                if conn.in_transaction:  # type: ignore[union-attr]
                    conn.execute("ROLLBACK")  # type: ignore[union-attr]
            reason = exc.__cause__ if isinstance(exc, StoreError) else exc
            error = StoreError(f"{self.path}: commit failed: {reason}")
        redo, self._redo = self._redo, []
        if error is not None:
            self._commit_failures += 1
            if self._failing_since is None:
                self._failing_since = loop.time()
            # The journal entries are refused (their callers are told, their platforms
            # send them again); everything else is written again and kept waiting.
            kept = [statement for statement in redo if statement[0] is not self._JOURNAL_INSERT]
            if final:
                if kept:
                    log.error("%s: closed with %d write(s) not committed (%s): they are "
                              "lost", self.path, len(kept), error)
            elif kept and self._rewrite(kept, error):
                if self._commit_failures == 1:
                    log.warning("%s; its %d write(s) are kept and the commit is tried again "
                                "until it goes through", error, len(kept))
                self._retry_commit(loop)
        elif self._failing_since is not None:
            log.info("%s: committed after %d failed attempt(s) over %.1f s; nothing was "
                     "lost", self.path, self._commit_failures, loop.time() - self._failing_since)
            self._commit_failures, self._failing_since = 0, None
        for waiter in journal_waiters:
            if not waiter.done():
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(error)
        if self.on_commit is not None and (scheduled or error is not None):
            try:
                self.on_commit(error)
            except Exception:
                log.exception("%s: the commit observer failed", self.path)
        if error is not None and self._commit_scheduled:
            return error  # its other waiters wait for the commit tried again
        waiters, self._commit_waiters = self._commit_waiters, []
        callbacks, self._commit_callbacks = self._commit_callbacks, []
        for callback in callbacks:
            try:
                callback(error)
            except Exception:  # one caller's bug must not keep the others waiting
                log.exception("%s: a commit callback failed", self.path)
        for waiter in waiters:
            if not waiter.done():  # a cancelled waiter's future is done already
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(error)
        if error is None and scheduled and self._checkpointing is None and \
                self._last_commit - self._last_checkpoint >= CHECKPOINT_INTERVAL:
            self._start_checkpoint(loop)
        return error

    def _rewrite(self, statements: list[tuple[str, Sequence[Any]]], error: StoreError) -> bool:
        """Write ``statements`` again in a new transaction, after SQLite rolled theirs
        back; they keep their effects and ids (the database is as before them). False
        if they could not be: they are lost then, which is logged."""
        db = self._db
        try:
            if not db.in_transaction:
                db.execute("BEGIN")
            for sql, params in statements:
                db.execute(sql, params)
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                if db.in_transaction:
                    db.execute("ROLLBACK")
            self._redo = []
            log.error("%s: %d write(s) could not be made again after %s (%s): they are "
                      "lost", self.path, len(statements), error, exc)
            return False
        self._redo = list(statements)
        return True

    def _retry_commit(self, loop: asyncio.AbstractEventLoop) -> None:
        """Schedule the next attempt of a failed commit, with backoff."""
        delay = min(RETRY_FIRST * 2 ** (self._commit_failures - 1), RETRY_MAX)
        self._commit_scheduled, self._commit_loop = True, loop
        self._commit_handle = loop.call_later(delay, self._commit)

    # -- inbound journal -------------------------------------------------------------------

    #: Told apart by identity after a failed commit, whose journal entries are dropped.
    _JOURNAL_INSERT = (
        "INSERT INTO inbound_journal (channel, account, message_id, message, status, received_at)"
        " VALUES (?, ?, ?, ?, 'received', ?)"
        " ON CONFLICT (channel, account, message_id) DO NOTHING")

    async def journal_inbound(self, message: InboundMessage) -> int | None:
        cursor = self._write(self._JOURNAL_INSERT, (
            message.channel, message.account, message.message_id, encode_message(message),
            time.time()))
        seq = cursor.lastrowid if cursor.rowcount == 1 else None
        if self._commit_scheduled:  # also for a duplicate: its first may be in this commit
            await self._journal_waiter()
        return seq

    def _journal_rows(self, messages: list[InboundMessage]) -> list[int | None]:
        """Write a batch's journal rows into the open transaction: each one's seq, or
        None for a duplicate."""
        now = time.time()
        seqs = []
        for message in messages:
            cursor = self._write(self._JOURNAL_INSERT, (
                message.channel, message.account, message.message_id,
                encode_message(message), now))
            seqs.append(cursor.lastrowid if cursor.rowcount == 1 else None)
        return seqs

    async def journal_inbound_many(self, messages: list[InboundMessage]) -> list[int | None]:
        # The batch is already grouped: commit it at once rather than wait for
        # the group commit (a receive loop waits for this before it polls again).
        seqs = self._journal_rows(messages)
        error = self._commit()
        if error is not None:
            raise error
        return seqs

    async def journal_inbound_shared(self, messages: list[InboundMessage]) -> list[int | None]:
        # Concurrent webhook requests: each batch joins the open transaction and its
        # caller waits for the group commit, so requests that arrive together share
        # one commit; a failed commit drops the entries and raises here (no 2xx).
        seqs = self._journal_rows(messages)
        if self._commit_scheduled:  # also for duplicates: their first may be in this commit
            await self._journal_waiter()
        return seqs

    async def set_journal_status(self, seq: int, status: str) -> None:
        """Advance a journaled message; KeyError for a seq not in the journal."""
        if status not in JOURNAL_STATUSES:
            raise ValueError(f"journal status must be one of {', '.join(JOURNAL_STATUSES)}, "
                             f"not {status!r}")
        self._done_marks.discard(seq)  # this status supersedes a coalesced `done`
        cursor = self._write("UPDATE inbound_journal SET status = ? WHERE seq = ?",
                             (status, seq))
        if cursor.rowcount == 0:
            raise KeyError(f"no journal entry with seq {seq}")

    async def unfinished_inbound(self, *, account: tuple[str, str] | None = None
                                 ) -> list[JournalEntry]:
        self._write_marks()
        sql = ("SELECT seq, message, status, received_at FROM inbound_journal"
               " WHERE status = 'received'")
        params: tuple[str, ...] = ()
        if account is not None:  # still through the partial index: few unfinished rows
            sql += " AND channel = ? AND account = ?"
            params = account
        rows = self._run(sql + " ORDER BY seq", params).fetchall()
        return [JournalEntry(seq=seq, message=decode_message(data), status=status,
                             received_at=received_at)
                for seq, data, status, received_at in rows]

    # -- outbox ------------------------------------------------------------------------------

    async def outbox_add(self, entries: list[OutboxEntry], *,
                         finish_journal: list[int] | tuple[int, ...] = ()) -> list[int]:
        now = time.time()
        ids = []
        for entry in entries:
            cursor = self._write(
                "INSERT INTO outbox (reply_id, session_key, session_id, channel, account, route,"
                " payload, status, error, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (entry.reply_id, entry.session_key, entry.session_id, entry.channel,
                 entry.account, encode_route(entry.route), encode_payload(entry.payload),
                 entry.status, entry.error, now, now))
            entry.id = cursor.lastrowid  # type: ignore[assignment]
            entry.created_at = now
            ids.append(entry.id)
        for seq in finish_journal:  # no await since the inserts: one transaction
            self._mark(self._done_marks, seq)
        return ids

    async def outbox_mark(self, entry_id: int, status: str, error: str | None = None, *,
                          durable: bool = False) -> None:
        if status not in OUTBOX_STATUSES:
            raise ValueError(f"outbox status must be one of {', '.join(OUTBOX_STATUSES)}, "
                             f"not {status!r}")
        # The latest status of a row wins over a coalesced one not written yet.
        self._sending_marks.discard(entry_id)
        self._sent_marks.discard(entry_id)
        if status in ("sending", "sent") and error is None:
            self._mark(self._sending_marks if status == "sending" else self._sent_marks,
                       entry_id)
            if durable:
                await self._committed()
            return
        cursor = self._write("UPDATE outbox SET status = ?, error = ?, updated_at = ?"
                             " WHERE id = ?", (status, error, time.time(), entry_id))
        if cursor.rowcount == 0:
            raise KeyError(f"no outbox entry with id {entry_id}")
        if durable:
            await self._committed()

    async def outbox_sent_as(self, entry_id: int, platform_id: str) -> None:
        self._write("UPDATE outbox SET platform_id = ? WHERE id = ?", (platform_id, entry_id))

    async def outbox_by_platform_id(self, channel: str, account: str,
                                    platform_id: str) -> OutboxEntry | None:
        self._write_marks()
        rows = self._run(f"SELECT {self._OUTBOX_COLUMNS} FROM outbox WHERE channel = ?"
                         " AND account = ? AND platform_id = ? ORDER BY id DESC LIMIT 1",
                         (channel, account, platform_id)).fetchall()
        entries = self._outbox_entries(rows)
        return entries[0] if entries else None

    _OUTBOX_COLUMNS = ("id, reply_id, session_key, session_id, channel, account, route, payload,"
                       " status, error, created_at")

    async def outbox_reply(self, reply_id: str) -> list[OutboxEntry]:
        self._write_marks()
        rows = self._run(f"SELECT {self._OUTBOX_COLUMNS} FROM outbox WHERE reply_id = ?"
                         " ORDER BY id", (reply_id,)).fetchall()
        return self._outbox_entries(rows)

    async def prune_outbox(self, older_than: float) -> int:
        self._write_marks()
        cursor = self._write("DELETE FROM outbox WHERE status IN ('sent', 'failed', 'unknown')"
                             " AND created_at < ?", (older_than,))
        await self._committed()
        return cursor.rowcount

    async def outbox_unfinished(self, *, account: tuple[str, str] | None = None
                                ) -> list[OutboxEntry]:
        self._write_marks()
        sql = (f"SELECT {self._OUTBOX_COLUMNS} FROM outbox"
               " WHERE status IN ('pending', 'sending')")
        params: tuple[str, ...] = ()
        if account is not None:
            sql += " AND channel = ? AND account = ?"
            params = account
        rows = self._run(sql + " ORDER BY id", params).fetchall()
        return self._outbox_entries(rows)

    async def outbox_recent_sends(self, since: float, *,
                                  queued_since: float) -> list[RecentSend]:
        self._write_marks()
        # Ids grow with created_at: skip the rows queued before `queued_since` by id
        # (a binary search of rowid seeks) rather than read the whole table.
        first = self._first_outbox_id(queued_since)
        rows = self._run(
            "SELECT channel, account, route, status, updated_at FROM outbox"
            " WHERE id >= ? AND updated_at >= ? AND status != 'pending'"
            " ORDER BY updated_at", (first, since)).fetchall()
        return [RecentSend(channel, account, decode_route(route), status, at)
                for channel, account, route, status, at in rows]

    def _first_outbox_id(self, created: float) -> int:
        """The smallest id from which every outbox row was created at ``created`` or
        later (ids and creation times grow together)."""
        low, high = self._run("SELECT min(id), max(id) FROM outbox").fetchone()
        if low is None:
            return 0
        high += 1  # past the last row: nothing left to read
        while low < high:
            middle = (low + high) // 2
            row = self._run("SELECT created_at FROM outbox WHERE id >= ? ORDER BY id LIMIT 1",
                            (middle,)).fetchone()
            if row is None or row[0] >= created:
                high = middle
            else:
                low = middle + 1
        return low

    @staticmethod
    def _outbox_entries(rows: list[tuple[Any, ...]]) -> list[OutboxEntry]:
        return [OutboxEntry(id=row[0], reply_id=row[1], session_key=row[2],
                            session_id=row[3], channel=row[4], account=row[5],
                            route=decode_route(row[6]), payload=decode_payload(row[7]),
                            status=row[8], error=row[9], created_at=row[10])
                for row in rows]

    async def prune_journal(self, older_than: float, *, batch: int = 1000) -> int:
        """Delete ``done`` and ``rejected`` entries received before ``older_than`` (a time).

        Returns how many were deleted. Unfinished entries are kept whatever
        their age. A deleted entry was its message's dedupe key: call this with
        ``time.time() - JOURNAL_RETENTION`` (or a longer window), so dedupe
        holds for at least that window. Deletes in batches, letting other
        tasks run between them.
        """
        total = 0
        while True:
            self._write_marks()
            cursor = self._write(
                "DELETE FROM inbound_journal WHERE seq IN ("
                " SELECT seq FROM inbound_journal"
                " WHERE status IN ('done', 'rejected') AND received_at < ?"
                " ORDER BY seq LIMIT ?)",
                (older_than, batch))
            total += cursor.rowcount
            await self._committed()  # also lets other tasks run between batches
            if cursor.rowcount < batch:
                return total

    # -- platform cursors ------------------------------------------------------------------

    async def get_cursor(self, channel: str, account: str) -> str | None:
        row = self._run("SELECT cursor FROM cursors WHERE channel = ? AND account = ?",
                        (channel, account)).fetchone()
        return None if row is None else row[0]

    async def set_cursor(self, channel: str, account: str, cursor: str) -> None:
        self._write(
            "INSERT INTO cursors (channel, account, cursor, updated_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (channel, account) DO UPDATE"
            " SET cursor = excluded.cursor, updated_at = excluded.updated_at",
            (channel, account, cursor, time.time()))
        # Not waited for: committed with the next group (see Store.set_cursor).

    # -- sessions and routes ------------------------------------------------------------------

    _SESSION_COLUMNS = ("key, session_id, channel, account, chat_id, thread_id, created_at,"
                        " last_active_at, settings, agent")

    @staticmethod
    def _session(row: tuple[Any, ...]) -> SessionRecord:
        (key, session_id, channel, account, chat_id, thread_id, created_at, last_active_at,
         settings, agent) = row
        return SessionRecord(key=key, session_id=session_id, channel=channel, account=account,
                             chat_id=chat_id, thread_id=thread_id, created_at=created_at,
                             last_active_at=last_active_at,
                             settings=decode_json(settings) or {}, agent=agent)

    async def get_session(self, key: str) -> SessionRecord | None:
        row = self._run(f"SELECT {self._SESSION_COLUMNS} FROM sessions WHERE key = ?",
                        (key,)).fetchone()
        return None if row is None else self._session(row)

    async def save_session(self, record: SessionRecord) -> None:
        settings = encode_json(record.settings or {}, what="SessionRecord.settings")
        self._write(
            f"INSERT INTO sessions ({self._SESSION_COLUMNS})"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (key) DO UPDATE SET session_id = excluded.session_id,"
            " channel = excluded.channel, account = excluded.account,"
            " chat_id = excluded.chat_id, thread_id = excluded.thread_id,"
            " created_at = excluded.created_at, last_active_at = excluded.last_active_at,"
            " settings = excluded.settings, agent = excluded.agent",
            (record.key, record.session_id, record.channel, record.account, record.chat_id,
             record.thread_id, record.created_at, record.last_active_at, settings,
             record.agent))

    async def list_sessions(self, active_since: float | None = None) -> list[SessionRecord]:
        if active_since is None:
            rows = self._run(f"SELECT {self._SESSION_COLUMNS} FROM sessions"
                             " ORDER BY last_active_at DESC, key").fetchall()
        else:
            rows = self._run(f"SELECT {self._SESSION_COLUMNS} FROM sessions"
                             " WHERE last_active_at >= ? ORDER BY last_active_at DESC, key",
                             (active_since,)).fetchall()
        return [self._session(row) for row in rows]

    async def set_route(self, session_key: str, route: Route) -> None:
        self._write(
            "INSERT INTO routes (session_key, route, updated_at) VALUES (?, ?, ?)"
            " ON CONFLICT (session_key) DO UPDATE"
            " SET route = excluded.route, updated_at = excluded.updated_at",
            (session_key, encode_route(route), time.time()))

    async def get_route(self, session_key: str) -> Route | None:
        row = self._run("SELECT route FROM routes WHERE session_key = ?",
                        (session_key,)).fetchone()
        return None if row is None else decode_route(row[0])

    async def account_activity(self) -> dict[tuple[str, str], dict[str, float]]:
        activity: dict[tuple[str, str], dict[str, float]] = {}
        self._write_marks()
        for channel, account, at in self._run(
                "SELECT channel, account, MAX(received_at) FROM inbound_journal"
                " GROUP BY channel, account"):
            activity.setdefault((channel, account), {})["last_inbound_at"] = at
        for channel, account, at in self._run(
                "SELECT channel, account, MAX(updated_at) FROM outbox WHERE status = 'sent'"
                " GROUP BY channel, account"):
            activity.setdefault((channel, account), {})["last_sent_at"] = at
        return activity

    async def outbox_failures(self, limit: int = 10) -> list[tuple[OutboxEntry, float]]:
        self._write_marks()
        rows = self._run(f"SELECT {self._OUTBOX_COLUMNS}, updated_at FROM outbox"
                         " WHERE status = 'failed' OR status = 'unknown' ORDER BY id DESC"
                         " LIMIT ?", (limit,)).fetchall()
        entries = self._outbox_entries([row[:-1] for row in rows])
        return [(entry, row[-1]) for entry, row in zip(entries, rows)]

    # -- per-account state -------------------------------------------------------------------

    async def get_account_state(self, channel: str, account: str, key: str) -> Any:
        row = self._run("SELECT value FROM account_state"
                        " WHERE channel = ? AND account = ? AND key = ?",
                        (channel, account, key)).fetchone()
        return None if row is None else decode_json(row[0])

    async def set_account_state(self, channel: str, account: str, key: str,
                                value: Any) -> None:
        """Store a JSON value; ``None`` deletes the key (reading it gives None either way)."""
        if value is None:
            self._write("DELETE FROM account_state WHERE channel = ? AND account = ? AND key = ?",
                        (channel, account, key))
            return
        self._write(
            "INSERT INTO account_state (channel, account, key, value, updated_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (channel, account, key) DO UPDATE"
            " SET value = excluded.value, updated_at = excluded.updated_at",
            (channel, account, key, encode_json(value, what=f"account state {key!r}"),
             time.time()))

    # -- session logs -------------------------------------------------------------------------

    async def append_log(self, session_key: str, session_id: str, role: str, text: str,
                         meta: dict[str, Any] | None = None) -> int:
        (seq,) = await self.append_logs(session_key, session_id, [(role, text, meta)])
        return seq

    async def append_logs(self, session_key: str, session_id: str,
                          entries: Sequence[LogRow]) -> list[int]:
        # One INSERT for all of them (a turn's user rows and its reply). Measured, a
        # row costs the same either way; one statement keeps the rows together.
        if not entries:
            return []
        now = time.time()
        params: list[Any] = []
        for role, text, meta in entries:
            params += (session_key, session_id, role, text, now,
                       encode_json(meta, what="log meta") if meta else None)
        cursor = self._write(_log_insert(len(entries)), params)
        last = cursor.lastrowid
        assert last is not None
        # The rows of one INSERT get consecutive seqs, in order (AUTOINCREMENT, one writer
        # per transaction).
        return list(range(last - len(entries) + 1, last + 1))

    async def read_log(self, session_key: str, *, session_id: str | None = None,
                       limit: int | None = None, roles: tuple[str, ...] | None = None,
                       before_seq: int | None = None) -> list[LogEntry]:
        """The newest ``limit`` matching entries, oldest first.

        ``limit=None``: all of them; ``roles=()``: none. Filters (``session_id``,
        ``roles``, ``before_seq``) apply before the limit.
        """
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, not {limit}")
        if isinstance(roles, str):
            roles = (roles,)
        if limit == 0 or (roles is not None and not roles):
            return []
        sql = ("SELECT seq, session_key, session_id, role, text, ts, meta FROM session_log"
               " WHERE session_key = ?")
        params: list[Any] = [session_key]
        if session_id is not None:
            sql += " AND session_id = ?"
            params.append(session_id)
        if roles is not None:
            sql += f" AND role IN ({', '.join('?' * len(roles))})"
            params.extend(roles)
        if before_seq is not None:
            sql += " AND seq < ?"
            params.append(before_seq)
        if limit is None:
            rows = self._run(sql + " ORDER BY seq", params).fetchall()
        else:
            params.append(limit)
            rows = self._run(sql + " ORDER BY seq DESC LIMIT ?", params).fetchall()
            rows.reverse()
        return [LogEntry(seq=seq, session_key=key, session_id=sid, role=role, text=text,
                         ts=ts, meta=decode_json(meta) or {})
                for seq, key, sid, role, text, ts, meta in rows]

    # -- transcripts ----------------------------------------------------------------------------

    _TRANSCRIPT_COLUMNS = "id, role, text, media, ts, client_id"

    @staticmethod
    def _transcript_entry(row: tuple[Any, ...]) -> TranscriptEntry:
        entry_id, role, text, media, ts, client_id = row
        return TranscriptEntry(id=entry_id, role=role, text=text,
                               media=(decode_json(media) or []) if media else [], ts=ts,
                               client_id=client_id)

    async def transcript_add(self, channel: str, account: str, chat_id: str, role: str,
                             text: str, media: list[dict[str, Any]] | None = None, *,
                             client_id: str | None = None) -> TranscriptEntry | None:
        now = time.time()
        cursor = self._write(
            "INSERT INTO transcript (channel, account, chat_id, role, text, media, client_id,"
            " ts) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (channel, account, chat_id, role, text,
             encode_json(media, what="transcript media") if media else None, client_id, now))
        if cursor.rowcount != 1:
            return None
        return TranscriptEntry(id=cursor.lastrowid, role=role, text=text, media=media or [],
                               ts=now, client_id=client_id)

    async def transcript_read(self, channel: str, account: str, chat_id: str, *,
                              after: int = 0, limit: int | None = None
                              ) -> list[TranscriptEntry]:
        sql = (f"SELECT {self._TRANSCRIPT_COLUMNS} FROM transcript WHERE channel = ? AND"
               " account = ? AND chat_id = ? AND id > ? ORDER BY id DESC")
        params: list[Any] = [channel, account, chat_id, after]
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows = self._run(sql, params).fetchall()
        rows.reverse()
        return [self._transcript_entry(row) for row in rows]

    async def transcript_find(self, channel: str, account: str, chat_id: str,
                              client_id: str) -> TranscriptEntry | None:
        row = self._run(f"SELECT {self._TRANSCRIPT_COLUMNS} FROM transcript WHERE channel = ?"
                        " AND account = ? AND chat_id = ? AND client_id = ?",
                        (channel, account, chat_id, client_id)).fetchone()
        return self._transcript_entry(row) if row is not None else None

    # -- heartbeats -----------------------------------------------------------------------------

    _HEARTBEAT_COLUMNS = ("id, session_key, settings, paused, anchor_at, last_run_at,"
                          " last_outcome, task_runs, wake_texts")

    @staticmethod
    def _heartbeat(row: tuple[Any, ...]) -> HeartbeatState:
        (heartbeat_id, session_key, settings, paused, anchor_at, last_run_at, last_outcome,
         task_runs, wake_texts) = row
        return HeartbeatState(id=heartbeat_id, session_key=session_key,
                              settings=decode_json(settings) or {}, paused=bool(paused),
                              anchor_at=anchor_at, last_run_at=last_run_at,
                              last_outcome=last_outcome,
                              task_runs=decode_json(task_runs) or {},
                              wake_texts=decode_json(wake_texts) or [])

    async def get_heartbeat(self, heartbeat_id: str) -> HeartbeatState | None:
        row = self._run(f"SELECT {self._HEARTBEAT_COLUMNS} FROM heartbeats WHERE id = ?",
                        (heartbeat_id,)).fetchone()
        return None if row is None else self._heartbeat(row)

    async def save_heartbeat(self, state: HeartbeatState) -> None:
        self._write(
            f"INSERT INTO heartbeats ({self._HEARTBEAT_COLUMNS}, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET"
            " session_key = excluded.session_key, settings = excluded.settings,"
            " paused = excluded.paused, anchor_at = excluded.anchor_at,"
            " last_run_at = excluded.last_run_at, last_outcome = excluded.last_outcome,"
            " task_runs = excluded.task_runs, wake_texts = excluded.wake_texts,"
            " updated_at = excluded.updated_at",
            (state.id, state.session_key,
             encode_json(state.settings or {}, what="HeartbeatState.settings"),
             int(state.paused), state.anchor_at, state.last_run_at, state.last_outcome,
             encode_json(state.task_runs or {}, what="HeartbeatState.task_runs"),
             encode_json(list(state.wake_texts), what="HeartbeatState.wake_texts"),
             time.time()))

    async def delete_heartbeat(self, heartbeat_id: str) -> bool:
        cursor = self._write("DELETE FROM heartbeats WHERE id = ?", (heartbeat_id,))
        return cursor.rowcount > 0

    async def list_heartbeats(self) -> list[HeartbeatState]:
        rows = self._run(f"SELECT {self._HEARTBEAT_COLUMNS} FROM heartbeats ORDER BY id"
                         ).fetchall()
        return [self._heartbeat(row) for row in rows]
