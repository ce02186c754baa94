"""Outbound (docs/outbound.md): responder, MEDIA markers, retries, markup fallback,
outbox durability, the send policy."""

from __future__ import annotations

import time

import anyio
import pytest

from chatkernel import SendError
from chatkernel.core.turns.agents import AgentEvent
from chatkernel.sdk.markup import MarkdownRenderer, escape_html, render_payload
from chatkernel.sdk.models import OutboundPayload, Route
from chatkernel.testing.agents import agent_plugin, scripted_agent
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio

FAST_RETRY = {"attempts": 3, "base_delay_ms": 1, "max_delay_ms": 5, "jitter": 0}


def harness(tmp_path, script=None, account=None, channel=None, **config):
    agent = scripted_agent(script=script)
    accounts = {"main": {"allow_from": ["*"], **(account or {})}}
    config.setdefault("channels", {"memory": {"retry": FAST_RETRY, "accounts": accounts,
                                              **(channel or {})}})
    config["agent"] = {"kind": agent.name}
    return KernelHarness(tmp_path, config=config, plugins=[("agent", agent_plugin(agent))])


def replying(*events):
    return lambda request: list(events)


async def notifications(h, key="memory:main:chat-1"):
    return [e.text for e in await h.kernel.store.read_log(key, roles=("notification",))]


async def test_only_final_text_is_sent_and_errors_flush_first(tmp_path):
    script = replying(AgentEvent("thinking", "hmm"), AgentEvent("tool", "search(x)"),
                      AgentEvent("text", "partial", final=False),
                      AgentEvent.reply("the answer"), AgentEvent.error("the tool broke"),
                      AgentEvent("system", "context trimmed"), AgentEvent.reply("after"))
    async with harness(tmp_path, script) as h:
        await h.channel.receive("question")
        await h.settle()
        assert h.channel.texts() == ["the answer", "⚠️ the tool broke", "ℹ️ context trimmed",
                                     "after"]
        formats = [s.payload.format for s in h.channel.sent]
        assert formats == ["markdown", "plain", "plain", "markdown"]


async def test_media_markers_are_sent_in_their_place(tmp_path):
    workspace = tmp_path / "workspace"
    (workspace / "out").mkdir(parents=True)
    (workspace / "out" / "cat.jpg").write_bytes(b"jpeg")
    (workspace / "notes.ogg").write_bytes(b"ogg")
    text = "Here is the cat:\nMEDIA: out/cat.jpg\nand a voice note\nMEDIA: notes.ogg\nbye"
    async with harness(tmp_path, replying(AgentEvent.reply(text))) as h:
        await h.channel.receive("show me")
        await h.settle()
        sent = [(s.payload.media_kind, s.payload.media_path.name if s.payload.is_media
                 else s.text) for s in h.channel.sent]
        assert sent == [(None, "Here is the cat:"), ("photo", "cat.jpg"),
                        (None, "and a voice note"), ("voice", "notes.ogg"), (None, "bye")]
        assert [s.payload.chunk_index for s in h.channel.sent] == [1, 2, 3, 4, 5]
        assert {s.payload.chunk_count for s in h.channel.sent} == {5}


async def test_blocked_media_is_reported_to_the_chat_and_logged(tmp_path, caplog):
    # /etc/passwd: readable, and outside both the workspace and the temp dir
    depth = len((tmp_path / "workspace").resolve().parts) - 1
    escape = "../" * depth + "etc/passwd"
    text = f"MEDIA: /etc/passwd\nMEDIA: missing.png\nMEDIA: {escape}\nMEDIA: bad\x00name"
    async with harness(tmp_path, replying(AgentEvent.reply(text))) as h:
        await h.channel.receive("leak it")
        await h.settle()
        texts = h.channel.texts()
        assert len(texts) == 4 and not any(s.payload.is_media for s in h.channel.sent)
        assert texts[0].startswith("⚠️ upload failed: passwd — outside the workspace")
        assert texts[1] == "⚠️ upload failed: missing.png — no such file"
        assert texts[2].startswith("⚠️ upload failed: passwd — outside the workspace")
        assert texts[3].startswith("⚠️ upload failed: badname — not a usable path")
        assert "refused by the media-path policy" in caplog.text


