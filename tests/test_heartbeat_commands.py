"""Session heartbeats from chat: ``/heartbeat`` and ``/hb`` (docs/heartbeats.md), on a manual clock."""

from __future__ import annotations

import itertools

import pytest

from chatkernel.core.turns.agents import AgentEvent
from chatkernel.core.heartbeat.prompt import SESSION_GUARD
from chatkernel.testing.agents import agent_plugin, scripted_agent
from chatkernel.testing.clock import ManualClock
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio

MINUTE = 60.0
KEY = "memory:main:chat-1"


def harness(tmp_path, agent, clock, **sections):
    # The config heartbeat (always there) is kept off the clock: these are session ones.
    sections.setdefault("heartbeat", {"every": "0"})
    return KernelHarness(tmp_path, config={"agent": {"kind": agent.name}, **sections},
                         heartbeat_clock=clock, plugins=[("test-agent", agent_plugin(agent))])


def agent_saying(heartbeat_reply):
    return scripted_agent(script=lambda r: [AgentEvent.reply(
        heartbeat_reply if r.heartbeat else f"re: {r.text}")])


def heartbeat_turns(agent):
    return [r for r in agent.requests if r.heartbeat]


_ids = itertools.count(1)


async def command(h, text, chat_id="chat-1"):
    """Send a command; returns the reply text."""
    before = len(h.channel.sent)
    outcome = await h.channel.receive(text, chat_id=chat_id, message_id=f"c{next(_ids)}")
    assert outcome == "command"
    await h.settle()
    new = h.channel.texts()[before:]
    assert len(new) == 1, new
    return new[0]


async def test_every_sets_a_heartbeat_that_runs_in_the_session_with_the_guard(tmp_path):
    agent = agent_saying("The build is red.")
    clock = ManualClock()
    async with harness(tmp_path, agent, clock) as h:
        reply = await command(h, "/heartbeat every 2m check the build on main")
        assert reply == "Heartbeat set: every 2m, first run in 2m."
        clock.advance(2 * MINUTE)
        await h.heartbeats_settled()
        [turn] = heartbeat_turns(agent)
        assert turn.session_key == KEY
        assert turn.text == f"check the build on main\n\n{SESSION_GUARD}"
        assert "do not invent work" in SESSION_GUARD
        assert h.channel.texts()[-1] == "The build is red."
        clock.advance(2 * MINUTE)
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 2


async def test_hb_alias_minimum_interval_and_usage(tmp_path):
    agent = agent_saying("HEARTBEAT_OK")
    async with harness(tmp_path, agent, ManualClock()) as h:
        assert "at least 1m" in await command(h, "/hb every 30s too often")
        assert "needs a unit" in await command(h, "/hb every 5 what unit?")
        assert "give the prompt" in await command(h, "/hb every 5m")
        assert "unknown action 'sometimes'" in await command(h, "/hb sometimes")
        assert list(h.kernel.heartbeats.jobs) == ["main"]  # no session heartbeat
        assert (await command(h, "/hb every 1m ok")).startswith("Heartbeat set")


async def test_every_replaces_an_existing_heartbeat(tmp_path):
    agent = agent_saying("HEARTBEAT_OK")
    clock = ManualClock()
    async with harness(tmp_path, agent, clock) as h:
        await command(h, "/heartbeat every 10m first prompt")
        clock.advance(5 * MINUTE)
        await h.heartbeats_settled()
        reply = await command(h, "/heartbeat every 3m second prompt")
        assert reply == "Heartbeat replaced: every 3m, first run in 3m."
        assert len(h.kernel.heartbeats.jobs) == 2  # the config one and this session's
        clock.advance(3 * MINUTE)
        await h.heartbeats_settled()
        [turn] = heartbeat_turns(agent)
        assert turn.text.startswith("second prompt")


async def test_status_shows_interval_prompt_and_time_to_next(tmp_path):
    agent = agent_saying("HEARTBEAT_OK")
    clock = ManualClock()
    async with harness(tmp_path, agent, clock) as h:
        assert (await command(h, "/heartbeat")).startswith("No heartbeat in this session.")
        await command(h, "/heartbeat every 30m look at the queue")
        clock.advance(10 * MINUTE)
        await h.heartbeats_settled()
        status = await command(h, "/heartbeat status")
        assert status == "Heartbeat: every 30m: look at the queue\nNext run in 20m."
        clock.advance(20 * MINUTE)
        await h.heartbeats_settled()
        status = await command(h, "/hb")
        assert "Next run in 30m." in status and "Last run 0s ago: ok." in status


async def test_pause_stops_and_resume_reanchors_without_a_stale_fire(tmp_path):
    agent = agent_saying("HEARTBEAT_OK")
    clock = ManualClock()
    async with harness(tmp_path, agent, clock) as h:
        await command(h, "/heartbeat every 5m check")
        assert (await command(h, "/heartbeat pause")).startswith("Heartbeat paused.")
        clock.advance(60 * MINUTE)  # many ticks missed while paused
        await h.heartbeats_settled()
        assert heartbeat_turns(agent) == []
        assert "Paused" in await command(h, "/heartbeat")
        assert await command(h, "/heartbeat resume") == "Heartbeat resumed: next run in 5m."
        await h.heartbeats_settled()
        assert heartbeat_turns(agent) == []  # no stale fire on resume
        clock.advance(5 * MINUTE)
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1


