"""Messages through the whole kernel pipeline, next to a bare anyio echo loop.

Each of ``--chats`` concurrent chats sends ``--per-chat`` messages one after
another, waiting for each reply (a closed loop, like people typing). The
kernel run goes deliver → journal (SQLite, durable) → accept → session →
route → queue lane → echo agent → responder → in-memory channel. The floor
is a bare anyio echo loop over the same in-memory channel in the same run.

    .venv/bin/python bench/pipeline.py [--chats 1000] [--per-chat 10]
    .venv/bin/python bench/pipeline.py --rounds 1 --profile      # where the CPU goes

Prints throughput and p50/p99 latency of each, and the ratio to the floor. ``--profile``
runs the kernel under cProfile (one more run, after the timed ones) and prints its top
functions and its calls per message.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from chatkernel.core.gateway.gc_tuning import tune_for_serving
from chatkernel.sdk.models import OutboundPayload, Route, SendResult
from chatkernel.testing.memory import KernelHarness, MemoryChannel


class Waiters:
    """Per-chat events: a reply to chat X wakes the task typing in chat X."""

    def __init__(self) -> None:
        self.events: dict[str, anyio.Event] = {}

    def arm(self, chat_id: str) -> anyio.Event:
        event = self.events[chat_id] = anyio.Event()
        return event

    def reply(self, chat_id: str) -> None:
        event = self.events.pop(chat_id, None)
        if event is not None:
            event.set()


async def closed_loop(chats: int, per_chat: int, send,
                      profiler: cProfile.Profile | None = None
                      ) -> tuple[float, float, list[float]]:
    """Run every chat's loop; returns (elapsed seconds, CPU seconds, latencies)."""
    latencies: list[float] = []

    async def chat(index: int) -> None:
        chat_id = f"chat-{index}"
        for n in range(per_chat):
            started = time.perf_counter()
            await send(chat_id, f"message {n} from {chat_id}")
            latencies.append(time.perf_counter() - started)

    started, cpu_started = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    try:
        async with anyio.create_task_group() as tg:
            for index in range(chats):
                tg.start_soon(chat, index)
    finally:
        if profiler is not None:
            profiler.disable()
    return time.perf_counter() - started, time.process_time() - cpu_started, latencies


async def floor(chats: int, per_chat: int) -> tuple[float, float, list[float]]:
    """A bare anyio echo loop: a stream in, one echo task, replies to waiting chats."""
    waiters = Waiters()
    sent: list[str] = []
    send_stream, receive_stream = anyio.create_memory_object_stream[tuple[str, str]](
        max_buffer_size=chats)

    async def echo() -> None:
        async with receive_stream:
            async for chat_id, text in receive_stream:
                sent.append(text)
                waiters.reply(chat_id)

    async def send(chat_id: str, text: str) -> None:
        event = waiters.arm(chat_id)
        await send_stream.send((chat_id, text))
        await event.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(echo)
        result = await closed_loop(chats, per_chat, send)
        await send_stream.aclose()
    assert len(sent) == chats * per_chat
    return result


async def kernel(chats: int, per_chat: int, home: Path, gc_tuning: bool = True,
                 profiler: cProfile.Profile | None = None
                 ) -> tuple[float, float, list[float]]:
    waiters = Waiters()
    harness = KernelHarness(home, config={"queue": {"max_concurrent": 64}})
    async with harness as h:
        # The collector settings `chatkernel run` applies once started.
        restore_gc = tune_for_serving() if gc_tuning else (lambda: None)
        channel: MemoryChannel = h.channel
        original_send = channel.send

        async def send_and_wake(route: Route, payload: OutboundPayload) -> SendResult:
            result = await original_send(route, payload)
            waiters.reply(route.chat_id)
            return result

        channel.send = send_and_wake  # type: ignore[method-assign]
        channel.sent = _Counter()  # type: ignore[assignment]

        async def send(chat_id: str, text: str) -> None:
            event = waiters.arm(chat_id)
            await channel.receive(text, chat_id=chat_id, sender_id=chat_id)
            await event.wait()

        try:
            result = await closed_loop(chats, per_chat, send, profiler)
        finally:
            restore_gc()
        assert len(channel.sent) == chats * per_chat, len(channel.sent)
        assert await h.kernel.store.unfinished_inbound() == []
    return result


class _Counter(list):
    """Counts sends without keeping every payload (memory stays flat)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def append(self, item) -> None:  # type: ignore[override]
        self.count += 1

    def __len__(self) -> int:
        return self.count


def summary(name: str, runs: list[tuple[float, float, list[float]]]) -> dict[str, float]:
    """Medians over the rounds: rate, p50/p99 latency and CPU per message."""
    rows = []
    for elapsed, cpu, latencies in runs:
        ordered = sorted(latencies)
        rows.append({"rate": len(latencies) / elapsed,
                     "p50": statistics.median(ordered) * 1000,
                     "p99": ordered[int(len(ordered) * 0.99) - 1] * 1000,
                     "cpu": cpu / len(latencies) * 1e6})
    return {"name": name, **{field: statistics.median(row[field] for row in rows)
                             for field in ("rate", "p50", "p99", "cpu")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=1000)
    parser.add_argument("--per-chat", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3,
                        help="runs of each, alternating; medians are shown (default 3)")
    parser.add_argument("--no-gc-tuning", action="store_true",
                        help="run the kernel with CPython's default collector settings "
                             "instead of those `chatkernel run` applies")
    parser.add_argument("--profile", nargs="?", const="", metavar="FILE",
                        help="after the timed rounds, one kernel run under cProfile: its top "
                             "functions and calls per message (and the profile saved to FILE)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    total = args.chats * args.per_chat

    floors, kernels = [], []
    with tempfile.TemporaryDirectory() as home:
        for round_ in range(args.rounds):
            floors.append(anyio.run(floor, args.chats, args.per_chat))
            kernels.append(anyio.run(kernel, args.chats, args.per_chat,
                                     Path(home) / f"run-{round_}", not args.no_gc_tuning))
    rows = [summary("bare anyio echo loop (floor)", floors),
            summary("kernel pipeline, SQLite journal", kernels)]

    print(f"{total} messages, {args.chats} concurrent chats, {args.per_chat} each, "
          f"median of {args.rounds} round(s)\n(Python {sys.version.split()[0]}, "
          f"{os.path.realpath(sys.executable)})\n")
    print(f"{'':34}{'msgs/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'floor/x':>10}"
          f"{'cpu us/msg':>12}")
    for row in rows:
        print(f"{row['name']:34}{row['rate']:10.0f}{row['p50']:10.2f}{row['p99']:10.2f}"
              f"{rows[0]['rate'] / row['rate']:10.1f}{row['cpu']:12.0f}")
    verdict = "met" if rows[1]["rate"] >= 5000 else "MISSED"
    print(f"\ntarget: >= 5,000 msgs/s through the kernel with the durable journal: {verdict}")
    if args.profile is not None:
        from profiling import report as profile_report

        profiler = cProfile.Profile()
        with tempfile.TemporaryDirectory() as home:
            anyio.run(kernel, args.chats, args.per_chat, Path(home) / "profiled",
                      not args.no_gc_tuning, profiler)
        profile_report(profiler, total, path=args.profile or None)


if __name__ == "__main__":
    main()
