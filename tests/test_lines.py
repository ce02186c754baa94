"""Keyed lines (chatkernel.core.lines): order per key, keys side by side, lingering tasks."""

from __future__ import annotations

import time

import anyio
import pytest

from chatkernel.core.lines import Lines

pytestmark = pytest.mark.anyio


async def test_each_keys_items_in_order_keys_side_by_side_and_failures_do_not_stall():
    handled: list[tuple[str, int]] = []
    after: list[int] = []
    gate = anyio.Event()

    async def handle(item):
        key, n = item
        if key == "slow" and n == 0:
            await gate.wait()
        if n == 2:
            raise RuntimeError("a bug in one item")
        handled.append(item)

    async with anyio.create_task_group() as tg:
        lines = Lines("test", handle, task_group=lambda: tg, linger=60,
                      after=lambda item: after.append(item[1]))
        for n in range(4):
            lines.put("slow", ("slow", n))
            lines.put("fast", ("fast", n))
        with anyio.fail_after(5):
            while len(lines) > 4:  # fast's four go through while slow waits
                await anyio.sleep(0)
        assert [n for key, n in handled if key == "fast"] == [0, 1, 3]
        assert not any(key == "slow" for key, _ in handled)
        gate.set()
        with anyio.fail_after(5):
            await lines.wait_empty()
        assert [n for key, n in handled if key == "slow"] == [0, 1, 3]
        assert sorted(after) == [0, 0, 1, 1, 2, 2, 3, 3]  # failed items are done too
        tg.cancel_scope.cancel()


def recording_lines(tg, linger: float = 2.0) -> tuple[Lines, list[int]]:
    """Lines whose handler records each item, and the record."""
    handled: list[int] = []

    async def handle(item):
        handled.append(item)

    return Lines("test", handle, task_group=lambda: tg, linger=linger), handled


async def test_an_idle_line_lingers_until_reaped_and_a_new_item_starts_it_again():
    async with anyio.create_task_group() as tg:
        lines, handled = recording_lines(tg)
        lines.put("k", 1)
        await lines.wait_empty()
        await anyio.sleep(0)
        assert lines.active("k")  # lingering
        assert lines.reap_idle(time.monotonic()) == 0
        lines.put("k", 2)  # the lingering task takes it
        await lines.wait_empty()
        assert lines.reap_idle(time.monotonic() + 2.0) == 1
        with anyio.fail_after(5):
            while lines.active("k"):
                await anyio.sleep(0)
        lines.put("k", 3)
        await lines.wait_empty()
        assert handled == [1, 2, 3]
        tg.cancel_scope.cancel()


async def test_an_item_put_without_waking_waits_for_wake_and_is_never_reaped_meanwhile():
    async with anyio.create_task_group() as tg:
        lines, handled = recording_lines(tg)
        lines.put("k", 1)
        await lines.wait_empty()
        lines.put("k", 2, wake=False)  # the lingering task stays asleep
        for _ in range(10):
            await anyio.sleep(0)
        assert handled == [1] and len(lines) == 1
        assert lines.reap_idle(time.monotonic() + 60) == 0  # it has work: not idle
        lines.wake("k")
        with anyio.fail_after(5):
            await lines.wait_empty()
        assert handled == [1, 2]
        lines.wake("k")  # lingering again: waking it with nothing to do ends nothing
        lines.put("new", 3, wake=False)  # a new line's task takes its item regardless
        with anyio.fail_after(5):
            await lines.wait_empty()
        assert handled == [1, 2, 3]
        tg.cancel_scope.cancel()
