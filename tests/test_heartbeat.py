"""Heartbeats (docs/heartbeats.md) on a real in-process kernel, driven by a manual clock.

Nothing here waits on the wall clock: the scheduler sleeps on a
:class:`ManualClock` that only the test moves, and every assertion is about
what happened (turns, sends, skips), never about how long it took.
"""

from __future__ import annotations

import anyio
import pytest

from chatkernel import hookimpl
from chatkernel.core.turns.agents import AgentEvent
from chatkernel.core.config import KernelConfig
from chatkernel.core.heartbeat.jobs import MAIN
from chatkernel.core.heartbeat.prompt import DEFAULT_PROMPT
from chatkernel.core.heartbeat.settings import merged_settings
from chatkernel.core.heartbeat.targets import NO_TARGET_SESSION
from chatkernel.core.heartbeat.ack import HEARTBEAT_TOKEN
from chatkernel.testing.agents import agent_plugin, scripted_agent
from chatkernel.testing.clock import ManualClock
from chatkernel.testing.contract import wait_until
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio

MINUTE = 60.0


def replies(heartbeat_reply="HEARTBEAT_OK"):
    """A script: heartbeat turns answer ``heartbeat_reply`` (a str or a callable of the
    request), user turns ``re: <text>``."""
    def script(request):
        if request.heartbeat:
            text = heartbeat_reply(request) if callable(heartbeat_reply) else heartbeat_reply
            return [AgentEvent.reply(text)] if text else []
        return [AgentEvent.reply(f"re: {request.text}")]
    return script


def harness(tmp_path, agent, *, heartbeat=None, clock=None, plugins=(), **sections):
    config = {"agent": {"kind": agent.name}, **sections}
    if heartbeat is not None:
        config["heartbeat"] = heartbeat
    return KernelHarness(tmp_path, config=config, heartbeat_clock=clock,
                         plugins=[("test-agent", agent_plugin(agent)), *plugins])


def heartbeat_turns(agent):
    return [r for r in agent.requests if r.heartbeat]


def skips(h, reason):
    return h.kernel.metrics.heartbeat_skips.labels(reason)._value.get()


def runs(h, outcome):
    return h.kernel.metrics.heartbeats.labels(outcome)._value.get()


def heartbeat_gated_agent(reply):
    """User turns answer at once; heartbeat turns wait for ``Agent.heartbeat_gate``."""
    base = scripted_agent(script=replies(reply))

    class Agent(base):  # type: ignore[misc, valid-type]
        heartbeat_gate: anyio.Event

        async def turn(self, request):
            if not request.heartbeat:
                async for event in super().turn(request):
                    yield event
                return
            type(self).requests.append(request)
            await type(self).heartbeat_gate.wait()
            yield AgentEvent.reply(reply)

    Agent.heartbeat_gate = anyio.Event()
    return Agent


async def wait_for(predicate, timeout=5.0):
    await wait_until(predicate, timeout=timeout, interval=0.002)


# -- config ---------------------------------------------------------------------------------


def test_agent_and_session_settings_merge_over_the_config():
    config = KernelConfig.model_validate({
        "heartbeat": {"every": "1h", "target": "last", "ack_max_chars": 50,
                      "active_hours": {"start": "08:00", "end": "20:00"}},
        "agent": {"heartbeat": {"every": "45m",
                                "active_hours": {"timezone": "Europe/Berlin"}}},
    })
    merged = merged_settings(config)
    assert (merged.every, merged.target, merged.ack_max_chars) == ("45m", "last", 50)
    assert merged.active_hours.model_dump() == {"start": "08:00", "end": "20:00",
                                                "timezone": "Europe/Berlin"}
    session = merged_settings(config, {"every": "2m", "prompt": "check the build"})
    assert (session.every, session.prompt, session.target) == ("2m", "check the build", "last")
    defaults = merged_settings(KernelConfig())
    assert (defaults.every, defaults.prompt, defaults.target, defaults.direct_policy,
            defaults.ack_max_chars) == ("30m", None, "none", "allow", 300)
    assert "HEARTBEAT.md" in DEFAULT_PROMPT and HEARTBEAT_TOKEN in DEFAULT_PROMPT


async def test_without_a_heartbeat_table_the_config_heartbeat_is_off(tmp_path):
    agent = scripted_agent(script=replies("all quiet"))
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock) as h:
        scheduler = h.kernel.heartbeats
        status = scheduler.status()
        assert (status["loop"], status["scheduled"]) == (False, False)
        [main] = status["heartbeats"]
        assert (main["id"], main["off"], main["every_seconds"]) == ("main", True, 0)
        clock.advance(2 * 86400)  # two days: no turn at all, so nothing paid for
        await h.heartbeats_settled()
        assert heartbeat_turns(agent) == []
        await scheduler.wake_up("check now", mode="now")  # asked for by hand: it runs
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1
        assert h.channel.sent == []


