"""Supervision of receive loops: runtime state, restarts on request, a paused account."""

from __future__ import annotations

import anyio
import pytest

from chatkernel.core.runtime.supervisor import Supervisor
from chatkernel.testing.contract import wait_until as wait_for
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio


async def no_sleep(seconds):
    await anyio.sleep(0)


def supervise_here(h, account, **options):
    """A supervisor of the harness kernel's account, registered nowhere."""
    return Supervisor(account, receiver=h.kernel.receiver, metrics=h.kernel.metrics,
                      **options)


class StubbornLoop:
    """A receive loop that, once cancelled, takes its time to stop (until released)."""

    def __init__(self):
        self.active = 0
        self.max_active = 0
        self.started = 0
        self.release = anyio.Event()
        self.running = anyio.Event()

    async def run(self, deliver):
        self.started += 1
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        self.running.set()
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):  # resists cancellation
                await self.release.wait()
            self.active -= 1
            self.running = anyio.Event()


async def wait_until(predicate, timeout=5.0):
    await wait_for(predicate, timeout=timeout, interval=0.001)


async def test_restart_waits_for_the_old_loop_and_never_runs_two(tmp_path):
    async with KernelHarness(tmp_path) as h:
        account = h.kernel.accounts["memory:main"]
        loop = StubbornLoop()
        account.transport.run = loop.run
        supervisor = supervise_here(h, account, sleep=no_sleep)
        async with anyio.create_task_group() as tg:
            tg.start_soon(supervisor.run)
            await loop.running.wait()
            # the old loop does not stop in time: the restart fails, nothing new starts
            assert await supervisor.restart("test", timeout=0.05) is False
            assert loop.started == 1 and loop.active == 1
            assert supervisor.loops_running == 1
            assert "did not stop within 0.05 s" in account.runtime.last_error
            # asking again while the old loop is still stopping starts nothing either
            assert await supervisor.restart("again", timeout=0.01) is False
            assert loop.started == 1
            # once the old loop ends, exactly one new loop starts
            loop.release.set()
            await wait_until(lambda: loop.started == 2 and loop.active == 1)
            assert loop.max_active == 1
            assert supervisor.loops_running == 1
            # a loop that stops promptly is restarted at once
            assert await supervisor.restart("prompt") is True
            await wait_until(lambda: loop.started == 3)
            assert loop.max_active == 1
            tg.cancel_scope.cancel()
        reasons = [reason for _, reason in account.runtime.restarts]
        assert reasons == ["test", "prompt"]  # a refused restart is not counted
        assert account.runtime.state == "stopped"


async def test_runtime_state_follows_the_loop(tmp_path):
    async with KernelHarness(tmp_path) as h:
        account = h.kernel.accounts["memory:main"]
        channel = account.channel
        calls = {"n": 0}
        alive = anyio.Event()

        async def run(deliver):
            calls["n"] += 1
            if calls["n"] == 1:
                raise ConnectionError("platform went away")
            channel.context.report_alive()
            alive.set()
            await anyio.sleep_forever()

        account.transport.run = run
        supervisor = supervise_here(h, account, sleep=no_sleep)
        async with anyio.create_task_group() as tg:
            tg.start_soon(supervisor.run)
            await alive.wait()
            runtime = account.runtime
            assert runtime.state == "running"
            assert runtime.last_error == "ConnectionError: platform went away"
            assert [reason for _, reason in runtime.restarts] == ["crash"]
            assert runtime.last_event_at is not None
            tg.cancel_scope.cancel()
        assert account.runtime.state == "stopped"


async def test_a_paused_account_is_not_restarted(tmp_path):
    async with KernelHarness(tmp_path) as h:
        account = h.kernel.accounts["memory:main"]
        channel = account.channel
        runs = []

        async def run(deliver):
            runs.append(1)
            if len(runs) == 1:
                channel.context.pause("session expired: log in again")
                return
            await anyio.sleep_forever()

        account.transport.run = run
        supervisor = h.kernel.supervisors.add(account, sleep=no_sleep)
        async with anyio.create_task_group() as tg:
            tg.start_soon(supervisor.run)
            await wait_until(lambda: account.runtime.state == "paused")
            for _ in range(20):
                await anyio.sleep(0)
            assert len(runs) == 1  # not restarted while paused
            assert account.runtime.detail == "session expired: log in again"
            assert list(account.runtime.restarts) == []
            snapshot = await h.kernel.health.snapshot()
            entry = snapshot.channels["memory"].accounts["main"]
            assert entry.ok is False and entry.problems == ["paused: session expired: log in again"]
            tg.cancel_scope.cancel()
        assert account.runtime.state == "paused"  # stopping the loop leaves it paused


async def test_restart_without_a_running_loop_is_refused(tmp_path):
    async with KernelHarness(tmp_path) as h:
        supervisor = supervise_here(h, h.kernel.accounts["memory:main"])
        assert await supervisor.restart("nothing to restart") is False
        assert list(h.kernel.accounts["memory:main"].runtime.restarts) == []


async def test_a_loop_that_ends_on_a_refused_identity_fails_with_what_to_do(tmp_path):
    """A channel's own loop that lets a 401 out: classified as the kit's loops do."""
    from chatkernel.channels import PlatformError

    async with KernelHarness(tmp_path) as h:
        account = h.kernel.accounts["memory:main"]
        channel = account.channel
        waits: list[float] = []
        started = anyio.Event()

        async def run(deliver):
            raise PlatformError("Unauthorized", status=401)

        async def sleep(seconds):
            waits.append(seconds)
            started.set()
            await anyio.sleep_forever()

        account.transport.run = run
        supervisor = supervise_here(h, account, sleep=sleep)
        async with anyio.create_task_group() as tg:
            tg.start_soon(supervisor.run)
            with anyio.fail_after(5):
                await started.wait()
            runtime = account.runtime
            assert runtime.state == "failed"
            assert runtime.detail == ("the platform refused the account's credentials (HTTP "
                                      "401): set working credentials in "
                                      "channels.memory.accounts.main and restart the gateway")
            assert waits == [60.0]  # not the 1 s of a crash: a refusal is not retried soon
            tg.cancel_scope.cancel()


async def test_the_registry_keeps_a_newer_supervisor_when_an_older_one_is_discarded(tmp_path):
    async with KernelHarness(tmp_path) as h:
        account, supervisors = h.kernel.accounts["memory:main"], h.kernel.supervisors
        older = supervisors.add(account)
        newer = supervisors.add(account)  # a loop started again before the old one ended
        supervisors.discard(account.key, older)
        assert supervisors.get(account.key) is newer
        supervisors.discard(account.key)
        assert supervisors.get(account.key) is None
