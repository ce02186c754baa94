"""ScaledClock: real time sped up, which the kernel's rate limiters and a fake
platform's windows can both count in (chatkernel.testing.clock)."""

from __future__ import annotations

import pytest

from chatkernel.core.outbound.ratelimit import RateLimiter
from chatkernel.sdk.channel import RateLimit
from chatkernel.testing import RateWindows, ScaledClock

pytestmark = pytest.mark.anyio


async def test_a_limiter_on_the_clock_keeps_its_windows_on_that_clock():
    clock = ScaledClock(10)
    limiter = RateLimiter({"chat": RateLimit(1, 1.0)}, clock=clock.pacing.clock,
                          sleep=clock.pacing.sleep)
    windows = RateWindows(clock=clock.monotonic)  # the platform's side, one a second
    for _ in range(4):
        await limiter.acquire("chat-a")
        assert windows.admit([("chat-a", 1, 1.0)]) == 0.0  # never early for the platform
    assert clock.monotonic() >= 3.0  # three full windows of the clock passed


async def test_a_send_too_early_on_the_clock_is_refused_by_the_platforms_window():
    clock = ScaledClock(10)
    windows = RateWindows(clock=clock.monotonic)
    assert windows.admit([("chat-a", 1, 1.0)]) == 0.0
    assert 0.0 < windows.admit([("chat-a", 1, 1.0)]) <= 1.0
    await clock.sleep(1.0)
    assert windows.admit([("chat-a", 1, 1.0)]) == 0.0


def test_a_clock_runs_forward_only():
    with pytest.raises(ValueError, match="factor must be > 0"):
        ScaledClock(0)
