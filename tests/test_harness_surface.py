"""What a test reads of health and scale-out through the harness (``h.health``,
``h.owns``), the stable surface, rather than through ``h.kernel``."""

from __future__ import annotations

import time

import pytest

from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio


async def test_the_harness_probes_and_snapshots_through_h_health(tmp_path):
    async with KernelHarness(tmp_path) as h:
        result = (await h.health.probe())["memory:main"]
        assert result.ok and result.detail == "memory"
        snapshot = await h.health.snapshot()
        account = snapshot.channels["memory"].accounts["main"]
        assert account.probe is not None and account.probe.ok
        one = h.health.account_snapshot(h.kernel.accounts["memory:main"], time.time())
        assert one.key == "memory:main" and one.probe is not None


async def test_alone_on_its_store_the_harness_owns_every_account(tmp_path):
    async with KernelHarness(tmp_path) as h:
        assert h.owns("memory:main")


async def test_on_a_shared_store_only_the_lease_holder_owns_the_account(
        tmp_path, redis_server, redis_prefix):
    config = {"store": {"backend": "redis", "url": redis_server, "prefix": redis_prefix,
                        "lease_seconds": 30},
              "heartbeat": {"every": "0"}}
    async with KernelHarness(tmp_path / "first", config=config) as first:
        assert first.owns("memory:main")
        async with KernelHarness(tmp_path / "second", config=config) as second:
            assert not second.owns("memory:main")  # the first holds its lease
            assert first.owns("memory:main")
