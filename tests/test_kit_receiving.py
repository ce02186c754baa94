"""The channel kit's long-polling transport (``Polling``), on its own: a channel
whose polls the test scripts, in a real kernel. Identify with backoff, liveness,
problems reported and cleared, batches journaled before the cursor moves, the
bot's own and unreadable events skipped."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from chatkernel.channels import (
    Channel,
    ChannelLimits,
    InboundMessage,
    PlatformError,
    Polled,
    Polling,
    Trouble,
    hookimpl,
    refusal,
)
from chatkernel.testing import KernelHarness
from chatkernel.testing.clock import ManualClock
from chatkernel.testing.contract import wait_until

pytestmark = pytest.mark.anyio


class ScriptedPolls(Channel):
    """Each poll takes the next item the test sends: a Polled, or an exception to raise."""

    name = "scripted"
    limits = ChannelLimits()

    def __init__(self, account, context=None) -> None:
        super().__init__(account, context)
        self.identify_failures: list[Exception] = []
        self.polls_seen: list[str | None] = []
        self.problems: list[str | None] = []  # every report (a reason) and clear (None)
        self.send_script, self.script = anyio.create_memory_object_stream[Any](100)
        # Every problem the kit reports for the account, and every clear of one (None).
        report, clear = self.context.report_problem, self.context.clear_problem

        def reporting(reason, *, restartable=True):
            self.problems.append(reason)
            report(reason, restartable=restartable)

        def clearing():
            if self.account.runtime.problem is not None:
                self.problems.append(None)
            clear()

        self.context.report_problem, self.context.clear_problem = reporting, clearing

    def transport(self) -> "ScriptedPolling":
        return ScriptedPolling(self)

    async def identify(self) -> None:
        if self.identify_failures:
            raise self.identify_failures.pop(0)
        self.self_id = "bot"

    def receive_trouble(self, error):
        if isinstance(error, PlatformError) and error.status == 401:
            return Trouble("token rejected", wait=0.01, restartable=False)
        return super().receive_trouble(error)

    async def normalize(self, event: dict[str, Any]) -> InboundMessage | None:
        if event.get("kind") == "join":  # not a message
            return None
        return InboundMessage(channel=self.name, account=self.account.name,
                              chat_id=event["chat"], message_id=event["id"],
                              sender_id=event.get("from", "u1"), text=event["text"])



class ScriptedPolling(Polling):
    """Each poll takes the next item the test sends on the channel's script."""

    channel: ScriptedPolls
    backoff = (0.01, 0.02)

    async def poll(self, cursor):
        self.channel.polls_seen.append(cursor)
        item = await self.channel.script.receive()
        if isinstance(item, Exception):
            raise item
        return item

    def event_chat(self, event):
        return event.get("chat")

    def describe_event(self, event):
        return f"event {event.get('id')}"

    def event_id(self, event):
        return event.get("id")


class Plugin:
    @staticmethod
    @hookimpl
    def register_channels(register):
        register(ScriptedPolls)


class Recorder:
    """The kernel's receiver, recording what it was given; ``gate`` holds batches."""

    def __init__(self, receiver) -> None:
        self.receiver = receiver
        self.batches: list[list[str]] = []
        self.gate: anyio.Event | None = None
        self.held = 0  # batches waiting at the gate

    async def __call__(self, message):
        return (await self.many([message]))[0]

    async def many(self, messages):
        if self.gate is not None:
            self.held += 1
            await self.gate.wait()
        outcomes = await self.receiver.many(messages)
        self.batches.append([m.text for m in messages])
        return outcomes


async def until(predicate, what: str) -> None:
    await wait_until(predicate, timeout=5, what=what, interval=0.005)


def event(n: int, **extra: Any) -> dict[str, Any]:
    return {"chat": "c1", "id": f"m{n}", "text": f"text {n}", **extra}


@pytest.fixture
async def polling(tmp_path):
    config = {"channels": {"scripted": {"accounts": {"main": {"allow_from": ["*"]}}}}}
    async with KernelHarness(tmp_path, config=config, plugins=[("scripted", Plugin)]) as h:
        channel: ScriptedPolls = h.kernel.accounts["scripted:main"].channel
        recorder = Recorder(h.kernel.receiver)
        async with anyio.create_task_group() as tg:
            yield h, channel, recorder, tg
            tg.cancel_scope.cancel()


async def test_identify_is_retried_reported_and_then_the_loop_polls(polling):
    h, channel, recorder, tg = polling
    runtime = channel.account.runtime
    channel.identify_failures = [PlatformError("getMe: cannot connect", kind="not_sent")] * 3
    tg.start_soon(channel.account.transport.run, recorder)
    await until(lambda: channel.polls_seen, "the first poll")
    # One failure is not news; the second in a row is reported, with what failed.
    assert channel.problems[0] == "identify failed: getMe: cannot connect"
    assert "identify failed" in (runtime.last_error or "")
    assert channel.self_id == "bot" and channel.polls_seen == [None]
    await channel.send_script.send(Polled([]))
    await until(lambda: runtime.problem is None, "the problem cleared by an answered poll")
    assert channel.problems[-1] is None


