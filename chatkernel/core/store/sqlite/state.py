"""What the SQLite store keeps per chat, account and heartbeat: sessions and their
routes, per-account state, session logs, transcripts, heartbeat state."""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any

from chatkernel.core.store.base import (
    HeartbeatState,
    LogEntry,
    LogRow,
    SessionRecord,
    TranscriptEntry,
)
from chatkernel.core.store.sqlite.commit import GroupCommit
from chatkernel.sdk.codec import decode_json, decode_route, encode_json, encode_route
from chatkernel.sdk.models import Route

__all__ = ["SQLiteState"]


@functools.lru_cache(maxsize=16)
def _log_insert(rows: int) -> str:
    """The session-log INSERT of ``rows`` rows (one text per count, so the
    connection's statement cache keeps it)."""
    values = ", ".join(["(?, ?, ?, ?, ?, ?)"] * rows)
    return ("INSERT INTO session_log (session_key, session_id, role, text, ts, meta)"
            f" VALUES {values}")


class SQLiteState(GroupCommit):
    """Sessions, routes, account state, logs, transcripts and heartbeats."""

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
