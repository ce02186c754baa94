"""Heartbeats: periodic agent turns in a session, so the agent can surface what
needs attention. See docs/heartbeats.md for the user's view.

Two kinds, one scheduler:

- the **config heartbeat** (id ``main``): ``[heartbeat]`` with ``[agent.heartbeat]``
  merged over it; it runs in the session of its target (``last``: the last
  active chat; a channel with ``to``) or, with no destination, in a session of
  its own (``heartbeat:main``) whose replies go nowhere. HEARTBEAT.md in the
  workspace applies to it.
- **session heartbeats** (id ``session:<key>``): set in a chat with
  ``/heartbeat every <interval> <prompt>``; their settings are merged over the
  config's and they run in, and answer to, their own session.

Scheduling (:class:`HeartbeatScheduler`). Each heartbeat has an anchor (its last
fire, its creation or its resume) and is due at ``anchor + every``. One task
sleeps until the earliest due time (or until woken) and then ticks: a due
heartbeat is skipped with a logged, counted reason, or waits while its
session's lane is busy, or runs. However many ticks were missed (a long busy
period, the gateway down), a due heartbeat fires once, and its anchor moves to
that moment. Heartbeat turns run outside the session queue (so they never take
a worker from user messages), at most :data:`MAX_RUNNING` at once; a user
message arriving in a session cancels its running heartbeat, which fires again
at the next idle moment. The clock is injectable: tests use
:class:`chatkernel.testing.clock.ManualClock`.

The turn itself goes through the agent and the same :class:`Responder` and
outbox as any reply; the reply contract (``HEARTBEAT_OK``) and the visibility
settings decide whether anything is sent. A heartbeat never touches the
session's activity time or the account's last active chat.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import time as time_of_day
from datetime import tzinfo
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from chatkernel.core.turns.agents import AgentEvent, TurnRequest
from chatkernel.core.config import ActiveHours, ConfigError, HeartbeatConfig
from chatkernel.core.durations import format_interval
from chatkernel.core.heartbeat.ack import HEARTBEAT_TOKEN, judge_heartbeat_reply
from chatkernel.core.heartbeat.checklist import (
    TaskPrompt,
    prompt_with_tasks,
    read_heartbeat_file,
)
from chatkernel.sdk.models import Account, Route, Session
from chatkernel.core.store.base import HeartbeatState

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from chatkernel.core.config import KernelConfig
    from chatkernel.core.kernel import Kernel

log = logging.getLogger("chatkernel.heartbeat")

VISIBILITY_KEYS = ("show_ok", "show_alerts", "use_indicator")

#: The config heartbeat's id; session heartbeats are ``session:<key>``.
MAIN = "main"
SESSION_PREFIX = "session:"
#: Where a heartbeat with no destination runs (its replies go nowhere).
NO_TARGET_SESSION = "heartbeat:main"
#: The shortest interval ``/heartbeat every`` accepts, in seconds.
MIN_SESSION_EVERY = 60.0
#: The longest the scheduler sleeps between looks at the clock (a wall clock may jump).
MAX_SLEEP = 60.0
#: How many heartbeat turns may run at once (background work: a small share).
MAX_RUNNING = 2

DEFAULT_PROMPT = (
    "Read HEARTBEAT.md if it exists (in your workspace) and follow it. Do not invent tasks, "
    "and do not repeat old tasks from earlier conversations. If nothing needs attention, "
    f"reply {HEARTBEAT_TOKEN}.")
#: Appended to a session heartbeat's own prompt.
SESSION_GUARD = (
    "(This is a scheduled check set up in this chat with /heartbeat. Do only what is asked "
    "above and do not invent work. If nothing changed since the last check, answer in one "
    f"short line, or reply {HEARTBEAT_TOKEN}.)")

SKIP_REASONS = ("alerts-disabled", "quiet-hours", "empty-heartbeat-file", "no-tasks-due",
                "dm-blocked", "no-target", "alerts-hidden")


# -- visibility ------------------------------------------------------------------------------


def plugin_visibility_defaults(pm: Any, channel: str, account: str) -> dict[str, bool]:
    """Merge every plugin's ``heartbeat_visibility`` answer.

    pluggy returns results newest plugin first and the built-in (trylast)
    last; merging them in reverse lets a later-registered plugin win.
    """
    merged: dict[str, bool] = {}
    for result in reversed(pm.hook.heartbeat_visibility(channel=channel, account=account)):
        if result:
            merged.update({k: bool(v) for k, v in result.items() if k in VISIBILITY_KEYS})
    return merged


def resolve_visibility(plugin_defaults: Mapping[str, bool],
                       *layers: Mapping[str, Any] | None) -> dict[str, bool]:
    """Apply config layers over the plugin defaults, most specific layer first.

    ``layers`` are e.g. the account's, the channel's and ``channels.defaults``
    heartbeat settings; a key left unset (None) falls through to the next.
    """
    resolved = dict(plugin_defaults)
    for key in VISIBILITY_KEYS:
        for layer in layers:
            value = None if layer is None else layer.get(key)
            if value is not None:
                resolved[key] = bool(value)
                break
    return resolved


def visibility_for(pm: Any, config: "KernelConfig", account: Account | None) -> dict[str, bool]:
    """What a heartbeat may show: per account → per channel → ``channels.defaults`` →
    plugin defaults → built-in. With no destination account only the last three."""
    from chatkernel.builtin.heartbeat import DEFAULT_VISIBILITY

    defaults = config.channels.get("defaults")
    defaults_layer = _layer(getattr(defaults, "heartbeat", None))
    if account is None:
        return resolve_visibility(DEFAULT_VISIBILITY, defaults_layer)
    section = config.channels.get(account.channel_name)
    plugin_defaults = {**DEFAULT_VISIBILITY,
                       **plugin_visibility_defaults(pm, account.channel_name, account.name)}
    return resolve_visibility(plugin_defaults,
                              _layer(getattr(account.config, "heartbeat", None)),
                              _layer(getattr(section, "heartbeat", None)), defaults_layer)


def _layer(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    return value.model_dump() if hasattr(value, "model_dump") else dict(value)


# -- settings --------------------------------------------------------------------------------


def merged_settings(config: "KernelConfig",
                    override: Mapping[str, Any] | None = None) -> HeartbeatConfig:
    """``[heartbeat]``, then ``[agent.heartbeat]``, then a session's own settings, each
    merged over the one before (``active_hours`` key by key)."""
    values: dict[str, Any] = {}
    layers: list[Mapping[str, Any]] = [config.heartbeat.model_dump(exclude_unset=True)]
    if config.agent.heartbeat is not None:
        layers.append(config.agent.heartbeat.model_dump(exclude_unset=True))
    if override:
        layers.append(override)
    for layer in layers:
        for key, value in layer.items():
            if key == "active_hours" and isinstance(value, Mapping) and isinstance(
                    values.get(key), Mapping):
                values[key] = {**values[key], **value}
            else:
                values[key] = value
    return HeartbeatConfig.model_validate(values)


def heartbeat_settings(config: "KernelConfig", state: HeartbeatState) -> HeartbeatConfig:
    """A heartbeat's effective settings: :func:`merged_settings` with its own, and for the
    config heartbeat, ``every = "0"`` while the config does not ask for it
    (:meth:`KernelConfig.config_heartbeat_wanted`)."""
    settings = merged_settings(config, state.settings)
    if state.session_key is None and not config.config_heartbeat_wanted():
        settings = settings.model_copy(update={"every": "0"})
    return settings


# -- active hours ----------------------------------------------------------------------------


def zone_for(name: str, user_zone: str | None = None) -> tzinfo | None:
    """The zone of an ``active_hours.timezone``; None is the gateway's local time.

    ``user`` is the session's own zone (``/heartbeat tz``), else local time.
    """
    if name == "user":
        name = user_zone or "local"
    if name == "local":
        return None
    import zoneinfo

    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        log.warning("unknown time zone %r: using the local time", name)
        return None


def _minutes(clock: str) -> int:
    hours, minutes = clock.split(":")
    return int(hours) * 60 + int(minutes)


def in_active_hours(ts: float, hours: ActiveHours, zone: tzinfo | None) -> bool:
    """Whether ``start <= time of day < end`` at ``ts`` (a Unix time) in ``zone``.

    ``start`` after ``end`` spans midnight; ``start == end`` is never.
    """
    start, end = _minutes(hours.start), _minutes(hours.end)
    if start == end:
        return False
    local = datetime.fromtimestamp(ts, zone)
    now = local.hour * 60 + local.minute
    if start < end:
        return start <= now < end
    return now >= start or now < end


def next_window_start(ts: float, hours: ActiveHours, zone: tzinfo | None) -> float | None:
    """The next time after ``ts`` the window opens (None: an empty window never does)."""
    start = _minutes(hours.start)
    if start == _minutes(hours.end):
        return None
    local = datetime.fromtimestamp(ts, zone)
    for days in range(3):
        day = local.date() + timedelta(days=days)
        opening = datetime.combine(day, time_of_day(start // 60, start % 60), tzinfo=zone)
        if opening.timestamp() > ts:
            return opening.timestamp()
    return None  # pragma: no cover - a window opens within two days


# -- the clock -------------------------------------------------------------------------------


class Clock(Protocol):
    """Wall time for the scheduler: ``now()`` and a sleep until a moment."""

    def now(self) -> float: ...

    async def sleep_until(self, deadline: float) -> None: ...


class SystemClock:
    """The real clock. Sleeps are capped (:data:`MAX_SLEEP`): wall time may jump."""

    def now(self) -> float:
        return time.time()

    async def sleep_until(self, deadline: float) -> None:
        await anyio.sleep(max(0.0, min(deadline - time.time(), MAX_SLEEP)))


# -- the scheduler ---------------------------------------------------------------------------


@dataclass(slots=True)
class Destination:
    """Where a heartbeat runs and answers: a session, and its account and route
    (both None when there is nowhere to send)."""

    session_key: str
    session_id: str
    account: Account | None = None
    route: Route | None = None
    user_zone: str | None = None  # the session's /heartbeat tz
    problem: str = ""  # why there is no destination


@dataclass(slots=True)
class HeartbeatEvent:
    """An indicator event (``use_indicator``): a heartbeat started or ended."""

    heartbeat: str
    status: str  # running, ok, alert, error, preempted
    session_key: str
    at: float


@dataclass(slots=True)
class HeartbeatRecord:
    """What happened at a tick, kept in :attr:`HeartbeatScheduler.history`."""

    heartbeat: str
    outcome: str  # ok, alert, error, preempted, skipped:<reason>, waiting
    at: float
    session_key: str = ""
    sent: bool = False


@dataclass(slots=True)
class HeartbeatJob:
    """A heartbeat in memory: its stored state and what the scheduler knows now."""

    state: HeartbeatState
    scope: anyio.CancelScope | None = None  # set while a turn runs
    running_in: str = ""  # the session key of the running turn
    preempted: bool = False
    waiting_for: str | None = None  # a busy session's key: fire when its lane is idle
    hold_until: float | None = None  # outside active hours: not before the window opens
    forced: bool = False  # a manual wake: due now, past quiet hours and HEARTBEAT.md
    generation: int = 0  # bumped when /heartbeat replaces the definition

    @property
    def id(self) -> str:
        return self.state.id

    @property
    def running(self) -> bool:
        return self.scope is not None


class HeartbeatError(Exception):
    """A heartbeat request that cannot be done (wake, /heartbeat); the message says why."""


class HeartbeatScheduler:
    """Every heartbeat of one kernel: state, ticks, runs.

    ``start`` loads the state and, when any heartbeat is timed, starts the
    loop in the kernel's task group. Tests drive it with a manual clock (the
    loop sleeps until the clock is advanced) or call :meth:`tick` directly.
    """

    def __init__(self, kernel: "Kernel", clock: Clock | None = None) -> None:
        self.kernel = kernel
        self.clock: Clock = clock or SystemClock()
        self.jobs: dict[str, HeartbeatJob] = {}
        self.history: deque[HeartbeatRecord] = deque(maxlen=200)
        self.listeners: list[Callable[[HeartbeatEvent], None]] = []
        self.last_event: HeartbeatEvent | None = None
        self.started = False
        self._tg: TaskGroup | None = None
        self._loop_running = False
        self._lock = anyio.Lock()
        self._sleep: anyio.CancelScope | None = None
        self._woken = False
        self._slots = anyio.CapacityLimiter(MAX_RUNNING)

    # -- set-up ------------------------------------------------------------------------

    def check_config(self) -> None:
        """``heartbeat.target`` names none, last, or a channel that runs."""
        config = self.kernel.config
        settings = merged_settings(config)
        target = settings.target
        channels = {account.channel_name for account in self.kernel.accounts.values()}
        if target not in ("none", "last") and target not in channels:
            known = ", ".join(sorted(channels)) or "none"
            raise ConfigError(f"no running channel {target!r} to send heartbeats to "
                              f"(expected none, last or one of: {known})",
                              path=self.kernel.config_path, key="heartbeat.target")
        wanted = settings.account
        if wanted:
            candidates = [a for a in self.kernel.accounts.values()
                          if wanted in (a.name, a.key)
                          and target in ("none", "last", a.channel_name)]
            if not candidates:
                known = ", ".join(sorted(self.kernel.accounts)) or "none"
                raise ConfigError(f"no running account {wanted!r} to send heartbeats from "
                                  f"(accounts: {known})", path=self.kernel.config_path,
                                  key="heartbeat.account")

    async def start(self, task_group: "TaskGroup") -> None:
        """Load the state and start the loop if any heartbeat is timed."""
        self._tg = task_group
        self.started = True
        store = self.kernel.store
        now = self.clock.now()
        for state in await store.list_heartbeats():
            if state.id.startswith(SESSION_PREFIX) and state.session_key:
                self.jobs[state.id] = HeartbeatJob(state)
            elif state.id == MAIN:
                self.jobs[MAIN] = HeartbeatJob(state)
        if MAIN not in self.jobs:  # the config heartbeat: always there, every = 0 stops its timer
            self.jobs[MAIN] = HeartbeatJob(HeartbeatState(id=MAIN))
        for job in self.jobs.values():
            if job.state.anchor_at is None:  # new: the first run is one interval away
                job.state.anchor_at = now
                await store.save_heartbeat(job.state)
        if self._timed():
            self._ensure_loop()
        log.info("heartbeats: %s", ", ".join(self._summary(job) for job in self.jobs.values()))

    def _summary(self, job: HeartbeatJob) -> str:
        if job.id == MAIN and not self.kernel.config.config_heartbeat_wanted():
            return f"{MAIN} off (no [heartbeat] table; a manual wake runs it)"
        every = self.settings_for(job).every
        return f"{job.id} every {every}" + (" (wake only)" if every == "0" else "")

    def stopped(self) -> None:
        """The task group given to :meth:`start` ended (another instance runs the
        heartbeats now, core/gateway/cluster.py): forget the jobs; :meth:`start` loads them
        again."""
        self._tg = None
        self.started = False
        self._loop_running = False
        self._sleep = None
        self.jobs.clear()

    def _timed(self) -> bool:
        return any(self.settings_for(job).interval() > 0 for job in self.jobs.values())

    def _ensure_loop(self) -> None:
        if self._tg is not None and not self._loop_running:
            self._loop_running = True
            self._tg.start_soon(self._loop, name="heartbeat scheduler")

    # -- the loop --------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:  # a bug in one tick must not end the heartbeats
                log.exception("heartbeat tick failed")
            if self._woken:
                self._woken = False
                await anyio.sleep(0)
                continue
            deadline = self.next_deadline()
            with anyio.CancelScope() as self._sleep:
                if deadline is None:
                    await anyio.sleep_forever()
                else:
                    await self.clock.sleep_until(deadline)
            self._sleep = None
            self._woken = False

    def quiescent(self) -> bool:
        """Nothing to do until the clock moves or a lane goes idle: no turn runs, the
        loop sleeps, and nothing is due now (tests wait for this)."""
        if any(job.running for job in self.jobs.values()):
            return False
        if self._loop_running and (self._sleep is None or self._woken):
            return False
        deadline = self.next_deadline()
        return deadline is None or deadline > self.clock.now()

    def wake(self) -> None:
        """Look at the heartbeats now (a lane went idle, a definition changed...)."""
        self._woken = True
        if self._sleep is not None:
            self._sleep.cancel()

    def next_deadline(self) -> float | None:
        """When the loop should look next: the earliest due time of a heartbeat that
        waits for nothing else (a busy lane wakes the loop itself)."""
        deadlines = []
        for job in self.jobs.values():
            if job.running or job.waiting_for is not None:
                continue
            if job.forced:
                return self.clock.now()
            due = self._due_at(job)
            if due is not None:
                deadlines.append(due)
        return min(deadlines, default=None)

    def _due_at(self, job: HeartbeatJob) -> float | None:
        if job.state.paused:
            return None
        every = self.settings_for(job).interval()
        if every <= 0 or job.state.anchor_at is None:
            return None
        due = job.state.anchor_at + every
        if job.hold_until is not None:
            due = max(due, job.hold_until)
        return due

    # -- queue observers ----------------------------------------------------------------------

    def lane_busy(self, session_key: str) -> None:
        """A user turn starts in a session: user messages win over its heartbeat."""
        for job in self.jobs.values():
            if job.scope is not None and job.running_in == session_key:
                log.info("heartbeat %s: a message arrived in %s; the heartbeat yields and "
                         "runs again when the session is idle", job.id, session_key)
                job.preempted = True
                job.scope.cancel()

    def lane_idle(self, session_key: str) -> None:
        """A session's lane is idle: a heartbeat waiting for it may fire."""
        for job in self.jobs.values():
            if job.waiting_for == session_key:
                job.waiting_for = None
                self.wake()

    # -- a tick ------------------------------------------------------------------------------

    async def tick(self) -> list[HeartbeatRecord]:
        """Consider every due heartbeat once: skip it (with a reason), let it wait for
        its busy session, or start its turn. Returns what was decided."""
        decided: list[HeartbeatRecord] = []
        async with self._lock:
            for job in list(self.jobs.values()):
                if job.running or (job.waiting_for is not None and
                                   self.kernel.queue.is_busy(job.waiting_for)):
                    continue
                job.waiting_for = None
                now = self.clock.now()
                if not job.forced:
                    due = self._due_at(job)
                    if due is None or now < due:
                        continue
                try:
                    record = await self._consider(job, now)
                except Exception:  # e.g. the store: look again later, do not spin
                    log.exception("heartbeat %s: cannot be considered; trying again in %gs",
                                  job.id, MAX_SLEEP)
                    job.hold_until = now + MAX_SLEEP
                    continue
                if record is not None:
                    decided.append(record)
        return decided

    async def _consider(self, job: HeartbeatJob, now: float) -> HeartbeatRecord | None:
        settings = self.settings_for(job)
        destination = await self.destination(job, settings)
        visibility = visibility_for(self.kernel.pm, self.kernel.config, destination.account)
        if not any(visibility.values()):
            return await self._skip(job, "alerts-disabled", now, reanchor=True)
        hours = settings.active_hours
        if hours is not None and not job.forced:
            zone = zone_for(hours.timezone, destination.user_zone)
            if not in_active_hours(now, hours, zone):
                opening = next_window_start(now, hours, zone)
                if opening is None:  # an empty window: every tick is skipped
                    return await self._skip(job, "quiet-hours", now, reanchor=True)
                job.hold_until = opening  # not looked at again before: one skip per quiet spell
                return await self._skip(job, "quiet-hours", now, reanchor=False,
                                        detail=f"until {_when(opening, zone)}")
        prompt = self.prompt_for(job, settings, now)
        if isinstance(prompt, str):
            return await self._skip(job, prompt, now, reanchor=True)
        if self.kernel.queue.is_busy(destination.session_key):
            job.waiting_for = destination.session_key
            log.debug("heartbeat %s waits: session %s is busy", job.id,
                      destination.session_key)
            return self._record(job, "waiting", now, destination.session_key)
        assert self._tg is not None
        forced, job.forced = job.forced, False
        job.hold_until = None
        job.preempted = False
        job.scope = anyio.CancelScope()
        job.running_in = destination.session_key
        notes = len(job.state.wake_texts)  # in the prompt: cleared once the run completes
        self._tg.start_soon(self._run, job, destination, settings, visibility, prompt, now,
                            forced, notes, name=f"heartbeat {job.id}")
        return self._record(job, "started", now, destination.session_key)

    async def _skip(self, job: HeartbeatJob, reason: str, now: float, *, reanchor: bool,
                    detail: str = "") -> HeartbeatRecord:
        """Every skip is logged with its reason and counted."""
        log.info("heartbeat %s skipped: %s%s", job.id, reason, f" ({detail})" if detail else "")
        self.kernel.metrics.heartbeat_skips.labels(reason).inc()
        job.state.last_outcome = f"skipped: {reason}"
        job.forced = False
        if reanchor:
            job.state.anchor_at = now
            job.hold_until = None
        await self.kernel.store.save_heartbeat(job.state)
        return self._record(job, f"skipped:{reason}", now)

    def _record(self, job: HeartbeatJob, outcome: str, now: float, session_key: str = "",
                sent: bool = False) -> HeartbeatRecord:
        record = HeartbeatRecord(job.id, outcome, now, session_key, sent)
        self.history.append(record)
        return record

    # -- settings, destination, prompt -----------------------------------------------------------

    def settings_for(self, job: HeartbeatJob) -> HeartbeatConfig:
        """The heartbeat's effective settings (config, agent, then its own)."""
        return heartbeat_settings(self.kernel.config, job.state)

    async def destination(self, job: HeartbeatJob, settings: HeartbeatConfig) -> Destination:
        """Where the heartbeat runs and answers, resolved at each tick."""
        kernel = self.kernel
        if job.state.session_key is not None:
            key = job.state.session_key
            record = await kernel.sessions.get(key)
            if record is None:
                return Destination(NO_TARGET_SESSION, "heartbeat",
                                   problem=f"session {key} is gone")
            zone = record.settings.get("timezone")
            account = kernel.accounts.get(f"{record.channel}:{record.account}")
            route = await kernel.sessions.route(key)
            if account is None or route is None:
                return Destination(key, record.session_id, user_zone=zone,
                                   problem=f"account {record.channel}:{record.account} "
                                           "is not running")
            return Destination(key, record.session_id, account, route, zone)
        if settings.target == "none":
            return Destination(NO_TARGET_SESSION, "heartbeat", problem="target is none")
        try:
            if settings.target == "last":
                account, chat = await self._last_chat(settings.account)
                key = Session.make_key(account.channel_name, account.name, chat["chat_id"],
                                       chat.get("thread_id"))
                route = await kernel.sessions.route(key) or Route(
                    account.channel_name, account.name, chat["chat_id"],
                    thread_id=chat.get("thread_id"), is_group=bool(chat.get("is_group")))
            else:
                name = settings.account
                if name and ":" in name:
                    name = name.split(":", 1)[1]
                account, route, key = await kernel.resolve_target(
                    settings.target, name, settings.to or "last")
        except LookupError as exc:
            return Destination(NO_TARGET_SESSION, "heartbeat", problem=str(exc))
        record = await kernel.sessions.get(key)
        return Destination(key, record.session_id if record else "heartbeat", account, route,
                           record.settings.get("timezone") if record else None)

    async def _last_chat(self, wanted: str | None) -> tuple[Account, dict[str, Any]]:
        """The most recently active of the accounts' last chats (``account`` narrows it:
        ``name`` or ``channel:name``)."""
        kernel = self.kernel
        best: tuple[float, Account, dict[str, Any]] | None = None
        for account in kernel.accounts.values():
            if wanted and wanted not in (account.name, account.key):
                continue
            chat = kernel.inbound.last_chat(account) or await kernel.store.get_account_state(
                account.channel_name, account.name, "last_chat")
            if not chat:
                continue
            key = Session.make_key(account.channel_name, account.name, chat["chat_id"],
                                   chat.get("thread_id"))
            record = await kernel.sessions.get(key)
            active = record.last_active_at if record is not None else 0.0
            if best is None or active > best[0]:
                best = (active, account, chat)
        if best is None:
            which = f" of account {wanted!r}" if wanted else ""
            raise LookupError(f"no last active chat{which} yet")
        return best[1], best[2]

    def prompt_for(self, job: HeartbeatJob, settings: HeartbeatConfig,
                   now: float) -> TaskPrompt | str:
        """The turn's prompt, or the reason to skip (HEARTBEAT.md, config heartbeat only)."""
        wake = "".join(f"\n\nWoken with a note: {text}" for text in job.state.wake_texts)
        if job.state.session_key is not None:
            base = (settings.prompt or DEFAULT_PROMPT).strip()
            return TaskPrompt(f"{base}\n\n{SESSION_GUARD}{wake}")
        base = (settings.prompt or DEFAULT_PROMPT).strip()
        file = read_heartbeat_file(self.kernel.workspace)
        if file is None:  # no file: run anyway
            return TaskPrompt(base + wake)
        if file.error:
            log.warning("heartbeat %s: %s; the tasks block is ignored", job.id, file.error)
            return TaskPrompt(base + wake)
        # A manual wake, or a wake note waiting, is work enough to run.
        woken = job.forced or bool(job.state.wake_texts)
        if file.effectively_empty and not woken:
            return "empty-heartbeat-file"
        if not file.has_tasks:
            return TaskPrompt(base + wake)
        due = file.due(job.state.task_runs, now)
        if not due:
            return TaskPrompt(base + wake) if woken else "no-tasks-due"
        prompt = prompt_with_tasks(base, file, due)
        prompt.text += wake
        return prompt

    # -- a run ---------------------------------------------------------------------------------

    async def _run(self, job: HeartbeatJob, destination: Destination,
                   settings: HeartbeatConfig, visibility: dict[str, bool],
                   prompt: TaskPrompt, fired_at: float, forced: bool, notes: int) -> None:
        kernel = self.kernel
        store = kernel.store
        scope = job.scope
        assert scope is not None
        generation = job.generation
        key = destination.session_key
        texts: list[str] = []
        errors: list[str] = []
        indicate = visibility["use_indicator"]
        typing = indicate and destination.account is not None
        try:
            if indicate:
                self._emit(job, "running", key, fired_at)
            if typing:
                kernel.indicators.begin(destination.account, key)
            with scope:
                async with self._slots:
                    seq = await store.append_log(key, destination.session_id, "heartbeat",
                                                 prompt.text, {"heartbeat": job.id})
                    request = TurnRequest(
                        session_key=key, session_id=destination.session_id, text=prompt.text,
                        envelope=self._envelope(fired_at, settings, destination),
                        heartbeat=True, log_seq=seq,
                        meta={"heartbeat": job.id, "tasks": list(prompt.tasks)})
                    try:
                        assert kernel.agent is not None
                        async with contextlib.aclosing(kernel.agent.turn(request)) as events:
                            async for event in events:
                                if event.kind == "text" and event.final and event.text.strip():
                                    texts.append(event.text)
                                elif event.kind == "error":
                                    errors.append(event.text)
                    except Exception as exc:
                        log.exception("heartbeat %s: the agent failed", job.id)
                        errors.append(f"the agent failed: {exc}")
        finally:
            if typing and not kernel.queue.is_busy(key):  # a user turn's indicator stays
                kernel.indicators.end(key)
            job.scope = None
            job.running_in = ""
        with anyio.CancelScope(shield=True):  # the turn is over: record it whatever comes
            current = self.jobs.get(job.id) is job and job.generation == generation
            if scope.cancelled_caught:
                if job.preempted and current:
                    job.waiting_for = key  # fires again when the user's turn is over
                    job.forced = forced
                job.preempted = False
                # Preempted by a user message, or cleared with /heartbeat clear.
                self._finish(job, "preempted" if current else "cancelled", fired_at, key,
                             indicate)
                return
            await self._complete(job, current, destination, settings, visibility, prompt,
                                 fired_at, texts, errors, notes)

    async def _complete(self, job: HeartbeatJob, current: bool, destination: Destination,
                        settings: HeartbeatConfig, visibility: dict[str, bool],
                        prompt: TaskPrompt, fired_at: float, texts: list[str],
                        errors: list[str], notes: int) -> None:
        kernel = self.kernel
        store = kernel.store
        key = destination.session_key
        sent = False
        if errors:
            outcome = "error"
            detail = "; ".join(errors)
            log.warning("heartbeat %s failed in %s: %s", job.id, key, detail)
            await store.append_log(key, destination.session_id, "notification",
                                   f"heartbeat failed: {detail}",
                                   {"kind": "heartbeat", "heartbeat": job.id})
        else:
            judged = judge_heartbeat_reply("\n\n".join(texts), settings.ack_max_chars)
            if judged.kind == "alert":
                outcome, show, text = "alert", visibility["show_alerts"], judged.text
            else:
                outcome, show = "ok", visibility["show_ok"]
                text = judged.text or HEARTBEAT_TOKEN
            reason = self._not_sent_reason(outcome, show, settings, destination)
            if reason is None:
                await self._deliver(destination, text)
                sent = True
            else:
                if reason:
                    log.info("heartbeat %s: %s not sent (%s%s)", job.id, outcome, reason,
                             f": {destination.problem}" if reason == "no-target" else "")
                    kernel.metrics.heartbeat_skips.labels(reason).inc()
                await store.append_log(key, destination.session_id, "heartbeat", text,
                                       {"heartbeat": job.id, "outcome": outcome,
                                        "not_sent": reason or "acknowledged"})
        if current:
            state = job.state
            state.anchor_at = fired_at  # the timer re-anchors on fire
            state.last_run_at = fired_at
            state.last_outcome = outcome + (" (sent)" if sent else "")
            if outcome != "error":  # only a completed run advances its tasks
                for name in prompt.tasks:
                    state.task_runs[name] = fired_at
                del state.wake_texts[:notes]  # a note left during the run waits
            await store.save_heartbeat(state)
        self._finish(job, outcome, fired_at, key, visibility["use_indicator"], sent)

    @staticmethod
    def _not_sent_reason(outcome: str, show: bool, settings: HeartbeatConfig,
                         destination: Destination) -> str | None:
        """None: send it. ``""``: an acknowledgement nobody asked to see (the normal
        case, not a skip). Otherwise the skip reason."""
        if not show:
            return "alerts-hidden" if outcome == "alert" else ""
        if destination.account is None or destination.route is None:
            return "no-target"
        if settings.direct_policy == "block" and not destination.route.is_group:
            return "dm-blocked"
        return None

    async def _deliver(self, destination: Destination, text: str) -> None:
        """Through the Responder and the outbox, like any reply."""
        from chatkernel.core.outbound.responder import Responder

        assert destination.account is not None and destination.route is not None
        responder = Responder(self.kernel, destination.account, destination.session_key,
                              destination.session_id, destination.route, [], heartbeat=True)
        await responder.handle(AgentEvent.reply(text))
        await responder.flush()

    def _finish(self, job: HeartbeatJob, outcome: str, fired_at: float, key: str,
                indicate: bool, sent: bool = False) -> None:
        self.kernel.metrics.heartbeats.labels(outcome).inc()
        log.info("heartbeat %s in %s: %s%s", job.id, key, outcome, " (sent)" if sent else "")
        self._record(job, outcome, fired_at, key, sent)
        if indicate:
            self._emit(job, outcome, key, self.clock.now())
        self.wake()  # the next deadline moved

    def _emit(self, job: HeartbeatJob, status: str, key: str, at: float) -> None:
        event = HeartbeatEvent(job.id, status, key, at)
        self.last_event = event
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception:
                log.exception("heartbeat listener failed")

    def _envelope(self, ts: float, settings: HeartbeatConfig,
                  destination: Destination) -> str:
        zone = zone_for(settings.active_hours.timezone if settings.active_hours else "local",
                        destination.user_zone)
        return f"[heartbeat | {_when(ts, zone)}]"

    # -- session heartbeats, wakes, status --------------------------------------------------------

    async def set_session(self, session_key: str, every: float, prompt: str) -> HeartbeatJob:
        """``/heartbeat every``: define (or replace) a session's heartbeat."""
        if every < MIN_SESSION_EVERY:
            raise HeartbeatError(f"the interval must be at least "
                                 f"{format_interval(MIN_SESSION_EVERY)}")
        if not prompt.strip():
            raise HeartbeatError("give the prompt to run")
        heartbeat_id = SESSION_PREFIX + session_key
        state = HeartbeatState(id=heartbeat_id, session_key=session_key,
                               settings={"every": format_interval(every),
                                         "prompt": prompt.strip()},
                               anchor_at=self.clock.now())
        job = self.jobs.get(heartbeat_id)
        if job is None:
            job = self.jobs[heartbeat_id] = HeartbeatJob(state)
        else:
            job.state, job.generation = state, job.generation + 1
            job.waiting_for = job.hold_until = None
            job.forced = False
        await self.kernel.store.save_heartbeat(state)
        self._ensure_loop()
        self.wake()
        return job

    def reconsider(self) -> None:
        """Settings changed (a session's time zone...): drop the quiet-hours holds, so
        every heartbeat is looked at again now."""
        for job in self.jobs.values():
            job.hold_until = None
        self.wake()

    def reschedule(self) -> None:
        """The config changed (a reload): every heartbeat's due time follows its new
        settings from now on (an interval counts from the same anchor), and the loop
        starts if a heartbeat is timed now."""
        if not self.started:
            return
        if self._timed():
            self._ensure_loop()
        self.reconsider()

    def session_job(self, session_key: str) -> HeartbeatJob | None:
        return self.jobs.get(SESSION_PREFIX + session_key)

    async def pause(self, session_key: str) -> HeartbeatJob:
        job = self._session_job_or_error(session_key)
        job.state.paused = True
        job.waiting_for = job.hold_until = None
        job.forced = False
        await self.kernel.store.save_heartbeat(job.state)
        return job

    async def resume(self, session_key: str) -> HeartbeatJob:
        """Resume, re-anchored at now: a tick missed while paused does not fire."""
        job = self._session_job_or_error(session_key)
        job.state.paused = False
        job.state.anchor_at = self.clock.now()
        job.hold_until = None
        await self.kernel.store.save_heartbeat(job.state)
        self.wake()
        return job

    async def clear(self, session_key: str) -> bool:
        job = self.jobs.pop(SESSION_PREFIX + session_key, None)
        deleted = await self.kernel.store.delete_heartbeat(SESSION_PREFIX + session_key)
        if job is not None and job.scope is not None:
            job.scope.cancel()
        return job is not None or deleted

    def _session_job_or_error(self, session_key: str) -> HeartbeatJob:
        job = self.session_job(session_key)
        if job is None:
            raise HeartbeatError("there is no heartbeat in this session "
                                 "(set one: /heartbeat every 30m <prompt>)")
        return job

    async def wake_up(self, text: str | None = None, mode: str = "now",
                      session_key: str | None = None) -> HeartbeatJob:
        """A manual wake: ``now`` runs the heartbeat at once (past quiet hours and
        HEARTBEAT.md's skips; still idle-only); ``next`` leaves the text for its next
        scheduled run. The text reaches the agent either way."""
        if mode not in ("now", "next"):
            raise HeartbeatError(f"mode must be now or next, not {mode!r}")
        if session_key:
            job = self.session_job(session_key)
            if job is None:
                raise HeartbeatError(f"session {session_key} has no heartbeat")
        else:
            job = self.jobs.get(MAIN)
            if job is None:
                raise HeartbeatError("the config heartbeat does not run in this kernel "
                                     "(only the gateway runs heartbeats)")
        text = (text or "").strip()
        if mode == "next" and not text:
            raise HeartbeatError("--mode next needs --text: the note for the next heartbeat")
        if text:
            job.state.wake_texts.append(text)
            await self.kernel.store.save_heartbeat(job.state)
        if mode == "now":
            job.forced = True
            job.waiting_for = None
            self._ensure_loop()
            self.wake()
        return job

    def describe(self, job: HeartbeatJob) -> dict[str, Any]:
        """A heartbeat's status, for ``/heartbeat``, the control API and the CLI."""
        info = describe_state(job.state, self.settings_for(job), self.clock.now(),
                              wanted=self.kernel.config.config_heartbeat_wanted())
        info.update(running=job.running, waiting_for=job.waiting_for,
                    forced=job.forced, hold_until=job.hold_until)
        for record in reversed(self.history):  # where its last run went, as it went
            if record.heartbeat == job.id and record.session_key and \
                    record.outcome not in ("started", "waiting"):
                info["log_session"] = record.session_key
                break
        if job.hold_until is not None and info["next_due_at"] is not None:
            info["next_due_at"] = max(info["next_due_at"], job.hold_until)
            info["next_in_seconds"] = max(0.0, info["next_due_at"] - self.clock.now())
        return info

    def status(self) -> dict[str, Any]:
        scheduled = self._loop_running and any(self._due_at(job) is not None
                                               for job in self.jobs.values())
        return {"started": self.started, "loop": self._loop_running, "scheduled": scheduled,
                "heartbeats": [self.describe(job) for job in self.jobs.values()],
                "last_event": None if self.last_event is None else {
                    "heartbeat": self.last_event.heartbeat, "status": self.last_event.status,
                    "session": self.last_event.session_key, "at": self.last_event.at}}


