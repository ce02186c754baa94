"""A refused stranger's words on a Redis store (docs/access.md): their journal entry is
blanked and their inbox entry deleted, so nothing under the prefix holds what they wrote,
and the inbox's readers pass over the deleted entry."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from chatkernel.core.inbound.access import forgotten
from chatkernel.core.store.redis import RedisStore
from chatkernel.sdk.models import InboundMessage, MediaRef
from chatkernel.testing import KernelHarness, ManualClock, scripted_agent
from chatkernel.testing.agents import agent_plugin

pytestmark = pytest.mark.anyio

WHERE = ("telegram", "main")


async def everything_under(url: str, prefix: str) -> bytes:
    """Every key under ``prefix`` and every name and value it holds, as the server answers
    them (hashes, streams, sorted sets with scores, sets, lists, strings), one a line."""
    found: list[bytes] = []
    async with aioredis.Redis.from_url(url) as server:
        async for key in server.scan_iter(match=prefix.encode() + b"*"):
            kind = (await server.type(key)).decode()
            found.append(key)
            if kind == "hash":
                for field, value in (await server.hgetall(key)).items():
                    found += (field, value)
            elif kind == "stream":
                for entry_id, fields in await server.xrange(key):
                    found.append(entry_id)
                    for field, value in fields.items():
                        found += (field, value)
            elif kind == "zset":
                for member, score in await server.zrange(key, 0, -1, withscores=True):
                    found += (member, repr(score).encode())
            elif kind == "set":
                found += await server.smembers(key)
            elif kind == "list":
                found += await server.lrange(key, 0, -1)
            elif kind == "string":
                found.append(await server.get(key))
            else:
                raise AssertionError(f"{key!r} is a {kind}, which this test does not read")
    return b"\n".join(found)


async def test_a_refused_strangers_words_are_nowhere_and_readers_pass_over_them(
        redis_server, redis_prefix):
    friend = InboundMessage("telegram", "main", "dm-f", "m1", "f", text="FRIEND-WORDS")
    stranger = InboundMessage(
        "telegram", "main", "dm-s", "m2", "s", text="STRANGER-WORDS",
        media=[MediaRef("document", filename="STRANGER-FILE.pdf", platform_id="STRANGER-ID")],
        route_extra={"context_token": "STRANGER-TOKEN"})
    async with RedisStore.at(redis_server, prefix=redis_prefix) as store:
        before = store.round_trips
        friend_seq, stranger_seq = await store.journal_inbound_many([friend, stranger])
        assert store.round_trips - before == 1  # as before: the inbox entry's id costs none
        # The owner has read both from the inbox, and refuses the stranger.
        read = await store.read_inbox({WHERE: "0-0"}, 0)
        assert [item.seq for _, _, item in read] == [friend_seq, stranger_seq]
        friend_entry, stranger_entry = read[0][1], read[1][1]
        before = store.round_trips
        await store.set_journal_status(stranger_seq, "rejected", message=forgotten(stranger))
        assert store.round_trips - before == 1  # its inbox entry goes in the same request
        assert await store.journal_inbound(stranger) is None  # the dedupe key stays

        everything = await everything_under(redis_server, redis_prefix)
        assert b"STRANGER" not in everything
        assert everything.count(b"FRIEND-WORDS") == 2  # the friend's entry and inbox entry

        # Readers pass over the deleted entry: from the start, from the owner's position
        # (the deleted entry's id), and from a takeover's, read once it was deleted.
        assert [item.seq for _, _, item in await store.read_inbox({WHERE: "0-0"}, 0)] == [
            friend_seq]
        assert await store.read_inbox({WHERE: stranger_entry}, 0) == []
        position = await store.inbox_position(*WHERE)
        assert position == friend_entry  # the newest entry left
        assert [entry.seq for entry in await store.unfinished_inbound()] == [friend_seq]
        later_seq = await store.journal_inbound(
            InboundMessage("telegram", "main", "dm-f", "m3", "f", text="later"))
        for start in (position, stranger_entry):
            assert [item.seq for _, _, item in await store.read_inbox({WHERE: start}, 0)] \
                == [later_seq]


async def test_a_gateway_on_redis_keeps_nothing_of_what_a_stranger_wrote(
        tmp_path, redis_server, redis_prefix):
    """The kernel's path: the message journaled (and put in the inbox the owner reads),
    refused, its entry blanked; the next message is answered as ever."""
    agent = scripted_agent()
    config = {"store": {"backend": "redis", "url": redis_server, "prefix": redis_prefix},
              "channels": {"memory": {"accounts": {"main": {"allow_from": ["owner"]}}}},
              "agent": {"kind": agent.name}}
    async with KernelHarness(tmp_path, config=config, plugins=[("agent", agent_plugin(agent))],
                             channel_clock=ManualClock()) as h:
        assert h.kernel.cluster.owns("memory:main")
        assert await h.channel.receive("STRANGER-WORDS", sender_id="stranger",
                                       chat_id="dm-stranger") == "rejected"
        await h.settle()
        assert len(h.channel.texts("dm-stranger")) == 1  # their pairing code
        assert await h.channel.receive("hello", sender_id="owner", chat_id="dm-owner") != \
            "rejected"
        await h.settle()
        assert [request.text for request in agent.requests] == ["hello"]
        await h.kernel.store.flush()
        everything = await everything_under(redis_server, redis_prefix)
    assert b"STRANGER-WORDS" not in everything
    assert b"hello" in everything  # the scan reads what is there
