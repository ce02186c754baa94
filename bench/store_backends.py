"""A message's store hot path on SQLite and on Redis, side by side.

    .venv/bin/python bench/store_backends.py [--count 5000] [--concurrency 1]

Each message takes the steps the gateway makes: ``journal_inbound``, then
``outbox_add`` of its reply (finishing the journal entry), the durable
``sending`` mark and the ``sent`` mark. ``--concurrency N`` runs N messages at
once (as N chats would). The Redis store runs against a ``redis-server`` this
script starts on 127.0.0.1 (AOF on, ``appendfsync everysec``, as the test
fixture runs it). Prints messages/s per backend, the round trips to Redis per
message, and the ratio of the two backends (the figure to compare between
machines; absolute rates depend on the machine and its load).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import anyio

from chatkernel.sdk.models import InboundMessage, OutboundPayload, Route
from chatkernel.core.store.base import OutboxEntry, Store
from chatkernel.core.store.redis import RedisStore
from chatkernel.core.store.sqlite import SQLiteStore
from chatkernel.testing.redis import RedisServer


def message(i: int) -> InboundMessage:
    return InboundMessage(channel="telegram", account="main", chat_id=f"chat-{i % 50}",
                          message_id=str(i), sender_id=f"user-{i % 200}",
                          text=f"message number {i} " * 4)


def reply(i: int) -> OutboxEntry:
    route = Route("telegram", "main", f"chat-{i % 50}", reply_to=str(i))
    return OutboxEntry(0, f"r{i}", f"telegram:main:chat-{i % 50}", "s1", "telegram", "main",
                       route, OutboundPayload(text=f"the answer to {i}"), "pending", None, 0.0)


async def hot_path(store: Store, count: int, concurrency: int) -> float:
    """Seconds for ``count`` messages, ``concurrency`` at a time."""
    limiter = anyio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with limiter:
            seq = await store.journal_inbound(message(i))
            (entry_id,) = await store.outbox_add([reply(i)], finish_journal=[seq])
            await store.outbox_mark(entry_id, "sending", durable=True)
            await store.outbox_mark(entry_id, "sent")

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(count):
            tg.start_soon(one, i)
    await store.flush()
    return time.perf_counter() - start


async def main(count: int, concurrency: int) -> None:
    from redis.asyncio.connection import AbstractConnection

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        async with SQLiteStore.at(Path(tmp) / "state.db") as sqlite:
            results["sqlite"] = await hot_path(sqlite, count, concurrency)
        with RedisServer(Path(tmp) / "redis") as server:
            sent = [0]
            send = AbstractConnection.send_packed_command

            async def counted(self, command, check_health=True):
                sent[0] += 1
                return await send(self, command, check_health)

            async with RedisStore.at(server.url, prefix="bench:") as redis:
                AbstractConnection.send_packed_command = counted
                try:
                    results["redis"] = await hot_path(redis, count, concurrency)
                finally:
                    AbstractConnection.send_packed_command = send
    for name, elapsed in results.items():
        print(f"{name:<7} {count:>7} messages, {concurrency} at once  "
              f"{count / elapsed:>9,.0f} msgs/s  ({elapsed / count * 1e6:,.0f} µs each)")
    print(f"redis round trips per message: {sent[0] / count:.2f}")
    print(f"redis / sqlite time per message: {results['redis'] / results['sqlite']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args()
    anyio.run(main, args.count, args.concurrency)
