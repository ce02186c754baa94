"""The health monitor, driven by a controllable clock: hours of monitoring in milliseconds.

The decision (``judge``) is tested as a pure function; ``HealthMonitor`` is tested with
real supervisors and receive loops, with time taken from a fake clock.
"""

from __future__ import annotations

import anyio
import pytest

from chatkernel.core import config as cfg
from chatkernel.sdk.models import AccountRuntime, ProbeResult
from chatkernel.core.health.monitor import (
    AccountView,
    HealthMonitor,
    MonitorSettings,
    judge,
    resolve_settings,
)
from chatkernel.testing.memory import KernelHarness
from chatkernel.testing.contract import wait_until

MIN = 60.0
HOUR = 3600.0
T0 = 1_700_000_000.0
DEFAULTS = MonitorSettings()  # 5 min checks, 30 min stale, 10/h, 5 min grace, 10 min cooldown


def view(**fields):
    base = dict(key="memory:main", state="running", quiet=False, loop_started_at=T0,
                last_event_at=None, restarts=(), probe=None, restarting=False)
    base.update(fields)
    return AccountView(**base)


def decide(now, settings=DEFAULTS, started=T0, **fields):
    return judge(view(**fields), settings, now, started)


# -- judge: the pure decision -------------------------------------------------------------


def test_a_silent_connected_account_is_restarted_once_stale():
    assert not decide(T0 + 29 * MIN).restart
    decision = decide(T0 + 30 * MIN)
    assert decision.restart and decision.reason == "no events for 30 min (stale after 30 min)"


def test_silence_counts_from_the_last_event_or_the_loop_start():
    assert not decide(T0 + 40 * MIN, last_event_at=T0 + 20 * MIN).restart
    assert decide(T0 + 50 * MIN, last_event_at=T0 + 20 * MIN).restart
    # a loop restarted recently is not stale, whatever the last event was
    assert not decide(T0 + 50 * MIN, last_event_at=T0, loop_started_at=T0 + 40 * MIN).restart


def test_the_stale_threshold_is_never_below_the_check_interval():
    settings = MonitorSettings(check_seconds=10 * MIN, stale_seconds=1 * MIN, grace_seconds=0)
    assert settings.effective_stale_seconds == 10 * MIN
    assert not decide(T0 + 9 * MIN, settings).restart
    assert decide(T0 + 10 * MIN, settings).restart


def test_nothing_is_restarted_during_the_startup_grace_period():
    settings = MonitorSettings(stale_seconds=5 * MIN, grace_seconds=20 * MIN)
    decision = decide(T0 + 10 * MIN, settings)
    assert not decision.restart and decision.reason == "start-up grace period"
    assert decide(T0 + 20 * MIN, settings).restart


def test_a_cooldown_separates_two_restarts():
    last = T0 + 25 * MIN
    decision = decide(T0 + 31 * MIN, loop_started_at=T0 - HOUR, restarts=(last,))
    assert not decision.restart and "cooling down" in decision.reason
    assert decide(T0 + 35 * MIN, loop_started_at=T0 - HOUR, restarts=(last,)).restart


def test_the_restart_cap_is_a_rolling_hour():
    now = T0 + 2 * HOUR
    settings = MonitorSettings(max_restarts_per_hour=3, cooldown_seconds=0)
    old = (now - HOUR - 1, now - HOUR - 2)  # more than an hour ago: not counted
    recent = (now - 50 * MIN, now - 30 * MIN, now - 20 * MIN)
    capped = decide(now, settings, loop_started_at=T0, restarts=old + recent)
    assert not capped.restart
    assert "restart cap reached (3 in the last hour, max_restarts_per_hour = 3)" in capped.reason
    assert decide(now, settings, loop_started_at=T0, restarts=old + recent[1:]).restart
    # crash restarts count too: a crash-looping account never gets monitor restarts on top
    assert not decide(now, MonitorSettings(max_restarts_per_hour=0), loop_started_at=T0).restart


def test_only_running_accounts_are_judged():
    for state in ("starting", "stopped", "failed", "paused"):
        decision = decide(T0 + 10 * HOUR, state=state)
        assert not decision.restart and decision.reason.startswith(state)
    assert not decide(T0 + 10 * HOUR, restarting=True).restart


