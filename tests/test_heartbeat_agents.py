"""Heartbeats per agent: each agent with a heartbeat table has its own schedule, target
and HEARTBEAT.md, run by the one scheduler (a manual clock drives it)."""

from __future__ import annotations

import contextlib

import pytest

from chatkernel.core import config as cfg
from chatkernel.testing.agents import LabelAgent, agent_plugin
from chatkernel.testing.clock import ManualClock
from chatkernel.testing.contract import wait_until
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio

HOUR = 3600.0


def label(name: str, **heartbeat) -> dict:
    """A ``label`` agent (it answers ``<name> (...): <prompt>``, an alert: the prompt
    below has no HEARTBEAT_OK for it to repeat)."""
    table = {"kind": "label", "system_prompt": name}
    return {**table, "heartbeat": {"prompt": "What is new?", **heartbeat}} if heartbeat \
        else table


def harness(tmp_path, clock, **config) -> KernelHarness:
    return KernelHarness(tmp_path, config=config, heartbeat_clock=clock,
                         plugins=[("agents", agent_plugin(LabelAgent))])


def heartbeat_texts(h, chat: str) -> list[str]:
    """What each agent's heartbeats said in ``chat`` (its label, not the prompt)."""
    return [text.split(" (", 1)[0] for text in h.channel.texts(chat)]


async def test_two_agents_heartbeat_on_their_own_schedules_into_their_own_targets(tmp_path):
    clock = ManualClock()
    async with harness(tmp_path, clock,
                       agent=label("default", every="1h", target="memory", to="chat-a"),
                       agents={"work": label("work", every="2h", target="memory",
                                             to="chat-b")}) as h:
        ids = [info["id"] for info in h.kernel.heartbeats.status()["heartbeats"]]
        assert sorted(ids) == ["agent:work", "main"]
        clock.advance(HOUR)
        await h.heartbeats_settled()
        assert (heartbeat_texts(h, "chat-a"), heartbeat_texts(h, "chat-b")) == (
            ["default"], [])
        clock.advance(HOUR)
        await h.heartbeats_settled()
        assert (heartbeat_texts(h, "chat-a"), heartbeat_texts(h, "chat-b")) == (
            ["default", "default"], ["work"])
        logged = await h.kernel.store.read_log("memory:main:chat-b#work")
        assert [entry.role for entry in logged] == ["heartbeat", "assistant"]
        state = await h.kernel.store.get_heartbeat("agent:work")
        assert state.last_outcome == "alert (sent)"


async def test_each_agent_reads_the_heartbeat_file_of_its_workspace(tmp_path):
    clock = ManualClock()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "HEARTBEAT.md").write_text("# nothing to do\n")  # the default's: empty
    async with harness(tmp_path, clock,
                       agent=label("default", every="1h", target="memory", to="chat-a"),
                       agents={"work": label("work", every="1h", target="memory",
                                             to="chat-b")}) as h:
        (workspace / "agents" / "work" / "HEARTBEAT.md").write_text("Check the build.\n")
        clock.advance(HOUR)
        await h.heartbeats_settled()
        assert h.channel.texts("chat-a") == []
        [text] = h.channel.texts("chat-b")
        assert text.startswith("work (0 before): ")
        main = await h.kernel.store.get_heartbeat("main")
        assert main.last_outcome == "skipped: empty-heartbeat-file"


async def test_a_reload_gives_an_agent_a_heartbeat_and_takes_it_away(tmp_path):
    clock = ManualClock()
    async with harness(tmp_path, clock, agent=label("default"),
                       agents={"work": label("work")}) as h:
        assert [i["id"] for i in h.kernel.heartbeats.status()["heartbeats"]] == ["main"]
        data = h.kernel.config.model_dump(exclude_unset=True)
        data["agents"]["work"] = label("work", every="1h", target="memory", to="chat-b")
        report = await h.kernel.reload(cfg.parse(data, strict_env=False))
        assert report.applied == ["agents.work.heartbeat"]
        clock.advance(HOUR)
        await h.heartbeats_settled()
        assert heartbeat_texts(h, "chat-b") == ["work"]
        del data["agents"]["work"]["heartbeat"]
        await h.kernel.reload(cfg.parse(data, strict_env=False))
        assert [i["id"] for i in h.kernel.heartbeats.status()["heartbeats"]] == ["main"]
        clock.advance(HOUR)
        await h.heartbeats_settled()
        assert heartbeat_texts(h, "chat-b") == ["work"]


def test_an_agents_heartbeat_target_is_checked_naming_its_key(tmp_path):
    from chatkernel.core.gateway.process import check_startup
    from chatkernel.core.plugins import PluginManager
    from chatkernel.testing.memory import MemoryPlugin

    pm = PluginManager()
    pm.load(only=[], disabled=[], strict=True)
    pm.register(MemoryPlugin, name="memory")
    pm.register(agent_plugin(LabelAgent), name="label")
    pm.check_pending()
    config = cfg.parse({"channels": {"memory": {"accounts": {"main": {}}},
                                     "webchat": {"enabled": False}},
                        "agents": {"work": label("work", target="telegram")}})
    with pytest.raises(cfg.ConfigError, match=r"agents\.work\.heartbeat\.target: no running "
                                              r"channel 'telegram'"):
        check_startup(config, pm=pm)


def test_without_a_default_agent_the_config_heartbeat_is_off():
    config = cfg.parse({"heartbeat": {"every": "1h"}, "agents": {"work": label("work")}})
    assert not config.config_heartbeat_wanted() and config.agent_heartbeats() == []


