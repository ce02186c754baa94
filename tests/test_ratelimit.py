"""The outbound rate limiter, on virtual time.

Every test runs the limiter with a fake clock and a fake sleep: no real
waiting. :class:`VirtualTime` is a tiny discrete-event scheduler: a sleeping
task registers its wake-up time, and :meth:`VirtualTime.drive` jumps the clock
to the earliest wake-up once every other task is blocked, so concurrent
senders see one consistent clock.

The limits are checked by an independent brute-force checker over the
recorded send times (every window that starts at a send), not by asking the
limiter about itself.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections import defaultdict
from collections.abc import Iterable

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatkernel.sdk.channel import ChannelLimits, RateLimit
from chatkernel.core.outbound.ratelimit import (
    DEFAULT_MARGIN,
    RateLimiter,
    SlidingWindow,
    parse_margin,
    parse_rate,
)

# -- virtual time ---------------------------------------------------------------------------


async def settle() -> None:
    """Return once every other task is blocked on something (or done).

    anyio's ``wait_all_tasks_blocked`` polls with real 0.1 s sleeps on asyncio;
    this yields instead, so thousands of steps stay fast.
    """
    this = asyncio.current_task()
    while True:
        await anyio.lowlevel.checkpoint()
        if all(task is this or task.done() or _waiting(task) for task in asyncio.all_tasks()):
            return


def _waiting(task: asyncio.Task) -> bool:
    """Whether a task is parked on a future that is not done (what anyio checks too)."""
    waiter = task._fut_waiter  # type: ignore[attr-defined]
    return waiter is not None and not waiter.done()


class VirtualTime:
    """A fake clock and a fake sleep that only moves when everyone is waiting."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self.sleeps: list[float] = []
        self._sleepers: list[tuple[float, int, anyio.Event]] = []
        self._seq = itertools.count()
        # The task that drives the clock; were it to sleep, nobody would wake it.
        self._driver = asyncio.current_task()

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        # Fail rather than hang for ever.
        assert asyncio.current_task() is not self._driver, (
            f"the driving task would sleep {seconds}s: run the acquire in a task")
        # A wait too short to move the clock would make the limiter spin for ever.
        assert self.now + seconds > self.now, f"a sleep of {seconds}s cannot move the clock"
        event = anyio.Event()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._seq), event))
        await event.wait()

    async def drive(self) -> None:
        """Advance the clock wake-up by wake-up until no task is left sleeping."""
        while True:
            await settle()
            if not self._sleepers:
                return
            self.now = max(self.now, self._sleepers[0][0])
            while self._sleepers and self._sleepers[0][0] <= self.now:
                heapq.heappop(self._sleepers)[2].set()


def limiter_on(vt: VirtualTime, rates: dict[str, RateLimit], margin: float = 0.0) -> RateLimiter:
    """A limiter on virtual time; no safety margin unless asked, so times are exact."""
    return RateLimiter(rates, margin=margin, clock=vt.clock, sleep=vt.sleep)


def widened(rates: dict[str, RateLimit], margin: float) -> dict[str, RateLimit]:
    """The limits the limiter actually enforces: every window ``margin`` longer."""
    return {scope: RateLimit(limit.count, limit.per + margin) for scope, limit in rates.items()}


async def run_concurrently(vt: VirtualTime, *jobs) -> None:
    """Run the job coroutines' functions as tasks while virtual time is driven.

    The real-time bound only catches a deadlock; no test relies on it.
    """
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for job in jobs:
                tg.start_soon(job)
            await vt.drive()


# -- the independent checker ------------------------------------------------------------------


def max_in_window(times: Iterable[float], per: float) -> int:
    """The most sends in any window ``[a, a + per)``, by brute force over the
    windows that start at a send (the fullest window always starts at one)."""
    ordered = sorted(times)
    return max((sum(1 for u in ordered if t <= u < t + per) for t in ordered), default=0)


def assert_within_limits(sends: list[tuple[float, str, bool]],
                         rates: dict[str, RateLimit]) -> None:
    """``sends`` are (time, chat_id, is_group); every scope's windows must hold."""
    scopes: dict[tuple[str, str], list[float]] = defaultdict(list)
    for at, chat, group in sends:
        scopes["account", ""].append(at)
        scopes["chat", chat].append(at)
        if group:
            scopes["group", chat].append(at)
    for (scope, key), times in scopes.items():
        limit = rates.get(scope)
        if limit is not None:
            worst = max_in_window(times, limit.per)
            assert worst <= limit.count, (
                f"{worst} sends in a {limit.per}s window for {scope} {key!r}, limit {limit.count}")


