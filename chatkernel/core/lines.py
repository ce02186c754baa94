"""Keyed lines: the items of one key are handled in order, one at a time, by one
task; different keys side by side.

The outbox sends each session's payloads this way, and the inbound pipeline
takes each chat's accepted messages through this way. When its line runs dry
a line's task lingers: a busy chat's next item usually follows soon, and a
task that waits costs less than a task started for every item. There is no
timer per wait: :meth:`Lines.reap_idle` (the kernel calls it every second)
ends the tasks that have lingered long enough.

A lingering task waits on a bare asyncio future: every message passes through
here twice, and ``anyio.Event()`` looks the running backend up on each
construction (the gateway runs on asyncio; see docs/ARCHITECTURE.md,
"Hot-path primitives").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from anyio.abc import TaskGroup

log = logging.getLogger("chatkernel.lines")

T = TypeVar("T")


class Lines(Generic[T]):
    """Ordered lines of work by key.

    ``handle(item)`` handles one item; an exception it raises is logged and
    the line goes on (a bug must not stall a key's later items). ``after(item)``,
    if given, runs once an item is done, before :meth:`wait_empty` can return.
    """

    def __init__(self, name: str, handle: Callable[[T], Awaitable[None]], *,
                 task_group: Callable[[], TaskGroup], linger: float,
                 after: Callable[[T], None] | None = None) -> None:
        self.name = name
        #: Seconds an idle line's task waits for more before :meth:`reap_idle` ends it.
        self.linger = linger
        self._handle = handle
        self._after = after
        self._task_group = task_group
        self._lines: dict[str, deque[T]] = {}
        self._wakers: dict[str, asyncio.Future[None]] = {}
        self._idle_since: dict[str, float] = {}
        self._count = 0
        self._empty = asyncio.Event()
        self._empty.set()

    def __len__(self) -> int:
        """Items waiting or being handled, over all keys."""
        return self._count

    def active(self, key: str) -> bool:
        """Whether ``key`` has a task (working or lingering)."""
        return key in self._lines

    def busy(self, key: str) -> bool:
        """Whether ``key`` has items waiting or being handled."""
        return bool(self._lines.get(key))

    def count(self, key: str) -> int:
        """Items of ``key`` waiting or being handled."""
        return len(self._lines.get(key, ()))

    def keys(self) -> list[str]:
        """The keys with items waiting or being handled."""
        return [key for key, line in self._lines.items() if line]

    def put(self, key: str, item: T, *, wake: bool = True) -> None:
        """Queue ``item`` behind ``key``'s earlier items.

        ``wake=False``: a lingering task is left asleep until :meth:`wake`, for an
        item that is not ready yet (a new or busy task still takes it in its turn).
        """
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = deque()
            self._task_group().start_soon(self._drain, key, line, name=f"{self.name} {key}")
        line.append(item)
        if self._count == 0:
            self._empty = asyncio.Event()
        self._count += 1
        if key in self._wakers:  # a lingering task: more work
            self._idle_since.pop(key, None)
            if wake:
                _wake(self._wakers.pop(key))

    def wake(self, key: str) -> None:
        """Wake ``key``'s task if it lingers (after a :meth:`put` with ``wake=False``)."""
        waker = self._wakers.pop(key, None)
        if waker is not None:
            _wake(waker)

    async def wait_empty(self) -> None:
        """Return once every item put so far was handled."""
        await self._empty.wait()

    def reap_idle(self, now: float | None = None) -> int:
        """End the tasks that lingered :attr:`linger` seconds with nothing to do;
        returns how many were told to."""
        now = time.monotonic() if now is None else now
        done = [key for key, since in self._idle_since.items() if now - since >= self.linger]
        for key in done:
            del self._idle_since[key]
            waker = self._wakers.pop(key, None)
            if waker is not None:
                _wake(waker)  # it wakes to an empty line and ends
        return len(done)

    async def _drain(self, key: str, line: deque[T]) -> None:
        loop = asyncio.get_running_loop()  # once a task: each call asks the OS its pid
        try:
            while True:
                while line:
                    item = line[0]
                    try:
                        await self._handle(item)
                    except Exception:
                        log.exception("%s %s: an item failed unexpectedly", self.name, key)
                    line.popleft()
                    self._count -= 1
                    if self._after is not None:
                        self._after(item)
                    if self._count == 0:
                        self._empty.set()
                waker = self._wakers[key] = loop.create_future()
                self._idle_since[key] = time.monotonic()
                await waker
                if not line:
                    return
        finally:
            # No await between the last look at the line and here.
            del self._lines[key]
            self._wakers.pop(key, None)
            self._idle_since.pop(key, None)


def _wake(waker: asyncio.Future[None]) -> None:
    if not waker.done():  # done: its task was cancelled while it lingered
        waker.set_result(None)
