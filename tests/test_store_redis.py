"""The Redis store's own behaviour, on a real redis-server: several store objects (as
several gateway processes would hold) on one server, leases and fencing, the inbox
streams, instances, a lost connection, read-only opening, and the choice of backend.

What every backend does is tested in test_store.py."""

from __future__ import annotations

import json

import sys

import anyio
import pytest

from chatkernel.core.config import ConfigError, KernelConfig, StoreConfig
from chatkernel.sdk.models import InboundMessage, OutboundPayload, Route
from chatkernel.core.store import StoreError, StoreUnavailable, open_store
from chatkernel.core.store.base import OutboxEntry, SessionRecord
from chatkernel.core.store.redis import SCHEMA_VERSION, RedisStore, safe_url
from chatkernel.core.store.shared import LeaseLost, SharedState, account_lease
from chatkernel.testing.redis import RedisServer
from chatkernel.testing.contract import wait_until as wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def make_store(redis_server, redis_prefix):
    """Unopened stores on this test's prefix: each one as another process would hold."""
    return lambda **options: RedisStore.at(redis_server, prefix=redis_prefix, **options)


@pytest.fixture
async def store(make_store):
    async with make_store() as store:
        yield store


@pytest.fixture
async def raw(redis_server):
    """A plain client, to look at the keys themselves."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_server, decode_responses=True)
    yield client
    await client.aclose()


async def keys(raw, prefix: str) -> dict[str, object]:
    """Every key under ``prefix`` with its value and whether it expires."""
    found: dict[str, object] = {}
    async for key in raw.scan_iter(match=prefix.replace("*", r"\*") + "*"):
        kind = await raw.type(key)
        value = {"hash": raw.hgetall, "zset": lambda k: raw.zrange(k, 0, -1, withscores=True),
                 "set": raw.smembers, "string": raw.get,
                 "stream": lambda k: raw.xrange(k)}[kind](key)
        found[key] = (kind, await value, await raw.ttl(key) >= 0)
    return found


def msg(message_id: str, *, account: str = "main", **fields) -> InboundMessage:
    fields.setdefault("chat_id", "chat-1")
    return InboundMessage(channel="telegram", account=account, message_id=message_id,
                          sender_id="user-1", **fields)


def entries(count: int = 1, *, account: str = "main") -> list[OutboxEntry]:
    return [OutboxEntry(0, "r1", f"telegram:{account}:chat-1", "s1", "telegram", account,
                        Route("telegram", account, "chat-1"), OutboundPayload(text=f"t{i}"),
                        "pending", None, 0.0) for i in range(count)]


async def wait_until(predicate, what: str, timeout: float = 10.0) -> None:
    """Poll an async predicate until it holds (bounded: fails after ``timeout``)."""
    await wait_for(predicate, timeout=timeout, what=what)


# -- several processes on one server ---------------------------------------------------------


async def test_two_stores_journaling_the_same_messages_keep_exactly_one_of_each(make_store):
    async with make_store() as first, make_store() as second:
        results: list[int | None] = []

        async def deliver(store, i: int) -> None:
            if i % 3:
                results.append(await store.journal_inbound(msg(f"m{i % 10}")))
            else:
                results.extend(await store.journal_inbound_many(
                    [msg(f"m{i % 10}"), msg(f"m{(i + 1) % 10}")]))

        async with anyio.create_task_group() as tg:
            for i in range(60):
                tg.start_soon(deliver, first if i % 2 else second, i)
        kept = [seq for seq in results if seq is not None]
        assert len(kept) == 10 and len(set(kept)) == 10
        unfinished = await second.unfinished_inbound()
        assert sorted(e.message.message_id for e in unfinished) == sorted(
            f"m{i}" for i in range(10))
        assert [e.seq for e in unfinished] == sorted(kept)


async def test_an_entry_one_store_journals_is_finished_by_another(make_store):
    async with make_store() as poller, make_store() as worker:
        seq = await poller.journal_inbound(msg("m1"))
        (entry,) = await worker.unfinished_inbound(account=("telegram", "main"))
        assert entry.seq == seq
        await worker.outbox_add(entries(1), finish_journal=[seq])
        assert await poller.unfinished_inbound() == []
        assert [e.payload.text for e in await poller.outbox_unfinished()] == ["t0"]


# -- leases ----------------------------------------------------------------------------------


async def test_a_lease_is_held_renewed_and_released_only_by_its_holder(store):
    assert isinstance(store, SharedState) and store.shared is store
    token = await store.acquire_lease("poll", "a", 30)
    assert isinstance(token, int)
    assert await store.acquire_lease("poll", "a", 30) == token  # kept, not retaken
    assert await store.acquire_lease("poll", "b", 30) is None
    assert await store.renew_lease("poll", "a", token, 30) is True
    assert await store.renew_lease("poll", "a", token + 1, 30) is False
    assert await store.renew_lease("poll", "b", token, 30) is False
    (holder, held, left), = (await store.leases()).values()
    assert (holder, held) == ("a", token) and 0 < left <= 30
    await store.release_lease("poll", "b", token)  # not b's: nothing happens
    await store.release_lease("poll", "a", token + 1)  # a stale token: nothing either
    assert await store.acquire_lease("poll", "b", 30) is None
    await store.release_lease("poll", "a", token)
    assert await store.leases() == {}
    taken = await store.acquire_lease("poll", "b", 30)
    assert taken is not None and taken > token  # a new holder: a higher token
    assert await store.leases() == {"poll": ("b", taken, pytest.approx(30, abs=1))}
    with pytest.raises(ValueError, match="ttl"):
        await store.acquire_lease("poll", "b", 0)


async def test_an_expired_lease_is_taken_over_with_a_higher_token(make_store):
    async with make_store() as first, make_store() as second:
        old = await first.acquire_lease("account:telegram:main", "first", 0.2)
        assert await second.acquire_lease("account:telegram:main", "second", 30) is None

        async def expired() -> bool:
            return "account:telegram:main" not in await second.leases()

        await wait_until(expired, "the lease to expire")
        new = await second.acquire_lease("account:telegram:main", "second", 30)
        assert new is not None and new > old
        assert await first.renew_lease("account:telegram:main", "first", old, 30) is False
        assert await first.acquire_lease("account:telegram:main", "first", 30) is None
        # the same holder taking it again after it expired gets a new token too
        await second.release_lease("account:telegram:main", "second", new)
        again = await first.acquire_lease("account:telegram:main", "first", 30)
        assert again > new


# -- fencing ---------------------------------------------------------------------------------


async def test_writes_fenced_with_a_stale_token_raise_lease_lost_and_write_nothing(make_store):
    lease = account_lease("telegram", "main")
    assert lease == "account:telegram:main"
    async with make_store() as old, make_store() as new:
        token = await old.acquire_lease(lease, "old", 30)
        old.fence("telegram", "main", token)
        await old.set_cursor("telegram", "main", "100")  # held: written
        seq = await old.journal_inbound(msg("m1"))
        (queued,) = await old.outbox_add(entries(1))
        await old.outbox_mark(queued, "sending", durable=True)

        # The lease passes to another process (the old one stalled past it).
        await old.release_lease(lease, "old", token)
        taken = await new.acquire_lease(lease, "new", 30)
        new.fence("telegram", "main", taken)

        with pytest.raises(LeaseLost) as info:
            await old.set_cursor("telegram", "main", "99")
        assert isinstance(info.value, StoreError) and info.value.lease == lease
        assert await new.get_cursor("telegram", "main") == "100"
        with pytest.raises(LeaseLost):
            await old.outbox_add(entries(2), finish_journal=[seq])
        assert [e.id for e in await new.outbox_unfinished()] == [queued]  # nothing added
        assert [e.seq for e in await new.unfinished_inbound()] == [seq]  # nor finished
        with pytest.raises(LeaseLost):
            await old.outbox_mark(queued, "sent")
        with pytest.raises(LeaseLost):
            await old.outbox_mark(queued, "sending", durable=True)
        assert [e.status for e in await new.outbox_reply("r1")] == ["sending"]
        with pytest.raises(LeaseLost):  # back to pending: it would be sent again
            await old.outbox_mark(queued, "pending")
        assert [e.status for e in await new.outbox_reply("r1")] == ["sending"]
        # Marks that send nothing are not fenced: a stale process may still record a
        # failure it saw.
        await old.outbox_mark(queued, "unknown", "the lease was lost mid-send")
        assert [e.status for e in await new.outbox_reply("r1")] == ["unknown"]

        # The current holder writes; another account of the old store is not fenced.
        await new.set_cursor("telegram", "main", "101")
        await new.outbox_add(entries(1))
        await old.set_cursor("telegram", "other", "7")
        await old.outbox_add(entries(1, account="other"))
        assert await new.get_cursor("telegram", "other") == "7"
        # Unfenced again, the old store writes as before.
        old.fence("telegram", "main", None)
        await old.set_cursor("telegram", "main", "102")
        assert await new.get_cursor("telegram", "main") == "102"


async def test_a_fenced_write_after_the_lease_expired_is_refused(store):
    lease = account_lease("telegram", "main")
    token = await store.acquire_lease(lease, "me", 0.2)
    store.fence("telegram", "main", token)
    await store.set_cursor("telegram", "main", "1")

    async def expired() -> bool:
        return lease not in await store.leases()

    await wait_until(expired, "the lease to expire")
    with pytest.raises(LeaseLost):
        await store.set_cursor("telegram", "main", "2")
    assert await store.get_cursor("telegram", "main") == "1"


# -- inbox streams ---------------------------------------------------------------------------


async def test_journaled_messages_are_in_their_accounts_inbox_in_order(store):
    main, other = ("telegram", "main"), ("telegram", "other")
    assert await store.inbox_position(*main) == "0-0"
    assert await store.read_inbox({main: "0-0", other: "0-0"}, timeout=0) == []
    seqs = [await store.journal_inbound(msg("m1", text="first")),
            *await store.journal_inbound_many([msg("m2"), msg("o1", account="other"),
                                               msg("m1")]),  # a redelivery: not again
            await store.journal_inbound(msg("m3"))]
    assert seqs[3] is None
    found = await store.read_inbox({main: "0-0", other: "0-0"}, timeout=1)
    # Each account's stream in journal order (the accounts' order is no matter).
    assert [(account, entry.message.message_id) for account, _, entry in found] == [
        (main, "m1"), (main, "m2"), (main, "m3"), (other, "o1")]
    assert [entry.seq for _, _, entry in found] == [seqs[0], seqs[1], seqs[4], seqs[2]]
    first = found[0][2]
    assert first.status == "received" and first.message.text == "first"
    assert first.message == msg("m1", text="first", timestamp=first.message.timestamp)
    last_main = found[2][1]
    assert await store.inbox_position(*main) == last_main
    # After the last ids: nothing, once the timeout has passed.
    positions = {main: last_main, other: found[3][1]}
    assert await store.read_inbox(positions, timeout=0.1) == []
    after = await store.read_inbox({main: found[1][1]}, timeout=1)
    assert [entry.message.message_id for _, _, entry in after] == ["m3"]


async def test_payloads_queued_for_an_account_owned_elsewhere_go_to_its_inbox(make_store):
    """After hand_sends_to_owners, what a process queues for an account it is not fenced
    for reaches the account's inbox (its owner sends it); its own accounts' do not."""
    main, mine = ("telegram", "main"), ("telegram", "mine")
    async with make_store() as owner, make_store() as other:
        other.hand_sends_to_owners()
        token = await other.acquire_lease(account_lease(*mine), "other", 30)
        other.fence(*mine, token)
        start = {main: await owner.inbox_position(*main),
                 mine: await owner.inbox_position(*mine)}
        (queued,) = await other.outbox_add(entries(1))
        await other.outbox_add(entries(1, account="mine"))
        found = await owner.read_inbox(start, timeout=1)
        assert [(account, item.id) for account, _, item in found] == [(main, queued)]
        (entry,) = [item for _, _, item in found]
        assert isinstance(entry, OutboxEntry) and entry.status == "pending"
        assert entry == (await owner.outbox_reply(entry.reply_id))[0]


async def test_a_blocking_inbox_read_wakes_for_a_new_message_and_holds_up_nothing(
        make_store, raw):
    async def xread_blocked() -> bool:
        return any("b" in client["flags"] and client["cmd"].startswith("xread")
                   for client in await raw.client_list())

    async with make_store() as reader, make_store() as poller:
        account = ("telegram", "main")
        position = await reader.inbox_position(*account)
        got: list = []
        blocked = anyio.Event()

        async def read() -> None:
            blocked.set()
            got.extend(await reader.read_inbox({account: position}, timeout=30))

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await blocked.wait()
            # the XREAD is waiting on the server now
            await wait_for(xread_blocked, what="the XREAD blocked on the server")
            # The reader's other calls go on meanwhile (the block has its own connection).
            with anyio.fail_after(5):
                await reader.ping()
                await reader.set_cursor("telegram", "main", "5")
            assert got == []
            seq = await poller.journal_inbound(msg("m1"))
        ((found_account, entry_id, entry),) = got
        assert found_account == account and entry.seq == seq
        assert await reader.inbox_position(*account) == entry_id


# -- instances -------------------------------------------------------------------------------


async def test_instances_are_listed_while_they_renew(make_store):
    async with make_store() as first, make_store() as second:
        await first.register_instance("gw-1", {"host": "a", "pid": 1, "accounts": ["x"]}, 30)
        await second.register_instance("gw-2", {"host": "b"}, 0.2)
        assert await first.instances() == {"gw-1": {"host": "a", "pid": 1, "accounts": ["x"]},
                                           "gw-2": {"host": "b"}}

        async def gone() -> bool:
            return "gw-2" not in await first.instances()

        await wait_until(gone, "gw-2 to expire")
        assert await second.instances() == {"gw-1": {"host": "a", "pid": 1, "accounts": ["x"]}}
        await second.register_instance("gw-2", {"host": "b", "again": True}, 30)
        assert (await first.instances())["gw-2"] == {"host": "b", "again": True}
        with pytest.raises(TypeError, match="JSON values only"):
            await first.register_instance("gw-3", {"bad": object()}, 30)
        await second.unregister_instance("gw-2")  # going away: not listed at once
        assert set(await first.instances()) == {"gw-1"}


async def test_ping_measures_a_round_trip(store):
    assert 0 < await store.ping() < 10


# -- a lost connection -------------------------------------------------------------------------


async def test_the_store_reconnects_after_the_server_restarts(tmp_path, redis_prefix):
    with RedisServer(tmp_path / "redis") as server:
        told: list[Exception | None] = []
        async with RedisStore.at(server.url, prefix=redis_prefix) as store:
            store.on_commit = told.append
            seq = await store.journal_inbound(msg("m1"))
            await store.set_cursor("telegram", "main", "41")
            assert told == [None, None]
            server.stop()
            with pytest.raises(StoreError) as info:
                await store.journal_inbound(msg("m2"))
            assert f"redis at {server.url}: journal_inbound failed" in str(info.value)
            with pytest.raises(StoreError):
                await store.get_cursor("telegram", "main")
            assert isinstance(told[-1], StoreError) and len(told) == 4
            server.start()  # the same port and data: what was written is still there
            assert await store.get_cursor("telegram", "main") == "41"
            assert told[-1] is None
            assert [e.seq for e in await store.unfinished_inbound()] == [seq]
            assert await store.journal_inbound(msg("m1")) is None  # dedupe kept
            assert await store.journal_inbound(msg("m2")) > seq
            assert await store.ping() > 0


async def test_an_unreachable_server_fails_to_open_clearly_without_the_password():
    with RedisServer() as server:
        url = server.url.replace("//", "//:s3cret-pw@")
    # stopped: nothing listens on its port any more
    store = RedisStore.at(url)
    with pytest.raises(StoreUnavailable) as info:
        await store.open()
    text = str(info.value)
    assert "s3cret-pw" not in text and "s3cret-pw" not in repr(store)
    assert f"cannot reach the Redis server at redis://:***@127.0.0.1:{url.rsplit(':', 1)[1]}" \
        in text
    assert isinstance(info.value, ConfigError)  # the command line says it in one line
    await store.close()


async def test_a_wrong_password_is_not_in_the_error(redis_server):
    url = redis_server.replace("//", "//user:hunter2-pw@")
    with pytest.raises(StoreError) as info:
        await RedisStore.at(url).open()
    assert "hunter2-pw" not in str(info.value)
    assert "redis://user:***@127.0.0.1:" in str(info.value)


def test_safe_url():
    assert safe_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert safe_url("redis://:pw@h:1/2") == "redis://:***@h:1/2"
    assert safe_url("rediss://u:p%40ss@h/0?x=1") == "rediss://u:***@h/0?x=1"


# -- read-only opening (chatkernel status) ------------------------------------------------------


async def test_read_only_open_creates_and_changes_nothing(make_store, raw, redis_prefix):
    with pytest.raises(StoreError, match="no state under the prefix"):
        await make_store(read_only=True).open()
    assert await keys(raw, redis_prefix) == {}
    async with make_store() as writer:
        await writer.journal_inbound(msg("m1"))
        await writer.register_instance("gone", {}, 0.05)
        token = await writer.acquire_lease("short", "w", 0.05)
        assert token is not None
        await anyio.sleep(0.1)  # real time: Redis expires them (both now gone)
    before = await keys(raw, redis_prefix)
    async with make_store(read_only=True) as reader:
        assert [e.message.message_id for e in await reader.unfinished_inbound()] == ["m1"]
        assert await reader.instances() == {} and await reader.leases() == {}
        assert await reader.account_activity()
        with pytest.raises(StoreError, match="read-only"):
            await reader.journal_inbound(msg("m2"))
        with pytest.raises(StoreError, match="read-only"):
            await reader.set_cursor("telegram", "main", "1")
    assert await keys(raw, redis_prefix) == before


async def test_a_session_saved_before_there_were_agents_is_the_default_agents(store, raw,
                                                                               redis_prefix):
    await raw.hset(redis_prefix + "sessions", "telegram:main:1", json.dumps({
        "key": "telegram:main:1", "session_id": "old", "channel": "telegram",
        "account": "main", "chat_id": "1", "thread_id": None, "created_at": 1.0,
        "last_active_at": 1.0, "settings": {}}))
    record = await store.get_session("telegram:main:1")
    assert (record.session_id, record.agent) == ("old", "default")


async def test_keys_written_by_a_newer_layout_are_refused(make_store, raw, redis_prefix):
    await raw.hset(redis_prefix + "meta", "schema", SCHEMA_VERSION + 1)
    with pytest.raises(StoreUnavailable, match="written by a newer chatkernel"):
        await make_store().open()


async def test_stores_on_other_prefixes_see_nothing_of_each_other(redis_server):
    async with RedisStore.at(redis_server, prefix="one-prefix-test:") as one, \
            RedisStore.at(redis_server, prefix="other-prefix-test:") as other:
        await one.journal_inbound(msg("m1"))
        assert await other.journal_inbound(msg("m1")) is not None
        assert len(await other.unfinished_inbound()) == 1
        await one.set_journal_status((await one.unfinished_inbound())[0].seq, "done")
        assert len(await other.unfinished_inbound()) == 1


# -- choosing the backend ------------------------------------------------------------------------


async def test_open_store_picks_redis_by_name(redis_server, redis_prefix):
    config = KernelConfig(store=StoreConfig(backend="redis", url=redis_server,
                                            prefix=redis_prefix))
    store = open_store(config)
    assert isinstance(store, RedisStore) and store.name == "redis"
    assert store.url == redis_server and store.prefix == redis_prefix
    async with store:
        assert await store.journal_inbound(msg("m1")) == 1
    assert RedisStore(KernelConfig()).url == "redis://127.0.0.1:6379/0"
    assert RedisStore(KernelConfig()).prefix == "chatkernel:"


def test_without_the_redis_package_the_backend_says_how_to_install_it(monkeypatch):
    for name in [name for name in sys.modules if name == "redis" or name.startswith("redis.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "redis", None)  # as if not installed
    with pytest.raises(ConfigError) as info:
        open_store(KernelConfig(store=StoreConfig(backend="redis")))
    assert "pip install 'chatkernel[redis]'" in str(info.value)
    assert info.value.key == "store.backend"


def test_a_url_that_is_not_redis_is_a_config_error():
    with pytest.raises(ConfigError) as info:
        RedisStore.at("http://:pw-123@127.0.0.1/")
    assert info.value.key == "store.url" and "pw-123" not in str(info.value)


# -- round trips ------------------------------------------------------------------------------


@pytest.fixture
def round_trips(monkeypatch):
    """Counts what the client sends to the server: one a command, a pipeline or a
    MULTI/EXEC block."""
    from redis.asyncio.connection import AbstractConnection

    sent = [0]
    send = AbstractConnection.send_packed_command

    async def counted(self, command, check_health=True):
        sent[0] += 1
        return await send(self, command, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
    return sent


async def test_a_message_and_its_reply_take_one_round_trip_per_step(make_store, round_trips):
    async def trips(call) -> int:
        before = round_trips[0]
        await call
        return round_trips[0] - before

    store = make_store()
    await store._redis.ping()  # connected (a new connection's handshake is a few more)
    assert await trips(store.open()) == 1  # the scripts loaded and the layout checked at once
    try:
        token = await store.acquire_lease(account_lease("telegram", "main"), "me", 30)
        store.fence("telegram", "main", token)  # fenced: the checks ride along
        seq = await store.journal_inbound(msg("m1"))
        assert await trips(store.journal_inbound(msg("m2"))) == 1
        assert await trips(store.journal_inbound_many([msg(f"b{i}") for i in range(50)])) == 1
        assert await trips(store.set_cursor("telegram", "main", "9")) == 1
        queued = entries(3)
        assert await trips(store.outbox_add(queued, finish_journal=[seq])) == 1
        for entry in queued:
            assert await trips(store.outbox_mark(entry.id, "sending", durable=True)) == 1
            assert await trips(store.outbox_mark(entry.id, "sent")) == 1
        assert await trips(store.save_session(
            SessionRecord("k", "s", "telegram", "main", "c", None, 1.0, 2.0))) == 1
        assert await trips(store.append_logs("k", "s", [("user", "hi", None),
                                                        ("assistant", "yo", None)])) == 1
        assert await trips(store.unfinished_inbound(account=("telegram", "main"))) == 1
        assert await trips(store.outbox_unfinished()) == 1
        assert await trips(store.list_sessions()) == 1
        assert await trips(store.read_log("k", roles=("user",), limit=1)) == 1
        assert await trips(store.account_activity()) == 1
    finally:
        await store.close()


# -- the kernel on the Redis store ----------------------------------------------------------------


async def test_a_kernel_runs_its_turns_on_the_redis_store_and_resumes_after_a_restart(
        tmp_path, redis_server, redis_prefix):
    from chatkernel.testing import KernelHarness

    config = {"store": {"backend": "redis", "url": redis_server, "prefix": redis_prefix}}
    async with KernelHarness(tmp_path, config=config) as h:
        assert h.kernel.store.name == "redis"
        assert await h.channel.receive("hello there", message_id="u1") == "started"
        await h.settle()
        assert h.channel.texts() == ["hello there"]  # the echo agent
        snapshot = await h.kernel.health.snapshot()
        assert snapshot.store.ok
    async with KernelHarness(tmp_path, config=config) as h:
        assert await h.channel.receive("hello there", message_id="u1") == "duplicate"
        await h.channel.receive("again", message_id="u2")
        await h.settle()
        assert h.channel.texts() == ["again"]
        log = await h.kernel.store.read_log("memory:main:chat-1")
        assert [(e.role, e.text) for e in log] == [
            ("user", "hello there"), ("assistant", "hello there"), ("user", "again"),
            ("assistant", "again")]
        assert await h.kernel.store.unfinished_inbound() == []
        assert await h.kernel.store.outbox_unfinished() == []