@pytest.mark.parametrize(("table", "agent_table"), [
    ({}, None),  # an empty table asks for it
    ({"target": "none"}, None),
    (None, {"ack_max_chars": 100}),
], ids=["empty table", "a key", "agent table"])
async def test_a_heartbeat_table_turns_it_on_every_30m_by_default(tmp_path, table,
                                                                 agent_table):
    agent = scripted_agent(script=replies("all quiet"))
    clock = ManualClock()
    config = {"agent": {"kind": agent.name}}
    if table is not None:
        config["heartbeat"] = table
    if agent_table is not None:
        config["agent"]["heartbeat"] = agent_table
    async with KernelHarness(tmp_path, config=config, heartbeat_clock=clock,
                             plugins=[("test-agent", agent_plugin(agent))]) as h:
        status = h.kernel.heartbeats.status()
        assert (status["loop"], status["scheduled"]) == (True, True)
        assert status["heartbeats"][0]["off"] is False
        clock.advance(29 * 60)
        await h.heartbeats_settled()
        assert heartbeat_turns(agent) == []
        clock.advance(60)
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1
        assert h.channel.sent == []  # target none: the run happens, nothing is sent


async def test_every_zero_disables_the_config_heartbeat(tmp_path):
    agent = scripted_agent(script=replies())
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock, heartbeat={"every": "0"}) as h:
        assert not h.kernel.heartbeats.status()["loop"]
        clock.advance(24 * 3600)
        await h.heartbeats_settled()
        assert heartbeat_turns(agent) == []


async def test_unknown_target_channel_is_a_config_error(tmp_path):
    from chatkernel.sdk.errors import ConfigError

    agent = scripted_agent(script=replies())
    with pytest.raises(ConfigError, match="no running channel 'telegram'") as info:
        async with harness(tmp_path, agent, heartbeat={"target": "telegram"}):
            pass
    assert info.value.key == "heartbeat.target"


# -- the scheduler --------------------------------------------------------------------------


async def test_fires_one_interval_after_start_then_reanchors(tmp_path):
    agent = scripted_agent(script=replies())
    clock = ManualClock()
    start = clock.now()
    async with harness(tmp_path, agent, clock=clock, heartbeat={"every": "30m"}) as h:
        clock.advance(29 * MINUTE)
        await h.heartbeats_settled()
        assert heartbeat_turns(agent) == []
        clock.advance(1 * MINUTE)
        await h.heartbeats_settled()
        [turn] = heartbeat_turns(agent)
        assert turn.text == DEFAULT_PROMPT
        assert turn.session_key == NO_TARGET_SESSION
        assert turn.envelope.startswith("[heartbeat | ")
        state = await h.kernel.store.get_heartbeat(MAIN)
        assert state.anchor_at == state.last_run_at == start + 30 * MINUTE
        [info] = h.kernel.heartbeats.status()["heartbeats"]
        assert info["next_in_seconds"] == 30 * MINUTE
        assert h.channel.sent == []  # target none: nothing is sent
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 2


async def test_missed_ticks_coalesce_into_one_run(tmp_path):
    agent = scripted_agent(script=replies())
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock, heartbeat={"every": "30m"}) as h:
        clock.advance(5 * 3600)  # ten intervals at once
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1
        state = await h.kernel.store.get_heartbeat(MAIN)
        assert state.anchor_at == clock.now()
        clock.advance(29 * MINUTE)
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1


async def test_tick_is_idempotent_and_reports_what_it_decided(tmp_path):
    agent = scripted_agent(script=replies())
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock, heartbeat={"every": "30m"}) as h:
        scheduler = h.kernel.heartbeats
        assert await scheduler.tick() == []
        clock.set(clock.now() + 31 * MINUTE)
        decided = await scheduler.tick()  # maybe the loop got there first
        await h.heartbeats_settled()
        assert [r.outcome for r in decided] in ([], ["started"])
        assert await scheduler.tick() == []
        assert len(heartbeat_turns(agent)) == 1


# -- the reply contract in heartbeat turns --------------------------------------------------


async def say_hi(h, chat_id="chat-1", **fields):
    await h.channel.receive("hi", chat_id=chat_id, **fields)
    await h.settle()


async def test_an_alert_goes_to_the_last_active_chat(tmp_path):
    agent = scripted_agent(script=replies("The nightly backup failed."))
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock,
                       heartbeat={"every": "30m", "target": "last"}) as h:
        await say_hi(h, "chat-7")
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        [turn] = heartbeat_turns(agent)
        assert turn.session_key == "memory:main:chat-7"
        assert [(s.route.chat_id, s.text) for s in h.channel.sent] == [
            ("chat-7", "re: hi"), ("chat-7", "The nightly backup failed.")]
        assert runs(h, "alert") == 1
        # the alert is in the session's log: the user can answer it in context
        log = await h.kernel.store.read_log("memory:main:chat-7")
        assert [(e.role, e.text) for e in log][-2:] == [
            ("heartbeat", DEFAULT_PROMPT), ("assistant", "The nightly backup failed.")]


