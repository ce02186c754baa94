"""Jobs across real ``chatkernel run`` processes killed with SIGKILL (docs/jobs.md): a slot
due while the gateway was down runs once after the restart (``catch_up = "once"``) or not at
all (``"skip"``); two gateways on one Redis run each due slot once while they are killed in
turn."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time

import anyio
import pytest

from chatkernel.core.jobs.scheduler import START_GRACE
from chatkernel.core.store.jobs import RUNS_KEPT
from chatkernel.testing import wait_until
from chatkernel.testing.process import (
    CHATKERNEL,
    gateway_home,
    gateway_process,
    running_gateway_process,
)

pytestmark = pytest.mark.anyio

#: The runs the Redis test waits for: well below the runs a job keeps, so that none is
#: pruned however many more come due while the gateways stop.
WANT_RUNS = RUNS_KEPT * 3 // 5
#: The slots claimed between two kills (three seconds' worth, at one every 250 ms).
SLOTS_PER_TURN = 12


def rows(db, sql: str) -> list[tuple]:
    """Rows of a running gateway's state database, read beside it (what it committed)."""
    with contextlib.closing(sqlite3.connect(db, timeout=5)) as conn:
        return conn.execute(sql).fetchall()


def runs(db, job: str = "once") -> list[tuple[str, str]]:
    """(status, outcome) of every run of ``job``, oldest first."""
    return rows(db, f"SELECT status, outcome FROM job_runs WHERE job = '{job}'"
                    " ORDER BY due_at")


async def jobs_add(home, *args: str) -> None:
    """``chatkernel jobs add ARGS`` against the gateway of ``home``."""
    added = await anyio.run_process(
        [CHATKERNEL, "jobs", "add", *args], check=False,
        env={**os.environ, "CHATKERNEL_HOME": str(home)})
    assert added.returncode == 0, added.stderr.decode()


async def killed(gateway) -> None:
    gateway.process.send_signal(signal.SIGKILL)
    await anyio.to_thread.run_sync(gateway.process.wait)


async def webchat_texts(gateway, chat_id: str, want: int) -> list[str]:
    found = await anyio.to_thread.run_sync(gateway.webchat_messages, chat_id, want)
    return [message["text"] for message in found]


@pytest.mark.slow
@pytest.mark.parametrize("catch_up", ["once", "skip"])
async def test_a_slot_due_while_killed_runs_once_after_the_restart_or_is_skipped(tmp_path,
                                                                                 catch_up):
    home = gateway_home(tmp_path / "home", "")
    db = home / "state.db"
    async with running_gateway_process(home) as gateway:
        await jobs_add(home, "once", "--in", "4s", "--prompt", "the slot ran",
                       "--deliver-to", "webchat:default:c", "--catch-up", catch_up)
        due = time.time() + 4
        assert runs(db) == []
        await killed(gateway)  # before the slot
    # The wall clock is what is tested here: the slot comes due while no gateway runs,
    # and the restart comes past the scheduler's grace for a slot just due (a few seconds
    # at most: the slot was four seconds off when the job was added).
    # real time: the slot passes while the gateway is down
    await anyio.sleep(max(0.0, due + START_GRACE + 1 - time.time()))
    async with running_gateway_process(home) as gateway:
        await wait_until(lambda: runs(db), timeout=15, what="the slot's run")
        if catch_up == "once":
            await wait_until(lambda: runs(db)[0][0] == "done", timeout=15,
                             what="the run's end", state=lambda: runs(db))
            assert await webchat_texts(gateway, "c", 1) == ["the slot ran"]
        else:
            assert runs(db) == [("skipped", "skipped: late (catch_up = skip)")]
        await killed(gateway)  # and again: nothing runs twice
    async with running_gateway_process(home) as gateway:
        # A job added now runs once the restarted scheduler has looked at every job; once
        # its run has ended and the outbox is idle, nothing more can run or be sent.
        await jobs_add(home, "probe", "--in", "500ms", "--prompt", "probe")
        await wait_until(lambda: [status for status, _ in runs(db, "probe")] == ["done"],
                         timeout=15, what="the probe's run", state=lambda: runs(db, "probe"))
        await wait_until(lambda: rows(db, "SELECT id FROM outbox"
                                          " WHERE status IN ('pending', 'sending')") == [],
                         timeout=15, what="the outbox to be idle")
        assert len(runs(db)) == 1
        want = 1 if catch_up == "once" else 0
        assert len(await webchat_texts(gateway, "c", want)) == want


@pytest.mark.slow
async def test_two_gateways_on_redis_run_each_slot_once_while_killed_in_turn(
        tmp_path, redis_server, redis_prefix):
    from chatkernel.core.store.redis import RedisStore

    config = f'''
[store]
backend = "redis"
url = "{redis_server}"
prefix = "{redis_prefix}"
lease_seconds = 1

[jobs.tick]
every = "250ms"
prompt = "tick"
'''
    homes = [gateway_home(tmp_path / name, config) for name in ("a", "b")]
    store = RedisStore.at(redis_server, prefix=redis_prefix)
    await store.open()
    try:
        async def claimed() -> list:
            return await store.job_runs("tick", limit=1000)

        def start(home):
            stack = contextlib.ExitStack()
            return stack, stack.enter_context(gateway_process(home))

        def kill(victim):
            stack, gateway = gateways[victim]
            gateway.process.send_signal(signal.SIGKILL)
            gateway.process.wait()
            stack.close()

        gateways = [await anyio.to_thread.run_sync(start, home) for home in homes]
        try:
            for turn in range(4):  # kill one, let the other go on, start it again
                victim = turn % 2
                before = len(await claimed())

                async def went_on(before: int = before) -> bool:
                    return len(await claimed()) >= before + SLOTS_PER_TURN

                await wait_until(went_on, timeout=20, what=f"{SLOTS_PER_TURN} more slots")
                await anyio.to_thread.run_sync(kill, victim)
                gateways[victim] = await anyio.to_thread.run_sync(start, homes[victim])

            async def enough() -> bool:
                return len(await claimed()) >= WANT_RUNS

            await wait_until(enough, timeout=40, what=f"{WANT_RUNS} slots claimed")
        finally:
            for stack, _ in gateways:
                await anyio.to_thread.run_sync(stack.close)
        found = await claimed()
        slots = [run.due_at for run in found]
        assert len(slots) >= WANT_RUNS and len(set(slots)) == len(slots)
        assert len(found) < RUNS_KEPT  # none pruned: every turn below has its run
        # Each claimed slot's turn ran once at most: one prompt in the job's session per
        # run that ended, at most one per run a kill cut short.
        turns = await store.read_log("job:tick", roles=("job",))
        done = sum(1 for run in found if run.status == "done")
        assert done <= len(turns) <= len(found)
        assert done >= len(found) - 4  # a kill cuts one run short at most
        assert {run.status for run in found} <= {"done", "interrupted", "running"}
    finally:
        await store.close()