async def test_full_access_may_send_any_readable_file(tmp_path):
    async with harness(tmp_path, replying(AgentEvent.reply("MEDIA: /etc/passwd")),
                       account={"access_level": "full"}) as h:
        await h.channel.receive("send it")
        await h.settle()
        assert [s.payload.media_kind for s in h.channel.sent] == ["document"]


async def test_retryable_failures_are_retried_then_sent_once(tmp_path):
    async with harness(tmp_path) as h:
        h.channel.fail_next = [
            SendError("Too Many Requests: retry after 0.01", retryable=True, status=429,
                      retry_after=0.01),
            SendError("Bad Gateway", retryable=True, status=502),
        ]
        await h.channel.receive("hello")
        await h.settle()
        assert h.channel.texts() == ["re: hello"]
        metrics = h.kernel.metrics
        assert metrics.child(metrics.retries, "memory", "main")._value.get() == 2
        assert metrics.child(metrics.throttled, "memory", "main")._value.get() == 1


async def test_attempts_run_out_and_the_failure_is_reported_not_silent(tmp_path):
    long_reply = "first part " * 10 + "\n\n" + "second part " * 10
    async with harness(tmp_path, replying(AgentEvent.reply(long_reply))) as h:
        h.channel.limits = type(h.channel.limits)(text_limit=120)
        # Throttled past its attempts (a run of 5xx would be an outage, waited out).
        h.channel.fail_next = [SendError("Too Many Requests", retryable=True, status=429,
                                         retry_after=0.001)] * 3
        await h.channel.receive("go")
        await h.settle()
        assert h.channel.texts() == []  # the second chunk is not sent after a hole
        notes = await notifications(h)
        # It names which message failed: the part, and the start of its text.
        assert notes == ['delivery failed: chunk 1/2 "first part first part first part first…": '
                         'Too Many Requests (1 later part(s) not sent)']
        metrics = h.kernel.metrics
        assert metrics.child(metrics.send_failures, "memory", "main")._value.get() == 1
        # recording the failure sent nothing, and the next reply goes out whole
        await h.channel.receive("again")
        await h.settle()
        assert [t.split()[0] for t in h.channel.texts()] == ["first", "second"]


async def test_a_timeout_after_sending_is_never_retried(tmp_path):
    async with harness(tmp_path) as h:
        h.channel.fail_next = [SendError("read timeout", retryable=True, delivery_unknown=True)]
        await h.channel.receive("maybe")
        await h.settle()
        assert h.channel.texts() == []
        assert await notifications(h) == ['delivery failed: delivery unknown: chunk 1/1 '
                                          '"re: maybe": read timeout']
        entries = h.kernel.store._run("SELECT status FROM outbox").fetchall()
        assert entries == [("unknown",)]


async def test_non_retryable_errors_fail_at_once(tmp_path):
    async with harness(tmp_path) as h:
        h.channel.fail_next = [SendError("Bad Request: chat not found", status=400)]
        await h.channel.receive("x")
        await h.settle()
        metrics = h.kernel.metrics
        assert metrics.child(metrics.retries, "memory", "main")._value.get() == 0
        assert (await notifications(h))[0].endswith("chat not found")


class TagMarkup(MarkdownRenderer):
    """A small renderer of the test's own (no plugin needs to be imported for it)."""

    name = "test_tags"

    def text(self, s: str) -> str:
        return escape_html(s)

    def code_inline(self, s: str, in_link: bool) -> str:
        return f"<code>{escape_html(s)}</code>"

    def style(self, kind: str, content: str) -> str:
        return f"<{kind}>{content}</{kind}>"


