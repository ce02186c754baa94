"""The collector settings a started gateway applies, and their undo."""

from __future__ import annotations

import gc

from chatkernel.core.gateway.gc_tuning import GEN0_THRESHOLD, tune_for_serving


def test_serving_settings_freeze_the_start_up_heap_and_collect_less_often() -> None:
    before = gc.get_threshold()
    restore = tune_for_serving()
    try:
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (max(GEN0_THRESHOLD, before[0]), *before[1:])
    finally:
        restore()
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_higher_threshold_already_set_is_kept() -> None:
    before = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD * 3, *before[1:])
    try:
        restore = tune_for_serving()
        assert gc.get_threshold()[0] == GEN0_THRESHOLD * 3
        restore()
    finally:
        gc.set_threshold(*before)

