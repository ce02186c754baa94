"""The outbox of the Redis store, and the reads of it (and of the journal) that health
makes."""

from __future__ import annotations

from typing import Any

from chatkernel.core.store.base import OUTBOX_STATUSES, OutboxEntry, RecentSend
from chatkernel.core.store.redis.connection import RedisConnection
from chatkernel.core.store.redis.journal import PRUNE_BATCH
from chatkernel.core.store.redis.keys import _acct, _bound
from chatkernel.sdk.codec import (
    decode_json,
    decode_payload,
    decode_route,
    encode_json,
    encode_payload,
    encode_route,
)

__all__ = ["FENCED_MARKS", "RedisOutbox"]

#: The outbox marks a fenced account's lease must allow: those that send, or would
#: have a payload sent (``pending`` over a new owner's ``unknown`` would send it twice).
FENCED_MARKS = frozenset({"sending", "sent", "pending"})


class RedisOutbox(RedisConnection):
    """Outbox entries: queued (fenced, or handed to their account's owner), marked,
    found again, pruned."""

    # -- outbox -------------------------------------------------------------------------------

    async def outbox_add(self, entries: list[OutboxEntry], *,
                         finish_journal: list[int] | tuple[int, ...] = ()) -> list[int]:
        self._writable("outbox_add")
        if not entries and not finish_journal:
            return []
        args: list[Any] = [len(entries), len(finish_journal)]
        for entry in entries:
            if entry.status not in OUTBOX_STATUSES:
                raise ValueError(f"outbox status must be one of {', '.join(OUTBOX_STATUSES)}, "
                                 f"not {entry.status!r}")
            # An account this store is not fenced for is another process's to send (see
            # hand_sends_to_owners): its owner reads it from the inbox.
            to_inbox = self._to_owners and (entry.channel, entry.account) not in self._fences
            args += (_acct(entry.channel, entry.account), entry.reply_id, entry.session_key,
                     entry.session_id, entry.channel, entry.account, encode_route(entry.route),
                     encode_payload(entry.payload), entry.status, encode_json(entry.error),
                     "1" if to_inbox else "0")
        args += (int(seq) for seq in finish_journal)
        # Each entry's account is checked against the store's fences (see fence).
        answer, now = await self._batched("a", "outbox_add", args, fences=self._mark_fences)
        ids = [int(entry_id) for entry_id in answer]
        for entry, entry_id in zip(entries, ids):
            entry.id = entry_id
            entry.created_at = now
        return ids

    async def outbox_mark(self, entry_id: int, status: str, error: str | None = None, *,
                          durable: bool = False) -> None:
        """Move an entry on (on the server when this returns, ``durable`` or not); a
        ``sending`` or ``sent`` mark of a fenced account checks its lease."""
        if status not in OUTBOX_STATUSES:
            raise ValueError(f"outbox status must be one of {', '.join(OUTBOX_STATUSES)}, "
                             f"not {status!r}")
        self._writable("outbox_mark")
        found = await self._batched("m", "outbox_mark", [int(entry_id), status,
                                                         encode_json(error)],
                                    fences=self._mark_fences if status in FENCED_MARKS else None)
        # As in SQLite: a coalesced mark (sending / sent, no error) of a missing row
        # changes nothing; any other status of one is an error.
        if not found and (status not in ("sending", "sent") or error is not None):
            raise KeyError(f"no outbox entry with id {entry_id}")

    async def outbox_sent_as(self, entry_id: int, platform_id: str) -> None:
        self._writable("outbox_sent_as")
        await self._batched("s", "outbox_sent_as", [int(entry_id), platform_id])

    async def outbox_by_platform_id(self, channel: str, account: str,
                                    platform_id: str) -> OutboxEntry | None:
        rows = await self._script("OUTBOX_BY_PLATFORM_ID", "outbox_by_platform_id",
                                  [_acct(channel, account), platform_id])
        entries = self._outbox_entries(rows)
        return entries[0] if entries else None

    @staticmethod
    def _outbox_entries(flat: list[Any], extra: int = 0) -> list[OutboxEntry]:
        width = 11 + extra
        return [OutboxEntry(id=int(flat[i]), reply_id=flat[i + 1], session_key=flat[i + 2],
                            session_id=flat[i + 3], channel=flat[i + 4], account=flat[i + 5],
                            route=decode_route(flat[i + 6]), payload=decode_payload(flat[i + 7]),
                            status=flat[i + 8], error=decode_json(flat[i + 9]),
                            created_at=float(flat[i + 10]))
                for i in range(0, len(flat), width)]

    async def outbox_reply(self, reply_id: str) -> list[OutboxEntry]:
        return self._outbox_entries(await self._script("OUTBOX_ROWS", "outbox_reply",
                                                       ["o:reply:" + reply_id]))

    async def outbox_unfinished(self, *, account: tuple[str, str] | None = None
                                ) -> list[OutboxEntry]:
        key = "o:unfinished" if account is None else "o:unfinished:" + _acct(*account)
        return self._outbox_entries(await self._script("OUTBOX_ROWS", "outbox_unfinished",
                                                       [key]))

    async def prune_outbox(self, older_than: float, *, batch: int = PRUNE_BATCH) -> int:
        self._writable("prune_outbox")
        total = 0
        while True:
            count = await self._script("OUTBOX_PRUNE", "prune_outbox",
                                       [_bound(older_than), batch])
            total += count
            if count < batch:
                return total

    async def outbox_recent_sends(self, since: float, *,
                                  queued_since: float) -> list[RecentSend]:
        flat = await self._script("OUTBOX_RECENT", "outbox_recent_sends",
                                  [_bound(since), _bound(queued_since)])
        return [RecentSend(flat[i], flat[i + 1], decode_route(flat[i + 2]), flat[i + 3],
                           float(flat[i + 4]))
                for i in range(0, len(flat), 5)]

    async def outbox_failures(self, limit: int = 10) -> list[tuple[OutboxEntry, float]]:
        flat = await self._script("OUTBOX_FAILURES", "outbox_failures", [int(limit)])
        entries = self._outbox_entries(flat, extra=1)
        return [(entry, float(flat[i * 12 + 11])) for i, entry in enumerate(entries)]

    async def account_activity(self) -> dict[tuple[str, str], dict[str, float]]:
        self._check_open()
        pipe = self._redis.pipeline(transaction=True)
        for key in ("accounts", "activity:in", "activity:sent"):
            pipe.hgetall(self.prefix + key)
        accounts, inbound, sent = await self._call("account_activity", pipe.execute())
        activity: dict[tuple[str, str], dict[str, float]] = {}
        for acct, who in accounts.items():
            channel, account = decode_json(who)
            times = {}
            if acct in inbound:
                times["last_inbound_at"] = float(inbound[acct])
            if acct in sent:
                times["last_sent_at"] = float(sent[acct])
            activity[channel, account] = times
        return activity