async def test_markdown_is_rendered_in_the_channels_markup(tmp_path):
    async with harness(tmp_path, replying(AgentEvent.reply("**bold** and `x < y`"))) as h:
        type(h.channel).markup = TagMarkup
        try:
            await h.channel.receive("format")
            await h.settle()
            text, markup = render_payload(h.channel.sent[0].payload, h.channel.markup)
            assert (text, markup) == ("<strong>bold</strong> and <code>x &lt; y</code>",
                                      "test_tags")
            plain = render_payload(type(h.channel.sent[0].payload)(text="**as is**",
                                                                  format="plain"),
                                   h.channel.markup)
            assert plain == ("**as is**", None)
        finally:
            type(h.channel).markup = None


async def test_rejected_markup_is_resent_as_plain_text_and_is_not_a_retry(tmp_path):
    async with harness(tmp_path, replying(AgentEvent.reply("**bold** [x"))) as h:
        h.channel.fail_next = [SendError("Bad Request: can't parse entities",
                                         status=400, markup_rejected=True)]
        await h.channel.receive("format")
        await h.settle()
        assert [(s.text, s.payload.format) for s in h.channel.sent] == [("bold [x", "plain")]
        metrics = h.kernel.metrics
        assert metrics.child(metrics.retries, "memory", "main")._value.get() == 0


async def test_unsent_outbox_entries_go_out_on_restart_and_in_flight_ones_are_reported(
        tmp_path, outbox_left_mid_send):
    entries = await outbox_left_mid_send(tmp_path)
    async with harness(tmp_path) as h:
        await h.settle()
        assert h.channel.texts() == ["never attempted"]
        notes = await notifications(h, "memory:main:chat-9")
        assert notes == ['delivery unknown: chunk 1/2 "was in flight" was being sent when '
                         'the gateway stopped; it is not resent']
        statuses = dict(h.kernel.store._run("SELECT id, status FROM outbox").fetchall())
        assert statuses == {entries[0].id: "unknown", entries[1].id: "failed",
                            entries[2].id: "sent"}


async def test_a_payload_waiting_for_its_rate_limit_slot_stays_pending(tmp_path):
    # `sending` means "the request may be out": it is written after the rate-limit
    # wait, so a crash during that wait leaves the payload `pending` (resent on restart).
    async with harness(tmp_path) as h:
        outbox = h.kernel.outbox
        account = h.kernel.accounts["memory:main"]
        route = Route("memory", "main", "chat-1")
        outbox.limits.limiter(account).penalize(0.3, "chat-1")  # as after a 429 for this chat

        def statuses():
            return [row[0] for row in h.kernel.store._run(
                "SELECT status FROM outbox ORDER BY id").fetchall()]

        await outbox.submit(account, "k", "s", route, [OutboundPayload(text="later")])
        with anyio.move_on_after(0.1):
            await h.settle()
        assert h.channel.texts() == []
        assert statuses() == ["pending"]
        await h.settle()
        assert h.channel.texts() == ["later"]
        assert statuses() == ["sent"]


