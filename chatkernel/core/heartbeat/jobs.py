"""The heartbeats of one kernel and their stored state.

A :class:`HeartbeatJob` is a heartbeat in memory: its :class:`HeartbeatState` (what the
store keeps: anchor, last run, settings, wake notes, task runs, paused) and what the
scheduler knows now (running, waiting, held, forced). :class:`HeartbeatJobs` holds
them by id and saves each change of a state when it is made, so a restart, or another
instance taking the heartbeats over, resumes every heartbeat where it was.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import anyio

from chatkernel.core.config import HeartbeatConfig
from chatkernel.core.durations import format_interval
from chatkernel.core.heartbeat.prompt import DEFAULT_PROMPT
from chatkernel.core.heartbeat.settings import AGENT_PREFIX, job_agent
from chatkernel.core.heartbeat.targets import no_target_session
from chatkernel.core.store.base import HeartbeatState, Store

#: The config heartbeat's id (the default agent's); another agent's is ``agent:<name>``,
#: session heartbeats are ``session:<key>``.
MAIN = "main"
SESSION_PREFIX = "session:"
#: The shortest interval ``/heartbeat every`` accepts, in seconds.
MIN_SESSION_EVERY = 60.0


class HeartbeatError(Exception):
    """A heartbeat request that cannot be done (wake, /heartbeat); the message says why."""


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


class HeartbeatJobs:
    """Every heartbeat of one kernel by id (:attr:`by_id`), each change saved at once."""

    def __init__(self, store: Store) -> None:
        """``store``: where each heartbeat's state is kept."""
        self._store = store
        self.by_id: dict[str, HeartbeatJob] = {}

    async def load(self, now: float, agents: Iterable[str] = ()) -> None:
        """Load the stored heartbeats; the config heartbeat is always there (``every =
        0`` stops its timer), and so is the heartbeat of each of ``agents`` (the agents
        with a heartbeat table). A new one's first run is one interval from ``now``."""
        store = self._store
        wanted = {MAIN, *(AGENT_PREFIX + name for name in agents)}
        for state in await store.list_heartbeats():
            if state.id.startswith(SESSION_PREFIX) and state.session_key:
                self.by_id[state.id] = HeartbeatJob(state)
            elif state.id in wanted:
                self.by_id[state.id] = HeartbeatJob(state)
        for heartbeat_id in sorted(wanted - self.by_id.keys()):
            self.by_id[heartbeat_id] = HeartbeatJob(HeartbeatState(id=heartbeat_id))
        for job in self.by_id.values():
            if job.state.anchor_at is None:
                job.state.anchor_at = now
                await store.save_heartbeat(job.state)

    def follow_agents(self, agents: Iterable[str], now: float) -> list[HeartbeatJob]:
        """A reload: the heartbeats of the agents with a heartbeat table now are there
        (a new one's first run one interval from ``now``), those of agents without one
        leave memory (their state stays stored). Returns the new ones, to be saved."""
        wanted = {AGENT_PREFIX + name for name in agents}
        for heartbeat_id in [i for i in self.by_id
                             if i.startswith(AGENT_PREFIX) and i not in wanted]:
            del self.by_id[heartbeat_id]
        added = [HeartbeatJob(HeartbeatState(id=heartbeat_id, anchor_at=now))
                 for heartbeat_id in sorted(wanted - self.by_id.keys())]
        self.by_id.update((job.id, job) for job in added)
        return added

    async def save(self, job: HeartbeatJob) -> None:
        await self._store.save_heartbeat(job.state)

    def forget(self) -> None:
        """Drop them from memory (another instance runs them now); :meth:`load` again."""
        self.by_id.clear()

    def session_job(self, session_key: str) -> HeartbeatJob | None:
        return self.by_id.get(SESSION_PREFIX + session_key)

    def session_job_or_error(self, session_key: str) -> HeartbeatJob:
        job = self.session_job(session_key)
        if job is None:
            raise HeartbeatError("there is no heartbeat in this session "
                                 "(set one: /heartbeat every 30m <prompt>)")
        return job

    async def skipped(self, job: HeartbeatJob, reason: str, now: float, *,
                      reanchor: bool) -> None:
        """A tick skipped ``job``: its outcome says why; ``reanchor``: the next run is one
        interval from ``now`` (else it is held, e.g. until the window opens)."""
        job.state.last_outcome = f"skipped: {reason}"
        job.forced = False
        if reanchor:
            job.state.anchor_at = now
            job.hold_until = None
        await self._store.save_heartbeat(job.state)

    async def ran(self, job: HeartbeatJob, fired_at: float, outcome: str, sent: bool,
                  tasks: Iterable[str], notes: int) -> None:
        """A run of ``job`` fired at ``fired_at`` completed: the timer re-anchors on the
        fire; a run that did not fail advances its tasks and uses up the ``notes`` wake
        notes that were in its prompt (a note left during the run waits)."""
        state = job.state
        state.anchor_at = fired_at
        state.last_run_at = fired_at
        state.last_outcome = outcome + (" (sent)" if sent else "")
        if outcome != "error":
            for name in tasks:
                state.task_runs[name] = fired_at
            del state.wake_texts[:notes]
        await self._store.save_heartbeat(state)

    async def define(self, session_key: str, every: float, prompt: str,
                     now: float) -> HeartbeatJob:
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
                               anchor_at=now)
        job = self.by_id.get(heartbeat_id)
        if job is None:
            job = self.by_id[heartbeat_id] = HeartbeatJob(state)
        else:
            job.state, job.generation = state, job.generation + 1
            job.waiting_for = job.hold_until = None
            job.forced = False
        await self._store.save_heartbeat(state)
        return job

    async def pause(self, session_key: str) -> HeartbeatJob:
        job = self.session_job_or_error(session_key)
        job.state.paused = True
        job.waiting_for = job.hold_until = None
        job.forced = False
        await self._store.save_heartbeat(job.state)
        return job

    async def resume(self, session_key: str, now: float) -> HeartbeatJob:
        """Resume, re-anchored at ``now``: a tick missed while paused does not fire."""
        job = self.session_job_or_error(session_key)
        job.state.paused = False
        job.state.anchor_at = now
        job.hold_until = None
        await self._store.save_heartbeat(job.state)
        return job

    async def remove(self, session_key: str) -> tuple[HeartbeatJob | None, bool]:
        """Forget a session's heartbeat and delete its state: the job (None: not in
        memory) and whether the store had it."""
        job = self.by_id.pop(SESSION_PREFIX + session_key, None)
        deleted = await self._store.delete_heartbeat(SESSION_PREFIX + session_key)
        return job, deleted

    async def add_note(self, job: HeartbeatJob, text: str) -> None:
        """A wake note for the heartbeat's next run."""
        job.state.wake_texts.append(text)
        await self._store.save_heartbeat(job.state)


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
        "agent": job_agent(state.id),  # None: the session's
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
            no_target_session(state.id) if not wanted or settings.target == "none"
            else None),
        "next_due_at": due,
        "next_in_seconds": None if due is None else max(0.0, due - now),
        "wake_texts": list(state.wake_texts),
        "task_runs": dict(state.task_runs),
    }
