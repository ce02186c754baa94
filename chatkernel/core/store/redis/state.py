"""What the Redis store keeps per chat, account and heartbeat: sessions and their
routes, per-account state, session logs, transcripts, heartbeat state."""

from __future__ import annotations

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
from chatkernel.core.store.redis.connection import RedisConnection
from chatkernel.core.store.redis.keys import _acct, _bound, _part
from chatkernel.sdk.codec import decode_json, decode_route, encode_json, encode_route
from chatkernel.sdk.models import Route

__all__ = ["RedisState"]


class RedisState(RedisConnection):
    """Sessions, routes, account state, logs, transcripts and heartbeats."""

    # -- sessions and routes ------------------------------------------------------------------

    @staticmethod
    def _session(text: str) -> SessionRecord:
        data = decode_json(text)
        return SessionRecord(key=data["key"], session_id=data["session_id"],
                             channel=data["channel"], account=data["account"],
                             chat_id=data["chat_id"], thread_id=data.get("thread_id"),
                             created_at=data["created_at"],
                             last_active_at=data["last_active_at"],
                             settings=data.get("settings") or {},
                             agent=data.get("agent") or "default")

    async def get_session(self, key: str) -> SessionRecord | None:
        self._check_open()
        text = await self._call("get_session", self._redis.hget(self.prefix + "sessions", key))
        return None if text is None else self._session(text)

    async def save_session(self, record: SessionRecord) -> None:
        self._writable("save_session")
        settings = encode_json(record.settings or {}, what="SessionRecord.settings")
        text = encode_json({
            "key": record.key, "session_id": record.session_id, "channel": record.channel,
            "account": record.account, "chat_id": record.chat_id,
            "thread_id": record.thread_id, "created_at": float(record.created_at),
            "last_active_at": float(record.last_active_at), "agent": record.agent,
            "settings": None,
        }, what="SessionRecord")
        # The settings' text spliced in rather than encoded twice.
        text = text[:-len('null}')] + settings + "}"
        pipe = self._redis.pipeline(transaction=True)
        pipe.hset(self.prefix + "sessions", record.key, text)
        pipe.zadd(self.prefix + "sessions:active", {record.key: float(record.last_active_at)})
        await self._call("save_session", pipe.execute())

    async def list_sessions(self, active_since: float | None = None) -> list[SessionRecord]:
        rows = await self._script("SESSIONS", "list_sessions", [
            "-inf" if active_since is None else _bound(active_since)])
        records = [self._session(text) for text in rows if text is not None]
        records.sort(key=lambda record: (-record.last_active_at, record.key))
        return records

    async def set_route(self, session_key: str, route: Route) -> None:
        self._writable("set_route")
        await self._call("set_route", self._redis.hset(self.prefix + "routes", session_key,
                                                       encode_route(route)))

    async def get_route(self, session_key: str) -> Route | None:
        self._check_open()
        text = await self._call("get_route", self._redis.hget(self.prefix + "routes",
                                                              session_key))
        return None if text is None else decode_route(text)

    # -- per-account state ---------------------------------------------------------------------

    async def get_account_state(self, channel: str, account: str, key: str) -> Any:
        self._check_open()
        text = await self._call("get_account_state", self._redis.hget(
            f"{self.prefix}state:{_acct(channel, account)}", key))
        return None if text is None else decode_json(text)

    async def set_account_state(self, channel: str, account: str, key: str,
                                value: Any) -> None:
        """Store a JSON value; ``None`` deletes the key (reading it gives None either way)."""
        self._writable("set_account_state")
        name = f"{self.prefix}state:{_acct(channel, account)}"
        if value is None:
            await self._call("set_account_state", self._redis.hdel(name, key))
            return
        text = encode_json(value, what=f"account state {key!r}")
        await self._call("set_account_state", self._redis.hset(name, key, text))

    # -- session logs ---------------------------------------------------------------------------

    async def append_log(self, session_key: str, session_id: str, role: str, text: str,
                         meta: dict[str, Any] | None = None) -> int:
        (seq,) = await self.append_logs(session_key, session_id, [(role, text, meta)])
        return seq

    async def append_logs(self, session_key: str, session_id: str,
                          entries: Sequence[LogRow]) -> list[int]:
        self._writable("append_log")
        if not entries:
            return []
        now = time.time()
        sid = encode_json(session_id)
        args: list[Any] = [session_key, len(entries)]
        for role, text, meta in entries:
            args += (sid, encode_json(role),
                     encode_json([text, now, meta or None], what="log meta"))
        last = int(await self._batched("l", "append_log", args))
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
        role_args = [encode_json(role) for role in roles or ()]
        rows = await self._script("LOG_READ", "read_log", [
            session_key, "+inf" if before_seq is None else f"({int(before_seq)}",
            -1 if limit is None else limit,
            "" if session_id is None else encode_json(session_id), len(role_args),
            *role_args])
        entries = []
        for row in reversed(rows):
            sid, role, seq, body = row.split("\n", 3)
            text, ts, meta = decode_json(body)
            entries.append(LogEntry(seq=int(seq), session_key=session_key,
                                    session_id=decode_json(sid), role=decode_json(role),
                                    text=text, ts=ts, meta=meta or {}))
        return entries

    # -- transcripts ---------------------------------------------------------------------------

    @staticmethod
    def _chat(channel: str, account: str, chat_id: str) -> str:
        return f"{_part(channel)}:{_part(account)}:{chat_id}"

    @staticmethod
    def _transcript_entry(row: str) -> TranscriptEntry:
        entry_id, body = row.split("\n", 1)
        role, text, media, ts, client_id = decode_json(body)
        return TranscriptEntry(id=int(entry_id), role=role, text=text, media=media or [],
                               ts=ts, client_id=client_id)

    async def transcript_add(self, channel: str, account: str, chat_id: str, role: str,
                             text: str, media: list[dict[str, Any]] | None = None, *,
                             client_id: str | None = None) -> TranscriptEntry | None:
        self._writable("transcript_add")
        body = encode_json([role, text, media or None, time.time(), client_id],
                           what="transcript media")
        row = await self._script("TRANSCRIPT_ADD", "transcript_add", [
            self._chat(channel, account, chat_id), client_id or "", body])
        return None if row is None else self._transcript_entry(row)

    async def transcript_read(self, channel: str, account: str, chat_id: str, *,
                              after: int = 0, limit: int | None = None
                              ) -> list[TranscriptEntry]:
        self._check_open()
        key = f"{self.prefix}t:{self._chat(channel, account, chat_id)}"
        if limit is None:
            call = self._redis.zrevrangebyscore(key, "+inf", f"({int(after)}")
        else:
            call = self._redis.zrevrangebyscore(key, "+inf", f"({int(after)}", start=0,
                                                num=int(limit))
        rows = await self._call("transcript_read", call)
        return [self._transcript_entry(row) for row in reversed(rows)]

    async def transcript_find(self, channel: str, account: str, chat_id: str,
                              client_id: str) -> TranscriptEntry | None:
        self._check_open()
        row = await self._call("transcript_find", self._redis.hget(
            f"{self.prefix}t:client:{self._chat(channel, account, chat_id)}", client_id))
        return None if row is None else self._transcript_entry(row)

    # -- heartbeats ------------------------------------------------------------------------------

    @staticmethod
    def _heartbeat(text: str) -> HeartbeatState:
        data = decode_json(text)
        return HeartbeatState(id=data["id"], session_key=data.get("session_key"),
                              settings=data.get("settings") or {},
                              paused=bool(data.get("paused")), anchor_at=data.get("anchor_at"),
                              last_run_at=data.get("last_run_at"),
                              last_outcome=data.get("last_outcome"),
                              task_runs=data.get("task_runs") or {},
                              wake_texts=data.get("wake_texts") or [])

    async def get_heartbeat(self, heartbeat_id: str) -> HeartbeatState | None:
        self._check_open()
        text = await self._call("get_heartbeat", self._redis.hget(self.prefix + "heartbeats",
                                                                  heartbeat_id))
        return None if text is None else self._heartbeat(text)

    async def save_heartbeat(self, state: HeartbeatState) -> None:
        self._writable("save_heartbeat")
        text = encode_json({
            "id": state.id, "session_key": state.session_key,
            "settings": state.settings or {}, "paused": bool(state.paused),
            "anchor_at": state.anchor_at, "last_run_at": state.last_run_at,
            "last_outcome": state.last_outcome, "task_runs": state.task_runs or {},
            "wake_texts": list(state.wake_texts),
        }, what="HeartbeatState")
        await self._call("save_heartbeat", self._redis.hset(self.prefix + "heartbeats",
                                                            state.id, text))

    async def delete_heartbeat(self, heartbeat_id: str) -> bool:
        self._writable("delete_heartbeat")
        return bool(await self._call("delete_heartbeat", self._redis.hdel(
            self.prefix + "heartbeats", heartbeat_id)))

    async def list_heartbeats(self) -> list[HeartbeatState]:
        self._check_open()
        rows = await self._call("list_heartbeats",
                                self._redis.hgetall(self.prefix + "heartbeats"))
        return [self._heartbeat(rows[key]) for key in sorted(rows)]
