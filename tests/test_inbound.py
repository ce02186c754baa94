"""The inbound delivery pipeline, step by step, on a real in-process kernel."""

from __future__ import annotations

import anyio
import pytest

from chatkernel.channels import Capabilities
from chatkernel import Command, InboundMessage, MediaRef, hookimpl
from chatkernel.core.inbound.pipeline import (
    BUSY_HINT,
    FAILURE_NOTICE,
    InvalidMessage,
    envelope,
    validate,
)
from chatkernel.sdk.models import (
    INBOUND_FIELD_LIMITS,
    MAX_INBOUND_MEDIA,
    MAX_ROUTE_EXTRA_BYTES,
    MEDIA_FIELD_LIMITS,
)
from chatkernel.core.store.sqlite import SQLiteStore
from chatkernel.testing.agents import agent_plugin, scripted_agent
from chatkernel.testing.contract import wait_until
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio


def harness(tmp_path, agent=None, config=None, plugins=None):
    extra = list(plugins or [])
    cfg = dict(config or {})
    if agent is not None:
        extra.append(("test-agent", agent_plugin(agent)))
        cfg["agent"] = {"kind": agent.name}
    return KernelHarness(tmp_path, config=cfg, plugins=extra)


async def test_echo_reply_round_trip(tmp_path):
    async with harness(tmp_path) as h:
        assert await h.channel.receive("hello there") == "started"
        sent = await h.channel.wait_for_sent(1)
        assert sent[0].text == "hello there"
        assert sent[0].route.chat_id == "chat-1"


async def test_redelivered_message_is_processed_once(tmp_path):
    agent = scripted_agent()
    async with harness(tmp_path, agent) as h:
        assert await h.channel.receive("once", message_id="42") == "started"
        assert await h.channel.receive("once", message_id="42") == "duplicate"
        await h.settle()
        assert [r.text for r in agent.requests] == ["once"]
        assert h.channel.texts() == ["re: once"]


async def test_message_is_journaled_before_deliver_returns(tmp_path):
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent) as h:
        await h.channel.receive("durable", message_id="7")
        # The turn is still held open: the journal already has the message.
        entries = await h.kernel.store.unfinished_inbound()
        assert [e.message.message_id for e in entries] == ["7"]
        agent.gate.set()
        await h.settle()
        assert await h.kernel.store.unfinished_inbound() == []


async def test_unfinished_messages_are_replayed_on_start(tmp_path):
    store = SQLiteStore.at(tmp_path / "state.db")
    await store.open()
    seq = await store.journal_inbound(InboundMessage(
        channel="memory", account="main", chat_id="chat-1", message_id="lost-1",
        sender_id="user-1", text="from before the crash"))
    assert seq is not None
    await store.close()
    async with harness(tmp_path) as h:
        sent = await h.channel.wait_for_sent(1)
        assert sent[0].text == "from before the crash"
        # and a platform redelivery of it is still a duplicate
        assert await h.channel.receive("again", message_id="lost-1") == "duplicate"


async def test_a_turn_the_stop_cuts_short_is_replayed_on_the_next_start(tmp_path):
    # A turn still running when the kernel stops (past the gateway's drain) answered
    # nothing: its message stays unfinished and the next start answers it, once.
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent) as h:
        await h.channel.receive("still thinking", message_id="slow-1")
        await wait_until(lambda: agent.running, timeout=5, what="the turn", interval=0.005)
    store = SQLiteStore.at(tmp_path / "state.db")
    await store.open()
    try:
        assert [e.message.message_id for e in await store.unfinished_inbound()] == ["slow-1"]
        assert await store.read_log("memory:main:chat-1") == []  # logged by the replay
    finally:
        await store.close()
    async with harness(tmp_path) as h:
        sent = await h.channel.wait_for_sent(1)
        assert [p.text for p in sent] == ["still thinking"]
        await h.settle()
        assert await h.kernel.store.unfinished_inbound() == []
        log = await h.kernel.store.read_log("memory:main:chat-1")
        assert [(e.role, e.text) for e in log] == [
            ("user", "still thinking"), ("assistant", "still thinking")]


