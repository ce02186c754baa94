"""How a WhatsApp account receives: Meta posts notifications to the gateway's webhook.

:class:`WhatsAppWebhook` is the account's transport on ``/whatsapp/<account>/webhook``:
Meta's signature over the body and its GET verification (chatkernel_whatsapp.signature),
and a notification read into its messages and statuses (:class:`Notification`), every
change of every entry, in order. The channel reads each of those
(``WhatsAppChannel.normalize``). A ``user_id_update`` change (a user's BSUID changed)
is read into its updates too; every other change field is nothing to answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chatkernel.channels import Deliver, Webhook, WebhookRejected
from chatkernel_whatsapp.signature import MetaSignature
from chatkernel_whatsapp.users import sender_of

if TYPE_CHECKING:
    from chatkernel_whatsapp.channel import WhatsAppChannel

log = logging.getLogger("chatkernel.whatsapp")

#: The change fields read, and the (kind, key) of the items each carries: a ``messages``
#: change's messages and statuses; a ``user_id_update`` change's id updates (a user's
#: BSUID changed: ``user_id``'s ``previous`` and ``current``, and their ``wa_id``), which
#: integrators and Meta's BSUID guide name beside the ``system`` messages that say the same.
CHANGE_FIELDS: dict[Any, tuple[tuple[str, str], ...]] = {
    "messages": (("message", "messages"), ("status", "statuses")),
    "user_id_update": (("user_id_update", "user_id_update"),),
}
#: Inbound message types that carry a file, and the media kind each is saved as.
INBOUND_MEDIA = {"image": "image", "video": "video", "document": "document",
                 "audio": "audio", "sticker": "image"}


@dataclass(slots=True)
class Notification:
    """One message or status out of a webhook notification."""

    kind: str                      # "message" | "status" | "user_id_update"
    data: dict[str, Any]
    phone_number_id: str | None
    contacts: list[Any] = field(default_factory=list)


class WhatsAppWebhook(Webhook):
    """Meta's webhook for one business number (one Meta app may post every number's
    notifications to one callback URL: the channel hands each to its number's account)."""

    channel: WhatsAppChannel

    def verifier(self) -> MetaSignature:
        config = self.channel.config
        return MetaSignature(config.app_secret, config.verify_token)

    async def run(self, deliver: Deliver) -> None:
        self.channel.claim_number()  # this instance answers its number from now on
        await super().run(deliver)

    def events(self, payload: Any) -> list[Notification]:
        """Every message and status of every change of every entry, in order.

        The body is signed, so it is Meta's, but a part of it that is not the shape
        Meta documents (a ``metadata`` that is not an object, ``messages`` that is not
        a list, a message that is not an object) is skipped with one line naming it:
        the rest of the notification is still answered, and Meta gets its 200 (a
        refusal would only make it post the same bytes again, for days)."""
        if not isinstance(payload, dict) or not isinstance(payload.get("entry"), list):
            raise WebhookRejected(400, "expected a notification with an entry list")
        if payload.get("object") != "whatsapp_business_account":
            raise WebhookRejected(400, f"not a WhatsApp notification: {payload.get('object')!r}")
        found: list[Notification] = []
        for e, entry in enumerate(payload["entry"]):
            if not isinstance(entry, dict):
                self._malformed(f"entry[{e}]", "an object", entry)
                continue
            changes = entry.get("changes")
            if changes is not None and not isinstance(changes, list):
                self._malformed(f"entry[{e}].changes", "a list", changes)
                continue
            for c, change in enumerate(changes or []):
                where = f"entry[{e}].changes[{c}]"
                if not isinstance(change, dict):
                    self._malformed(where, "an object", change)
                    continue
                keys = CHANGE_FIELDS.get(change.get("field"))
                if keys is None:
                    continue  # message echoes, templates, account updates: nothing to answer
                found.extend(self._change_events(change.get("value"), f"{where}.value", keys))
        return found

    def _change_events(self, value: Any, where: str,
                       keys: tuple[tuple[str, str], ...]) -> list[Notification]:
        """The items of one change's ``value`` under ``keys`` (kind, key): its messages
        and statuses, or its user id updates (see :meth:`events`)."""
        if value is None:
            return []
        if not isinstance(value, dict):
            self._malformed(where, "an object", value)
            return []
        metadata = value.get("metadata") or {}
        if not isinstance(metadata, dict):
            # Without it the number the messages were sent to is unknown.
            self._malformed(f"{where}.metadata", "an object", metadata)
            return []
        phone = metadata.get("phone_number_id")
        contacts = value.get("contacts") or []
        if not isinstance(contacts, list):
            self._malformed(f"{where}.contacts", "a list", contacts)
            contacts = []
        found: list[Notification] = []
        for kind, key in keys:
            items = value.get(key) or []
            if not isinstance(items, list):
                self._malformed(f"{where}.{key}", "a list", items)
                continue
            for index, item in enumerate(items):
                if not isinstance(item, dict):
                    self._malformed(f"{where}.{key}[{index}]", "an object", item)
                    continue
                found.append(Notification(kind, item, phone, contacts if kind == "message"
                                          else []))
        return found

    def _malformed(self, where: str, expected: str, value: Any) -> None:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:60] + "…"
        log.warning("%s: a signed notification's %s is not %s (%s): that part is skipped, "
                    "the rest is answered", self.channel.account.key, where, expected, shown)

    def event_chat(self, event: Notification) -> Any:
        data = event.data
        if event.kind == "status":
            return data.get("recipient_user_id") or data.get("recipient_id")
        if event.kind == "user_id_update":  # in line with the user's earlier messages
            return previous_user_id(data) or data.get("wa_id") or None
        # A user's messages carry their BSUID (now, or from the start for a user with a
        # username and no phone): it keys them alike whichever ids each one has.
        who = sender_of(data, event.contacts)
        return who.user_id or who.phone or None

    def event_has_media(self, event: Notification) -> bool:
        return event.kind == "message" and event.data.get("type") in INBOUND_MEDIA

    def describe_event(self, event: Notification) -> str:
        if event.kind == "user_id_update":
            return f"user_id_update of {previous_user_id(event.data)}"
        return f"{event.kind} {event.data.get('id')}"


def previous_user_id(update: dict[str, Any]) -> str:
    """The BSUID a ``user_id_update`` item changes (``user_id.previous``), or ""."""
    ids = update.get("user_id")
    return str(ids.get("previous") or "") if isinstance(ids, dict) else ""
