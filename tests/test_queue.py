"""Session lanes and queue modes (docs/gateway.md) on a real in-process kernel."""

from __future__ import annotations

import anyio
import pytest

from chatkernel.core.inbound.queue import parse_duration_ms, parse_queue_args
from chatkernel.core.turns.agents import AgentEvent
from chatkernel.testing.agents import agent_plugin, scripted_agent
from chatkernel.testing.clock import ManualClock
from chatkernel.testing.contract import wait_until
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio


def harness(tmp_path, agent, queue=None, **extra):
    config = {"agent": {"kind": agent.name}, "queue": dict(queue or {}), **extra}
    return KernelHarness(tmp_path, config=config, plugins=[("agent", agent_plugin(agent))])


async def wait_for_requests(agent, count, timeout=5.0):
    await wait_until(lambda: len(agent.requests) >= count, timeout=timeout,
                     what=f"{count} turns", interval=0.005)


async def test_collect_merges_messages_queued_while_busy_into_one_turn(tmp_path):
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent, {"mode": "collect"}) as h:
        await h.channel.receive("first")
        await wait_for_requests(agent, 1)
        for text in ("a", "b", "c"):
            assert await h.channel.receive(text) == "queued"
        agent.gate.set()
        await h.settle()
        assert [r.text for r in agent.requests] == ["first", "a\n\nb\n\nc"]
        # every merged message is finished in the journal
        assert await h.kernel.store.unfinished_inbound() == []


async def test_collect_keeps_threads_apart(tmp_path):
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent, {"mode": "collect"}) as h:
        await h.channel.receive("t1 first", thread_id="1")
        await h.channel.receive("t2 first", thread_id="2")
        await wait_for_requests(agent, 2)
        await h.channel.receive("t1 more", thread_id="1")
        await h.channel.receive("t2 more", thread_id="2")
        agent.gate.set()
        await h.settle()
        by_thread = {}
        for request in agent.requests:
            by_thread.setdefault(request.session_key, []).append(request.text)
        assert by_thread == {"memory:main:chat-1:1": ["t1 first", "t1 more"],
                             "memory:main:chat-1:2": ["t2 first", "t2 more"]}


async def test_followup_runs_one_turn_each_in_order(tmp_path):
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent, {"mode": "followup"}) as h:
        await h.channel.receive("first")
        await wait_for_requests(agent, 1)
        for text in ("a", "b", "c"):
            await h.channel.receive(text)
        agent.gate.set()
        await h.settle()
        assert [r.text for r in agent.requests] == ["first", "a", "b", "c"]
        replies = [t for t in h.channel.texts() if t.startswith("re: ")]
        assert replies == ["re: first", "re: a", "re: b", "re: c"]


async def test_interrupt_aborts_the_running_turn_and_runs_the_newest(tmp_path):
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent, {"mode": "interrupt"}) as h:
        await h.channel.receive("slow one")
        await wait_for_requests(agent, 1)
        assert await h.channel.receive("older") == "interrupted"
        await wait_for_requests(agent, 2)
        assert await h.channel.receive("newest") == "interrupted"
        await wait_for_requests(agent, 3)
        agent.gate.set()
        await h.settle()
        # each newcomer aborts the turn before it: only the newest one answers
        assert [r.text for r in agent.requests] == ["slow one", "older", "newest"]
        assert h.channel.texts() == ["re: newest"]
        assert await h.kernel.store.unfinished_inbound() == []


async def test_after_an_interrupt_the_same_worker_serves_other_sessions(tmp_path):
    agent = scripted_agent(gate=True)
    queue = {"mode": "interrupt", "max_concurrent": 1}  # one worker does everything
    async with harness(tmp_path, agent, queue) as h:
        await h.channel.receive("slow one", chat_id="a")
        await wait_for_requests(agent, 1)
        assert await h.channel.receive("newest", chat_id="a") == "interrupted"
        await wait_for_requests(agent, 2)
        agent.gate.set()
        await h.channel.receive("hello", chat_id="b")
        await h.settle()
        assert [r.text for r in agent.requests] == ["slow one", "newest", "hello"]
        assert h.channel.texts() == ["re: newest", "re: hello"]


