"""Clocks for tests: one the test moves by hand (the heartbeat scheduler's, the
channels', the queue's), and one that runs faster than real time (the rate limits').

``ScaledClock`` is real time sped up, for tests whose subject is a platform's rate
windows (a minute of Slack's limits): the kernel's rate limiters and the fake
platform's windows both count in it, so both really enforce the platform's figures,
``factor`` times faster (see its docstring).

``ManualClock`` stands in for the wall clock: ``now()`` is whatever the test
set, and a sleep on it (``sleep_until``, ``sleep``) returns only once the test
has advanced the clock past its deadline, so nothing waits on real time and no
timing is asserted::

    clock = ManualClock()
    async with KernelHarness(tmp_path, config=..., heartbeat_clock=clock) as h:
        clock.advance(30 * 60)          # the heartbeat is due: the scheduler wakes
        await h.heartbeats_settled()    # ... and its turn has run

Given as ``channel_clock`` (``KernelHarness``, ``open_contract_run``) it is the
clock of every channel's context (``context.clock``, see chatkernel.sdk.clock): the
receive loop's backoff, a refused token's slow retries, a socket's silence and a
channel's own timers wait on it. :meth:`ManualClock.sleeper` tells the test when
a loop has gone to sleep and until when, which is how it knows that nothing more
happens before that moment::

    async with open_contract_run(adapter, tmp_path, channel_clock=clock) as run:
        ...                                   # the token is refused
        deadline = await clock.sleeper()      # the loop waits for its next try ...
        assert deadline == clock.now() + 60   # ... a minute away: nothing until then
        clock.advance(60)                     # the next try comes now
"""

from __future__ import annotations

import time

import anyio

from chatkernel.core.outbound.ratelimit import Pacing

#: 2024-01-15 12:00 UTC, a Monday: a fixed, readable starting point.
DEFAULT_START = 1_705_320_000.0


class ManualClock:
    """Wall time that moves only when told (see the module's docstring)."""

    def __init__(self, start: float = DEFAULT_START) -> None:
        self._now = float(start)
        self._changed: anyio.Event | None = None
        #: The deadline of each task sleeping on the clock now, one entry per task.
        self._deadlines: list[float] = []
        self._slept: anyio.Event | None = None

    def now(self) -> float:
        return self._now

    @property
    def pacing(self) -> Pacing:
        """The kernel's rate limits and typing indicators on this clock (``pacing=``
        of ``Kernel``, ``KernelHarness``, ``open_contract_run``): a send whose window is
        full, an indicator held back by ``indicator_delay``, wait until the test
        advances the clock."""
        return Pacing(clock=self.monotonic, sleep=self.sleep)

    def monotonic(self) -> float:
        """The same reading as :meth:`now`: this clock never goes back."""
        return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward and wake every sleeper; returns the new time."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        return self.set(self._now + seconds)

    def set(self, ts: float) -> float:
        """Jump to ``ts`` (a Unix time) and wake every sleeper."""
        self._now = float(ts)
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()
        return self._now

    async def sleep_until(self, deadline: float) -> None:
        """Return once the clock reads ``deadline`` or later."""
        if self._now >= deadline:
            return
        self._deadlines.append(deadline)
        slept, self._slept = self._slept, None
        if slept is not None:
            slept.set()
        try:
            while self._now < deadline:
                if self._changed is None:
                    self._changed = anyio.Event()
                await self._changed.wait()
        finally:
            self._deadlines.remove(deadline)

    async def sleep(self, seconds: float) -> None:
        """Return once the clock has moved ``seconds`` on (``context.clock.sleep``)."""
        if seconds <= 0:
            await anyio.sleep(0)  # a sleep is a checkpoint, as anyio's is
            return
        await self.sleep_until(self._now + seconds)

    @property
    def deadlines(self) -> list[float]:
        """When each task sleeping on the clock wakes, earliest first."""
        return sorted(self._deadlines)

    async def sleeper(self, *, after: float | None = None, timeout: float = 10.0) -> float:
        """Wait until some task sleeps on the clock until a moment later than ``after``
        (default: now) and return the earliest such deadline; fail after ``timeout``
        real seconds. A task asleep until then does nothing before it: what a test that
        asserts "nothing more happens" waits for instead of a wall-clock sleep."""
        after = self._now if after is None else after
        with anyio.move_on_after(timeout):
            while True:
                later = [deadline for deadline in self._deadlines if deadline > after]
                if later:
                    return min(later)
                if self._slept is None:
                    self._slept = anyio.Event()
                await self._slept.wait()
        raise AssertionError(f"no task went to sleep on the clock until after {after:.3f} "
                             f"within {timeout:g}s (asleep until: {self.deadlines})")


class ScaledClock:
    """Monotonic time that runs ``factor`` times faster than the real one.

    ``monotonic()`` reads it and ``sleep(seconds)`` waits that many of its seconds
    (``seconds / factor`` real ones). Give :attr:`pacing` to the kernel (``Kernel(...,
    pacing=...)``, ``KernelHarness(..., pacing=...)``) and :meth:`monotonic` to the fake
    platform's windows (``fake.rates.clock``): a limit of 300 a minute is then enforced
    on both sides as 300 in six real seconds at ``factor=10``, every request counted
    when it really arrives and answers. Everything else (timeouts, retries, health)
    stays in real time, so keep the factor modest: a request's round trip counts
    ``factor`` times longer in the windows (which only slows the pacing down).
    """

    def __init__(self, factor: float) -> None:
        if not factor > 0:
            raise ValueError(f"a clock's factor must be > 0, got {factor!r}")
        self.factor = float(factor)
        self._origin = time.monotonic()
        #: The kernel's rate limits counted on this clock.
        self.pacing = Pacing(clock=self.monotonic, sleep=self.sleep)

    def monotonic(self) -> float:
        return (time.monotonic() - self._origin) * self.factor

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(0.0, seconds) / self.factor)
