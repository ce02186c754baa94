"""The channel kit's pieces for websocket gateways: heartbeats and reconnects with jitter.

Some platforms push events over a websocket whose client keeps the connection alive
itself (Discord's gateway, and those modelled on it: QQ's bot gateway, Kook): the
server says how often to beat, the client beats, the server acknowledges each beat, and
a beat left unacknowledged means the connection is dead while it looks open (a
"zombie"). Whatever the platform, the same two pieces go wrong the same ways, so they
are written once here, on the account's clock (``context.clock``):

- :class:`Heartbeat` beats every ``interval``, the first after a random part of it (so
  that clients reconnecting together do not beat together), measures each
  acknowledgement's latency, and raises :class:`MissedHeartbeat` when a beat is due
  while the last one is still unacknowledged: the session closes the socket and
  resumes, rather than waiting for a silence watchdog;
- :class:`JitteredBackoff` is exponential backoff with "equal jitter": each delay is half
  the exponential step plus a random part of the other half, so a fleet of clients
  dropped at once by the platform does not come back in lockstep, and no delay is ever
  near zero (a reconnect loop is the failure users see: a bot online that hears nothing).

Both are driven by the session that owns the socket (a :class:`Socket` subclass's
``session``): the kit's socket supervision reopens the socket; these decide when.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

from chatkernel.sdk.clock import ChannelClock
from chatkernel.sdk.http_client import PlatformError
from chatkernel.sdk.receiving import Backoff

__all__ = ["Heartbeat", "JitteredBackoff", "MissedHeartbeat"]


class MissedHeartbeat(PlatformError):
    """A beat was due while the one before it was still unacknowledged: the connection
    is a zombie (open, but nothing gets through). A passing failure (``no_answer``):
    a session that lets it out is reconnected with backoff."""

    def __init__(self, interval: float) -> None:
        super().__init__(f"no heartbeat acknowledgement within {interval:g}s: the connection "
                         "is dead", kind="no_answer")
        self.interval = interval


class Heartbeat:
    """One connection's heartbeat, on ``clock``: ``await heartbeat.run(send_beat)`` in the
    session's task group, :meth:`ack` when the platform acknowledges a beat.

    ``interval`` is the platform's (seconds); the first beat comes after
    ``interval * random()`` (``first_jitter=False``: after a whole interval). Before each
    later beat, the one before must have been acknowledged, or :meth:`run` raises
    :class:`MissedHeartbeat`. :meth:`beat_now` answers a platform that asks for a beat at
    once (Discord's op 1). ``rng`` makes the jitter repeatable in a test.
    """

    def __init__(self, interval: float, clock: ChannelClock, *, first_jitter: bool = True,
                 rng: random.Random | None = None) -> None:
        if not interval > 0:
            raise ValueError(f"a heartbeat interval must be > 0 seconds, got {interval!r}")
        self.interval = float(interval)
        self.clock = clock
        rng = rng or random.Random()
        #: Seconds before the first beat: a random part of the interval.
        self.first_delay = self.interval * rng.random() if first_jitter else self.interval
        #: When the last beat left (``clock.monotonic()``), None before the first.
        self.sent_at: float | None = None
        #: Whether the last beat was acknowledged.
        self.acked = True
        #: Seconds between the last acknowledged beat and its acknowledgement.
        self.latency: float | None = None
        #: Beats sent, and acknowledgements received, on this connection.
        self.beats = 0
        self.acks = 0

    async def run(self, beat: Callable[[], Awaitable[None]]) -> None:
        """Beat until cancelled; raises :class:`MissedHeartbeat` on a zombie connection."""
        await self.clock.sleep(self.first_delay)
        while True:
            if not self.acked:
                raise MissedHeartbeat(self.interval)
            await self.beat_now(beat)
            await self.clock.sleep(self.interval)

    async def beat_now(self, beat: Callable[[], Awaitable[None]]) -> None:
        """Send one beat now (the platform asked for one, or it is due)."""
        self.sent_at = self.clock.monotonic()
        self.acked = False
        self.beats += 1
        await beat()

    def ack(self) -> None:
        """The platform acknowledged the last beat: it is alive, and this was the latency."""
        self.acks += 1
        if self.sent_at is not None and not self.acked:
            self.latency = max(0.0, self.clock.monotonic() - self.sent_at)
        self.acked = True


class JitteredBackoff(Backoff):
    """Exponential backoff with equal jitter: ``first`` seconds doubling up to ``cap``,
    each delay drawn between half of the step and the whole of it.

    :attr:`attempts` counts the delays handed out since the last :meth:`reset` (a
    session's health shows "reconnecting (n)" with it).
    """

    __slots__ = ("_rng", "attempts")

    def __init__(self, first: float = 1.0, cap: float = 60.0, *,
                 rng: random.Random | None = None) -> None:
        super().__init__(first, cap)
        self._rng = rng or random.Random()
        self.attempts = 0

    def next(self) -> float:
        step = super().next()
        self.attempts += 1
        return step / 2 + self._rng.random() * step / 2

    def reset(self) -> None:
        super().reset()
        self.attempts = 0
