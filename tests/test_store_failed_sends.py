"""Failed sends, the same on both stores: listed newest first, counted by when they
failed, taken out once (chatkernel.core.outbound.failed)."""

from __future__ import annotations

import time

import anyio
import pytest

from chatkernel.core.store.base import OutboxEntry
from chatkernel.sdk.models import OutboundPayload, Route

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(any_store):
    """The test runs on each backend (tests/conftest.py)."""
    return any_store


def entry(text: str, reply: str = "r1", index: int = 1, count: int = 1) -> OutboxEntry:
    return OutboxEntry(0, reply, "memory:main:chat-1", "s1", "memory", "main",
                       Route("memory", "main", "chat-1"),
                       OutboundPayload(text=text, chunk_index=index, chunk_count=count),
                       "pending", None, 0.0)


async def test_failed_sends_are_listed_counted_and_taken_once(store):
    sent, failed, unknown, later = (entry("fine"), entry("refused", "r2"),
                                    entry("lost", "r3"), entry("second", "r2", 2, 2))
    await store.outbox_add([sent, failed, unknown, later])
    await store.outbox_mark(sent.id, "sent")
    await store.outbox_mark(failed.id, "failed", "chat not found")
    await store.outbox_mark(unknown.id, "unknown", "no answer")
    await store.outbox_mark(later.id, "failed", "earlier part failed")
    await store.flush()
    listed = await store.outbox_failed()
    assert [(e.id, e.payload.text, e.error) for e, _ in listed] == [
        (later.id, "second", "earlier part failed"), (failed.id, "refused", "chat not found")]
    assert all(abs(at - time.time()) < 60 for _, at in listed)
    assert await store.outbox_failed(limit=1) == listed[:1]
    assert await store.outbox_failed_count(time.time() - 60) == 2
    assert await store.outbox_failed_count(time.time() + 60) == 0

    # Two takers at once: each entry goes to one of them, the others are left.
    results = []

    async def take() -> None:
        results.append(await store.outbox_take_failed([failed.id, sent.id, unknown.id]))

    async with anyio.create_task_group() as tg:
        tg.start_soon(take)
        tg.start_soon(take)
    assert sorted(len(r) for r in results) == [0, 1]
    [taken] = [r for r in results if r][0]
    assert (taken.id, taken.payload.text, taken.route.chat_id) == (failed.id, "refused", "chat-1")
    assert [e.id for e, _ in await store.outbox_failed()] == [later.id]
    assert [e.status for e in await store.outbox_reply("r1")] == ["sent"]
    assert [e.id for e in await store.outbox_reply("r2")] == [later.id]
    assert [e.status for e in await store.outbox_reply("r3")] == ["unknown"]
    assert await store.outbox_take_failed([]) == []