@pytest.mark.parametrize("reply", ["HEARTBEAT_OK", "Nothing new. HEARTBEAT_OK",
                                   "HEARTBEAT_OK all quiet", ""])
async def test_an_acknowledgement_is_dropped(tmp_path, reply):
    agent = scripted_agent(script=replies(reply))
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock,
                       heartbeat={"every": "30m", "target": "last"}) as h:
        await say_hi(h)
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1
        assert h.channel.texts() == ["re: hi"]
        assert runs(h, "ok") == 1


@pytest.mark.parametrize("extra,sent", [(0, False), (1, True)])
async def test_ack_max_chars_is_the_most_that_rides_along(tmp_path, extra, sent):
    body = "y" * (20 + extra)
    agent = scripted_agent(script=replies(f"{HEARTBEAT_TOKEN} {body}"))
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock,
                       heartbeat={"every": "30m", "target": "last", "ack_max_chars": 20}) as h:
        await say_hi(h)
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert h.channel.texts() == (["re: hi", body] if sent else ["re: hi"])


async def test_the_token_in_the_middle_means_nothing(tmp_path):
    reply = "Disk at 91% HEARTBEAT_OK but rising"
    agent = scripted_agent(script=replies(reply))
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock,
                       heartbeat={"every": "30m", "target": "last"}) as h:
        await say_hi(h)
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert h.channel.texts() == ["re: hi", reply]


async def test_outside_heartbeats_a_stray_token_is_stripped_or_the_reply_dropped(tmp_path):
    agent = scripted_agent(script=lambda r: [AgentEvent.reply(
        "HEARTBEAT_OK" if r.text == "ping" else f"Done: {r.text}\n\nHEARTBEAT_OK")])
    async with harness(tmp_path, agent) as h:
        await h.channel.receive("build it")
        await h.settle()
        await h.channel.receive("ping")
        await h.settle()
        assert h.channel.texts() == ["Done: build it"]
        assert await h.kernel.store.unfinished_inbound() == []


# -- visibility ---------------------------------------------------------------------------


class ShyPlugin:
    """A channel plugin whose default is to hide alerts and show acks."""

    @staticmethod
    @hookimpl
    def heartbeat_visibility(channel, account):
        return {"show_alerts": False, "show_ok": True}


def accounts_config(main=None, other=None):
    accounts = {"main": {"allow_from": ["*"]}, "other": {"allow_from": ["*"]}}
    if main is not None:
        accounts["main"]["heartbeat"] = main
    if other is not None:
        accounts["other"]["heartbeat"] = other
    return accounts


async def test_visibility_precedence_account_channel_defaults_plugin_builtin(tmp_path):
    from chatkernel.core.heartbeat.settings import visibility_for

    agent = scripted_agent(script=replies())
    channels = {"memory": {"accounts": accounts_config(main={"show_ok": False}),
                           "heartbeat": {"show_alerts": True}},
                "defaults": {"heartbeat": {"use_indicator": False, "show_ok": True,
                                           "show_alerts": False}}}
    async with harness(tmp_path, agent, channels=channels,
                       plugins=[("shy", ShyPlugin)]) as h:
        kernel = h.kernel
        main, other = kernel.accounts["memory:main"], kernel.accounts["memory:other"]
        # account > channel > channels.defaults > plugin > built-in
        assert visibility_for(kernel.pm, kernel.config, main) == {
            "show_ok": False, "show_alerts": True, "use_indicator": False}
        assert visibility_for(kernel.pm, kernel.config, other) == {
            "show_ok": True, "show_alerts": True, "use_indicator": False}
        # no destination: channels.defaults over the built-in defaults
        assert visibility_for(kernel.pm, kernel.config, None) == {
            "show_ok": True, "show_alerts": False, "use_indicator": False}
    async with harness(tmp_path / "b", agent, plugins=[("shy", ShyPlugin)]) as h:
        # nothing configured: the plugin's defaults over the built-in ones
        assert visibility_for(h.kernel.pm, h.kernel.config, h.kernel.accounts["memory:main"]) \
            == {"show_ok": True, "show_alerts": False, "use_indicator": True}
    async with harness(tmp_path / "c", agent) as h:
        assert visibility_for(h.kernel.pm, h.kernel.config, h.kernel.accounts["memory:main"]) \
            == {"show_ok": False, "show_alerts": True, "use_indicator": True}


async def test_all_three_off_skips_the_run(tmp_path):
    agent = scripted_agent(script=replies("alert!"))
    clock = ManualClock()
    off = {"show_ok": False, "show_alerts": False, "use_indicator": False}
    channels = {"memory": {"accounts": accounts_config(main=off)}}
    async with harness(tmp_path, agent, clock=clock, channels=channels,
                       heartbeat={"every": "30m", "target": "last"}) as h:
        await say_hi(h)
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert heartbeat_turns(agent) == []
        assert skips(h, "alerts-disabled") == 1
        state = await h.kernel.store.get_heartbeat(MAIN)
        assert state.last_outcome == "skipped: alerts-disabled"
        assert state.anchor_at == clock.now()  # the skip counts as the tick


