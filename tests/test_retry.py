"""The retry policy: its settings, what counts as never sent, holds, and the outage gate."""

from __future__ import annotations

import logging
import time

import anyio
import pytest

from chatkernel import SendError
from chatkernel.core.outbound.retry import (
    UNREACHABLE_MAX_AGE,
    Outage,
    RetryPolicy,
    never_sent,
    platform_down,
    with_retries,
)
from chatkernel.testing.clock import ManualClock
from chatkernel.testing.contract import wait_until

pytestmark = pytest.mark.anyio

REFUSED = SendError("cannot connect", retryable=True)


def test_unreachable_max_age_is_an_interval_a_day_by_default() -> None:
    assert RetryPolicy.from_config(None).unreachable_max_age == UNREACHABLE_MAX_AGE == 86400
    assert RetryPolicy.from_config({"unreachable_max_age": "90m"}).unreachable_max_age == 5400
    assert RetryPolicy.from_config({"unreachable_max_age": "0"}).unreachable_max_age == 0
    for bad in ("soon", 30, "-1h"):
        with pytest.raises(ValueError, match="retry.unreachable_max_age"):
            RetryPolicy.from_config({"unreachable_max_age": bad})


def test_a_long_backoff_is_capped_not_overflowed() -> None:
    policy = RetryPolicy(base_delay=0.4, max_delay=30.0, jitter=0.0)
    assert policy.delay(3000) == 30.0  # a day of probes every 30 s


def test_never_sent_is_a_retryable_error_without_an_answer() -> None:
    assert never_sent(REFUSED)
    assert not never_sent(SendError("Service Unavailable", retryable=True, status=503))
    assert not never_sent(SendError("Too Many Requests", retryable=True, retry_after=1.0))
    assert not never_sent(SendError("timeout", retryable=True, delivery_unknown=True))
    assert not never_sent(SendError("Bad Request", status=400))
    assert not never_sent(OSError("not a SendError"))
    flagged = SendError("proxy said 503, nothing forwarded", retryable=True, status=503)
    flagged.not_sent = True  # a channel that knows says so
    assert never_sent(flagged)


async def test_a_hold_takes_over_refusals_without_using_up_attempts() -> None:
    errors = [REFUSED, REFUSED, REFUSED]
    held: list[SendError] = []

    async def request() -> str:
        if errors:
            raise errors.pop(0)
        return "sent"

    async def hold(error: SendError) -> None:
        held.append(error)

    assert await with_retries(request, RetryPolicy(attempts=1), hold=hold) == "sent"
    assert held == [REFUSED] * 3


async def test_an_awaitable_from_on_retry_is_awaited_before_the_wait() -> None:
    order: list[str] = []
    errors = [SendError("Bad Gateway", retryable=True, status=502)]

    async def request() -> str:
        if errors:
            raise errors.pop(0)
        order.append("request")
        return "sent"

    async def note() -> None:
        order.append("noted")

    async def sleep(seconds: float) -> None:
        order.append("wait")

    await with_retries(request, RetryPolicy(attempts=2, jitter=0), sleep=sleep,
                       on_retry=lambda retry, error, delay: note())
    assert order == ["noted", "wait", "request"]


async def test_an_outage_lets_one_probe_at_a_time_and_ends_for_everyone(caplog) -> None:
    caplog.set_level(logging.INFO, logger="chatkernel.retry")
    clock = ManualClock()
    outage = Outage("x:main", RetryPolicy(base_delay=0.01, max_delay=0.05, jitter=0),
                    clock=clock.now, sleep_until=clock.sleep_until)
    assert await outage.turn("a") is False  # reachable: nothing to wait for
    outage.refused(REFUSED, "a", probe=False)
    assert outage.active
    turns: list[tuple[str, bool]] = []
    deadline = clock.now() + 30

    async def waiter(key: str) -> None:
        turns.append((key, await outage.turn(key, deadline)))

    async def until(count: int, asleep: list[float]) -> None:
        """Until ``count`` turns were given and the others sleep until ``asleep``."""
        await wait_until(lambda: len(turns) == count and clock.deadlines == asleep,
                         timeout=5, what=f"{count} turn(s), the others asleep until {asleep}",
                         state=lambda: (turns, clock.deadlines), interval=0.001)

    async with anyio.create_task_group() as tg:
        for key in "abc":
            tg.start_soon(waiter, key)
        backoff = clock.now() + 0.01
        await until(0, [backoff] * 3)  # all three wait for the backoff...
        clock.set(backoff)
        await until(1, [deadline] * 2)  # ...then one tries, the others wait for it
        first, probing = turns[0]
        assert probing
        clock.advance(0.2)  # four backoffs: still the only one while it is out
        assert len(turns) == 1 and clock.deadlines == [deadline] * 2
        outage.refused(REFUSED, first, probe=True)  # refused again: the next one tries
        backoff = clock.now() + 0.02
        await until(1, [backoff] * 2)
        clock.set(backoff)
        await until(2, [deadline])
        assert turns[1][1] is True and turns[1][0] != first
        outage.reached()  # it got through: everyone goes
        await until(3, [])
    assert [probing for _, probing in turns] == [True, True, False]
    assert not outage.active
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines  # as it began and as it ended, however many waited
    assert "x:main: the platform cannot be reached" in lines[0] and "50ms" in lines[0]
    assert "2 request(s) refused, 3 payload(s) waited" in lines[1]


