"""The suite itself: :class:`ChannelContract`, the tests every channel passes against its
fake platform (a plugin subclasses it), :func:`needs` marking a test by the capability it
needs, and the files and texts the tests send (:func:`png_bytes`, :func:`long_text`)."""

from __future__ import annotations

import contextlib
import math
import struct
import zlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

from chatkernel.core.turns.agents import AgentEvent
from chatkernel.testing.contract.adapter import PlatformAdapter
from chatkernel.testing.contract.faults import FaultChecks
from chatkernel.testing.contract.run import ContractRun, open_contract_run


# -- files for the media test -----------------------------------------------------------------


def png_bytes(width: int = 2, height: int = 2) -> bytes:
    """A small, valid PNG (fakes that check image dimensions accept it)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2,
                                                              0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def long_text(limit: int, factor: float = 2.5) -> str:
    """About ``factor * limit`` characters of numbered words in lines and paragraphs."""
    lines: list[str] = []
    size, n = 0, 0
    while size < factor * limit:
        line = " ".join(f"w{n + i:05d}" for i in range(10))
        n += 10
        lines.append(line)
        size += len(line) + 1
        if len(lines) % 6 == 0:
            lines.append("")
    return "\n".join(lines).strip()


# -- the suite -----------------------------------------------------------------------------


def needs(capability: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a contract test as needing ``supports_<capability>`` (skipped without it)."""
    def mark(test: Callable[..., Any]) -> Callable[..., Any]:
        test.contract_capability = capability  # type: ignore[attr-defined]
        return test

    return mark



