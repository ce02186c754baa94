"""The gateway's HTTP listener: aiohttp's request handling, held up against idle clients.

aiohttp parses requests and runs the app; how connections are accepted and how
long they may sit is here, in :class:`GuardedSite` (an aiohttp site, started by
the gateway's runner like ``web.TCPSite``):

* **Header timeout** (``gateway.header_timeout``): a connection has that long to
  send a complete request head, counted from when it opens and from the first
  byte of each later request. A client that connects and says nothing, or
  trickles a head byte by byte, is closed.
* **Idle timeout** (``gateway.idle_timeout``): a kept-alive connection waiting for
  its next request is closed after that long (aiohttp's ``keepalive_timeout``).

  Both are a time kept on the connection and checked by the listener's sweep, every
  :data:`SWEEP_SECONDS` at most (a quarter of the shorter timeout, if less): a timer
  handle made and cancelled at each phase of every request cost more than the
  request's routing.
* **Connection cap** (``gateway.max_connections``): at most that many open at
  once, kept below the process's descriptor limit (which :func:`raise_nofile_limit`
  raises toward its hard limit at start), so the store, the platforms' clients and
  the agent always have descriptors. At the cap a new connection takes the place of
  the one that has waited longest without a request in progress; when every one is
  busy, the new one is closed.
* **Out of descriptors** (``EMFILE``, ``ENFILE``...), accepting pauses with backoff
  instead of failing in a loop.
* **Listen backlog** of :data:`LISTEN_BACKLOG`: a burst of connections waits in the
  kernel's queue until accepted, instead of overflowing aiohttp's default of 128,
  whose dropped handshakes the clients retry only a second later.
* **Quiet logs**: what many clients can cause at once (timeouts, connections
  refused at the cap, request heads over aiohttp's 8,190-byte limits, which get a
  400) is logged by :class:`RateLimitedLog`, one line with a count per interval,
  never a line or a traceback per connection.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

__all__ = ["ConnectionLimits", "GuardedSite", "RateLimitedLog", "connection_cap",
           "raise_nofile_limit", "track_requests"]

log = logging.getLogger("chatkernel.http")

#: Descriptors kept for everything but client connections: at least this many...
RESERVED_DESCRIPTORS = 128
#: ...and at least this share of the limit.
RESERVED_SHARE = 0.25
#: The cap when none is configured and descriptors would allow more.
DEFAULT_MAX_CONNECTIONS = 10_000
#: How long accepting pauses when descriptors run out: doubling from the first
#: to the last while they stay out.
ACCEPT_BACKOFF = (0.05, 1.0)
#: Connections accepted at most per readiness of the listening socket.
ACCEPT_BATCH = 64
#: How often, at most, the listener closes the connections whose header or idle
#: timeout has run out (see the module's docstring).
SWEEP_SECONDS = 1.0
#: Connections the listening socket queues before they are accepted (the system caps
#: it at net.core.somaxconn).
LISTEN_BACKLOG = 1024
LOG_INTERVAL = 10.0


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How long connections may take and how many may be open (see the module)."""

    header_timeout: float = 15.0
    idle_timeout: float = 60.0
    max_connections: int = DEFAULT_MAX_CONNECTIONS


# -- descriptors ------------------------------------------------------------------------


def raise_nofile_limit() -> int | None:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit where the system
    lets it; returns the soft limit in force (None: unlimited or unknown)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return None
    wanted = hard
    if hard == resource.RLIM_INFINITY:
        wanted = 1 << 20  # Linux refuses more than fs.nr_open (1,048,576 by default)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (OSError, ValueError):
            pass  # macOS refuses above kern.maxfilesperproc: keep the soft limit
    return None if soft == resource.RLIM_INFINITY else soft


def connection_cap(configured: int | None, descriptors: int | None) -> int:
    """The connection cap in force: the configured one (or the default), below what
    ``descriptors`` (the soft limit) leaves after the reserve."""
    cap = configured or DEFAULT_MAX_CONNECTIONS
    if descriptors is not None:
        reserve = max(RESERVED_DESCRIPTORS, int(descriptors * RESERVED_SHARE))
        allowed = max(1, descriptors - reserve)
        if cap > allowed:
            if configured:
                log.warning("gateway.max_connections = %d is more than the descriptor limit "
                            "(%d) allows with %d kept for the rest: capped at %d",
                            configured, descriptors, reserve, allowed)
            cap = allowed
    return cap


