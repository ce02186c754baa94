"""Failed sends, as an operator handles them: listed from the store, retried once, or
discarded (``chatkernel deliveries``, the console's Deliveries page).

A ``failed`` outbox entry stays in the store until it is pruned with the finished
ones (``store.journal_retention_days``), so the list survives restarts. A retry
*takes* the entry out of the store (an atomic check that it is still ``failed``, and
its deletion: of two operators retrying it at once, one gets it) with the later parts
of its reply that were not sent because of it, and queues their payloads again as a new
reply of the same session, through the outbox: behind what the session's sender holds
already, under the account's rate limits and send policy, on the process that owns the
account when several share the store. Nothing of it can be sent twice: the old entries
are gone, and the new ones are sent, or fail, as any reply. A discard takes the entry
out and queues nothing.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from chatkernel.core.outbound.deliveries import describe_payload
from chatkernel.core.outbound.outbox import EARLIER_CHUNK_FAILED

if TYPE_CHECKING:
    from chatkernel.core.store.base import OutboxEntry, Store
    from chatkernel.sdk.models import Account, OutboundPayload, Route

#: Queues payloads as a new reply of a session: (account, session key, session id, route,
#: payloads) -> reply id (the outbox's ``submit``).
Requeue = Callable[["Account", str, str, "Route", "list[OutboundPayload]"], Awaitable[str]]

#: Characters of a failed payload's text the list shows.
PREVIEW_CHARS = 120
#: The most failed sends a list shows.
MAX_LISTED = 500


class NotFailed(LookupError):
    """The entry is not a failed send (any more): sent, retried or discarded already,
    or pruned."""


def preview(payload: "OutboundPayload") -> str:
    """The start of a payload's text (or its file's name and caption), on one line."""
    if payload.media_path is not None:
        text = f"[file {payload.media_path.name}] {payload.caption}".strip()
    else:
        text = " ".join(payload.text.split())
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS - 1].rstrip() + "…"


def describe(entry: "OutboxEntry", failed_at: float, now: float) -> dict[str, Any]:
    """A failed send as the list shows it (JSON values)."""
    payload = entry.payload
    return {"id": entry.id, "reply_id": entry.reply_id, "session": entry.session_key,
            "account": f"{entry.channel}:{entry.account}", "channel": entry.channel,
            "chat_id": entry.route.chat_id, "thread_id": entry.route.thread_id,
            "part": f"{payload.chunk_index}/{payload.chunk_count}",
            "reason": entry.error or "?", "failed_at": failed_at,
            "created_at": entry.created_at, "age_s": round(max(0.0, now - failed_at), 1),
            "preview": preview(payload), "message": describe_payload(payload)}


class FailedSends:
    """List, count, retry and discard failed sends. ``store()``: the opened store;
    ``accounts``: the kernel's accounts by key (read only); ``requeue``: queues payloads
    as a new reply (:data:`Requeue`); ``clock``: what ages are counted against."""

    def __init__(self, *, store: Callable[[], "Store"], accounts: Mapping[str, "Account"],
                 requeue: Requeue, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._accounts = accounts
        self._requeue = requeue
        self._clock = clock

    async def list(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest failed sends (at most ``limit``, up to :data:`MAX_LISTED`)."""
        now = self._clock()
        found = await self._store().outbox_failed(limit=max(1, min(limit, MAX_LISTED)))
        return [describe(entry, at, now) for entry, at in found]

    async def count_since(self, since: float) -> int:
        """How many sends failed at or after ``since`` (a Unix time)."""
        return await self._store().outbox_failed_count(since)

    async def retry(self, entry_id: int) -> dict[str, Any]:
        """Queue a failed send again, with the later parts of its reply it held back;
        :class:`NotFailed` when it is not a failed send, LookupError when its account
        is not configured any more (then it stays failed)."""
        store = self._store()
        taken = await store.outbox_take_failed([entry_id])
        if not taken:
            raise NotFailed(f"no failed send with id {entry_id} (sent, retried or discarded "
                            "already: chatkernel deliveries list shows those left)")
        entry = taken[0]
        account = self._accounts.get(f"{entry.channel}:{entry.account}")
        if account is None:
            # Put back as it was (with a new id): nothing may be lost by a refused retry.
            entry.id = 0
            await store.outbox_add([entry])
            raise LookupError(f"account {entry.channel}:{entry.account} is not configured: "
                              f"the send stays failed, as id {entry.id}")
        later = [other.id for other in await store.outbox_reply(entry.reply_id)
                 if other.status == "failed" and other.error == EARLIER_CHUNK_FAILED
                 and other.payload.chunk_index > entry.payload.chunk_index]
        if later:
            taken += await store.outbox_take_failed(later)
        taken.sort(key=lambda e: e.payload.chunk_index)
        # Fresh payloads: the outbox numbers them and gives each its key.
        payloads = [dataclasses.replace(e.payload, key=None) for e in taken]
        reply_id = await self._requeue(account, entry.session_key, entry.session_id,
                                       entry.route, payloads)
        await store.append_log(entry.session_key, entry.session_id, "notification",
                               f"retried: {len(taken)} failed part(s) queued again as reply "
                               f"{reply_id}", {"kind": "delivery", "retried": [e.id for e in
                                                                              taken]})
        return {"retried": [e.id for e in taken], "reply_id": reply_id,
                "session": entry.session_key, "account": account.key}

    async def discard(self, entry_id: int) -> dict[str, Any]:
        """Forget a failed send (it is not sent); :class:`NotFailed` when it is not one."""
        taken = await self._store().outbox_take_failed([entry_id])
        if not taken:
            raise NotFailed(f"no failed send with id {entry_id} (sent, retried or discarded "
                            "already: chatkernel deliveries list shows those left)")
        entry = taken[0]
        return {"discarded": entry.id, "session": entry.session_key,
                "account": f"{entry.channel}:{entry.account}"}