async def test_every_request_goes_out_after_its_row_is_committed_sending(tmp_path):
    # An idle session's first payload is stored `sending` from the start (its
    # rate-limit slot taken at once); the next ones are marked when their turn
    # comes. Either way, another connection must read `sending` when the request
    # leaves: a crash then reports "delivery unknown" and never resends.
    import sqlite3

    def reply(request):
        return [AgentEvent.reply("\n\n".join(f"{request.text} part {i} " + "x" * 3000
                                               for i in range(3)))]

    # A wide margin: a slow machine must not make a claimed slot stale (see below).
    async with harness(tmp_path, reply, channel={"rate_limits": {"margin": 0.5}}) as h:
        channel, store = h.channel, h.kernel.store
        original_send, original_mark = channel.send, store.outbox_mark
        seen: list[tuple[str, str]] = []
        marks: list[str] = []

        async def mark(entry_id, status, error=None, *, durable=False):
            marks.append(status)
            await original_mark(entry_id, status, error, durable=durable)

        async def send(route, payload):
            head = payload.text.split(" x")[0]  # "<chat> part <i>"
            with sqlite3.connect(store.path) as other:
                (status,) = other.execute("SELECT status FROM outbox WHERE payload LIKE ?",
                                          (f'%"{head} x%',)).fetchone()
            seen.append((head, status))
            return await original_send(route, payload)

        channel.send, store.outbox_mark = send, mark
        await channel.receive("one", chat_id="chat-1")
        await channel.receive("two", chat_id="chat-2")
        await h.settle()
        assert sorted(seen) == [(f"{text} part {i}", "sending")
                                for text in ("one", "two") for i in range(3)]
        # Each reply's first payload was stored `sending`; only the later ones were marked.
        assert marks.count("sending") == 2 * 2
        assert marks.count("sent") == 2 * 3
        statuses = {row[0] for row in store._run("SELECT status FROM outbox").fetchall()}
        assert statuses == {"sent"}


@pytest.mark.slow
async def test_a_claimed_payload_whose_slot_is_taken_meanwhile_waits_as_pending(tmp_path):
    # An idle session's reply is stored `sending` when its slot is free; the sender
    # takes the slot just before the request. If another send took it in between,
    # the payload goes back to `pending` while it waits: nothing went out yet.
    channel = {"rate_limits": {"chat": "1/s"}}
    async with harness(tmp_path, channel=channel) as h:
        outbox, store = h.kernel.outbox, h.kernel.store
        account = h.kernel.accounts["memory:main"]
        route = Route("memory", "main", "chat-1")
        original_mark = store.outbox_mark
        marks: list[str] = []

        async def mark(entry_id, status, error=None, *, durable=False):
            marks.append(status)
            await original_mark(entry_id, status, error, durable=durable)

        store.outbox_mark = mark
        await outbox.submit(account, "k", "s", route, [OutboundPayload(text="later")])
        assert outbox.limits.limiter(account).try_acquire("chat-1")  # someone else's send
        with anyio.move_on_after(0.2):
            await h.settle()
        assert h.channel.texts() == []
        assert marks == ["pending"]
        await store.flush()
        assert [row[0] for row in store._run("SELECT status FROM outbox")] == ["pending"]
        await h.settle()
        assert h.channel.texts() == ["later"]
        assert marks == ["pending", "sending", "sent"]


async def test_a_lingering_sender_is_woken_by_the_commit_of_its_claimed_row(tmp_path):
    # The usual reply: its session's sender lingers, idle. The reply is stored
    # `sending` and the sender is woken by that row's commit, not before.
    import sqlite3

    async with harness(tmp_path) as h:
        channel, store = h.channel, h.kernel.store
        original_send = channel.send
        seen: list[str] = []

        async def send(route, payload):
            with sqlite3.connect(store.path) as other:
                (status,) = other.execute("SELECT status FROM outbox WHERE payload LIKE ?",
                                          (f'%{payload.text}%',)).fetchone()
            seen.append(status)
            return await original_send(route, payload)

        channel.send = send
        await channel.receive("one", chat_id="chat-1")
        await h.settle()
        assert h.kernel.outbox.lines.active("memory:main:chat-1")  # lingering
        for text in ("two", "three"):
            await channel.receive(text, chat_id="chat-1")
            await h.settle()
        assert channel.texts() == ["re: one", "re: two", "re: three"]
        assert seen == ["sending"] * 3


