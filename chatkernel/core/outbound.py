"""Outbound: the responder that turns agent events into sends, and the sender.

Only final text is sent; tool activity and thinking never are. Errors and
system notes flush the pending text first and go out with a clear prefix.
The chunks of one reply go out strictly in order through one serialized
sender per session, while different sessions send concurrently.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from chatkernel.core.agents import AgentEvent
from chatkernel.core.chunking import chunk_text
from chatkernel.core.models import Account, OutboundPayload, Route, SendError, SendResult

if TYPE_CHECKING:
    from chatkernel.core.kernel import Kernel

log = logging.getLogger("chatkernel.outbound")

ERROR_PREFIX = "⚠️ "
SYSTEM_PREFIX = "ℹ️ "


async def await_maybe(value: Any) -> Any:
    """Hooks may answer with a value or an awaitable of one."""
    if inspect.isawaitable(value):
        return await value
    return value


class Outbound:
    """Sends payloads through the ``outbound_send`` hook, one session at a time."""

    def __init__(self, kernel: "Kernel") -> None:
        self._kernel = kernel
        self._locks: dict[str, anyio.Lock] = {}

    def lock(self, key: str) -> anyio.Lock:
        """The serialized sender of a session (or of a bare route)."""
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = anyio.Lock(fast_acquire=True)
        return lock

    async def send_payload(self, account: Account, route: Route,
                           payload: OutboundPayload) -> SendResult:
        """One payload through the hook; raises SendError on failure."""
        hook = self._kernel.pm.hook.outbound_send
        result = await await_maybe(hook(account=account, route=route, payload=payload))
        if result is None:
            raise SendError(f"no plugin sent the payload for {account.key}")
        metrics = self._kernel.metrics
        metrics.child(metrics.messages_out, account.channel_name, account.name).inc()
        return result

    async def send_text(self, account: Account, route: Route, text: str, *,
                        session_key: str | None = None, session_id: str = "",
                        fmt: str = "markdown") -> bool:
        """Chunk and send a text in order; failures are reported, never silent.

        Returns True when every chunk was sent.
        """
        limits = account.channel.limits if account.channel else None
        chunks = chunk_text(text, limits.text_limit, limits.text_unit) if limits else [text]
        key = session_key or f"{route.channel}:{route.account}:{route.chat_id}"
        async with self.lock(key):
            for index, chunk in enumerate(chunks, start=1):
                payload = OutboundPayload(text=chunk, chunk_index=index,
                                          chunk_count=len(chunks), format=fmt)  # type: ignore[arg-type]
                try:
                    await self.send_payload(account, route, payload)
                except Exception as exc:
                    await self.report_failure(account, key, session_id, index, len(chunks), exc)
                    return False
        return True

    async def report_failure(self, account: Account, session_key: str, session_id: str,
                             index: int, count: int, exc: BaseException) -> None:
        """Log, count and record a failed chunk; recording never triggers a send."""
        reason = str(exc) or type(exc).__name__
        detail = f"chunk {index}/{count}: {reason}"
        if index < count:
            detail += f" ({count - index} later chunk(s) not sent)"
        log.warning("delivery failed in %s: %s", session_key, detail)
        self._kernel.metrics.send_failures.labels(account.channel_name, account.name).inc()
        await self._kernel.store.append_log(session_key, session_id, "notification",
                                            f"delivery failed: {detail}",
                                            {"kind": "send_failure"})


class Responder:
    """Consumes one turn's agent events and sends what should be sent."""

    def __init__(self, outbound: Outbound, account: Account, session_key: str, session_id: str,
                 route: Callable[[], Awaitable[Route | None]],
                 on_sent: Callable[[str], Awaitable[None]] | None = None) -> None:
        self._outbound = outbound
        self._account = account
        self._key = session_key
        self._session_id = session_id
        self._route = route
        self._on_sent = on_sent
        self._pending: list[str] = []
        self.sent_texts: list[str] = []

    async def handle(self, event: AgentEvent) -> None:
        if event.kind == "text":
            if event.final and event.text.strip():
                self._pending.append(event.text)
        elif event.kind == "error":
            await self.flush()
            await self._send(ERROR_PREFIX + event.text, fmt="plain")
        elif event.kind == "system":
            await self.flush()
            await self._send(SYSTEM_PREFIX + event.text, fmt="plain")
        # "tool" and "thinking" are never sent.

    async def flush(self) -> None:
        pending, self._pending = self._pending, []
        for text in pending:
            await self._send(text)

    async def _send(self, text: str, fmt: str = "markdown") -> None:
        route = await self._route()  # read at send time: never a stale destination
        if route is None:
            log.warning("no route for session %s: reply not sent", self._key)
            await self._outbound.report_failure(self._account, self._key, self._session_id,
                                                1, 1, SendError("no reply route"))
            return
        if await self._outbound.send_text(self._account, route, text, session_key=self._key,
                                          session_id=self._session_id, fmt=fmt):
            self.sent_texts.append(text)
            if self._on_sent is not None:
                await self._on_sent(text)