async def test_alerts_off_still_runs_and_suppresses_the_alert(tmp_path):
    agent = scripted_agent(script=replies("alert!"))
    clock = ManualClock()
    channels = {"memory": {"accounts": accounts_config(), "heartbeat": {"show_alerts": False}}}
    async with harness(tmp_path, agent, clock=clock, channels=channels,
                       heartbeat={"every": "30m", "target": "last"}) as h:
        await say_hi(h)
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1
        assert h.channel.texts() == ["re: hi"]
        assert skips(h, "alerts-hidden") == 1


async def test_show_ok_sends_the_acknowledgement(tmp_path):
    agent = scripted_agent(script=replies("HEARTBEAT_OK"))
    clock = ManualClock()
    channels = {"memory": {"accounts": accounts_config(main={"show_ok": True})}}
    async with harness(tmp_path, agent, clock=clock, channels=channels,
                       heartbeat={"every": "30m", "target": "last"}) as h:
        await say_hi(h)
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert h.channel.texts() == ["re: hi", HEARTBEAT_TOKEN]


@pytest.mark.parametrize("use_indicator", [True, False])
async def test_the_indicator_drives_typing_and_an_event(tmp_path, use_indicator):
    agent = heartbeat_gated_agent("HEARTBEAT_OK")
    clock = ManualClock()
    channels = {"memory": {"accounts": accounts_config(
        main={"use_indicator": use_indicator, "show_alerts": True})}}
    async with harness(tmp_path, agent, clock=clock, channels=channels,
                       heartbeat={"every": "30m", "target": "last"}) as h:
        await say_hi(h)
        events = []
        h.kernel.heartbeats.listeners.append(events.append)
        typed_before = len(h.channel.indications)
        clock.advance(30 * MINUTE)
        await wait_for(lambda: len(heartbeat_turns(agent)) == 1)  # the turn is held open
        if use_indicator:
            await wait_for(lambda: len(h.channel.indications) > typed_before)
            assert h.channel.indications[-1].chat_id == "chat-1"
        else:
            for _ in range(20):  # give the indicator task every chance to show one
                await anyio.sleep(0)
        agent.heartbeat_gate.set()
        await h.heartbeats_settled()
        if use_indicator:
            assert [(e.heartbeat, e.status) for e in events] == [(MAIN, "running"),
                                                                  (MAIN, "ok")]
        else:
            assert len(h.channel.indications) == typed_before and events == []


# -- HEARTBEAT.md -------------------------------------------------------------------------

TASKS_FILE = """\
# Heartbeat

tasks:
  - name: inbox
    interval: 30m
    prompt: Look through the inbox.
  - name: backups
    interval: 2h
    prompt: Check the backup log.

Production is on host blue.
"""


def write_heartbeat_file(h_or_path, text):
    workspace = h_or_path / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "HEARTBEAT.md").write_text(text)


async def test_an_effectively_empty_file_skips_the_run(tmp_path):
    write_heartbeat_file(tmp_path, "# Heartbeat\n\n## Nothing yet\n\n")
    agent = scripted_agent(script=replies())
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock, heartbeat={"every": "30m"}) as h:
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert heartbeat_turns(agent) == []
        assert skips(h, "empty-heartbeat-file") == 1
        write_heartbeat_file(tmp_path, "# Heartbeat\n- watch the queue\n")
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1


async def test_a_missing_file_runs_anyway(tmp_path):
    agent = scripted_agent(script=replies())
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock, heartbeat={"every": "30m"}) as h:
        assert not (h.kernel.workspace / "HEARTBEAT.md").exists()
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1


async def test_only_due_tasks_go_into_the_prompt_and_none_due_skips(tmp_path):
    write_heartbeat_file(tmp_path, TASKS_FILE)
    agent = scripted_agent(script=replies())
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock, heartbeat={"every": "30m"}) as h:
        clock.advance(30 * MINUTE)  # both tasks are due the first time
        await h.heartbeats_settled()
        first = heartbeat_turns(agent)[-1]
        assert first.meta["tasks"] == ["inbox", "backups"]
        assert "Production is on host blue." in first.text  # the rest is context
        assert "tasks:" not in first.text
        clock.advance(30 * MINUTE)  # only inbox (30m) is due again
        await h.heartbeats_settled()
        second = heartbeat_turns(agent)[-1]
        assert second.meta["tasks"] == ["inbox"]
        assert "- inbox (every 30m): Look through the inbox." in second.text
        assert "backup" not in second.text
        state = await h.kernel.store.get_heartbeat(MAIN)
        assert state.task_runs == {"inbox": clock.now(), "backups": clock.now() - 30 * MINUTE}


