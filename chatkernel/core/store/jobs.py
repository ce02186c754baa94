"""What the store keeps of scheduled jobs and inbound triggers (docs/jobs.md): the jobs
added at run time, each job's schedule position, and every run.

A run is keyed by its job and its **slot**: a job's due time (the Unix time as text), or
for a trigger its request's signature (a replay is the same slot) or its run id.
:meth:`JobStore.claim_job_run` inserts a run only when its key is new, and returns once
the row is durable: whoever inserts it runs it, once, whichever process that is and
however often the scheduler comes back to the slot after a restart.

A job's history is bounded: each claim prunes the job's older runs in the same write
(:meth:`JobStore.claim_job_run` says which go), so a job that runs every minute does not
grow the store.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FAILURES_KEPT", "JOB_RUN_STATUSES", "JobDefinition", "JobPosition", "JobRun",
           "JobStore", "RUNS_KEPT", "TRIGGER_RUNS_SECONDS", "prune_before", "slot_key"]

#: ``queued``: journaled, not started (a trigger's request); ``running``: claimed and
#: started; then ``done`` (ran: sent, or nothing to report), ``failed``, ``skipped``
#: (outside active hours, or a late slot with ``catch_up = "skip"``) or ``interrupted``
#: (its process ended mid-run: not run again, its turn may have acted already).
JOB_RUN_STATUSES = ("queued", "running", "done", "failed", "skipped", "interrupted")
FINISHED = ("done", "failed", "skipped", "interrupted")

#: The runs a job keeps: its newest (by due time) ...
RUNS_KEPT = 100
#: ... and, of those older, its newest failed or interrupted ones, so a failure stays in
#: its history (and ``chatkernel status``) a while after an every-minute job ran past it.
FAILURES_KEPT = 20
#: A trigger keeps every run due this recently besides: a signed request's signature is
#: its run's slot, and a replay is refused only while that slot is remembered. A request
#: is taken up to five minutes either side of its timestamp (``TOLERANCE_SECONDS`` of
#: :mod:`chatkernel.core.jobs.triggers`), so its replay can come ten minutes after it.
TRIGGER_RUNS_SECONDS = 900.0


def prune_before(run: JobRun) -> float:
    """A claim of ``run`` prunes its job's runs due before this time: before ``run``
    itself (normally its newest), and a trigger's before its recent ones."""
    if run.job.startswith("trigger:"):
        return run.due_at - TRIGGER_RUNS_SECONDS
    return run.due_at


def slot_key(due_at: float) -> str:
    """A due time as a slot key: exact text (``repr`` keeps every digit), so the same
    slot computed again after a restart is the same key."""
    return repr(float(due_at))


@dataclass(slots=True)
class JobDefinition:
    """A job added at run time (``chatkernel jobs add``, ``/remind``): its
    ``[jobs.<name>]`` keys as given, when it was added, and by whom (``cli``, or
    ``chat:<session key>`` for a chat's reminder)."""

    name: str
    spec: dict[str, Any]
    created_at: float
    origin: str = "cli"


@dataclass(slots=True)
class JobPosition:
    """Where a job's schedule stands: the slot up to which every slot was considered
    (``cursor``, a Unix time), for the schedule ``spec_hash`` describes. A changed
    schedule starts again from the time it was seen."""

    name: str
    spec_hash: str
    cursor: float


@dataclass(slots=True)
class JobRun:
    """One run of a job or a trigger (see the module's docstring)."""

    job: str  # a job's name, or "trigger:<name>"
    slot: str
    run_id: str
    status: str
    due_at: float
    holder: str = ""  # the process that claimed it
    started_at: float | None = None
    finished_at: float | None = None
    outcome: str = ""  # what became of it, in a line
    #: What a run needs to start after a restart (a trigger's filled prompt).
    request: dict[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def describe(self) -> dict[str, Any]:
        """The run as the CLI and ``GET /hooks/<name>/runs/<id>`` show it (no request:
        a trigger's filled prompt may hold what its caller sent)."""
        return {"run_id": self.run_id, "job": self.job, "status": self.status,
                "due_at": self.due_at, "started_at": self.started_at,
                "finished_at": self.finished_at, "outcome": self.outcome}


class JobStore(abc.ABC):
    """The store's part for jobs and triggers, mixed into
    :class:`~chatkernel.core.store.base.Store`."""

    @abc.abstractmethod
    async def save_job(self, definition: JobDefinition) -> None:
        """Insert or replace a run-time job by its name (re-adding replaces)."""

    @abc.abstractmethod
    async def delete_job(self, name: str) -> bool:
        """Forget a run-time job (its runs stay); False when there was none."""

    @abc.abstractmethod
    async def list_jobs(self) -> list[JobDefinition]:
        """Every run-time job, by name."""

    @abc.abstractmethod
    async def job_positions(self) -> dict[str, JobPosition]:
        """Every job's schedule position, by name."""

    @abc.abstractmethod
    async def set_job_position(self, position: JobPosition) -> None:
        """Move a job's position on (or start it: a new or changed schedule). Never
        back: a position behind the stored one for the same schedule is ignored, so
        two processes moving it cannot undo each other."""

    @abc.abstractmethod
    async def claim_job_run(self, run: JobRun) -> bool:
        """Record ``run`` unless its job and slot have a run already; True when this
        call recorded it (the caller runs it). Returns once the row is durable.

        A claim that records prunes the job's history in the same write: of the runs
        beyond its newest :data:`RUNS_KEPT` (by due time), the finished ones due before
        :func:`prune_before` go, except the newest :data:`FAILURES_KEPT` of them that
        failed or were interrupted. A run in progress is never pruned."""

    @abc.abstractmethod
    async def start_job_run(self, job: str, slot: str, holder: str, now: float) -> bool:
        """Move a ``queued`` run to ``running`` for ``holder``; False when it was not
        queued any more (another process started it)."""

    @abc.abstractmethod
    async def finish_job_run(self, job: str, slot: str, status: str, outcome: str,
                             now: float) -> None:
        """End a run: ``done``, ``failed``, ``skipped`` or ``interrupted``, with what
        became of it."""

    @abc.abstractmethod
    async def job_runs(self, job: str, limit: int = 20) -> list[JobRun]:
        """The newest ``limit`` runs of a job (``trigger:<name>`` for a trigger), newest
        first."""

    @abc.abstractmethod
    async def job_run(self, run_id: str) -> JobRun | None:
        """The run with that id, or None."""

    @abc.abstractmethod
    async def unfinished_job_runs(self) -> list[JobRun]:
        """Every ``queued`` or ``running`` run, oldest first (recovered at start)."""

    @abc.abstractmethod
    async def failed_job_runs(self, limit: int = 10) -> list[JobRun]:
        """The newest ``limit`` runs that ended ``failed`` or ``interrupted``, newest
        first (``chatkernel status``)."""
