"""Two kernels on one Redis, an account changing hands in the middle of its work
(chatkernel.core.runtime.cluster): what the soak's handovers (bench/soak.py) came down
to, each built step by step."""

from __future__ import annotations

import logging

import anyio
import pytest

from chatkernel.testing.contract import wait_until
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio

KEY = "memory:main"
LEASE = "account:memory:main"


def shared(redis_server: str, prefix: str, lease_seconds: float, **more: object) -> dict:
    return {"store": {"backend": "redis", "url": redis_server, "prefix": prefix,
                      "lease_seconds": lease_seconds},
            "heartbeat": {"every": "0"}, **more}


def dies(h: KernelHarness) -> None:
    """The kernel stops as a killed process does: no lease renewed or given back, no
    inbox read, nothing marked; what it was doing just never goes on."""
    h.kernel.cluster._keeping.cancel()
    h.kernel.cluster._reading.cancel()


async def test_a_reply_in_flight_when_its_owner_died_is_named_delivery_unknown(
        tmp_path, redis_server, redis_prefix, caplog):
    """The soak's lost WhatsApp reply: its owner was killed after the reply's `sending`
    mark and before the request left. The next owner cannot tell that from a request
    the platform took, so it sends nothing again (docs/outbound.md); its log names the
    reply, as a failure at run time is, rather than only counting it."""
    caplog.set_level(logging.INFO, logger="chatkernel.outbox")
    config = shared(redis_server, redis_prefix, 1)
    async with KernelHarness(tmp_path / "a", config=config) as first, \
            KernelHarness(tmp_path / "b", config=config) as second:
        assert first.owns(KEY) and not second.owns(KEY)
        leaving = anyio.Event()

        async def send(route, payload):  # the request is about to leave: killed here
            leaving.set()
            await anyio.sleep_forever()

        first.channel.send = send
        # Taken by the instance that does not own the account (a webhook's round
        # robin), journaled, and run by the owner from the account's inbox.
        assert await second.channel.receive("q31z1838 n9", chat_id="15550100012") == \
            "accepted"
        with anyio.fail_after(10):
            await leaving.wait()
        dies(first)
        holder, token, _ = (await second.kernel.store.leases())[LEASE]
        await second.kernel.store.release_lease(LEASE, holder, token)  # it ran out
        await wait_until(lambda: second.owns(KEY), what="the takeover")
        await second.settle()
        assert second.channel.sent == []  # never sent twice
        assert [(entry.payload.text, entry.status, entry.error) for entry, _ in
                await second.kernel.store.outbox_failures()] == [
            ("q31z1838 n9", "unknown", "in flight when the gateway stopped")]
    assert ('memory:main: delivery unknown in memory:main:15550100012: chunk 1/1 '
            '"q31z1838 n9" was being sent when the gateway stopped; it is not resent') \
        in caplog.text
    assert ("outbox: recovered 0 unsent payload(s), sending them now; 1 were in flight "
            "when the gateway stopped") in caplog.text
