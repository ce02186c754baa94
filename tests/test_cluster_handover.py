"""Two kernels on one Redis, an account changing hands in the middle of its work
(chatkernel.core.runtime.cluster): what the soak's handovers (bench/soak.py) came down
to, each built step by step."""

from __future__ import annotations

import logging

import anyio
import pytest

from chatkernel.core.runtime import cluster as cluster_module
from chatkernel.testing.agents import agent_plugin, scripted_agent
from chatkernel.testing.contract import wait_until
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio

KEY = "memory:main"
LEASE = "account:memory:main"
WHERE = ("memory", "main")


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


async def test_a_hand_over_that_does_not_settle_reads_what_came_meanwhile(
        tmp_path, redis_server, redis_prefix, monkeypatch):
    """An instance hands an account over only once its work settled, and stops reading
    the account's inbox meanwhile. When the work does not settle in time it keeps the
    account: a payload another instance queued for the account in between is in that
    inbox only, and is sent."""
    monkeypatch.setattr(cluster_module, "SHED_SECONDS", 0.05)  # the turn outlasts it
    agent = scripted_agent(gate=True)
    config = shared(redis_server, redis_prefix, 30, agent={"kind": agent.name})
    plugins = [("agent", agent_plugin(agent))]
    async with KernelHarness(tmp_path / "a", config=config, plugins=plugins) as first, \
            KernelHarness(tmp_path / "b", config=config, plugins=plugins) as second:
        cluster = first.kernel.cluster
        assert first.owns(KEY) and not second.owns(KEY)
        assert await first.channel.receive("a long turn") == "started"
        await wait_until(lambda: agent.running == 1, what="the turn")
        async with anyio.create_task_group() as tg:
            cluster._shedding = True
            tg.start_soon(cluster._shed, first.account("memory"), cluster._owned[KEY])
            await wait_until(lambda: WHERE not in cluster._positions,
                             what="the hand-over to stop reading the inbox")
            # Queued where the account is not owned: it goes to the owner's inbox.
            assert await second.send_text("memory", "chat-2", "sent from elsewhere")
            await wait_until(lambda: WHERE in cluster._positions and not cluster._shedding,
                             what="the hand-over to give up, the account kept")
        assert first.owns(KEY)
        agent.gate.set()
        await first.channel.wait_for_sent(2, timeout=10)
        await first.settle()
        await second.settle()
        assert sorted(first.channel.texts()) == ["re: a long turn", "sent from elsewhere"]
        assert second.channel.sent == []


async def test_a_send_queued_while_the_account_is_being_taken_goes_out_once(
        tmp_path, redis_server, redis_prefix):
    """A take fences the account at once but owns it only once it recovered the
    account's outbox and journal: a payload queued on the taking instance in between
    was stored pending, neither sent there nor handed to an inbox, until a next
    takeover. It now waits for the take and goes out from the new owner, once."""
    config = shared(redis_server, redis_prefix, 1)
    async with KernelHarness(tmp_path / "a", config=config) as first, \
            KernelHarness(tmp_path / "b", config=config) as second:
        assert first.owns(KEY) and not second.owns(KEY)
        cluster = second.kernel.cluster
        recovering, recovered = anyio.Event(), anyio.Event()
        replay = cluster._replay_unfinished

        async def held_replay(account):  # the take, held between fence and owning
            recovering.set()
            await recovered.wait()
            await replay(account)

        cluster._replay_unfinished = held_replay
        dies(first)
        holder, token, _ = (await second.kernel.store.leases())[LEASE]
        await second.kernel.store.release_lease(LEASE, holder, token)  # it ran out
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(10):
                await recovering.wait()
            assert not second.owns(KEY)
            tg.start_soon(second.send_text, "memory", "chat-3", "queued mid-take")
            await wait_until(lambda: KEY in cluster._taking, what="the take under way")
            recovered.set()
        await wait_until(lambda: second.owns(KEY), what="the takeover")
        await second.channel.wait_for_sent(1, timeout=10)
        await second.settle()
        assert second.channel.texts() == ["queued mid-take"]
        assert first.channel.sent == []
