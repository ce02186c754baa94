"""Clocks for tests: one the test moves by hand, and one that runs faster than real time.

``ScaledClock`` is real time sped up, for tests whose subject is a platform's rate
windows (a minute of Slack's limits): the kernel's rate limiters and the fake
platform's windows both count in it, so both really enforce the platform's figures,
``factor`` times faster (see its docstring).

``ManualClock`` stands in for the wall clock: ``now()`` is whatever the test
set, and ``sleep_until`` returns only once the test has advanced the clock
past the deadline, so nothing waits on real time and no timing is asserted::

    clock = ManualClock()
    async with KernelHarness(tmp_path, config=..., heartbeat_clock=clock) as h:
        clock.advance(30 * 60)          # the heartbeat is due: the scheduler wakes
        await h.heartbeats_settled()    # ... and its turn has run
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

    def now(self) -> float:
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
        while self._now < deadline:
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()


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