def earliest_allowed(history: list[tuple[float, str, bool]], chat: str, group: bool,
                     ready: float, rates: dict[str, RateLimit]) -> float:
    """The first time >= ``ready`` at which one more send keeps every limit (brute force).

    With only past sends, the answer is ``ready`` or one ``per`` after a past
    send, so trying those candidates in order is exhaustive.
    """
    candidates = {ready}
    for at, _, _ in history:
        for limit in rates.values():
            if at + limit.per > ready:
                candidates.add(at + limit.per)
    for candidate in sorted(candidates):
        trial = history + [(candidate, chat, group)]
        try:
            assert_within_limits(trial, rates)
        except AssertionError:
            continue
        return candidate
    raise AssertionError("no candidate time works")  # pragma: no cover


# -- strategies ---------------------------------------------------------------------------------

# Times and periods are multiples of 1/8, exact in binary floating point, so the
# expected send times can be compared exactly.
eighths = st.integers(0, 24).map(lambda n: n / 8)
periods = st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0])
margins = st.sampled_from([0.0, 0.125])


@st.composite
def rate_sets(draw) -> dict[str, RateLimit]:
    rates: dict[str, RateLimit] = {}
    if draw(st.booleans()):
        rates["account"] = RateLimit(draw(st.integers(1, 6)), draw(periods))
    if draw(st.booleans()):
        rates["chat"] = RateLimit(draw(st.integers(1, 3)), draw(periods))
    if draw(st.booleans()):
        rates["group"] = RateLimit(draw(st.integers(1, 4)), draw(st.sampled_from([2.0, 4.0, 6.0])))
    return rates


CHATS = ["g0", "g1", "c0", "c1", "c2"]  # g*: group chats


def is_group(chat: str) -> bool:
    return chat.startswith("g")


PROPERTY = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


# -- sliding window ----------------------------------------------------------------------------


def test_sliding_window_allows_count_then_waits_for_the_oldest() -> None:
    window = SlidingWindow(RateLimit(3, 1.0))
    for at in (0.0, 0.25, 0.5):
        assert window.delay(at) == 0
        window.record(at)
    assert window.delay(0.5) == 0.5  # the oldest (0.0) leaves at 1.0
    assert window.delay(0.75) == 0.25
    assert window.delay(1.0) == 0  # half-open: exactly ``per`` later is allowed
    window.record(1.0)
    assert window.delay(1.0) == 0.25  # now 0.25 is the oldest of the last three
    assert len(window) == 3  # only the last ``count`` times are kept


def test_sliding_window_is_not_a_token_bucket() -> None:
    """A full burst then nothing until the window moves: never 2N in the first second."""
    window = SlidingWindow(RateLimit(30, 1.0))
    sent = 0
    at = 0.0
    while at < 1.0:
        if window.delay(at) == 0:
            window.record(at)
            sent += 1
        at += 1 / 64
    assert sent == 30


def test_sliding_window_rejects_bad_limits() -> None:
    with pytest.raises(ValueError, match="count"):
        SlidingWindow(RateLimit(0, 1.0))
    with pytest.raises(ValueError, match="per"):
        SlidingWindow(RateLimit(1, 0))


# -- properties ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.anyio
@PROPERTY
@given(rates=rate_sets(), margin=margins,
       steps=st.lists(st.tuples(st.sampled_from(CHATS), eighths), min_size=1, max_size=40))
async def test_sequential_sends_keep_limits_and_never_wait_longer_than_needed(
        rates: dict[str, RateLimit], margin: float, steps: list[tuple[str, float]]) -> None:
    """One sender at a time: each send happens exactly at the earliest allowed moment.

    That is both halves of the contract: the limits (widened by the margin)
    hold in every window, and a sender is never delayed when a slot is free
    (nor longer than needed).
    """
    vt = VirtualTime()
    limiter = limiter_on(vt, rates, margin)
    enforced = widened(rates, margin)
    history: list[tuple[float, str, bool]] = []
    for chat, gap in steps:
        vt.now += gap
        ready = vt.now
        expected = earliest_allowed(history, chat, is_group(chat), ready, enforced)
        waited = await run_one(vt, limiter, chat)
        assert vt.now == expected
        assert waited == expected - ready
        if expected == ready:
            assert waited == 0
        history.append((vt.now, chat, is_group(chat)))
    assert_within_limits(history, enforced)
    assert_within_limits(history, rates)


async def run_one(vt: VirtualTime, limiter: RateLimiter, chat: str) -> float:
    result: list[float] = []

    async def job() -> None:
        result.append(await limiter.acquire(chat, is_group=is_group(chat)))

    await run_concurrently(vt, job)
    return result[0]


