"""The kit's pieces for websocket gateways (chatkernel.sdk.receiving.gateway): a heartbeat
whose missed acknowledgement ends a zombie connection, and backoff with jitter."""

from __future__ import annotations

import random

import anyio
import pytest

from chatkernel.channels import Heartbeat, JitteredBackoff, MissedHeartbeat
from chatkernel.testing import ManualClock

pytestmark = pytest.mark.anyio


async def test_the_first_beat_comes_after_a_random_part_of_the_interval_then_every_interval():
    clock = ManualClock()
    heartbeat = Heartbeat(40.0, clock, rng=random.Random(7))
    beats: list[float] = []

    async def beat() -> None:
        beats.append(clock.now())
        heartbeat.ack()

    start = clock.now()
    assert 0 <= heartbeat.first_delay < 40.0
    async with anyio.create_task_group() as tg:
        tg.start_soon(heartbeat.run, beat)
        assert await clock.sleeper() == pytest.approx(start + heartbeat.first_delay)
        clock.advance(heartbeat.first_delay)
        assert await clock.sleeper(after=clock.now()) == pytest.approx(clock.now() + 40.0)
        clock.advance(40.0)
        await clock.sleeper(after=clock.now())
        tg.cancel_scope.cancel()
    assert [b - start for b in beats] == pytest.approx(
        [heartbeat.first_delay, heartbeat.first_delay + 40.0])
    assert heartbeat.beats == heartbeat.acks == 2 and heartbeat.latency == 0.0


async def test_a_beat_due_while_the_last_one_is_unacknowledged_raises():
    clock = ManualClock()
    heartbeat = Heartbeat(10.0, clock, first_jitter=False)
    sent = []

    async def beat() -> None:
        sent.append(clock.now())

    missed: list[MissedHeartbeat] = []

    async def run() -> None:
        try:
            await heartbeat.run(beat)
        except MissedHeartbeat as exc:
            missed.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await clock.sleeper()
        clock.advance(10.0)  # the first beat, never acknowledged
        await clock.sleeper(after=clock.now())
        clock.advance(10.0)  # the next is due: a zombie
    assert len(sent) == 1 and len(missed) == 1
    assert MissedHeartbeat(10.0).kind == "no_answer"


async def test_an_acknowledgement_measures_the_latency_and_beat_now_answers_a_request():
    clock = ManualClock()
    heartbeat = Heartbeat(10.0, clock)
    sent = []

    async def beat() -> None:
        sent.append(clock.now())

    await heartbeat.beat_now(beat)
    clock.advance(0.25)
    heartbeat.ack()
    assert heartbeat.latency == pytest.approx(0.25) and heartbeat.acked
    heartbeat.ack()  # an ACK with no beat out changes nothing
    assert heartbeat.latency == pytest.approx(0.25)


def test_a_heartbeat_needs_a_positive_interval():
    with pytest.raises(ValueError, match="interval"):
        Heartbeat(0, ManualClock())


def test_jittered_backoff_stays_between_half_and_the_whole_step_and_counts():
    backoff = JitteredBackoff(1.0, 8.0, rng=random.Random(3))
    delays = [backoff.next() for _ in range(6)]
    steps = [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert all(step / 2 <= delay <= step for delay, step in zip(delays, steps)), delays
    assert len(set(delays)) == len(delays)  # jittered: no two alike
    assert backoff.attempts == 6
    backoff.reset()
    assert backoff.attempts == 0 and 0.5 <= backoff.next() <= 1.0
