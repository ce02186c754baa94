"""Three real gateway processes on one Redis, a bot account on the fake Bot API: one
poller at a time, and kill -9 of the poller mid-burst loses nothing and sends nothing
twice (chatkernel.core.runtime.cluster)."""

from __future__ import annotations

import collections
from contextlib import asynccontextmanager

import anyio
import pytest

from chatkernel.testing import (
    BUSY_HINT,
    CHATKERNEL,
    GatewayInstances,
    RedisStore,
    holder_pid,
    wait_for_owner,
)
from chatkernel_telegram.fake import FakeBotAPI

pytestmark = pytest.mark.anyio

LEASE_SECONDS = 2.0
LEASE = "account:telegram:main"


def cluster_config(api: FakeBotAPI, redis_url: str, prefix: str, **account: object) -> dict:
    return {
        "store": {"backend": "redis", "url": redis_url, "prefix": prefix,
                  "lease_seconds": LEASE_SECONDS},
        "agent": {"kind": "echo"},
        "queue": {"mode": "followup", "debounce_ms": 0},
        "heartbeat": {"every": "0"},
        "channels": {"webchat": {"enabled": False}, "telegram": {"accounts": {"main": {
            "bot_token": api.token, "api_base": api.base_url, "allow_from": ["*"],
            "poll_timeout": 1, **account}}}},
    }


@asynccontextmanager
async def cluster(tmp_path, redis_server: str, prefix: str, size: int):
    """``size`` gateway instances sharing a bot account of the fake Bot API over Redis,
    once one of them owns it: the fake, the instances, their store, the owner's id and
    its fencing token."""
    async with FakeBotAPI() as api, GatewayInstances(
            tmp_path, cluster_config(api, redis_server, prefix)) as instances, \
            RedisStore(url=redis_server, prefix=prefix) as store:
        for _ in range(size):
            await instances.start()
        holder, token = await wait_for_owner(store, LEASE, timeout=30)
        yield api, instances, store, holder, token


async def lease_holder(store: RedisStore) -> tuple[str, int] | None:
    held = (await store.leases()).get(LEASE)
    return None if held is None else (held[0], held[1])


def answers(api: FakeBotAPI, chat_id: int | None = None) -> list[str]:
    """What the bot sent, but the notes that it is still busy with an earlier message."""
    return [m.plain_text for m in api.sent(chat_id=chat_id) if m.plain_text != BUSY_HINT]


async def settled(store: RedisStore, api: FakeBotAPI, want: set[str], timeout: float
                  ) -> list:
    """The entries ended delivery unknown, once every message has an answer or is one."""
    with anyio.fail_after(timeout):
        while True:
            unknown = [entry for entry, _ in await store.outbox_failures(limit=1000)]
            if want <= set(answers(api)) | {entry.payload.text for entry in unknown}:
                return unknown
            await anyio.sleep(0.1)  # real time: reads the store real processes write


