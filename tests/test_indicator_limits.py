"""Typing indicators under the platform's limits (chatkernel.core.turns.indicators): an
indicator call is made only when its window (``ChannelLimits.indicator_rates``) has a
free slot, and not while the turn's reply is already on its way; skipped ones are tried
again while the turn runs. A channel that declares no such limits is not paced, and its
indicator (WhatsApp's also marks the message read) is made whatever the outbox holds.
Virtual time: the clock moves only when the test says."""

from __future__ import annotations

from types import SimpleNamespace

import anyio
import pytest

from chatkernel.core.turns.indicators import Indicators
from chatkernel.sdk.channel import ChannelLimits, RateLimit
from chatkernel.sdk.models import Route
from chatkernel.sdk.channel import ReadReceipts
from chatkernel.testing import wait_until
from chatkernel.testing.clock import ManualClock

pytestmark = pytest.mark.anyio


class RecordingChannel:
    """A channel whose indicator records the (virtual) time and chat of every call."""

    def __init__(self, limits: ChannelLimits, clock: ManualClock) -> None:
        self.limits = limits
        self.clock = clock
        self.calls: list[tuple[float, str]] = []
        self.called = anyio.Event()

    async def indicate(self, route: Route) -> None:
        self.calls.append((self.clock.now(), route.chat_id))
        self.called.set()

    async def next_call(self) -> tuple[float, str]:
        """The next call, however long the refresher takes (bounded)."""
        seen = len(self.calls)
        with anyio.fail_after(10):
            while len(self.calls) == seen:
                self.called = anyio.Event()
                await self.called.wait()
        return self.calls[seen]


def routes(key: str) -> Route:
    return Route(channel="test", account="main", chat_id=key.rpartition(":")[2])


async def route(key: str) -> Route:
    """The session's route, as the kernel looks it up for the refresher."""
    return routes(key)


async def test_an_indicator_waits_for_a_free_slot_in_its_window_and_never_goes_over():
    clock = ManualClock()
    start = clock.now()
    channel = RecordingChannel(ChannelLimits(indicator_interval=600.0, indicator_rates={
        "account": RateLimit(1, 60.0)}), clock)
    account = SimpleNamespace(key="test:main", channel=channel)
    indicators = Indicators(route, clock=clock.now)
    async with anyio.create_task_group() as tg:
        tg.start_soon(indicators.run)
        indicators.begin(account, "test:main:chat-a")
        indicators.begin(account, "test:main:chat-b")
        first = await channel.next_call()
        clock.advance(59.0)  # still within the window of the first call
        clock.advance(1.0)   # the slot is free again: the other turn's indicator goes
        second = await channel.next_call()
        tg.cancel_scope.cancel()
    assert first[0] == start
    assert second[0] >= start + 60.0, "the second call went before the window allowed it"
    assert {first[1], second[1]} == {"chat-a", "chat-b"}


async def test_no_indicator_while_the_reply_is_on_its_way_and_again_once_it_is_sent():
    clock = ManualClock()
    channel = RecordingChannel(ChannelLimits(indicator_interval=600.0, indicator_rates={
        "account": RateLimit(100, 1.0)}), clock)
    account = SimpleNamespace(key="test:main", channel=channel)
    replying = {"test:main:chat-a"}
    indicators = Indicators(route, clock=clock.now, replying=replying.__contains__)
    async with anyio.create_task_group() as tg:
        tg.start_soon(indicators.run)
        indicators.begin(account, "test:main:chat-a")
        indicators.begin(account, "test:main:chat-b")
        other = await channel.next_call()  # chat-b has no reply under way
        clock.advance(5.0)
        sent_at = clock.now()
        replying.clear()  # chat-a's reply was sent; its turn goes on
        clock.advance(1.0)
        again = await channel.next_call()
        tg.cancel_scope.cancel()
    assert other[1] == "chat-b"
    assert again[1] == "chat-a" and again[0] >= sent_at


