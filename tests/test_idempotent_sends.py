"""Sends a platform dedupes by key (Channel.idempotent_sends): a lost answer is repeated,
a send in flight at a crash is sent again, and the platform counts each message once.

A channel that does not declare it keeps the outbox's guarantee: such sends are
"delivery unknown", never repeated.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys

import anyio
import pytest

from chatkernel.core.outbound.outbox import send_key
from chatkernel.core.store import OutboxEntry
from chatkernel.core.store.redis import RedisStore
from chatkernel.core.store.sqlite import SQLiteStore
from chatkernel.sdk.models import OutboundPayload, Route
from chatkernel.testing.contract import wait_until
from chatkernel.testing.loopback import SENDS, LoopbackPlatform, LoopbackPlugin
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio


# -- the key ----------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "redis"])
def open_store(request, tmp_path):
    """Opens a store of the backend on a database of its own, by name."""
    if request.param == "sqlite":
        return lambda name: SQLiteStore.at(tmp_path / name / "state.db")
    url = request.getfixturevalue("redis_server")
    prefix = request.getfixturevalue("redis_prefix")
    return lambda name: RedisStore.at(url, prefix=f"{prefix}{name}:")


def entry(text: str) -> OutboxEntry:
    return OutboxEntry(id=0, reply_id="r-1", session_key="loopback:main:c1", session_id="s",
                       channel="loopback", account="main", route=Route("loopback", "main", "c1"),
                       payload=OutboundPayload(text=text), status="sending", error=None,
                       created_at=0.0)


async def test_an_entrys_key_is_the_same_after_a_restart_and_new_in_a_new_database(
        open_store):
    first = entry("hello")
    store = open_store("one")
    await store.open()
    await store.outbox_add([first])
    key = send_key(first)
    await store.close()

    store = open_store("one")  # the restart: the entry as the store reads it back
    await store.open()
    (again,) = await store.outbox_unfinished()
    await store.close()
    assert again.id == first.id and send_key(again) == key

    other = entry("hello")  # a new database: its ids start again
    store = open_store("two")
    await store.open()
    await store.outbox_add([other])
    await store.close()
    assert other.id == first.id and send_key(other) != key
    assert len(key) == 24 and int(key, 16) >= 0


# -- a lost answer, in process ------------------------------------------------------------------


def loopback_config(platform: LoopbackPlatform, *, idempotent: bool) -> dict:
    return {"channels": {"loopback": {
        "retry": {"attempts": 3, "base_delay_ms": 10, "jitter": 0},
        "accounts": {"main": {"base_url": platform.url, "poll_timeout": 0.2,
                              "idempotent_sends": idempotent}}}},
        "queue": {"mode": "followup"}}


def outbox(db) -> list[tuple[str, str, str]]:
    """(status, text, key) of every outbox entry, read while a gateway may run (WAL)."""
    if not db.exists():
        return []
    with sqlite3.connect(db, timeout=5) as conn:
        try:
            rows = conn.execute("SELECT id, channel, account, status, payload, created_at"
                                " FROM outbox ORDER BY id").fetchall()
        except sqlite3.OperationalError:  # not created yet
            return []
    found = []
    for entry_id, channel, account, status, payload, created_at in rows:
        stored = entry(json.loads(payload)["text"])
        stored.id, stored.channel, stored.account = entry_id, channel, account
        stored.created_at = created_at
        found.append((status, stored.payload.text, send_key(stored)))
    return found


def notifications(db) -> list[str]:
    with sqlite3.connect(db, timeout=5) as conn:
        return [text for (text,) in conn.execute(
            "SELECT text FROM session_log WHERE role = 'notification'")]


async def lost_answer(tmp_path, *, idempotent: bool):
    """One reply whose send lands but loses its answer: the platform, the outbox and
    the session's notifications once it is settled, and how many retries there were."""
    async with LoopbackPlatform() as platform:
        async with KernelHarness(tmp_path, config=loopback_config(platform,
                                                                  idempotent=idempotent),
                                 plugins=[("loopback", LoopbackPlugin)]) as h:
            account = h.kernel.accounts["loopback:main"]
            platform.faults.drop(SENDS, after_processing=True)  # it lands, the answer is lost
            async with anyio.create_task_group() as tg:
                tg.start_soon(account.transport.run, h.kernel.receiver)
                platform.inject("c1", "hello")
                await platform.wait_for_sent(1)
                await h.settle()
                tg.cancel_scope.cancel()
            metrics = h.kernel.metrics
            retries = metrics.child(metrics.retries, "loopback", "main")._value.get()
        db = tmp_path / "state.db"
        return platform, outbox(db), notifications(db), retries


