"""What the Redis store keeps of jobs and triggers (:mod:`chatkernel.core.store.jobs`).

Keys (under the prefix): ``jobs`` (a hash, run-time jobs by name), ``jobpos:hash`` and
``jobpos:cursor`` (each job's schedule position), ``jobslots:<job>`` (a hash, slot → run
id: the claim), ``run:<id>`` (a hash per run, every field text Python wrote),
``jobruns:<job>`` (a sorted set of a job's run ids by due time), ``jobruns:open`` (the
queued and running) and ``jobruns:failed`` (the newest hundred failed or interrupted).

Claiming a slot is one script whose ``HSETNX`` decides: of several gateways that reach
the same slot, exactly one records it and runs it. The same script prunes the job's older
runs (:meth:`~chatkernel.core.store.jobs.JobStore.claim_job_run` says which), each from
every key that names it.
"""

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
from chatkernel.core.store.redis.connection import RedisConnection
from chatkernel.core.store.redis.keys import _bound, _num
from chatkernel.sdk.codec import decode_json, encode_json

__all__ = ["RedisJobs"]

# ARGV: prefix, job, slot, run id, due time, open (1/0), the runs kept, the failures kept
# besides, the due time before which a run may go, then the run's fields.
_CLAIM = r"""
local P, job, slot, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local slots, runs = P .. 'jobslots:' .. job, P .. 'jobruns:' .. job
if redis.call('HSETNX', slots, slot, id) == 0 then return 0 end
local fields = {}
for i = 10, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', P .. 'run:' .. id, unpack(fields))
redis.call('ZADD', runs, ARGV[5], id)
if ARGV[6] == '1' then redis.call('ZADD', P .. 'jobruns:open', ARGV[5], id) end
-- Prune: of the runs beyond the newest (by due time) and due before the cut, the
-- finished ones go, but the newest failures.
local beyond = redis.call('ZCARD', runs) - tonumber(ARGV[7])
if beyond <= 0 then return 1 end
local old = redis.call('ZRANGEBYSCORE', runs, '-inf', '(' .. ARGV[9], 'LIMIT', 0, beyond)
local failures = tonumber(ARGV[8])
for i = #old, 1, -1 do  -- newest first: the failures kept are the newest
  local key = P .. 'run:' .. old[i]
  local status, old_slot = unpack(redis.call('HMGET', key, 'status', 'slot'))
  local failed = status == 'failed' or status == 'interrupted'
  if failed then failures = failures - 1 end
  if not (status == 'queued' or status == 'running' or (failed and failures >= 0)) then
    redis.call('DEL', key)
    if old_slot then redis.call('HDEL', slots, old_slot) end
    redis.call('ZREM', runs, old[i])
    redis.call('ZREM', P .. 'jobruns:failed', old[i])
  end
end
return 1
"""

_START = r"""
local P = ARGV[1]
local id = redis.call('HGET', P .. 'jobslots:' .. ARGV[2], ARGV[3])
if not id then return 0 end
local key = P .. 'run:' .. id
if redis.call('HGET', key, 'status') ~= 'queued' then return 0 end
redis.call('HSET', key, 'status', 'running', 'holder', ARGV[4], 'started_at', ARGV[5])
return 1
"""

_FINISH = r"""
local P, status = ARGV[1], ARGV[4]
local id = redis.call('HGET', P .. 'jobslots:' .. ARGV[2], ARGV[3])
if not id then return 0 end
redis.call('HSET', P .. 'run:' .. id, 'status', status, 'outcome', ARGV[5],
           'finished_at', ARGV[6])
redis.call('ZREM', P .. 'jobruns:open', id)
if status == 'failed' or status == 'interrupted' then
  redis.call('ZADD', P .. 'jobruns:failed', ARGV[6], id)
  redis.call('ZREMRANGEBYRANK', P .. 'jobruns:failed', 0, -101)
end
return 1
"""

# Never back: the same schedule's position only moves on (two gateways may both move it).
_POSITION = r"""
local P, name = ARGV[1], ARGV[2]
local held = redis.call('HGET', P .. 'jobpos:hash', name)
local cursor = redis.call('HGET', P .. 'jobpos:cursor', name)
if held == ARGV[3] and cursor and tonumber(cursor) >= tonumber(ARGV[4]) then return 0 end
redis.call('HSET', P .. 'jobpos:hash', name, ARGV[3])
redis.call('HSET', P .. 'jobpos:cursor', name, ARGV[4])
return 1
"""


def _opt(value: float | None) -> str:
    return "" if value is None else _num(value)


def _float(text: str | None) -> float | None:
    return float(text) if text else None


def _run(fields: dict[str, str]) -> JobRun:
    return JobRun(job=fields["job"], slot=fields["slot"], run_id=fields["run_id"],
                  status=fields["status"], due_at=float(fields["due_at"]),
                  holder=fields.get("holder", ""),
                  started_at=_float(fields.get("started_at")),
                  finished_at=_float(fields.get("finished_at")),
                  outcome=fields.get("outcome", ""),
                  request=decode_json(fields.get("request") or "{}") or {})


