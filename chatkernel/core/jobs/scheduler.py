"""The job scheduler: each due slot of each job claimed once, then run.

One task sleeps until the earliest next slot (at most a minute at a time, and always on
the wall clock: a stalled loop or a suspended machine finds the time it is when it
wakes), then looks at every job. A job whose schedule has a slot due since its position
acts on the latest one; the earlier ones coalesce into it, however many there were (a
gateway down overnight runs an hourly job once, not eight times). Before anything runs,
the slot is **claimed** in the store under its key (the job's name and the slot's time):
the claim is durable, and only one claim of a key succeeds, so a slot runs at most once
whatever restarts or how many gateways share the store (each runs this scheduler; the
one whose claim lands runs the slot). Then the job's position moves to that slot.

A slot is *late* when it came due before this scheduler started (the gateway was down)
or more than :data:`LATE_SECONDS` ago (the loop stalled): ``catch_up = "once"`` runs it,
``"skip"`` records it skipped. A slot outside the job's active hours is skipped too.
A run whose process ended while it ran is recorded ``interrupted`` at the next start and
not run again: its turn may have acted already (a tool call, a sent message).

Triggers' requests are journaled as ``queued`` runs (:meth:`JobScheduler.submit`) and
started by whichever process moves them to ``running`` first, after a crash too.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from chatkernel.core.config import ActiveHours, KernelConfig
from chatkernel.core.heartbeat.clock import Clock, SystemClock
from chatkernel.core.heartbeat.hours import in_active_hours, when, zone_for
from chatkernel.core.jobs.book import REMINDER_PREFIX, Job, JobBook, JobError
from chatkernel.core.jobs.runner import JobRunner, Outcome
from chatkernel.core.store.base import JobPosition, JobRun, Store
from chatkernel.core.store.jobs import slot_key
from chatkernel.sdk.errors import StoreError

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

log = logging.getLogger("chatkernel.jobs")

#: A slot this many seconds past its time is late (the loop stalled): see catch_up.
LATE_SECONDS = 60.0
#: A slot due this long before the scheduler started was missed while it was down.
START_GRACE = 1.0
#: Runs at once, at most (background work: a share of the agent's capacity).
MAX_RUNNING = 4
#: Seconds between looks for runs a stopped process left (queued triggers, interrupted).
RECOVER_SECONDS = 30.0
TRIGGER_PREFIX = "trigger:"
#: Reminders waiting per chat, at most (a chat cannot fill the store).
MAX_REMINDERS = 20
#: How far ahead a reminder may be set, at most.
MAX_REMINDER_SECONDS = 366 * 86400


class JobScheduler:
    """Every job of one kernel: its schedule, its claims, its runs; and the triggers'."""

    def __init__(self, *, config: Callable[[], KernelConfig], store: Callable[[], Store],
                 runner: JobRunner, clock: Clock | None = None,
                 holder: Callable[[], str] | None = None,
                 live_holders: Callable[[], Awaitable[set[str] | None]] | None = None
                 ) -> None:
        """``config()``: the config in force; ``store()``: claims, positions, runs;
        ``runner``: one run's turn and answer; ``clock``: the system's, or a test's
        ``ManualClock``; ``holder()``: who this process is in a run's record;
        ``live_holders()``: the processes alive on a shared store (None: this process
        has the store to itself)."""
        self._config = config
        self._store = store
        self.runner = runner
        self.clock: Clock = clock or SystemClock()
        self._own_holder = f"{os.getpid()}/{uuid.uuid4().hex[:6]}"
        self._holder = holder or (lambda: self._own_holder)
        self._live_holders = live_holders
        self.book = JobBook(config=config, store=store)
        self.started = False
        self.started_at = 0.0
        self._tg: TaskGroup | None = None
        self._loop_running = False
        self._lock = anyio.Lock()
        self._sleep: anyio.CancelScope | None = None
        self._woken = False
        self._recovered_at = -float("inf")
        self._slots = anyio.CapacityLimiter(MAX_RUNNING)
        #: The runs started here and not finished, by run id.
        self.running: dict[str, JobRun] = {}
        #: Run ids whose end someone waits for (``jobs run``), and their events.
        self._ended: dict[str, anyio.Event] = {}

    # -- set-up ----------------------------------------------------------------------------

    async def start(self, task_group: "TaskGroup", *, loop: bool = True) -> None:
        """Load the jobs, record the runs a stopped process left, start the loop.
        ``loop=False``: a command's own kernel, which runs a job only when asked
        (``jobs run``) and schedules nothing."""
        self._tg = task_group
        self.started_at = self.clock.now()
        await self.book.load(self.started_at, save=loop)
        if not loop:
            return
        await self.recover()
        self.started = True
        self._loop_running = True
        task_group.start_soon(self._loop, name="job scheduler")
        if self.book.jobs:
            log.info("jobs: %s", ", ".join(f"{job.name} ({job.schedule.describe()})"
                                            for job in self.book.jobs.values()))

    def reschedule(self) -> None:
        """The config changed (a reload): the jobs follow it from now on; a changed
        schedule starts again from now, so no slot of the old one fires."""
        self.wake()

    def wake(self) -> None:
        self._woken = True
        if self._sleep is not None:
            self._sleep.cancel()

    # -- the loop --------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:  # the store, a bug in one tick: look again later
                log.exception("job scheduler tick failed")
                self._woken = False
                with anyio.CancelScope() as self._sleep:
                    await self.clock.sleep_until(self.clock.now() + 5.0)
                self._sleep = None
                continue
            if self._woken:
                self._woken = False
                await anyio.sleep(0)
                continue
            deadline = self.next_deadline()
            with anyio.CancelScope() as self._sleep:
                if deadline is None:
                    await self.clock.sleep_until(self.clock.now() + RECOVER_SECONDS)
                else:
                    await self.clock.sleep_until(deadline)
            self._sleep = None

    def next_deadline(self) -> float | None:
        """The earliest next slot of any job (None: none has one)."""
        slots = [slot for job in self.book.jobs.values()
                 if (slot := job.schedule.next_after(job.cursor)) is not None]
        return min(slots, default=None)

    def quiescent(self) -> bool:
        """Nothing runs and nothing is due now: the loop sleeps until the clock moves
        (tests wait for this)."""
        if self.running:
            return False
        if not self.started:
            return True
        if self._sleep is None or self._woken:
            return False
        deadline = self.next_deadline()
        return deadline is None or deadline > self.clock.now()

    async def tick(self) -> list[JobRun]:
        """Act on every job with a slot due: claim it (run, or record it skipped).
        Returns the runs this process claimed."""
        claimed: list[JobRun] = []
        async with self._lock:
            now = self.clock.now()
            if now - self._recovered_at >= RECOVER_SECONDS:
                await self.recover()
            await self.book.load(now)  # what another process or a reload changed
            for job in list(self.book.jobs.values()):
                if job.run_time and job.schedule.one_shot and \
                        job.schedule.next_after(job.cursor) is None:
                    await self._store().delete_job(job.name)  # taken before a stop
                    self.book.jobs.pop(job.name, None)
                    continue
                due = job.schedule.due(job.cursor, now)
                if due is None:
                    continue
                run = await self._claim(job, due.slot, due.coalesced, now)
                if run is not None:
                    claimed.append(run)
        return claimed

    async def _claim(self, job: Job, slot: float, coalesced: int, now: float
                     ) -> JobRun | None:
        settings = job.config
        run = JobRun(job=job.name, slot=slot_key(slot), run_id=uuid.uuid4().hex,
                     status="running", due_at=slot, holder=self._holder(), started_at=now)
        late = slot < self.started_at - START_GRACE or now - slot > LATE_SECONDS
        reason = None
        if settings.active_hours is not None and not _in_hours(slot, settings.active_hours):
            reason = "skipped: outside its active hours"
        elif late and settings.catch_up == "skip":
            reason = "skipped: late (catch_up = skip)"
        if reason is not None:
            run.status, run.finished_at, run.outcome = "skipped", now, reason
        elif coalesced:
            run.outcome = f"{coalesced} earlier slot(s) missed, run once"
        mine = await self._store().claim_job_run(run)
        job.cursor = slot
        await self._store().set_job_position(JobPosition(job.name, job.spec_hash, slot))
        if job.run_time and job.schedule.one_shot:
            await self._store().delete_job(job.name)  # its one slot is taken
            self.book.jobs.pop(job.name, None)
        if not mine:
            return None  # another process, or this one before a restart, has it
        if reason is not None:
            log.info("job %s: slot %s %s", job.name, _moment(slot), reason)
            return run
        log.info("job %s: slot %s runs%s", job.name, _moment(slot),
                 f" ({run.outcome})" if run.outcome else "")
        self._start_run(run, job.name, "job", settings, settings.prompt, slot)
        return run

    def _start_run(self, run: JobRun, name: str, kind: str, settings: Any, prompt: str,
                   at: float) -> None:
        assert self._tg is not None
        self.running[run.run_id] = run
        self._tg.start_soon(self._execute, run, name, kind, settings, prompt, at,
                            name=f"{kind} {name}")

    async def _execute(self, run: JobRun, name: str, kind: str, settings: Any, prompt: str,
                       at: float) -> None:
        outcome = Outcome("interrupted", "the gateway stopped during the run", [])
        try:
            async with self._slots:
                envelope = f"[{kind} {name} | {when(at, None)}]"
                try:
                    outcome = await self.runner.run(name, kind, settings, prompt, envelope)
                except Exception as exc:  # logged, recorded: the next slot runs anyway
                    log.exception("%s %s failed", kind, name)
                    outcome = Outcome("failed", f"{type(exc).__name__}: {exc}", [])
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                try:
                    await self._store().finish_job_run(run.job, run.slot, outcome.status,
                                                       outcome.detail, self.clock.now())
                except StoreError as exc:  # left `running`: a next start says interrupted
                    log.warning("%s %s: its end could not be recorded: %s", kind, name, exc)
            run.status, run.outcome = outcome.status, outcome.detail
            self.running.pop(run.run_id, None)
            ended = self._ended.pop(run.run_id, None)
            if ended is not None:
                ended.set()
            log.info("%s %s: %s (%s)", kind, name, outcome.status, outcome.detail)
            self.wake()

    # -- recovery ----------------------------------------------------------------------------

    async def recover(self) -> None:
        """Runs a stopped process left: ``running`` ones are recorded ``interrupted``
        (not run again); triggers' ``queued`` ones are started (once: see submit)."""
        self._recovered_at = self.clock.now()
        live = None if self._live_holders is None else await self._live_holders()
        holder = self._holder()
        for run in await self._store().unfinished_job_runs():
            if run.run_id in self.running:
                continue
            if run.status == "running":
                if run.holder == holder or (live is not None and run.holder in live):
                    continue  # runs elsewhere, or here
                await self._store().finish_job_run(
                    run.job, run.slot, "interrupted",
                    "its gateway stopped during the run (not run again)", self.clock.now())
                log.warning("%s: the run of slot %s was interrupted by a stop; it is not "
                            "run again", run.job, _moment(run.due_at))
            elif run.status == "queued" and self._tg is not None and \
                    (live is None or run.holder not in live or run.holder == holder):
                self._tg.start_soon(self._start_queued, run, name=f"{run.job} queued")

    # -- triggers and runs by hand -------------------------------------------------------

    async def submit(self, trigger: str, prompt: str, slot: str | None = None
                     ) -> JobRun | None:
        """Journal a trigger's request as a queued run (durable when this returns) and
        start it; None when ``slot`` has a run already (a replayed request)."""
        run_id = uuid.uuid4().hex
        run = JobRun(job=TRIGGER_PREFIX + trigger, slot=slot or run_id, run_id=run_id,
                     status="queued", due_at=self.clock.now(), holder=self._holder(),
                     request={"prompt": prompt})
        if not await self._store().claim_job_run(run):
            return None
        if self._tg is not None:
            self._tg.start_soon(self._start_queued, run, name=f"trigger {trigger}")
        return run

    async def _start_queued(self, run: JobRun) -> None:
        now = self.clock.now()
        if not await self._store().start_job_run(run.job, run.slot, self._holder(), now):
            return  # another process started it
        name = run.job[len(TRIGGER_PREFIX):]
        settings = self._config().triggers.get(name)
        if settings is None:
            await self._store().finish_job_run(run.job, run.slot, "failed",
                                               f"trigger {name!r} is no longer in the config",
                                               now)
            return
        run.status, run.started_at = "running", now
        self._start_run(run, name, "trigger", settings, run.request.get("prompt", ""), now)

    async def run_now(self, name: str) -> JobRun:
        """``jobs run NAME``: run the job once now, besides its schedule (a slot of its
        own: ``manual:<run id>``). JobError when there is no such job."""
        job = self.book.jobs.get(name)
        if job is None:
            await self.book.load(self.clock.now())
            job = self.book.jobs.get(name)
        if job is None:
            raise JobError(f"no job {name!r} ({self._known()})")
        now = self.clock.now()
        run_id = uuid.uuid4().hex
        run = JobRun(job=name, slot=f"manual:{run_id}", run_id=run_id, status="running",
                     due_at=now, holder=self._holder(), started_at=now, outcome="run by hand")
        await self._store().claim_job_run(run)
        self._ended[run.run_id] = anyio.Event()
        self._start_run(run, name, "job", job.config, job.config.prompt, now)
        return run

    async def wait_for(self, run: JobRun, timeout: float) -> JobRun:
        """Wait (bounded) for a run started here to end; the run as it stands."""
        event = self._ended.get(run.run_id)
        if event is not None:
            with anyio.move_on_after(timeout):
                await event.wait()
        return await self._store().job_run(run.run_id) or run

    async def run_of(self, run_id: str) -> JobRun | None:
        """The run with that id, as the store has it (None: no such run)."""
        return await self._store().job_run(run_id)

    def _known(self) -> str:
        names = ", ".join(self.book.names())
        return f"jobs: {names}" if names else "there are no jobs"

    # -- what the CLI, the control API and /remind read ------------------------------------

    def describe(self, job: Job) -> dict[str, Any]:
        return job.describe(self.clock.now())

    async def add(self, name: str, spec: dict[str, Any], *, origin: str = "cli") -> Job:
        """Add (or replace) a run-time job; JobError says why it cannot be."""
        async with self._lock:
            job = await self.book.add(name, spec, self.clock.now(), origin=origin)
        self.wake()
        return job

    async def remove(self, name: str) -> bool:
        async with self._lock:
            removed = await self.book.remove(name)
        self.wake()
        return removed


    # -- a chat's reminders (/remind) ---------------------------------------------------------

    async def add_reminder(self, session_key: str, target: str, seconds: float,
                           text: str) -> dict[str, Any]:
        """A one-shot job delivered to the chat ``target`` in ``seconds``, in its session
        (JobError: past the chat's cap, too far ahead, nothing to remind of)."""
        text = " ".join(text.split())
        if not text:
            raise JobError("say what to remind of: /remind 20m check the oven")
        if not 0 < seconds <= MAX_REMINDER_SECONDS:
            raise JobError("a reminder is set at most a year ahead")
        origin = "chat:" + session_key
        if len(self.book.reminders(origin)) >= MAX_REMINDERS:
            raise JobError(f"this chat has {MAX_REMINDERS} reminders waiting, the most it "
                           "may: cancel one first (/remind list)")
        reminder_id = uuid.uuid4().hex[:6]
        spec = {"in": f"{seconds:g}s", "prompt": f"Reminder: {text}",
                "deliver_to": [target], "session": "target"}
        job = await self.add(REMINDER_PREFIX + reminder_id, spec, origin=origin)
        return {"id": reminder_id, "at": job.schedule.at, "text": text}

    def reminders(self, session_key: str) -> list[dict[str, Any]]:
        return [{"id": job.name[len(REMINDER_PREFIX):], "at": job.schedule.at,
                 "text": job.config.prompt.removeprefix("Reminder: ")}
                for job in self.book.reminders("chat:" + session_key)]

    async def cancel_reminder(self, session_key: str, reminder_id: str) -> bool:
        job = self.book.jobs.get(REMINDER_PREFIX + reminder_id.strip())
        if job is None or job.origin != "chat:" + session_key:
            return False  # none by that id here (another chat's is not this chat's)
        return await self.remove(job.name)


def _in_hours(ts: float, hours: ActiveHours) -> bool:
    return in_active_hours(ts, hours, zone_for(hours.timezone))


def _moment(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(ts))
