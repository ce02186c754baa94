"""Instructions per message through the kernel pipeline, counted by callgrind.

The wall-clock rate of ``bench/pipeline.py`` moves by ±25 % on a shared machine;
an instruction count does not depend on what else the machine is doing. This
runs the same kernel pipeline (the in-memory channel, the echo agent, the
durable SQLite journal) under ``valgrind --tool=callgrind`` twice, with
``--small`` and ``--large`` messages per chat, and reports the difference
divided by the extra messages: start-up, imports and shutdown cancel out.

    .venv/bin/python bench/pipeline_instructions.py [--runs 3] [--chats 200]

valgrind runs a program ~50x slower, so the pipeline's wall-clock knobs (the
group-commit interval, the queue's turn slice, how long idle line tasks
linger) are stretched by the same factor in the measured process: commits then
carry as many messages as at full speed. Batching still follows the clock, so
runs of one build differ by a few per cent; compare medians of interleaved
runs. Needs valgrind (Debian's ``valgrind`` package).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SLOWDOWN = 50  # roughly how much slower a program runs under callgrind


def child(chats: int, per_chat: int) -> None:
    """The measured process: one kernel pipeline run, knobs stretched."""
    import logging

    import anyio

    import chatkernel.core.inbound.pipeline as inbound
    import chatkernel.core.outbound.outbox as outbox
    import chatkernel.core.inbound.queue as queue
    import chatkernel.core.store.sqlite.commit as sqlite

    sys.path.insert(0, str(Path(__file__).parent))
    import pipeline

    logging.disable(logging.WARNING)
    sqlite.COMMIT_INTERVAL *= SLOWDOWN
    queue.TURN_SLICE *= SLOWDOWN
    inbound.LINE_LINGER_SECONDS *= SLOWDOWN
    outbox.SENDER_LINGER_SECONDS *= SLOWDOWN
    with tempfile.TemporaryDirectory() as home:
        anyio.run(pipeline.kernel, chats, per_chat, Path(home) / "state")


def instructions(chats: int, per_chat: int) -> int:
    """Instructions callgrind counted for one child run."""
    result = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
         sys.executable, __file__, "--child", str(chats), str(per_chat)],
        capture_output=True, text=True, check=False, env={**os.environ, "PYTHONHASHSEED": "0"})
    found = re.search(r"Collected\s*:\s*(\d+)", result.stderr)
    if result.returncode != 0 or found is None:
        raise SystemExit(f"the callgrind run failed (exit {result.returncode}):\n"
                         f"{result.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="pairs of runs (default 3)")
    parser.add_argument("--chats", type=int, default=200)
    parser.add_argument("--small", type=int, default=2, help="messages per chat, short run")
    parser.add_argument("--large", type=int, default=8, help="messages per chat, long run")
    parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    if args.large <= args.small:
        raise SystemExit("--large must be more than --small")
    extra = args.chats * (args.large - args.small)
    print(f"instructions per message: {args.chats} chats, {args.large} against {args.small} "
          f"messages each, {args.runs} run(s)\n(Python {sys.version.split()[0]}, "
          f"{os.path.realpath(sys.executable)})")
    counts = []
    for run in range(args.runs):
        per_message = (instructions(args.chats, args.large)
                       - instructions(args.chats, args.small)) / extra
        counts.append(per_message)
        print(f"  run {run + 1}: {per_message / 1000:,.1f}k")
    print(f"median: {statistics.median(counts) / 1000:,.1f}k instructions a message")


if __name__ == "__main__":
    main()
