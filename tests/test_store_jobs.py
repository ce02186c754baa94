"""Jobs' runs in the store, the same on both stores: a slot claimed once, and a job's
history bounded as its runs are recorded (chatkernel.core.store.jobs, docs/jobs.md)."""

from __future__ import annotations

import anyio
import pytest

from chatkernel.core.jobs.triggers import TOLERANCE_SECONDS
from chatkernel.core.store.base import JobRun
from chatkernel.core.store.jobs import (
    FAILURES_KEPT,
    RUNS_KEPT,
    TRIGGER_RUNS_SECONDS,
    slot_key,
)

pytestmark = pytest.mark.anyio

T0 = 1_705_320_000.0


@pytest.fixture
def store(any_store):
    """The test runs on each backend (tests/conftest.py)."""
    return any_store


def slot_run(job: str, due_at: float, status: str = "running", slot: str | None = None
             ) -> JobRun:
    finished = None if status in ("queued", "running") else due_at + 1
    return JobRun(job=job, slot=slot or slot_key(due_at), run_id=f"{job}-{due_at:.0f}",
                  status=status, due_at=due_at, holder="p1", started_at=due_at,
                  finished_at=finished)


async def record(store, run: JobRun, end: str) -> None:
    """Claim ``run`` and end it ``end`` (``running``: leave it in progress)."""
    assert await store.claim_job_run(run)
    if end != "running":
        await store.finish_job_run(run.job, run.slot, end, end, run.due_at + 1)


async def test_a_slot_is_claimed_once(store):
    run = slot_run("hourly", T0)
    assert await store.claim_job_run(run)
    assert not await store.claim_job_run(slot_run("hourly", T0))
    assert not await store.claim_job_run(run)
    assert [found.run_id for found in await store.job_runs("hourly")] == [run.run_id]


async def test_a_thousand_runs_leave_the_newest_and_the_newest_older_failures(store):
    """A job every minute, every 25th run failed, one run of long ago still running."""
    ends = {i: "failed" if i % 25 == 0 else "done" for i in range(1001)}
    ends[10] = "running"
    ends[11] = "skipped"
    for start in range(0, 1000, 50):  # fifty at a time: they share commits
        async with anyio.create_task_group() as group:
            for i in range(start, start + 50):
                group.start_soon(record, store, slot_run("often", T0 + 60 * i), ends[i])
    await record(store, slot_run("other", T0), "done")  # another job's: not this one's
    # The thousand-and-first, claimed once the others have ended, prunes them all.
    await record(store, slot_run("often", T0 + 60 * 1000), ends[1000])

    newest = set(range(1001 - RUNS_KEPT, 1001))
    older_failures = sorted((i for i in range(1001 - RUNS_KEPT) if ends[i] == "failed"),
                            reverse=True)[:FAILURES_KEPT]
    kept = newest | set(older_failures) | {10}
    found = await store.job_runs("often", limit=2000)
    assert sorted(round((run.due_at - T0) / 60) for run in found) == sorted(kept)
    assert len(found) == RUNS_KEPT + FAILURES_KEPT + 1
    # The history still shows the newest first, as `chatkernel jobs history` does.
    assert [run.due_at for run in await store.job_runs("often", limit=3)] == [
        T0 + 60 * 1000, T0 + 60 * 999, T0 + 60 * 998]
    # A pruned run is gone from everything that named it.
    assert await store.job_run(slot_run("often", T0 + 60 * 1).run_id) is None
    assert await store.job_run(slot_run("often", T0 + 60 * 10).run_id) is not None
    assert [run.due_at for run in await store.unfinished_job_runs()] == [T0 + 600]
    failures = await store.failed_job_runs(limit=100)
    assert {run.run_id for run in failures} <= {run.run_id for run in found}
    assert len(failures) == len(older_failures) + len(
        [i for i in newest if ends[i] == "failed"])
    assert len(await store.job_runs("other")) == 1
    # The run in progress is pruned once it has ended, by the next claim.
    await store.finish_job_run("often", slot_key(T0 + 600), "done", "done", T0 + 60_000)
    await record(store, slot_run("often", T0 + 60 * 1001), "done")
    assert len(await store.job_runs("often", limit=2000)) == RUNS_KEPT + FAILURES_KEPT


async def test_a_late_slot_is_not_pruned_by_its_own_claim(store):
    """A claim never prunes its own run: a slot claimed after newer runs (runs by hand)
    stays claimed, so the scheduler coming back to it finds it taken."""
    for i in range(RUNS_KEPT + 5):
        await record(store, slot_run("daily", T0 + 10 + i), "done")
    late = slot_run("daily", T0, status="skipped")
    assert await store.claim_job_run(late)
    assert not await store.claim_job_run(slot_run("daily", T0, status="skipped"))
    assert await store.job_run(late.run_id) is not None


async def test_a_trigger_keeps_every_signature_a_replay_could_bring_again(store):
    """A signed request's signature is its slot: however many requests a trigger takes
    meanwhile, a replay within the timestamp's tolerance finds it claimed."""
    assert TRIGGER_RUNS_SECONDS >= 2 * TOLERANCE_SECONDS
    first = slot_run("trigger:ci", T0, slot="sig:first")
    await record(store, first, "done")
    for i in range(1, RUNS_KEPT + 50):
        await record(store, slot_run("trigger:ci", T0 + i, slot=f"sig:{i}"), "done")
    assert not await store.claim_job_run(
        slot_run("trigger:ci", T0 + 2 * TOLERANCE_SECONDS, slot="sig:first"))
    assert len(await store.job_runs("trigger:ci", limit=1000)) == RUNS_KEPT + 50
    # Past the window, the trigger's history is bounded as a job's is.
    await record(store, slot_run("trigger:ci", T0 + TRIGGER_RUNS_SECONDS + 200,
                                 slot="sig:late"), "done")
    assert len(await store.job_runs("trigger:ci", limit=1000)) == RUNS_KEPT
