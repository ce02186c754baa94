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
