"""A full disk while the gateway runs, on a real file system (a small tmpfs): SQLite's
commits fail with SQLITE_FULL; nothing the gateway acted on is lost, each chat's
replies keep their order, and health says so while it lasts."""

from __future__ import annotations

import functools
import sqlite3

import anyio
import pytest

from chatkernel.sdk.models import InboundMessage, OutboundPayload, Route
from chatkernel.core.store.base import OutboxEntry, StoreError
from chatkernel.core.store.sqlite import SQLiteStore
from chatkernel.testing.contract import wait_until
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio


def message(message_id: str, chat_id: str = "chat-1") -> InboundMessage:
    return InboundMessage(channel="memory", account="main", chat_id=chat_id,
                          message_id=message_id, sender_id="user-1", text=message_id)


def replies(count: int, reply_id: str) -> list[OutboxEntry]:
    route = Route("memory", "main", "chat-1")
    # Large enough that each needs pages of its own: the WAL must grow to take them.
    return [OutboxEntry(0, reply_id, "memory:main:chat-1", "s1", "memory", "main", route,
                        OutboundPayload(text=f"{reply_id} part {i} " + "x" * 3000),
                        "pending", None, 0.0)
            for i in range(count)]


def committed(path, sql: str) -> list[tuple]:
    """What another connection reads: committed rows only."""
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchall()


async def until(condition, timeout: float = 10.0) -> None:
    await wait_until(condition, timeout=timeout, interval=0.01)


@pytest.mark.slow
async def test_a_failed_commit_is_tried_again_once_the_disk_has_room(disk):
    path = disk.path / "state.db"
    told: list[Exception | None] = []
    store = SQLiteStore.at(path)
    store.on_commit = told.append
    async with store:
        answered = await store.journal_inbound(message("m1"))  # committed before
        disk.fill()
        logged = 0
        while not any(isinstance(error, StoreError) for error in told):
            # (a commit that fits the WAL's free space goes through: write until the
            # file system refuses one)
            logged += 1
            attempts = len(told)
            await store.append_log("memory:main:chat-1", "s1", "user", "y" * 4000)
            await until(lambda n=attempts: len(told) > n)  # its commit was tried
            assert logged < 500, "the full disk never refused a commit"
        failure = next(error for error in told if error is not None)
        assert "full" in str(failure)
        # A reply to m1 now: its rows and the journal's `done` mark wait with the
        # failed commit's writes, which are tried again.
        first = replies(3, "r1")
        await store.outbox_add(first, finish_journal=[answered])
        marked = []

        async def mark_sending() -> None:
            await store.outbox_mark(first[0].id, "sending", durable=True)
            marked.append(first[0].id)

        async with anyio.create_task_group() as tg:
            tg.start_soon(mark_sending)
            failures = len(told)
            await until(lambda: len(told) > failures)  # the next attempt failed too
            assert told[-1] is not None
            assert marked == []  # not committed: the durable mark waits, it is not lost
            # A message that comes now is refused, not journaled (its platform sends it
            # again), and no entry of it is kept.
            with pytest.raises(StoreError, match="full"):
                await store.journal_inbound(message("m2"))
            later = replies(1, "r2")
            await store.outbox_add(later)  # after the failure, in the same order
            disk.free()
            await until(lambda: bool(marked))  # the retries' backoff is at most 2 s
        assert told[-1] is None  # health: green again
        await store.flush()
        ids = [entry.id for entry in first + later]
    assert len(set(ids)) == 4 and ids == sorted(ids)
    assert committed(path, "SELECT id, reply_id, status FROM outbox ORDER BY id") == [
        (ids[0], "r1", "sending"), (ids[1], "r1", "pending"), (ids[2], "r1", "pending"),
        (ids[3], "r2", "pending")]
    assert committed(path, "SELECT message_id, status FROM inbound_journal") == [("m1", "done")]
    assert committed(path, "SELECT count(*) FROM session_log") == [(logged,)]


async def test_a_message_refused_by_a_full_disk_is_journaled_when_sent_again(disk):
    async with SQLiteStore.at(disk.path / "state.db") as store:
        await store.journal_inbound(message("m0"))
        disk.fill()
        refused = None
        for number in range(1, 500):  # (one may fit the WAL's free space)
            big = message(f"m{number}", chat_id="c" * 4000)
            try:
                await store.journal_inbound(big)
            except StoreError:
                refused = big
                break
        assert refused is not None, "the full disk never refused a commit"
        disk.free()
        # Its platform sends it again: journaled now, not taken for a duplicate of an
        # entry half-written before.
        assert await store.journal_inbound(refused) is not None


@pytest.mark.slow
async def test_a_gateway_whose_disk_fills_while_it_runs_loses_no_reply_and_keeps_order(disk):
    chats = [f"chat-{number}" for number in range(3)]
    refusals = 0
    async with KernelHarness(disk.path, config={"queue": {"mode": "followup"}}) as h:
        health, store = h.kernel.health, h.kernel.store

        async def platform(chat: str, count: int, first: int = 0, *,
                           fill_after: int | None = None) -> None:
            """Sends a chat's messages in order, each again while it is refused (a
            platform does on a 5xx, a receive loop on its next poll)."""
            nonlocal refusals
            for number in range(first, first + count):
                while True:
                    try:
                        await h.channel.receive(f"{chat} #{number}", chat_id=chat,
                                                message_id=f"{chat}-{number}")
                        break
                    except StoreError:
                        refusals += 1
                        # real time: a platform waits a while before it sends again
                        await anyio.sleep(0.05)
                if number == fill_after:
                    # Journaled, its turn not run yet: its reply meets the full disk.
                    disk.fill()
                await anyio.sleep(0.01)  # real time: paced, so the disk fills mid-flow

        async with anyio.create_task_group() as tg:
            for chat in chats:
                tg.start_soon(platform, chat, 5)
        await h.settle()
        sent_before = len(h.channel.sent)
        async with anyio.create_task_group() as tg:
            for chat in chats:
                tg.start_soon(functools.partial(platform, chat, 15, 5, fill_after=(
                    5 if chat == chats[0] else None)))
            await until(lambda: health.store.failing_since is not None)
            snapshot = await health.snapshot()
            assert not snapshot.ok and not snapshot.store.ok
            assert any("commits failing" in problem for problem in snapshot.problems)
            failures = health.store.failures
            await until(lambda: health.store.failures >= failures + 3)  # it lasts a while
            disk.free()
        await h.settle(timeout=20)
        snapshot = await health.snapshot()
        assert snapshot.store.ok and health.store.failing_since is None
        for chat in chats:  # each reply once, in the order the chat wrote
            assert h.channel.texts(chat) == [f"{chat} #{number}" for number in range(20)]
        assert len(h.channel.sent) > sent_before
        statuses = store._run("SELECT status, count(*) FROM outbox GROUP BY status").fetchall()
        assert statuses == [("sent", 60)]
        assert store._run("SELECT status, count(*) FROM inbound_journal GROUP BY status"
                          ).fetchall() == [("done", 60)]
        notes = store._run("SELECT text FROM session_log WHERE role = 'notification'"
                           ).fetchall()
        assert notes == []  # nothing was reported failed: nothing failed
        assert not h.kernel.accounts["memory:main"].runtime.recent_failures
    assert refusals > 0  # the disk did refuse messages meanwhile