@pytest.mark.slow
@pytest.mark.anyio
@PROPERTY
@given(rates=rate_sets(), margin=margins,
       senders=st.lists(st.tuples(st.sampled_from(CHATS), eighths, st.integers(1, 4)),
                        min_size=1, max_size=12))
async def test_concurrent_senders_keep_every_limit(
        rates: dict[str, RateLimit], margin: float,
        senders: list[tuple[str, float, int]]) -> None:
    """Many tasks, several per chat, each sending a few messages: no window is ever exceeded."""
    vt = VirtualTime()
    limiter = limiter_on(vt, rates, margin)
    sends: list[tuple[float, str, bool]] = []
    expected = sum(n for _, _, n in senders)

    def sender(chat: str, start: float, messages: int):
        async def job() -> None:
            await vt.sleep(start)
            for _ in range(messages):
                ready = vt.now
                waited = await limiter.acquire(chat, is_group=is_group(chat))
                assert vt.now - ready == waited
                sends.append((vt.now, chat, is_group(chat)))
        return job

    await run_concurrently(vt, *(sender(*spec) for spec in senders))
    assert len(sends) == expected  # nobody starved or deadlocked
    assert_within_limits(sends, widened(rates, margin))


@pytest.mark.slow
@pytest.mark.anyio
@PROPERTY
@given(rates=rate_sets(),
       steps=st.lists(st.one_of(
           st.tuples(st.just("send"), st.sampled_from(CHATS), eighths),
           st.tuples(st.just("429"), st.sampled_from(CHATS + [None]), eighths)),
           min_size=1, max_size=30))
async def test_penalties_and_limits_together(rates: dict[str, RateLimit], steps) -> None:
    """With 429 blocks in the mix, a send happens at the earliest time both allow."""
    vt = VirtualTime()
    limiter = limiter_on(vt, rates)  # margin 0
    history: list[tuple[float, str, bool]] = []
    blocked: dict[str | None, float] = defaultdict(lambda: -math.inf)
    for kind, chat, amount in steps:
        if kind == "429":
            limiter.penalize(amount, chat)
            if amount > 0:
                blocked[chat] = max(blocked[chat], vt.now + amount)
            continue
        vt.now += amount
        ready = max(vt.now, blocked[None], blocked[chat])
        # A window that frees up before the block ends does not matter; one
        # after it does: the brute force starts from the block's end.
        expected = earliest_allowed(history, chat, is_group(chat), ready, rates)
        await run_one(vt, limiter, chat)
        assert vt.now == expected
        history.append((vt.now, chat, is_group(chat)))
    assert_within_limits(history, rates)


trips = st.integers(0, 12).map(lambda n: n / 8)  # 0 to 1.5 s, exact in binary


@pytest.mark.slow
@pytest.mark.anyio
@PROPERTY
@given(rates=rate_sets(),
       senders=st.lists(st.tuples(st.sampled_from(CHATS), eighths,
                                  st.lists(st.tuples(trips, trips), min_size=1, max_size=4)),
                        min_size=1, max_size=10))
async def test_held_sends_keep_every_limit_where_the_platform_counts_them(
        rates: dict[str, RateLimit], senders) -> None:
    """The platform counts a request when it arrives, somewhere between the moment it
    left and its answer. Each send is held from the first to the second: whatever the
    trips take (any mix, here up to 1.5 s each way), the arrivals keep every limit."""
    vt = VirtualTime()
    limiter = limiter_on(vt, rates)  # no margin: the hold alone must do it
    arrivals: list[tuple[float, str, bool]] = []
    expected = sum(len(sends) for _, _, sends in senders)

    def sender(chat: str, start: float, sends: list[tuple[float, float]]):
        async def job() -> None:
            group = is_group(chat)
            await vt.sleep(start)
            for there, back in sends:
                await limiter.acquire(chat, is_group=group, hold=True)
                await vt.sleep(there)
                arrivals.append((vt.now, chat, group))  # the platform counts it here
                await vt.sleep(back)
                limiter.release(chat, is_group=group)
        return job

    await run_concurrently(vt, *(sender(*spec) for spec in senders))
    assert len(arrivals) == expected  # nobody starved or deadlocked
    assert_within_limits(arrivals, rates)


