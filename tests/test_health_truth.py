"""The health snapshot tells the truth as it happens: failed sends, a stuck receive loop
and failed commits turn it red at once, with the reason and since when, and it turns
green again as soon as they stop; a cached probe never outlives what it found."""

from __future__ import annotations

import aiohttp
import anyio
import pytest

from chatkernel.core import config as cfg
from chatkernel.core.gateway.process import run_gateway
from chatkernel.sdk.models import ProbeResult, SendError
from chatkernel.core.health.report import render_health
from chatkernel.core.store.sqlite import StoreError
from chatkernel.testing.memory import KernelHarness
from chatkernel.testing.contract import wait_until

pytestmark = pytest.mark.anyio

# One attempt, and a refused connection fails at once (no waiting out an outage).
ONE_ATTEMPT = {"channels": {"memory": {"retry": {"attempts": 1, "unreachable_max_age": "0"},
                                       "accounts": {"main": {"allow_from": ["*"]}}}}}


def account_of(snapshot, key="memory:main"):
    return next(a for a in snapshot.accounts() if a.key == key)


async def test_failed_sends_turn_the_account_red_at_once_and_a_sent_one_green(tmp_path):
    async with KernelHarness(tmp_path, config=ONE_ATTEMPT) as h:
        health = h.kernel.health
        await health.refresh()  # a cached probe that passed, as the refresher leaves it
        assert (await health.snapshot()).ok
        h.channel.fail_next = [SendError("Cannot connect to host api.example:443",
                                         retryable=True)]
        await h.channel.receive("hello")
        await h.settle()
        snapshot = await health.snapshot()
        account = account_of(snapshot)
        assert snapshot.ok is False and account.ok is False
        assert account.problems == ["sends failing: Cannot connect to host api.example:443"]
        assert account.send_failing_since is not None
        assert account.last_error == "Cannot connect to host api.example:443"
        assert account.last_error_at == account.send_failing_since
        assert account.probe.ok  # the cached probe still says ok: the send decides
        text = render_health(snapshot.model_dump(mode="json"))
        assert "BAD memory:main: running" in text
        assert "        sends failing: Cannot connect to host api.example:443" in text
        # The platform answers again: green with the next send, history kept.
        await h.channel.receive("again")
        await h.settle()
        snapshot = await health.snapshot()
        account = account_of(snapshot)
        assert snapshot.ok and account.problems == [] and account.send_failing_since is None
        assert account.last_send_error == "Cannot connect to host api.example:443"


async def test_an_outage_the_sends_wait_out_is_red_while_it_lasts(tmp_path):
    config = {"channels": {"memory": {"retry": {"base_delay_ms": 20, "max_delay_ms": 40},
                                      "accounts": {"main": {"allow_from": ["*"]}}}}}
    async with KernelHarness(tmp_path, config=config) as h:
        runtime = h.kernel.accounts["memory:main"].runtime
        refused = SendError("Cannot connect to host api.example:443", retryable=True)
        h.channel.fail_next = [refused] * 3
        await h.channel.receive("hello")
        await wait_until(lambda: runtime.send_failing_since is not None, timeout=5,
                         what="the sends failing", interval=0.005)
        snapshot = await h.kernel.health.snapshot()
        assert snapshot.ok is False
        assert account_of(snapshot).problems == [
            "sends failing: the platform cannot be reached: Cannot connect to host "
            "api.example:443"]
        await h.settle()  # the platform answers the fourth try: the reply goes out
        assert h.channel.texts() == ["hello"] and runtime.send_failing_since is None
        assert (await h.kernel.health.snapshot()).ok


async def test_a_chat_refusing_a_send_is_listed_but_the_account_stays_green(tmp_path):
    async with KernelHarness(tmp_path, config=ONE_ATTEMPT) as h:
        h.channel.fail_next = [SendError("Bad Request: chat not found", status=400)]
        await h.channel.receive("hello", chat_id="gone")
        await h.settle()
        snapshot = await h.kernel.health.snapshot()
        account = account_of(snapshot)
        assert snapshot.ok and account.send_failing_since is None
        [failure] = account.recent_failures
        assert (failure.session, failure.part, failure.message, failure.status,
                failure.why, failure.error) == ("memory:main:gone", "1/1", '"hello"',
                                                "failed", "platform",
                                                "Bad Request: chat not found")


async def test_a_stuck_receive_loop_is_red_with_its_reason_until_it_is_over(tmp_path):
    async with KernelHarness(tmp_path) as h:
        runtime = h.kernel.accounts["memory:main"].runtime
        runtime.set_problem("cannot reach the platform", 1000.0)
        runtime.set_problem("cannot reach the platform", 1010.0)  # still the same outage
        snapshot = await h.kernel.health.snapshot()
        account = account_of(snapshot)
        assert snapshot.ok is False
        assert account.problems == ["receiving: cannot reach the platform"]
        assert account.problem_since == 1000.0
        assert snapshot.problems == ["memory:main: receiving: cannot reach the platform"]
        runtime.clear_problem()
        assert (await h.kernel.health.snapshot()).ok


