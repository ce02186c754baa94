"""The channel kit's socket supervision: receive loops over a long-lived connection.

Some platforms push events over a socket the client keeps open (Slack's Socket
Mode websocket, which slack_sdk runs). The socket itself is the plugin's (its
:meth:`Socket.session`); what is the same everywhere is here, in :class:`Socket`:

- the session is started again when it ends or fails: at once after a session
  that was working (a platform asks clients to reconnect now and then), with
  backoff after one that failed or never heard anything;
- liveness comes from real traffic, not from the socket being open: the session
  calls :meth:`SocketLink.alive` for every frame it gets (events, hellos,
  pongs). A socket that stays open but silent for ``silent_after`` seconds is
  closed and opened again, and the account's health says so meanwhile — an open
  socket that delivers nothing is the failure users never see otherwise. So are
  sockets that open and close without a word, one after the other, for as long.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import aiohttp
import anyio

from chatkernel.sdk.http_client import PlatformError, transport_error
from chatkernel.sdk.receiving import Backoff
from chatkernel.sdk.receiving.transport import Transport

if TYPE_CHECKING:
    from chatkernel.sdk.channel import Deliver

__all__ = ["Socket", "SocketLink"]

log = logging.getLogger("chatkernel.channel")

#: A session that got traffic and lasted this long resets the backoff.
SETTLED_SECONDS = 60.0


class SocketLink:
    """What one socket session gets from the kit: report traffic, hand over events."""

    def __init__(self, transport: Transport, deliver: "Deliver") -> None:
        self.transport = transport
        self.channel = transport.channel
        self._deliver = deliver
        self._clock = transport.clock
        #: When the session started and last heard something, on the transport's clock
        #: (``clock.monotonic()``).
        self.started = self._clock.monotonic()
        self.last_traffic = self.started
        #: Frames seen in this session (alive() calls).
        self.frames = 0
        #: Set when the watchdog closed the session for silence.
        self.silent = False

    def alive(self) -> None:
        """The platform just said something on the socket (any frame counts)."""
        self.last_traffic = self._clock.monotonic()
        self.frames += 1
        context = self.transport.context
        context.report_alive()
        context.clear_problem()

    async def deliver(self, events: list[Any]) -> int:
        """Normalize and journal events that arrived; returns once they are durable
        (acknowledge them to the platform only after this returns)."""
        self.alive()
        return await self.transport.receive(self._deliver, events)


async def _watch(link: SocketLink, silent_after: float, scope: anyio.CancelScope) -> None:
    clock = link.transport.clock
    while True:
        quiet = clock.monotonic() - link.last_traffic
        if quiet >= silent_after:
            link.silent = True
            scope.cancel()
            return
        await clock.sleep(silent_after - quiet)


async def _run_session(session: Callable[[SocketLink], Awaitable[None]], link: SocketLink,
                       silent_after: float) -> PlatformError | None:
    """One session beside its watchdog; returns the failure it ended with, if any."""
    failed: list[BaseException] = []

    async def run(scope: anyio.CancelScope) -> None:
        try:
            await session(link)
        except Exception as exc:  # noqa: BLE001 - classified or re-raised below
            failed.append(exc)
        finally:
            scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, tg.cancel_scope)
        tg.start_soon(_watch, link, silent_after, tg.cancel_scope)
    if not failed:
        return None
    exc = failed[0]
    if isinstance(exc, PlatformError):
        return exc
    if isinstance(exc, (aiohttp.ClientError, OSError, TimeoutError)):
        return transport_error(exc, "connect")
    raise exc  # a bug in the session: the supervisor restarts the receive loop


class Socket(Transport):
    """A long-lived connection the platform pushes events over.

    Subclasses implement :meth:`session`: open the socket, call ``link.alive()``
    on every frame and ``await link.deliver(events)`` for events, and return when
    the socket closes. A :class:`PlatformError` (or an aiohttp/OS error) it raises
    is classified by :meth:`Channel.receive_trouble` like a failed poll. :meth:`run`
    runs sessions forever (until cancelled), reconnecting as the module says.
    """

    #: Seconds of silence on an open socket before it is closed and opened again.
    silent_after: float = 120.0

    async def session(self, link: SocketLink) -> None:
        """One socket session, until the socket closes."""
        raise NotImplementedError(f"{type(self).__name__} has no socket session")

    async def run(self, deliver: "Deliver") -> None:
        await self.identify()
        backoff = Backoff(*self.backoff)
        failures = 0
        key = self.channel.account.key
        heard = self.clock.monotonic()  # when the platform last said something
        while True:
            link = SocketLink(self, deliver)
            error = await _run_session(self.session, link, self.silent_after)
            now = self.clock.monotonic()
            lasted = now - link.started
            if link.silent or error is not None:
                heard = now  # reported below: the silence counts afresh
            elif link.frames:
                heard = link.last_traffic
            elif now - heard >= self.silent_after:
                # Sockets that open and close without a word, one after the other, are
                # as silent as one that stays open.
                link.silent = True
                heard = now
            if link.frames and lasted >= SETTLED_SECONDS:
                backoff.reset()
                failures = 0
            if error is not None:
                failures += 1
                await self.failed(error, backoff, failures, "the socket")
                continue
            if link.silent:
                reason = (f"the socket was open but silent for {self.silent_after:g}s; "
                          "reconnecting")
                log.warning("%s: %s", key, reason)
                self.context.report_problem(reason, restartable=True)
                failures += 1
                await self.clock.sleep(backoff.next())
                continue
            if link.frames:
                log.info("%s: the socket closed; reconnecting", key)
                await anyio.sleep(0)
            else:
                log.warning("%s: the socket closed before the platform said anything; "
                            "reconnecting", key)
                await self.clock.sleep(backoff.next())
