"""Jobs across real ``chatkernel run`` processes killed with SIGKILL (docs/jobs.md): a slot
due while the gateway was down runs once after the restart (``catch_up = "once"``) or not at
all (``"skip"``); two gateways on one Redis run each due slot once while they are killed in
turn."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time

import anyio
import pytest

from chatkernel.core.store.jobs import RUNS_KEPT
from chatkernel.testing.process import CHATKERNEL, gateway_home, gateway_process

pytestmark = pytest.mark.anyio

#: The runs the Redis test waits for: well below the runs a job keeps, so that none is
#: pruned however many more come due while the gateways stop.
WANT_RUNS = RUNS_KEPT * 3 // 5


def runs(db) -> list[tuple[str, str]]:
    """(status, outcome) of every run of job ``once``, read beside a running gateway."""
    with sqlite3.connect(db, timeout=5) as conn:
        return conn.execute("SELECT status, outcome FROM job_runs WHERE job = 'once'"
                            " ORDER BY due_at").fetchall()


def wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            assert value, f"timed out waiting for {what}"
            return value
        time.sleep(0.1)  # real time: another process acts


@pytest.mark.slow
@pytest.mark.parametrize("catch_up", ["once", "skip"])
def test_a_slot_due_while_killed_runs_once_after_the_restart_or_is_skipped(tmp_path,
                                                                           catch_up):
    home = gateway_home(tmp_path / "home", "")
    db = home / "state.db"
    with gateway_process(home) as gateway:
        added = subprocess.run(
            [CHATKERNEL, "jobs", "add", "once", "--in", "4s", "--prompt", "the slot ran",
             "--deliver-to", "webchat:default:c", "--catch-up", catch_up],
            env={**os.environ, "CHATKERNEL_HOME": str(home)}, capture_output=True,
            text=True, timeout=30)
        assert added.returncode == 0, added.stderr
        due = time.time() + 4
        assert runs(db) == []
        gateway.process.send_signal(signal.SIGKILL)  # before the slot
        gateway.process.wait()
    time.sleep(max(0.0, due + 2 - time.time()))  # real time: the slot passes while down
    with gateway_process(home) as gateway:
        found = wait(lambda: runs(db), 15, "the slot's run")
        if catch_up == "once":
            wait(lambda: runs(db)[0][0] == "done", 15, "the run's end")
            assert [m["text"] for m in gateway.webchat_messages("c", 1)] == ["the slot ran"]
        else:
            assert found == [("skipped", "skipped: late (catch_up = skip)")]
        gateway.process.send_signal(signal.SIGKILL)  # and again: nothing runs twice
        gateway.process.wait()
    with gateway_process(home) as gateway:
        time.sleep(1.5)  # real time: the restarted scheduler has looked at the slot
        assert len(runs(db)) == 1
        want = 1 if catch_up == "once" else 0
        assert len(gateway.webchat_messages("c", want, timeout=2)) == want


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
            import contextlib

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
                await anyio.sleep(3)  # real time: slots come due on the wall clock
                await anyio.to_thread.run_sync(kill, victim)
                gateways[victim] = await anyio.to_thread.run_sync(start, homes[victim])
            with anyio.fail_after(40):
                while len(await claimed()) < WANT_RUNS:
                    await anyio.sleep(0.25)  # real time: slots come due on the wall clock
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
