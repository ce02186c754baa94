"""The outbox under faults: an unreachable platform, waits between retries, restarts,
a store that cannot commit. Real HTTP on 127.0.0.1 where a platform is involved."""

from __future__ import annotations

import collections
import logging
import sqlite3
import time

import anyio
import pytest

from chatkernel import SendError
from chatkernel.sdk.models import OutboundPayload, Route
from chatkernel.testing.contract import wait_until
from chatkernel.testing.fakes.faultproxy import FaultProxy
from chatkernel.testing.loopback import LoopbackPlatform, LoopbackPlugin
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio

#: Short backoffs: a probe of an unreachable platform every 20 ms doubling to 200 ms.
RETRY = {"attempts": 3, "base_delay_ms": 20, "max_delay_ms": 200, "jitter": 0}


def loopback(tmp_path, accounts: dict[str, str], *, retry=None) -> KernelHarness:
    """A kernel with loopback accounts (name -> platform URL); no receive loops."""
    return KernelHarness(tmp_path, config={
        "channels": {"loopback": {
            "retry": {**RETRY, **(retry or {})},
            "accounts": {name: {"base_url": url, "poll_timeout": 0.2}
                         for name, url in accounts.items()}}},
        "queue": {"mode": "followup"}}, plugins=[("loopback", LoopbackPlugin)])


async def queue(h, account: str, chats: int, per_chat: int) -> dict[str, list[str]]:
    """Queue ``per_chat`` replies to each of ``chats`` chats, round robin, as a burst;
    returns the texts expected in each chat, in order."""
    expected = {f"{account}-c{c}": [f"{account}-c{c} #{i}" for i in range(per_chat)]
                for c in range(chats)}
    sender = h.kernel.accounts[f"loopback:{account}"]
    for i in range(per_chat):
        for chat, texts in expected.items():
            await h.kernel.replies.send_text(sender, Route("loopback", account, chat),
                                                 texts[i], fmt="plain")
    return expected


async def refused_past_the_attempts(h, account: str) -> None:
    """Until the platform of ``account`` was refused more often than a payload has
    attempts: one that spent its attempts on refusals would have failed by then."""
    outage = h.kernel.outbox.limits.outage(h.kernel.accounts[f"loopback:{account}"])
    await wait_until(lambda: outage.tries > RETRY["attempts"], timeout=20,
                     what=f"more than {RETRY['attempts']} refused tries of {account}",
                     state=lambda: outage.tries)


def outbox(h) -> collections.Counter[str]:
    return collections.Counter(status for (status,) in h.kernel.store._run(
        "SELECT status FROM outbox").fetchall())


def notes(h) -> list[str]:
    return [text for (text,) in h.kernel.store._run(
        "SELECT text FROM session_log WHERE role = 'notification'").fetchall()]


def logged(caplog, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == logger and r.levelno >= logging.INFO]


# -- an unreachable platform -----------------------------------------------------------------