class ChannelContract(FaultChecks):
    """The tests every channel passes against its fake platform.

    Subclass it as ``Test<Channel>Contract`` and set :attr:`adapter_class`
    (or override the ``platform_adapter`` fixture, an async fixture yielding a
    started adapter). Tests skipped by capability: redelivery
    (``supports_redelivery``), groups (``supports_groups``), threads
    (``supports_threads``), media out (``supports_media_out``), typing
    (``supports_typing``), revoked credentials (``supports_revoke``), the bot's
    own messages (``supports_own_messages``), non-message events
    (``supports_non_message_events``), one chat's refusal (``supports_chat_refusal``),
    live replies (``supports_live_replies``; a channel that does not declare
    ``LiveReplies`` passes it by refusing ``streaming = "on"``).
    """

    pytestmark = pytest.mark.anyio

    #: The adapter class the default ``platform_adapter`` fixture starts.
    adapter_class: ClassVar[type[PlatformAdapter] | None] = None

    @pytest.fixture
    def anyio_backend(self) -> str:
        """asyncio only (aiohttp needs it), whatever other backends are installed."""
        return "asyncio"

    @pytest.fixture
    async def platform_adapter(self) -> AsyncIterator[PlatformAdapter]:
        """A started adapter (override this fixture, or set ``adapter_class``)."""
        if self.adapter_class is None:
            pytest.fail(f"{type(self).__name__}: set adapter_class or override the "
                        "platform_adapter fixture")
        async with self.adapter_class() as adapter:
            yield adapter

    def contract_run(self, adapter: PlatformAdapter, home: Path,
                     **options: Any) -> contextlib.AbstractAsyncContextManager[ContractRun]:
        """A kernel around the adapter's channel (see :func:`open_contract_run`)."""
        return open_contract_run(adapter, home, **options)

    @pytest.fixture
    async def contract_kernel(self, platform_adapter: PlatformAdapter, tmp_path: Path,
                              request: pytest.FixtureRequest) -> AsyncIterator[ContractRun]:
        """A running kernel, anyone allowed, with the receive loop running."""
        capability = getattr(request.function, "contract_capability", None)
        if capability is not None:  # skip before starting anything
            self.require(platform_adapter, capability)
        async with self.contract_run(platform_adapter, tmp_path / "kernel") as run:
            yield run

    @staticmethod
    def require(adapter: PlatformAdapter, capability: str) -> None:
        if not getattr(adapter, f"supports_{capability}"):
            pytest.skip(f"{type(adapter).__name__} declares supports_{capability} = False")

    # 1
    async def test_direct_message_is_answered_in_the_same_chat(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        chat, other = adapter.direct_chat(1), adapter.direct_chat(2)
        await adapter.inject(other, "hello dm02z", sender_id=adapter.user_id(2))
        await adapter.inject(chat, "hello dm01z", sender_id=adapter.user_id(1),
                             sender_name="Ada")
        await run.wait_for_tokens(chat, ["dm01z"])
        await run.wait_for_tokens(other, ["dm02z"])
        await run.settle()
        assert run.tokens_sent(chat, ["dm01z", "dm02z"]) == ["dm01z"], run.texts(chat)
        assert run.tokens_sent(other, ["dm01z", "dm02z"]) == ["dm02z"], run.texts(other)
        request = run.turn_for("dm01z")
        # The channel normalized the event: its name, the sender's id, the chat.
        assert f"channel: {adapter.channel_name}" in request.envelope, request.envelope
        assert f"user: {adapter.user_id(1)}" in request.envelope, request.envelope
        assert chat in request.session_key, request.session_key

    # 2
    @needs("redelivery")
    async def test_redelivered_update_is_answered_once(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        chat, user = adapter.direct_chat(1), adapter.user_id(1)
        await adapter.inject(chat, "once rd01z", sender_id=user)
        await run.wait_for_tokens(chat, ["rd01z"])
        await adapter.redeliver_last()
        # A later message in the same chat: once it is answered, the redelivered
        # event before it has been through the channel too.
        await adapter.inject(chat, "after rd02z", sender_id=user)
        await run.wait_for_tokens(chat, ["rd02z"])
        await run.settle()
        assert run.tokens_sent(chat, ["rd01z", "rd02z"]) == ["rd01z", "rd02z"], run.texts(chat)
        assert sum("rd01z" in text for text in run.agent_texts()) == 1, run.agent_texts()

    # 3
    async def test_long_reply_arrives_in_order_in_several_messages(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        chat = adapter.direct_chat(1)
        limit = run.text_limit
        reply = long_text(limit)
        words = reply.split()
        run.replies["lr01z"] = reply
        await adapter.inject(chat, "tell me everything lr01z", sender_id=adapter.user_id(1))
        await run.wait(lambda: sum(len(t.split()) for t in run.texts(chat)) >= len(words),
                       what=f"{len(words)} words of a long reply in chat {chat}",
                       state=lambda: [len(t) for t in run.texts(chat)])
        await run.settle()
        texts = run.texts(chat)
        assert len(texts) >= math.ceil(len(reply) / limit), [len(t) for t in texts]
        assert all(len(text) <= limit for text in texts), [len(t) for t in texts]
        sent_words = " ".join(texts).split()
        assert sent_words == words, (
            f"the reply arrived changed: first difference at word "
            f"{next((i for i, (a, b) in enumerate(zip(sent_words, words)) if a != b), None)}"
            f", {len(sent_words)} words sent of {len(words)}")

    # 4
    async def test_two_chats_answered_concurrently_keep_their_own_order(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        chats = {"a": adapter.direct_chat(1), "b": adapter.direct_chat(2)}
        users = {"a": adapter.user_id(1), "b": adapter.user_id(2)}
        tokens = {key: [f"o{key}{n:02d}z" for n in range(1, 4)] for key in chats}
        run.agent.gate = anyio.Event()  # hold the first turns: both chats run at once
        for n in range(3):
            for key in chats:
                await adapter.inject(chats[key], f"message {tokens[key][n]}",
                                     sender_id=users[key])
        await run.wait(lambda: run.agent.running >= 2,
                       what="a turn running in each chat at the same time",
                       state=lambda: run.agent_texts())
        run.agent.gate.set()
        everything = tokens["a"] + tokens["b"]
        for key in chats:
            await run.wait_for_tokens(chats[key], tokens[key])
        await run.settle()
        for key in chats:
            assert run.tokens_sent(chats[key], everything) == tokens[key], run.texts(chats[key])

    # 5
    async def test_unknown_sender_is_refused_with_their_id(self, platform_adapter, tmp_path):
        adapter = platform_adapter
        stranger, friend = adapter.user_id(1), adapter.user_id(2)
        async with self.contract_run(adapter, tmp_path / "kernel", allow_from=[friend],
                                     account_settings={"dm_policy": "allowlist"}) as run:
            await adapter.inject(adapter.direct_chat(1), "let me in us01z", sender_id=stranger)
            await run.wait(lambda: any(stranger in t for t in run.texts(adapter.direct_chat(1))),
                           what=f"a refusal naming {stranger!r}",
                           state=lambda: run.texts(adapter.direct_chat(1)))
            # The allowlist matches the ids the channel reports: a listed sender gets in.
            await adapter.inject(adapter.direct_chat(2), "hello us02z", sender_id=friend)
            await run.wait_for_tokens(adapter.direct_chat(2), ["us02z"])
            await run.settle()
            refused = run.texts(adapter.direct_chat(1))
            assert len(refused) == 1 and "us01z" not in refused[0], refused
            assert not any("us01z" in text for text in run.agent_texts()), run.agent_texts()

    # 5b
    async def test_a_stranger_pairs_with_a_code_the_owner_approves(self, platform_adapter,
                                                                   tmp_path):
        """Under ``dm_policy = "pairing"`` (the default): a stranger gets one reply with
        a code and never reaches the agent; the code is sent again at most once a minute;
        three strangers at most are pending, a fourth gets nothing; once approved, the
        sender is told so and gets in, and a revoked one is out again."""
        from chatkernel.testing.clock import ManualClock

        adapter, clock = platform_adapter, ManualClock()
        owner = adapter.user_id(9)
        async with self.contract_run(adapter, tmp_path / "kernel", allow_from=[owner],
                                     account_settings={"dm_policy": "pairing"},
                                     channel_clock=clock) as run:
            chats = [adapter.direct_chat(n) for n in (1, 2, 3, 4)]
            users = [adapter.user_id(n) for n in (1, 2, 3, 4)]
            for n, (chat, user) in enumerate(zip(chats[:3], users), 1):
                await adapter.inject(chat, f"let me in pa0{n}z", sender_id=user)
                await run.wait(lambda: run.texts(chat), what=f"a pairing code for {user}",
                               state=lambda: [run.texts(chat) for chat in chats])
            await adapter.inject(chats[3], "me too pa04z", sender_id=users[3])
            await adapter.inject(chats[0], "again pa05z", sender_id=users[0])
            # Both within the minute: what they did not cause is seen once they are in.
            await run.wait_delivered(["pa04z", "pa05z"])
            await run.settle()
            assert run.texts(chats[3]) == [], run.texts(chats[3])  # the fourth: nothing
            assert len(run.texts(chats[0])) == 1, run.texts(chats[0])  # not twice a minute
            requests = {r.sender: r for r in await run.harness.pairing_requests()}
            assert sorted(requests) == sorted(users[:3]), requests
            code = requests[users[0]].code
            assert code in run.texts(chats[0])[0], run.texts(chats[0])
            assert not any("pa0" in text for text in run.agent_texts()), run.agent_texts()
            clock.advance(60)
            await adapter.inject(chats[0], "still here pa06z", sender_id=users[0])

            def with_time_going_on(done: Callable[[], bool]) -> Callable[[], bool]:
                """A socket closed for the minute's silence (on this clock) reconnects
                after a backoff on it too: time goes on while the test waits."""
                def check() -> bool:
                    if done():
                        return True
                    clock.advance(1)
                    return False
                return check

            await run.wait(with_time_going_on(lambda: len(run.texts(chats[0])) == 2),
                           what="the same code, a minute later",
                           state=lambda: run.texts(chats[0]))
            assert code in run.texts(chats[0])[1], run.texts(chats[0])
            await run.harness.pairing_approve(adapter.channel_name, code)
            await run.wait(with_time_going_on(
                lambda: any("You're in" in t for t in run.texts(chats[0]))),
                what="the approved sender told so", state=lambda: run.texts(chats[0]))
            await adapter.inject(chats[0], "hello pa07z", sender_id=users[0])
            await run.wait(with_time_going_on(
                lambda: bool(run.tokens_sent(chats[0], ["pa07z"]))),
                what="the approved sender answered", state=lambda: run.texts(chats[0]))
            await run.harness.pairing_revoke(adapter.channel_name, users[0])
            await adapter.inject(chats[0], "and now pa08z", sender_id=users[0])
            await run.wait(with_time_going_on(lambda: bool(run.delivered(["pa08z"]))),
                           what="the revoked sender's message delivered",
                           state=lambda: [m.text for m, _ in run.deliveries])
            await run.settle()
            assert not any(t in text for text in run.agent_texts()
                           for t in ("pa01z", "pa05z", "pa06z", "pa08z")), run.agent_texts()

    # 6
    @needs("groups")
    async def test_group_message_is_answered_only_when_it_mentions_the_bot(
            self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        group, user = adapter.group_chat(1), adapter.user_id(1)
        await adapter.inject(group, "just chatting gr01z", sender_id=user, group=True)
        await adapter.inject(group, "bot, answer gr02z", sender_id=user, group=True,
                             mention=True)
        await run.wait_for_tokens(group, ["gr02z"])
        await run.settle()
        assert run.tokens_sent(group, ["gr01z", "gr02z"]) == ["gr02z"], run.texts(group)
        assert not any("gr01z" in text for text in run.agent_texts()), run.agent_texts()
        request = run.turn_for("gr02z")
        assert f"group: {group}" in request.envelope, request.envelope

    # 6b
    @needs("groups")
    async def test_groups_follow_the_group_policy(self, platform_adapter, tmp_path):
        """A group not admitted gets no reply and no pairing code, even when the bot is
        mentioned; a group listed as ``chat:<id>`` is answered when mentioned, by those
        ``group_allow_from`` names."""
        adapter = platform_adapter
        self.require(adapter, "groups")
        listed, other = adapter.group_chat(1), adapter.group_chat(2)
        boss, intern = adapter.user_id(1), adapter.user_id(2)
        async with self.contract_run(adapter, tmp_path / "kernel",
                                     allow_from=[f"chat:{listed}"],
                                     account_settings={"group_allow_from": [boss]}) as run:
            await adapter.inject(other, "anyone gp01z", sender_id=boss, group=True,
                                 mention=True)
            await adapter.inject(listed, "me gp02z", sender_id=intern, group=True,
                                 mention=True)
            await adapter.inject(listed, "no mention gp03z", sender_id=boss, group=True)
            await adapter.inject(listed, "answer gp04z", sender_id=boss, group=True,
                                 mention=True)
            await run.wait_for_tokens(listed, ["gp04z"])
            await run.settle()
            assert run.texts(other) == [], run.texts(other)
            assert run.tokens_sent(listed, ["gp02z", "gp03z", "gp04z"]) == ["gp04z"], \
                run.texts(listed)
            assert await run.harness.pairing_requests() == []
            assert not any(t in text for text in run.agent_texts()
                           for t in ("gp01z", "gp02z", "gp03z")), run.agent_texts()
        async with self.contract_run(adapter, tmp_path / "open", allow_from=[],
                                     account_settings={"group_policy": "open"}) as run:
            await adapter.inject(other, "open gp05z", sender_id=intern, group=True,
                                 mention=True)
            await run.wait_for_tokens(other, ["gp05z"])

    # 7
    @needs("threads")
    async def test_thread_message_is_answered_in_its_thread(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        group = adapter.supports_groups
        chat = adapter.group_chat(1) if group else adapter.direct_chat(1)
        first, second = adapter.thread_id(1), adapter.thread_id(2)
        for thread, token in ((first, "th01z"), (second, "th02z")):
            await adapter.inject(chat, f"in a thread {token}", sender_id=adapter.user_id(1),
                                 group=group, mention=group, thread_id=thread)
        await run.wait_for_tokens(chat, ["th01z"], thread_id=first)
        await run.wait_for_tokens(chat, ["th02z"], thread_id=second)
        await run.settle()
        both = ["th01z", "th02z"]
        assert run.tokens_sent(chat, both, thread_id=first) == ["th01z"], \
            run.texts(chat, thread_id=first)
        assert run.tokens_sent(chat, both, thread_id=second) == ["th02z"], \
            run.texts(chat, thread_id=second)

    # 8
    @needs("media_out")
    async def test_media_marker_sends_a_file_of_the_right_kind(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        chat = adapter.direct_chat(1)
        folder = run.harness.workspace / "contract-media"
        folder.mkdir(parents=True, exist_ok=True)
        picture, notes = folder / "picture.png", folder / "notes.txt"
        picture.write_bytes(png_bytes())
        notes.write_text("contract notes\n")
        run.replies["md01z"] = (f"the files md01z\nMEDIA: {picture}\nand the notes md02z\n"
                                f"MEDIA: {notes}")
        await adapter.inject(chat, "send me the files md01z", sender_id=adapter.user_id(1))
        await run.wait(lambda: len(adapter.sent_media(chat)) >= 2,
                       what=f"two files sent to chat {chat}",
                       state=lambda: (adapter.sent_media(chat), run.texts(chat)))
        await run.wait_for_tokens(chat, ["md01z", "md02z"])
        await run.settle()
        limits = run.channel.limits
        expected = [(limits.media_kind(picture), "picture.png"),
                    (limits.media_kind(notes), "notes.txt")]
        sent = adapter.sent_media(chat)
        assert [kind for kind, _ in sent] == [kind for kind, _ in expected], sent
        for (_, name), (_, wanted) in zip(sent, expected):
            assert name is None or name == wanted, sent
        texts = run.texts(chat)
        assert not any("MEDIA:" in text or "upload failed" in text for text in texts), texts

    # 9
    async def test_probe_reports_ok_with_a_latency(self, contract_kernel):
        run = contract_kernel
        result = await run.probe()
        assert result.ok, result
        assert isinstance(result.latency_ms, (int, float)) and result.latency_ms >= 0, result
        assert run.account.runtime.last_probe is result  # what `chatkernel health` shows

    @needs("revoke")
    async def test_probe_reports_refused_credentials_without_raising(self, contract_kernel):
        run = contract_kernel
        await run.adapter.revoke_credentials()
        result = await run.probe()
        assert not result.ok and result.detail, result
        # The channel's probe answered: it neither raised nor ran out of time.
        assert not result.detail.startswith("the probe failed"), result
        assert not result.extra.get("timed_out"), result

    # 10
    @needs("typing")
    async def test_typing_indicator_reaches_the_platform_while_a_turn_runs(
            self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        chat = adapter.direct_chat(1)
        run.agent.gate = anyio.Event()
        await adapter.inject(chat, "think about it ty01z", sender_id=adapter.user_id(1))
        await run.wait(lambda: run.agent.running == 1, what="the turn to start")
        await run.wait(lambda: adapter.typing_count(chat) >= 1,
                       what=f"a typing indicator in chat {chat} while the turn runs",
                       state=lambda: adapter.typing_count(chat))
        assert run.texts(chat) == [], f"sent before the turn ended: {run.texts(chat)}"
        run.agent.gate.set()
        await run.wait_for_tokens(chat, ["ty01z"])

    # 11
    async def test_restart_loses_nothing_and_answers_nothing_twice(self, platform_adapter,
                                                                   tmp_path):
        adapter = platform_adapter
        chat, user = adapter.direct_chat(1), adapter.user_id(1)
        home = tmp_path / "kernel"
        tokens = ["rs01z", "rs02z", "rs03z", "rs04z"]
        async with self.contract_run(adapter, home) as run:
            await adapter.inject(chat, "before rs01z", sender_id=user)
            await run.wait_for_tokens(chat, tokens[:1])
            await run.stop_loop()  # the loop stops; the kernel stays up
            await adapter.inject(chat, "while stopped rs02z", sender_id=user)
            await run.start_loop()
            await run.wait_for_tokens(chat, tokens[:2])
            await run.settle()
            again = [m.text for m, outcome in run.deliveries if outcome == "duplicate"]
        # The whole gateway was down: a fresh kernel on the same store.
        await adapter.inject(chat, "while down rs03z", sender_id=user)
        async with self.contract_run(adapter, home) as run:
            await run.wait_for_tokens(chat, tokens[:3])
            await adapter.inject(chat, "after rs04z", sender_id=user)
            await run.wait_for_tokens(chat, tokens)
            await run.settle()
            again += [m.text for m, outcome in run.deliveries if outcome == "duplicate"]
        assert run.tokens_sent(chat, tokens) == tokens, run.texts(chat)
        # The cursor was saved: the fresh loop did not fetch answered messages again.
        assert again == [], f"the restarted loop delivered old messages again: {again}"

    # 12
    async def test_crash_during_delivery_loses_nothing(self, platform_adapter, tmp_path):
        adapter = platform_adapter
        chat, user = adapter.direct_chat(1), adapter.user_id(1)
        home = tmp_path / "kernel"
        tokens = ["cr01z", "cr02z", "cr03z"]
        async with self.contract_run(adapter, home) as run:
            await adapter.inject(chat, "before cr01z", sender_id=user)
            await run.wait_for_tokens(chat, tokens[:1])
            run.crash_before_delivering("cr02z")
            await adapter.inject(chat, "during cr02z", sender_id=user)
            await run.wait(lambda: run.crashed, what="the delivery of cr02z")
        # A platform cursor advanced before the kernel had the message loses it now.
        await adapter.inject(chat, "after cr03z", sender_id=user)
        async with self.contract_run(adapter, home) as run:
            await run.wait_for_tokens(chat, tokens)
            await run.settle()
        assert run.tokens_sent(chat, tokens) == tokens, run.texts(chat)

    # 13
    async def test_status_is_answered_without_the_agent(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        chat = adapter.direct_chat(1)
        await adapter.inject(chat, "/status", sender_id=adapter.user_id(1))
        await run.wait(lambda: len(run.texts(chat)) >= 1, what=f"a /status answer in {chat}",
                       state=lambda: run.texts(chat))
        await run.settle()
        answers = run.texts(chat)
        assert len(answers) == 1, answers
        answer = answers[0]
        assert adapter.channel_name in answer and not answer.startswith("re:"), answer
        assert run.agent.requests == [], run.agent_texts()

    # 14
    @needs("own_messages")
    async def test_the_bots_own_messages_are_ignored(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        chat, user = adapter.direct_chat(1), adapter.user_id(1)
        await adapter.inject_own_message(chat, "my own words om01z")
        # Once the message after it is answered, the bot's own went through too.
        await adapter.inject(chat, "after om02z", sender_id=user)
        await run.wait_for_tokens(chat, ["om02z"])
        await run.settle()
        assert run.tokens_sent(chat, ["om01z", "om02z"]) == ["om02z"], run.texts(chat)
        assert not any("om01z" in text for text in run.agent_texts()), run.agent_texts()

    # 15
    @needs("non_message_events")
    async def test_events_that_are_not_messages_are_ignored(self, contract_kernel):
        run = contract_kernel
        adapter = run.adapter
        kinds = adapter.non_message_events
        assert kinds, (f"{type(adapter).__name__}: name the events in non_message_events, "
                       "or set supports_non_message_events = False")
        chat, user = adapter.direct_chat(1), adapter.user_id(1)
        for n, kind in enumerate(kinds, 1):
            await adapter.inject_non_message_event(kind, chat, sender_id=user,
                                                   text=f"not a message ne{n:02d}z")
        await adapter.inject(chat, "after nm00z", sender_id=user)
        await run.wait_for_tokens(chat, ["nm00z"])
        await run.settle()
        assert len(run.agent.requests) == 1 and "nm00z" in run.agent_texts()[0], \
            f"turns for {kinds}: {run.agent_texts()}"
        assert len(run.texts(chat)) == 1, run.texts(chat)

    # 16
    @needs("chat_refusal")
    async def test_a_chat_refusing_the_bot_fails_that_send_and_the_account_stays_healthy(
            self, contract_kernel):
        import aiohttp

        run = contract_kernel
        adapter = run.adapter
        refused = adapter.direct_chat(1)
        await adapter.refuse_chat(refused)
        await adapter.inject(refused, "hello cr01z", sender_id=adapter.user_id(1))
        runtime = run.account.runtime
        await run.wait(lambda: any(refused in failure.session_key
                                   for failure in runtime.recent_failures),
                       what=f"the refused send to {refused} recorded as failed",
                       state=lambda: list(runtime.recent_failures))
        # No other send has gone out since to turn it green: the refusal alone decides.
        failure = next(f for f in runtime.recent_failures if refused in f.session_key)
        assert failure.status == "failed" and failure.why == "platform", failure
        snapshot = await run.health.snapshot()
        assert runtime.send_failing_since is None, runtime.last_send_error
        assert snapshot.ok, snapshot.problems
        async with aiohttp.ClientSession() as http, \
                http.get(f"{run.url}/healthz") as answer:
            body = await answer.json()
            assert answer.status == 200, body

    # live replies
    async def test_a_streaming_agents_answer_arrives_whole_once(self, contract_kernel):
        """Whatever the channel shows while the agent writes (live replies, or nothing),
        a streamed answer arrives whole, once, in order."""
        run = contract_kernel
        adapter = run.adapter
        chat = adapter.direct_chat(1)
        reply = long_text(run.text_limit, 1.5)
        words = reply.split()

        def script(request: Any) -> list[AgentEvent]:
            pieces = [reply[n:n + 50] for n in range(0, len(reply), 50)]
            return [*(AgentEvent("text", piece, final=False) for piece in pieces),
                    AgentEvent.reply(reply)]

        run.agent.script = script
        await adapter.inject(chat, "stream it sa01z", sender_id=adapter.user_id(1))
        await run.wait(lambda: len(" ".join(run.texts(chat)).split()) >= len(words),
                       what="the whole answer", state=lambda: run.texts(chat))
        await run.settle()
        assert " ".join(run.texts(chat)).split() == words, [len(t) for t in run.texts(chat)]

    async def test_a_live_reply_shows_its_progress_then_the_whole_answer_once(
            self, platform_adapter, tmp_path):
        from chatkernel.sdk.live import LiveReplies

        from chatkernel.sdk.errors import ConfigError

        adapter = platform_adapter
        self.require(adapter, "live_replies")
        settings = {"streaming": "on", "streaming_interval_ms": 100}
        try:
            opened = self.contract_run(adapter, tmp_path / "kernel", channel_settings=settings)
            run = await opened.__aenter__()
        except ConfigError as exc:
            # A channel without live replies refuses the setting, saying so.
            assert exc.key == f"channels.{adapter.channel_name}.streaming", exc
            assert "cannot show a reply while it is written" in str(exc), exc
            return
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_exit(opened)
            chat = adapter.direct_chat(1)
            reply = long_text(run.text_limit, 1.5)
            words = reply.split()
            cut = [len(reply) * n // 6 for n in range(7)]
            pieces = [reply[a:b] for a, b in zip(cut, cut[1:])]

            def shown() -> list[str]:  # while it is written, a state may still be the last
                return [text for _, text in adapter.live_timeline(chat)]

            async def script(request: Any) -> AsyncIterator[AgentEvent]:
                for piece in pieces:
                    yield AgentEvent("text", piece, final=False)
                    # The next piece once this one is visible: the updates are seen.
                    last = piece.split()[-1] if piece.split() else ""
                    await run.wait(lambda: any(last in text for text in shown()),
                                   what=f"a preview showing {last!r}", state=shown)
                yield AgentEvent.reply(reply)

            run.agent.script = script
            await adapter.inject(chat, "stream it lv01z", sender_id=adapter.user_id(1))

            def finals() -> list[str]:
                return [text for kind, text in adapter.live_timeline(chat) if kind == "final"]

            await run.wait(lambda: len(" ".join(finals()).split()) >= len(words),
                           what="the whole answer delivered", state=finals)
            await run.settle()
            timeline = adapter.live_timeline(chat)
            kinds = [kind for kind, _ in timeline]
            first_final = kinds.index("final")
            last_final = len(kinds) - 1 - kinds[::-1].index("final")
            assert kinds[:first_final].count("preview") >= 3, timeline
            assert "preview" not in kinds[last_final:], "an update came after the answer"
            sent = " ".join(finals()).split()
            assert sent == words, (
                f"the answer arrived changed or twice: {len(sent)} words of {len(words)}, "
                f"first difference at word "
                f"{next((i for i, (a, b) in enumerate(zip(sent, words)) if a != b), None)}")
            assert all(len(text) <= run.text_limit for text in finals()), \
                [len(text) for text in finals()]