# -- logs ---------------------------------------------------------------------------------


class RateLimitedLog:
    """Log lines that many clients can cause at once: the first of a kind at once, the
    rest counted and told as one line at the end of the interval."""

    def __init__(self, logger: logging.Logger = log, interval: float = LOG_INTERVAL) -> None:
        self.logger, self.interval = logger, interval
        self._pending: dict[str, tuple[int, str, int]] = {}
        self._windows: set[str] = set()
        self._handles: dict[str, asyncio.TimerHandle] = {}
        #: Every occurrence by kind, since the start (for /status and tests).
        self.counts: dict[str, int] = {}

    def note(self, kind: str, message: str, level: int = logging.WARNING) -> None:
        """One occurrence of ``kind``; ``message`` says what happened, once."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if kind not in self._windows:
            self._windows.add(kind)
            self.logger.log(level, "%s", message)
            self._handles[kind] = asyncio.get_running_loop().call_later(
                self.interval, self._flush, kind)
            return
        count, _, _ = self._pending.get(kind, (0, message, level))
        self._pending[kind] = (count + 1, message, level)

    def _flush(self, kind: str) -> None:
        count, message, level = self._pending.pop(kind, (0, "", 0))
        if not count:
            self._windows.discard(kind)
            self._handles.pop(kind, None)
            return
        self.logger.log(level, "%s (%d time%s in the last %.0f s)", message, count,
                        "" if count == 1 else "s", self.interval)
        self._handles[kind] = asyncio.get_running_loop().call_later(
            self.interval, self._flush, kind)

    def close(self) -> None:
        """Tell what is pending now and stop the timers."""
        for kind, handle in list(self._handles.items()):
            handle.cancel()
            count, message, level = self._pending.pop(kind, (0, "", 0))
            if count:
                self.logger.log(level, "%s (%d more)", message, count)
        self._handles.clear()
        self._windows.clear()


# -- connections --------------------------------------------------------------------------


class GuardedHandler(web.RequestHandler):
    """aiohttp's handler for one connection, with the header and idle timeouts and the
    bookkeeping the :class:`Listener` needs (which connections wait, which are busy).

    One deadline at a time, in :attr:`deadline`: the head's (from connecting, and from
    the first byte of each later request), none while a request is in progress, the
    idle one once it is answered. The listener's sweep closes a connection past it
    (:meth:`expire`). aiohttp's own keep-alive timer is set past both, as a backstop."""

    def __init__(self, manager: web.Server, listener: Listener, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._listener = listener
        self._time = asyncio.get_running_loop().time
        #: When the phase's wait runs out (the loop's clock); None while busy.
        self.deadline: float | None = None
        self.phase = "head"  # head | busy | idle
        # The body of the request in progress: see connection_lost.
        self._body: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._listener.opened(self)
        self.deadline = self._time() + self._listener.limits.header_timeout

    def connection_lost(self, exc: BaseException | None) -> None:
        self.deadline = None
        self._listener.closed(self)
        super().connection_lost(exc)
        # A body its handler left unread (a refusal) is read to its end after the
        # answer, for up to lingering_time, so a client still sending sees the answer;
        # aiohttp does not end that when the client hangs up, which held the handler
        # (and a stopping gateway) that long. No more of it can come now.
        body, self._body = self._body, None
        if body is not None and not body.is_eof():
            body.feed_eof()

    def data_received(self, data: bytes) -> None:
        if self.phase == "idle":  # the first byte of the next request
            self.phase = "head"
            self.deadline = self._time() + self._listener.limits.header_timeout
        super().data_received(data)

    def request_started(self, request: web.BaseRequest) -> None:
        """The request's head is in: the app has it (called by :func:`track_requests`)."""
        self._body = request.content
        self.deadline = None
        self.phase = "busy"
        self._listener.busy(self)

    def log_access(self, request: Any, response: Any, time: float | None) -> None:
        super().log_access(request, response, time)
        self.phase = "idle"  # answered: waiting for the next request
        self.deadline = self._time() + self._listener.limits.idle_timeout
        self._listener.waiting(self)

    def log_exception(self, *args: Any, **kw: Any) -> None:
        exc = kw.get("exc_info")
        if isinstance(exc, HttpProcessingError):
            # A head over aiohttp's limits or not HTTP: the client's, answered 400 already.
            self._listener.log.note(
                "bad-head", "request heads refused as malformed or over the 8,190-byte "
                f"limit of a line or header: answered 400 ({type(exc).__name__})",
                logging.INFO)
            return
        super().log_exception(*args, **kw)

    def evict(self) -> None:
        """Close the connection to make room for a new one."""
        self.force_close()

    def expire(self) -> None:
        """Its deadline ran out (the listener's sweep): close it, saying why when it
        was still sending a request's head."""
        self.deadline = None
        if self.phase == "busy":
            return
        if self.phase == "head":
            self._listener.log.note(
                "header-timeout", "connections closed without a complete request head "
                f"within gateway.header_timeout ({self._listener.limits.header_timeout:g} s)",
                logging.INFO)
        self.force_close()  # an idle one quietly: that is what keep-alive ends with


@web.middleware
async def track_requests(request: web.Request, handler: Callable[..., Any]) -> Any:
    """Tell the connection its request's head is complete (ends its header timeout)."""
    protocol = request.protocol
    if isinstance(protocol, GuardedHandler):
        protocol.request_started(request)
    return await handler(request)


class Listener:
    """The accept loop of one listening socket, under the cap, with backoff when out of
    descriptors. Quacks like the ``asyncio.Server`` an aiohttp site keeps."""

    def __init__(self, sock: socket.socket, factory: Callable[[Listener], GuardedHandler],
                 limits: ConnectionLimits, rate_log: RateLimitedLog) -> None:
        self.sock, self.limits, self.log = sock, limits, rate_log
        self._factory = factory
        self._loop = asyncio.get_running_loop()
        #: Open connections that wait (no request in progress), longest waiting first.
        self._waiting: OrderedDict[GuardedHandler, None] = OrderedDict()
        self._busy: set[GuardedHandler] = set()
        self._starting = 0  # accepted, the transport not made yet
        self._tasks: set[asyncio.Task[Any]] = set()
        self._backoff = ACCEPT_BACKOFF[0]
        self._retry: asyncio.Handle | None = None
        self._sweep: asyncio.TimerHandle | None = None
        self._serving = False

    # asyncio.Server's part ------------------------------------------------------------

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self.sock,) if self.sock.fileno() >= 0 else ()

    def is_serving(self) -> bool:
        return self._serving

    def start(self) -> None:
        self.sock.setblocking(False)
        self._serving = True
        self._loop.add_reader(self.sock.fileno(), self._accept)
        self._sweep_later()

    def close(self) -> None:
        if self._serving:
            self._loop.remove_reader(self.sock.fileno())
        self._serving = False
        if self._retry is not None:
            self._retry.cancel()
        if self._sweep is not None:
            self._sweep.cancel()
        self.sock.close()
        self.log.close()

    async def wait_closed(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # the connections ------------------------------------------------------------------

    @property
    def open_count(self) -> int:
        return len(self._waiting) + len(self._busy) + self._starting

    @property
    def waiting_handlers(self) -> list[GuardedHandler]:
        """The open connections with no request in progress, longest waiting first."""
        return list(self._waiting)

    @property
    def busy_handlers(self) -> list[GuardedHandler]:
        """The open connections with a request in progress."""
        return list(self._busy)

    def opened(self, handler: GuardedHandler) -> None:
        self._waiting[handler] = None

    def waiting(self, handler: GuardedHandler) -> None:
        self._busy.discard(handler)
        self._waiting[handler] = None
        self._waiting.move_to_end(handler)

    def busy(self, handler: GuardedHandler) -> None:
        self._waiting.pop(handler, None)
        self._busy.add(handler)

    def closed(self, handler: GuardedHandler) -> None:
        self._waiting.pop(handler, None)
        self._busy.discard(handler)

    @property
    def sweep_interval(self) -> float:
        """How often the connections' deadlines are checked: :data:`SWEEP_SECONDS`, or
        a quarter of the shorter timeout when that is less."""
        limits = self.limits
        return min(SWEEP_SECONDS, limits.header_timeout / 4, limits.idle_timeout / 4)

    def _sweep_later(self) -> None:
        self._sweep = self._loop.call_later(self.sweep_interval, self._sweep_now)

    def _sweep_now(self) -> None:
        self.close_expired()
        if self._serving:
            self._sweep_later()

    def close_expired(self) -> None:
        """Close the waiting connections past their deadline (busy ones have none):
        what the sweep does every :attr:`sweep_interval`."""
        now = self._loop.time()
        for handler in [handler for handler in self._waiting
                        if handler.deadline is not None and handler.deadline <= now]:
            handler.expire()

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            if self._full() and not self._waiting and self._starting:
                # Those just accepted will wait for their heads in a moment, and may then
                # make room: accept again on the loop's next turn, not refuse now.
                self._loop.remove_reader(self.sock.fileno())
                self._retry = self._loop.call_soon(self._resume)
                return
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue  # that client gave up before it was accepted
                # Out of descriptors (EMFILE, ENFILE) or memory (ENOBUFS, ENOMEM), or
                # anything else: wait, then try again, never in a tight loop.
                self._pause(exc)
                return
            self._backoff = ACCEPT_BACKOFF[0]
            self._admit(conn)

    def _full(self) -> bool:
        return self.open_count >= self.limits.max_connections

    def _admit(self, conn: socket.socket) -> None:
        if self._full():
            victim = next(iter(self._waiting), None)
            if victim is None:
                conn.close()
                self.log.note("refused", "connections refused: all of gateway.max_connections "
                              f"({self.limits.max_connections}) have a request in progress")
                return
            self._waiting.pop(victim)
            victim.evict()
            self.log.note("evicted", "waiting connections closed to make room for new ones: "
                          f"gateway.max_connections ({self.limits.max_connections}) are open",
                          logging.INFO)
        conn.setblocking(False)
        self._starting += 1
        task = self._loop.create_task(self._connect(conn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(lambda: self._factory(self), sock=conn)
        except OSError:
            conn.close()  # the client left already
        finally:
            self._starting -= 1

    @property
    def paused(self) -> bool:
        """Whether accepting waits out a shortage of descriptors now."""
        return isinstance(self._retry, asyncio.TimerHandle) and not self._retry.cancelled()

    def _pause(self, exc: OSError) -> None:
        self._loop.remove_reader(self.sock.fileno())
        delay = self._backoff
        self._backoff = min(self._backoff * 2, ACCEPT_BACKOFF[1])
        self.log.note("accept", f"cannot accept connections: {exc.strerror or exc}; "
                      f"pausing accepts (the cap is {self.limits.max_connections} "
                      "connections: lower gateway.max_connections or raise ulimit -n)")
        self._retry = self._loop.call_later(delay, self._resume)

    def _resume(self) -> None:
        self._retry = None
        if self._serving:
            self._loop.add_reader(self.sock.fileno(), self._accept)


class GuardedSite(web.BaseSite):
    """An aiohttp site on ``host:port`` (or a bound ``sock``) served by a :class:`Listener`
    under ``limits``. ``handler_args`` are aiohttp's ``RequestHandler`` settings, the
    same the runner was given."""

    __slots__ = ("_handler_args", "_host", "_limits", "_listener", "_port", "_sock")

    def __init__(self, runner: web.BaseRunner, host: str | None = None, port: int = 0, *,
                 sock: socket.socket | None = None, limits: ConnectionLimits,
                 handler_args: dict[str, Any] | None = None,
                 backlog: int = LISTEN_BACKLOG) -> None:
        super().__init__(runner, backlog=backlog)
        self._host, self._port, self._sock = host, port, sock
        self._limits = limits
        self._handler_args = dict(handler_args or {})
        self._listener: Listener | None = None

    @property
    def name(self) -> str:
        host, port = self._host, self._port
        if self._listener is not None and self._listener.sockets:
            host, port = self._listener.sock.getsockname()[:2]
        return f"http://{f'[{host}]' if host and ':' in host else host}:{port}"

    @property
    def listener(self) -> Listener | None:
        return self._listener

    async def start(self) -> None:
        await super().start()
        sock = self._sock or _bind(self._host, self._port, self._backlog)
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        backstop = self._limits.header_timeout + self._limits.idle_timeout
        args = {"keepalive_timeout": backstop, **self._handler_args}
        listener = Listener(sock, lambda owner: GuardedHandler(server, owner, loop=loop, **args),
                            self._limits, RateLimitedLog())
        listener.start()
        self._listener = listener
        self._server = listener  # type: ignore[assignment]  # what the runner closes


def _bind(host: str | None, port: int, backlog: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (the first address the name resolves to)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock
