"""The scheduler's clock: injectable, so tests drive heartbeats with
:class:`chatkernel.testing.clock.ManualClock`."""

from __future__ import annotations

import time
from typing import Protocol

import anyio

#: The longest the scheduler sleeps between looks at the clock (a wall clock may jump).
MAX_SLEEP = 60.0


class Clock(Protocol):
    """Wall time for the scheduler: ``now()`` and a sleep until a moment."""

    def now(self) -> float: ...

    async def sleep_until(self, deadline: float) -> None: ...


class SystemClock:
    """The real clock. Sleeps are capped (:data:`MAX_SLEEP`): wall time may jump."""

    def now(self) -> float:
        return time.time()

    async def sleep_until(self, deadline: float) -> None:
        await anyio.sleep(max(0.0, min(deadline - time.time(), MAX_SLEEP)))