async def test_clear_removes_the_heartbeat(tmp_path):
    agent = agent_saying("HEARTBEAT_OK")
    clock = ManualClock()
    async with harness(tmp_path, agent, clock) as h:
        await command(h, "/heartbeat every 5m check")
        assert await command(h, "/heartbeat clear") == "Heartbeat cleared."
        assert await command(h, "/heartbeat clear") == "There is no heartbeat in this session."
        assert "no heartbeat in this session" in await command(h, "/heartbeat pause")
        clock.advance(60 * MINUTE)
        await h.heartbeats_settled()
        assert heartbeat_turns(agent) == []
        assert [state.id for state in await h.kernel.store.list_heartbeats()] == ["main"]


async def test_session_heartbeats_survive_a_restart(tmp_path):
    agent = agent_saying("HEARTBEAT_OK")
    clock = ManualClock()
    async with harness(tmp_path, agent, clock) as h:
        await command(h, "/heartbeat every 10m check the build")
        await command(h, "/heartbeat every 10m look at the queue", chat_id="chat-2")
        await command(h, "/heartbeat pause", chat_id="chat-2")
        clock.advance(4 * MINUTE)
    async with harness(tmp_path, agent, clock) as h:
        assert "Next run in 6m." in await command(h, "/heartbeat")
        assert "Paused" in await command(h, "/heartbeat", chat_id="chat-2")
        clock.advance(6 * MINUTE)
        await h.heartbeats_settled()
        [turn] = heartbeat_turns(agent)
        assert turn.session_key == KEY and turn.text.startswith("check the build")


async def test_tz_sets_the_user_time_zone_used_by_active_hours(tmp_path):
    agent = agent_saying("HEARTBEAT_OK")
    clock = ManualClock()  # 2024-01-15 12:00 UTC = 21:00 in Tokyo, 13:00 in Berlin
    hours = {"start": "09:00", "end": "17:00", "timezone": "user"}
    async with harness(tmp_path, agent, clock, heartbeat={"every": "0",
                                                          "active_hours": hours}) as h:
        assert "unknown time zone 'Nowhere/City'" in await command(h, "/hb tz Nowhere/City")
        assert await command(h, "/hb tz Asia/Tokyo") == "Time zone: Asia/Tokyo."
        await command(h, "/heartbeat every 5m check")
        clock.advance(5 * MINUTE)
        await h.heartbeats_settled()
        assert heartbeat_turns(agent) == []  # 21:05 in Tokyo: outside the user's hours
        assert h.kernel.metrics.heartbeat_skips.labels("quiet-hours")._value.get() == 1
        assert await command(h, "/hb tz Europe/Berlin") == "Time zone: Europe/Berlin."
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1  # 13:05 in Berlin: inside
        assert (await command(h, "/hb tz local")).startswith("Time zone: local")


async def test_status_in_a_chat_tells_the_sessions_heartbeat(tmp_path):
    agent = agent_saying("HEARTBEAT_OK")
    clock = ManualClock()
    async with harness(tmp_path, agent, clock) as h:
        assert "heartbeat: none in this session" in await command(h, "/status")
        await command(h, "/heartbeat every 10m check the build")
        clock.advance(4 * MINUTE)
        assert "heartbeat: every 10m, next in 6m" in await command(h, "/status")
        await command(h, "/heartbeat pause")
        assert "heartbeat: every 10m, paused" in await command(h, "/status")


async def test_commands_reach_a_sessions_heartbeat_through_a_view_of_it(tmp_path):
    from chatkernel import Command, hookimpl

    seen = {}

    async def probe(ctx):
        heartbeats = ctx.gateway.heartbeats
        seen["none"] = heartbeats.status(ctx.session.key)
        await heartbeats.set(ctx.session.key, 5 * MINUTE, "check the build")
        seen["set"] = heartbeats.status(ctx.session.key)
        await heartbeats.pause(ctx.session.key)
        seen["paused"] = heartbeats.status(ctx.session.key)["paused"]
        seen["resumed"] = await heartbeats.resume(ctx.session.key)
        seen["now"] = heartbeats.now()
        seen["cleared"] = (await heartbeats.clear(ctx.session.key),
                           await heartbeats.clear(ctx.session.key))
        return "done"

    class Plugin:
        @staticmethod
        @hookimpl
        def register_commands(register):
            register(Command(name="probe", handler=probe, help="the heartbeats view"))

    clock = ManualClock()
    agent = agent_saying("HEARTBEAT_OK")
    async with KernelHarness(tmp_path, config={"agent": {"kind": agent.name},
                                               "heartbeat": {"every": "0"}},
                             heartbeat_clock=clock,
                             plugins=[("test-agent", agent_plugin(agent)),
                                      ("test-probe", Plugin)]) as h:
        clock.advance(MINUTE)
        assert await command(h, "/probe") == "done"
    assert seen["none"] is None
    status = seen["set"]
    assert (status["every"], status["every_seconds"], status["prompt"], status["paused"]) == (
        "5m", 5 * MINUTE, "check the build", False)
    assert status["next_in_seconds"] == 5 * MINUTE
    with pytest.raises(TypeError):  # a view: what a command reads does not write back
        status["paused"] = True
    assert seen["paused"] is True and seen["resumed"]["paused"] is False
    assert seen["now"] == clock.now()
    assert seen["cleared"] == (True, False)
