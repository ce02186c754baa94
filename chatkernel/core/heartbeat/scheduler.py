"""Heartbeats: periodic agent turns in a session, so the agent can surface what
needs attention. See docs/heartbeats.md for the user's view.

Two kinds, one scheduler:

- the **config heartbeat** (id ``main``): ``[heartbeat]`` with ``[agent.heartbeat]``
  merged over it, run by the default agent; it runs in the session of its target
  (``last``: the last active chat; a channel with ``to``) or, with no destination,
  in a session of its own (``heartbeat:main``) whose replies go nowhere.
  HEARTBEAT.md in the workspace applies to it. Each other agent with a heartbeat
  table (``[agents.<name>.heartbeat]``) has one of its own (id ``agent:<name>``):
  its settings merged over ``[heartbeat]``, its schedule, its target (its session
  with the target chat, or ``heartbeat:agent:<name>``), its workspace's HEARTBEAT.md.
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
a worker from user messages), at most
:data:`~chatkernel.core.heartbeat.runner.MAX_RUNNING` at once; a user message
arriving in a session cancels its running heartbeat, which fires again at the
next idle moment. The clock is injectable
(:mod:`~chatkernel.core.heartbeat.clock`): tests use
:class:`chatkernel.testing.clock.ManualClock`.

The turn itself goes through the agent and the same :class:`Responder` and
outbox as any reply; the reply contract (``HEARTBEAT_OK``) and the visibility
settings decide whether anything is sent. A heartbeat never touches the
session's activity time or the account's last active chat.

The scheduler decides when; it delegates the rest, one module per concern:
:mod:`~chatkernel.core.heartbeat.settings` (effective settings, visibility),
:mod:`~chatkernel.core.heartbeat.hours` (active hours),
:mod:`~chatkernel.core.heartbeat.targets` (where a heartbeat runs and answers),
:mod:`~chatkernel.core.heartbeat.prompt` (what it asks),
:mod:`~chatkernel.core.heartbeat.runner` (one turn and its answer) and
:mod:`~chatkernel.core.heartbeat.jobs` (the heartbeats and their stored state).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from chatkernel.core.config import HeartbeatConfig, KernelConfig
from chatkernel.core.heartbeat.checklist import TaskPrompt
from chatkernel.core.heartbeat.clock import MAX_SLEEP, Clock, SystemClock
from chatkernel.core.heartbeat.hours import in_active_hours, next_window_start, when, zone_for
from chatkernel.core.heartbeat.jobs import (
    MAIN,
    HeartbeatError,
    HeartbeatJob,
    HeartbeatJobs,
    describe_state,
)
from chatkernel.core.heartbeat.prompt import heartbeat_prompt
from chatkernel.core.heartbeat.runner import HeartbeatRunner
from chatkernel.core.heartbeat.settings import (
    AGENT_PREFIX,
    heartbeat_settings,
    heartbeat_wanted,
    job_agent,
    visibility_for,
)
from chatkernel.core.heartbeat.targets import Destination, Targets
from chatkernel.sdk.errors import StoreError

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from chatkernel.core.health.metrics import Metrics

log = logging.getLogger("chatkernel.heartbeat")

SKIP_REASONS = ("alerts-disabled", "quiet-hours", "empty-heartbeat-file", "no-tasks-due",
                "dm-blocked", "no-target", "alerts-hidden")


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


class HeartbeatScheduler:
    """Every heartbeat of one kernel: state, ticks, runs.

    ``start`` loads the state and, when any heartbeat is timed, starts the
    loop in the task group it is given. Tests drive it with a manual clock (the
    loop sleeps until the clock is advanced) or call :meth:`tick` directly.
    """

    def __init__(self, *, config: Callable[[], KernelConfig], jobs: HeartbeatJobs,
                 runner: HeartbeatRunner, targets: Targets,
                 session_busy: Callable[[str], bool], pm: Any, metrics: "Metrics",
                 workspace: Callable[[str], Path], clock: Clock | None = None) -> None:
        """``config()``: the config in force (a reload replaces it); ``jobs``: the
        heartbeats and their stored state; ``runner``: runs a turn and sends its answer;
        ``targets``: where a heartbeat runs and answers; ``session_busy(key)``: whether
        a user turn runs or waits in a session (a heartbeat waits for it); ``pm``: the
        plugin manager (its ``heartbeat_visibility`` answers); ``metrics``: where runs
        and skips are counted; ``workspace(agent)``: where an agent's HEARTBEAT.md is;
        ``clock``: the
        system's, or a test's :class:`~chatkernel.testing.clock.ManualClock`."""
        self._config = config
        self._targets = targets
        self._session_busy = session_busy
        self._pm = pm
        self._metrics = metrics
        self._workspace = workspace
        self.clock: Clock = clock or SystemClock()
        self.saved = jobs
        self.runner = runner
        #: The heartbeats by id (the same dict as :attr:`HeartbeatJobs.by_id`).
        self.jobs: dict[str, HeartbeatJob] = self.saved.by_id
        self.history: deque[HeartbeatRecord] = deque(maxlen=200)
        self.listeners: list[Callable[[HeartbeatEvent], None]] = []
        self.last_event: HeartbeatEvent | None = None
        self.started = False
        self._tg: TaskGroup | None = None
        self._loop_running = False
        self._lock = anyio.Lock()
        self._sleep: anyio.CancelScope | None = None
        self._woken = False

    # -- set-up ------------------------------------------------------------------------

    async def start(self, task_group: "TaskGroup") -> None:
        """Load the state and start the loop if any heartbeat is timed."""
        self._tg = task_group
        self.started = True
        await self.saved.load(self.clock.now(), self._config().agent_heartbeats())
        if self._timed():
            self._ensure_loop()
        log.info("heartbeats: %s", ", ".join(self._summary(job) for job in self.jobs.values()))

    def _summary(self, job: HeartbeatJob) -> str:
        if job.id == MAIN and not self._config().config_heartbeat_wanted():
            return f"{MAIN} off (no [heartbeat] table; a manual wake runs it)"
        every = self.settings_for(job).every
        return f"{job.id} every {every}" + (" (wake only)" if every == "0" else "")

    def stopped(self) -> None:
        """The task group given to :meth:`start` ended (another instance runs the
        heartbeats now, core/runtime/cluster.py): forget the jobs; :meth:`start` loads them
        again."""
        self._tg = None
        self.started = False
        self._loop_running = False
        self._sleep = None
        self.saved.forget()

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
                                   self._session_busy(job.waiting_for)):
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
        visibility = visibility_for(self._pm, self._config(), destination.account)
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
                                        detail=f"until {when(opening, zone)}")
        prompt = self.prompt_for(job, settings, now)
        if isinstance(prompt, str):
            return await self._skip(job, prompt, now, reanchor=True)
        if self._session_busy(destination.session_key):
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
        self._metrics.heartbeat_skips.labels(reason).inc()
        await self.saved.skipped(job, reason, now, reanchor=reanchor)
        return self._record(job, f"skipped:{reason}", now)

    def _record(self, job: HeartbeatJob, outcome: str, now: float, session_key: str = "",
                sent: bool = False) -> HeartbeatRecord:
        record = HeartbeatRecord(job.id, outcome, now, session_key, sent)
        self.history.append(record)
        return record

    # -- settings, destination, prompt -----------------------------------------------------------

    def settings_for(self, job: HeartbeatJob) -> HeartbeatConfig:
        """The heartbeat's effective settings (config, agent, then its own)."""
        return heartbeat_settings(self._config(), job.state)

    async def destination(self, job: HeartbeatJob, settings: HeartbeatConfig) -> Destination:
        """Where the heartbeat runs and answers, resolved at each tick."""
        return await self._targets.resolve(job.state, settings, job_agent(job.id) or "default")

    def prompt_for(self, job: HeartbeatJob, settings: HeartbeatConfig,
                   now: float) -> TaskPrompt | str:
        """The turn's prompt, or the reason to skip (HEARTBEAT.md, config heartbeat only)."""
        return heartbeat_prompt(job.state, settings, now,
                                self._workspace(job_agent(job.id) or "default"),
                                forced=job.forced)

    # -- a run ---------------------------------------------------------------------------------

    async def _run(self, job: HeartbeatJob, destination: Destination,
                   settings: HeartbeatConfig, visibility: dict[str, bool],
                   prompt: TaskPrompt, fired_at: float, forced: bool, notes: int) -> None:
        scope = job.scope
        assert scope is not None
        generation = job.generation
        key = destination.session_key
        indicate = visibility["use_indicator"]
        try:
            if indicate:
                self._emit(job, "running", key, fired_at)
            texts, errors = await self.runner.turn(
                job.id, scope, destination, settings, prompt, fired_at,
                typing=indicate and destination.account is not None)
        finally:
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
            try:
                outcome, sent = await self.runner.answer(job.id, destination, settings,
                                                         visibility, texts, errors)
            except StoreError as exc:
                # Its answer could not be queued: the store is unreachable, or the
                # account's lease went to another instance meanwhile (LeaseLost). The
                # run is an error, like an agent's; the gateway and the others go on.
                log.warning("heartbeat %s in %s: its answer could not be queued: %s",
                            job.id, key, exc)
                outcome, sent = "error", False
            if current:
                try:
                    await self.saved.ran(job, fired_at, outcome, sent, prompt.tasks, notes)
                except StoreError as exc:  # re-anchored in memory: it fires at its time
                    log.warning("heartbeat %s: its run could not be saved: %s", job.id, exc)
            self._finish(job, outcome, fired_at, key, indicate, sent)

    def _finish(self, job: HeartbeatJob, outcome: str, fired_at: float, key: str,
                indicate: bool, sent: bool = False) -> None:
        self._metrics.heartbeats.labels(outcome).inc()
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

    # -- session heartbeats, wakes, status --------------------------------------------------------

    async def set_session(self, session_key: str, every: float, prompt: str) -> HeartbeatJob:
        """``/heartbeat every``: define (or replace) a session's heartbeat."""
        job = await self.saved.define(session_key, every, prompt, self.clock.now())
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
        for job in self.saved.follow_agents(self._config().agent_heartbeats(),
                                            self.clock.now()):
            if self._tg is not None:
                self._tg.start_soon(self.saved.save, job, name=f"heartbeat {job.id} saved")
        if self._timed():
            self._ensure_loop()
        self.reconsider()

    def session_job(self, session_key: str) -> HeartbeatJob | None:
        return self.saved.session_job(session_key)

    async def pause(self, session_key: str) -> HeartbeatJob:
        return await self.saved.pause(session_key)

    async def resume(self, session_key: str) -> HeartbeatJob:
        """Resume, re-anchored at now: a tick missed while paused does not fire."""
        job = await self.saved.resume(session_key, self.clock.now())
        self.wake()
        return job

    async def clear(self, session_key: str) -> bool:
        job, deleted = await self.saved.remove(session_key)
        if job is not None and job.scope is not None:
            job.scope.cancel()
        return job is not None or deleted

    async def wake_up(self, text: str | None = None, mode: str = "now",
                      session_key: str | None = None, agent: str | None = None
                      ) -> HeartbeatJob:
        """A manual wake: ``now`` runs the heartbeat at once (past quiet hours and
        HEARTBEAT.md's skips; still idle-only); ``next`` leaves the text for its next
        scheduled run. The text reaches the agent either way. ``agent``: that agent's
        config heartbeat (default: the default agent's)."""
        if mode not in ("now", "next"):
            raise HeartbeatError(f"mode must be now or next, not {mode!r}")
        if session_key:
            job = self.session_job(session_key)
            if job is None:
                raise HeartbeatError(f"session {session_key} has no heartbeat")
        elif agent and agent != "default":
            job = self.jobs.get(AGENT_PREFIX + agent)
            if job is None:
                has = ["default", *self._config().agent_heartbeats()]
                raise HeartbeatError(f"agent {agent!r} has no heartbeat (agents with one: "
                                     f"{', '.join(has)}; give it an "
                                     f"[agents.{agent}.heartbeat] table)")
        else:
            job = self.jobs.get(MAIN)
            if job is None:
                raise HeartbeatError("the config heartbeat does not run in this kernel "
                                     "(only the gateway runs heartbeats)")
        text = (text or "").strip()
        if mode == "next" and not text:
            raise HeartbeatError("--mode next needs --text: the note for the next heartbeat")
        if text:
            await self.saved.add_note(job, text)
        if mode == "now":
            job.forced = True
            job.waiting_for = None
            self._ensure_loop()
            self.wake()
        return job

    def describe(self, job: HeartbeatJob) -> dict[str, Any]:
        """A heartbeat's status, for ``/heartbeat``, the control API and the CLI."""
        info = describe_state(job.state, self.settings_for(job), self.clock.now(),
                              wanted=heartbeat_wanted(self._config(),
                                                      job_agent(job.id) or "default"))
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


__all__ = ["SKIP_REASONS", "HeartbeatEvent", "HeartbeatRecord", "HeartbeatScheduler"]