async def test_an_interrupt_after_a_turns_last_wait_reaches_no_later_turn(tmp_path):
    # The turn is cut after its last wait (as a newcomer's enqueue could do at that
    # instant): it has nothing left to abort, finishes, and the cancellation must
    # not spill into what the worker does next.
    kernel = {}

    def script(request):
        if request.text == "cut":
            kernel["it"].queue.lanes[request.session_key]._scope.cancel()
        return [AgentEvent.reply(f"re: {request.text}")]

    agent = scripted_agent(script=script)
    async with harness(tmp_path, agent, {"max_concurrent": 1}) as h:
        kernel["it"] = h.kernel
        await h.channel.receive("cut", chat_id="a")
        await h.channel.receive("next", chat_id="b")
        await h.settle()
        await h.channel.receive("later", chat_id="a")
        await h.settle()
        assert [r.text for r in agent.requests] == ["cut", "next", "later"]
        # Each chat's replies in order; two chats' replies have no order between them.
        assert h.channel.texts("a") == ["re: cut", "re: later"]
        assert h.channel.texts("b") == ["re: next"]


async def test_steer_hands_to_the_running_turn_when_the_agent_can(tmp_path):
    agent = scripted_agent(gate=True, steer=True)
    async with harness(tmp_path, agent, {"mode": "steer"}) as h:
        await h.channel.receive("working")
        await wait_for_requests(agent, 1)
        assert await h.channel.receive("also this") == "steered"
        agent.gate.set()
        await h.settle()
        assert agent.steered == ["also this"]
        assert [r.text for r in agent.requests] == ["working"]
        # The steered message is part of the turn: finished with it, logged with it,
        # never replayed as a turn of its own after a restart.
        assert await h.kernel.store.unfinished_inbound() == []
        log = await h.kernel.store.read_log("memory:main:chat-1")
        assert [(e.role, e.text) for e in log] == [
            ("user", "working"), ("user", "also this"), ("assistant", "re: working")]


async def test_a_message_steered_as_the_turn_ends_is_still_finished_and_logged(tmp_path):
    base = scripted_agent(gate=True, steer=True)
    release = anyio.Event()

    steering = anyio.Event()

    class SlowToSteer(base):  # type: ignore[valid-type, misc]
        async def steer(self, session_key, text):
            steering.set()
            await release.wait()  # the turn ends meanwhile
            return await super().steer(session_key, text)

    async with harness(tmp_path, SlowToSteer, {"mode": "steer"}) as h:
        await h.channel.receive("working")
        await wait_for_requests(base, 1)
        outcomes = []
        async with anyio.create_task_group() as tg:
            async def steer_one():
                outcomes.append(await h.channel.receive("also this"))

            tg.start_soon(steer_one)
            with anyio.fail_after(5):
                await steering.wait()  # the steer waits in the agent
            base.gate.set()
            await h.channel.wait_for_sent(1)  # the turn answered...
            await wait_until(lambda: not h.kernel.queue.is_busy("memory:main:chat-1"),
                             timeout=5, what="...and ended", interval=0.005)
            release.set()
        await h.settle()
        assert outcomes == ["steered"] and base.steered == ["also this"]
        assert await h.kernel.store.unfinished_inbound() == []
        log = await h.kernel.store.read_log("memory:main:chat-1")
        assert [(e.role, e.text) for e in log] == [
            ("user", "working"), ("assistant", "re: working"), ("user", "also this")]


async def test_steer_falls_back_to_followup(tmp_path):
    agent = scripted_agent(gate=True, steer=False)
    async with harness(tmp_path, agent, {"mode": "steer"}) as h:
        await h.channel.receive("working")
        await wait_for_requests(agent, 1)
        assert await h.channel.receive("x") == "queued"
        assert await h.channel.receive("y") == "queued"
        agent.gate.set()
        await h.settle()
        assert [r.text for r in agent.requests] == ["working", "x", "y"]


