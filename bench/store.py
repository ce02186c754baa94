"""Throughput of the SQLite store's inbound journal.

    .venv/bin/python bench/store.py [--count 10000] [--synchronous NORMAL|FULL]

Journals ``count`` distinct messages one after the other (each call commits,
as in the gateway), then the same again as redeliveries (dedupe hits), then
walks every message through ``queued`` and ``done``. Prints messages/s.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import anyio

from chatkernel.sdk.models import InboundMessage, MediaRef
from chatkernel.core.store.sqlite import SQLiteStore


def message(i: int) -> InboundMessage:
    return InboundMessage(
        channel="telegram", account="main", chat_id=f"chat-{i % 50}", message_id=str(i),
        sender_id=f"user-{i % 200}", sender_name="Someone", text=f"message number {i} " * 4,
        is_group=bool(i % 3), media=[MediaRef("image", Path(f"/tmp/m/{i}.jpg"))] if i % 10 == 0
        else [], route_extra={"context_token": f"ctx-{i}"})


async def main(count: int, synchronous: str) -> None:
    messages = [message(i) for i in range(count)]
    with tempfile.TemporaryDirectory() as tmp:
        async with SQLiteStore.at(Path(tmp) / "state.db", synchronous=synchronous) as store:
            start = time.perf_counter()
            seqs = [await store.journal_inbound(m) for m in messages]
            elapsed = time.perf_counter() - start
            assert None not in seqs
            print(f"journal_inbound   {count:>7} new      {count / elapsed:>10,.0f} msgs/s"
                  f"  ({elapsed / count * 1e6:.1f} µs each, synchronous={synchronous})")

            start = time.perf_counter()
            dupes = [await store.journal_inbound(m) for m in messages]
            elapsed = time.perf_counter() - start
            assert set(dupes) == {None}
            print(f"journal_inbound   {count:>7} dupes    {count / elapsed:>10,.0f} msgs/s")

            start = time.perf_counter()
            for seq in seqs:
                await store.set_journal_status(seq, "queued")
                await store.set_journal_status(seq, "done")
            elapsed = time.perf_counter() - start
            print(f"queued+done       {count:>7}          {count / elapsed:>10,.0f} msgs/s")

            start = time.perf_counter()
            pruned = await store.prune_journal(time.time() + 1)
            elapsed = time.perf_counter() - start
            print(f"prune_journal     {pruned:>7} rows     {elapsed * 1000:>10,.1f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--synchronous", default="NORMAL", choices=["NORMAL", "FULL"])
    args = parser.parse_args()
    anyio.run(main, args.count, args.synchronous)