async def test_no_task_due_skips_the_run(tmp_path):
    write_heartbeat_file(tmp_path, "tasks:\n  - name: weekly\n    interval: 7d\n"
                                   "    prompt: Review the week.\n")
    agent = scripted_agent(script=replies())
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock, heartbeat={"every": "30m"}) as h:
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1
        assert skips(h, "no-tasks-due") == 1


async def test_a_task_advances_only_after_a_completed_run(tmp_path):
    write_heartbeat_file(tmp_path, TASKS_FILE)
    failing = {"on": True}

    def script(request):
        if request.heartbeat and failing["on"]:
            return [AgentEvent.error("model unavailable")]
        return replies()(request)

    agent = scripted_agent(script=script)
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock, heartbeat={"every": "30m"}) as h:
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert runs(h, "error") == 1
        state = await h.kernel.store.get_heartbeat(MAIN)
        assert state.task_runs == {}
        failing["on"] = False
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert heartbeat_turns(agent)[-1].meta["tasks"] == ["inbox", "backups"]
        state = await h.kernel.store.get_heartbeat(MAIN)
        assert state.task_runs == {"inbox": clock.now(), "backups": clock.now()}


async def test_session_heartbeats_ignore_heartbeat_md(tmp_path):
    write_heartbeat_file(tmp_path, "# empty\n")
    agent = scripted_agent(script=replies("ok then"))
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock) as h:
        await say_hi(h)
        await h.kernel.heartbeats.set_session("memory:main:chat-1", 2 * MINUTE, "Check CI.")
        clock.advance(2 * MINUTE)
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1


# -- delivery ----------------------------------------------------------------------------


async def test_a_channel_target_with_to_and_account(tmp_path):
    agent = scripted_agent(script=replies("alert for ops"))
    clock = ManualClock()
    channels = {"memory": {"accounts": accounts_config()}}
    async with harness(tmp_path, agent, clock=clock, channels=channels,
                       heartbeat={"every": "30m", "target": "memory", "to": "ops-room",
                                  "account": "other"}) as h:
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        other = h.account_channel("other")
        assert [(s.route.chat_id, s.text) for s in other.sent] == [("ops-room", "alert for ops")]
        assert h.channel.sent == []
        assert heartbeat_turns(agent)[0].session_key == "memory:other:ops-room"


async def test_target_last_picks_the_most_recent_chat_across_accounts(tmp_path):
    agent = scripted_agent(script=replies("psst"))
    clock = ManualClock()
    channels = {"memory": {"accounts": accounts_config()}}
    async with harness(tmp_path, agent, clock=clock, channels=channels,
                       heartbeat={"every": "30m", "target": "last"}) as h:
        await say_hi(h, "chat-a")
        # real time: session activity is stamped by the wall clock, the next chat's later
        await anyio.sleep(0.01)
        await h.account_channel("other").receive("hey", chat_id="chat-b")
        await h.settle()
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert h.account_channel("other").texts() == ["re: hey", "psst"]


async def test_direct_policy_block_suppresses_direct_chats_only(tmp_path):
    agent = scripted_agent(script=replies("alert!"))
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock,
                       heartbeat={"every": "30m", "target": "last",
                                  "direct_policy": "block"}) as h:
        await say_hi(h, "dm-1")
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1  # the run happens
        assert h.channel.texts() == ["re: hi"]
        assert skips(h, "dm-blocked") == 1
        await h.channel.receive("@bot hi", chat_id="group-1", is_group=True, mentions_bot=True)
        await h.settle()
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert h.channel.texts("group-1")[-1] == "alert!"


async def test_no_destination_runs_and_sends_nothing(tmp_path):
    agent = scripted_agent(script=replies("alert!"))
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock,
                       heartbeat={"every": "30m", "target": "last"}) as h:
        clock.advance(30 * MINUTE)  # nobody has written yet: no last chat
        await h.heartbeats_settled()
        [turn] = heartbeat_turns(agent)
        assert turn.session_key == NO_TARGET_SESSION
        assert h.channel.sent == []
        assert skips(h, "no-target") == 1
        log = await h.kernel.store.read_log(NO_TARGET_SESSION)
        assert log[-1].meta["not_sent"] == "no-target" and log[-1].text == "alert!"


# -- idle only, user messages win, own lane ---------------------------------------------------