@pytest.mark.anyio
async def test_sends_counted_when_they_leave_break_the_limit_when_trips_vary() -> None:
    """Why sends are held: counted when it left, the second send may go a window after
    the first left and still arrive within a window of it, when the first trip was slower."""
    vt = VirtualTime()
    limiter = limiter_on(vt, {"account": RateLimit(1, 1.0)})
    await limiter.acquire("a")  # leaves at 0, arrives at 0.5 (a slow trip)
    assert await run_one(vt, limiter, "b") == 1.0  # leaves at 1.0, arrives at once
    assert max_in_window([0.5, 1.0], 1.0) == 2  # the platform saw two within a second
    # Held until its answer (at 0.5 + the trip back, 0.25), the first send keeps the
    # second back until a window after that answer.
    vt = VirtualTime()
    limiter = limiter_on(vt, {"account": RateLimit(1, 1.0)})
    await limiter.acquire("a", hold=True)
    vt.now = 0.75
    limiter.release("a")
    assert await run_one(vt, limiter, "b") == 1.0
    assert vt.now == 1.75


@pytest.mark.anyio
async def test_a_held_slot_is_free_only_after_its_release_and_a_refused_one_at_once() -> None:
    vt = VirtualTime()
    limiter = limiter_on(vt, {"account": RateLimit(2, 1.0), "chat": RateLimit(1, 1.0)})
    assert limiter.try_acquire("a", hold=True)
    assert limiter.try_acquire("b", hold=True)
    assert limiter.delay("c") == math.inf  # every account slot is out
    sent: list[tuple[str, float]] = []

    async def job(chat: str) -> None:
        await limiter.acquire(chat, hold=True)
        sent.append((chat, vt.now))

    async with anyio.create_task_group() as tg:
        tg.start_soon(job, "c")
        await settle()
        vt.now = 5.0  # nothing moves while both are held, however long
        await settle()
        assert sent == []
        limiter.release("a", reached=False)  # never left: its slot is free at once
        await settle()
        assert sent == [("c", 5.0)]
        tg.start_soon(job, "d")
        await settle()
        vt.now = 6.0
        limiter.release("b")  # answered at 6: counts until 7
        await vt.drive()
    assert sent == [("c", 5.0), ("d", 7.0)]
    # The chat window holds a send the same way.
    limiter.release("c")
    assert limiter.delay("c") == pytest.approx(1.0)


@pytest.mark.anyio
async def test_sends_restored_after_a_restart_count_as_if_seen() -> None:
    vt = VirtualTime(start=100.0)
    limiter = limiter_on(vt, {"account": RateLimit(3, 1.0), "chat": RateLimit(1, 1.0),
                              "group": RateLimit(2, 60.0)})
    # Answered 0.25 s, 0.5 s and 0.75 s ago to two chats; a group 30 s and 50 s ago;
    # and a send too old to matter.
    limiter.restore([(0.25, "c1", False), (0.5, "c2", False), (0.75, "c1", False),
                     (30.0, "g1", True), (50.0, "g1", True), (90.0, "c3", False)])
    assert limiter.delay("c1") == pytest.approx(0.75)  # its newest send, 0.25 s ago
    assert limiter.delay("c3") == pytest.approx(0.25)  # the account: its oldest, 0.75 ago
    assert limiter.delay("g1", is_group=True) == pytest.approx(10.0)  # 20 messages/min
    assert await run_one(vt, limiter, "c3") == pytest.approx(0.25)
    assert limiter.tracked_chats == 4
    vt.now += 60.0
    limiter.prune()
    assert limiter.tracked_chats == 0


@pytest.mark.anyio
async def test_held_sends_to_many_chats_leave_no_state_behind() -> None:
    vt = VirtualTime()
    limiter = limiter_on(vt, {"account": RateLimit(2000, 1.0), "chat": RateLimit(1, 1.0),
                              "group": RateLimit(20, 60.0)})
    for index in range(20_000):
        vt.now = index / 1000
        chat = f"chat-{index}"
        assert limiter.try_acquire(chat, is_group=index % 2 == 0, hold=True)
        vt.now += 0.0005
        limiter.release(chat, is_group=index % 2 == 0, reached=index % 3 != 0)
        # Only the chats answered in the last minute (the group window) can matter.
        assert limiter.tracked_chats <= 10_001
    assert len(limiter._expiries) <= limiter.tracked_chats
    vt.now += 60.0
    limiter.prune()
    assert limiter.tracked_chats == 0
    assert limiter._expiries == []


