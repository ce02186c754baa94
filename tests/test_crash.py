"""kill -9 the gateway again and again during a burst: nothing lost, nothing sent twice."""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import sqlite3
import sys

import anyio
import pytest

from chatkernel.testing.contract import wait_until
from chatkernel.testing.loopback import LoopbackPlatform

pytestmark = pytest.mark.anyio

MESSAGES = 150
CHATS = 15


def outbox(db) -> list[tuple[str, str]]:
    """(status, text) of every outbox entry, read while the gateway may run (WAL)."""
    if not db.exists():
        return []
    with sqlite3.connect(db, timeout=5) as conn:
        try:
            rows = conn.execute("SELECT status, payload FROM outbox").fetchall()
        except sqlite3.OperationalError:  # not created yet
            return []
    return [(status, json.loads(payload)["text"]) for status, payload in rows]


def notifications(db) -> list[str]:
    return logged(db, "notification")


def logged(db, role: str) -> list[str]:
    with sqlite3.connect(db, timeout=5) as conn:
        return [text for (text,) in conn.execute(
            "SELECT text FROM session_log WHERE role = ?", (role,))]


async def start(platform, home, log=None):
    env = {**os.environ, "CHATKERNEL_HOME": str(home)}
    return await anyio.open_process(
        [sys.executable, "-m", "chatkernel.testing.loopback", "--platform", platform.url],
        env=env, stdout=None, stderr=log)


async def until_ready(log_path) -> None:
    """Until the gateway logged its ready line: its signals stop it in order from then
    on (a SIGTERM before it would end it with -15 and prove nothing)."""
    await wait_until(lambda: "chatkernel ready on" in log_path.read_text(errors="replace"),
                     timeout=30, what="the ready line")


@pytest.mark.slow
async def test_kill_9_during_a_burst_loses_nothing_and_sends_nothing_twice(tmp_path):
    home = tmp_path / "home"
    db = home / "state.db"
    rng = random.Random(7)
    async with LoopbackPlatform() as platform:
        platform.send_latency = 0.02  # round trips: a kill can land mid-send
        texts = [f"message {n} in chat {n % CHATS}" for n in range(MESSAGES)]
        for n, text in enumerate(texts):
            platform.inject(f"chat-{n % CHATS}", text, sender_id=f"user-{n % CHATS}")

        kills = 0
        for _ in range(5):
            before = len(platform.sent)
            process = await start(platform, home)
            # Kill once it has answered a few more, or after a random moment.
            with anyio.move_on_after(rng.uniform(0.8, 2.0)):
                while len(platform.sent) < before + rng.randint(5, 25):
                    await anyio.sleep(0.01)  # real time: a random moment of a real process
            process.send_signal(signal.SIGKILL)
            await process.wait()
            kills += 1

        log_path = tmp_path / "last-gateway.log"
        with log_path.open("wb") as log:
            process = await start(platform, home, log)
        try:
            def accounted() -> set[str]:  # answered, or known not to be
                unknown = {text for status, text in outbox(db) if status == "unknown"}
                return set(platform.texts()) | unknown

            await wait_until(lambda: len(accounted()) >= MESSAGES, timeout=60,
                             what=f"{MESSAGES} messages answered or unknown",
                             state=lambda: len(accounted()), interval=0.1)
        finally:
            await until_ready(log_path)
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(20):
                assert await process.wait() == 0

    replies = collections.Counter(platform.texts())
    entries = outbox(db)
    unknown = {text for status, text in entries if status == "unknown"}
    assert kills == 5
    # Nothing was sent twice.
    assert replies and max(replies.values()) == 1, replies.most_common(3)
    # Every accepted message was answered, or its answer was in flight at a kill...
    for text in texts:
        assert replies[text] == 1 or text in unknown, text
    # ...and every in-flight send is reported, never silently resent or dropped.
    reported = notifications(db)
    assert sum("delivery unknown" in note for note in reported) == len(unknown)
    statuses = collections.Counter(status for status, _ in entries)
    assert set(statuses) <= {"sent", "unknown"}, statuses
    # Replayed turns logged nothing twice: every message is in the session log once.
    assert collections.Counter(logged(db, "user")) == collections.Counter(texts)


async def test_real_http_failures_429_5xx_and_a_dropped_connection(tmp_path):
    """The retry policy against a platform over real HTTP: 429 and 503 are retried,
    a connection dropped after the request went out is reported, never resent."""
    from chatkernel.testing.loopback import LoopbackPlugin
    from chatkernel.testing.memory import KernelHarness

    async with LoopbackPlatform() as platform:
        platform.retry_after = 0.05
        config = {"channels": {"loopback": {
            "retry": {"attempts": 3, "base_delay_ms": 10, "jitter": 0},
            "accounts": {"main": {"base_url": platform.url, "poll_timeout": 0.2}}}},
            "queue": {"mode": "followup"}}
        async with KernelHarness(tmp_path, config=config,
                                 plugins=[("loopback", LoopbackPlugin)]) as h:
            account = h.kernel.accounts["loopback:main"]
            platform.fail_next(429, 503)
            async with anyio.create_task_group() as tg:
                tg.start_soon(account.transport.run, h.kernel.receiver)
                platform.inject("c1", "first")
                await platform.wait_for_sent(1)
                platform.fail_next("drop")
                platform.inject("c1", "second")
                platform.inject("c1", "third")
                await platform.wait_for_sent(2)
                await h.settle()
                tg.cancel_scope.cancel()
            assert platform.texts() == ["first", "third"]
            metrics = h.kernel.metrics
            assert metrics.child(metrics.retries, "loopback", "main")._value.get() == 2
            assert metrics.child(metrics.throttled, "loopback", "main")._value.get() == 1
            notes = [e.text for e in await h.kernel.store.read_log(
                "loopback:main:c1", roles=("notification",))]
            assert len(notes) == 1 and notes[0].startswith("delivery failed: delivery unknown")
