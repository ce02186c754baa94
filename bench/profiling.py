"""cProfile for the benchmarks' ``--profile``: where the CPU of one message goes.

Each benchmark enables one :class:`cProfile.Profile` around the chatkernel runs only (not
the floors, not the peers) and hands it here with the number of messages it answered.
"""

from __future__ import annotations

import cProfile
import io
import pstats


def report(profiler: cProfile.Profile, messages: int, *, path: str | None = None,
           top: int = 25) -> None:
    """Print the profile's top ``top`` functions by cumulative and by own time, and its
    calls per message (a coroutine counts one call per resumption); save it to ``path``
    (for ``python -m pstats`` or snakeviz) when given."""
    if path:
        profiler.dump_stats(path)
    stats = pstats.Stats(profiler, stream=(out := io.StringIO()))
    stats.strip_dirs()
    print(f"\n== cProfile of the chatkernel runs: {stats.total_calls:,} calls, "
          f"{stats.total_calls / max(messages, 1):,.0f} per message "
          f"({messages:,} messages){f'; saved to {path}' if path else ''} ==")
    for order in ("cumulative", "tottime"):
        out.seek(0)
        out.truncate()
        stats.sort_stats(order).print_stats(top)
        body = out.getvalue()
        # pstats' preamble (file, totals, "Ordered by") is printed once above.
        start = body.find("   ncalls")
        print(f"\n-- by {order} --")
        print(body[start:].rstrip() if start >= 0 else body.rstrip())


def append_top(profiler: cProfile.Profile, title: str, path: str, top: int) -> None:
    """Append the profile's top ``top`` functions by cumulative and by own time to
    ``path``, under ``title`` (the webhook echo benchmarks' ``--profile-out``)."""
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    out.write(f"==== {title}\n")
    for order in ("cumulative", "tottime"):
        out.write(f"---- by {order}\n")
        stats.sort_stats(order).print_stats(top)
    with open(path, "a", encoding="utf-8") as file:
        file.write(out.getvalue())