async def test_a_lost_answer_is_repeated_under_its_key_when_sends_are_idempotent(tmp_path):
    platform, entries, notes, retries = await lost_answer(tmp_path, idempotent=True)
    sends = platform.calls_to("send")
    assert len(sends) == 2 and retries == 1
    [(status, _, key)] = entries
    assert sends[0].params["idempotency_key"] == sends[1].params["idempotency_key"] == key
    assert [(m.text, m.key) for m in platform.sent] == [("hello", key)]  # counted once
    assert platform.deduped == 1
    assert status == "sent" and notes == []


async def test_a_lost_answer_is_delivery_unknown_when_sends_are_not_idempotent(tmp_path):
    platform, entries, notes, retries = await lost_answer(tmp_path, idempotent=False)
    assert len(platform.calls_to("send")) == 1 and retries == 0  # never repeated
    assert platform.texts() == ["hello"] and platform.deduped == 0
    assert [status for status, _, _ in entries] == ["unknown"]
    assert len(notes) == 1 and notes[0].startswith("delivery failed: delivery unknown")


# -- kill -9 while a send is in flight ----------------------------------------------------------


async def start(platform: LoopbackPlatform, home, *, idempotent: bool):
    env = {**os.environ, "CHATKERNEL_HOME": str(home)}
    return await anyio.open_process(
        [sys.executable, "-m", "chatkernel.testing.loopback", "--platform", platform.url,
         *(["--idempotent-sends"] if idempotent else [])],
        env=env, stdout=None, stderr=None)


async def stop(process) -> None:
    """SIGTERM (what the test reads was committed before; the exit status is not its
    subject: a gateway that settled its outbox during recovery may not listen yet)."""
    process.send_signal(signal.SIGTERM)
    with anyio.fail_after(20):
        await process.wait()


async def killed_mid_send(tmp_path, *, idempotent: bool):
    """A gateway is killed while its send has landed and the answer is held back, then
    started again until the entry is settled: the platform, the outbox and the
    notifications."""
    home = tmp_path / "home"
    db = home / "state.db"
    async with LoopbackPlatform() as platform:
        platform.hold_next_answer()
        platform.inject("c1", "hello")
        process = await start(platform, home, idempotent=idempotent)
        try:
            await platform.wait_until(lambda: platform.stalled, timeout=30)
            assert [status for status, _, _ in outbox(db)] == ["sending"]
        finally:
            process.send_signal(signal.SIGKILL)
            await process.wait()
        assert platform.texts() == ["hello"]  # it landed before the kill

        process = await start(platform, home, idempotent=idempotent)
        try:
            await wait_until(lambda: not any(status in ("pending", "sending")
                                             for status, _, _ in outbox(db)),
                             timeout=30, what="the send settled", state=lambda: outbox(db),
                             interval=0.05)
        finally:
            await stop(process)
    return platform, outbox(db), notifications(db)


@pytest.mark.slow
async def test_an_idempotent_send_in_flight_at_kill_9_is_sent_again_once(tmp_path):
    platform, entries, notes = await killed_mid_send(tmp_path, idempotent=True)
    [(status, text, key)] = entries
    assert status == "sent" and text == "hello"
    sends = platform.calls_to("send")
    assert [call.params["idempotency_key"] for call in sends] == [key, key]  # resent, same key
    assert [(m.text, m.key) for m in platform.sent] == [("hello", key)]  # and counted once
    assert platform.deduped == 1
    assert not any("delivery unknown" in note for note in notes)


@pytest.mark.slow
async def test_a_send_in_flight_at_kill_9_is_delivery_unknown_when_not_idempotent(tmp_path):
    platform, entries, notes = await killed_mid_send(tmp_path, idempotent=False)
    assert [(status, text) for status, text, _ in entries] == [("unknown", "hello")]
    assert len(platform.calls_to("send")) == 1 and platform.texts() == ["hello"]  # not resent
    assert sum("delivery unknown" in note for note in notes) == 1


async def test_a_lost_answer_waiting_for_its_retry_stays_sending(tmp_path):
    """It may be out: `pending` would say nothing of it is (docs/outbound.md). A crash
    now sends it again after the restart either way, under its key."""
    async with LoopbackPlatform() as platform:
        config = loopback_config(platform, idempotent=True)
        config["channels"]["loopback"]["retry"]["base_delay_ms"] = 60_000
        async with KernelHarness(tmp_path, config=config,
                                 plugins=[("loopback", LoopbackPlugin)]) as h:
            account = h.kernel.accounts["loopback:main"]
            metrics = h.kernel.metrics
            retries = metrics.child(metrics.retries, "loopback", "main")
            platform.faults.drop(SENDS, after_processing=True)
            async with anyio.create_task_group() as tg:
                tg.start_soon(account.transport.run, h.kernel.receiver)
                platform.inject("c1", "hello")
                # in its backoff now
                await wait_until(lambda: retries._value.get() >= 1, what="a retry",
                                 interval=0.01)
                [status] = [entry.status for entry in
                            await h.kernel.store.outbox_unfinished()]
                assert status == "sending" and platform.texts() == ["hello"]
                tg.cancel_scope.cancel()
