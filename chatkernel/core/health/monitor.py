"""The health monitor: restart an account whose receive loop went quiet, without storms.

Every ``health_check_minutes`` (per account; 0 disables) the monitor probes
the accounts that are due and judges each with :func:`judge`, a pure
function of the account's runtime state, its settings and the time:

* only an account that is ``running`` is judged: a failed loop is the
  supervisor's (it restarts with backoff), a paused one waits for a person,
  a starting one is not connected yet;
* an account that is not quiet by nature is restarted when its platform has
  been silent (no message, no answered poll) for
  ``stale_event_threshold_minutes`` — never less than the check interval —
  counted from the later of its last event and its loop's start;
* a quiet account (webhook-driven, a web page) is judged by its probe: a
  failed probe is the reason to restart, silence is not;
* a probe that says a restart cannot help (``ProbeResult.restartable`` False:
  credentials rejected, another instance polling the token) stops it;
* nothing happens during the start-up grace period, within the cooldown after
  any restart of that account, or once ``max_restarts_per_hour`` restarts
  (crash restarts included) happened in the last rolling hour.

The time comes from an injectable clock and the waiting from an injectable
sleep, so tests run hours of monitoring in milliseconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from chatkernel.core.config import HealthMonitorConfig, KernelConfig
from chatkernel.sdk.models import RESTART_WINDOW_SECONDS, Account, ProbeResult

if TYPE_CHECKING:
    from chatkernel.core.runtime.supervisor import Supervisor
    from chatkernel.core.health.metrics import Metrics

log = logging.getLogger("chatkernel.monitor")


@dataclass(frozen=True, slots=True)
class MonitorSettings:
    """The monitor's settings for one account, after per-channel and per-account overrides."""

    enabled: bool = True
    check_seconds: float = 300.0
    stale_seconds: float = 1800.0  # as configured; see effective_stale_seconds
    max_restarts_per_hour: int = 10
    grace_seconds: float = 300.0
    cooldown_seconds: float = 600.0
    stop_timeout_seconds: float = 30.0

    @property
    def active(self) -> bool:
        """Whether the monitor watches the account at all."""
        return self.enabled and self.check_seconds > 0

    @property
    def effective_stale_seconds(self) -> float:
        """The stale threshold, never below the check interval (a shorter one could
        not be observed anyway, and would restart on every check)."""
        return max(self.stale_seconds, self.check_seconds)

    @classmethod
    def from_config(cls, section: HealthMonitorConfig) -> "MonitorSettings":
        return cls(enabled=section.enabled,
                   check_seconds=section.health_check_minutes * 60,
                   stale_seconds=section.stale_event_threshold_minutes * 60,
                   max_restarts_per_hour=section.max_restarts_per_hour,
                   grace_seconds=section.startup_grace_minutes * 60,
                   cooldown_seconds=section.restart_cooldown_minutes * 60,
                   stop_timeout_seconds=section.stop_timeout_seconds)

    def as_dict(self) -> dict[str, Any]:
        return {"enabled": self.active, "check_seconds": self.check_seconds,
                "stale_seconds": self.effective_stale_seconds,
                "max_restarts_per_hour": self.max_restarts_per_hour,
                "grace_seconds": self.grace_seconds, "cooldown_seconds": self.cooldown_seconds}


def resolve_settings(config: KernelConfig, channel: str,
                     account_override: HealthMonitorConfig | None) -> MonitorSettings:
    """``[health_monitor]``, then ``[channels.<c>.health_monitor]``, then the account's
    ``health_monitor`` table; each level changes only the keys it sets."""
    merged = config.health_monitor.model_dump()
    section = config.channels.get(channel)
    for override in (section.health_monitor if section is not None else None,
                     account_override):
        if override is not None:
            merged.update(override.model_dump(include=override.model_fields_set))
    return MonitorSettings.from_config(HealthMonitorConfig.model_validate(merged))


def settings_for(config: KernelConfig, account: Account) -> MonitorSettings:
    return resolve_settings(config, account.channel_name,
                            getattr(account.config, "health_monitor", None))


@dataclass(frozen=True, slots=True)
class AccountView:
    """What :func:`judge` looks at: one account, at one moment."""

    key: str
    state: str  # the effective state (see AccountRuntime.effective_state)
    quiet: bool
    loop_started_at: float | None
    last_event_at: float | None  # the later of the last message and the last sign of life
    restarts: tuple[float, ...]  # times of every restart, crash or monitor
    probe: ProbeResult | None
    restarting: bool = False

    @classmethod
    def of(cls, account: Account, now: float, *, restarting: bool = False) -> "AccountView":
        runtime = account.runtime
        events = [t for t in (runtime.last_event_at, account.last_inbound_at) if t is not None]
        quiet = account.transport.quiet if account.transport is not None else False
        return cls(account.key, runtime.effective_state(now), quiet, runtime.loop_started_at,
                   max(events) if events else None, tuple(t for t, _ in runtime.restarts),
                   runtime.last_probe, restarting)


@dataclass(frozen=True, slots=True)
class Decision:
    """The monitor's verdict on one account: restart or not, and why (in words)."""

    restart: bool
    reason: str


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min"