def test_a_quiet_account_is_judged_by_its_probe_not_by_silence():
    later = T0 + 10 * HOUR
    assert not decide(later, quiet=True).restart  # no probe yet
    ok = ProbeResult(ok=True, detail="serving")
    assert decide(later, quiet=True, probe=ok).reason == "quiet account, probe ok"
    failing = ProbeResult(ok=False, detail="webhook unreachable")
    decision = decide(T0 + 6 * MIN, quiet=True, probe=failing)  # silence is irrelevant
    assert decision.restart and decision.reason == "probe failed: webhook unreachable"


def test_a_probe_that_says_restarting_cannot_help_stops_the_restart():
    rejected = ProbeResult(ok=False, detail="token rejected", restartable=False)
    decision = decide(T0 + 10 * HOUR, probe=rejected)
    assert not decision.restart and "a restart would not help: token rejected" in decision.reason
    assert not decide(T0 + HOUR, quiet=True, probe=rejected).restart


def test_disabled_or_zero_interval_means_never():
    assert not decide(T0 + 10 * HOUR, MonitorSettings(enabled=False)).restart
    decision = decide(T0 + 10 * HOUR, MonitorSettings(check_seconds=0))
    assert not decision.restart and decision.reason == "monitor disabled for this account"


# -- settings: per channel and per account ------------------------------------------------


def test_overrides_change_only_the_keys_they_set():
    config = cfg.parse({
        "health_monitor": {"stale_event_threshold_minutes": 45, "max_restarts_per_hour": 4},
        "channels": {"memory": {"health_monitor": {"max_restarts_per_hour": 2},
                                "accounts": {"main": {}}}},
    })
    channel_level = resolve_settings(config, "memory", None)
    assert (channel_level.stale_seconds, channel_level.max_restarts_per_hour) == (45 * MIN, 2)
    account_level = resolve_settings(
        config, "memory", cfg.HealthMonitorConfig.model_validate({"enabled": False}))
    assert not account_level.active
    assert account_level.max_restarts_per_hour == 2 and account_level.stale_seconds == 45 * MIN
    other = resolve_settings(config, "telegram", None)
    assert other.max_restarts_per_hour == 4 and other.active


# -- the monitor with real supervisors and a fake clock -----------------------------------


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now


async def settle(supervisors):
    await wait_until(lambda: not any(s.loops_running != 1 or s.restarting
                                     for s in supervisors),
                     timeout=5, what="one loop running per account", interval=0.001)


class Scene:
    """A harness kernel whose accounts run under supervisors on a fake clock."""

    def __init__(self, h, clock, supervisors, monitor):
        self.h, self.clock, self.supervisors, self.monitor = h, clock, supervisors, monitor

    def account(self, name="main"):
        return self.h.kernel.accounts[f"memory:{name}"]

    async def run_for(self, seconds, on_tick=None):
        """Let the monitor run ``seconds`` of fake time, check by check."""
        end = self.clock.now + seconds
        while True:
            wakeup = self.monitor.next_wakeup()
            if wakeup is None or wakeup > end:
                self.clock.now = end
                return
            self.clock.now = max(self.clock.now, wakeup)
            if on_tick is not None:
                on_tick(self.clock.now)
            await self.monitor.check()
            await settle(self.supervisors)

    def restart_times(self, name="main"):
        return [at for at, reason in self.account(name).runtime.restarts
                if reason.startswith("health monitor")]


def monitor_of(kernel, **options):
    """A health monitor of its own over the kernel's accounts, as the kernel builds one."""
    return HealthMonitor(config=lambda: kernel.config, accounts=kernel.accounts,
                         probe=kernel.health.probe, supervisor=kernel.supervisors.get,
                         metrics=kernel.metrics, **options)


def scene(tmp_path, *, monitor=None, accounts=None):
    """``async with scene(...) as s``: accounts memory:main (+ others) under supervisors."""
    from contextlib import asynccontextmanager

    accounts = accounts or {"main": {"allow_from": ["*"]}}
    config = {"channels": {"memory": {"accounts": accounts}}}
    if monitor is not None:
        config["health_monitor"] = monitor

    @asynccontextmanager
    async def run():
        clock = Clock()
        async with KernelHarness(tmp_path, config=config) as h:
            h.kernel.health.clock = clock
            supervisors = []
            for account in h.kernel.accounts.values():
                async def silent(deliver):  # connected, but the platform never says a word
                    await anyio.sleep_forever()

                account.transport.run = silent
                account.runtime = AccountRuntime()  # nothing from the harness's real clock
                supervisors.append(h.kernel.supervisors.add(account, clock=clock))
            async with anyio.create_task_group() as tg:
                for supervisor in supervisors:
                    tg.start_soon(supervisor.run)
                await settle(supervisors)
                monitor_ = h.kernel.monitor  # the kernel's own, which snapshots show
                monitor_.clock, monitor_.started_at = clock, clock.now
                yield Scene(h, clock, supervisors, monitor_)
                tg.cancel_scope.cancel()

    return run()