@pytest.mark.slow
async def test_kill_9_of_the_poller_mid_burst_loses_nothing_and_sends_nothing_twice(
        tmp_path, redis_server, redis_prefix):
    chats, per_chat, kills = 12, 8, 3
    async with cluster(tmp_path, redis_server, redis_prefix, 3) as (
            api, instances, store, holder, token):
        expected: dict[int, list[str]] = collections.defaultdict(list)
        tokens = [token]
        for round_ in range(kills + 1):
            for i in range(per_chat // (kills + 1) + 1):
                for chat in range(chats):
                    text = f"round {round_} message {i} in chat {chat}"
                    expected[1000 + chat].append(text)
                    api.inject_message(1000 + chat, text)
            if round_ == kills:
                break
            # real time: the kill must land mid-burst in real processes (some answered)
            await anyio.sleep(0.5)
            victim = instances.owner(holder)
            assert victim is not None and victim.alive
            victim.kill()
            await victim.process.wait()
            holder, token = await wait_for_owner(store, LEASE, not_held_by={holder},
                                                 timeout=LEASE_SECONDS * 5)
            tokens.append(token)
            await instances.start()  # three again
        want = {text for texts in expected.values() for text in texts}
        unknown = await settled(store, api, want, timeout=90)
    sent = answers(api)
    assert max(collections.Counter(sent).values()) == 1  # nothing twice
    unknown_texts = {entry.payload.text for entry in unknown}
    assert all(entry.status == "unknown" for entry in unknown)  # nothing failed
    for chat, texts in expected.items():  # all answered, in order per chat
        got = answers(api, chat)
        # (one in flight at a kill is "delivery unknown": it may have arrived or not)
        assert [t for t in got if t not in unknown_texts] == \
            [t for t in texts if t not in unknown_texts], chat
        assert got == [t for t in texts if t in got], chat
    assert len(unknown_texts) <= kills * chats  # at most a request per chat each kill cut
    assert tokens == sorted(set(tokens))  # every takeover fenced the one before
    conflicts = [call for call in api.calls
                 if call.method == "getUpdates" and call.status == 409]
    # One poller at a time: a 409 goes only to the long poll a killed instance left
    # open, which the next owner's first poll ends (Telegram's "newer request wins").
    assert len(conflicts) <= kills


@pytest.mark.slow
async def test_a_paused_former_owner_is_fenced_off(tmp_path, redis_server, redis_prefix):
    """SIGSTOP the owner past its lease: another instance takes the account; when the
    paused one wakes it sends nothing and gives the account up."""
    async with cluster(tmp_path, redis_server, redis_prefix, 2) as (
            api, instances, store, holder, token):
        api.inject_message(2000, "before the pause")
        await api.wait_for_sent(1, timeout=20)
        paused = instances.owner(holder)
        assert paused is not None
        paused.pause()
        try:
            new_holder, new_token = await wait_for_owner(
                store, LEASE, not_held_by={holder}, timeout=LEASE_SECONDS * 5)
            assert new_token > token
            for i in range(5):
                api.inject_message(2000, f"while paused {i}")
            await api.wait_for_sent(6, timeout=30)
        finally:
            paused.resume()
        with anyio.fail_after(20):  # it notices it lost the account
            while "no longer owned by this instance" not in paused.log():
                await anyio.sleep(0.1)  # real time: polls a real process's log
        api.inject_message(2000, "after the resume")
        await api.wait_for_sent(7, timeout=20)
        # real time: a stale sender in a real process gets a lease's time to try
        await anyio.sleep(LEASE_SECONDS)
        assert await lease_holder(store) == (new_holder, new_token)
    sent = [m.plain_text for m in api.sent(chat_id=2000)]
    assert sent == ["before the pause", *(f"while paused {i}" for i in range(5)),
                    "after the resume"]


@pytest.mark.slow
async def test_redis_lost_and_back_is_reported_retried_and_loses_nothing(tmp_path):
    """Redis goes away under a running gateway: it stays up (no crash loop), its health
    says why, what the platform sends meanwhile is not acknowledged, and once Redis is
    back every message is answered once. status shows the instance and its lease."""
    import json
    import os
    import subprocess
    import urllib.error
    import urllib.request

    from chatkernel.testing import RedisServer

    def healthz(url: str) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=10) as answer:
                return answer.status, json.load(answer)
        except urllib.error.HTTPError as exc:
            return exc.code, json.load(exc)

    # On a Unix socket: its TCP port, free while the server is down, could be taken by
    # another process of a busy machine before the restart.
    with RedisServer(tmp_path / "redis", unix_socket=True) as server:
        async with FakeBotAPI() as api, GatewayInstances(
                tmp_path, cluster_config(api, server.url, "lost:")) as instances:
            gateway = await instances.start()
            api.inject_message(3000, "before")
            await api.wait_for_sent(1, timeout=20)
            status = subprocess.run(
                [CHATKERNEL, "status", "--json"],
                env={**os.environ, "CHATKERNEL_HOME": str(gateway.home)},
                capture_output=True, text=True, timeout=60)
            snapshot = json.loads(status.stdout)
            cluster = snapshot["cluster"]
            assert [i["pid"] for i in cluster["instances"]] == [gateway.pid]
            assert [(lease["name"], holder_pid(lease["holder"])) for lease in
                    cluster["leases"] if lease["name"].startswith("account:")] == [
                (LEASE, gateway.pid)]
            assert snapshot["store"]["reachable"] is True
            with urllib.request.urlopen(f"{gateway.url}/status", timeout=10) as page:
                html = page.read().decode()
            assert 'data-lease="account:telegram:main"' in html  # and on the page
            assert f'/{gateway.pid}/' in html.split('id="instances"')[1]

            server.stop()
            for i in range(3):
                api.inject_message(3000, f"during {i}")
            with anyio.fail_after(30):  # reported, not crashed
                while True:
                    code, health = healthz(gateway.url)
                    if code == 503 and any("shared store: unreachable" in reason
                                           for reason in health.get("reasons", [])):
                        break
                    await anyio.sleep(0.2)  # real time: polls a real process's /healthz
            # real time: Redis stays down past the real leases of a real process
            await anyio.sleep(LEASE_SECONDS * 2)
            assert gateway.alive
            assert len(answers(api)) == 1  # nothing acknowledged that was not journaled
            server.start()
            await api.wait_for_sent(4, timeout=60)
            with anyio.fail_after(30):
                while healthz(gateway.url)[0] != 200:
                    await anyio.sleep(0.2)  # real time: polls a real process's /healthz
            assert gateway.alive and gateway.pid == instances.instances[0].pid
    assert answers(api, 3000) == ["before", "during 0", "during 1", "during 2"]


