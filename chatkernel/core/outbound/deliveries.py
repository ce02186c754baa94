"""What became of every payload, told to whoever has to know.

The outbox calls :meth:`Deliveries.settled` once for each payload, when its status
is final: ``sent``, ``failed`` (the platform refused it, the send policy blocked it,
an earlier part of its reply failed, its account was not running, the state database
could not commit it) or ``unknown`` (a
timeout after the request went out, or in flight when the gateway stopped). From
there, and only there, the outcome reaches:

- the account's health (``AccountRuntime.send_failed`` / ``send_ok``): a send that
  failed because of the account itself (:func:`is_account_failure`: no answer, the
  platform down, credentials refused) turns it red at once, the next send the platform
  answers turns it green again; a refusal of one chat's message never does;
- the account's recent failures, which ``chatkernel status`` and ``/status`` list;
- the ``chatkernel_undelivered`` metric, by outcome;
- a ``chatkernel send`` waiting for its reply (:meth:`Deliveries.wait`).

Everything here is in memory and synchronous: it runs inline in the sender.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import anyio

from chatkernel.sdk.models import OutboundPayload, SendError

if TYPE_CHECKING:
    from chatkernel.sdk.channel import Channel
    from chatkernel.core.health.metrics import Metrics
    from chatkernel.core.store.base import OutboxEntry, Store
    from chatkernel.sdk.models import Account

#: Why a payload did not arrive (``why`` of :meth:`Deliveries.settled`).
Why = Literal["", "platform", "policy", "earlier part", "stopped", "not running", "store"]

#: Statuses a payload ends in.
FINAL_STATUSES = ("sent", "failed", "unknown")

#: Platform answers about one chat, not the account: the chat does not exist, the
#: user blocked the bot. The platform answered, so the account itself is fine.
CHAT_ERROR_STATUSES = (400, 403)
#: Errors that are always the account's, whatever the channel's codes: the
#: credentials refused, the account's own throttling.
ACCOUNT_ERROR_STATUSES = (401, 429)

PREVIEW_CHARS = 40


def describe_payload(payload: OutboundPayload) -> str:
    """Which message a payload was, in a few words: the start of its text in quotes,
    or the file's name."""
    if payload.media_path is not None:
        return f"file {payload.media_path.name}"
    text = " ".join(payload.text.split())
    if len(text) > PREVIEW_CHARS:
        text = text[:PREVIEW_CHARS - 1].rstrip() + "…"
    return f'"{text}"'


def is_account_failure(exc: BaseException | None,
                       channel: "Channel | type[Channel] | None" = None) -> bool:
    """Whether a failed send is the account's failure (it turns the account's health
    red) rather than one recipient's (reported on that send only).

    The one place this is decided. A recipient's: the platform answered, about that
    chat or that message alone: HTTP 400 or 403 ("chat not found", "bot was blocked
    by the user"), or an error code the channel lists in
    :attr:`Capabilities.recipient_error_codes` (Slack's ``channel_not_found``, WhatsApp's
    late ``131026``, WeChat's ``-2`` quota), whatever the HTTP status. The
    account's: everything else — no answer, the platform down or unreachable,
    credentials refused (401), the account throttled (429), an error that is not a
    :class:`SendError` or that the channel does not know as a recipient's.
    """
    if not isinstance(exc, SendError) or exc.delivery_unknown:
        return True
    if exc.status in ACCOUNT_ERROR_STATUSES:
        return True
    if exc.retryable and exc.status not in CHAT_ERROR_STATUSES:
        return True  # not sent, or the platform down: an outage
    codes = channel.capabilities.recipient_error_codes if channel is not None else ()
    if exc.code is not None and str(exc.code) in {str(code) for code in codes}:
        return False  # (a code may come as a number or as its digits)
    return exc.status not in CHAT_ERROR_STATUSES


#: Seconds between reads of a reply's outcome another instance may be sending.
POLL_SECONDS = 0.2


@dataclass(slots=True)
class Failure:
    """One payload that did not arrive, as ``status`` lists it."""

    at: float
    session_key: str
    reply_id: str
    part: str  # "1/2"
    message: str  # describe_payload
    status: str  # failed | unknown
    why: str
    error: str

    def as_dict(self) -> dict[str, object]:
        return {"at": self.at, "session": self.session_key, "reply_id": self.reply_id,
                "part": self.part, "message": self.message, "status": self.status,
                "why": self.why, "error": self.error}