async def test_an_answered_poll_even_empty_is_a_sign_of_life(polling):
    h, channel, recorder, tg = polling
    runtime = channel.account.runtime
    runtime.loop_started(0.0)
    tg.start_soon(channel.account.transport.run, recorder)
    await channel.send_script.send(Polled([]))
    await until(lambda: runtime.last_event_at is not None, "a sign of life")
    assert runtime.state == "running"


async def test_the_cursor_is_saved_only_once_the_batch_is_journaled(polling):
    h, channel, recorder, tg = polling
    recorder.gate = anyio.Event()
    tg.start_soon(channel.account.transport.run, recorder)
    await channel.send_script.send(Polled([event(1), event(2)], cursor="c-2"))
    await until(lambda: len(channel.polls_seen) == 1 and recorder.held, "the batch handed on")
    assert await channel.context.load_cursor() is None  # the journal does not have them yet
    recorder.gate.set()
    await until(lambda: recorder.batches, "the batch journaled")
    await until(lambda: len(channel.polls_seen) == 2, "the next poll")
    assert channel.polls_seen[1] == "c-2" and await channel.context.load_cursor() == "c-2"
    assert recorder.batches == [["text 1", "text 2"]]  # one durable write for the batch


async def test_own_messages_non_messages_and_unreadable_events_are_skipped(polling, caplog):
    h, channel, recorder, tg = polling
    tg.start_soon(channel.account.transport.run, recorder)
    await channel.send_script.send(Polled([
        event(1), event(2, **{"from": "bot"}), {"kind": "join", "chat": "c1"},
        {"id": "m3", "chat": "c1"},  # no text: normalize raises KeyError
        event(4)], cursor="c-4"))
    await until(lambda: len(channel.polls_seen) == 2, "the next poll")
    assert recorder.batches == [["text 1", "text 4"]]
    assert channel.polls_seen[1] == "c-4"  # the bad event does not come back forever
    assert "event m3 skipped, it is not a message this channel can read: KeyError" \
        in caplog.text
    # Journaled as refused, under its platform id: known if it comes again, never replayed.
    store = h.kernel.store
    assert await store.journal_inbound(InboundMessage(
        channel="scripted", account="main", chat_id="c1", message_id="unreadable:m3",
        sender_id="?")) is None
    assert [e.message.message_id for e in await store.unfinished_inbound()
            if e.message.message_id.startswith("unreadable")] == []


async def test_a_problem_is_reported_at_once_a_passing_failure_only_when_it_repeats(
        polling, caplog):
    caplog.set_level(logging.WARNING)
    h, channel, recorder, tg = polling
    runtime = channel.account.runtime
    tg.start_soon(channel.account.transport.run, recorder)
    await channel.send_script.send(PlatformError("Unauthorized", status=401))
    await until(lambda: runtime.problem is not None, "the problem")
    assert runtime.problem == "token rejected" and runtime.problem_restartable is False
    await channel.send_script.send(Polled([]))
    await until(lambda: runtime.problem is None, "the problem cleared")
    # A passing failure (the platform's 502) once: a warning, no problem.
    await channel.send_script.send(PlatformError("Bad Gateway", status=502))
    await channel.send_script.send(Polled([]))
    # At least: with both answers queued, the loop may already wait in its fifth poll.
    await until(lambda: len(channel.polls_seen) >= 4, "two more polls")
    assert channel.problems == ["token rejected", None]
    assert "poll failed: Bad Gateway" in caplog.text
    # Twice in a row: reported, and cleared by the next answer.
    await channel.send_script.send(PlatformError("Bad Gateway", status=502))
    await channel.send_script.send(PlatformError("Bad Gateway", status=502))
    await until(lambda: runtime.problem is not None, "a repeated failure reported")
    assert runtime.problem == "poll failed: Bad Gateway" and runtime.problem_restartable
    await channel.send_script.send(Polled([]))
    await until(lambda: runtime.problem is None, "cleared again")


async def test_the_default_trouble_knows_credentials_and_retry_after(polling):
    h, channel, recorder, tg = polling
    trouble = Channel.receive_trouble(channel, PlatformError("Forbidden", status=403))
    assert trouble.problem == "the platform refused the account's credentials (HTTP 403)"
    assert trouble.refused and trouble.restartable is False
    trouble = Channel.receive_trouble(channel, PlatformError("slow", status=429, retry_after=9))
    assert trouble.problem is None and trouble.wait == 9
    assert Channel.receive_trouble(channel, PlatformError("x", kind="not_sent")) == Trouble()