async def test_a_busy_session_defers_the_heartbeat_and_missed_ticks_coalesce(tmp_path):
    agent = scripted_agent(gate=True, script=replies("alert!"))
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock,
                       heartbeat={"every": "30m", "target": "last"}) as h:
        scheduler = h.kernel.heartbeats
        await h.channel.receive("a long job")
        await wait_for(lambda: len(agent.requests) == 1)
        for _ in range(6):  # three hours of a busy session
            clock.advance(30 * MINUTE)
            await wait_for(scheduler.quiescent)
        assert heartbeat_turns(agent) == []
        assert scheduler.jobs[MAIN].waiting_for == "memory:main:chat-1"
        assert [r.outcome for r in scheduler.history] == ["waiting"]
        agent.gate.set()  # the user's turn ends: the next idle moment
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1  # one run, not six
        assert h.channel.texts() == ["re: a long job", "alert!"]
        state = await h.kernel.store.get_heartbeat(MAIN)
        assert state.anchor_at == clock.now()  # re-anchored on fire


async def test_a_user_message_preempts_a_running_heartbeat(tmp_path):
    agent = heartbeat_gated_agent("alert!")
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock,
                       heartbeat={"every": "30m", "target": "last"}) as h:
        await say_hi(h)
        clock.advance(30 * MINUTE)
        await wait_for(lambda: len(heartbeat_turns(agent)) == 1)
        await h.channel.receive("urgent!")
        await h.channel.wait_for_sent(2)
        assert h.channel.texts() == ["re: hi", "re: urgent!"]
        # the heartbeat yielded, and comes back when the session is idle again
        await wait_for(lambda: len(heartbeat_turns(agent)) == 2)
        assert runs(h, "preempted") == 1
        agent.heartbeat_gate.set()
        await h.heartbeats_settled()
        assert h.channel.texts() == ["re: hi", "re: urgent!", "alert!"]
        assert runs(h, "alert") == 1


async def test_heartbeats_never_take_a_queue_worker(tmp_path):
    agent = heartbeat_gated_agent("HEARTBEAT_OK")
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock, queue={"max_concurrent": 1},
                       heartbeat={"every": "30m"}) as h:
        clock.advance(30 * MINUTE)
        await wait_for(lambda: len(heartbeat_turns(agent)) == 1)
        await h.channel.receive("still there?")
        await h.channel.wait_for_sent(1)  # answered while the heartbeat runs
        assert h.kernel.heartbeats.jobs[MAIN].running
        agent.heartbeat_gate.set()
        await h.heartbeats_settled()


async def test_heartbeat_replies_do_not_count_as_session_activity(tmp_path):
    agent = scripted_agent(script=replies("something to say"))
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock) as h:
        kernel = h.kernel
        await say_hi(h, "chat-a")
        await kernel.heartbeats.set_session("memory:main:chat-a", 5 * MINUTE, "Anything new?")
        await say_hi(h, "chat-b")  # the last active chat is now chat-b
        await kernel.inbound.flush_last_chats()
        record = await kernel.sessions.get("memory:main:chat-a")
        active_before = record.last_active_at
        stored_before = (await kernel.store.get_session("memory:main:chat-a")).last_active_at
        clock.advance(5 * MINUTE)
        await h.heartbeats_settled()
        await kernel.inbound.flush_last_chats()
        assert h.channel.texts("chat-a") == ["re: hi", "something to say"]
        assert (await kernel.sessions.get("memory:main:chat-a")).last_active_at == active_before
        assert (await kernel.store.get_session("memory:main:chat-a")).last_active_at \
            == stored_before
        main = kernel.accounts["memory:main"]
        assert kernel.inbound.last_chat(main)["chat_id"] == "chat-b"
        assert (await kernel.store.get_account_state("memory", "main", "last_chat"))[
            "chat_id"] == "chat-b"


# -- active hours ----------------------------------------------------------------------------

from datetime import datetime, timezone  # noqa: E402
from zoneinfo import ZoneInfo  # noqa: E402

from chatkernel.core.config import ActiveHours  # noqa: E402
from chatkernel.core.heartbeat.hours import in_active_hours, next_window_start, zone_for  # noqa: E402

UTC = ZoneInfo("UTC")


def at(text, zone=UTC):
    return datetime.fromisoformat(text).replace(tzinfo=zone).timestamp()


@pytest.mark.parametrize("start,end,clock,inside", [
    ("09:00", "17:00", "08:59", False), ("09:00", "17:00", "09:00", True),
    ("09:00", "17:00", "16:59", True), ("09:00", "17:00", "17:00", False),
    ("22:00", "06:00", "23:30", True), ("22:00", "06:00", "00:00", True),
    ("22:00", "06:00", "05:59", True), ("22:00", "06:00", "06:00", False),
    ("22:00", "06:00", "12:00", False), ("22:00", "24:00", "23:59", True),
    ("22:00", "24:00", "00:00", False), ("00:00", "24:00", "03:00", True),
    ("08:00", "08:00", "08:00", False), ("08:00", "08:00", "20:00", False),
])
def test_active_hours_window(start, end, clock, inside):
    hours = ActiveHours(start=start, end=end, timezone="UTC")
    assert in_active_hours(at(f"2024-01-15T{clock}"), hours, UTC) is inside