async def test_an_unlimited_indicator_is_made_even_while_a_reply_is_on_its_way():
    clock = ManualClock()
    channel = RecordingChannel(ChannelLimits(indicator_interval=600.0), clock)
    account = SimpleNamespace(key="test:main", channel=channel)
    indicators = Indicators(route, clock=clock.now, replying=lambda key: True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(indicators.run)
        indicators.begin(account, "test:main:chat-a")
        call = await channel.next_call()
        tg.cancel_scope.cancel()
    assert call == (clock.now(), "chat-a")


def delayed_and_prompt(clock: ManualClock) -> tuple[RecordingChannel, RecordingChannel,
                                                   SimpleNamespace, SimpleNamespace]:
    """A channel with a 0.5 s ``indicator_delay`` and one without, and an account of each
    (``test:slow``, ``test:quick``)."""
    delayed = RecordingChannel(ChannelLimits(indicator_interval=600.0, indicator_delay=0.5),
                               clock)
    prompt = RecordingChannel(ChannelLimits(indicator_interval=600.0), clock)
    return (delayed, prompt, SimpleNamespace(key="test:slow", channel=delayed),
            SimpleNamespace(key="test:quick", channel=prompt))


async def test_a_turn_that_ends_within_the_indicator_delay_shows_none_a_longer_one_does():
    """Issue 31: a channel's ``indicator_delay`` holds a turn's first call back; a turn
    that replied sooner costs no call (its reply would end the indicator at once). A
    channel without a delay, beside it, shows when the refresher went through."""
    clock = ManualClock()
    start = clock.now()
    delayed, prompt, slow, quick = delayed_and_prompt(clock)
    indicators = Indicators(route, clock=clock.now)
    async with anyio.create_task_group() as tg:
        tg.start_soon(indicators.run)
        indicators.begin(slow, "test:slow:replies-soon")
        indicators.begin(slow, "test:slow:thinks")
        indicators.begin(quick, "test:quick:witness")
        assert await prompt.next_call() == (start, "witness")  # a pass at the start
        clock.advance(0.3)
        indicators.end("test:slow:replies-soon")  # its reply went out within the delay
        clock.advance(0.2)
        call = await delayed.next_call()
        tg.cancel_scope.cancel()
    assert call == (start + 0.5, "thinks")
    assert delayed.calls == [call], "an indicator went before the delay"


async def test_the_messages_waiting_in_one_session_make_one_indicator_call_and_a_turn_none():
    """Issue 31: a burst of messages waiting for their session's turn shows the indicator
    once (each message asked for it before); a session whose turn started before the
    refresher came to its waiting message leaves it to the turn's own indicator."""
    clock = ManualClock()
    channel = RecordingChannel(ChannelLimits(indicator_interval=600.0), clock)
    account = SimpleNamespace(key="test:main", channel=channel)
    indicators = Indicators(route, clock=clock.now)
    async with anyio.create_task_group() as tg:
        tg.start_soon(indicators.run)
        for _ in range(3):
            indicators.once(account, routes("test:main:burst"), "test:main:burst")
        indicators.once(account, routes("test:main:started"), "test:main:started")
        indicators.begin(account, "test:main:started")  # its turn began meanwhile
        indicators.once(account, routes("test:main:witness"), "test:main:witness")
        while not {"witness", "started"} <= {chat for _, chat in channel.calls}:
            await channel.next_call()
        tg.cancel_scope.cancel()
    assert sorted(chat for _, chat in channel.calls) == ["burst", "started", "witness"]


class ReadMarkingChannel(RecordingChannel, ReadReceipts):
    """A channel whose indicator also marks the messages read (WhatsApp's), with the read
    mark alone as :meth:`mark_read`: both kinds of call are recorded, in order."""

    def __init__(self, limits: ChannelLimits, clock: ManualClock) -> None:
        super().__init__(limits, clock)
        self.log: list[tuple[str, float, str]] = []

    async def indicate(self, route: Route) -> None:
        self.log.append(("typing", self.clock.now(), route.chat_id))
        await super().indicate(route)

    async def mark_read(self, route: Route) -> None:
        self.log.append(("read", self.clock.now(), route.chat_id))
        self.calls.append((self.clock.now(), route.chat_id))
        self.called.set()


async def test_quick_turns_mark_their_messages_read_in_one_call_when_the_indicator_was_due():
    """Issue 31: where the indicator also marks the messages read (WhatsApp), a turn that
    replied within ``indicator_delay`` leaves a read mark due when its indicator would
    have been: the session's quick turns within it make one call, without typing. A turn
    still running then shows typing; one whose reply is on its way by then is only marked
    read. A quick turn after that window starts a new one. Virtual time throughout."""
    clock = ManualClock()
    start = clock.now()
    channel = ReadMarkingChannel(ChannelLimits(indicator_interval=600.0,
                                               indicator_delay=0.5), clock)
    account = SimpleNamespace(key="test:main", channel=channel)
    replying = set()
    indicators = Indicators(route, clock=clock.now, replying=replying.__contains__,
                            sleep=clock.sleep)
    async with anyio.create_task_group() as tg:
        tg.start_soon(indicators.run)
        indicators.begin(account, "test:main:thinks")
        indicators.begin(account, "test:main:sending")
        for _ in range(3):  # three quick turns in one chat, 1/8 s apart (exact floats)
            indicators.begin(account, "test:main:burst")
            indicators.end("test:main:burst")
            clock.advance(0.125)
        replying.add("test:main:sending")  # its reply is queued, its turn not yet over
        clock.advance(0.125)
        while len(channel.log) < 3:
            await channel.next_call()
        first_window = sorted(channel.log)
        indicators.end("test:main:sending")
        indicators.begin(account, "test:main:burst")  # a quick turn after the window
        indicators.end("test:main:burst")
        await wait_until(lambda: clock.deadlines == [start + 1.0],
                         what="the refresher asleep until the new read mark")
        assert len(channel.log) == 3
        clock.advance(0.5)
        while len(channel.log) < 4:
            await channel.next_call()
        tg.cancel_scope.cancel()
    assert first_window == [("read", start + 0.5, "burst"), ("read", start + 0.5, "sending"),
                            ("typing", start + 0.5, "thinks")]
    assert channel.log[3] == ("read", start + 1.0, "burst")
    assert len(channel.log) == 4


async def test_a_turn_due_after_the_resting_refresher_wakes_is_served_then_without_waking_it():
    """Issue 31: a burst of turns on a channel with ``indicator_delay`` does not wake the
    refresher once a turn: one due after its own wake-up waits for it; one due sooner
    (a channel without the delay) wakes it. Each indicator is made at its own time."""
    clock = ManualClock()
    start = clock.now()
    delayed, prompt, slow, quick = delayed_and_prompt(clock)
    indicators = Indicators(route, clock=clock.now, sleep=clock.sleep)
    async with anyio.create_task_group() as tg:
        tg.start_soon(indicators.run)
        indicators.begin(slow, "test:slow:first")
        assert await clock.sleeper() == start + 0.5  # the refresher rests until then
        clock.advance(0.2)
        indicators.begin(slow, "test:slow:second")  # due at 0.7: after that wake-up
        assert not indicators._nudged, "a turn due later woke the refresher"
        indicators.begin(quick, "test:quick:now")  # due now: before it
        assert indicators._nudged
        assert await prompt.next_call() == (start + 0.2, "now")
        await clock.sleeper(after=start + 0.2)
        clock.advance(0.3)
        assert await delayed.next_call() == (start + 0.5, "first")
        await clock.sleeper(after=start + 0.5)
        clock.advance(0.2)
        assert await delayed.next_call() == (start + 0.7, "second")
        tg.cancel_scope.cancel()
    assert [chat for _, chat in delayed.calls] == ["first", "second"]
