"""Delivery statuses a platform reports after a send: a message's fate, learnt later.

Some platforms accept a message and tell its fate afterwards: WhatsApp answers a send
with the message's id and later posts ``sent``, ``delivered``, ``read`` or ``failed``
for that id on the webhook. The outbox keeps the platform's id of every payload a
channel with ``Capabilities.delivery_statuses`` sent (``SendResult.message_id``); a
channel reports each status with ``Channel.report_delivery_status(id, status, ...)``,
and :class:`DeliveryStatuses` finds the payload it belongs to:

- every status is counted (``chatkernel_delivery_statuses{channel,account,status}``);
- a ``failed`` one is a delivery failure like one the send itself reported: the
  outbox entry becomes ``failed`` with the platform's reason, the session's log gets a
  ``delivery failed`` notification (recording it sends nothing), the failure is
  counted in ``chatkernel_send_failures`` and logged. It counts against the
  account's health only when its code is not one of the channel's
  ``recipient_error_codes`` (core/outbound/deliveries.py decides). So the agent's history and the
  operator see that the message never arrived, not only a debug line.

A ``chatkernel send --wait-delivery`` waits here for its reply's parts
(:meth:`DeliveryStatuses.wait`): the latest status of each message this gateway sent
recently is kept in memory, from its send (:meth:`DeliveryStatuses.sent_as`) on, so a
status that arrives before anyone waits, or before the send's own answer, is not missed.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from chatkernel.core.telemetry import OFF, Tracer
from chatkernel.sdk.models import SendError

if TYPE_CHECKING:
    from chatkernel.core.health.metrics import Metrics
    from chatkernel.core.outbound.deliveries import Deliveries
    from chatkernel.core.store.base import OutboxEntry, Store
    from chatkernel.sdk.models import Account

log = logging.getLogger("chatkernel.delivery")

#: The statuses a channel reports; ``failed`` is the one that is surfaced.
STATUSES = ("sent", "delivered", "read", "failed")
#: Waits before looking a failed message up again: a status can overtake the answer
#: to the send it is about, whose id the outbox records once that answer is in.
LOOKUP_RETRIES = (0.05, 0.1, 0.25, 0.5, 1.0)
#: The statuses after which nothing more is reported: the message's fate.
FINAL = ("delivered", "read", "failed")
#: A later status wins over an earlier one, whatever order the webhooks came in.
_RANK = {"sent": 0, "delivered": 1, "read": 2, "failed": 3}
#: Messages whose latest status is kept in memory, for ``send --wait-delivery``.
RECENT_MESSAGES = 4096


@dataclass(slots=True)
class Fate:
    """The latest status of one message the platform knows by its id, and which part
    of which reply it is (once its send's answer is in)."""

    reply_id: str | None = None
    part: int = 0
    status: str | None = None
    reason: str | None = None
    #: The send's span (core/telemetry.py): the statuses are its children.
    trace: Any = None

    @property
    def final(self) -> bool:
        return self.status in FINAL


class DeliveryWait:
    """What :meth:`DeliveryStatuses.wait` found: each part's :class:`Fate` (by its
    number), for the parts the platform has reported on."""

    def __init__(self, parts: dict[int, Fate], count: int) -> None:
        self.parts = parts
        self.count = count

    @property
    def failed(self) -> bool:
        return any(fate.status == "failed" for fate in self.parts.values())

    @property
    def done(self) -> bool:
        """Every part's fate is known, or one failed (the reply did not arrive whole)."""
        return self.failed or (len(self.parts) >= self.count
                               and all(fate.final for fate in self.parts.values()))

    def status(self, part: int) -> str:
        fate = self.parts.get(part)
        return fate.status if fate is not None and fate.status else "pending"


class DeliveryStatuses:
    """Correlates the statuses channels report with the payloads the outbox sent.

    ``store()`` is the opened store (the outbox's entries, the session logs);
    ``metrics`` counts the statuses and failed deliveries; ``deliveries`` is told of
    a payload that failed after it was sent, like one the send itself reported;
    ``tracer``: each status a span, a child of its message's send (core/telemetry.py).
    """

    def __init__(self, *, store: "Callable[[], Store]", metrics: "Metrics",
                 deliveries: "Deliveries", tracer: Tracer = OFF) -> None:
        self._store = store
        self._tracer = tracer
        self._metrics = metrics
        self._deliveries = deliveries
        self._fates: OrderedDict[str, Fate] = OrderedDict()  # by the platform's id
        self._waiting: dict[str, list[anyio.Event]] = {}  # by reply id

    def _fate(self, platform_id: str) -> Fate:
        fate = self._fates.get(platform_id)
        if fate is None:
            fate = self._fates[platform_id] = Fate()
            if len(self._fates) > RECENT_MESSAGES:
                self._fates.popitem(last=False)
        return fate

    def _changed(self, reply_id: str | None) -> None:
        for event in self._waiting.get(reply_id or "", ()):
            event.set()

    def sent_as(self, entry: "OutboxEntry", platform_id: str) -> None:
        """The outbox sent ``entry``, which the platform knows as ``platform_id``."""
        fate = self._fate(platform_id)
        fate.reply_id, fate.part = entry.reply_id, entry.payload.chunk_index
        if entry.trace is not None and entry.trace.recording:  # its send's span
            fate.trace = entry.trace
        self._changed(entry.reply_id)

    async def wait(self, reply_id: str, count: int, timeout: float) -> DeliveryWait:
        """The fate of a reply's ``count`` parts once the platform reported it for
        every part (or a part failed), or as it stands after ``timeout`` seconds."""
        waiters = self._waiting.setdefault(reply_id, [])
        event = anyio.Event()
        waiters.append(event)
        try:
            with anyio.move_on_after(timeout):
                while not self._found(reply_id, count).done:
                    await event.wait()
                    waiters.remove(event)
                    event = anyio.Event()
                    waiters.append(event)
        finally:
            waiters.remove(event)
            if not waiters:
                del self._waiting[reply_id]
        return self._found(reply_id, count)

    def _traced(self, account: "Account", platform_id: str, status: str,
                code: str | int | None) -> None:
        """A status as a span in its message's trace, a child of the send (a message
        sent before a restart, or untraced: the root of a trace of its own), linked to
        the request that brought it."""
        tracer = self._tracer
        fate = self._fates.get(platform_id)
        parent = fate.trace if fate is not None else None
        carrier = tracer.request()
        span = tracer.start(
            f"delivery status {account.channel_name}", kind="consumer", parent=parent,
            root=parent is None, links=[carrier] if carrier is not None else [], attributes={
                "messaging.system": account.channel_name,
                "messaging.operation.type": "receive",
                "messaging.operation.name": "delivery_status",
                "messaging.message.id": platform_id, "chatkernel.account": account.key,
                "chatkernel.delivery.status": status})
        if status == "failed":
            span.fail(str(code) if code is not None else "failed")
        span.end()

    def _found(self, reply_id: str, count: int) -> DeliveryWait:
        parts = {fate.part: fate for fate in self._fates.values()
                 if fate.reply_id == reply_id and fate.status is not None}
        return DeliveryWait(parts, count)

    async def report(self, account: "Account", platform_id: str, status: str, *,
                     reason: str | None = None, code: str | int | None = None) -> bool:
        """Record a status for the message the platform knows as ``platform_id``.

        Returns whether the message was found among what this gateway sent (a status
        for a message sent by something else, or pruned from the outbox, is counted
        and logged, nothing more).
        """
        if status not in STATUSES:
            raise ValueError(f"delivery status must be one of {', '.join(STATUSES)}, "
                             f"not {status!r}")
        if self._tracer.on:
            self._traced(account, platform_id, status, code)
        metrics = self._metrics
        metrics.child(metrics.delivery_statuses, account.channel_name, account.name,
                      status).inc()
        fate = self._fate(platform_id)
        if fate.status is None or _RANK[status] > _RANK[fate.status]:
            fate.status, fate.reason = status, reason
            if code is not None:
                fate.reason = f"{reason or 'no reason given'} (code {code})"
            self._changed(fate.reply_id)
        if status != "failed":
            return True  # counted: nothing else to do for a message that is on its way
        store = self._store()
        entry = await store.outbox_by_platform_id(account.channel_name, account.name,
                                                  platform_id)
        for delay in LOOKUP_RETRIES:
            if entry is not None:
                break
            # The send's answer may still be on its way in: the status overtook it.
            await anyio.sleep(delay)
            entry = await store.outbox_by_platform_id(account.channel_name, account.name,
                                                      platform_id)
        why = reason or "no reason given"
        if code is not None:
            why = f"{why} (code {code})"
        if entry is None:
            log.warning("%s: message %s failed after it was sent: %s (not a message this "
                        "gateway has a record of)", account.key, platform_id, why)
            return False
        metrics.child(metrics.send_failures, account.channel_name, account.name).inc()
        part = f"chunk {entry.payload.chunk_index}/{entry.payload.chunk_count}"
        detail = f"delivery failed: {part} was accepted, then not delivered: {why}"
        log.warning("%s: %s in %s (message %s)", account.key, detail, entry.session_key,
                    platform_id)
        await store.outbox_mark(entry.id, "failed", why)
        # Where people look for failures too: the account's recent failures, metrics;
        # the account's health only when the code is not one recipient's (deliveries).
        self._deliveries.settled(entry, "failed", why, why="platform", account=account,
                                  exc=SendError(why, code=code))
        await store.append_log(entry.session_key, entry.session_id, "notification", detail,
                               {"kind": "delivery", "outbox_id": entry.id,
                                "platform_id": platform_id, "status": status,
                                **({"code": code} if code is not None else {})})
        return True