class Refusing(ScriptedPolls):
    """Its platform refuses the token at identify, as a 401 would."""

    name = "refusing"
    secret = "123:REFUSED-token-secret"

    def __init__(self, account, context=None) -> None:
        super().__init__(account, context)
        self.identify_calls = 0

    async def identify(self) -> None:
        self.identify_calls += 1
        await super().identify()

    def receive_trouble(self, error):
        if isinstance(error, PlatformError) and error.status == 401:
            return Trouble("the API refused the token (401 Unauthorized)", wait=1.0,
                           restartable=False, refused=True,
                           advice="get a new token and set it in "
                                  f"{self.account.config_key('token')}")
        return super().receive_trouble(error)


class RefusingPlugin:
    @staticmethod
    @hookimpl
    def register_channels(register):
        register(Refusing)


@pytest.fixture
async def refusing(tmp_path):
    config = {"channels": {"refusing": {"accounts": {"main": {"allow_from": ["*"]}}}}}
    async with KernelHarness(tmp_path, config=config, plugins=[("refusing", RefusingPlugin)]) \
            as h:
        channel: Refusing = h.kernel.accounts["refusing:main"].channel
        async with anyio.create_task_group() as tg:
            yield h, channel, Recorder(h.kernel.receiver), tg
            tg.cancel_scope.cancel()


EXPECTED_REFUSAL = ("the API refused the token (401 Unauthorized): get a new token and set it "
                    "in channels.refusing.accounts.main.token")


async def test_a_refused_identity_fails_the_account_with_what_to_do(refusing, caplog):
    h, channel, recorder, tg = refusing
    runtime = channel.account.runtime
    channel.identify_failures = [PlatformError(f"Unauthorized {Refusing.secret}", status=401)]
    runtime.loop_started(0.0)
    clock = ManualClock()  # the loop's waits on a clock that never moves here
    channel.context.clock = clock
    tg.start_soon(channel.account.transport.run, recorder)
    next_try = await clock.sleeper()  # the loop asleep until its next try
    assert runtime.state == "failed"
    assert runtime.detail == EXPECTED_REFUSAL
    assert runtime.problem == EXPECTED_REFUSAL and runtime.problem_restartable is False
    assert runtime.last_error == EXPECTED_REFUSAL
    assert refusal(channel, PlatformError("Unauthorized", status=401)) == EXPECTED_REFUSAL
    assert refusal(channel, PlatformError("Bad Gateway", status=502)) is None
    # What status and health show: failed, with the advice, never the token.
    snapshot = await h.kernel.health.snapshot()
    account = snapshot.channels["refusing"].accounts["main"]
    assert account.state == "failed" and not account.ok
    assert any(EXPECTED_REFUSAL in problem for problem in account.problems)
    assert Refusing.secret not in repr(snapshot)
    # `chatkernel status` and the /status page.
    from chatkernel.core.gateway.endpoints import render_status_page
    from chatkernel.core.health.report import render_status

    text = render_status(snapshot.model_dump(mode="json"))
    assert "refusing  main     failed" in text and EXPECTED_REFUSAL in text
    page = render_status_page(snapshot)
    assert "failed" in page and "get a new token and set it" in page
    # Not tried again in a tight loop: the next try waits a minute at least.
    assert next_try - clock.now() == 60
    assert channel.identify_calls == 1 and channel.polls_seen == []
    assert "trying again in 60s" in caplog.text


@pytest.mark.slow
async def test_a_refused_account_runs_again_once_its_identity_is_taken(refusing, monkeypatch):
    from chatkernel.sdk import receiving

    monkeypatch.setattr(receiving, "REFUSED_RETRY_SECONDS", 0.01)
    h, channel, recorder, tg = refusing
    runtime = channel.account.runtime
    channel.identify_failures = [PlatformError("Unauthorized", status=401)]
    runtime.loop_started(0.0)
    tg.start_soon(channel.account.transport.run, recorder)
    await until(lambda: channel.polls_seen, "the poll after a second identify")
    assert channel.identify_calls == 2
    assert runtime.state == "starting" and runtime.problem is None
    await channel.send_script.send(Polled([]))
    await until(lambda: runtime.state == "running", "running")


def test_refused_tries_slow_down_to_a_cap():
    from chatkernel.sdk.receiving import refused_delay

    trouble = Trouble("refused", wait=1.0, refused=True)
    assert [refused_delay(trouble, n) for n in (1, 2, 3, 4, 5, 10)] == \
        [60, 120, 240, 480, 900, 900]
    # A channel that knows a longer wait (an hour's pause) keeps it.
    assert refused_delay(Trouble("paused", wait=3600, refused=True), 1) == 3600