async def test_a_claimed_payload_whose_commit_failed_is_sent_once_it_goes_through(
        tmp_path, fail_next_commit):
    async with harness(tmp_path) as h:
        outbox, store = h.kernel.outbox, h.kernel.store
        account = h.kernel.accounts["memory:main"]
        route = Route("memory", "main", "chat-1")
        await outbox.submit(account, "k", "s", route, [OutboundPayload(text="first")])
        await h.settle()  # its sender lingers now
        fail_next_commit(store)
        kept = await outbox.submit(account, "k", "s", route, [OutboundPayload(text="kept")])
        await outbox.submit(account, "k", "s", route, [OutboundPayload(text="later")])
        with anyio.fail_after(5):  # long before the wait's own 60 s
            [entry] = await h.kernel.deliveries.wait(kept, 60)
        assert entry.status == "sent"
        await h.settle()
        # Its row was committed when the commit was tried again: sent, in its turn.
        assert h.channel.texts() == ["first", "kept", "later"]
        assert outbox._claim_commits == {} and outbox._claimed == set()
        assert not account.runtime.recent_failures


async def test_send_policy_blocks_groups_and_a_session_override_wins(tmp_path):
    policy = {"default": "allow", "rules": [{"action": "deny", "channel": "memory",
                                             "chat_type": "group"}]}
    async with harness(tmp_path, send_policy=policy) as h:
        await h.channel.receive("in a group", chat_id="g1", is_group=True, mentions_bot=True)
        await h.channel.receive("direct", chat_id="d1")
        await h.settle()
        assert h.channel.texts() == ["re: direct"]
        record = await h.kernel.sessions.get("memory:main:g1")
        await h.kernel.sessions.update_settings(record, send="allow")
        await h.channel.receive("now allowed", chat_id="g1", is_group=True, mentions_bot=True)
        await h.settle()
        assert h.channel.texts() == ["re: direct", "re: now allowed"]


async def test_chunks_keep_their_order_while_sessions_send_concurrently(tmp_path):
    text = "\n\n".join(f"paragraph {i} " + "x" * 30 for i in range(6))
    async with harness(tmp_path, replying(AgentEvent.reply(text))) as h:
        h.channel.limits = type(h.channel.limits)(text_limit=50)
        h.channel.send_delay = 0.002
        for chat in ("a", "b", "c"):
            await h.channel.receive("go", chat_id=chat)
        await h.settle()
        for chat in ("a", "b", "c"):
            got = [s.text for s in h.channel.sent if s.route.chat_id == chat]
            assert [t.split()[1] for t in got] == [str(i) for i in range(6)]
        # and the chats interleaved: nobody waited for another chat's whole reply
        chats = [s.route.chat_id for s in h.channel.sent]
        assert chats != sorted(chats)


async def test_bad_retry_or_rate_settings_fail_at_start_naming_the_key(tmp_path):
    from chatkernel.core.config import ConfigError

    with pytest.raises(ConfigError, match="channels.memory.retry"):
        async with harness(tmp_path, channel={"retry": {"attempts": 0}}):
            pass
    with pytest.raises(ConfigError, match="channels.memory.rate_limits"):
        async with harness(tmp_path, channel={"rate_limits": {"chat": "fast"}}):
            pass


async def test_idle_senders_linger_then_end_and_a_later_reply_starts_a_new_one(tmp_path):
    from chatkernel.core.outbound.outbox import SENDER_LINGER_SECONDS

    async with harness(tmp_path, replying(AgentEvent.reply("pong"))) as h:
        outbox = h.kernel.outbox
        await h.channel.receive("ping", chat_id="a")
        await h.settle()
        assert outbox.reap_idle(time.monotonic()) == 0  # lingering, not yet long enough
        assert outbox.lines.active("memory:main:a")
        later = time.monotonic() + SENDER_LINGER_SECONDS
        assert outbox.reap_idle(later) == 1
        await h.settle()
        for _ in range(10):  # the woken sender ends on its next turn of the loop
            if not outbox.lines.active("memory:main:a"):
                break
            await anyio.sleep(0)
        assert not outbox.lines.active("memory:main:a")
        await h.channel.receive("ping again", chat_id="a")
        await h.settle()
        assert h.channel.texts() == ["pong", "pong"]