def max_in_any_hour(times):
    return max((sum(1 for t in times if start <= t < start + HOUR) for start in times),
               default=0)


@pytest.mark.anyio
async def test_no_restart_storm_a_hung_account_is_capped_per_rolling_hour(tmp_path):
    # The most aggressive settings: check and stale every minute, no cooldown, no grace.
    aggressive = {"health_check_minutes": 1, "stale_event_threshold_minutes": 1,
                  "restart_cooldown_minutes": 0, "startup_grace_minutes": 0}
    async with scene(tmp_path, monitor=aggressive) as s:
        await s.run_for(6 * HOUR)
        times = s.restart_times()
        assert max_in_any_hour(times) == 10  # max_restarts_per_hour, never more
        assert len(times) == 60  # 10 in each of the six hours
        assert all(b > a for a, b in zip(times, times[1:]))
        assert s.supervisors[0].loops_started == 61
        assert s.supervisors[0].loops_running == 1
        assert "restart cap reached" in s.account().runtime.monitor_note
        metrics = s.h.kernel.metrics
        assert metrics.child(metrics.monitor_restarts, "memory", "main")._value.get() == 60


@pytest.mark.anyio
async def test_with_the_defaults_a_hung_account_restarts_every_stale_period(tmp_path):
    async with scene(tmp_path) as s:
        await s.run_for(6 * HOUR)
        times = s.restart_times()
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert times and times[0] - T0 >= 30 * MIN
        assert all(gap >= 30 * MIN for gap in gaps)
        assert max_in_any_hour(times) <= 2


@pytest.mark.anyio
async def test_an_account_with_events_flowing_is_never_restarted(tmp_path):
    async with scene(tmp_path) as s:
        def events(now):
            s.account().runtime.last_event_at = now - 1
        await s.run_for(6 * HOUR, on_tick=events)
        assert s.restart_times() == []
        assert s.account().runtime.monitor_note == "events flowing"


@pytest.mark.anyio
async def test_opt_out_per_account_and_per_channel(tmp_path):
    accounts = {"main": {"allow_from": ["*"]},
                "calm": {"allow_from": ["*"], "health_monitor": {"enabled": False}}}
    async with scene(tmp_path, accounts=accounts) as s:
        await s.run_for(3 * HOUR)
        assert s.restart_times("main")
        assert s.restart_times("calm") == []
        assert s.monitor.next_check_at(s.account("calm")) is None
        snapshot = await s.h.kernel.health.snapshot()
        assert snapshot.channels["memory"].accounts["calm"].monitor.enabled is False


@pytest.mark.anyio
async def test_opt_out_per_channel(tmp_path):
    config = {"channels": {"memory": {"health_monitor": {"enabled": False},
                                      "accounts": {"main": {"allow_from": ["*"]}}}}}
    clock = Clock()
    async with KernelHarness(tmp_path, config=config) as h:
        monitor = monitor_of(h.kernel, clock=clock)
        assert monitor.next_wakeup() is None
        clock.now += 10 * HOUR
        assert await monitor.check() == {}


@pytest.mark.anyio
async def test_zero_check_interval_disables_the_monitor(tmp_path):
    async with scene(tmp_path, monitor={"health_check_minutes": 0}) as s:
        assert s.monitor.next_wakeup() is None
        await s.run_for(5 * HOUR)
        assert s.restart_times() == []


@pytest.mark.anyio
async def test_a_quiet_account_with_a_good_probe_may_stay_silent_forever(tmp_path):
    async with scene(tmp_path) as s:
        s.account().transport.quiet = True
        await s.run_for(6 * HOUR)
        assert s.restart_times() == []
        assert s.account().runtime.monitor_note == "quiet account, probe ok"