@pytest.mark.slow
async def test_an_outage_mid_burst_fails_nothing_and_sends_everything_in_order(tmp_path,
                                                                             caplog):
    caplog.set_level(logging.INFO)
    async with LoopbackPlatform() as platform, FaultProxy(platform.url) as proxy:
        platform.send_latency = 0.002
        async with loopback(tmp_path, {"main": proxy.url}) as h:
            expected = await queue(h, "main", chats=10, per_chat=12)
            await platform.wait_for_sent(20)
            proxy.stop()  # mid-burst: connections are refused from now on
            # Before, every payload in flight failed after three attempts.
            await refused_past_the_attempts(h, "main")
            assert outbox(h)["failed"] == 0
            proxy.start()  # the same port, as a platform coming back
            await h.settle(timeout=20)
            for chat, texts in expected.items():
                assert platform.texts(chat) == texts
            assert outbox(h) == {"sent": 120}
            assert notes(h) == []
    # Logged as it began and as it ended, with counts: not per payload, not per attempt.
    # A request the proxy had accepted before it stopped is still answered, which can end
    # the outage once before the next refusal begins it again: at most one such flap.
    lines = logged(caplog, "chatkernel.retry")
    began = ["loopback:main: the platform cannot be reached" in line for line in lines]
    ended = ["reachable again" in line and "payload(s) waited" in line for line in lines]
    assert len(lines) in (2, 4) and all(b != e for b, e in zip(began, ended)), lines
    assert began[::2] == [True] * (len(lines) // 2) and ended[1::2] == [True] * (
        len(lines) // 2), lines
    assert logged(caplog, "chatkernel.outbox") == []


@pytest.mark.slow
async def test_an_account_whose_platform_is_down_does_not_hold_up_another(tmp_path):
    async with LoopbackPlatform() as platform, FaultProxy(platform.url) as proxy:
        proxy.stop()
        async with loopback(tmp_path, {"down": proxy.url, "up": platform.url}) as h:
            down = await queue(h, "down", chats=3, per_chat=3)
            up = await queue(h, "up", chats=3, per_chat=3)
            await platform.wait_for_sent(9)  # all of "up", while "down" waits
            await refused_past_the_attempts(h, "down")
            assert sorted(m.text for m in platform.sent) == sorted(
                text for texts in up.values() for text in texts)
            proxy.start()
            await h.settle(timeout=20)
            for chat, texts in {**down, **up}.items():
                assert platform.texts(chat) == texts
            assert outbox(h) == {"sent": 18}


@pytest.mark.slow
async def test_a_restart_during_an_outage_sends_the_held_payloads_afterwards(tmp_path):
    async with LoopbackPlatform() as platform, FaultProxy(platform.url) as proxy:
        proxy.stop()
        async with loopback(tmp_path, {"main": proxy.url}) as h:
            expected = await queue(h, "main", chats=3, per_chat=4)
            await refused_past_the_attempts(h, "main")  # refused again and again
            assert outbox(h) == {"pending": 12}
        async with loopback(tmp_path, {"main": proxy.url}) as h:
            await refused_past_the_attempts(h, "main")  # still down after the restart
            assert outbox(h) == {"pending": 12}
            proxy.start()
            await h.settle(timeout=20)
            for chat, texts in expected.items():
                assert platform.texts(chat) == texts
            assert outbox(h) == {"sent": 12}
            assert notes(h) == []


async def test_a_payload_unreachable_past_its_max_age_is_reported_failed(tmp_path):
    async with LoopbackPlatform() as platform, FaultProxy(platform.url) as proxy:
        proxy.stop()
        async with loopback(tmp_path, {"main": proxy.url},
                            retry={"unreachable_max_age": "300ms"}) as h:
            await queue(h, "main", chats=1, per_chat=2)
            await h.settle(timeout=10)
            assert outbox(h) == {"failed": 2}
            reported = notes(h)
            assert len(reported) == 2
            assert all("not sent: the platform could not be reached for 300ms" in note
                       for note in reported), reported
            proxy.start()
            # failed means not sent, ever: the chat's next reply is the first to go out
            account = h.kernel.accounts["loopback:main"]
            await h.kernel.replies.send_text(account, Route("loopback", "main", "main-c0"),
                                                 "after", fmt="plain")
            await h.settle(timeout=10)
            assert platform.texts() == ["after"]


async def test_a_kernel_that_does_not_recover_fails_an_unreachable_send(tmp_path):
    """A CLI command's own kernel exits after its send: it reports the failure after
    the policy's attempts instead of waiting for the platform."""
    from chatkernel.core.config import KernelConfig
    from chatkernel.core.kernel import Kernel
    from chatkernel.core.plugins import PluginManager

    async with LoopbackPlatform() as platform, FaultProxy(platform.url) as proxy:
        proxy.stop()
        config = KernelConfig.model_validate({
            "gateway": {"workspace": str(tmp_path / "workspace")},
            "store": {"path": str(tmp_path / "state.db")},
            "channels": {"loopback": {"retry": RETRY, "accounts": {
                "main": {"base_url": proxy.url}}}}})
        pm = PluginManager().load(only=[], disabled=[], strict=True)
        pm.register(LoopbackPlugin, name="loopback")
        async with Kernel(config, pm=pm, recover=False) as kernel:
            reply = await kernel.replies.send_text(
                kernel.accounts["loopback:main"], Route("loopback", "main", "c1"), "hi",
                fmt="plain")
            with anyio.fail_after(10):
                await kernel.outbox.wait_idle()
            (entry,) = await kernel.store.outbox_reply(reply)
            assert entry.status == "failed" and "cannot connect" in entry.error


# -- waits between retries are not "in flight" --------------------------------------------------


def memory(tmp_path, retry=None) -> KernelHarness:
    return KernelHarness(tmp_path, config={"channels": {"memory": {
        "retry": {"attempts": 3, "base_delay_ms": 1000, "jitter": 0, **(retry or {})},
        "accounts": {"main": {"allow_from": ["*"]}}}}})


def db_status(h) -> str:
    with sqlite3.connect(h.kernel.store.path) as other:  # what a crash would leave
        (status,) = other.execute("SELECT status FROM outbox").fetchone()
    return status


@pytest.mark.parametrize("refusal", [
    SendError("Too Many Requests", retryable=True, status=429, retry_after=1.0),
    SendError("Service Unavailable", retryable=True, status=503),
], ids=["429", "503"])
async def test_a_payload_waiting_to_be_retried_is_pending_and_resent_after_a_crash(
        tmp_path, refusal):
    async with memory(tmp_path) as h:
        store = h.kernel.store
        original_mark = store.outbox_mark
        marks: list[str] = []

        async def mark(entry_id, status, error=None, *, durable=False):
            marks.append(status)
            await original_mark(entry_id, status, error, durable=durable)

        store.outbox_mark = mark
        h.channel.fail_next = [refusal]
        route = Route("memory", "main", "chat-1")
        await h.kernel.replies.send_text(h.kernel.accounts["memory:main"], route,
                                             "refused once", fmt="plain")
        await wait_until(lambda: not h.channel.fail_next, timeout=5,
                         what="the first request refused", interval=0.005)
        await store.flush()
        assert db_status(h) == "pending"  # it waits for its retry: nothing is out
        assert marks == ["pending"]
        # The gateway stops (as a crash would) during the wait.
    async with memory(tmp_path) as h:
        await h.settle()
        assert h.channel.texts() == ["refused once"]
        assert notes(h) == []  # no "delivery unknown": it was not in flight


async def test_every_retry_is_marked_sending_again_right_before_it_goes(tmp_path):
    async with memory(tmp_path, retry={"base_delay_ms": 10}) as h:
        store, channel = h.kernel.store, h.channel
        original_send = channel.send
        seen: list[str] = []

        async def send(route, payload):
            seen.append(db_status(h))
            return await original_send(route, payload)

        channel.send = send
        channel.fail_next = [SendError("Bad Gateway", retryable=True, status=502),
                             SendError("Too Many Requests", retryable=True, status=429,
                                       retry_after=0.05)]
        await h.kernel.replies.send_text(h.kernel.accounts["memory:main"],
                                             Route("memory", "main", "chat-1"), "third time",
                                             fmt="plain")
        await h.settle()
        assert channel.texts() == ["third time"]
        assert seen == ["sending"] * 3
        await store.flush()
        assert db_status(h) == "sent"


# -- a restart does not burst ----------------------------------------------------------------------


@pytest.mark.slow
async def test_sends_before_and_after_a_restart_keep_the_windows(tmp_path):
    rates = {"account": "6/3s", "chat": "2/3s"}
    sent: list[tuple[float, str]] = []

    def harness() -> KernelHarness:
        return KernelHarness(tmp_path, config={"channels": {"memory": {
            "rate_limits": rates, "accounts": {"main": {"allow_from": ["*"]}}}}})

    async def burst(h) -> None:
        channel = h.channel
        original_send = channel.send

        async def send(route, payload):
            sent.append((time.monotonic(), route.chat_id))
            return await original_send(route, payload)

        channel.send = send
        account = h.kernel.accounts["memory:main"]
        for i in range(2):
            for chat in ("a", "b", "c"):
                await h.kernel.replies.send_text(account, Route("memory", "main", chat),
                                                     f"{chat}{i}", fmt="plain")

    async with harness() as h:
        await burst(h)
        await h.settle()
    assert len(sent) == 6  # the account's whole window, right before the restart
    async with harness() as h:
        await burst(h)
        await h.settle(timeout=15)
    assert len(sent) == 12

    def most_in_a_window(times: list[float], per: float) -> int:
        return max(sum(1 for u in times if t <= u < t + per) for t in times)

    assert most_in_a_window([at for at, _ in sent], 3.0) <= 6
    for chat in ("a", "b", "c"):
        assert most_in_a_window([at for at, c in sent if c == chat], 3.0) <= 2


# -- a store that cannot commit ------------------------------------------------------------------


@pytest.mark.slow
async def test_sending_marks_the_store_cannot_commit_wait_in_order_until_it_can(
        tmp_path, caplog, full_disk):
    caplog.set_level(logging.INFO)
    async with memory(tmp_path) as h:
        outbox, store = h.kernel.outbox, h.kernel.store
        account = h.kernel.accounts["memory:main"]
        route = Route("memory", "main", "chat-1")
        disk = full_disk(store)
        disk.full = False
        outbox.limits.limiter(account).penalize(0.3, "chat-1")  # queued: they wait their turn
        for text in ("one", "two", "three"):
            await outbox.submit(account, "memory:main:chat-1", "s", route,
                                [OutboundPayload(text=text, format="plain")])
        await store.flush()  # queued for good: committed `pending`
        disk.full = True
        # its `sending` mark was refused, and again later
        await wait_until(lambda: disk.failed >= 3, timeout=5, what="three failed commits",
                         interval=0.01)
        assert h.channel.texts() == []  # nothing left unrecorded
        disk.full = False
        await h.settle()
        assert h.channel.texts() == ["one", "two", "three"]
        assert outbox_statuses(h) == ["sent"] * 3
        assert notes(h) == []  # nothing was reported failed: nothing failed
    assert logged(caplog, "chatkernel.outbox") == []  # the store's wait, not the outbox's
    lines = [line for line in logged(caplog, "chatkernel.store") if "attempt" in line]
    assert len(lines) == 1 and "nothing was lost" in lines[0], lines
    async with memory(tmp_path) as h:  # and a restart sends nothing again
        await h.settle()
        assert h.channel.texts() == []


def outbox_statuses(h) -> list[str]:
    return [status for (status,) in h.kernel.store._run(
        "SELECT status FROM outbox ORDER BY id").fetchall()]


async def test_a_queued_payload_whose_insert_failed_to_commit_is_sent_in_its_turn(
        tmp_path, fail_next_commit):
    async with memory(tmp_path) as h:
        outbox, store = h.kernel.outbox, h.kernel.store
        account = h.kernel.accounts["memory:main"]
        route = Route("memory", "main", "chat-1")
        outbox.limits.limiter(account).penalize(0.05, "chat-1")  # not claimed: queued `pending`
        await outbox.submit(account, "memory:main:chat-1", "s", route,
                            [OutboundPayload(text="kept", format="plain")])
        fail_next_commit(store)  # the commit of its insert fails, and is tried again
        await outbox.submit(account, "memory:main:chat-1", "s", route,
                            [OutboundPayload(text="later", format="plain")])
        await h.settle()
        assert h.channel.texts() == ["kept", "later"]
        assert outbox_statuses(h) == ["sent", "sent"]
        assert notes(h) == []


# -- kill -9 during an outage ------------------------------------------------------------------


@pytest.mark.slow
async def test_kill_9_during_an_outage_then_the_platform_returns(tmp_path):
    """The real gateway (the loopback channel in a process of its own) answers a burst;
    mid-burst its platform goes away, the gateway is killed while its replies wait, and
    started again; then the platform comes back: every reply goes out once, in order."""
    import json
    import os
    import signal
    import sys

    home = tmp_path / "home"
    db = home / "state.db"
    chats, per_chat = 6, 10
    env = {**os.environ, "CHATKERNEL_HOME": str(home)}

    async def gateway(url: str):
        return await anyio.open_process(
            [sys.executable, "-m", "chatkernel.testing.loopback", "--platform", url],
            env=env, stdout=None, stderr=None)

    def rows() -> list[tuple[str, str]]:
        with sqlite3.connect(db, timeout=5) as conn:
            return [(status, json.loads(payload)["text"]) for status, payload in
                    conn.execute("SELECT status, payload FROM outbox ORDER BY id")]

    async with LoopbackPlatform() as platform, FaultProxy(platform.url) as proxy:
        platform.send_latency = 0.05  # each chat's replies take a while: most are left
        expected = {f"chat-{c}": [f"message {i} in chat {c}" for i in range(per_chat)]
                    for c in range(chats)}
        for i in range(per_chat):
            for c in range(chats):
                platform.inject(f"chat-{c}", expected[f"chat-{c}"][i], sender_id=f"user-{c}")
        process = await gateway(proxy.url)
        try:
            await platform.wait_for_sent(15, timeout=30)
            proxy.stop()
            # real time: a gateway process's senders meet the stopped platform before the kill
            await anyio.sleep(0.5)
        finally:
            process.send_signal(signal.SIGKILL)
            await process.wait()
        assert sum(1 for status, _ in rows() if status == "pending") >= 10  # held, not failed
        process = await gateway(proxy.url)
        try:
            # real time: the restarted gateway process runs a while without its platform
            await anyio.sleep(1.0)
            proxy.start()
            await wait_until(lambda: sum(1 for status, _ in rows()
                                         if status in ("sent", "unknown")) >= chats * per_chat,
                             timeout=60, what="every reply sent or unknown", state=rows,
                             interval=0.1)
        finally:
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(20):
                await process.wait()
    entries = rows()
    unknown = {text for status, text in entries if status == "unknown"}
    sent = collections.Counter(platform.texts())
    assert max(sent.values()) == 1  # nothing twice
    assert {status for status, _ in entries} <= {"sent", "unknown"}  # nothing failed
    for chat, texts in expected.items():  # in order; a gap only where it was in flight
        assert platform.texts(chat) == [text for text in texts if text not in unknown]
    # A kill can catch a request in flight (reported "delivery unknown"), but the wait
    # for the platform is not in flight: at most the one request each kill cut.
    assert len(unknown) <= 1, unknown
