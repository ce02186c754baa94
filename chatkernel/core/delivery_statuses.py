"""Delivery statuses a platform reports after a send: a message's fate, learnt later.

Some platforms accept a message and tell its fate afterwards: WhatsApp answers a send
with the message's id and later posts ``sent``, ``delivered``, ``read`` or ``failed``
for that id on the webhook. The outbox keeps the platform's id of every payload a
channel with ``Channel.delivery_statuses`` sent (``SendResult.message_id``); a
channel reports each status with ``Channel.report_delivery_status(id, status, ...)``,
and :class:`DeliveryStatuses` finds the payload it belongs to:

- every status is counted (``chatkernel_delivery_statuses{channel,account,status}``);
- a ``failed`` one is a delivery failure like one the send itself reported: the
  outbox entry becomes ``failed`` with the platform's reason, the session's log gets a
  ``delivery failed`` notification (recording it sends nothing), the failure is
  counted in ``chatkernel_send_failures`` and logged. It counts against the
  account's health only when its code is not one of the channel's
  ``recipient_error_codes`` (core/deliveries.py decides). So the agent's history and the
  operator see that the message never arrived, not only a debug line.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio

from chatkernel.core.models import SendError

if TYPE_CHECKING:
    from chatkernel.core.kernel import Kernel
    from chatkernel.core.models import Account

log = logging.getLogger("chatkernel.delivery")

#: The statuses a channel reports; ``failed`` is the one that is surfaced.
STATUSES = ("sent", "delivered", "read", "failed")
#: Waits before looking a failed message up again: a status can overtake the answer
#: to the send it is about, whose id the outbox records once that answer is in.
LOOKUP_RETRIES = (0.05, 0.1, 0.25, 0.5, 1.0)


class DeliveryStatuses:
    """Correlates the statuses channels report with the payloads the outbox sent."""

    def __init__(self, kernel: "Kernel") -> None:
        self._kernel = kernel

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
        kernel = self._kernel
        metrics = kernel.metrics
        metrics.child(metrics.delivery_statuses, account.channel_name, account.name,
                      status).inc()
        if status != "failed":
            return True  # counted: nothing else to do for a message that is on its way
        store = kernel.store
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
        kernel.deliveries.settled(entry, "failed", why, why="platform", account=account,
                                  exc=SendError(why, code=code))
        await store.append_log(entry.session_key, entry.session_id, "notification", detail,
                               {"kind": "delivery", "outbox_id": entry.id,
                                "platform_id": platform_id, "status": status,
                                **({"code": code} if code is not None else {})})
        return True
