"""The Redis store's write batches, on a real redis-server: the hot path's writes that
concurrent callers make in one loop turn go to the server as one request, and each
caller still gets its own answer, or its own error (chatkernel/core/store/redis/batch.py).

Round trips are counted by the store's own counter, ``RedisStore.round_trips`` (what
``chatkernel_store_round_trips`` reports on /metrics)."""

from __future__ import annotations

import asyncio

import pytest

from chatkernel.core.store import StoreError
from chatkernel.core.store.base import OutboxEntry
from chatkernel.core.store.redis import RedisStore
from chatkernel.core.store.shared import LeaseLost, account_lease
from chatkernel.sdk.models import InboundMessage, OutboundPayload, Route
from chatkernel.testing.redis import RedisServer

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(redis_server, redis_prefix):
    async with RedisStore.at(redis_server, prefix=redis_prefix) as store:
        yield store


def msg(message_id: str, *, account: str = "main", chat: str = "chat-1") -> InboundMessage:
    return InboundMessage(channel="telegram", account=account, chat_id=chat,
                          message_id=message_id, sender_id="user-1", text=f"text {message_id}")


def entry(i: int, *, account: str = "main") -> OutboxEntry:
    return OutboxEntry(0, f"r{i}", f"telegram:{account}:chat-{i}", "s1", "telegram", account,
                       Route("telegram", account, f"chat-{i}"), OutboundPayload(text=f"t{i}"),
                       "pending", None, 0.0)