@pytest.mark.parametrize("drop,expected", [
    ("old", ["first", "c\n\nd"]),
    ("new", ["first", "a\n\nb"]),
])
async def test_cap_and_drop(tmp_path, drop, expected):
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent, {"mode": "collect", "cap": 2, "drop": drop}) as h:
        await h.channel.receive("first")
        await wait_for_requests(agent, 1)
        outcomes = [await h.channel.receive(t) for t in ("a", "b", "c", "d")]
        agent.gate.set()
        await h.settle()
        assert [r.text for r in agent.requests] == expected
        if drop == "new":
            assert outcomes == ["queued", "queued", "refused", "refused"]
        assert await h.kernel.store.unfinished_inbound() == []
        metric = h.kernel.metrics.dropped.labels("queue full")._value.get()
        assert metric == 2


async def test_drop_summarize_injects_a_bullet_list(tmp_path):
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent, {"mode": "collect", "cap": 2, "drop": "summarize"}) as h:
        await h.channel.receive("first")
        await wait_for_requests(agent, 1)
        for text in ("a", "b", "c", "d"):
            await h.channel.receive(text, sender_name="Ann")
        agent.gate.set()
        await h.settle()
        follow_up = agent.requests[1].text
        assert follow_up.startswith("[2 earlier message(s) were dropped")
        assert "• Ann: a\n• Ann: b" in follow_up
        assert follow_up.endswith("c\n\nd")


async def test_global_cap_on_concurrent_turns(tmp_path):
    agent = scripted_agent(gate=True)
    async with harness(tmp_path, agent, {"max_concurrent": 2}) as h:
        for i in range(5):
            await h.channel.receive(f"m{i}", chat_id=f"c{i}")
        await wait_for_requests(agent, 2)
        assert len(agent.requests) == 2  # the other three wait for a slot
        agent.gate.set()
        await h.settle()
        assert len(agent.requests) == 5
        assert agent.max_running == 2


async def test_debounce_waits_for_quiet_before_a_followup(tmp_path):
    agent = scripted_agent(gate=True)
    clock = ManualClock()
    config = {"agent": {"kind": agent.name}, "queue": {"mode": "collect", "debounce_ms": 1000}}
    async with KernelHarness(tmp_path, config=config, queue_clock=clock,
                             plugins=[("agent", agent_plugin(agent))]) as h:

        async def quiet_until(deadline: float) -> None:
            await wait_until(lambda: clock.deadlines == [deadline], timeout=5,
                             what=f"the follow-up waiting until {deadline}",
                             state=lambda: clock.deadlines, interval=0.001)

        await h.channel.receive("first")
        await wait_for_requests(agent, 1)
        await h.channel.receive("a")
        agent.gate.set()  # the turn ends: "a" waits a second of quiet
        await quiet_until(clock.now() + 1)
        clock.advance(0.5)
        await h.channel.receive("b")  # inside the quiet period: it joins "a"...
        clock.advance(0.5)
        await quiet_until(clock.now() + 0.5)  # ...and the quiet starts again from it
        assert len(agent.requests) == 1
        clock.advance(0.5)
        await h.settle()
        assert [r.text for r in agent.requests] == ["first", "a\n\nb"]


async def test_channel_queue_table_overrides_the_global_default(tmp_path):
    agent = scripted_agent()
    channels = {"memory": {"queue": {"mode": "followup"},
                           "accounts": {"main": {"allow_from": ["*"]}}}}
    async with harness(tmp_path, agent, channels=channels) as h:
        assert h.kernel.queue_settings("memory:main:x").mode == "followup"


def test_parse_queue_args():
    assert parse_queue_args("interrupt") == {"mode": "interrupt"}
    assert parse_queue_args("collect debounce:2s cap:25 drop:summarize") == {
        "mode": "collect", "debounce_ms": 2000, "cap": 25, "drop": "summarize"}
    for bad, message in [("bogus", "unknown mode"), ("cap:0", "cap"), ("drop:all", "drop"),
                         ("debounce:soon", "duration"), ("speed:2", "unknown setting")]:
        with pytest.raises(ValueError, match=message):
            parse_queue_args(bad)


def test_parse_duration_ms():
    assert parse_duration_ms("250") == 250
    assert parse_duration_ms("250ms") == 250
    assert parse_duration_ms("1.5s") == 1500
    assert parse_duration_ms("2m") == 120_000