async def test_the_next_owner_counts_the_sends_its_predecessor_made_in_the_windows(
        tmp_path, redis_server, redis_prefix):
    """One sender per account keeps the limits while it owns it; a handover must not
    reset them. The first owner fills the account's window; the next, taking over
    within it, counts those sends: it waits where a fresh limiter would send at once,
    and the fake Bot API, enforcing the same window, answers no 429."""
    import chatkernel_telegram
    from chatkernel.testing import KernelHarness

    window = {"account": "20/10s", "chat": "off", "group": "off"}
    async with FakeBotAPI() as api:
        config = {
            "store": {"backend": "redis", "url": redis_server, "prefix": redis_prefix,
                      "lease_seconds": LEASE_SECONDS},
            "heartbeat": {"every": "0"},
            "channels": {"telegram": {"rate_limits": window, "accounts": {"main": {
                "bot_token": api.token, "api_base": api.base_url, "allow_from": ["*"]}}}}}
        plugins = [("telegram", chatkernel_telegram)]
        async with KernelHarness(tmp_path / "first", config=config, plugins=plugins) as h:
            assert h.owns("telegram:main")
            for chat in range(20):  # the whole window, to 20 chats
                await h.send_text("telegram", str(7000 + chat), f"first {chat}", fmt="plain")
            with anyio.fail_after(30):
                await h.outbox_idle()
        assert len(api.sent()) == 20
        async with KernelHarness(tmp_path / "next", config=config, plugins=plugins) as h:
            assert h.owns("telegram:main")  # the lease was given back
            # A new chat must wait for the first owner's sends to leave the window.
            assert h.send_wait("telegram:main", "7100") > 1.0


async def test_every_instance_knows_the_webhook_secret_without_one_configured(
        tmp_path, redis_server, redis_prefix):
    """Telegram posts to whichever instance the load balancer picks: with no
    secret_token configured, instances sharing the store derive the same one from the
    bot token (one process alone makes a random one per start)."""
    import chatkernel_telegram
    from chatkernel.testing import KernelHarness

    async with FakeBotAPI() as api:
        account = {"bot_token": api.token, "api_base": api.base_url, "allow_from": ["*"],
                   "mode": "webhook", "webhook_url": "https://bot.example.org/hook"}
        config = {"store": {"backend": "redis", "url": redis_server, "prefix": redis_prefix},
                  "channels": {"telegram": {"accounts": {"main": account}}}}
        plugins = [("telegram", chatkernel_telegram)]
        async with KernelHarness(tmp_path / "a", config=config, plugins=plugins) as first, \
                KernelHarness(tmp_path / "b", config=config, plugins=plugins) as second:
            one = first.account("telegram").channel
            other = second.account("telegram").channel
            assert one.secret_token == other.secret_token
            assert api.token not in one.secret_token
            other.transport().verifier().verify(
                {"X-Telegram-Bot-Api-Secret-Token": one.secret_token}, b"{}")
        async with KernelHarness(tmp_path / "alone", config={
                "channels": {"telegram": {"accounts": {"main": account}}}},
                plugins=plugins) as alone:
            assert alone.account("telegram").channel.secret_token != \
                one.secret_token

