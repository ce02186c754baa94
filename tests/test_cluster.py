"""Several gateway processes on one Redis (core/runtime/cluster.py), from the kernel's side: the
web chat served by every instance, and ``chatkernel status`` where no gateway runs.
The failover tests are the plugins' (plugins/telegram/tests/test_scaleout.py,
plugins/whatsapp/tests/test_scaleout.py)."""

from __future__ import annotations

import json
import os

import anyio
import pytest

from chatkernel.testing.instances import CHATKERNEL, GatewayInstances, wait_for_owner
from chatkernel.testing.memory import KernelHarness
from chatkernel.testing.redis import RedisStore

pytestmark = pytest.mark.anyio

LEASE_SECONDS = 2.0


@pytest.mark.slow
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


@pytest.mark.slow
async def test_the_web_chat_works_on_an_instance_that_does_not_own_it(
        tmp_path, redis_server, redis_prefix):
    """The page and its posts are served by every instance: a message posted to one that
    does not own the web chat is answered by the owner, and shows on the first."""
    from chatkernel.testing.process import post_json, wait_for_messages

    config = {"store": {"backend": "redis", "url": redis_server, "prefix": redis_prefix,
                        "lease_seconds": LEASE_SECONDS},
              "agent": {"kind": "echo"}, "heartbeat": {"every": "0"},
              "queue": {"mode": "followup", "debounce_ms": 0}}
    async with GatewayInstances(tmp_path, config) as instances:
        for _ in range(2):
            await instances.start()
        store = RedisStore(url=redis_server, prefix=redis_prefix)
        await store.open()
        try:
            holder, _ = await wait_for_owner(store, "account:webchat:default",
                                             timeout=LEASE_SECONDS * 5)
        finally:
            await store.close()
        (other,) = [i for i in instances.instances if i is not instances.owner(holder)]
        status, answer = await anyio.to_thread.run_sync(lambda: post_json(
            f"{other.url}/webchat/messages",
            {"chat_id": "browser-1", "user_id": "me", "text": "hello from elsewhere"}))
        assert status == 202, answer
        messages = await anyio.to_thread.run_sync(lambda: wait_for_messages(
            f"{other.url}/webchat/messages?chat_id=browser-1", 2, timeout=20))
    assert [(m["role"], m["text"]) for m in messages] == [
        ("user", "hello from elsewhere"), ("bot", "hello from elsewhere")]


async def test_an_account_given_up_while_the_store_still_names_this_instance_is_red(
        tmp_path, redis_server, redis_prefix):
    """Its lease unrenewed, the instance stops serving the account; for a moment the
    store's lease still names it. Nobody serves the account then: health says so, it
    does not read "owned by <this instance>" as green."""
    store = {"backend": "redis", "url": redis_server, "prefix": redis_prefix,
             "lease_seconds": 60}  # the lease outlasts the test: the store keeps naming us
    config = {"store": store, "channels": {"webchat": {"enabled": True}}}
    async with KernelHarness(tmp_path, config=config) as h:
        cluster = h.kernel.cluster
        assert cluster.owns("webchat:default")
        before = (await h.health.snapshot()).channels["webchat"].accounts["default"]
        assert before.state != "elsewhere"  # its own (no receive loop runs in a harness)
        cluster._lose(h.kernel.accounts["webchat:default"], "its lease could not be renewed")
        snapshot = await h.health.snapshot()
        entry = snapshot.channels["webchat"].accounts["default"]
        leases = {lease.name: lease.holder for lease in snapshot.cluster.leases}
        assert leases["account:webchat:default"] == cluster.holder  # the store's view
        assert (entry.state, entry.detail, entry.ok) == (
            "elsewhere", "owned by no instance now", False)
        assert not snapshot.ok
        assert "webchat:default: no instance owns this account" in snapshot.problems
