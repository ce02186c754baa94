"""chatkernel-discord's tests. The kit's pytest plugin gives each test a CHATKERNEL_HOME of
its own and the asyncio backend; the runs (discord_runs.py) are shared by several test
modules, and the fixtures below start the one the gateway's tests begin with."""

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from chatkernel.testing import ManualClock  # noqa: E402
from discord_runs import Up, gateway_up  # noqa: E402


@pytest.fixture
def clock() -> ManualClock:
    """The channel's clock, for a test about its timers."""
    return ManualClock()


@pytest.fixture
async def up(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Up]:
    """A run with its gateway up (:func:`discord_runs.gateway_up`). A test that takes
    ``clock`` too runs the channel's timers, and the fake's rate limits, on it; any
    other, on the real clock."""
    clock = request.getfixturevalue("clock") if "clock" in request.fixturenames else None
    async with gateway_up(tmp_path, clock=clock) as started:
        yield started
