"""What the SQLite store keeps of jobs and triggers (:mod:`chatkernel.core.store.jobs`):
run-time jobs, schedule positions, runs. One process has the file (``Store.claim``), so a
run's key is claimed by an ``INSERT ... ON CONFLICT DO NOTHING`` and its commit; the
``DELETE`` that prunes the job's older runs shares that commit."""

from __future__ import annotations

from typing import Any

from chatkernel.core.store.jobs import (
    FAILURES_KEPT,
    RUNS_KEPT,
    JobDefinition,
    JobPosition,
    JobRun,
    prune_before,
)
from chatkernel.core.store.sqlite.commit import GroupCommit
from chatkernel.sdk.codec import decode_json, encode_json

__all__ = ["SQLiteJobs"]

_RUN_COLUMNS = ("job, slot, run_id, status, due_at, holder, started_at, finished_at, outcome,"
                " request")

# The runs beyond a job's newest (OFFSET), each with its place among the failed ones or
# among the others; of those, the finished ones due before the cut go but the newest
# failures (see JobStore.claim_job_run).
_PRUNE = """
DELETE FROM job_runs WHERE rowid IN (
  SELECT id FROM (
    SELECT id, status, due_at, ROW_NUMBER() OVER (
        PARTITION BY status IN ('failed', 'interrupted') ORDER BY due_at DESC, id DESC
      ) AS nth
    FROM (SELECT rowid AS id, status, due_at FROM job_runs WHERE job = ?
          ORDER BY due_at DESC, rowid DESC LIMIT -1 OFFSET ?))
  WHERE status NOT IN ('queued', 'running') AND due_at < ?
    AND NOT (status IN ('failed', 'interrupted') AND nth <= ?))
"""


def _run(row: tuple[Any, ...]) -> JobRun:
    job, slot, run_id, status, due_at, holder, started_at, finished_at, outcome, request = row
    return JobRun(job=job, slot=slot, run_id=run_id, status=status, due_at=due_at,
                  holder=holder, started_at=started_at, finished_at=finished_at,
                  outcome=outcome, request=decode_json(request) or {})


class SQLiteJobs(GroupCommit):
    """Run-time jobs, their positions and their runs."""

    async def save_job(self, definition: JobDefinition) -> None:
        self._write("INSERT INTO jobs (name, spec, origin, created_at) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (name) DO UPDATE SET spec = excluded.spec,"
                    " origin = excluded.origin, created_at = excluded.created_at",
                    (definition.name, encode_json(definition.spec, what="a job"),
                     definition.origin, definition.created_at))
        await self._committed()

    async def delete_job(self, name: str) -> bool:
        deleted = self._write("DELETE FROM jobs WHERE name = ?", (name,)).rowcount > 0
        await self._committed()
        return deleted

    async def list_jobs(self) -> list[JobDefinition]:
        rows = self._run("SELECT name, spec, origin, created_at FROM jobs ORDER BY name")
        return [JobDefinition(name=name, spec=decode_json(spec) or {}, origin=origin,
                              created_at=created_at)
                for name, spec, origin, created_at in rows.fetchall()]

    async def job_positions(self) -> dict[str, JobPosition]:
        rows = self._run("SELECT name, spec_hash, cursor FROM job_positions").fetchall()
        return {name: JobPosition(name, spec_hash, cursor) for name, spec_hash, cursor in rows}

    async def set_job_position(self, position: JobPosition) -> None:
        self._write("INSERT INTO job_positions (name, spec_hash, cursor) VALUES (?, ?, ?)"
                    " ON CONFLICT (name) DO UPDATE SET spec_hash = excluded.spec_hash,"
                    " cursor = excluded.cursor WHERE job_positions.spec_hash !="
                    " excluded.spec_hash OR job_positions.cursor < excluded.cursor",
                    (position.name, position.spec_hash, position.cursor))

    async def claim_job_run(self, run: JobRun) -> bool:
        cursor = self._write(
            f"INSERT INTO job_runs ({_RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (job, slot) DO NOTHING",
            (run.job, run.slot, run.run_id, run.status, run.due_at, run.holder,
             run.started_at, run.finished_at, run.outcome,
             encode_json(run.request, what="a job run's request")))
        claimed = cursor.rowcount > 0
        if claimed:
            self._write(_PRUNE, (run.job, RUNS_KEPT, prune_before(run), FAILURES_KEPT))
        await self._committed()  # durable before the run starts
        return claimed

    async def start_job_run(self, job: str, slot: str, holder: str, now: float) -> bool:
        started = self._write("UPDATE job_runs SET status = 'running', holder = ?,"
                              " started_at = ? WHERE job = ? AND slot = ?"
                              " AND status = 'queued'", (holder, now, job, slot)).rowcount > 0
        await self._committed()
        return started

    async def finish_job_run(self, job: str, slot: str, status: str, outcome: str,
                             now: float) -> None:
        self._write("UPDATE job_runs SET status = ?, outcome = ?, finished_at = ?"
                    " WHERE job = ? AND slot = ?", (status, outcome, now, job, slot))
        await self._committed()

    async def job_runs(self, job: str, limit: int = 20) -> list[JobRun]:
        rows = self._run(f"SELECT {_RUN_COLUMNS} FROM job_runs WHERE job = ?"
                         " ORDER BY due_at DESC, rowid DESC LIMIT ?", (job, limit))
        return [_run(row) for row in rows.fetchall()]

    async def job_run(self, run_id: str) -> JobRun | None:
        row = self._run(f"SELECT {_RUN_COLUMNS} FROM job_runs WHERE run_id = ?",
                        (run_id,)).fetchone()
        return None if row is None else _run(row)

    async def unfinished_job_runs(self) -> list[JobRun]:
        rows = self._run(f"SELECT {_RUN_COLUMNS} FROM job_runs"
                         " WHERE status = 'queued' OR status = 'running' ORDER BY due_at")
        return [_run(row) for row in rows.fetchall()]

    async def failed_job_runs(self, limit: int = 10) -> list[JobRun]:
        rows = self._run(f"SELECT {_RUN_COLUMNS} FROM job_runs"
                         " WHERE status = 'failed' OR status = 'interrupted'"
                         " ORDER BY finished_at DESC LIMIT ?", (limit,))
        return [_run(row) for row in rows.fetchall()]
