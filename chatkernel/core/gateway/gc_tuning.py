"""Garbage-collector settings for a gateway under load.

CPython collects its youngest generation after every 700 net allocations of
container objects. A busy gateway allocates a few dozen per message, and with
a thousand chats in flight every collection walks the messages, sessions and
tasks still alive, then promotes them and walks them again in the older
generations; everything start-up built (modules, config models, plugin
registries, compiled schemas) is walked by every full collection although it
is never garbage. Measured with ``bench/pipeline.py``: 12-15 % of the
gateway's CPU went to the collector.

:func:`tune_for_serving` runs once the gateway has started: it collects once,
freezes what survives (the start-up heap leaves the collector's view for
good) and raises the young generation's threshold, so collections are ~10x
rarer. Memory is still freed at once by reference counting; only cycles wait
longer, and the older generations' thresholds are unchanged.

So the gateway must not make large cycles on its request paths: one that is
still alive at a young collection is promoted and then waits for a full one.
aiohttp makes one of every ``HTTPException`` a handler raises (its 413 for an
oversized body held the body's buffer, up to the size limit, each time);
:mod:`chatkernel.core.gateway.http_guard` answers those itself, so nothing of a
rejected request outlives its answer. ``tests/test_gateway_memory.py`` holds
a real gateway to that, with these settings on.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

#: Net container allocations between two collections of the young generation.
GEN0_THRESHOLD = 10_000


def tune_for_serving(gen0_threshold: int = GEN0_THRESHOLD) -> Callable[[], None]:
    """Freeze the start-up heap and collect less often; returns a function that
    restores the previous settings (for a gateway run inside a longer process)."""
    previous = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(max(gen0_threshold, previous[0]), *previous[1:])

    def restore() -> None:
        gc.set_threshold(*previous)
        gc.unfreeze()

    return restore
