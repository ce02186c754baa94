"""Probes with a timeout, the snapshot (cached and live), the local snapshot."""

from __future__ import annotations

import anyio
import pytest

from chatkernel.core import config as cfg
from chatkernel.core.health.probes import local_snapshot, select_accounts
from chatkernel.sdk.models import ProbeResult
from chatkernel.core.store.sqlite import SQLiteStore, StoreError
from chatkernel.testing.memory import KernelHarness
from chatkernel.testing.contract import wait_until

pytestmark = pytest.mark.anyio

TWO_ACCOUNTS = {"channels": {"memory": {"accounts": {"main": {"allow_from": ["*"]},
                                                     "other": {"allow_from": ["*"]}}},
                             # no HTTP server here, so no web chat (it would be "stopped")
                             "webchat": {"enabled": False}}}


async def test_probes_run_side_by_side(tmp_path):
    async with KernelHarness(tmp_path, config=TWO_ACCOUNTS) as h:
        other_ran = anyio.Event()

        async def waits_for_the_other():
            await other_ran.wait()  # only finishes if the other probe runs meanwhile
            return ProbeResult(ok=True, detail="main")

        async def quick():
            other_ran.set()
            return ProbeResult(ok=True, detail="other")

        h.account_channel("main").probe = waits_for_the_other
        h.account_channel("other").probe = quick
        results = await h.kernel.health.probe(timeout=5)
        assert {key: r.detail for key, r in results.items()} == {"memory:main": "main",
                                                                 "memory:other": "other"}


async def test_a_hung_probe_times_out_alone(tmp_path):
    async with KernelHarness(tmp_path, config=TWO_ACCOUNTS) as h:
        async def hung():
            await anyio.sleep_forever()

        h.account_channel("main").probe = hung
        results = await h.kernel.health.probe(timeout=0.05)
        hung_result = results["memory:main"]
        assert not hung_result.ok and hung_result.detail == "no answer within 0.05 s"
        assert hung_result.extra["timed_out"] is True and hung_result.latency_ms >= 0
        assert results["memory:other"].ok
        snapshot = await h.kernel.health.snapshot()
        entry = snapshot.channels["memory"].accounts["main"]
        assert entry.probe.timed_out and not entry.ok
        assert entry.problems == ["probe failed: no answer within 0.05 s"]
        assert snapshot.ok is False
        assert snapshot.channels["memory"].ok is False
        assert snapshot.channels["memory"].accounts["other"].ok is True


async def test_the_default_probe_timeout_is_ten_seconds(tmp_path):
    async with KernelHarness(tmp_path) as h:
        assert h.kernel.health.probe_timeout == 10.0


async def test_a_probe_that_raises_or_answers_nothing_is_a_failed_probe(tmp_path):
    async with KernelHarness(tmp_path, config=TWO_ACCOUNTS) as h:
        async def boom():
            raise RuntimeError("boom")

        async def no_latency():
            return ProbeResult(ok=True, detail="fine")

        h.account_channel("main").probe = boom
        h.account_channel("other").probe = no_latency
        results = await h.kernel.health.probe(timeout=1)
        assert results["memory:main"].detail == "the probe failed: RuntimeError: boom"
        assert results["memory:other"].latency_ms is not None  # measured by the kernel
        h.kernel.accounts["memory:other"].channel = None  # the built-in hook answers None
        result = (await h.kernel.health.probe([h.kernel.accounts["memory:other"]]))
        assert result["memory:other"].detail.startswith("no probe answered")


async def test_snapshot_fields(tmp_path):
    async with KernelHarness(tmp_path) as h:
        kernel = h.kernel
        await h.channel.receive("hello")
        await h.settle()
        await h.channel.context.record_credentials(issued_at=kernel.health.clock() - 3600)
        account = kernel.accounts["memory:main"]
        account.runtime.record_restart(kernel.health.clock() - 7200, "crash")  # too old
        account.runtime.record_restart(kernel.health.clock() - 60, "crash")
        account.runtime.error("ConnectionError: gone", kernel.health.clock() - 60)
        kernel.presence.report("cli-test", mode="cli")
        snapshot = await kernel.health.snapshot(live=True)
        data = snapshot.model_dump(mode="json")
        assert data["ok"] is True and data["live"] is True and data["source"] == "gateway"
        assert isinstance(data["ts"], float) and data["duration_ms"] >= 0
        entry = data["channels"]["memory"]["accounts"]["main"]
        assert entry["state"] == "running" and entry["ok"] is True
        assert entry["last_inbound_at"] and entry["last_sent_at"] and entry["last_event_at"]
        assert entry["restarts_last_hour"] == 1
        assert entry["last_error"] == "ConnectionError: gone"
        assert 3599 <= entry["credential_age_s"] <= 3700
        assert entry["probe"]["ok"] is True and entry["probe"]["detail"] == "memory"
        assert entry["monitor"]["enabled"] is True and entry["monitor"]["check_seconds"] == 300
        assert data["sessions"]["total"] == 1 and data["sessions"]["active_last_hour"] == 1
        assert data["sessions"]["recent"][0]["key"] == "memory:main:chat-1"
        assert data["sessions"]["running_turns"] == 0 and data["sessions"]["queued_messages"] == 0
        assert [p["kind"] for p in data["presence"]] == ["gateway", "client"]
        assert data["gateway"]["reachable"] is True and data["gateway"]["pid"]