def test_active_hours_follow_the_time_zone():
    hours = ActiveHours(start="09:00", end="17:00", timezone="America/New_York")
    noon_utc = at("2024-01-15T12:00")  # 07:00 in New York, 21:00 in Tokyo
    assert not in_active_hours(noon_utc, hours, ZoneInfo("America/New_York"))
    assert in_active_hours(at("2024-01-15T15:00"), hours, ZoneInfo("America/New_York"))
    assert not in_active_hours(noon_utc, hours, ZoneInfo("Asia/Tokyo"))
    assert in_active_hours(noon_utc, hours, ZoneInfo("Europe/Berlin"))  # 13:00


def test_next_window_start_across_midnight_dst_and_empty_windows():
    night = ActiveHours(start="22:00", end="06:00")
    assert next_window_start(at("2024-01-15T12:00"), night, UTC) == at("2024-01-15T22:00")
    day = ActiveHours(start="09:00", end="17:00")
    assert next_window_start(at("2024-01-15T18:00"), day, UTC) == at("2024-01-16T09:00")
    berlin = ZoneInfo("Europe/Berlin")  # clocks go forward on 2024-03-31
    opening = next_window_start(at("2024-03-30T20:00", berlin), day, berlin)
    assert datetime.fromtimestamp(opening, timezone.utc).isoformat() == \
        "2024-03-31T07:00:00+00:00"
    assert next_window_start(at("2024-01-15T12:00"), ActiveHours(start="08:00", end="08:00"),
                             UTC) is None


def test_zone_names():
    assert zone_for("local") is None
    assert zone_for("user") is None  # no session zone: local
    assert zone_for("user", "Asia/Tokyo") == ZoneInfo("Asia/Tokyo")
    assert zone_for("Europe/Berlin", "Asia/Tokyo") == ZoneInfo("Europe/Berlin")


async def test_outside_active_hours_skips_once_then_fires_when_the_window_opens(tmp_path):
    agent = scripted_agent(script=replies())
    clock = ManualClock(at("2024-01-15T12:00"))  # 21:00 in Tokyo
    hours = {"start": "22:00", "end": "06:00", "timezone": "Asia/Tokyo"}
    async with harness(tmp_path, agent, clock=clock,
                       heartbeat={"every": "30m", "active_hours": hours}) as h:
        clock.advance(30 * MINUTE)  # 21:30 Tokyo: outside
        await h.heartbeats_settled()
        assert heartbeat_turns(agent) == [] and skips(h, "quiet-hours") == 1
        [info] = h.kernel.heartbeats.status()["heartbeats"]
        assert info["next_due_at"] == at("2024-01-15T13:00")  # 22:00 in Tokyo
        clock.advance(20 * MINUTE)
        await h.heartbeats_settled()
        assert heartbeat_turns(agent) == [] and skips(h, "quiet-hours") == 1
        clock.advance(10 * MINUTE)  # 22:00 Tokyo: the window opens (and spans midnight)
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1
        clock.set(at("2024-01-15T14:59"))  # 23:59 Tokyo
        await h.heartbeats_settled()
        clock.set(at("2024-01-15T15:30"))  # 00:30 Tokyo, the next day
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 3


async def test_an_empty_window_skips_every_tick(tmp_path):
    agent = scripted_agent(script=replies())
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock,
                       heartbeat={"every": "30m",
                                  "active_hours": {"start": "10:00", "end": "10:00"}}) as h:
        for _ in range(3):
            clock.advance(30 * MINUTE)
            await h.heartbeats_settled()
        assert heartbeat_turns(agent) == [] and skips(h, "quiet-hours") == 3


# -- restarts -----------------------------------------------------------------------------


async def test_the_interval_survives_a_restart(tmp_path):
    agent = scripted_agent(script=replies())
    clock = ManualClock()
    start = clock.now()
    async with harness(tmp_path, agent, clock=clock, heartbeat={"every": "30m"}) as h:
        clock.advance(20 * MINUTE)
        await h.heartbeats_settled()
    async with harness(tmp_path, agent, clock=clock, heartbeat={"every": "30m"}) as h:
        [info] = h.kernel.heartbeats.status()["heartbeats"]
        assert info["next_due_at"] == start + 30 * MINUTE  # not 30 minutes from the restart
        clock.advance(10 * MINUTE)
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1


async def test_down_for_hours_fires_once_after_a_restart(tmp_path):
    agent = scripted_agent(script=replies())
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock, heartbeat={"every": "30m"}):
        pass
    clock.advance(10 * 3600)  # the gateway was down
    async with harness(tmp_path, agent, clock=clock, heartbeat={"every": "30m"}) as h:
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1


async def test_a_cli_kernel_never_fires_heartbeats(tmp_path, pm):
    from chatkernel.core.kernel import Kernel

    config = KernelConfig.model_validate({
        "heartbeat": {"every": "30m"}, "gateway": {"workspace": str(tmp_path / "ws")},
        "store": {"path": str(tmp_path / "state.db")}})
    async with Kernel(config, pm=pm, recover=False, heartbeat_clock=ManualClock()) as kernel:
        assert not kernel.heartbeats.started and kernel.heartbeats.jobs == {}


