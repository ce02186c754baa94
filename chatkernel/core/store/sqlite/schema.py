"""The schema of the SQLite store and its migrations.


The schema evolves through numbered :data:`MIGRATIONS`; the number applied is
the database's ``PRAGMA user_version``. A database written by a newer
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from chatkernel.core.store.base import StoreError, StoreUnavailable

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SchemaMigrations"]

log = logging.getLogger("chatkernel.store")

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
    # 9: access control (docs/access.md): strangers' pending pairing requests, at most a
    # few per account, each with a code unique in its channel; and the senders the owner
    # approved, per channel and account.
    """
    CREATE TABLE pairing_requests (
        channel       TEXT NOT NULL,
        account       TEXT NOT NULL,
        sender        TEXT NOT NULL,
        code          TEXT NOT NULL,
        name          TEXT NOT NULL DEFAULT '',
        chat          TEXT NOT NULL,
        created_at    REAL NOT NULL,
        expires_at    REAL NOT NULL,
        last_sent_at  REAL NOT NULL,
        PRIMARY KEY (channel, account, sender)
    ) WITHOUT ROWID;
    CREATE UNIQUE INDEX pairing_requests_code ON pairing_requests (channel, code);

    CREATE TABLE approved_senders (
        channel      TEXT NOT NULL,
        account      TEXT NOT NULL,
        sender       TEXT NOT NULL,
        approved_at  REAL NOT NULL,
        PRIMARY KEY (channel, account, sender)
    ) WITHOUT ROWID;
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)


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


class SchemaMigrations:
    """The schema version of ``SQLiteStore``'s database, and the migrations it lacks."""

    path: Path
    _db: sqlite3.Connection  # commit.py

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
