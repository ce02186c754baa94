"""What the kernel sends to a session leaves in the order its causes arrived.

Two paths produce output for a chat. A message for the agent joins its session's
lane and is answered by a turn, later, from a queue worker; a slash command is
answered at once, in the chat's inbound line. The outbox sends a session's
payloads in the order they were queued, so a command answer queued while an
earlier message still waited for its turn went out first: a ``/status`` answer
before the echo of the message sent before it.

:class:`OutputOrder` puts the inline path in its place. Every message that
joins a lane is *open* (by its journal seq, which is arrival order) until its
turn has ended or it was dropped; an answer sent outside a turn waits until no
message that arrived before its cause is open, then goes to the outbox in
arrival order with the other waiting answers. A turn's own output needs no
waiting: one turn runs at a time per session, in arrival order, so whatever a
running turn sends follows everything before it.

The busy hint ("still working on your previous message") speaks for the
running turn, not for the message that triggered it, so it takes that turn's
place and goes out at once (held behind that turn's reply it would say
something false).

Nothing here touches the store: it holds callables, and a restart replays the
journal, which rebuilds the order.
"""

from __future__ import annotations

import bisect
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable

log = logging.getLogger("chatkernel.order")

Send = Callable[[], Awaitable[None]]


class OutputOrder:
    """Open messages and held answers, per session key."""

    def __init__(self) -> None:
        self._open: dict[str, list[int]] = {}
        self._held: dict[str, deque[tuple[int, Send]]] = {}
        self._releasing: set[str] = set()

    def opened(self, key: str, seq: int) -> None:
        """A message (journal ``seq``) joined ``key``'s lane: its answer is to come."""
        bisect.insort(self._open.setdefault(key, []), seq)

    def close(self, key: str, seqs: Iterable[int | None]) -> bool:
        """These messages are answered (their turn ended) or will never be (dropped).
        True when answers wait in ``key``: :meth:`release` sends those that may go.
        (Synchronous: a turn that held nothing back costs no wait.)"""
        open_seqs = self._open.get(key)
        if open_seqs is not None:
            for seq in seqs:
                if seq is None:
                    continue
                index = bisect.bisect_left(open_seqs, seq)
                if index < len(open_seqs) and open_seqs[index] == seq:
                    del open_seqs[index]
            if not open_seqs:
                del self._open[key]
        return key in self._held

    async def closed(self, key: str, seqs: Iterable[int | None]) -> None:
        """:meth:`close`, then :meth:`release`."""
        if self.close(key, seqs):
            await self.release(key)

    async def send(self, key: str, seq: int | None, send: Send) -> None:
        """Run ``send`` (queue an answer to the message ``seq``) once every message of
        ``key`` that arrived before it is closed: at once when none is open."""
        if seq is None or (key not in self._held and key not in self._releasing
                           and not self._earlier_open(key, seq)):
            await send()
            return
        self._held.setdefault(key, deque()).append((seq, send))

    def held(self, key: str) -> int:
        """Answers waiting in ``key`` (for tests and the status of a session)."""
        return len(self._held.get(key, ()))

    def _earlier_open(self, key: str, seq: int) -> bool:
        open_seqs = self._open.get(key)
        return bool(open_seqs) and open_seqs[0] < seq

    async def release(self, key: str) -> None:
        """Send the answers of ``key`` no open message is before, in order."""
        if key in self._releasing:  # the task releasing them sees the change too
            return
        held = self._held.get(key)
        if not held:
            return
        self._releasing.add(key)
        try:
            while held and not self._earlier_open(key, held[0][0]):
                _, send = held.popleft()
                try:
                    await send()
                except Exception:
                    log.exception("session %s: a held answer could not be queued", key)
        finally:
            self._releasing.discard(key)
            if not held:
                self._held.pop(key, None)