def judge(view: AccountView, settings: MonitorSettings, now: float,
          monitor_started_at: float) -> Decision:
    """Whether the monitor restarts this account now. Pure: no I/O, no clock."""
    if not settings.active:
        return Decision(False, "monitor disabled for this account")
    if view.restarting:
        return Decision(False, "a restart is under way")
    if view.state != "running":
        return Decision(False, f"{view.state}: not judged (only running accounts are)")
    if now - monitor_started_at < settings.grace_seconds:
        return Decision(False, "start-up grace period")
    if view.quiet:
        if view.probe is None:
            return Decision(False, "quiet account, no probe result yet")
        if view.probe.ok:
            return Decision(False, "quiet account, probe ok")
        problem = f"probe failed: {view.probe.detail or 'no detail'}"
    else:
        since = max(t for t in (view.last_event_at, view.loop_started_at, monitor_started_at)
                    if t is not None)
        silent = now - since
        stale = settings.effective_stale_seconds
        if silent < stale:
            return Decision(False, "events flowing")
        problem = f"no events for {_minutes(silent)} (stale after {_minutes(stale)})"
    if view.probe is not None and not view.probe.ok and not view.probe.restartable:
        return Decision(False, f"{problem}; a restart would not help: "
                               f"{view.probe.detail or 'the probe says so'}")
    last = max(view.restarts, default=None)
    if last is not None and now - last < settings.cooldown_seconds:
        return Decision(False, f"{problem}; cooling down after the restart "
                               f"{_minutes(now - last)} ago")
    recent = sum(1 for t in view.restarts if t > now - RESTART_WINDOW_SECONDS)
    if recent >= settings.max_restarts_per_hour:
        return Decision(False, f"{problem}; restart cap reached ({recent} in the last hour, "
                               f"max_restarts_per_hour = {settings.max_restarts_per_hour})")
    return Decision(True, problem)


class HealthMonitor:
    """Runs :func:`judge` on every account when its check is due, and restarts.

    Given by name: ``config`` (a function: a reload replaces it), the kernel's
    ``accounts`` by key (read only), ``probe`` (:meth:`HealthProbes.probe
    <chatkernel.core.health.probes.HealthProbes.probe>`), ``supervisor`` (the running
    :class:`~chatkernel.core.runtime.supervisor.Supervisor` of an account key, None
    when no loop runs in this process) and the metrics."""

    def __init__(self, *, config: Callable[[], KernelConfig],
                 accounts: Mapping[str, Account],
                 probe: Callable[[list[Account]], Awaitable[object]],
                 supervisor: Callable[[str], "Supervisor | None"], metrics: "Metrics",
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], Awaitable[None]] = anyio.sleep) -> None:
        self._config = config
        self._accounts = accounts
        self._probe = probe
        self._supervisor = supervisor
        self._metrics = metrics
        self.clock = clock
        self._sleep = sleep
        self.started_at: float | None = None
        self._next: dict[str, float] = {}
        self._settings: dict[str, MonitorSettings] = {}

    def settings(self, account: Account) -> MonitorSettings:
        found = self._settings.get(account.key)
        if found is None:
            found = self._settings[account.key] = settings_for(self._config(), account)
        return found

    def next_check_at(self, account: Account) -> float | None:
        """When the account is checked next (None: not watched, or not started)."""
        settings = self.settings(account)
        if not settings.active or self.started_at is None:
            return None
        return self._next.get(account.key, self.started_at + settings.check_seconds)

    def _due(self, now: float) -> list[Account]:
        return [account for account in self._accounts.values()
                if (at := self.next_check_at(account)) is not None and at <= now]

    async def check(self, now: float | None = None) -> dict[str, Decision]:
        """Check every account that is due at ``now``: probe, judge, restart.

        Returns the decisions taken (by account key).
        """
        now = self.clock() if now is None else now
        if self.started_at is None:
            self.started_at = now
        due = self._due(now)
        if not due:
            return {}
        await self._probe(due)
        decisions: dict[str, Decision] = {}
        restarts: list[tuple[Account, Decision]] = []
        for account in due:
            supervisor = self._supervisor(account.key)
            view = AccountView.of(account, now, restarting=bool(
                supervisor is not None and supervisor.restarting))
            decision = judge(view, self.settings(account), now, self.started_at)
            decisions[account.key] = decision
            runtime = account.runtime
            runtime.monitor_note, runtime.monitor_checked_at = decision.reason, now
            self._next[account.key] = now + self.settings(account).check_seconds
            if decision.restart:
                restarts.append((account, decision))
            elif "restart cap reached" in decision.reason or "would not help" in decision.reason:
                log.warning("%s: health monitor: %s", account.key, decision.reason)
        if restarts:
            async with anyio.create_task_group() as tg:
                for account, decision in restarts:
                    tg.start_soon(self._restart_one, account, decision.reason)
        return decisions

    async def _restart_one(self, account: Account, reason: str) -> None:
        log.warning("%s: health monitor restarts the receive loop: %s", account.key, reason)
        metrics = self._metrics
        metrics.monitor_restarts.labels(account.channel_name, account.name).inc()
        timeout = self.settings(account).stop_timeout_seconds
        supervisor = self._supervisor(account.key)
        if supervisor is None:
            log.error("%s: no supervisor to restart it", account.key)
            return
        if not await supervisor.restart(f"health monitor: {reason}", timeout=timeout):
            account.runtime.monitor_note = f"restart did not complete: {reason}"

    def next_wakeup(self) -> float | None:
        times = [at for account in self._accounts.values()
                 if (at := self.next_check_at(account)) is not None]
        return min(times, default=None)

    async def run(self) -> None:
        """Check accounts as they come due, forever (returns at once if none is watched)."""
        if self.started_at is None:
            self.started_at = self.clock()
        while True:
            wakeup = self.next_wakeup()
            if wakeup is None:
                log.info("health monitor: no account is watched")
                return
            delay = wakeup - self.clock()
            if delay > 0:
                await self._sleep(delay)
            try:
                await self.check()
            except Exception:
                log.exception("health monitor: a check failed; trying again at the next one")
                now = self.clock()
                for account in self._due(now):  # never spin on a failing check
                    self._next[account.key] = now + self.settings(account).check_seconds