class RedisJobs(RedisConnection):
    """Run-time jobs, their positions and their runs."""

    _job_scripts: dict[str, Any]

    def _jobs_script(self, name: str, what: str, args: list[Any]) -> Any:
        self._check_open()
        scripts = self.__dict__.setdefault("_job_scripts", {})
        if name not in scripts:
            scripts[name] = self._redis.register_script(
                {"claim": _CLAIM, "start": _START, "finish": _FINISH,
                 "position": _POSITION}[name])
        return self._call(what, scripts[name](args=[self.prefix, *args]))

    async def save_job(self, definition: JobDefinition) -> None:
        self._writable("save_job")
        text = encode_json({"spec": definition.spec, "origin": definition.origin,
                            "created_at": definition.created_at}, what="a job")
        await self._call("save_job", self._redis.hset(self.prefix + "jobs", definition.name,
                                                      text))

    async def delete_job(self, name: str) -> bool:
        self._writable("delete_job")
        return bool(await self._call("delete_job",
                                     self._redis.hdel(self.prefix + "jobs", name)))

    async def list_jobs(self) -> list[JobDefinition]:
        self._check_open()
        rows = await self._call("list_jobs", self._redis.hgetall(self.prefix + "jobs"))
        found = []
        for name in sorted(rows):
            data = decode_json(rows[name])
            found.append(JobDefinition(name=name, spec=data["spec"], origin=data["origin"],
                                       created_at=data["created_at"]))
        return found

    async def job_positions(self) -> dict[str, JobPosition]:
        self._check_open()
        pipe = self._redis.pipeline(transaction=True)
        pipe.hgetall(self.prefix + "jobpos:hash")
        pipe.hgetall(self.prefix + "jobpos:cursor")
        hashes, cursors = await self._call("job_positions", pipe.execute())
        return {name: JobPosition(name, hashes[name], float(cursors[name]))
                for name in hashes if name in cursors}

    async def set_job_position(self, position: JobPosition) -> None:
        self._writable("set_job_position")
        await self._jobs_script("position", "set_job_position",
                                [position.name, position.spec_hash, _num(position.cursor)])

    async def claim_job_run(self, run: JobRun) -> bool:
        self._writable("claim_job_run")
        fields = {"job": run.job, "slot": run.slot, "run_id": run.run_id,
                  "status": run.status, "due_at": _num(run.due_at), "holder": run.holder,
                  "started_at": _opt(run.started_at), "finished_at": _opt(run.finished_at),
                  "outcome": run.outcome,
                  "request": encode_json(run.request, what="a job run's request")}
        flat = [item for pair in fields.items() for item in pair]
        open_ = "0" if run.finished else "1"
        return bool(await self._jobs_script(
            "claim", "claim_job_run",
            [run.job, run.slot, run.run_id, _num(run.due_at), open_, RUNS_KEPT,
             FAILURES_KEPT, _bound(prune_before(run)), *flat]))

    async def start_job_run(self, job: str, slot: str, holder: str, now: float) -> bool:
        self._writable("start_job_run")
        return bool(await self._jobs_script("start", "start_job_run",
                                            [job, slot, holder, _num(now)]))

    async def finish_job_run(self, job: str, slot: str, status: str, outcome: str,
                             now: float) -> None:
        self._writable("finish_job_run")
        await self._jobs_script("finish", "finish_job_run",
                                [job, slot, status, outcome, _num(now)])

    async def _runs(self, what: str, ids: list[str]) -> list[JobRun]:
        if not ids:
            return []
        pipe = self._redis.pipeline(transaction=False)
        for run_id in ids:
            pipe.hgetall(self.prefix + "run:" + run_id)
        rows = await self._call(what, pipe.execute())
        return [_run(fields) for fields in rows if fields]

    async def job_runs(self, job: str, limit: int = 20) -> list[JobRun]:
        self._check_open()
        ids = await self._call("job_runs", self._redis.zrevrange(
            self.prefix + "jobruns:" + job, 0, max(0, limit - 1)))
        return await self._runs("job_runs", ids)

    async def job_run(self, run_id: str) -> JobRun | None:
        found = await self._runs("job_run", [run_id])
        return found[0] if found else None

    async def unfinished_job_runs(self) -> list[JobRun]:
        self._check_open()
        ids = await self._call("unfinished_job_runs",
                               self._redis.zrange(self.prefix + "jobruns:open", 0, -1))
        return await self._runs("unfinished_job_runs", ids)

    async def failed_job_runs(self, limit: int = 10) -> list[JobRun]:
        self._check_open()
        ids = await self._call("failed_job_runs", self._redis.zrevrange(
            self.prefix + "jobruns:failed", 0, max(0, limit - 1)))
        return await self._runs("failed_job_runs", ids)
