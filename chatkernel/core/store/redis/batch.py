"""Write batches of the Redis store (:mod:`chatkernel.core.store.redis`): the writes
every task makes during a turn of the event loop go to the server together.

A message's writes — its journal entry, its reply's outbox entry, the ``sending``
and ``sent`` marks, its log entries — would be a round trip each, and a round trip
costs the client more CPU (a connection taken from the pool, a command packed, a
reply parsed, a socket write and read, a wake-up) than the server spends running
the script. When many chats are busy at once, their writes come in the same loop
turns: queued and sent as one call of one script (``BATCH`` in
:mod:`chatkernel.core.store.redis.lua`) they share that cost, as SQLite's group
commit shares a commit.

How. A write is queued as a :class:`PendingWrite` and its caller waits on its own
future. The first write of a batch schedules the batch's sending for the next loop
turn, so every write made by any task meanwhile joins it; while a batch is on its
way the writes made meanwhile wait for it to come back and go as the next batch, so
under load batches grow instead of round trips multiplying, and batches reach the
server in the order they were made. At most :data:`MAX_BATCH` writes go at once (the
server runs a batch's script as a whole, other clients waiting meanwhile).

What each caller gets is its own: its result once the server has made its write, or
the error of its own write (a refused fence: ``LeaseLost``; a script error: a
``StoreError``); when the whole batch fails (the connection dies, the server does
not answer in time) every caller in it gets a ``StoreError``, and nothing is sent
again (see "No command is retried" in :mod:`chatkernel.core.store.redis`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from chatkernel.core.store.base import StoreError

__all__ = ["MAX_BATCH", "PendingWrite", "WriteBatches"]

log = logging.getLogger("chatkernel.store")

#: The most writes one batch sends; more wait for the next batch.
MAX_BATCH = 512


@dataclass(eq=False, slots=True)
class PendingWrite:
    """One caller's write, waiting for its batch."""

    #: The write's op in the batch script (:data:`chatkernel.core.store.redis.lua.BATCH`).
    op: str
    #: The operation, as error messages name it (``"outbox_mark"``).
    what: str
    #: The op's fields.
    args: list[Any]
    #: Set with the op's answer, or the write's error.
    future: asyncio.Future[Any] = field(repr=False)
    #: The fences the write is checked against, as they were when it was made (flat
    #: acct, lease name, token), or None.
    fences: list[str] | None = None

    def resolve(self, result: Any) -> None:
        if not self.future.done():  # a cancelled caller's future is done already
            self.future.set_result(result)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class WriteBatches:
    """The queue of writes not sent yet, and the task that sends them.

    ``send(batch)`` sends one batch and settles each write's future; a write it
    left unsettled (its bug) is failed rather than left waiting.
    """

    def __init__(self, send: Callable[[list[PendingWrite]], Awaitable[None]], *,
                 name: str) -> None:
        self._send = send
        self._name = name
        self._queue: list[PendingWrite] = []
        self._sending: list[PendingWrite] = []  # the batch on its way
        self._sender: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        """Writes queued and not sent yet."""
        return len(self._queue)

    def submit(self, op: str, what: str, args: list[Any], *,
               fences: list[str] | None = None) -> asyncio.Future[Any]:
        """Queue a write; the future is settled once its batch has been answered."""
        loop = asyncio.get_running_loop()
        write = PendingWrite(op, what, args, loop.create_future(), fences)
        self._queue.append(write)
        if self._sender is None:
            # A task's first step runs on the next loop turn: the writes of this turn
            # are queued by then.
            self._sender = loop.create_task(self._run(), name=f"{self._name} write batches")
        return write.future

    async def drain(self) -> None:
        """Wait until every write queued so far has been answered (or has failed); not
        for those queued meanwhile (under load the queue is never empty)."""
        waiting = [write.future for write in (*self._sending, *self._queue)]
        if waiting:
            # Shielded: a drain given up does not cancel the callers' writes.
            await asyncio.shield(asyncio.gather(*waiting, return_exceptions=True))

    async def _run(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                self._sending = batch
                try:
                    await self._send(batch)
                except BaseException as exc:
                    error = StoreError(f"{self._name}: a write batch failed: "
                                       f"{exc or type(exc).__name__}")
                    if not isinstance(exc, asyncio.CancelledError):
                        log.exception("%s: sending a write batch failed", self._name)
                    for write in batch:
                        write.fail(error)
                    if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt,
                                        SystemExit)):
                        for write in self._queue:
                            write.fail(error)
                        self._queue = []
                        raise
                for write in batch:
                    if not write.future.done():  # the error is made only for a bug's write
                        write.fail(StoreError(f"{self._name}: {write.what}: the write "
                                              "batch gave no answer for it"))
        finally:
            self._sending = []
            self._sender = None