async def test_malformed_message_is_refused_and_nothing_recorded(tmp_path):
    async with harness(tmp_path) as h:
        with pytest.raises(InvalidMessage, match="sender_id"):
            await h.kernel.deliver(InboundMessage(channel="memory", account="main",
                                                  chat_id="c", message_id="1", sender_id=""))
        with pytest.raises(InvalidMessage, match="no running account"):
            await h.kernel.deliver(InboundMessage(channel="memory", account="nope",
                                                  chat_id="c", message_id="1", sender_id="u"))
        for timestamp in (float("nan"), float("inf"), None, "1700000000"):
            with pytest.raises(InvalidMessage, match=r"'timestamp' must be a finite number"):
                await h.kernel.deliver(InboundMessage(
                    channel="memory", account="main", chat_id="c", message_id="1",
                    sender_id="u", timestamp=timestamp))  # type: ignore[arg-type]
        assert await h.kernel.store.unfinished_inbound() == []


def message(**fields):
    base = {"channel": "memory", "account": "main", "chat_id": "c", "message_id": "1",
            "sender_id": "u", "text": "hi"}
    return InboundMessage(**{**base, **fields})


@pytest.mark.parametrize("name", sorted(INBOUND_FIELD_LIMITS))
def test_every_text_field_is_capped_and_the_error_names_it(name):
    limit = INBOUND_FIELD_LIMITS[name]
    validate(message(**{name: "x" * limit}))  # at the cap: fine
    with pytest.raises(InvalidMessage) as caught:
        validate(message(**{name: "x" * (limit + 1)}))
    assert str(caught.value) == (f"inbound message field {name!r} is {limit + 1:,} "
                                 f"characters long; the most is {limit:,}")


def test_media_count_and_media_fields_are_capped():
    validate(message(media=[MediaRef(kind="image")] * MAX_INBOUND_MEDIA))
    with pytest.raises(InvalidMessage, match=rf"'media' holds {MAX_INBOUND_MEDIA + 1} files; "
                                             rf"the most is {MAX_INBOUND_MEDIA}"):
        validate(message(media=[MediaRef(kind="image")] * (MAX_INBOUND_MEDIA + 1)))
    for name, limit in MEDIA_FIELD_LIMITS.items():
        fields = {"kind": "image", name: "x" * (limit + 1)}
        with pytest.raises(InvalidMessage, match=rf"'media\[1\]\.{name}' is {limit + 1:,}"):
            validate(message(media=[MediaRef(kind="image"), MediaRef(**fields)]))
    with pytest.raises(InvalidMessage, match=r"'media\[0\]' must be a MediaRef, got dict"):
        validate(message(media=[{"kind": "image"}]))


def test_route_extra_must_be_small_json():
    validate(message(route_extra={"context_token": "t" * 1000}))
    with pytest.raises(InvalidMessage, match=r"'route_extra' takes [\d,]+ bytes as JSON; "
                                             rf"the most is {MAX_ROUTE_EXTRA_BYTES:,}"):
        validate(message(route_extra={"context_token": "t" * MAX_ROUTE_EXTRA_BYTES}))
    with pytest.raises(InvalidMessage, match=r"'route_extra' must hold JSON values only"):
        validate(message(route_extra={"when": object()}))


def test_an_oversized_value_is_not_echoed_in_the_error():
    with pytest.raises(InvalidMessage) as caught:
        validate(message(sender_id=["x" * 1000] * 1000))
    assert len(str(caught.value)) < 200


async def test_a_message_over_a_cap_is_refused_before_it_is_recorded(tmp_path):
    async with harness(tmp_path) as h:
        huge = "x" * (10 * 1024 * 1024)
        with pytest.raises(InvalidMessage, match="'chat_id' is 10,485,760 characters long"):
            await h.kernel.deliver(message(chat_id=huge))
        outcomes = await h.kernel.receiver.many([message(message_id="2", sender_name=huge),
                                                 message(message_id="3")])
        assert outcomes == ["invalid", "accepted"]
        await h.settle()
        assert await h.kernel.store.list_sessions() != []
        assert all(len(s.chat_id) < 10 for s in await h.kernel.store.list_sessions())
        assert len(await h.kernel.store.read_log("memory:main:c")) == 2  # message 3 only


async def test_unknown_sender_told_their_id_once_and_agent_never_called(tmp_path):
    agent = scripted_agent()
    config = {"channels": {"memory": {"accounts": {"main": {"allow_from": ["owner"],
                                                            "dm_policy": "allowlist"}}}}}
    async with harness(tmp_path, agent, config) as h:
        assert await h.channel.receive("let me in", sender_id="stranger") == "rejected"
        assert await h.channel.receive("please", sender_id="stranger") == "rejected"
        await h.settle()
        texts = h.channel.texts()
        assert len(texts) == 1 and "stranger" in texts[0]
        assert "allow_from" in texts[0]
        assert await h.channel.receive("hi", sender_id="owner") == "started"
        await h.settle()
        assert [r.text for r in agent.requests] == ["hi"]


async def test_empty_allowlist_admits_nobody(tmp_path):
    config = {"channels": {"memory": {"accounts": {"main": {}}}}}
    async with harness(tmp_path, config=config) as h:
        assert await h.channel.receive("hi", sender_id="anyone") == "rejected"


async def test_group_messages_need_a_mention_unless_configured(tmp_path):
    agent = scripted_agent()
    async with harness(tmp_path, agent) as h:
        assert await h.channel.receive("chatter", is_group=True) == "rejected"
        assert await h.channel.receive("@bot hi", is_group=True, mentions_bot=True) == "started"
        await h.settle()
        assert await h.channel.receive("reply", is_group=True, reply_to_bot=True) == "started"
        await h.settle()
        assert [r.text for r in agent.requests] == ["@bot hi", "reply"]
    config = {"channels": {"memory": {"accounts": {"main": {"allow_from": ["*"],
                                                            "require_mention": False}}}}}
    async with harness(tmp_path / "open", config=config) as h:
        assert await h.channel.receive("chatter", is_group=True) == "started"


async def test_builtin_commands_answer_without_the_agent(tmp_path):
    agent = scripted_agent()
    async with harness(tmp_path, agent) as h:
        for text in ("/help", "/status", "/whoami", "/queue"):
            assert await h.channel.receive(text) == "command"
        await h.settle()
        texts = h.channel.texts()
        assert "/queue" in texts[0] and "/new" in texts[0]
        assert "session: memory:main:chat-1" in texts[1]
        assert "user-1" in texts[2]
        assert texts[3].startswith("queue: collect")
        assert agent.requests == []


async def test_a_plugin_command_works_through_the_gateway_facade(tmp_path):
    def busy(ctx):
        running, waiting = ctx.gateway.queue_state(ctx.session.key)
        return (f"{ctx.gateway.agent_kind}: running={running} waiting={waiting} "
                f"mode={ctx.gateway.queue_settings(ctx.session.key).mode}")

    class Plugin:
        @staticmethod
        @hookimpl
        def register_commands(register):
            register(Command(name="busy", handler=busy, help="queue state"))

    async with harness(tmp_path, plugins=[("cmds", Plugin)]) as h:
        assert await h.channel.receive("/busy") == "command"
        await h.settle()
        assert h.channel.texts() == ["echo: running=False waiting=0 mode=collect"]


async def test_new_starts_a_fresh_session_id(tmp_path):
    agent = scripted_agent()
    async with harness(tmp_path, agent) as h:
        await h.channel.receive("first")
        await h.settle()
        await h.channel.receive("/new")
        await h.channel.receive("second")
        await h.settle()
        first, second = agent.requests
        assert first.session_key == second.session_key
        assert first.session_id != second.session_id


async def test_queue_command_sets_and_resets_the_session_override(tmp_path):
    async with harness(tmp_path) as h:
        await h.channel.receive("/queue followup debounce:2s cap:5 drop:summarize")
        key = "memory:main:chat-1"
        settings = h.kernel.queue_settings(key)
        assert (settings.mode, settings.debounce_ms, settings.cap, settings.drop) == (
            "followup", 2000, 5, "summarize")
        await h.channel.receive("/queue sideways")
        await h.settle()
        assert "unknown mode" in h.channel.texts()[-1]
        await h.channel.receive("/queue reset")
        assert h.kernel.queue_settings(key).mode == "collect"
        # the override is persisted with the session
        record = await h.kernel.store.get_session(key)
        assert "queue" not in record.settings


async def test_plugin_commands_and_direct_only(tmp_path):
    class Plugin:
        @staticmethod
        @hookimpl
        def register_commands(register):
            register(Command("ping", lambda ctx: f"pong {ctx.args}", "answers pong"))
            register(Command("secret", lambda ctx: "dm only", "private", direct_only=True))

    async with harness(tmp_path, plugins=[("cmds", Plugin)]) as h:
        assert await h.channel.receive("/ping 1 2") == "command"
        assert await h.channel.receive("/ping@mybot x", is_group=True, mentions_bot=True) \
            == "command"
        assert await h.channel.receive("/secret", is_group=True, mentions_bot=True) == "command"
        assert await h.channel.receive("/secret") == "command"
        await h.settle()
        assert h.channel.texts() == ["pong 1 2", "pong x", "/secret works in direct chats only.",
                                     "dm only"]
        # an unknown command goes to the agent
        assert await h.channel.receive("/unknown thing") == "started"


async def test_one_session_per_chat_and_thread(tmp_path):
    agent = scripted_agent()
    async with harness(tmp_path, agent) as h:
        await h.channel.receive("a", chat_id="c1")
        await h.channel.receive("b", chat_id="c1", thread_id="t9")
        await h.channel.receive("c", chat_id="c2")
        await h.settle()
        keys = sorted(r.session_key for r in agent.requests)
        assert keys == ["memory:main:c1", "memory:main:c1:t9", "memory:main:c2"]
        sessions = await h.kernel.store.list_sessions()
        assert len(sessions) == 3


async def test_route_is_refreshed_on_every_message_and_read_at_send_time(tmp_path):
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent) as h:
        await h.channel.receive("one", route_extra={"context_token": "old"})
        # while the first turn runs, a newer message refreshes the route
        await h.channel.receive("two", route_extra={"context_token": "new"})
        agent.gate.set()
        await h.settle()
        routes = [s.route.extra.get("context_token") for s in h.channel.sent
                  if not s.text.startswith("⏳")]
        assert routes and set(routes) == {"new"}


async def test_last_active_chat_is_remembered(tmp_path):
    async with harness(tmp_path) as h:
        await h.channel.receive("x", chat_id="c1")
        await h.channel.receive("y", chat_id="c2", thread_id="t")
        await h.settle()
        account = h.kernel.accounts["memory:main"]
        assert h.kernel.inbound.last_chat(account)["chat_id"] == "c2"
        # written behind, coalesced: the store has it after the next flush
        await h.kernel.inbound.flush_last_chats()
        last = await h.kernel.store.get_account_state("memory", "main", "last_chat")
        assert last["chat_id"] == "c2" and last["thread_id"] == "t"
        await h.channel.receive("z", chat_id="c3")
    # and the kernel flushes it when it stops
    from chatkernel.core.store.sqlite import SQLiteStore

    async with SQLiteStore.at(tmp_path / "state.db") as store:
        last = await store.get_account_state("memory", "main", "last_chat")
        assert last["chat_id"] == "c3"


async def test_busy_hint_once_per_busy_period(tmp_path):
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent) as h:
        await h.channel.receive("first")
        await h.channel.receive("second")
        await h.channel.receive("third")
        await h.kernel.outbox.wait_idle()  # the turn is still held open
        assert h.channel.texts().count(BUSY_HINT) == 1
        agent.gate.set()
        await h.settle()
        agent.gate = anyio.Event()
        await h.channel.receive("fourth")
        await h.channel.receive("fifth")  # a new busy period: one more hint
        agent.gate.set()
        await h.settle()
        assert h.channel.texts().count(BUSY_HINT) == 2