class Trips:
    """The store's requests to the server during a block."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.count = 0

    def __enter__(self) -> Trips:
        self.start = self.store.round_trips
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.count = self.store.round_trips - self.start


async def test_concurrent_journal_writes_go_as_one_request_each_with_its_own_seq(store):
    (earlier,) = await store.journal_inbound_many([msg("old")])
    ids = [f"m{i}" for i in range(40)]
    # Forty chats' messages at once, a redelivery of an earlier one, and the same
    # message twice within the batch (a platform's retry racing its original).
    calls = [store.journal_inbound(msg(i, chat=f"chat-{n}")) for n, i in enumerate(ids)]
    calls += [store.journal_inbound(msg("old")), store.journal_inbound(msg("m7")),
              store.journal_inbound_many([msg("x1"), msg("x2")])]
    with Trips(store) as trips:
        *seqs, again, twice, pair = await asyncio.gather(*calls)
    assert trips.count == 1
    # Each caller has its own seq, in the order the calls were made.
    assert seqs == list(range(earlier + 1, earlier + 41))
    assert again is None and twice is None  # duplicates, told as such
    assert pair == [earlier + 41, earlier + 42]
    journal = {e.seq: e.message.message_id for e in await store.unfinished_inbound()}
    assert journal == {earlier: "old", **dict(zip(seqs, ids)),
                       earlier + 41: "x1", earlier + 42: "x2"}


async def test_concurrent_outbox_transitions_share_a_request_per_step(store):
    seqs = [await store.journal_inbound(msg(f"m{i}")) for i in range(20)]
    replies = [entry(i) for i in range(20)]
    with Trips(store) as adding:
        ids = await asyncio.gather(*(store.outbox_add([reply], finish_journal=[seq])
                                     for reply, seq in zip(replies, seqs)))
    assert adding.count == 1
    ids = [entry_id for (entry_id,) in ids]
    assert len(set(ids)) == 20 and [reply.id for reply in replies] == ids
    assert await store.unfinished_inbound() == []  # each add finished its journal entry
    with Trips(store) as sending:
        await asyncio.gather(*(store.outbox_mark(i, "sending", durable=True) for i in ids))
    assert sending.count == 1
    # A step of each kind at once: the marks and the platform ids of different entries.
    with Trips(store) as finishing:
        await asyncio.gather(*(store.outbox_mark(i, "sent") for i in ids[:10]),
                             *(store.outbox_sent_as(i, f"p{i}") for i in ids[:10]),
                             *(store.outbox_mark(i, "failed", "refused") for i in ids[10:]))
    assert finishing.count == 1
    assert [e.id for e in await store.outbox_unfinished()] == []
    statuses = {e.id: e.status for i in range(20) for e in await store.outbox_reply(f"r{i}")}
    assert statuses == {i: "sent" for i in ids[:10]} | {i: "failed" for i in ids[10:]}
    found = await store.outbox_by_platform_id("telegram", "main", f"p{ids[3]}")
    assert found is not None and found.id == ids[3]
    failures = await store.outbox_failures(limit=20)
    assert sorted(e.id for e, _ in failures) == ids[10:]
    assert {e.error for e, _ in failures} == {"refused"}


async def test_every_character_a_field_can_hold_reaches_the_server_as_it_was(store):
    # A batch's fields travel as one JSON array the script decodes: quotes, backslashes,
    # control characters, NUL, text that looks like JSON or like a field's length prefix,
    # non-ASCII and emoji in ids, keys and bodies come back exactly.
    odd = ['say "hi" \\ back\\slash', "line\nbreak\ttab\r\x00nul\x1f", '{"json": [1]}',
           "12:not a length", "Grüße, 你好, مرحبا", "emoji 👍🏽 and ☃", ""]
    messages = [msg(f"id-{i}-{text[:6]}", chat=f"chat 👍 {i}") for i, text in enumerate(odd)]
    for message, text in zip(messages, odd):
        message.text = text
    with Trips(store) as trips:
        seqs = await asyncio.gather(*(store.journal_inbound(m) for m in messages),
                                    store.append_logs("k 💬", "s\"1\"", [
                                        ("user", text, {"note": text}) for text in odd]))
    assert trips.count == 1
    journal = {e.seq: e.message for e in await store.unfinished_inbound()}
    assert [journal[seq] for seq in seqs[:-1]] == messages
    assert [(e.session_id, e.text, e.meta) for e in await store.read_log("k 💬")] == [
        ('s"1"', text, {"note": text}) for text in odd]
    replies = [entry(i) for i in range(len(odd))]
    for reply, text in zip(replies, odd):
        reply.payload = OutboundPayload(text=text)
    ids = [i for (i,) in await asyncio.gather(*(store.outbox_add([r]) for r in replies))]
    await asyncio.gather(*(store.outbox_mark(i, "failed", text) for i, text in zip(ids, odd)))
    failures = {e.id: (e.payload.text, e.error) for e, _ in await store.outbox_failures(20)}
    assert failures == {i: (text, text) for i, text in zip(ids, odd)}


async def test_a_batch_changing_thousands_of_index_entries_makes_each_change(store):
    # The script makes a batch's index changes at its end, a command per key for up to
    # a thousand members at a time: 5,000 journal entries in, then 2,400 of them done.
    with Trips(store) as trips:
        seqs = await store.journal_inbound_many([msg(f"m{i}", chat=f"chat-{i % 7}")
                                                 for i in range(5000)])
    assert trips.count == 1 and len(set(seqs)) == 5000
    await asyncio.gather(*(store.set_journal_status(seq, "done") for seq in seqs[:2400]))
    assert [e.seq for e in await store.unfinished_inbound()] == seqs[2400:]
    assert [e.seq for e in await store.unfinished_inbound(account=("telegram", "main"))
            ] == seqs[2400:]
    assert await store.prune_journal(float("inf")) == 2400


async def test_a_missing_entry_fails_only_its_own_caller_in_a_batch(store):
    (queued,) = await store.outbox_add([entry(1)])
    results = await asyncio.gather(store.outbox_mark(queued, "sending", durable=True),
                                   store.outbox_mark(10_000, "failed", "no such entry"),
                                   store.set_journal_status(10_000, "done"),
                                   store.journal_inbound(msg("m1")),
                                   return_exceptions=True)
    assert results[0] is None and isinstance(results[3], int)
    assert isinstance(results[1], KeyError) and "10000" in str(results[1])
    assert isinstance(results[2], KeyError)
    assert [e.status for e in await store.outbox_reply("r1")] == ["sending"]


async def test_a_write_the_server_fails_fails_only_its_own_caller(store, redis_server):
    import redis.asyncio as aioredis

    raw = aioredis.Redis.from_url(redis_server)
    try:  # a key of the wrong type under the account's dedupe hash: its writes fail
        await raw.set(f"{store.prefix}j:dedupe:telegram:broken", "not a hash")
    finally:
        await raw.aclose()
    told: list[Exception | None] = []
    store.on_commit = told.append
    with Trips(store) as trips:
        broken, fine = await asyncio.gather(store.journal_inbound(msg("m1", account="broken")),
                                            store.journal_inbound(msg("m1")),
                                            return_exceptions=True)
    assert trips.count == 1
    assert type(broken) is StoreError and "journal_inbound failed" in str(broken)
    assert "WRONGTYPE" in str(broken)
    assert fine == 1
    assert told == [broken]  # health hears of the failure


async def test_a_refused_fence_fails_only_its_own_write_in_a_batch(redis_server, redis_prefix):
    lease = account_lease("telegram", "main")
    async with RedisStore.at(redis_server, prefix=redis_prefix) as old, \
            RedisStore.at(redis_server, prefix=redis_prefix) as new:
        token = await old.acquire_lease(lease, "old", 30)
        old.fence("telegram", "main", token)
        (mine,) = await old.outbox_add([entry(1)])
        (other,) = await old.outbox_add([entry(2, account="other")])
        await old.release_lease(lease, "old", token)  # the account passes to `new`
        new.fence("telegram", "main", await new.acquire_lease(lease, "new", 30))

        with Trips(old) as trips:
            results = await asyncio.gather(
                old.outbox_mark(mine, "sending", durable=True),  # fenced: refused
                old.outbox_add([entry(3)]),  # fenced: refused
                old.outbox_mark(other, "sending", durable=True),  # another account: made
                old.outbox_add([entry(4, account="other")]),  # made
                old.outbox_mark(mine, "unknown", "lost mid-send"),  # sends nothing: made
                old.journal_inbound(msg("m1")),  # journaling is not fenced
                return_exceptions=True)
        assert trips.count == 1
        refused, added, marked, other_added, unknown, seq = results
        assert isinstance(refused, LeaseLost) and refused.lease == lease
        assert "outbox_mark refused" in str(refused)
        assert isinstance(added, LeaseLost) and "outbox_add refused" in str(added)
        assert marked is None and unknown is None and isinstance(seq, int)
        assert len(other_added) == 1
        assert await new.outbox_reply("r3") == []  # the refused add wrote nothing
        assert [e.status for e in await new.outbox_reply("r1")] == ["unknown"]
        assert [e.status for e in await new.outbox_reply("r2")] == ["sending"]
        assert [e.status for e in await new.outbox_reply("r4")] == ["pending"]


async def test_a_fence_dropped_after_a_write_was_made_still_checks_that_write(
        redis_server, redis_prefix):
    lease = account_lease("telegram", "main")
    async with RedisStore.at(redis_server, prefix=redis_prefix) as old, \
            RedisStore.at(redis_server, prefix=redis_prefix) as new:
        token = await old.acquire_lease(lease, "old", 30)
        old.fence("telegram", "main", token)
        (mine,) = await old.outbox_add([entry(1)])
        await old.release_lease(lease, "old", token)
        await new.acquire_lease(lease, "new", 30)
        # Made while fenced, then the fence is dropped before the batch goes out.
        made = asyncio.ensure_future(old.outbox_mark(mine, "sending", durable=True))
        await asyncio.sleep(0)  # the mark is queued
        old.fence("telegram", "main", None)
        with pytest.raises(LeaseLost):
            await made
        assert [e.status for e in await new.outbox_reply("r1")] == ["pending"]


async def test_a_batch_whose_connection_dies_fails_every_caller_and_is_not_sent_again(
        tmp_path, redis_prefix):
    with RedisServer(tmp_path / "redis") as server:
        told: list[Exception | None] = []
        async with RedisStore.at(server.url, prefix=redis_prefix) as store:
            (queued,) = await store.outbox_add([entry(1)])
            store.on_commit = told.append
            server.stop()
            with Trips(store) as trips:
                results = await asyncio.gather(
                    *(store.journal_inbound(msg(f"m{i}")) for i in range(10)),
                    store.outbox_mark(queued, "sending", durable=True),
                    store.append_log("k", "s", "user", "hi"),
                    return_exceptions=True)
            assert trips.count == 1
            assert all(type(result) is StoreError for result in results), results
            assert all(f"redis at {server.url}: journal_inbound failed" in str(result)
                       for result in results[:10])
            assert "outbox_mark failed" in str(results[10])
            assert "append_log failed" in str(results[11])
            assert len(told) == 1 and isinstance(told[0], StoreError)
            server.start()  # the same data; its scripts are gone (loaded again once)
            assert await store.unfinished_inbound() == []  # none of them was made
            assert [e.status for e in await store.outbox_reply("r1")] == ["pending"]
            assert await store.journal_inbound(msg("m1")) == 1
            assert told[-1] is None


async def test_flush_waits_for_the_writes_queued_so_far(redis_server, redis_prefix, store):
    made = [asyncio.ensure_future(store.journal_inbound(msg(f"m{i}"))) for i in range(5)]
    await asyncio.sleep(0)  # the writes are queued, not sent yet
    await store.flush()
    async with RedisStore.at(redis_server, prefix=redis_prefix) as other:  # on the server
        assert [e.seq for e in await other.unfinished_inbound()] == [1, 2, 3, 4, 5]
    assert await asyncio.gather(*made) == [1, 2, 3, 4, 5]


async def test_closing_sends_the_writes_still_queued(redis_server, redis_prefix):
    store = RedisStore.at(redis_server, prefix=redis_prefix)
    await store.open()
    made = asyncio.ensure_future(store.journal_inbound(msg("m1")))
    await asyncio.sleep(0)
    await store.close()
    assert await made == 1
    async with RedisStore.at(redis_server, prefix=redis_prefix) as again:
        assert [e.seq for e in await again.unfinished_inbound()] == [1]


async def test_after_a_server_restart_no_idle_connection_fails_a_call(tmp_path, redis_prefix):
    with RedisServer(tmp_path / "redis") as server:
        async with RedisStore.at(server.url, prefix=redis_prefix) as store:
            await store.set_cursor("telegram", "main", "41")
            # Ten connections in the pool, idle once these are answered.
            await asyncio.gather(*(store.get_cursor("telegram", "main") for _ in range(10)))
            server.stop()
            with pytest.raises(StoreError):
                await store.journal_inbound(msg("m1"))  # the first to find it gone
            server.start()
            # Every idle connection was closed with the first failure: none is found
            # broken by a call now (redis-py cannot tell before it writes on one).
            assert await asyncio.gather(*(store.get_cursor("telegram", "main")
                                          for _ in range(10))) == ["41"] * 10
            assert await store.journal_inbound(msg("m1")) == 1
