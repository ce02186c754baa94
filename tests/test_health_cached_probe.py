"""`chatkernel health` from cached probes: a probe that passed before a failure says when."""

from __future__ import annotations

import re

import pytest

from chatkernel.sdk.models import SendError
from chatkernel.core.health.report import render_health
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio

ONE_ATTEMPT = {"channels": {"memory": {"retry": {"attempts": 1, "unreachable_max_age": "0"},
                                       "accounts": {"main": {"allow_from": ["*"]}}}}}


async def test_a_cached_probe_next_to_a_failure_shows_its_age(tmp_path):
    async with KernelHarness(tmp_path, config=ONE_ATTEMPT) as h:
        health = h.kernel.health
        await health.refresh()  # a cached probe that passed
        h.channel.fail_next = [SendError("Cannot connect to host api.example:443",
                                         retryable=True)]
        await h.channel.receive("hello")
        await h.settle()
        snapshot = (await health.snapshot()).model_dump(mode="json")
        assert snapshot["live"] is False
        line = next(line for line in render_health(snapshot).splitlines()
                    if "memory:main" in line)
        assert line.lstrip().startswith("BAD memory:main: running")
        assert re.search(r"; probe ok: [^;]*, probed \d+s ago; last event", line), line
        # A live probe is of now: no age.
        live = {**snapshot, "live": True}
        assert ", probed " not in render_health(live)