async def test_busy_hint_not_sent_on_a_channel_that_turns_it_off(tmp_path, monkeypatch):
    """A channel whose every message spends a quota (WeChat) declares
    Capabilities(busy_hint=False)."""
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent) as h:
        monkeypatch.setattr(type(h.channel), "capabilities", Capabilities(busy_hint=False))
        await h.channel.receive("first")
        await h.channel.receive("second")
        await h.kernel.outbox.wait_idle()  # the turn is still held open
        agent.gate.set()
        await h.settle()
        assert BUSY_HINT not in h.channel.texts()
        assert any("first" in text for text in h.channel.texts())  # the answers came


async def test_agent_gets_envelope_and_clean_text_and_log_keeps_clean_text(tmp_path):
    agent = scripted_agent()
    async with harness(tmp_path, agent) as h:
        await h.channel.receive("what's up", sender_id="42", sender_name="Ann", thread_id="7")
        await h.settle()
        request = agent.requests[0]
        assert request.envelope == "[channel: memory | user: 42 (Ann) | thread: 7]"
        assert request.prompt == "[channel: memory | user: 42 (Ann) | thread: 7]\nwhat's up"
        assert request.text == "what's up"
        log = await h.kernel.store.read_log("memory:main:chat-1:7")
        assert [(e.role, e.text) for e in log] == [("user", "what's up"),
                                                   ("assistant", "re: what's up")]


async def test_a_turns_messages_are_logged_with_its_reply_not_before(tmp_path):
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent) as h:
        await h.channel.receive("first")
        # the turn waits at the gate
        await wait_until(lambda: agent.running, timeout=5, what="the turn", interval=0.005)
        key = "memory:main:chat-1"
        # While the turn runs the log is the history before it (what an agent reads).
        assert await h.kernel.store.read_log(key) == []
        agent.gate.set()
        await h.settle()
        log = await h.kernel.store.read_log(key)
        assert [(e.role, e.text) for e in log] == [("user", "first"), ("assistant", "re: first")]
        assert log[0].meta == {"sender_id": "user-1", "message_id": log[0].meta["message_id"]}


async def test_a_turn_without_a_reply_still_logs_its_messages(tmp_path):
    def script(request):
        if request.text == "boom":
            raise RuntimeError("agent crashed")
        return []  # says nothing

    agent = scripted_agent(script=script)
    async with harness(tmp_path, agent) as h:
        await h.channel.receive("quiet")
        await h.settle()
        await h.channel.receive("boom")
        await h.settle()
        log = await h.kernel.store.read_log("memory:main:chat-1")
        assert [(e.role, e.text) for e in log] == [
            ("user", "quiet"), ("user", "boom"),
            ("assistant", "⚠️ the agent failed: agent crashed")]
        assert await h.kernel.store.unfinished_inbound() == []


async def test_an_interrupted_turn_logs_its_message_before_the_next_turn(tmp_path):
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent, config={"queue": {"mode": "interrupt"}}) as h:
        await h.channel.receive("first")
        await wait_until(lambda: agent.running, timeout=5, what="the turn", interval=0.005)
        assert await h.channel.receive("second") == "interrupted"
        agent.gate.set()
        await h.settle()
        log = await h.kernel.store.read_log("memory:main:chat-1")
        assert [(e.role, e.text) for e in log] == [
            ("user", "first"), ("user", "second"), ("assistant", "re: second")]
        assert await h.kernel.store.unfinished_inbound() == []


def test_envelope_marks_groups():
    message = InboundMessage(channel="telegram", account="a", chat_id="-100", message_id="1",
                             sender_id="42", is_group=True)
    assert envelope(message) == "[channel: telegram | user: 42 | group: -100]"


async def test_inbound_media_note_reaches_the_agent(tmp_path):
    agent = scripted_agent()
    async with harness(tmp_path, agent) as h:
        path = tmp_path / "cat.jpg"
        path.write_bytes(b"jpeg")
        await h.channel.receive("look", media=[MediaRef(kind="image", path=path)])
        await h.settle()
        assert agent.requests[0].text == f"look\n[image saved: {path}]"
        assert agent.requests[0].media[0].path == path


async def test_inbound_delivered_observers_see_accepted_messages(tmp_path):
    seen = []

    class Observer:
        @staticmethod
        @hookimpl
        def inbound_delivered(message, session):
            seen.append((message.text, session.key))

    async with harness(tmp_path, plugins=[("observer", Observer)]) as h:
        await h.channel.receive("hello")
        await h.channel.receive("/status")  # commands are not delivered to the agent
        await h.settle()
        assert seen == [("hello", "memory:main:chat-1")]


async def test_typing_indicator_starts_on_enqueue(tmp_path):
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent) as h:
        await h.channel.receive("hi")
        await wait_until(lambda: h.channel.indications, timeout=2, what="the indicator",
                         interval=0.005)
        assert h.channel.indications[0].chat_id == "chat-1"
        agent.gate.set()


async def test_upkeep_prunes_old_finished_journal_entries_but_keeps_fresh_dedupe(tmp_path):
    import time as _time

    async with harness(tmp_path, config={"store": {"journal_retention_days": 1}}) as h:
        await h.channel.receive("old", message_id="m-old")
        await h.settle()
        later = _time.time() + 2 * 86400  # two days on: the entry is past retention
        assert await h.kernel.upkeep(now=later) == 2  # its journal entry and its reply
        assert h.kernel.store._run("SELECT count(*) FROM outbox").fetchone() == (0,)
        await h.channel.receive("fresh", message_id="m-new")
        await h.settle()
        assert await h.kernel.upkeep() == 0  # within retention: kept, so still deduped
        assert await h.channel.receive("fresh", message_id="m-new") == "duplicate"


# -- accept(): what receive loops call --------------------------------------------------


class HeldAccept:
    """An ``inbound_accept`` hook that holds messages whose text starts with "hold"."""

    def __init__(self) -> None:
        self.gate = anyio.Event()
        self.seen: list[str] = []

    @hookimpl
    async def inbound_accept(self, message, account):
        self.seen.append(message.text)
        if message.text.startswith("hold"):
            await self.gate.wait()
        return None


def incoming(text, message_id, chat_id="chat-1"):
    return InboundMessage(channel="memory", account="main", chat_id=chat_id,
                          message_id=message_id, sender_id="user-1", text=text)


async def test_accept_returns_once_journaled_and_the_pipeline_follows(tmp_path):
    held = HeldAccept()
    agent = scripted_agent()
    async with harness(tmp_path, agent, plugins=[("held", held)]) as h:
        assert await h.kernel.accept(incoming("hold me", "a1")) == "accepted"
        assert await h.kernel.accept(incoming("hold me", "a1")) == "duplicate"
        # Journaled, not yet processed: no turn ran, the entry is unfinished.
        entries = await h.kernel.store.unfinished_inbound()
        assert [e.message.message_id for e in entries] == ["a1"]
        assert agent.requests == [] and h.kernel.inbound.backlog() == 1
        held.gate.set()
        await h.settle()
        assert [r.text for r in agent.requests] == ["hold me"]
        assert await h.kernel.store.unfinished_inbound() == []


async def test_accept_keeps_each_chats_order_and_does_not_block_other_chats(tmp_path):
    held = HeldAccept()
    agent = scripted_agent()
    async with harness(tmp_path, agent, config={"queue": {"mode": "followup"}},
                       plugins=[("held", held)]) as h:
        await h.kernel.accept(incoming("hold 1", "m1"))
        for n in (2, 3, 4):
            await h.kernel.accept(incoming(f"next {n}", f"m{n}"))
        await h.kernel.accept(incoming("other chat", "o1", chat_id="chat-2"))
        # The other chat went through while chat-1 waits behind its first message.
        await h.channel.wait_for_sent(1)
        assert h.channel.texts() == ["re: other chat"]
        assert held.seen == ["hold 1", "other chat"]
        held.gate.set()
        await h.settle()
        chat1 = [r.text for r in agent.requests if r.session_key.endswith("chat-1")]
        assert chat1 == ["hold 1", "next 2", "next 3", "next 4"]


async def test_accept_waits_when_the_backlog_is_full(tmp_path, monkeypatch):
    from chatkernel.core.inbound import pipeline as inbound

    monkeypatch.setattr(inbound, "ACCEPT_BACKLOG", 2)
    held = HeldAccept()
    async with harness(tmp_path, plugins=[("held", held)]) as h:
        await h.kernel.accept(incoming("hold a", "b1"))
        await h.kernel.accept(incoming("hold b", "b2", chat_id="chat-2"))
        with anyio.move_on_after(0.2) as waited:
            await h.kernel.accept(incoming("third", "b3", chat_id="chat-3"))
        assert waited.cancelled_caught, "accept must wait while the backlog is full"
        held.gate.set()
        assert await h.kernel.accept(incoming("third", "b3", chat_id="chat-3")) == "accepted"
        await h.settle()
        assert sorted(h.channel.texts()) == ["hold a", "hold b", "third"]


async def test_a_message_failing_after_accept_stays_unfinished_and_the_chat_goes_on(tmp_path):
    class Exploding:
        @hookimpl
        def inbound_accept(self, message, account):
            if message.text == "boom":
                raise RuntimeError("a plugin bug")
            return None

    async with harness(tmp_path, plugins=[("exploding", Exploding())]) as h:
        await h.kernel.accept(incoming("boom", "x1"))
        await h.kernel.accept(incoming("after", "x2"))
        await h.settle()
        # Not silent: its chat is told (tests/test_pipeline_failures.py), then goes on.
        assert h.channel.texts() == [FAILURE_NOTICE, "after"]
        # Replayed on the next start, not lost.
        assert [e.message.message_id for e in await h.kernel.store.unfinished_inbound()] \
            == ["x1"]


async def test_drain_waits_for_accepted_messages(tmp_path):
    held = HeldAccept()
    async with harness(tmp_path, plugins=[("held", held)]) as h:
        await h.kernel.accept(incoming("hold on", "d1"))
        assert not await h.kernel.drain(0.1)
        held.gate.set()
        assert await h.kernel.drain(5)
        assert h.channel.texts() == ["hold on"]


async def test_a_batch_is_journaled_in_one_write_with_duplicates_and_invalid_ones_named(
        tmp_path, caplog):
    from chatkernel.sdk.channel import deliver_many

    agent = scripted_agent()
    async with harness(tmp_path, agent, config={"queue": {"mode": "followup"}}) as h:
        bad = InboundMessage(channel="memory", account="main", chat_id="chat-1",
                             message_id="bad", sender_id="")
        batch = [incoming("one", "n1"), bad, incoming("two", "n2"),
                 incoming("elsewhere", "e1", chat_id="chat-2")]
        outcomes = await h.kernel.receiver.many(batch)
        assert outcomes == ["accepted", "invalid", "accepted", "accepted"]
        assert "sender_id" in caplog.text
        assert await h.kernel.receiver.many([incoming("one", "n1")]) == ["duplicate"]
        await deliver_many(h.kernel.receiver, [incoming("three", "n3")])
        await h.settle()
        chat1 = [r.text for r in agent.requests if r.session_key.endswith("chat-1")]
        assert chat1 == ["one", "two", "three"]
        assert await h.kernel.store.unfinished_inbound() == []


