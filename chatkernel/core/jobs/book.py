"""The jobs of one kernel: those of the config (``[jobs.<name>]``) and those added at run
time (``chatkernel jobs add``, ``/remind``, kept in the store), each with its schedule and
where that schedule stands.

Jobs are keyed by name: adding a job under a name that has one replaces it (and starts
its schedule afresh), so nothing is ever defined twice. A config job's name is the
config's: one cannot be added over it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from chatkernel.core.config import JobConfig, validation_error
from chatkernel.core.durations import parse_interval
from chatkernel.core.jobs.schedule import Schedule
from chatkernel.core.store.base import JobDefinition, JobPosition, Store

#: A reminder's job name starts with this (then its id).
REMINDER_PREFIX = "remind-"


class JobError(Exception):
    """A job request that cannot be done (add, remove, run): the message says why."""


@dataclass(slots=True)
class Job:
    """A job with its schedule, and where it stands (:attr:`cursor`)."""

    name: str
    config: JobConfig
    origin: str  # "config", "cli", or "chat:<session key>" (a reminder)
    schedule: Schedule
    spec_hash: str
    created_at: float | None = None  # a run-time job's, when it was added
    cursor: float = 0.0
    last: dict[str, Any] = field(default_factory=dict)  # its last run, as described

    @property
    def run_time(self) -> bool:
        return self.origin != "config"

    def describe(self, now: float) -> dict[str, Any]:
        """The job as ``jobs list --json`` shows it."""
        next_at = self.schedule.next_after(self.cursor, now) if self.config.enabled else None
        return {"name": self.name, "origin": self.origin, "schedule": self.schedule.describe(),
                "prompt": self.config.prompt, "agent": self.config.agent,
                "deliver_to": list(self.config.deliver_to), "session": self.config.session,
                "catch_up": self.config.catch_up, "enabled": self.config.enabled,
                "next_at": next_at,
                "next_in_seconds": None if next_at is None else max(0.0, next_at - now)}


def spec_hash(config: JobConfig, created_at: float | None) -> str:
    """What identifies a job's schedule: a change of it (or re-adding the job) starts its
    schedule afresh from that moment, so no slot of the old one fires."""
    keys = {"cron": config.cron, "tz": config.tz, "every": config.every, "at": config.at,
            "created_at": created_at}
    return hashlib.sha256(json.dumps(keys, sort_keys=True).encode()).hexdigest()[:16]


def make_job(name: str, config: JobConfig, origin: str,
             created_at: float | None = None) -> Job:
    return Job(name, config, origin, Schedule.of(config), spec_hash(config, created_at),
               created_at)


def definition_spec(spec: dict[str, Any], now: float) -> dict[str, Any]:
    """A job as ``jobs add`` gives it, as it is stored: ``in`` turned into ``at`` (from
    ``now``), checked whole. JobError says what is wrong, naming the key."""
    spec = {key: value for key, value in spec.items() if value not in (None, [], "")}
    if "in" in spec:
        try:
            seconds = parse_interval(spec.pop("in"))
        except ValueError as exc:
            raise JobError(f"in: {exc}") from None
        spec["at"] = datetime.fromtimestamp(now + seconds, timezone.utc).isoformat()
    try:
        config = JobConfig.model_validate(spec)
    except ValidationError as exc:
        error = validation_error(exc, path=None, model=JobConfig)
        raise JobError(f"{error.key}: {error.message}" if error.key else error.message
                       ) from None
    if config.at is not None and Schedule.of(config).at <= now:  # type: ignore[operator]
        raise JobError(f"at: {config.at} is in the past")
    return config.model_dump(by_alias=True, exclude_defaults=True)


class JobBook:
    """Every job of one kernel by name (:attr:`jobs`): the config's, and the store's."""

    def __init__(self, *, config: Callable[[], Any], store: Callable[[], Store]) -> None:
        """``config()``: the config in force (a reload replaces it); ``store()``: where
        run-time jobs and positions are kept."""
        self._config = config
        self._store = store
        self.jobs: dict[str, Job] = {}

    def config_jobs(self) -> dict[str, Job]:
        return {name: make_job(name, table, "config")
                for name, table in self._config().jobs.items() if table.enabled}

    async def load(self, now: float, *, save: bool = True) -> None:
        """Read the run-time jobs and every job's position; a job seen for the first time,
        or whose schedule changed, starts from ``now`` (a run-time job from when it was
        added), and that position is saved (``save=False``: a command that only reads,
        whose first look must not count as the gateway's)."""
        store = self._store()
        jobs = self.config_jobs()
        for definition in await store.list_jobs():
            if definition.name in jobs:
                continue  # the config's wins (jobs add refuses such a name)
            try:
                config = JobConfig.model_validate(definition.spec)
            except ValueError:
                continue  # written by another version: leave it to `jobs remove`
            jobs[definition.name] = make_job(definition.name, config, definition.origin,
                                             definition.created_at)
        positions = await store.job_positions()
        old = self.jobs
        self.jobs = {}
        for name, job in jobs.items():
            known = old.get(name)
            position = positions.get(name)
            if known is not None and known.spec_hash == job.spec_hash:
                job.cursor, job.last = known.cursor, known.last
            if position is not None and position.spec_hash == job.spec_hash:
                job.cursor = max(job.cursor, position.cursor)
            elif not (known is not None and known.spec_hash == job.spec_hash):
                job.cursor = job.created_at if job.created_at is not None else now
                if save:
                    await store.set_job_position(JobPosition(name, job.spec_hash, job.cursor))
            self.jobs[name] = job

    async def add(self, name: str, spec: dict[str, Any], now: float, *,
                  origin: str = "cli") -> Job:
        """Add (or replace) a run-time job; JobError says why it cannot be."""
        if name in self._config().jobs:
            raise JobError(f"job {name!r} is defined in the config ([jobs.{name}]): edit "
                           "it there, or add this one under another name")
        from chatkernel.core.config.jobs import JOB_NAME

        if not JOB_NAME.fullmatch(name):
            raise JobError(f"{name!r} is not a job name: expected letters, digits, -, _ "
                           "and . (such as morning-alerts)")
        stored = definition_spec(spec, now)
        await self._store().save_job(JobDefinition(name, stored, now, origin))
        job = make_job(name, JobConfig.model_validate(stored), origin, now)
        job.cursor = now
        await self._store().set_job_position(JobPosition(name, job.spec_hash, now))
        self.jobs[name] = job
        return job

    async def remove(self, name: str) -> bool:
        """Remove a run-time job; False when there is none. JobError for a config job."""
        if name in self._config().jobs:
            raise JobError(f"job {name!r} is defined in the config: remove [jobs.{name}] "
                           "from it (and reload)")
        deleted = await self._store().delete_job(name)
        return self.jobs.pop(name, None) is not None or deleted

    def reminders(self, origin: str) -> list[Job]:
        """The reminders a chat made (``origin``: ``chat:<session key>``), soonest first."""
        found = [job for job in self.jobs.values() if job.origin == origin
                 and job.name.startswith(REMINDER_PREFIX)]
        return sorted(found, key=lambda job: job.schedule.at or 0.0)

    def names(self) -> Iterable[str]:
        return sorted(self.jobs)