async def test_an_agents_heartbeat_is_woken_by_hand_by_its_name(tmp_path):
    from chatkernel.core.heartbeat.jobs import HeartbeatError

    clock = ManualClock()
    async with harness(tmp_path, clock, agent=label("default"),
                       agents={"work": label("work", every="0", target="memory",
                                             to="chat-b")}) as h:
        with pytest.raises(HeartbeatError, match=r"agent 'home' has no heartbeat \(agents "
                                                 r"with one: default, work; give it an "
                                                 r"\[agents\.home\.heartbeat\] table\)"):
            await h.kernel.heartbeats.wake_up("hi", agent="home")
        job = await h.kernel.heartbeats.wake_up("the deploy finished", agent="work")
        assert job.id == "agent:work"
        await h.heartbeats_settled()
        [text] = h.channel.texts("chat-b")
    assert text.startswith("work (0 before): What is new?")
    assert text.endswith("Woken with a note: the deploy finished")


async def test_on_redis_the_instance_with_the_heartbeat_lease_runs_every_agents(
        tmp_path, redis_server, redis_prefix):
    clock = ManualClock()
    # Leases that outlast the test: an account whose renewal came late on a busy machine
    # would move to the other instance, and the heartbeat's answer with it (see
    # test_a_heartbeat_whose_answer_cannot_be_queued_is_an_error_and_the_next_one_runs).
    config = {"store": {"backend": "redis", "url": redis_server, "prefix": redis_prefix,
                        "lease_seconds": 60},
              "agent": label("default", every="1h", target="memory", to="chat-a"),
              "agents": {"work": label("work", every="1h", target="memory", to="chat-b")}}
    async with contextlib.AsyncExitStack() as stack:
        kernels = [(await stack.enter_async_context(harness(tmp_path / name, clock, **config)))
                   .kernel for name in ("one", "two")]
        await wait_until(lambda: any(kernel.heartbeats.started for kernel in kernels),
                         timeout=20, what="a heartbeat lease held", interval=0.05)
        [holder] = [kernel for kernel in kernels if kernel.heartbeats.started]
        [other] = [kernel for kernel in kernels if kernel is not holder]
        assert sorted(holder.heartbeats.jobs) == ["agent:work", "main"]
        assert other.heartbeats.jobs == {}
        clock.advance(HOUR)

        def alerts() -> set[tuple[str, str]]:
            return {(record.heartbeat, record.session_key)
                    for record in holder.heartbeats.history if record.outcome == "alert"}

        await wait_until(lambda: len(alerts()) >= 2, timeout=20, what="both alerts",
                         state=alerts, interval=0.05)
        assert alerts() == {("main", "memory:main:chat-a"),
                            ("agent:work", "memory:main:chat-b#work")}
        assert list(other.heartbeats.history) == []


async def test_a_heartbeat_whose_answer_cannot_be_queued_is_an_error_and_the_next_one_runs(
        tmp_path, monkeypatch, caplog):
    """The account's lease went to another instance as the answer was queued (LeaseLost,
    a StoreError): that run is an error, logged, and neither the scheduler nor the
    gateway ends; the next hour's run is sent."""
    from chatkernel.sdk.errors import LeaseLost

    clock = ManualClock()
    async with harness(tmp_path, clock,
                       agent=label("default", every="1h", target="memory",
                                   to="chat-a")) as h:
        runner = h.kernel.heartbeats.runner
        deliver, refused = runner.deliver, []

        async def deliver_once_refused(destination, text):
            if not refused:
                refused.append(text)
                raise LeaseLost("outbox_add refused: this process no longer holds the lease "
                                "account:memory:main", lease="account:memory:main")
            await deliver(destination, text)

        monkeypatch.setattr(runner, "deliver", deliver_once_refused)
        clock.advance(HOUR)
        await h.heartbeats_settled()
        assert refused and h.channel.texts("chat-a") == []
        assert "heartbeat main in memory:main:chat-a: its answer could not be queued: " \
               "outbox_add refused" in caplog.text
        state = await h.kernel.store.get_heartbeat("main")
        assert state.last_outcome == "error"
        clock.advance(HOUR)
        await h.heartbeats_settled()
        assert heartbeat_texts(h, "chat-a") == ["default"]
        assert (await h.kernel.store.get_heartbeat("main")).last_outcome == "alert (sent)"


async def test_on_redis_a_store_error_as_the_heartbeats_start_is_reported_and_tried_again(
        tmp_path, redis_server, redis_prefix, monkeypatch, caplog):
    """The heartbeats' lease won while Redis fails the read of their state (a connection
    it closed): the instance warns, gives the lease up and takes it again, rather than
    letting the error end the gateway."""
    from chatkernel.core.store.base import StoreError
    from chatkernel.core.store.redis import RedisStore

    real, failures = RedisStore.list_heartbeats, []

    async def list_heartbeats(self):
        if not failures:
            failures.append(1)
            raise StoreError("redis at 127.0.0.1: Connection closed by server.")
        return await real(self)

    monkeypatch.setattr(RedisStore, "list_heartbeats", list_heartbeats)
    clock = ManualClock()
    config = {"store": {"backend": "redis", "url": redis_server, "prefix": redis_prefix,
                        "lease_seconds": 2},
              "agent": label("default", every="1h", target="memory", to="chat-a")}
    async with harness(tmp_path, clock, **config) as h:
        # Loaded, not only started: ``started`` is set before the read of their state.
        scheduler = h.kernel.heartbeats
        await wait_until(lambda: failures and sorted(scheduler.jobs) == ["main"], timeout=20,
                         what="the heartbeats loaded after the failed read", interval=0.05,
                         state=lambda: (failures, scheduler.started, sorted(scheduler.jobs)))
        assert scheduler.started
        assert "the heartbeats could not start" in caplog.text
        assert "Connection closed by server" in caplog.text