async def test_a_waiter_gives_up_at_its_deadline_with_the_outage_still_on() -> None:
    outage = Outage("x:main", RetryPolicy(base_delay=60, jitter=0))
    outage.refused(REFUSED, "a", probe=False)
    assert await outage.turn("a", time.monotonic() + 0.02) is False
    assert outage.active and outage.last_error is REFUSED
    # A probe that is cancelled hands the turn on.
    outage = Outage("x:main", RetryPolicy(base_delay=0, jitter=0))
    outage.refused(REFUSED, "a", probe=False)
    assert await outage.turn("a", time.monotonic() + 5) is True
    outage.abandon()
    assert await outage.turn("b", time.monotonic() + 5) is True


DOWN = SendError("sendMessage: HTTP 502", retryable=True, status=502)


def test_platform_down_is_a_5xx_or_a_repeatable_answer_that_says_not_how_long() -> None:
    assert platform_down(DOWN)
    assert platform_down(SendError("Service Unavailable", retryable=True, status=503,
                                   retry_after=30.0))  # 5xx, whatever it asks
    assert platform_down(SendError("Too Many Requests", retryable=True, status=429))
    assert platform_down(SendError("service_unavailable", retryable=True, status=200))
    # A chat throttled for a while, a refusal, no answer at all: not the platform down.
    assert not platform_down(SendError("Too Many Requests", retryable=True, status=429,
                                       retry_after=3.0))
    assert not platform_down(SendError("Bad Request: chat not found", status=400))
    assert not platform_down(REFUSED)  # never sent: an outage of its own kind
    assert not platform_down(SendError("timeout", retryable=True, delivery_unknown=True))


def test_one_5xx_among_answers_that_work_is_no_outage_a_run_of_them_is(caplog) -> None:
    caplog.set_level(logging.INFO, logger="chatkernel.retry")
    changes: list[SendError | None] = []
    outage = Outage("x:main", RetryPolicy(attempts=3), on_change=changes.append)
    for _ in range(5):  # 5xx, then an answer that works, again and again
        outage.unavailable(DOWN, 1, probe=False)
        outage.unavailable(DOWN, 2, probe=False)
        outage.reached()
    assert not outage.active and changes == []
    for key in (1, 2, 3):  # three in a row, across payloads: the platform is down
        outage.unavailable(DOWN, key, probe=False)
    assert outage.active and changes == [DOWN] and outage.last_error is DOWN
    assert "x:main: the platform is unavailable (sendMessage: HTTP 502)" in caplog.text
    outage.reached()
    assert not outage.active and changes == [DOWN, None]


async def test_a_payload_held_through_an_outage_gets_its_attempts_afresh() -> None:
    errors = [DOWN, DOWN, DOWN, DOWN, DOWN]  # the last two after the hold: attempts 1, 2
    held: list[SendError] = []

    async def request() -> str:
        if errors:
            raise errors.pop(0)
        return "sent"

    async def hold(error: SendError) -> None:
        held.append(error)

    async def no_sleep(_: float) -> None:
        pass

    policy = RetryPolicy(attempts=3, jitter=0)
    result = await with_retries(request, policy, hold=hold, sleep=no_sleep,
                                holds=lambda error: not held and len(errors) == 2)
    assert result == "sent" and len(held) == 1


async def test_a_5xx_outage_past_the_age_limit_fails_the_payload_saying_so(tmp_path, caplog):
    from chatkernel.testing.memory import KernelHarness

    caplog.set_level(logging.INFO, logger="chatkernel.retry")
    config = {"channels": {"memory": {
        "retry": {"base_delay_ms": 10, "max_delay_ms": 20, "jitter": 0,
                  "unreachable_max_age": "300ms"},
        "accounts": {"main": {"allow_from": ["*"]}}}}}
    async with KernelHarness(tmp_path, config=config) as h:
        h.channel.fail_next = [SendError("Service Unavailable", retryable=True,
                                         status=503)] * 1000
        await h.channel.receive("hello")
        await h.settle(timeout=10)
        notes = [e.text for e in await h.kernel.store.read_log(
            "memory:main:chat-1", roles=("notification",))]
        failed = 1000 - len(h.channel.fail_next)
    # Waited out (probed with its backoff), not failed after three attempts.
    assert failed > 3 and h.channel.texts() == []
    assert "memory:main: the platform is unavailable (Service Unavailable)" in caplog.text
    assert len(notes) == 1 and "the platform was unavailable for 300ms after it was " \
                               "queued (Service Unavailable)" in notes[0]