# -- manual wake ---------------------------------------------------------------------------


async def test_wake_now_runs_at_once_with_the_text(tmp_path):
    write_heartbeat_file(tmp_path, "# nothing to do\n")  # a wake runs anyway
    agent = scripted_agent(script=replies("deploy looks fine"))
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock,
                       heartbeat={"every": "30m", "target": "last"}) as h:
        await say_hi(h)
        await h.kernel.heartbeats.wake_up("deploy 42 finished", mode="now")
        await h.heartbeats_settled()
        [turn] = heartbeat_turns(agent)
        assert turn.text.endswith("Woken with a note: deploy 42 finished")
        assert h.channel.texts()[-1] == "deploy looks fine"
        state = await h.kernel.store.get_heartbeat(MAIN)
        assert state.wake_texts == [] and state.anchor_at == clock.now()


async def test_wake_next_waits_for_the_next_scheduled_run(tmp_path):
    agent = scripted_agent(script=replies())
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock, heartbeat={"every": "30m"}) as h:
        await h.kernel.heartbeats.wake_up("check the certificate", mode="next")
        await h.heartbeats_settled()
        assert heartbeat_turns(agent) == []
        assert (await h.kernel.store.get_heartbeat(MAIN)).wake_texts == [
            "check the certificate"]
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert "check the certificate" in heartbeat_turns(agent)[0].text


async def test_a_note_left_during_a_run_waits_for_the_next(tmp_path):
    agent = heartbeat_gated_agent("HEARTBEAT_OK")
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock, heartbeat={"every": "30m"}) as h:
        await h.kernel.heartbeats.wake_up("first note")
        await wait_for(lambda: len(heartbeat_turns(agent)) == 1)
        await h.kernel.heartbeats.wake_up("second note", mode="next")
        agent.heartbeat_gate.set()
        await h.heartbeats_settled()
        assert (await h.kernel.store.get_heartbeat(MAIN)).wake_texts == ["second note"]
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        assert heartbeat_turns(agent)[-1].text.endswith("Woken with a note: second note")


async def test_a_wake_note_is_work_enough_past_an_empty_file(tmp_path):
    write_heartbeat_file(tmp_path, "# nothing\n")
    agent = scripted_agent(script=replies())
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock, heartbeat={"every": "30m"}) as h:
        await h.kernel.heartbeats.wake_up("rotate the logs", mode="next")
        clock.advance(30 * MINUTE)
        await h.heartbeats_settled()
        [turn] = heartbeat_turns(agent)
        assert "rotate the logs" in turn.text
        clock.advance(30 * MINUTE)  # the note was delivered: the empty file skips again
        await h.heartbeats_settled()
        assert len(heartbeat_turns(agent)) == 1 and skips(h, "empty-heartbeat-file") == 1


async def test_a_preempted_wake_runs_again_when_the_session_is_idle(tmp_path):
    agent = heartbeat_gated_agent("alert!")
    clock = ManualClock()
    async with harness(tmp_path, agent, clock=clock,
                       heartbeat={"every": "30m", "target": "last"}) as h:
        await say_hi(h)
        await h.kernel.heartbeats.wake_up("look now")  # long before the 30 minutes
        await wait_for(lambda: len(heartbeat_turns(agent)) == 1)
        await h.channel.receive("me first")
        await wait_for(lambda: len(heartbeat_turns(agent)) == 2)
        agent.heartbeat_gate.set()
        await h.heartbeats_settled()
        assert h.channel.texts() == ["re: hi", "re: me first", "alert!"]
        assert "look now" in heartbeat_turns(agent)[1].text


async def test_an_unknown_heartbeat_account_is_a_config_error(tmp_path):
    from chatkernel.sdk.errors import ConfigError

    agent = scripted_agent(script=replies())
    with pytest.raises(ConfigError, match="no running account 'nobody'") as info:
        async with harness(tmp_path, agent, heartbeat={"target": "last", "account": "nobody"}):
            pass
    assert info.value.key == "heartbeat.account"


async def test_wake_errors(tmp_path):
    from chatkernel.core.heartbeat.jobs import HeartbeatError

    agent = scripted_agent(script=replies())
    async with harness(tmp_path, agent) as h:
        with pytest.raises(HeartbeatError, match="has no heartbeat"):
            await h.kernel.heartbeats.wake_up(session_key="memory:main:nope")
    async with harness(tmp_path, agent, heartbeat={"every": "0"}) as h:
        with pytest.raises(HeartbeatError, match="needs --text"):
            await h.kernel.heartbeats.wake_up(mode="next")
        with pytest.raises(HeartbeatError, match="mode must be"):
            await h.kernel.heartbeats.wake_up(mode="later")
