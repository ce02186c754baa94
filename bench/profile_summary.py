"""Where a profiled process's time went, by library: the Redis client (redis-py), the
store, the HTTP client (aiohttp), the event loop, the rest of the kernel.

    .venv/bin/python bench/profile_summary.py /tmp/prof/*.prof [--top 15]

Reads cProfile files (``bench/scaleout.py --profile DIR`` writes one per gateway) and
prints each one's own time per group, then its functions with the most own time.
cProfile's own cost inflates every figure; compare the shares, not the seconds.
"""

from __future__ import annotations

import argparse
import collections
import pstats

#: (group, what a profiled function's file name contains), first match wins.
GROUPS = [
    ("redis-py (command packing, reply parsing, connections)", "site-packages/redis/"),
    ("chatkernel store", "chatkernel/core/store/"),
    ("chatkernel gateway (cluster: leases, inboxes)", "chatkernel/core/gateway/"),
    ("aiohttp (platform requests)", "site-packages/aiohttp/"),
    ("anyio", "site-packages/anyio/"),
    ("asyncio event loop", "/asyncio/"),
    ("chatkernel kernel (pipeline, turns, outbox...)", "chatkernel/"),
    ("imports", "importlib"),
]


def group(file: str, function: str) -> str:
    for name, part in GROUPS:
        if part in file:
            return name
    return f"builtin {function}" if file == "~" else "other (stdlib: json, ssl, ...)"


def summary(path: str, top: int) -> None:
    stats = pstats.Stats(path)
    times: collections.Counter[str] = collections.Counter()
    for (file, _, function), (_, _, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        times[group(file, function)] += own
    total = sum(times.values())
    for name, seconds in list(times.items()):  # builtins under 2% each go together
        if name.startswith("builtin ") and seconds < total * 0.02:
            del times[name]
            times["other builtins"] += seconds
    print(f"{path}: {total:.2f} s of own time")
    for name, seconds in times.most_common():
        print(f"  {name:<58} {seconds:7.2f} s {seconds / total:6.1%}")
    if top:
        stats.sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--top", type=int, default=0, help="also the N functions with the "
                        "most own time")
    args = parser.parse_args()
    for file in args.files:
        summary(file, args.top)
