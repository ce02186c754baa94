"""Per-chat memory is bounded by configuration: sessions, routes and lanes are dropped
when idle beyond their cap and come back from the store intact."""

from __future__ import annotations

import pytest

from chatkernel.core.inbound.sessions import TOUCH_PERSIST_SECONDS, Sessions
from chatkernel.core.store.sqlite import SQLiteStore
from chatkernel.testing.agents import agent_plugin, scripted_agent
from chatkernel.testing.contract import wait_until
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio

CAP = 100


def harness(tmp_path, agent=None):
    config = {"sessions": {"cache_size": CAP}}
    plugins = []
    if agent is not None:
        plugins.append(("test-agent", agent_plugin(agent)))
        config["agent"] = {"kind": agent.name}
    return KernelHarness(tmp_path, config=config, plugins=plugins)


@pytest.mark.slow
async def test_caches_stay_under_their_caps_across_many_chats(tmp_path):
    async with harness(tmp_path) as h:
        for n in range(3 * CAP):
            await h.channel.receive(f"hello {n}", chat_id=f"chat-{n}")
        await h.settle()
        assert len(h.channel.sent) == 3 * CAP
        kernel = h.kernel
        assert len(kernel.sessions) <= CAP
        assert kernel.sessions.cached_routes <= CAP
        assert kernel.queue.lanes == {}  # every lane idle, so none kept
        # The least recently used went; the most recent stayed.
        assert kernel.sessions.cached("memory:main:chat-0") is None
        assert kernel.sessions.cached(f"memory:main:chat-{3 * CAP - 1}") is not None


@pytest.mark.slow
async def test_an_evicted_session_comes_back_from_the_store_intact(tmp_path):
    async with harness(tmp_path) as h:
        kernel = h.kernel
        await h.channel.receive("/queue followup cap:5", chat_id="keep")
        await h.channel.receive("hello", chat_id="keep", is_group=True)
        await h.settle()
        key = "memory:main:keep"
        record = kernel.sessions.cached(key)
        await kernel.sessions.update_settings(record, send="deny")
        before = (record.session_id, record.created_at, record.settings, record.chat_id)
        route_before = await kernel.sessions.route(key)
        # Active for a while since it was last written: written when it is dropped.
        record.last_active_at += TOUCH_PERSIST_SECONDS

        for n in range(2 * CAP):
            await h.channel.receive("x", chat_id=f"other-{n}")
        await h.settle()
        assert kernel.sessions.cached(key) is None

        again = await kernel.sessions.get(key)
        assert (again.session_id, again.created_at, again.settings, again.chat_id) == before
        assert again.settings == {"queue": {"mode": "followup", "cap": 5}, "send": "deny"}
        assert again.last_active_at == record.last_active_at
        assert await kernel.sessions.route(key) == route_before
        assert kernel.queue_settings(key).mode == "followup"
        # ...and the session's own send setting still holds for a proactive send.
        sent = len(h.channel.sent)
        await kernel.replies.send_text(kernel.accounts["memory:main"], route_before,
                                           "not to be sent",
                                           session_key=key, session_id=again.session_id)
        await h.settle()
        assert len(h.channel.sent) == sent


@pytest.mark.slow
async def test_a_session_in_use_is_not_dropped(tmp_path):
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent) as h:
        kernel = h.kernel
        await h.channel.receive("slow", chat_id="busy")
        await wait_until(lambda: agent.running >= 1, timeout=5, what="the turn")
        for n in range(2 * CAP):
            await h.channel.receive("x", chat_id=f"other-{n}")
        assert kernel.sessions.cached("memory:main:busy") is not None
        agent.gate.set()
        await h.settle()


async def test_sessions_checks_its_cap(tmp_path):
    async with SQLiteStore.at(":memory:") as store:
        with pytest.raises(ValueError, match="cache_size must be at least 1"):
            Sessions(store, cache_size=0)
