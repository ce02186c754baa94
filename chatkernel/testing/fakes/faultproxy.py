"""An HTTP proxy on 127.0.0.1 in front of a fake platform, for network faults.

:class:`FaultProxy` forwards every request to its target and answers with the
target's answer, one request per connection (``Connection: close``, so a
client never holds an idle connection that a stop would cut). The faults:

- **an outage**: :meth:`FaultProxy.stop` closes the listening socket, so new
  connections are refused (the client fails before its request is written),
  while requests already accepted are answered; :meth:`FaultProxy.start`
  listens again on the same port. Connections the kernel had completed but
  not handed over yet are accepted before the socket closes: a stop never
  cuts a request that was already written.
- **a platform that answers it is down**: :meth:`FaultProxy.fail` answers every
  request with the status the test chose (502, 503, a 429 without
  ``Retry-After``...) without forwarding it, until :meth:`FaultProxy.recover`;
- **a platform that hangs**: :meth:`FaultProxy.hold` reads every request and
  answers none of them (the connection stays open, as to a hung server) until
  :meth:`FaultProxy.recover`, which forwards what was held (a client that gave
  up meanwhile never reads the answer, as with a slow platform);
- **jitter**: ``there`` and ``back`` (functions returning seconds) delay each
  request on its way to the target and its answer on the way back, as a real
  network's varying trips do. A platform counts a request when it arrives, so
  jitter moves the moments it counts away from the moments the client sent.
  ``keep_alive=True`` serves many requests per connection (for jitter alone).

A request whose connection the target drops without an answer (a fake's
``drop(after_processing=True)``: the platform took it, the answer is lost) loses the
client's connection too, as a plain network path would; a target that cannot be
reached at all is answered 502.

A websocket's upgrade request is passed on to the target and the connection tunnelled
both ways once it is open (refused while stopped, answered the :meth:`FaultProxy.fail`
status, held while held, as any request).

Requests must carry a ``Content-Length`` body (what aiohttp's client sends for
JSON and form bodies); ``Transfer-Encoding: chunked`` is answered 501.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from typing import Any

import aiohttp
import anyio

#: Request headers not passed on: the proxy's own connection handling.
_HOP_HEADERS = frozenset({"host", "connection", "content-length", "keep-alive",
                          "transfer-encoding", "proxy-connection"})
#: Answer headers not passed on: those, and the encoding the client undid reading it.
_ANSWER_DROPPED = _HOP_HEADERS | {"content-encoding"}


class FaultProxy:
    """``async with FaultProxy(platform.url) as proxy:`` — give clients ``proxy.url``."""

    def __init__(self, target: str, *, there: Callable[[], float] | None = None,
                 back: Callable[[], float] | None = None, keep_alive: bool = False) -> None:
        self.target = target.rstrip("/")
        self.there = there
        self.back = back
        #: Serve several requests per connection (for jitter alone: a stop does not
        #: close connections that are kept alive).
        self.keep_alive = keep_alive
        self.port = 0
        #: Requests forwarded and answered.
        self.forwarded = 0
        #: Requests answered with the :meth:`fail` status, and held right now.
        self.failed = 0
        self.held = 0
        self._fault: tuple[int, str, list[tuple[str, str]], bytes] | None = None
        self._hold: anyio.Event | None = None
        self._sock: socket.socket | None = None
        self._http: aiohttp.ClientSession | None = None
        self._tg: Any = None
        self._stack: contextlib.AsyncExitStack | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def listening(self) -> bool:
        return self._sock is not None

    async def __aenter__(self) -> "FaultProxy":
        # Whatever was entered is closed again if a later step fails.
        async with contextlib.AsyncExitStack() as stack:
            self._http = aiohttp.ClientSession()
            stack.push_async_callback(self._http.close)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._tg.cancel_scope.cancel)
            stack.callback(self.stop)
            self.start()
            self._stack = stack.pop_all()  # open until __aexit__
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    def start(self) -> None:
        """Listen (again) on the proxy's port (a free one the first time)."""
        if self._sock is not None:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(128)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self._sock = sock
        asyncio.get_running_loop().add_reader(sock.fileno(), self._accept)

    def stop(self) -> None:
        """Stop listening: connections are refused until :meth:`start`. Requests
        already accepted are still answered."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        asyncio.get_running_loop().remove_reader(sock.fileno())
        self._accept(sock)  # what the kernel completed already is served, not reset
        sock.close()

    def fail(self, status: int = 502, *, reason: str | None = None, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> None:
        """Answer every request ``status`` (with ``headers``, e.g. a ``Retry-After``),
        not forwarded, until :meth:`recover`. The default body is an HTML page, as a
        load balancer in front of a platform sends, and ``text/html`` its type unless
        ``headers`` name another (a platform's own JSON error: ``application/json``)."""
        from http import HTTPStatus

        reason = reason or HTTPStatus(status).phrase
        if body is None:
            body = f"<html><body><h1>{status} {reason}</h1></body></html>".encode()
        given = list((headers or {}).items())
        typed = any(name.lower() == "content-type" for name, _ in given)
        kept = ([] if typed else [("Content-Type", "text/html")]) + given
        self._fault = (status, reason, kept, body)

    def hold(self) -> None:
        """Take every request and answer none until :meth:`recover` (a hung platform)."""
        if self._hold is None:
            self._hold = anyio.Event()

    def recover(self) -> None:
        """End :meth:`fail` and :meth:`hold`: requests are forwarded again, the held
        ones first."""
        self._fault = None
        held, self._hold = self._hold, None
        if held is not None:
            held.set()

    def _accept(self, sock: socket.socket | None = None) -> None:
        sock = sock or self._sock
        while sock is not None:
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            conn.setblocking(False)
            self._tg.start_soon(self._serve, conn)

    async def _serve(self, conn: socket.socket) -> None:
        reader, writer = await asyncio.open_connection(sock=conn)
        try:
            while True:
                answer = await self._forward(reader)
                if isinstance(answer, bytes):  # a websocket's upgrade: tunnelled
                    await self._tunnel(answer, reader, writer)
                    break
                status, reason, headers, body = answer
                if self.back is not None:
                    await anyio.sleep(self.back())
                head = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(body)}",
                        f"Connection: {'keep-alive' if self.keep_alive else 'close'}"]
                head += [f"{name}: {value}" for name, value in headers]
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
                await writer.drain()
                if not self.keep_alive:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _forward(self, reader: asyncio.StreamReader
                       ) -> tuple[int, str, list[tuple[str, str]], bytes] | bytes:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        request_line, *lines = head.split("\r\n")
        method, path, _ = request_line.split(" ", 2)
        headers = [tuple(part.strip() for part in line.split(":", 1))
                   for line in lines if ":" in line]
        names = {name.lower(): value for name, value in headers}
        if "chunked" in names.get("transfer-encoding", "").lower():
            return 501, "Not Implemented", [], b"chunked request bodies are not supported"
        body = await reader.readexactly(int(names.get("content-length", "0")))
        if self.there is not None:
            await anyio.sleep(self.there())
        held = self._hold
        if held is not None:
            self.held += 1
            try:
                await held.wait()
            finally:
                self.held -= 1
        if self._fault is not None:
            self.failed += 1
            return self._fault
        if names.get("upgrade", "").lower() == "websocket":
            return head.encode("latin-1") + body  # the caller tunnels it to the target
        try:
            return await self._ask(method, path, headers, body)
        except aiohttp.ServerDisconnectedError:
            # The target took the request and dropped the connection (a fake's lost
            # answer): the client's is dropped too, as on a plain network path. A 502
            # instead would tell the client to send again what may have taken effect.
            raise ConnectionResetError("the target dropped the connection") from None
        except aiohttp.ClientError as exc:  # the target itself is gone
            return 502, "Bad Gateway", [], f"the proxy's target failed: {exc!r}".encode()

    async def _tunnel(self, upgrade: bytes, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        """A websocket's upgrade, passed to the target as it came, then its bytes both
        ways until either side closes (a stop does not cut a socket already open)."""
        from urllib.parse import urlsplit

        target = urlsplit(self.target)
        up_reader, up_writer = await asyncio.open_connection(target.hostname, target.port)
        up_writer.write(upgrade)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            tg.cancel_scope.cancel()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(pipe, reader, up_writer)
                tg.start_soon(pipe, up_reader, writer)
        finally:
            up_writer.close()

    async def _ask(self, method: str, path: str, headers: list[tuple[str, ...]],
                   body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        assert self._http is not None
        async with self._http.request(
                method, self.target + path, data=body,
                headers={name: value for name, value in headers
                         if name.lower() not in _HOP_HEADERS}) as response:
            answer = await response.read()
            kept = [(name, value) for name, value in response.headers.items()
                    if name.lower() not in _ANSWER_DROPPED]
            self.forwarded += 1
            return response.status, response.reason or "", kept, answer
