"""cProfile for the benchmarks' ``--profile``: where the CPU of one message goes.

Each benchmark enables one :class:`cProfile.Profile` around the chatkernel runs only (not
the floors, not the peers) and hands it here with the number of messages it answered.

The webhook benchmarks can count calls with yappi instead (``--profile-with yappi``;
``pip install yappi``, a measuring tool, not a dependency): cProfile's timings are
distorted by its own cost per call and it attributes coroutines loosely, while yappi's
call counts are exact, and those are what compare a contender with a floor
(bench/README.md, "Longer series, and where the rest goes").
"""

from __future__ import annotations

import collections
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


class YappiCalls:
    """yappi's call counts (its CPU clock) between :meth:`enable` and :meth:`disable`,
    in the shape of a :class:`cProfile.Profile` for the benchmarks."""

    def __init__(self) -> None:
        try:
            import yappi
        except ImportError:
            raise SystemExit("--profile-with yappi needs yappi: pip install yappi") from None
        self._yappi = yappi

    def enable(self) -> None:
        self._yappi.set_clock_type("cpu")
        self._yappi.clear_stats()
        self._yappi.start(builtins=False)

    def disable(self) -> None:
        self._yappi.stop()

    def lines(self, messages: int, top: int) -> list[str]:
        """Calls a message by where the function lives (a package, or chatkernel's
        subsystem), then the ``top`` functions called most."""
        stats = [(s.ncall, s.name, s.module) for s in self._yappi.get_func_stats()]
        groups: collections.Counter[str] = collections.Counter()
        for calls, _, module in stats:
            groups[_group(module)] += calls
        per = max(messages, 1)
        out = [f"{sum(groups.values()) / per:,.1f} Python calls a message ({messages:,} "
               "messages), by where they run:"]
        out += [f"  {calls / per:8.1f}  {group}" for group, calls in groups.most_common(30)]
        out.append(f"the {top} functions called most (calls a message):")
        out += [f"  {calls / per:8.2f}  {name}  ({_group(module)})"
                for calls, name, module in sorted(stats, key=lambda s: -s[0])[:top]]
        return out


def _group(module: str) -> str:
    """A function's file as a group: chatkernel's subsystem (``chatkernel/core/inbound``),
    a plugin's package, else the package or standard-library module it is in."""
    path = module.replace("\\", "/")
    if "/chatkernel/" in path:
        return "/".join(path[path.rfind("/chatkernel/") + 1:].split("/")[:3])
    if "/chatkernel_" in path:
        return path[path.rfind("/chatkernel_") + 1:].split("/")[0]
    if "site-packages/" in path:
        return path.split("site-packages/")[-1].split("/")[0].removesuffix(".py")
    if "/python3" in path:  # the standard library
        return path.split("/python3", 1)[1].split("/", 1)[-1].split("/")[0].removesuffix(".py")
    return path


def make_profiler(kind: str) -> cProfile.Profile | YappiCalls:
    """The profiler ``--profile-with`` names: ``cprofile`` or ``yappi``."""
    return YappiCalls() if kind == "yappi" else cProfile.Profile()


def append_top(profiler: cProfile.Profile | YappiCalls, title: str, path: str, top: int, *,
               messages: int = 0) -> None:
    """Append the profile's top ``top`` functions by cumulative and by own time to
    ``path``, under ``title`` (the webhook echo benchmarks' ``--profile-out``); for
    yappi, the calls a message by where they run and the functions called most."""
    if isinstance(profiler, YappiCalls):
        with open(path, "a", encoding="utf-8") as file:
            file.write(f"==== {title}\n" + "\n".join(profiler.lines(messages, top)) + "\n")
        return
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    out.write(f"==== {title}\n")
    for order in ("cumulative", "tottime"):
        out.write(f"---- by {order}\n")
        stats.sort_stats(order).print_stats(top)
    with open(path, "a", encoding="utf-8") as file:
        file.write(out.getvalue())
