"""The outbox of the SQLite store, and the reads of it (and of the journal) that health
makes."""

from __future__ import annotations

import time
from typing import Any

from chatkernel.core.store.base import OUTBOX_STATUSES, OutboxEntry, RecentSend
from chatkernel.core.store.sqlite.commit import GroupCommit
from chatkernel.sdk.codec import decode_payload, decode_route, encode_payload, encode_route

__all__ = ["SQLiteOutbox"]


class SQLiteOutbox(GroupCommit):
    """Outbox entries: queued, marked, found again, pruned."""

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
