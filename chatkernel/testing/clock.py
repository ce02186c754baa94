"""A clock the test moves by hand, for the heartbeat scheduler.

``ManualClock`` stands in for the wall clock: ``now()`` is whatever the test
set, and ``sleep_until`` returns only once the test has advanced the clock
past the deadline, so nothing waits on real time and no timing is asserted::

    clock = ManualClock()
    async with KernelHarness(tmp_path, config=..., heartbeat_clock=clock) as h:
        clock.advance(30 * 60)          # the heartbeat is due: the scheduler wakes
        await h.heartbeats_settled()    # ... and its turn has run
"""

from __future__ import annotations

import anyio

#: 2024-01-15 12:00 UTC, a Monday: a fixed, readable starting point.
DEFAULT_START = 1_705_320_000.0


class ManualClock:
    """Wall time that moves only when told (see the module's docstring)."""

    def __init__(self, start: float = DEFAULT_START) -> None:
        self._now = float(start)
        self._changed: anyio.Event | None = None
        self._sleepers: list[float] = []

    @property
    def sleepers(self) -> list[float]:
        """The deadlines :meth:`sleep_until` waits for now, earliest first: what a test
        waits to see (everyone asleep, and until when) before it advances the clock."""
        return sorted(self._sleepers)

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
        """Return once the clock is at ``deadline`` or past it."""
        self._sleepers.append(deadline)
        try:
            while self._now < deadline:
                if self._changed is None:
                    self._changed = anyio.Event()
                await self._changed.wait()
        finally:
            self._sleepers.remove(deadline)
