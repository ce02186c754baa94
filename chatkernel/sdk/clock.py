"""The time a channel's receive loop and timers run on (``context.clock``).

A transport waits out its backoff, a refused identity's slow retries and a socket's
silence on this clock, and a channel keeps its own timers on it (WeChat's hour-long
pause after an expired session): the real clock in a gateway; in a test, one the
test moves by hand (``chatkernel.testing.ManualClock``, given to the kernel as
``KernelHarness(..., channel_clock=clock)``), so an hour's pause is one
``clock.advance(3600)`` and no test waits on real time for it.

The account's health (its runtime's timestamps, the silence the health monitor
judges) stays on the wall clock whatever clock a channel has.
"""

from __future__ import annotations

import time
from typing import Protocol

import anyio

__all__ = ["SYSTEM_CLOCK", "ChannelClock", "SystemClock"]


class ChannelClock(Protocol):
    """What a clock gives a channel: two readings and a sleep."""

    def now(self) -> float:
        """The time as a Unix timestamp (for a moment to remember, a deadline to store)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps back (for measuring how long something took)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once ``seconds`` have passed on this clock (at once for 0 or less)."""
        ...


class SystemClock:
    """The real clock: ``time.time()``, ``time.monotonic()`` and ``anyio.sleep``."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(0.0, seconds))


#: The clock of every channel whose kernel was given none.
SYSTEM_CLOCK = SystemClock()
