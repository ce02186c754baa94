"""The inbound journal and the platform cursors of the Redis store."""

from __future__ import annotations

from typing import Any

from chatkernel.core.store.base import JOURNAL_STATUSES, JournalEntry
from chatkernel.core.store.redis.connection import RedisConnection
from chatkernel.core.store.redis.keys import _acct, _bound
from chatkernel.sdk.codec import decode_message, encode_json, encode_message
from chatkernel.sdk.models import InboundMessage

__all__ = ["PRUNE_BATCH", "RedisJournal"]

#: Entries a prune script deletes at once: other clients' commands run between batches.
PRUNE_BATCH = 1000


class RedisJournal(RedisConnection):
    """Journal entries (with their dedupe keys and inbox entries) and cursors."""

    # -- inbound journal ---------------------------------------------------------------------

    async def journal_inbound(self, message: InboundMessage) -> int | None:
        (seq,) = await self.journal_inbound_many([message])
        return seq

    async def journal_inbound_many(self, messages: list[InboundMessage]) -> list[int | None]:
        self._writable("journal_inbound")
        if not messages:
            return []
        args: list[Any] = [len(messages)]
        for message in messages:
            args += (_acct(message.channel, message.account), message.message_id,
                     encode_json([message.channel, message.account]), encode_message(message))
        seqs = await self._batched("j", "journal_inbound", args)
        return [int(seq) or None for seq in seqs]

    async def set_journal_status(self, seq: int, status: str, *,
                                 message: InboundMessage | None = None) -> None:
        """Advance a journaled message; KeyError for a seq not in the journal.

        With ``message`` (a refused stranger's, without their words) the entry keeps it
        instead, and the entry the journaled one made in the account's inbox stream is
        deleted in the same script: no key keeps what it replaced."""
        if status not in JOURNAL_STATUSES:
            raise ValueError(f"journal status must be one of {', '.join(JOURNAL_STATUSES)}, "
                             f"not {status!r}")
        self._writable("set_journal_status")
        args: list[Any] = [int(seq), status]
        if message is not None:
            args.append(encode_message(message))
        if not await self._batched("js", "set_journal_status", args):
            raise KeyError(f"no journal entry with seq {seq}")

    async def unfinished_inbound(self, *, account: tuple[str, str] | None = None
                                 ) -> list[JournalEntry]:
        suffix = "" if account is None else ":" + _acct(*account)
        flat = await self._script("JOURNAL_UNFINISHED", "unfinished_inbound", [suffix])
        return [JournalEntry(seq=int(flat[i]), message=decode_message(flat[i + 1]),
                             status=flat[i + 2], received_at=float(flat[i + 3]))
                for i in range(0, len(flat), 4)]

    async def prune_journal(self, older_than: float, *, batch: int = PRUNE_BATCH) -> int:
        """Delete ``done`` and ``rejected`` entries received before ``older_than``, with
        their dedupe keys, ``batch`` at a time; returns how many."""
        self._writable("prune_journal")
        total = 0
        while True:
            count = await self._script("JOURNAL_PRUNE", "prune_journal",
                                       [_bound(older_than), batch])
            total += count
            if count < batch:
                return total

    # -- platform cursors ---------------------------------------------------------------------

    async def get_cursor(self, channel: str, account: str) -> str | None:
        self._check_open()
        return await self._call("get_cursor", self._redis.hget(self.prefix + "cursors",
                                                               _acct(channel, account)))

    async def set_cursor(self, channel: str, account: str, cursor: str) -> None:
        self._writable("set_cursor")
        fence = self._fences.get((channel, account))
        if fence is None:
            await self._call("set_cursor", self._redis.hset(
                self.prefix + "cursors", _acct(channel, account), cursor))
        else:
            await self._script("CURSOR_FENCED", "set_cursor",
                               [_acct(channel, account), cursor, *fence])
