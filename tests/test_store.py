"""The store interface, on every backend: each test runs on SQLite and on a real Redis.

Backend-specific behaviour (SQLite's files, WAL, migrations and group commits; Redis's
leases, fencing, inbox streams and lost connections) is tested in test_store_sqlite.py
and test_store_redis.py.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatkernel.sdk.models import InboundMessage, MediaRef, OutboundPayload, Route
from chatkernel.core.store import (
    HeartbeatState,
    JournalEntry,
    LogEntry,
    OutboxEntry,
    SessionRecord,
    Store,
    StoreError,
)
from chatkernel.sdk.codec import decode_message, encode_message
from chatkernel.core.store.redis import RedisStore
from chatkernel.core.store.sqlite import SQLiteStore

@pytest.fixture
def store(any_store):
    """The test runs on each backend (tests/conftest.py)."""
    return any_store


def msg(message_id: str = "m1", *, channel: str = "telegram", account: str = "main",
        **fields) -> InboundMessage:
    fields.setdefault("chat_id", "chat-1")
    fields.setdefault("sender_id", "user-1")
    return InboundMessage(channel=channel, account=account, message_id=message_id, **fields)


def session(key: str, last_active_at: float, **fields) -> SessionRecord:
    values = dict(key=key, session_id=f"{key}-s1", channel="telegram", account="main",
                  chat_id="chat-1", thread_id=None, created_at=1000.0,
                  last_active_at=last_active_at)
    values.update(fields)
    return SessionRecord(**values)


def outbox_entries(count: int, reply: str = "r1", *, account: str = "main") -> list[OutboxEntry]:
    route = Route("telegram", account, "chat-1")
    return [OutboxEntry(0, reply, f"telegram:{account}:chat-1", "s1", "telegram", account,
                        route, OutboundPayload(text=f"part {i}"), "pending", None, 0.0)
            for i in range(count)]


@pytest.mark.anyio
async def test_reopen_is_idempotent_and_keeps_data(new_store):
    store = new_store()
    await store.open()
    await store.open()  # a second open is a no-op
    seq = await store.journal_inbound(msg())
    await store.set_cursor("telegram", "main", "42")
    await store.close()
    await store.close()  # so is a second close

    for _ in range(2):
        async with new_store() as again:
            assert [e.seq for e in await again.unfinished_inbound()] == [seq]
            assert await again.get_cursor("telegram", "main") == "42"
            assert await again.journal_inbound(msg()) is None  # dedupe survives too


@pytest.mark.anyio
async def test_methods_before_open_fail_clearly(new_store):
    with pytest.raises(StoreError, match=r"not open \(await store.open\(\) first\)"):
        await new_store().journal_inbound(msg())


@pytest.mark.anyio
async def test_journal_dedupes_on_channel_account_and_message_id(store):
    first = await store.journal_inbound(msg("m1"))
    assert isinstance(first, int)
    assert await store.journal_inbound(msg("m1")) is None
    assert await store.journal_inbound(msg("m1", text="changed on redelivery")) is None
    other_account = await store.journal_inbound(msg("m1", account="second"))
    other_channel = await store.journal_inbound(msg("m1", channel="slack"))
    other_message = await store.journal_inbound(msg("m2"))
    seqs = [first, other_account, other_channel, other_message]
    assert None not in seqs and seqs == sorted(seqs) and len(set(seqs)) == 4
    entries = await store.unfinished_inbound()
    assert [e.seq for e in entries] == seqs
    assert entries[0].message.text == ""  # the first delivery is what was kept


@pytest.mark.anyio
async def test_concurrent_journaling_keeps_exactly_one_of_each(store):
    results: list[int | None] = []

    async def deliver(i: int) -> None:
        results.append(await store.journal_inbound(msg(f"m{i % 10}")))

    async with anyio.create_task_group() as tg:
        for i in range(50):
            tg.start_soon(deliver, i)
    kept = [seq for seq in results if seq is not None]
    assert len(kept) == 10 and len(set(kept)) == 10


@pytest.mark.anyio
async def test_journal_statuses_and_unfinished(store):
    before = time.time()
    seqs = [await store.journal_inbound(msg(f"m{i}")) for i in range(5)]
    after = time.time()
    entries = await store.unfinished_inbound()
    assert all(isinstance(e, JournalEntry) for e in entries)
    assert [e.status for e in entries] == ["received"] * 5
    assert all(before <= e.received_at <= after for e in entries)

    await store.set_journal_status(seqs[1], "done")
    await store.set_journal_status(seqs[2], "rejected")
    entries = await store.unfinished_inbound()
    assert [(e.seq, e.status) for e in entries] == [
        (seqs[0], "received"), (seqs[3], "received"), (seqs[4], "received")]
    assert [e.message.message_id for e in entries] == ["m0", "m3", "m4"]
    # a finished message is still a dedupe key
    assert await store.journal_inbound(msg("m1")) is None

    for unknown in ("finished", "queued"):  # an entry is received until it is finished
        with pytest.raises(ValueError, match="journal status must be one of received, done"):
            await store.set_journal_status(seqs[3], unknown)
    with pytest.raises(KeyError):
        await store.set_journal_status(9999, "done")


@pytest.mark.anyio
async def test_unfinished_entries_survive_close_and_reopen(new_store):
    message = msg("m1", text="héllo 👋", thread_id="t-9", is_group=True, mentions_bot=True,
                  media=[MediaRef("image", Path("/tmp/media/a.jpg"), "image/jpeg", "a.jpg",
                                  1234, "file-1"),
                         MediaRef("voice", platform_id="v-1", note="not saved: too large")],
                  route_extra={"context_token": "abc", "n": [1, 2.5, None, {"x": True}]},
                  timestamp=1700000000.25)
    async with new_store() as store:
        unfinished = await store.journal_inbound(message)
        done = await store.journal_inbound(msg("m2"))
        await store.set_journal_status(done, "done")
    async with new_store() as store:
        (entry,) = await store.unfinished_inbound()
    assert entry.seq == unfinished and entry.status == "received"
    assert entry.message == message
    assert isinstance(entry.message.media[0].path, Path)
    assert entry.message.media[1].path is None


@pytest.mark.anyio
async def test_route_extra_must_be_json(store):
    with pytest.raises(TypeError, match="JSON values only"):
        await store.journal_inbound(msg(route_extra={"raw": b"bytes"}))
    assert await store.unfinished_inbound() == []


@pytest.mark.anyio
async def test_lone_surrogates_do_not_break_the_journal(store):
    message = msg("m\ud83d", text="broken emoji \ud83d from a platform escape")
    seq = await store.journal_inbound(message)
    assert seq is not None
    assert await store.journal_inbound(msg("m\ud83d")) is None  # still deduped
    (entry,) = await store.unfinished_inbound()
    assert entry.message == message  # the JSON keeps the exact text


@pytest.mark.anyio
async def test_prune_journal_deletes_old_finished_entries_only(store):
    seqs = [await store.journal_inbound(msg(f"m{i}")) for i in range(7)]
    for seq in seqs[:3]:
        await store.set_journal_status(seq, "done")
    await store.set_journal_status(seqs[3], "rejected")
    # m4, m5, m6 stay "received"

    assert await store.prune_journal(time.time() - 3600) == 0  # nothing that old
    assert await store.journal_inbound(msg("m0")) is None  # dedupe still holds

    assert await store.prune_journal(time.time() + 1, batch=2) == 4
    assert [e.seq for e in await store.unfinished_inbound()] == seqs[4:]
    # the pruned keys are forgotten; the unfinished ones still dedupe
    assert await store.journal_inbound(msg("m4")) is None
    again = await store.journal_inbound(msg("m0"))
    assert again is not None and again > seqs[-1]


@pytest.mark.anyio
async def test_journal_seq_is_never_reused_after_pruning(store):
    seq = await store.journal_inbound(msg("m1"))
    await store.set_journal_status(seq, "done")
    assert await store.prune_journal(time.time() + 1) == 1
    assert await store.journal_inbound(msg("m2")) > seq


@pytest.mark.anyio
async def test_cursors(store, new_store):
    assert await store.get_cursor("telegram", "main") is None
    await store.set_cursor("telegram", "main", "100")
    await store.set_cursor("telegram", "main", "101")
    await store.set_cursor("telegram", "other", "7")
    await store.set_cursor("wechat", "main", "sync-buf==")
    assert await store.get_cursor("telegram", "main") == "101"
    assert await store.get_cursor("telegram", "other") == "7"
    assert await store.get_cursor("wechat", "main") == "sync-buf=="
    await store.close()
    async with new_store() as again:
        assert await again.get_cursor("telegram", "main") == "101"


@pytest.mark.anyio
async def test_sessions_round_trip_and_upsert(store):
    assert await store.get_session("nope") is None
    record = session("telegram:main:chat-1", 2000.0, thread_id=None,
                     settings={"queue": {"mode": "steer", "cap": 5}, "debounce_ms": 0})
    await store.save_session(record)
    assert await store.get_session(record.key) == record

    threaded = session("slack:ws:C1:1700.1", 1500.0, thread_id="1700.1")
    await store.save_session(threaded)
    assert (await store.get_session(threaded.key)).thread_id == "1700.1"
    assert (await store.get_session(threaded.key)).settings == {}

    record.session_id = "after-/new"
    record.last_active_at = 3000.0
    record.settings = {}
    await store.save_session(record)
    assert await store.get_session(record.key) == record
    assert len(await store.list_sessions()) == 2


@pytest.mark.anyio
async def test_a_sessions_agent_round_trips_and_defaults_to_default(store):
    assert session("telegram:main:1", 1.0).agent == "default"
    work = session("telegram:main:1#work", 2.0)
    work.agent = "work"
    await store.save_session(work)
    await store.save_session(session("telegram:main:1", 1.0))
    assert (await store.get_session(work.key)).agent == "work"
    assert [(s.key, s.agent) for s in await store.list_sessions()] == [
        ("telegram:main:1#work", "work"), ("telegram:main:1", "default")]


@pytest.mark.anyio
async def test_list_sessions_most_recent_first_and_filtered(store):
    for key, active in [("a", 100.0), ("b", 300.0), ("c", 200.0), ("d", 300.0)]:
        await store.save_session(session(key, active))
    assert [s.key for s in await store.list_sessions()] == ["b", "d", "c", "a"]
    assert [s.key for s in await store.list_sessions(active_since=200.0)] == ["b", "d", "c"]
    assert [s.key for s in await store.list_sessions(active_since=300.5)] == []
    assert all(isinstance(s, SessionRecord) for s in await store.list_sessions())


@pytest.mark.anyio
async def test_routes_round_trip(store):
    assert await store.get_route("k") is None
    route = Route("wechat", "main", "wxid_1", thread_id=None, reply_to="m9", is_group=False,
                  extra={"context_token": "ctx", "nested": {"list": [1, "two", None]}})
    await store.set_route("k", route)
    assert await store.get_route("k") == route
    threaded = Route("slack", "ws", "C1", thread_id="1700.1", is_group=True)
    await store.set_route("k", threaded)
    got = await store.get_route("k")
    assert got == threaded and got.extra == {} and got.reply_to is None


@pytest.mark.anyio
async def test_account_state(store):
    assert await store.get_account_state("wechat", "main", "last_chat") is None
    values = {"last_chat": "wxid_1", "tokens": {"wxid_1": ["t", 1700000000.5]},
              "count": 0, "flag": False, "list": [1, [2, [3]]], "empty": ""}
    for key, value in values.items():
        await store.set_account_state("wechat", "main", key, value)
    for key, value in values.items():
        assert await store.get_account_state("wechat", "main", key) == value
    assert await store.get_account_state("wechat", "other", "last_chat") is None
    await store.set_account_state("wechat", "main", "count", 1)
    assert await store.get_account_state("wechat", "main", "count") == 1
    await store.set_account_state("wechat", "main", "last_chat", None)
    assert await store.get_account_state("wechat", "main", "last_chat") is None
    with pytest.raises(TypeError, match="JSON values only"):
        await store.set_account_state("wechat", "main", "bad", {1, 2})


@pytest.mark.anyio
async def test_heartbeat_state_round_trips_survives_reopen_and_deletes(store, new_store):
    assert await store.get_heartbeat("main") is None
    assert await store.list_heartbeats() == []
    main = HeartbeatState(id="main", anchor_at=1000.5, last_run_at=900.0, last_outcome="ok",
                          task_runs={"inbox": 950.0}, wake_texts=["deploy done"])
    mine = HeartbeatState(id="session:telegram:main:42", session_key="telegram:main:42",
                          settings={"every": "2m", "prompt": "check the build"}, paused=True)
    await store.save_heartbeat(main)
    await store.save_heartbeat(mine)
    await store.close()
    again = new_store()
    await again.open()
    try:
        assert await again.get_heartbeat("main") == main
        assert await again.list_heartbeats() == [main, mine]
        main.wake_texts = []
        main.anchor_at = 2000.0
        await again.save_heartbeat(main)  # an upsert
        assert await again.get_heartbeat("main") == main
        assert await again.delete_heartbeat(mine.id) is True
        assert await again.delete_heartbeat(mine.id) is False
        assert [s.id for s in await again.list_heartbeats()] == ["main"]
    finally:
        await again.close()
    await store.open()  # the fixture closes it


@pytest.fixture
async def logged(store):
    """Eight entries in session key k (two session ids) and one in another key."""
    spec = [("s1", "user", "u1"), ("s1", "assistant", "a1"), ("s1", "user", "u2"),
            ("s1", "notification", "n1"), ("s1", "assistant", "a2"),
            ("s2", "user", "u3"), ("s2", "assistant", "a3"), ("s2", "system", "x1")]
    seqs = {}
    for i, (sid, role, text) in enumerate(spec):
        seqs[text] = await store.append_log("k", sid, role, text,
                                            {"i": i} if i % 2 else None)
        if i == 3:
            await store.append_log("other", "s9", "user", "elsewhere")
    return store, seqs


def texts(entries: list[LogEntry]) -> list[str]:
    return [e.text for e in entries]


@pytest.mark.anyio
async def test_read_log_all_in_order(logged):
    store, seqs = logged
    entries = await store.read_log("k")
    assert texts(entries) == ["u1", "a1", "u2", "n1", "a2", "u3", "a3", "x1"]
    assert [e.seq for e in entries] == sorted(seqs.values())
    assert all(isinstance(e, LogEntry) and e.session_key == "k" for e in entries)
    assert entries[1].meta == {"i": 1} and entries[0].meta == {}
    assert entries[0].role == "user" and entries[0].session_id == "s1"
    assert entries[0].ts <= entries[-1].ts <= time.time()
    assert texts(await store.read_log("other")) == ["elsewhere"]
    assert await store.read_log("missing") == []


@pytest.mark.anyio
async def test_read_log_limit_roles_session_and_before_seq(logged):
    store, seqs = logged
    assert texts(await store.read_log("k", limit=3)) == ["u3", "a3", "x1"]
    assert texts(await store.read_log("k", limit=100)) == texts(await store.read_log("k"))
    assert await store.read_log("k", limit=0) == []
    # filters apply before the limit
    assert texts(await store.read_log("k", roles=("user", "assistant"), limit=3)) == [
        "a2", "u3", "a3"]
    assert texts(await store.read_log("k", roles=("user",))) == ["u1", "u2", "u3"]
    assert texts(await store.read_log("k", roles="notification")) == ["n1"]
    assert await store.read_log("k", roles=()) == []
    assert texts(await store.read_log("k", session_id="s1", limit=2)) == ["n1", "a2"]
    assert texts(await store.read_log("k", session_id="s2")) == ["u3", "a3", "x1"]
    assert texts(await store.read_log("k", before_seq=seqs["n1"])) == ["u1", "a1", "u2"]
    assert texts(await store.read_log("k", before_seq=seqs["u3"], limit=2,
                                      roles=("user", "assistant"), session_id="s1")) == [
        "u2", "a2"]
    with pytest.raises(ValueError, match="limit"):
        await store.read_log("k", limit=-1)


@pytest.mark.anyio
async def test_read_log_pages_backwards_with_before_seq(logged):
    store, _ = logged
    pages, before = [], None
    while page := await store.read_log("k", limit=3, before_seq=before):
        pages.append(texts(page))
        before = page[0].seq
    assert pages == [["u3", "a3", "x1"], ["u2", "n1", "a2"], ["u1", "a1"]]


def kept(store: Store, text: str) -> str:
    """What the backend keeps of a text with lone surrogates (a platform's broken emoji
    escape): SQLite stores only valid UTF-8 and puts U+FFFD in their place; Redis keeps
    them."""
    return re.sub("[\ud800-\udfff]", "\ufffd", text) if store.name == "sqlite" else text


@pytest.mark.anyio
async def test_log_text_with_a_lone_surrogate_is_stored(store):
    seq = await store.append_log("k", "s", "user", "bad \udc00 text")
    (entry,) = await store.read_log("k")
    assert entry.seq == seq and entry.text == kept(store, "bad \udc00 text")


@pytest.mark.anyio
async def test_append_logs_writes_entries_in_order_with_their_seqs(store):
    first = await store.append_log("k", "s", "user", "before")
    seqs = await store.append_logs("k", "s", [
        ("user", "u1", {"sender_id": "42"}), ("user", "u2 \udc00", None),
        ("assistant", "a1", None)])
    assert seqs == [first + 1, first + 2, first + 3]
    after = await store.append_log("k", "s", "user", "after")
    assert after == first + 4
    entries = await store.read_log("k")
    assert [(e.seq, e.role, e.text, e.meta) for e in entries] == [
        (first, "user", "before", {}), (first + 1, "user", "u1", {"sender_id": "42"}),
        (first + 2, "user", kept(store, "u2 \udc00"), {}), (first + 3, "assistant", "a1", {}),
        (after, "user", "after", {})]
    assert await store.append_logs("k", "s", []) == []
    with pytest.raises(TypeError, match="JSON values only"):
        await store.append_logs("k", "s", [("user", "x", {"bad": object()})])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=12,
)
media_refs = st.builds(
    MediaRef,
    kind=st.sampled_from(["image", "video", "audio", "voice", "document"]) | st.text(),
    path=st.none() | st.text().map(Path),
    mime=st.none() | st.text(),
    filename=st.none() | st.text(),
    size=st.none() | st.integers(min_value=0, max_value=2**63 - 1),
    platform_id=st.none() | st.text(),
    note=st.none() | st.text(),
)
messages = st.builds(
    InboundMessage,
    channel=st.text(), account=st.text(), chat_id=st.text(), message_id=st.text(),
    sender_id=st.text(), text=st.text(), sender_name=st.text(),
    thread_id=st.none() | st.text(), is_group=st.booleans(), mentions_bot=st.booleans(),
    reply_to_bot=st.booleans(), media=st.lists(media_refs, max_size=3),
    timestamp=st.floats(allow_nan=False, allow_infinity=False),
    route_extra=st.dictionaries(st.text(), json_values, max_size=5),
)


_prefixes = itertools.count()


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["sqlite", "redis"])
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60)
@given(message=messages)
async def test_any_message_round_trips_through_the_journal(kind, redis_server, message):
    if kind == "sqlite":
        store = SQLiteStore.at(":memory:")
    else:
        store = RedisStore.at(redis_server, prefix=f"round-trip-{os.getpid()}-{next(_prefixes)}:")
    async with store:
        seq = await store.journal_inbound(message)
        assert seq is not None
        (entry,) = await store.unfinished_inbound()
    assert entry.message == message
    assert repr(entry.message) == repr(message)  # types too: no True for 1, no str for Path
    assert decode_message(encode_message(message)) == message


@pytest.mark.anyio
async def test_journal_inbound_many_commits_the_batch_and_reports_redeliveries(
        store, new_store):
    def message(mid):
        return InboundMessage(channel="t", account="a", chat_id="c", message_id=mid,
                              sender_id="u", text=mid)

    first = await store.journal_inbound_many([message("1"), message("2")])
    assert all(isinstance(seq, int) for seq in first)
    again = await store.journal_inbound_many([message("2"), message("3"), message("3")])
    assert again[0] is None and isinstance(again[1], int) and again[2] is None
    assert await store.journal_inbound_many([]) == []
    # Committed by the time it returned: another connection sees the rows.
    async with new_store() as other:
        assert [e.message.message_id for e in await other.unfinished_inbound()] == \
            ["1", "2", "3"]


@pytest.mark.anyio
async def test_recent_sends_are_the_attempts_since_a_time(store, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    entries = outbox_entries(6)
    for entry in entries:  # queued a second apart
        await store.outbox_add([entry])
        clock[0] += 1.0
    # 1000..1005 queued; the first answered at 1010, two more at 1020, one left pending,
    # one still sending, one failed at 1030.
    clock[0] = 1010.0
    await store.outbox_mark(entries[0].id, "sent")
    await store.flush()  # SQLite's coalesced marks take the time of the commit writing them
    clock[0] = 1020.0
    await store.outbox_mark(entries[1].id, "sent")
    await store.outbox_mark(entries[2].id, "sent")
    await store.outbox_mark(entries[4].id, "sending", durable=True)
    clock[0] = 1030.0
    await store.outbox_mark(entries[5].id, "failed", "Bad Request")
    await store.flush()
    recent = await store.outbox_recent_sends(1015.0, queued_since=0.0)
    assert [(r.status, r.at) for r in recent] == [("sent", 1020.0), ("sent", 1020.0),
                                                  ("sending", 1020.0), ("failed", 1030.0)]
    assert recent[0].route == entries[1].route and recent[0].channel == "telegram"
    # Entries queued before `queued_since` are not read at all.
    recent = await store.outbox_recent_sends(0.0, queued_since=1001.5)
    assert [r.status for r in recent] == ["sent", "sending", "failed"]
    assert await store.outbox_recent_sends(0.0, queued_since=2000.0) == []
    assert entries[3].created_at == 1003.0  # outbox_add tells each entry when it was queued


@pytest.mark.anyio
async def test_account_activity_is_the_last_inbound_and_the_last_send(store):
    await store.journal_inbound(msg("m1"))
    await store.journal_inbound(msg("m2"))
    await store.journal_inbound(msg("m3", account="other"))
    route = Route("telegram", "main", "chat-1")
    ids = await store.outbox_add([
        OutboxEntry(0, "r1", "telegram:main:chat-1", "s1", "telegram", "main", route,
                    OutboundPayload(text=text), "pending", None, 0.0) for text in ("a", "b")])
    await store.outbox_mark(ids[0], "sent")
    await store.flush()
    activity = await store.account_activity()
    assert set(activity) == {("telegram", "main"), ("telegram", "other")}
    assert activity[("telegram", "main")]["last_inbound_at"] > 0
    assert activity[("telegram", "main")]["last_sent_at"] > 0
    assert "last_sent_at" not in activity[("telegram", "other")]


@pytest.mark.anyio
async def test_unfinished_entries_of_one_account(store):
    seqs = {}
    for channel, account in (("telegram", "main"), ("telegram", "other"), ("slack", "main")):
        seqs[channel, account] = await store.journal_inbound(
            msg(f"{channel}-{account}", channel=channel, account=account))
    entries = outbox_entries(1)
    entries[0].account = "other"
    await store.outbox_add(outbox_entries(2) + entries)
    assert [e.seq for e in await store.unfinished_inbound(account=("telegram", "other"))] == \
        [seqs["telegram", "other"]]
    assert [e.seq for e in await store.unfinished_inbound(account=("slack", "main"))] == \
        [seqs["slack", "main"]]
    assert await store.unfinished_inbound(account=("slack", "other")) == []
    assert len(await store.unfinished_inbound()) == 3
    assert [e.payload.text for e in await store.outbox_unfinished(account=("telegram", "main"))] \
        == ["part 0", "part 1"]
    assert [e.account for e in await store.outbox_unfinished(account=("telegram", "other"))] == \
        ["other"]
    assert await store.outbox_unfinished(account=("slack", "main")) == []


@pytest.mark.anyio
async def test_only_a_store_several_processes_share_has_shared_state(store):
    assert (store.shared is None) == (store.name == "sqlite")
    if store.shared is not None:
        assert store.shared is store


# -- outbox --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_outbox_add_queues_in_order_and_finishes_the_journal_entries(store):
    seqs = [await store.journal_inbound(msg(f"m{i}")) for i in range(2)]
    entries = outbox_entries(3)
    entries[1].route = Route("telegram", "main", "chat-1", thread_id="t", reply_to="m0",
                             is_group=True, extra={"token": ["x", 1]})
    before = time.time()
    ids = await store.outbox_add(entries, finish_journal=[seqs[0]])
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert [e.id for e in entries] == ids
    assert all(before <= e.created_at <= time.time() for e in entries)
    assert [e.seq for e in await store.unfinished_inbound()] == [seqs[1]]  # done with it
    unfinished = await store.outbox_unfinished()
    assert unfinished == entries  # every field, the route's extras too
    assert await store.outbox_add([], finish_journal=[seqs[1]]) == []
    assert await store.unfinished_inbound() == []
    more = outbox_entries(1, reply="r2")
    (later,) = await store.outbox_add(more, finish_journal=[99999])  # gone: nothing to do
    assert later > ids[-1]
    assert [e.id for e in await store.outbox_unfinished()] == [*ids, later]  # oldest first


@pytest.mark.anyio
async def test_outbox_marks_move_entries_on(store):
    entries = outbox_entries(4)
    ids = await store.outbox_add(entries)
    await store.outbox_mark(ids[0], "sending", durable=True)
    await store.outbox_mark(ids[1], "sending", durable=True)
    await store.outbox_mark(ids[1], "sent")
    await store.outbox_mark(ids[2], "failed", "Bad Request: chat not found")
    await store.flush()
    assert [(e.id, e.status) for e in await store.outbox_unfinished()] == [
        (ids[0], "sending"), (ids[3], "pending")]
    assert [(e.status, e.error) for e in await store.outbox_reply("r1")] == [
        ("sending", None), ("sent", None), ("failed", "Bad Request: chat not found"),
        ("pending", None)]
    await store.outbox_mark(ids[0], "unknown", "in flight when the gateway stopped")
    assert [e.id for e in await store.outbox_unfinished()] == [ids[3]]
    await store.outbox_mark(ids[3], "pending")  # back to pending: still unfinished
    assert [e.id for e in await store.outbox_unfinished()] == [ids[3]]
    assert await store.outbox_reply("nope") == []
    with pytest.raises(ValueError, match="outbox status must be one of"):
        await store.outbox_mark(ids[3], "lost")
    with pytest.raises(KeyError):
        await store.outbox_mark(99999, "failed", "x")
    await store.outbox_mark(99999, "sent")  # a coalesced mark of nothing changes nothing
    await store.flush()
    assert [e.status for e in await store.outbox_reply("r1")] == [
        "unknown", "sent", "failed", "pending"]


@pytest.mark.anyio
async def test_outbox_failures_are_the_newest_failed_and_unknown(store, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    ids = await store.outbox_add(outbox_entries(4))
    clock[0] = 1010.0
    await store.outbox_mark(ids[0], "failed", "Forbidden")
    await store.outbox_mark(ids[1], "sent")
    clock[0] = 1020.0
    await store.outbox_mark(ids[2], "unknown", "timed out")
    await store.flush()
    failures = await store.outbox_failures()
    assert [(e.id, e.status, e.error, at) for e, at in failures] == [
        (ids[2], "unknown", "timed out", 1020.0), (ids[0], "failed", "Forbidden", 1010.0)]
    assert [e.id for e, _ in await store.outbox_failures(limit=1)] == [ids[2]]
    assert await store.outbox_failures(limit=0) == []


@pytest.mark.anyio
async def test_a_sent_entry_is_found_by_its_platform_id(store):
    ids = await store.outbox_add(outbox_entries(2))
    await store.outbox_mark(ids[0], "sent")
    await store.outbox_sent_as(ids[0], "wamid.1")
    found = await store.outbox_by_platform_id("telegram", "main", "wamid.1")
    assert found is not None and found.id == ids[0] and found.status == "sent"
    assert await store.outbox_by_platform_id("telegram", "other", "wamid.1") is None
    assert await store.outbox_by_platform_id("telegram", "main", "wamid.2") is None
    await store.outbox_sent_as(99999, "wamid.3")  # no such entry: nothing happens
    assert await store.outbox_by_platform_id("telegram", "main", "wamid.3") is None


@pytest.mark.anyio
async def test_prune_outbox_deletes_old_finished_entries_and_ids_are_never_reused(store):
    ids = await store.outbox_add(outbox_entries(4))
    await store.outbox_mark(ids[0], "sent")
    await store.outbox_sent_as(ids[0], "p-1")
    await store.outbox_mark(ids[1], "failed", "no")
    await store.outbox_mark(ids[2], "sending", durable=True)
    await store.flush()
    assert await store.prune_outbox(time.time() - 3600) == 0  # nothing that old
    assert await store.prune_outbox(time.time() + 1) == 2
    assert [e.id for e in await store.outbox_reply("r1")] == ids[2:]
    assert await store.outbox_by_platform_id("telegram", "main", "p-1") is None
    assert await store.outbox_failures() == []
    assert [r.status for r in await store.outbox_recent_sends(0.0, queued_since=0.0)] == \
        ["sending"]
    await store.outbox_mark(ids[2], "sent")
    await store.outbox_mark(ids[3], "sent")
    assert await store.prune_outbox(time.time() + 1) == 2
    (new,) = await store.outbox_add(outbox_entries(1))
    assert new > ids[-1]


# -- transcripts ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_transcripts(store, new_store):
    first = await store.transcript_add("webchat", "default", "c", "user", "hi", client_id="x")
    assert await store.transcript_add("webchat", "default", "c", "user", "hi",
                                      client_id="x") is None  # a retry
    other = await store.transcript_add("webchat", "default", "d", "user", "hi",
                                       client_id="x")  # another chat's own id
    media = [{"name": "a.png", "kind": "photo"}]
    bot = await store.transcript_add("webchat", "default", "c", "bot", "", media)
    assert bot.client_id is None and bot.media == media
    assert await store.transcript_find("webchat", "default", "c", "x") == first
    assert await store.transcript_find("webchat", "default", "c", "y") is None
    assert await store.transcript_read("webchat", "default", "c") == [first, bot]
    [last] = await store.transcript_read("webchat", "default", "c", limit=1)
    assert last.as_dict() == {"id": bot.id, "role": "bot", "text": "", "media": media,
                              "ts": bot.ts}
    assert await store.transcript_read("webchat", "default", "c", after=first.id) == [bot]
    assert await store.transcript_read("webchat", "default", "c", after=bot.id) == []
    assert await store.transcript_read("webchat", "other", "c") == []
    assert first.id < other.id < bot.id
    with pytest.raises(TypeError, match="JSON values only"):
        await store.transcript_add("webchat", "default", "c", "bot", "", [{"x": object()}])
    await store.close()
    async with new_store() as again:  # ids keep growing after a restart
        assert await again.transcript_read("webchat", "default", "c") == [first, bot]
        after = await again.transcript_add("webchat", "default", "c", "user", "back")
        assert after.id > bot.id
    await store.open()  # the fixture closes it
