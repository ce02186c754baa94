"""The console's live stream: ``GET /api/events``, Server-Sent Events.

A page keeps one stream open. It gets ``changed`` with the topics whose state moved
(``overview``, ``deliveries``, ``pairing``, ``sessions``, ``logins``) and reads those
again, and ``log`` with each new log line. What a topic's state is comes from
:class:`Watch`: a digest of what the page shows (accounts' health, counts), taken at
most every :data:`LOOK_SECONDS` while a stream is open, and bumped at once by the
console's own actions; so a page shows a change within about a second, whichever
instance or command made it.

The stream says ``retry: 1000``: after a gateway restart the browser connects again
within a second; its ticket is used up by then, so the answer is 401 and the page
fetches a new ticket with its token and opens a new stream.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from aiohttp import web

    from chatkernel.console.logbuffer import LogBuffer

log = logging.getLogger("chatkernel.console")

TOPICS = ("overview", "deliveries", "pairing", "sessions", "logins")
LOOK_SECONDS = 0.5
KEEPALIVE_SECONDS = 15.0
#: Log lines a slow page may fall behind by before the oldest are dropped.
MAX_BACKLOG = 500


class Watch:
    """The digests of the topics (see the module docstring). ``look()`` takes them:
    ``{topic: any comparable value}``."""

    def __init__(self, look: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        self._look = look
        self._bumps = dict.fromkeys(TOPICS, 0)
        self._cached: dict[str, Any] | None = None
        self._cached_at = -1.0
        self.changed = anyio.Event()

    def bump(self, *topics: str) -> None:
        """Something the console did changed these topics: tell every stream now."""
        for topic in topics:
            self._bumps[topic] += 1
        self._cached = None
        self.changed.set()
        self.changed = anyio.Event()

    async def digests(self) -> dict[str, Any]:
        now = time.monotonic()
        if self._cached is None or now - self._cached_at >= LOOK_SECONDS:
            try:
                looked = await self._look()
            except Exception as exc:  # the store may be down: the page says so elsewhere
                log.debug("console: a look at the gateway's state failed: %s", exc)
                looked = {}
            self._cached = {topic: (self._bumps[topic], looked.get(topic)) for topic in TOPICS}
            self._cached_at = now
        return self._cached


def sse(event: str, data: Any, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def stream(request: "web.Request", *, watch: Watch, logs: "LogBuffer",
                 redact: Callable[[bytes], bytes], stopping: anyio.Event,
                 hello: dict[str, Any]) -> "web.StreamResponse":
    """Serve one page's stream until it goes or the gateway stops."""
    from aiohttp import web

    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-store"})
    backlog: deque[dict[str, Any]] = deque(maxlen=MAX_BACKLOG)
    woken = anyio.Event()

    def heard(line: dict[str, Any]) -> None:
        backlog.append(line)
        woken.set()

    logs.listeners.add(heard)
    try:
        await response.prepare(request)
        await response.write(b"retry: 1000\n\n" + sse("hello", hello))
        seen = await watch.digests()
        keepalive_at = time.monotonic() + KEEPALIVE_SECONDS
        while not stopping.is_set():
            bumped = watch.changed
            with anyio.move_on_after(LOOK_SECONDS):
                async with anyio.create_task_group() as tg:
                    async def wake(event: anyio.Event) -> None:
                        await event.wait()
                        tg.cancel_scope.cancel()

                    for event in (woken, bumped, stopping):
                        tg.start_soon(wake, event)
            if woken.is_set():
                woken = anyio.Event()
            out = b""
            while backlog:
                out += sse("log", backlog.popleft())
            now = await watch.digests()
            moved = [topic for topic in TOPICS if now[topic] != seen.get(topic)]
            seen = now
            if moved:
                out += sse("changed", {"topics": moved})
            if not out and time.monotonic() >= keepalive_at:
                out = b": keepalive\n\n"
            if out:
                await response.write(redact(out))
                keepalive_at = time.monotonic() + KEEPALIVE_SECONDS
    except ConnectionResetError:  # a page closed or reloaded: an everyday event
        log.debug("console: an event stream was closed by its page")
    finally:
        logs.listeners.discard(heard)
    return response
