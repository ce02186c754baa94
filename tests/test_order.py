"""Everything the kernel sends to a chat leaves in the order its causes arrived:
replies, command answers and hints (chatkernel.core.outbound.order)."""

from __future__ import annotations

import pytest

from chatkernel.core.inbound.pipeline import BUSY_HINT
from chatkernel.sdk.models import InboundMessage
from chatkernel.testing.agents import agent_plugin, scripted_agent
from chatkernel.testing.contract import wait_until
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio


def harness(tmp_path, agent=None, queue=None):
    if agent is None:
        return KernelHarness(tmp_path, config={"queue": dict(queue or {})})
    return KernelHarness(tmp_path, config={"agent": {"kind": agent.name},
                                           "queue": dict(queue or {})},
                         plugins=[("agent", agent_plugin(agent))])


async def wait_for_requests(agent, count, timeout=5.0):
    await wait_until(lambda: len(agent.requests) >= count, timeout=timeout,
                     what=f"{count} turns", interval=0.005)


def message(text, number):
    return InboundMessage(channel="memory", account="main", chat_id="chat-1",
                          message_id=f"m{number}", sender_id="user-1", text=text)


async def test_the_order_holds_for_a_long_poll_batch(tmp_path):
    # What receive loops use: a batch journaled at once, then processed in the chat's line
    # with nothing to wait for between the messages.
    async with harness(tmp_path, queue={"mode": "followup"}) as h:
        batch = [message(text, number)
                 for number, text in enumerate(["one", "/whoami", "two", "/help", "three"])]
        assert await h.kernel.receiver.many(batch) == ["accepted"] * 5
        await h.settle()
        texts = h.channel.texts()
        assert len(texts) == 5
        assert texts[0] == "one" and "user-1" in texts[1] and texts[2] == "two"
        assert texts[3].startswith("Commands:") and texts[4] == "three"


async def test_a_command_waits_for_earlier_turns_only(tmp_path):
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent, {"mode": "followup"}) as h:
        await h.channel.receive("first")
        await wait_for_requests(agent, 1)  # its turn runs, held at the gate
        assert await h.channel.receive("queued before") == "queued"
        assert await h.channel.receive("/whoami") == "command"
        assert await h.channel.receive("after") == "queued"
        # Only the hint is out: it speaks for the running turn, so it takes its place.
        await h.channel.wait_for_sent(1)
        await h.kernel.outbox.wait_idle()
        assert h.channel.texts() == [BUSY_HINT]
        assert h.kernel.order.held("memory:main:chat-1") == 1
        agent.gate.set()
        await h.settle()
        texts = h.channel.texts()
        assert texts[:3] == [BUSY_HINT, "re: first", "re: queued before"]
        assert "user-1" in texts[3]
        assert texts[4:] == ["re: after"]  # arrived after the command: not waited for
        assert h.kernel.order.held("memory:main:chat-1") == 0


async def test_an_interrupted_or_dropped_turn_releases_the_answers_behind_it(tmp_path):
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent, {"mode": "interrupt"}) as h:
        await h.channel.receive("slow")
        await wait_for_requests(agent, 1)
        assert await h.channel.receive("/whoami") == "command"
        assert h.channel.texts() == []
        assert await h.channel.receive("newer") == "interrupted"
        await wait_for_requests(agent, 2)  # the newer turn runs: the slow one is over
        agent.gate.set()
        await h.settle()
        texts = h.channel.texts()
        assert "user-1" in texts[0]  # the interrupted turn said nothing
        assert texts[1:] == ["re: newer"]
        assert h.kernel.order.held("memory:main:chat-1") == 0