@pytest.mark.anyio
async def test_a_quiet_account_with_a_failing_probe_is_restarted_within_the_caps(tmp_path):
    async with scene(tmp_path) as s:
        channel = s.account().channel
        s.account().transport.quiet = True

        async def failing():
            return ProbeResult(ok=False, detail="webhook not registered")

        channel.probe = failing
        await s.run_for(3 * HOUR)
        times = s.restart_times()
        assert times and times[0] - T0 >= 5 * MIN  # not during the grace period
        assert all(b - a >= 10 * MIN for a, b in zip(times, times[1:]))  # cooldown
        assert max_in_any_hour(times) <= 10


@pytest.mark.anyio
async def test_a_probe_saying_a_restart_cannot_help_means_no_restarts(tmp_path):
    async with scene(tmp_path) as s:
        async def rejected():
            return ProbeResult(ok=False, detail="token rejected", restartable=False)

        s.account().channel.probe = rejected
        await s.run_for(6 * HOUR)
        assert s.restart_times() == []
        assert "a restart would not help: token rejected" in s.account().runtime.monitor_note


@pytest.mark.anyio
async def test_monitor_run_sleeps_until_the_next_check(tmp_path):
    clock = Clock()
    sleeps = []
    async with KernelHarness(tmp_path) as h:
        h.kernel.health.clock = clock

        async def fake_sleep(seconds):
            sleeps.append(seconds)
            clock.now += seconds
            if len(sleeps) == 3:
                raise anyio.get_cancelled_exc_class()()

        monitor = monitor_of(h.kernel, clock=clock, sleep=fake_sleep)
        with pytest.raises(anyio.get_cancelled_exc_class()):
            await monitor.run()
        assert sleeps == [5 * MIN, 5 * MIN, 5 * MIN]
        assert h.kernel.accounts["memory:main"].runtime.monitor_checked_at == T0 + 10 * MIN


@pytest.mark.anyio
async def test_a_loop_that_will_not_stop_is_never_doubled_by_the_monitor(tmp_path):
    aggressive = {"health_check_minutes": 1, "stale_event_threshold_minutes": 1,
                  "restart_cooldown_minutes": 0, "startup_grace_minutes": 0,
                  "stop_timeout_seconds": 0.01}
    async with scene(tmp_path, monitor=aggressive) as s:
        release = anyio.Event()
        active = {"now": 0, "max": 0, "started": 0}

        async def stubborn(deliver):
            active["started"] += 1
            active["now"] += 1
            active["max"] = max(active["max"], active["now"])
            try:
                await anyio.sleep_forever()
            finally:
                with anyio.CancelScope(shield=True):  # ignores the cancellation...
                    await release.wait()              # ...until released
                active["now"] -= 1

        supervisor = s.supervisors[0]
        await supervisor.restart("install the stubborn loop")  # the silent one stops
        s.account().transport.run = stubborn
        await supervisor.restart("install it")
        await wait_until(lambda: active["started"], timeout=5, what="the stubborn loop",
                         interval=0.001)
        s.account().runtime.restarts.clear()

        async def checks(minutes):  # settle() would wait for the stuck loop: step by hand
            for _ in range(minutes):
                s.clock.now = s.monitor.next_wakeup()
                await s.monitor.check()

        await checks(30)
        assert active == {"now": 1, "max": 1, "started": 1}  # one loop, still stopping
        assert len(s.restart_times()) == 1  # asked once; every later check saw it under way
        assert "did not stop within 0.01 s" in s.account().runtime.last_error
        assert s.account().runtime.monitor_note == "a restart is under way"
        release.set()
        await wait_until(lambda: active["started"] >= 2, timeout=5, what="the next loop",
                         interval=0.001)
        assert active["max"] == 1


@pytest.mark.parametrize("data, key", [
    ({"health_monitor": {"restart_cooldown_minutes": -1}},
     "health_monitor.restart_cooldown_minutes"),
    ({"health": {"probe_timeout_ms": 0}}, "health.probe_timeout_ms"),
    ({"presence": {"max_entries": 0}}, "presence.max_entries"),
    ({"channels": {"memory": {"health_monitor": {"enabld": False}}}},
     "channels.memory.health_monitor.enabld"),
])
def test_health_settings_are_validated_with_the_key_named(data, key):
    with pytest.raises(cfg.ConfigError) as caught:
        cfg.parse(data)
    assert caught.value.key == key


def test_a_per_account_typo_is_named_too():
    with pytest.raises(cfg.ConfigError) as caught:
        cfg.validate_account(cfg.AccountConfig, {"health_monitor": {"enabld": False}},
                             channel="memory", account="main")
    assert caught.value.key == "channels.memory.accounts.main.health_monitor.enabld"