async def test_deliver_many_with_a_plain_deliver_keeps_each_chats_order():
    from chatkernel.sdk.channel import deliver_many

    seen: list[str] = []

    async def deliver(message):
        # A chat's first message takes longest: delivered at once, it would come last.
        for _ in range(5 if message.message_id in ("a1", "b1") else 1):
            await anyio.lowlevel.checkpoint()
        seen.append(message.message_id)

    await deliver_many(deliver, [incoming("x", "a1", "a"), incoming("x", "b1", "b"),
                                 incoming("x", "a2", "a"), incoming("x", "b2", "b")])
    assert [m for m in seen if m.startswith("a")] == ["a1", "a2"]
    assert [m for m in seen if m.startswith("b")] == ["b1", "b2"]
    assert len(seen) == 4


async def test_no_busy_hint_for_a_message_that_joins_a_turn_not_yet_started(tmp_path):
    agent = scripted_agent()
    async with harness(tmp_path, agent, config={"queue": {"mode": "collect"}}) as h:
        # One poll's burst: both are accepted before any turn starts, and collect
        # answers them in one turn; nobody was kept waiting, so no hint.
        await h.kernel.receiver.many([incoming("hello", "b1"), incoming("again", "b2")])
        await h.settle()
        assert BUSY_HINT not in h.channel.texts()
        assert [r.text for r in agent.requests] == ["hello\n\nagain"]


async def test_normalize_batch_keeps_order_skips_what_it_cannot_read_and_downloads_side_by_side(
        caplog):
    from chatkernel.sdk.channel import normalize_batch

    started: list[str] = []
    gate = anyio.Event()

    async def normalize(event):
        if event["id"] == "bad":
            raise KeyError("chat")
        if event.get("skip"):
            return None
        started.append(event["id"])
        if event.get("file") and event["chat"] == "a":
            await gate.wait()  # a slow download in chat a
        return incoming(event["id"], event["id"], chat_id=event["chat"])

    events = [{"id": "a1", "chat": "a", "file": True}, {"id": "bad", "chat": "b"},
              {"id": "b1", "chat": "b"}, {"id": "s", "chat": "b", "skip": True},
              {"id": "a2", "chat": "a"}, {"id": "b2", "chat": "b"}]
    async with anyio.create_task_group() as tg:
        result: list = []

        async def run():
            result.extend(await normalize_batch(
                events, normalize, chat_of=lambda e: e["chat"],
                downloads=lambda e: bool(e.get("file")), account="t:main",
                describe=lambda e: f"event {e['id']}"))

        tg.start_soon(run)
        with anyio.fail_after(5):
            while "b2" not in started:  # chat b went on while chat a downloads
                await anyio.sleep(0)
        assert "a2" not in started
        gate.set()
    assert [m.message_id for m in result] == ["a1", "b1", "a2", "b2"]
    assert "event bad skipped" in caplog.text


async def test_a_route_is_written_when_any_part_of_it_changes_and_only_then():
    from dataclasses import replace

    from chatkernel.core.inbound.sessions import Sessions, route_for, routes_to

    base = InboundMessage(channel="tg", account="main", chat_id="c1", message_id="m1",
                          sender_id="u1", text="hi", route_extra={"token": "a"})
    assert routes_to(route_for(base), base)
    changes = [dict(channel="wa"), dict(account="other"), dict(chat_id="c2"),
               dict(thread_id="t1"), dict(is_group=True), dict(route_extra={"token": "b"})]
    for change in changes:
        changed = replace(base, **change)
        assert not routes_to(route_for(base), changed), change
        assert routes_to(route_for(changed), changed), change
    group = replace(base, is_group=True)
    # In a group a reply quotes the message it answers: each message is a new route.
    assert not routes_to(route_for(group), replace(group, message_id="m2"))
    # A direct chat's route does not depend on the message id.
    assert routes_to(route_for(base), replace(base, message_id="m2", text="other"))

    written: list = []

    class Store:
        async def set_route(self, key, route):
            written.append(route)

    sessions = Sessions(Store())  # type: ignore[arg-type]
    first = await sessions.refresh_route("k", base)
    assert await sessions.refresh_route("k", replace(base, message_id="m2")) is first
    await sessions.refresh_route("k", replace(base, route_extra={"token": "b"}))
    assert written == [route_for(base), route_for(replace(base, route_extra={"token": "b"}))]
