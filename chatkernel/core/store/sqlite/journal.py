"""The inbound journal and the platform cursors of the SQLite store."""

from __future__ import annotations

import asyncio

import time

from chatkernel.core.store.base import JOURNAL_STATUSES, JournalEntry
from chatkernel.core.store.sqlite.commit import GroupCommit
from chatkernel.sdk.codec import decode_message, encode_message
from chatkernel.sdk.models import InboundMessage

__all__ = ["JOURNAL_RETENTION", "SQLiteJournal"]

#: How long finished journal rows (the dedupe keys) are kept, in seconds: 7 days.
JOURNAL_RETENTION: float = 7 * 24 * 3600.0


class SQLiteJournal(GroupCommit):
    """Journal entries (the dedupe keys) and cursors: what receiving writes."""

    # -- inbound journal -------------------------------------------------------------------

    #: Told apart by identity after a failed commit, whose journal entries are dropped.
    _JOURNAL_INSERT = (
        "INSERT INTO inbound_journal (channel, account, message_id, message, status, received_at)"
        " VALUES (?, ?, ?, ?, 'received', ?)"
        " ON CONFLICT (channel, account, message_id) DO NOTHING")

    async def journal_inbound(self, message: InboundMessage) -> int | None:
        self._journaled += 1
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
        self._journaled += len(messages)
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
        # one commit; a failed commit drops the entries and raises here (no 2xx). A
        # request alone commits at once: there is no one to share with, and a loop
        # turn waited is a loop turn added to its answer. Alone: no commit under way,
        # the last one carried a single message, and no request committed at once in
        # this turn of the loop (requests that arrive together are handled in one).
        alone = not (self._commit_scheduled or self._last_shared or self._committed_now)
        seqs = self._journal_rows(messages)
        if alone:
            error = self._commit()
            if error is not None:
                raise error
            self._committed_now = True
            asyncio.get_running_loop().call_soon(self._next_turn)
        elif self._commit_scheduled:  # also for duplicates: their first may be in this one
            await self._journal_waiter()
        return seqs

    def _next_turn(self) -> None:
        self._committed_now = False

    async def set_journal_status(self, seq: int, status: str, *,
                                 message: InboundMessage | None = None) -> None:
        """Advance a journaled message; KeyError for a seq not in the journal."""
        if status not in JOURNAL_STATUSES:
            raise ValueError(f"journal status must be one of {', '.join(JOURNAL_STATUSES)}, "
                             f"not {status!r}")
        self._done_marks.discard(seq)  # this status supersedes a coalesced `done`
        if message is None:
            cursor = self._write("UPDATE inbound_journal SET status = ? WHERE seq = ?",
                                 (status, seq))
        else:
            cursor = self._write("UPDATE inbound_journal SET status = ?, message = ?"
                                 " WHERE seq = ?", (status, encode_message(message), seq))
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
