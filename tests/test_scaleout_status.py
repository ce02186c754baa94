"""``chatkernel status`` on a machine where no gateway runs, with the config of a
deployment on Redis: it shows the instances that run elsewhere, their leases, and the
accounts they own as ``elsewhere`` (core/health.py ``local_snapshot``)."""

from __future__ import annotations

import json
import os

import anyio
import pytest

from chatkernel.testing.instances import CHATKERNEL
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio


async def test_status_without_a_gateway_here_shows_the_instances_elsewhere(
        tmp_path, redis_server, redis_prefix):
    store = {"backend": "redis", "url": redis_server, "prefix": redis_prefix}
    config = {"store": store, "channels": {"webchat": {"enabled": True}}}
    async with KernelHarness(tmp_path / "gateway", config=config) as h:
        holder = h.kernel.cluster.holder
        assert h.kernel.cluster.owns("webchat:default")
        home = tmp_path / "elsewhere"
        home.mkdir()
        (home / "config.toml").write_text(
            f'[store]\nbackend = "redis"\nurl = "{redis_server}"\nprefix = "{redis_prefix}"\n')
        answer = await anyio.run_process(
            [CHATKERNEL, "status", "--json"], check=False,
            env={**os.environ, "CHATKERNEL_HOME": str(home)})
        text = (await anyio.run_process(
            [CHATKERNEL, "status"], check=False,
            env={**os.environ, "CHATKERNEL_HOME": str(home)})).stdout.decode()
    assert answer.returncode == 0, answer.stderr.decode()
    snapshot = json.loads(answer.stdout)
    assert snapshot["gateway"]["reachable"] is False
    assert [i["holder"] for i in snapshot["cluster"]["instances"]] == [holder]
    owned = {lease["name"]: lease["holder"] for lease in snapshot["cluster"]["leases"]}
    assert owned["account:webchat:default"] == holder
    webchat = snapshot["channels"]["webchat"]["accounts"]["default"]
    assert (webchat["state"], webchat["detail"]) == ("elsewhere", f"owned by {holder}")
    assert "Instances sharing the store" in text and holder in text