@dataclass(slots=True)
class _Waiter:
    parts: dict[int, tuple[str, str | None]] = field(default_factory=dict)
    count: int | None = None
    changed: anyio.Event = field(default_factory=anyio.Event)

    @property
    def done(self) -> bool:
        return self.count is not None and len(self.parts) >= self.count


class Deliveries:
    """The outcomes of one kernel's payloads (see the module docstring).

    ``account(key)`` finds a running account by ``channel:account`` (None when it is
    not running); ``metrics`` counts what did not arrive; ``store()`` is the opened
    store (read by :meth:`wait`); ``clustered()`` says whether other instances share
    the store (then a reply another one sends is polled for); ``clock`` stamps failures.
    """

    def __init__(self, *, account: "Callable[[str], Account | None]", metrics: "Metrics",
                 store: "Callable[[], Store]", clustered: Callable[[], bool],
                 clock: Callable[[], float] = time.time) -> None:
        self._account = account
        self._metrics = metrics
        self._store = store
        self._clustered = clustered
        self._clock = clock
        self._waiting: dict[str, list[_Waiter]] = {}

    def settled(self, entry: "OutboxEntry", status: str, error: str | None = None, *,
                why: Why = "", exc: BaseException | None = None,
                account: "Account | None" = None) -> None:
        """A payload's final status (called by the outbox, once per payload; ``account``
        when the caller has it at hand)."""
        if account is None:
            account = self._account(f"{entry.channel}:{entry.account}")
        if entry.trace is not None:  # its send's span (core/telemetry.py)
            entry.trace.set("chatkernel.delivery.status", status)
            if status != "sent":
                entry.trace.fail(exc if exc is not None else why or status)
        if status == "sent":  # every payload comes here: the short way
            if account is not None:
                account.runtime.send_ok()
            if self._waiting:
                self._tell_waiters(entry, status, error)
            return
        now = self._clock()
        payload = entry.payload
        if account is not None:
            runtime = account.runtime
            if why == "platform" or why == "not running":
                if is_account_failure(exc, account.channel):
                    runtime.send_failed(error or "?", now)
                else:
                    runtime.send_ok()  # the platform answered: only this chat refused
            runtime.record_failure(Failure(
                at=now, session_key=entry.session_key, reply_id=entry.reply_id,
                part=f"{payload.chunk_index}/{payload.chunk_count}",
                message=describe_payload(payload), status=status, why=why,
                error=error or "?"))
        outcome = {"policy": "blocked", "earlier part": "skipped"}.get(
            why, "unknown" if status == "unknown" else "failed")
        metrics = self._metrics
        metrics.child(metrics.undelivered, entry.channel, entry.account, outcome).inc()
        self._tell_waiters(entry, status, error)

    def _tell_waiters(self, entry: "OutboxEntry", status: str, error: str | None) -> None:
        payload = entry.payload
        for waiter in self._waiting.get(entry.reply_id, ()):
            waiter.parts[payload.chunk_index] = (status, error)
            waiter.count = payload.chunk_count
            waiter.changed.set()

    async def wait(self, reply_id: str, timeout: float) -> list["OutboxEntry"]:
        """The entries of a reply once every part is final, or as they are after
        ``timeout`` seconds. Call it right after the reply was queued: a part
        settled before is seen in the store."""
        waiter = _Waiter()
        waiters = self._waiting.setdefault(reply_id, [])
        waiters.append(waiter)
        store = self._store()
        # With several instances the owner of the account may send it elsewhere: what
        # became of it is read from the store every POLL_SECONDS (core/runtime/cluster.py).
        poll = POLL_SECONDS if self._clustered() else None
        try:
            entries = await store.outbox_reply(reply_id)
            with anyio.move_on_after(timeout):
                while entries and not all(e.status in FINAL_STATUSES for e in entries) \
                        and not waiter.done:
                    with anyio.move_on_after(poll if poll is not None else float("inf")):
                        await waiter.changed.wait()
                    waiter.changed = anyio.Event()
                    if poll is not None:
                        entries = await store.outbox_reply(reply_id)
        finally:
            waiters.remove(waiter)
            if not waiters:
                del self._waiting[reply_id]
        return await store.outbox_reply(reply_id)