async def test_the_cached_snapshot_does_not_probe_and_the_live_one_does(tmp_path):
    async with KernelHarness(tmp_path) as h:
        calls = []

        async def counted():
            calls.append(1)
            return ProbeResult(ok=True, detail=f"probe {len(calls)}")

        h.channel.probe = counted
        cached = await h.kernel.health.snapshot()
        assert calls == [] and cached.channels["memory"].accounts["main"].probe is None
        await h.kernel.health.refresh()
        cached = await h.kernel.health.snapshot()
        assert calls == [1]
        assert cached.channels["memory"].accounts["main"].probe.detail == "probe 1"
        live = await h.kernel.health.snapshot(live=True)
        assert calls == [1, 1] and live.live
        assert live.channels["memory"].accounts["main"].probe.detail == "probe 2"


async def test_refreshes_at_the_same_time_share_one_round_of_probes(tmp_path):
    async with KernelHarness(tmp_path) as h:
        calls = []
        gate = anyio.Event()

        async def slow():
            calls.append(1)
            await gate.wait()
            return ProbeResult(ok=True)

        h.channel.probe = slow
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(h.kernel.health.refresh)
            # the first is probing; the others, started before it got there, wait for it
            await wait_until(lambda: calls, timeout=5, what="the probe", interval=0.001)
            gate.set()
        assert calls == [1]


async def test_select_accounts(tmp_path):
    async with KernelHarness(tmp_path, config=TWO_ACCOUNTS) as h:
        accounts = h.kernel.accounts.values()
        assert [a.key for a in select_accounts(accounts, None)] == ["memory:main",
                                                                    "memory:other"]
        assert [a.key for a in select_accounts(accounts, "memory")] == ["memory:main",
                                                                        "memory:other"]
        assert [a.key for a in select_accounts(accounts, "memory:other")] == ["memory:other"]
        with pytest.raises(LookupError, match="accounts: memory:main, memory:other"):
            select_accounts(accounts, "telegram")


async def test_local_snapshot_reads_the_state_without_writing(tmp_path):
    async with KernelHarness(tmp_path) as h:
        await h.channel.receive("hello")
        await h.settle()
        await h.channel.context.record_credentials()
        config = h.config
    db = tmp_path / "state.db"
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir() if p.is_file()}
    store = SQLiteStore(config, read_only=True)
    await store.open()
    try:
        snapshot = await local_snapshot(config, store)
        with pytest.raises(Exception):
            await store.set_account_state("memory", "main", "x", 1)
    finally:
        await store.close()
    after = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir() if p.is_file()}
    assert before == after
    assert snapshot.source == "local" and snapshot.ok is None
    assert snapshot.gateway.reachable is False
    entry = snapshot.channels["memory"].accounts["main"]
    assert entry.state == "stopped" and entry.ok is None
    assert entry.last_inbound_at and entry.last_sent_at and entry.credential_age_s is not None
    assert snapshot.sessions.total == 1
    missing = SQLiteStore(path=tmp_path / "none.db", read_only=True)
    with pytest.raises(StoreError, match="no state database yet"):
        await missing.open()
    assert not (tmp_path / "none.db").exists()


async def test_local_snapshot_lists_disabled_accounts_and_the_embedded_default():
    config = cfg.parse({"channels": {"telegram": {"accounts": {
        "main": {"bot_token": "x"}, "old": {"bot_token": "y", "enabled": False}}}}})
    snapshot = await local_snapshot(config, None)
    accounts = snapshot.channels["telegram"].accounts
    assert accounts["main"].enabled and not accounts["old"].enabled
    assert accounts["old"].detail == "disabled in the config"
    embedded = await local_snapshot(cfg.parse({}), None)
    assert list(embedded.channels) == ["webchat"]


async def test_status_chat_command_tells_the_account_health_without_the_agent(tmp_path):
    async with KernelHarness(tmp_path, config=TWO_ACCOUNTS) as h:
        async def failing():
            return ProbeResult(ok=False, detail="credentials rejected")

        h.account_channel("other").probe = failing
        await h.kernel.health.refresh()
        assert await h.channel.receive("/status") == "command"
        await h.settle()
        lines = h.channel.texts()[-1].splitlines()
        assert lines[1] == ("account: memory:main running, healthy; probe ok: memory, 0s ago; "
                            "0 restart(s) in the last hour")
        assert lines[-1] == ("other accounts with problems: memory:other "
                             "(chatkernel health says why)")
