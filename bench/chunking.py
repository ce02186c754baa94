"""Speed of the outbound chunker on a 1 MB reply.

    .venv/bin/python bench/chunking.py [--size 1000000] [--limit 4096] [--runs 7]

Chunks ``size`` characters of mixed text (prose with sentence ends, emoji
with skin tones, ZWJ families and flags, combining marks, CJK, and fenced code
blocks) at ``limit`` UTF-16 units, Telegram's measure, and reports the median
of ``runs`` timings next to the median of ``str.split()`` on the same text:
the ratio says how many whitespace splits of the whole text one chunking run
costs. Also times a few worst cases (no whitespace at all, one huge grapheme
cluster, a reply made of fence lines). Compare ratios, not milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from chatkernel.core.outbound.chunking import chunk_text

FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"


def mixed_text(size: int) -> str:
    para = ("Hello world, this is a sentence. Another one! And a question? "
            f"Emoji \U0001f44d\U0001f3fd {FAMILY} \U0001f1fa\U0001f1f8 caf\u00e9 e\u0301 "
            "日本語の文です。中文句子。\n")
    block = (para * 6 + "\n```python\n" + "def f(x):\n    return x * 2\n" * 20 + "```\n\n"
             + "A long paragraph without line breaks " * 40 + "\n\n")
    return (block * (size // len(block) + 1))[:size]


def median_time(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--limit", type=int, default=4096)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    text = mixed_text(args.size)
    chunks = chunk_text(text, args.limit, "utf16")
    split = median_time(text.split, args.runs)
    chunk = median_time(lambda: chunk_text(text, args.limit, "utf16"), args.runs)
    print(f"mixed text, {len(text):,} chars, limit {args.limit} utf16 -> {len(chunks)} chunks")
    print(f"  str.split    {split * 1e3:8.2f} ms")
    print(f"  chunk_text   {chunk * 1e3:8.2f} ms   ratio {chunk / split:.1f}x str.split")

    worst = {
        "one word, no whitespace": "x" * args.size,
        "one grapheme cluster": "a" + "\u0301" * (args.size - 1),
        "only fence lines": "```\n" * (args.size // 4),
        "only flags": "\U0001f1fa\U0001f1f8" * (args.size // 2),
    }
    print("worst cases (median, utf16):")
    for name, sample in worst.items():
        t = median_time(lambda: chunk_text(sample, args.limit, "utf16"), max(1, args.runs // 2))
        print(f"  {name:<26} {t * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