async def test_a_failed_probe_stops_counting_when_the_platform_answers_again(tmp_path):
    async with KernelHarness(tmp_path) as h:
        health, channel = h.kernel.health, h.channel
        answers = [ProbeResult(ok=False, detail="no answer within 10 s")]

        async def probe():
            return answers[0]

        channel.probe = probe
        await health.refresh()
        snapshot = await health.snapshot()
        assert snapshot.ok is False
        assert account_of(snapshot).problems == ["probe failed: no answer within 10 s"]
        # The outage is over: the receive loop hears from its platform again. The cached
        # probe is a minute from its next refresh; the snapshot does not wait for it.
        answers[0] = ProbeResult(ok=True, detail="back")
        runtime = h.kernel.accounts["memory:main"].runtime
        # The probe was a while ago (the sign of life comes after it, whatever the
        # clock's resolution).
        runtime.record_probe(runtime.last_probe, runtime.last_probe_at - 1)
        channel.context.report_alive()
        snapshot = await health.snapshot()
        account = account_of(snapshot)
        assert snapshot.ok and account.problems == []
        assert account.probe.superseded is True
        # ... and a fresh probe replaces the stale one by itself.
        await wait_until(lambda: runtime.last_probe.ok, timeout=5, what="a fresh probe",
                         interval=0.01)
        account = account_of(await health.snapshot())
        assert account.probe.ok and account.probe.detail == "back"
        assert account.probe.superseded is False


async def test_failed_commits_turn_the_gateway_red_until_one_goes_through(
        tmp_path, full_disk):
    async with KernelHarness(tmp_path) as h:
        store, health = h.kernel.store, h.kernel.health
        await store.flush()
        disk = full_disk(store)
        await store.set_account_state("memory", "main", "probe", 1)
        # failed, and failed again when it was tried again
        await wait_until(lambda: disk.failed >= 2, timeout=5, what="two failed commits",
                         interval=0.01)
        snapshot = await h.kernel.health.snapshot()
        assert snapshot.ok is False
        assert snapshot.store.ok is False and snapshot.store.failing_since is not None
        assert snapshot.problems == [
            f"state database: commits failing: {store.path}: commit failed: "
            "database or disk is full"]
        metrics = h.kernel.metrics
        assert metrics.store_commit_failures._value.get() == disk.failed
        disk.full = False
        await store.set_account_state("memory", "main", "probe", 2)
        await store.flush()
        assert await store.get_account_state("memory", "main", "probe") == 2
        assert health.store.failures == disk.failed
        snapshot = await h.kernel.health.snapshot()
        assert snapshot.ok and snapshot.store.ok


@pytest.mark.slow
async def test_healthz_and_status_follow_a_bot_api_outage_as_it_happens(tmp_path):
    from chatkernel_telegram.fake import FakeBotAPI

    async with FakeBotAPI() as api, anyio.create_task_group() as tg:
        config = cfg.parse({
            "gateway": {"workspace": str(tmp_path / "workspace"), "listen": "127.0.0.1:0"},
            "store": {"path": str(tmp_path / "state.db")},
            "queue": {"debounce_ms": 0},
            "channels": {"telegram": {
                "retry": {"attempts": 2, "base_delay_ms": 10},
                "accounts": {"main": {"bot_token": api.token, "api_base": api.base_url,
                                      "allow_from": ["*"], "poll_timeout": 1}}}}})
        ready, stop, where = anyio.Event(), anyio.Event(), {}

        def on_ready(listening):
            where["url"] = listening.url
            ready.set()

        tg.start_soon(lambda: run_gateway(config, on_ready=on_ready, stop=stop,
                                          handle_signals=False))
        with anyio.fail_after(10):
            await ready.wait()
        base = where["url"]
        async with aiohttp.ClientSession() as http:
            async def healthz():
                async with http.get(f"{base}/healthz") as response:
                    return response.status, await response.json()

            async def healthz_is(status: int) -> bool:
                return (await healthz())[0] == status

            api.inject_message(42, "before")
            await api.wait_for_sent(1)
            await wait_until(lambda: healthz_is(200), what="/healthz 200", interval=0.05)
            # The Bot API goes down for sends: two 502s in a row (the retry policy's
            # attempts) are an outage, the reply waits for it, and health says so now,
            # not at the next probe.
            api.fail_next("sendMessage", 502, "Bad Gateway", times=4)
            api.inject_message(42, "during")
            await wait_until(lambda: healthz_is(503), what="/healthz 503", interval=0.05)
            status, body = await healthz()
            assert body["reasons"] == [
                "telegram:main: sends failing: the platform is unavailable: Bad Gateway"]
            async with http.get(f"{base}/status") as response:
                page = await response.text()
            assert "sends failing: the platform is unavailable: Bad Gateway" in page
            # Back up: the waiting reply and the next go out, and health is green again.
            api.inject_message(42, "after")
            await api.wait_for_sent(3)
            await wait_until(lambda: healthz_is(200), what="/healthz 200 again", interval=0.05)
        stop.set()


async def test_a_commit_observer_sees_every_commit(tmp_path, fail_next_commit):
    from chatkernel.core.store.sqlite import SQLiteStore

    seen = []
    async with SQLiteStore.at(tmp_path / "state.db") as store:
        store.on_commit = seen.append
        await store.set_account_state("c", "a", "k", 1)
        await store.flush()
        fail_next_commit(store)
        await store.set_account_state("c", "a", "k", 2)
        await store.flush()  # through the failed commit and the one tried again
    assert seen[0] is None and isinstance(seen[1], StoreError) and seen[2:] == [None]