def describe_state(state: HeartbeatState, settings: HeartbeatConfig,
                   now: float, *, wanted: bool = True) -> dict[str, Any]:
    """A heartbeat's status from its stored state alone (also without a gateway).
    ``wanted``: whether the config asks for the config heartbeat (``off`` says it
    does not)."""
    every = settings.interval()
    due = None
    if not state.paused and every > 0 and state.anchor_at is not None:
        due = state.anchor_at + every
    return {
        "id": state.id,
        "kind": "session" if state.session_key else "config",
        "session": state.session_key,
        "every": format_interval(every) if every else "0",
        "every_seconds": every,
        "prompt": settings.prompt or (DEFAULT_PROMPT if not state.session_key else ""),
        "target": "session" if state.session_key else settings.target,
        "paused": state.paused,
        "off": state.session_key is None and not wanted,
        "last_run_at": state.last_run_at,
        "last_outcome": state.last_outcome,
        # The session whose log has its runs (`sessions history`), where that is fixed.
        "log_session": state.session_key or (
            NO_TARGET_SESSION if not wanted or settings.target == "none" else None),
        "next_due_at": due,
        "next_in_seconds": None if due is None else max(0.0, due - now),
        "wake_texts": list(state.wake_texts),
        "task_runs": dict(state.task_runs),
    }


def _when(ts: float, zone: tzinfo | None) -> str:
    moment = datetime.fromtimestamp(ts, zone)
    if zone is None:
        moment = moment.astimezone()
    return moment.strftime("%Y-%m-%d %H:%M %Z").strip()


__all__ = [
    "DEFAULT_PROMPT", "MAIN", "MIN_SESSION_EVERY", "SESSION_GUARD", "SKIP_REASONS",
    "Clock", "Destination", "HeartbeatError", "HeartbeatEvent",
    "HeartbeatJob", "HeartbeatRecord", "HeartbeatScheduler", "SystemClock",
    "describe_state", "heartbeat_settings", "in_active_hours", "merged_settings",
    "next_window_start", "plugin_visibility_defaults", "resolve_visibility",
    "visibility_for", "zone_for",
]