@pytest.mark.anyio
async def test_a_cancelled_wait_for_a_held_slot_leaves_nothing_behind() -> None:
    vt = VirtualTime()
    limiter = limiter_on(vt, {"account": RateLimit(1, 1.0)})
    await limiter.acquire("a", hold=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(limiter.acquire, "b")
        await settle()  # "b" waits for "a"'s release, holding the account lock
        tg.cancel_scope.cancel()
    limiter.release("a")
    vt.now = 2.0
    limiter.prune()
    assert limiter.tracked_chats == 0
    assert await limiter.acquire("c") == 0


# -- fairness and independence --------------------------------------------------------------


@pytest.mark.anyio
async def test_account_queue_is_first_come_first_served() -> None:
    vt = VirtualTime()
    limiter = limiter_on(vt, {"account": RateLimit(1, 1.0)})
    await limiter.acquire("warm-up")  # the account window is now full until t=1
    order: list[str] = []

    async with anyio.create_task_group() as tg:
        for index in range(8):
            chat = f"chat-{index}"

            async def job(chat: str = chat) -> None:
                await limiter.acquire(chat)
                order.append(chat)

            tg.start_soon(job)
            await settle()  # chat-N is queued before chat-N+1 arrives
        await vt.drive()
    assert order == [f"chat-{index}" for index in range(8)]
    assert vt.now == 8.0  # one per second, no slot wasted


@pytest.mark.anyio
async def test_a_newcomer_does_not_overtake_a_waiting_sender() -> None:
    """Arriving the instant a slot frees is not enough: whoever queued first gets it."""
    vt = VirtualTime()
    limiter = limiter_on(vt, {"account": RateLimit(1, 1.0)})
    sent: list[str] = []

    async def newcomer() -> None:
        await vt.sleep(1.0)  # wakes at t=1, when the slot frees, before the waiter's timer
        await limiter.acquire("newcomer")
        sent.append("newcomer")

    async def waiter() -> None:
        await vt.sleep(0.5)
        await limiter.acquire("waiter")  # queued since t=0.5
        sent.append("waiter")

    await limiter.acquire("warm-up")
    await run_concurrently(vt, newcomer, waiter)
    assert sent == ["waiter", "newcomer"]
    assert vt.now == 2.0


@pytest.mark.anyio
async def test_a_busy_chat_does_not_starve_a_quiet_one() -> None:
    """A chat that sends in a loop keeps its place in line and no more."""
    vt = VirtualTime()
    limiter = limiter_on(vt, {"account": RateLimit(2, 1.0)})
    sends: list[tuple[float, str]] = []

    async def busy() -> None:
        for _ in range(20):
            await limiter.acquire("busy")
            sends.append((vt.now, "busy"))

    async def quiet() -> None:
        await vt.sleep(3.0)
        await limiter.acquire("quiet")
        sends.append((vt.now, "quiet"))

    await run_concurrently(vt, busy, quiet)
    quiet_at = next(at for at, chat in sends if chat == "quiet")
    # It arrived at t=3 behind at most the one busy send already queued.
    assert quiet_at <= 3.5
    assert_within_limits([(at, chat, False) for at, chat in sends],
                         {"account": RateLimit(2, 1.0)})


@pytest.mark.anyio
async def test_a_chat_at_its_limit_does_not_block_other_chats() -> None:
    vt = VirtualTime()
    limiter = limiter_on(vt, {"account": RateLimit(30, 1.0), "chat": RateLimit(1, 10.0)})
    sent: dict[str, list[float]] = defaultdict(list)

    async def slow_chat() -> None:
        for _ in range(3):
            await limiter.acquire("slow")
            sent["slow"].append(vt.now)

    async def other_chats() -> None:
        await vt.sleep(1.0)  # by now "slow" is waiting for its own window
        for index in range(5):
            assert await limiter.acquire(f"fast-{index}") == 0
            sent["fast"].append(vt.now)

    await run_concurrently(vt, slow_chat, other_chats)
    assert sent["slow"] == [0.0, 10.0, 20.0]
    assert sent["fast"] == [1.0] * 5


@pytest.mark.anyio
async def test_a_chat_blocked_while_queued_gives_up_its_place() -> None:
    """A 429 for the chat at the head of the account queue must not stall the queue."""
    vt = VirtualTime()
    limiter = limiter_on(vt, {"account": RateLimit(1, 1.0)})
    await limiter.acquire("warm-up")
    sent: dict[str, float] = {}

    async def job(chat: str) -> None:
        await limiter.acquire(chat)
        sent[chat] = vt.now

    async with anyio.create_task_group() as tg:
        tg.start_soon(job, "penalized")
        await settle()
        tg.start_soon(job, "next")
        await settle()
        limiter.penalize(30.0, "penalized")
        await vt.drive()
    assert sent == {"next": 1.0, "penalized": 30.0}


@pytest.mark.anyio
async def test_group_sends_obey_both_chat_and_group_limits() -> None:
    vt = VirtualTime()
    rates = {"chat": RateLimit(1, 1.0), "group": RateLimit(3, 60.0)}
    limiter = limiter_on(vt, rates)
    times = []
    for _ in range(5):
        await run_one(vt, limiter, "g-team")
        times.append(vt.now)
    assert times == [0.0, 1.0, 2.0, 60.0, 61.0]
    # A private chat is only under the chat limit.
    vt.now = 100.0
    for _ in range(4):
        await run_one(vt, limiter, "c-alice")
        times.append(vt.now)
    assert times[5:] == [100.0, 101.0, 102.0, 103.0]


@pytest.mark.anyio
async def test_same_chat_senders_keep_their_order() -> None:
    vt = VirtualTime()
    limiter = limiter_on(vt, {"chat": RateLimit(1, 1.0)})
    order: list[int] = []
    async with anyio.create_task_group() as tg:
        for index in range(5):
            async def job(index: int = index) -> None:
                await limiter.acquire("c")
                order.append(index)
            tg.start_soon(job)
            await settle()
        await vt.drive()
    assert order == [0, 1, 2, 3, 4]
    assert vt.now == 4.0


# -- penalize ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_penalize_a_chat_blocks_only_that_chat() -> None:
    vt = VirtualTime()
    limiter = limiter_on(vt, {})
    limiter.penalize(5.0, "c1")
    assert limiter.delay("c1") == 5.0
    assert limiter.delay("c2") == 0
    assert await limiter.acquire("c2") == 0
    assert await run_one(vt, limiter, "c1") == 5.0
    assert vt.now == 5.0


@pytest.mark.anyio
async def test_penalize_the_account_blocks_every_chat() -> None:
    vt = VirtualTime()
    limiter = limiter_on(vt, {"chat": RateLimit(1, 1.0)})
    limiter.penalize(3.0)
    assert await run_one(vt, limiter, "c1") == 3.0
    assert await run_one(vt, limiter, "c2") == 0  # the block is over by now


@pytest.mark.anyio
async def test_penalize_keeps_the_longer_block_and_ignores_nothing() -> None:
    vt = VirtualTime()
    limiter = limiter_on(vt, {})
    limiter.penalize(10.0, "c")
    limiter.penalize(2.0, "c")  # a shorter retry_after does not shorten the block
    limiter.penalize(0, "c")
    limiter.penalize(-1, None)
    assert limiter.delay("c") == 10.0
    assert limiter.delay("other") == 0
    with pytest.raises(ValueError, match="finite"):
        limiter.penalize(math.inf)
    with pytest.raises(ValueError, match="finite"):
        limiter.penalize(math.nan, "c")


@pytest.mark.anyio
async def test_penalize_during_a_wait_extends_it() -> None:
    vt = VirtualTime()
    limiter = limiter_on(vt, {"account": RateLimit(1, 1.0)})
    await limiter.acquire("a")
    sent: list[float] = []

    async def job() -> None:
        await limiter.acquire("b")
        sent.append(vt.now)

    async with anyio.create_task_group() as tg:
        tg.start_soon(job)
        await settle()  # waiting for the account slot at t=1
        limiter.penalize(7.0)
        await vt.drive()
    assert sent == [7.0]


@pytest.mark.anyio
async def test_try_acquire_takes_a_free_slot_and_records_nothing_otherwise() -> None:
    vt = VirtualTime()
    limiter = limiter_on(vt, {"chat": RateLimit(2, 1.0), "account": RateLimit(3, 1.0)})
    assert limiter.is_free("c1") and limiter.is_free("c1")  # a look takes nothing
    assert limiter.try_acquire("c1") is True
    assert limiter.try_acquire("c1") is True
    assert not limiter.is_free("c1")
    assert limiter.try_acquire("c1") is False  # the chat's window is full
    assert limiter.delay("c1") == pytest.approx(1.0)  # the refusal counted nothing
    assert limiter.try_acquire("c2") is True
    assert not limiter.is_free("c3")
    assert limiter.try_acquire("c3") is False  # the account's window is full
    limiter.penalize(4.0, "c4")
    vt.now = 1.0
    assert limiter.try_acquire("c4") is False  # blocked after a 429
    assert limiter.try_acquire("c3") is True
    # What it takes counts for acquire too: c1 sends twice more at t=1.
    assert limiter.try_acquire("c1") is True
    assert limiter.try_acquire("c1") is True
    vt.now = 1.5
    assert await run_one(vt, limiter, "c1") == pytest.approx(0.5)


@pytest.mark.anyio
async def test_try_acquire_never_jumps_a_queued_sender() -> None:
    vt = VirtualTime()
    limiter = limiter_on(vt, {"account": RateLimit(1, 1.0)})
    await limiter.acquire("a")
    async with anyio.create_task_group() as tg:
        tg.start_soon(limiter.acquire, "b")
        await settle()  # "b" waits at the head of the account queue for t=1
        vt.now = 1.0  # b's slot is free, but b has not woken yet
        assert limiter.try_acquire("c") is False
        await vt.drive()
    vt.now = 5.0
    limiter.prune()
    assert limiter.tracked_chats == 0  # a refused newcomer's state goes too


# -- memory -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_idle_chats_are_forgotten() -> None:
    vt = VirtualTime()
    limiter = limiter_on(vt, {"account": RateLimit(2000, 1.0), "chat": RateLimit(1, 1.0),
                              "group": RateLimit(20, 60.0)})
    for index in range(20_000):
        vt.now = index / 1000
        await limiter.acquire(f"chat-{index}")
        # Only the chats sent to in the last second can still limit anything.
        assert limiter.tracked_chats <= 1001
    # The prune schedule holds one entry per chat, not one per send.
    assert len(limiter._expiries) <= limiter.tracked_chats
    vt.now += 1.0
    await limiter.acquire("last")
    assert limiter.tracked_chats == 1
    # A group keeps its state for its longer window, then goes too.
    await run_one(vt, limiter, "g-team")
    vt.now += 59.0
    limiter.prune()
    assert limiter.tracked_chats == 1
    vt.now += 1.0
    limiter.prune()
    assert limiter.tracked_chats == 0


@pytest.mark.anyio
async def test_without_limits_sends_keep_no_state_but_blocks_still_hold() -> None:
    vt = VirtualTime()
    limiter = limiter_on(vt, {})
    for index in range(100):
        assert limiter.try_acquire(f"chat-{index}")
        assert await limiter.acquire(f"chat-{index}") == 0
    assert limiter.tracked_chats == 0
    limiter.penalize(2.0, "c1")
    assert not limiter.try_acquire("c1")
    assert limiter.try_acquire("c2")
    assert await run_one(vt, limiter, "c1") == 2.0
    limiter.penalize(1.0)  # the whole account
    assert not limiter.try_acquire("c3")
    assert await run_one(vt, limiter, "c3") == 1.0
    vt.now += 10.0
    limiter.prune()
    assert limiter.tracked_chats == 0
    assert limiter.try_acquire("c1")


@pytest.mark.anyio
async def test_a_chat_used_again_is_forgotten_once_it_goes_quiet() -> None:
    vt = VirtualTime()
    limiter = limiter_on(vt, {"chat": RateLimit(5, 1.0)})
    for at in (0.0, 0.5, 0.9):
        vt.now = at
        await limiter.acquire("c")
    vt.now = 1.2  # the first send's expiry has passed, the latest one's has not
    assert limiter.prune() == 0
    assert limiter.tracked_chats == 1
    vt.now = 1.9
    assert limiter.prune() == 1
    assert limiter.tracked_chats == 0
    assert limiter._expiries == []


@pytest.mark.anyio
async def test_a_pruned_chat_is_still_limited_correctly() -> None:
    """State is only dropped once it can no longer matter."""
    vt = VirtualTime()
    limiter = limiter_on(vt, {"chat": RateLimit(2, 1.0)})
    await limiter.acquire("c")
    vt.now = 0.5
    await limiter.acquire("c")
    vt.now = 0.9
    for index in range(100):
        await limiter.acquire(f"other-{index}")  # churn that prunes
    assert await run_one(vt, limiter, "c") == pytest.approx(0.1)


@pytest.mark.anyio
async def test_penalized_chats_are_forgotten_after_the_block() -> None:
    vt = VirtualTime()
    limiter = limiter_on(vt, {})
    for index in range(100):
        limiter.penalize(5.0, f"c{index}")
    assert limiter.tracked_chats == 100
    vt.now = 5.0
    assert limiter.prune() == 100
    assert limiter.tracked_chats == 0


@pytest.mark.anyio
async def test_a_cancelled_acquire_leaves_no_state_behind() -> None:
    vt = VirtualTime()
    limiter = limiter_on(vt, {"account": RateLimit(1, 1.0)})
    await limiter.acquire("a")
    async with anyio.create_task_group() as tg:
        tg.start_soon(limiter.acquire, "b")
        await settle()  # "b" holds the account lock, waiting for t=1
        tg.cancel_scope.cancel()
    vt.now = 2.0
    limiter.prune()
    assert limiter.tracked_chats == 0
    assert await limiter.acquire("c") == 0  # the account lock was released


# -- margin -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_margin_widens_every_window_and_there_is_none_by_default() -> None:
    assert DEFAULT_MARGIN == 0.0  # a held send's slot covers its trip (see below)
    vt = VirtualTime()
    limiter = RateLimiter({"account": RateLimit(2, 1.0), "chat": RateLimit(1, 1.0)},
                          margin=0.125, clock=vt.clock, sleep=vt.sleep)
    times = []
    for chat in ("a", "b", "c", "a"):
        await run_one(vt, limiter, chat)
        times.append(vt.now)
    assert times == [0.0, 0.0, 1.125, 1.125]


def test_margin_from_config() -> None:
    assert RateLimiter.from_limits({}, {"margin": "50ms"}).margin == 0.05
    assert RateLimiter.from_limits({}, {"margin": 0}).margin == 0.0
    assert RateLimiter.from_limits({}, None, margin=0.1).margin == 0.1
    assert parse_margin("0.5s") == parse_margin(".5") == 0.5
    for bad in ("fast", "1h", -0.1, True, math.nan, None):
        with pytest.raises(ValueError, match="'margin'") as error:
            RateLimiter.from_limits({}, {"margin": bad})
        assert repr(bad) in str(error.value)
    with pytest.raises(ValueError, match="'margin'"):
        RateLimiter({}, margin=-1)


# -- configuration ----------------------------------------------------------------------------


def test_from_limits_table_overrides() -> None:
    declared = {"account": RateLimit(30, 1.0), "chat": RateLimit(1, 1.0),
                "group": RateLimit(20, 60.0)}
    limiter = RateLimiter.from_limits(
        declared, {"account": {"count": 20, "per": 1.0}, "chat": {"count": 1, "per": 1}})
    assert limiter.rates == {"account": RateLimit(20, 1.0), "chat": RateLimit(1, 1),
                             "group": RateLimit(20, 60.0)}
    assert declared["account"] == RateLimit(30, 1.0)  # the channel's table is untouched


def test_from_limits_string_overrides_and_channel_limits() -> None:
    limits = ChannelLimits(rates={"account": RateLimit(80, 1.0)})
    limiter = RateLimiter.from_limits(limits, {"chat": "1/s", "group": "20/min",
                                               "account": "30/s"})
    assert limiter.rates == {"account": RateLimit(30, 1.0), "chat": RateLimit(1, 1.0),
                             "group": RateLimit(20, 60.0)}
    assert RateLimiter.from_limits(limits, None).rates == {"account": RateLimit(80, 1.0)}
    assert RateLimiter.from_limits(limits, {"account": "off"}).rates == {}


@pytest.mark.parametrize(("text", "expected"), [
    ("30/s", RateLimit(30, 1.0)),
    ("20/min", RateLimit(20, 60.0)),
    ("100/h", RateLimit(100, 3600.0)),
    ("1/6s", RateLimit(1, 6.0)),
    ("1/0.5s", RateLimit(1, 0.5)),
    ("20/2min", RateLimit(20, 120.0)),
    (" 5 / 1.5 sec ", RateLimit(5, 1.5)),
    ("3/Hour", RateLimit(3, 3600.0)),
])
def test_parse_rate_strings(text: str, expected: RateLimit) -> None:
    assert parse_rate(text, scope="chat") == expected


@pytest.mark.parametrize("value", [
    "", "30", "30/", "/s", "0/s", "-1/s", "1.5/s", "30/ms", "30/0s", "30/fortnight", "x/s",
    {"count": 0, "per": 1.0}, {"count": 1, "per": 0}, {"count": 1}, {"per": 1.0},
    {"count": 1, "per": 1.0, "burst": 3}, {"count": True, "per": 1.0},
    {"count": 1, "per": "1s"}, {"count": 2.5, "per": 1.0}, 30, None, [30, 1.0],
])
def test_bad_overrides_name_the_scope_and_the_value(value) -> None:
    with pytest.raises(ValueError) as error:
        RateLimiter.from_limits({}, {"group": value})
    message = str(error.value)
    assert "'group'" in message
    assert repr(value) in message


def test_unknown_scopes_are_errors() -> None:
    with pytest.raises(ValueError, match="'channel'.*unknown scope"):
        RateLimiter.from_limits({}, {"channel": "1/s"})
    with pytest.raises(ValueError, match="unknown rate limit scope 'user'"):
        RateLimiter({"user": RateLimit(1, 1.0)})
    with pytest.raises(ValueError, match="'chat'.*count"):
        RateLimiter({"chat": RateLimit(0, 1.0)})
