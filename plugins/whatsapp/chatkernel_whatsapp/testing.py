"""The contract suite's adapter for the WhatsApp channel (:class:`WhatsAppAdapter`),
for the plugin's own tests and for anyone testing against the channel: it drives the
fake Graph API (:mod:`chatkernel_whatsapp.fake`) as users and as Meta's webhook.
Needs the kernel's test kit (pytest)."""

from __future__ import annotations

import time
from typing import Any

import chatkernel_whatsapp
from chatkernel.testing import PlatformAdapter, fast_pacing
from chatkernel_whatsapp.fake import FakeGraph

__all__ = ["APP_SECRET", "VERIFY_TOKEN", "WhatsAppAdapter"]

APP_SECRET = "contract-app-secret"
VERIFY_TOKEN = "contract-verify-token"


class WhatsAppAdapter(PlatformAdapter):
    """Drives :class:`FakeGraph` for the WhatsApp channel."""

    channel_plugin = chatkernel_whatsapp
    channel_name = "whatsapp"
    supports_groups = False   # the channel serves one-to-one chats
    supports_threads = False
    supports_revoke = True
    #: A late ``failed`` status (131026, undeliverable) for the chat's messages.
    supports_chat_refusal = True
    #: A reaction, a status of a message sent earlier, a system message (a user
    #: changed number), a message type the Cloud API does not support.
    non_message_events = ("reaction", "status", "system", "unsupported")

    def __init__(self) -> None:
        self.graph = FakeGraph(app_secret=APP_SECRET, verify_token=VERIFY_TOKEN)
        # Meta retries for days; a restart here takes well under the ~10 s these add to.
        self.graph.webhooks.delays = (0.05, 0.1, 0.2) + (0.25,) * 40
        self.gateway = ""
        #: More keys for the account's table (a template, max_message_age_minutes).
        self.account_extra: dict[str, Any] = {}

    async def start(self) -> None:
        await self.graph.__aenter__()

    async def stop(self) -> None:
        await self.graph.__aexit__(None, None, None)

    async def attach_gateway(self, url: str) -> None:
        self.gateway = url  # a new address for every kernel start: Meta is told at once
        self.graph.point_webhook(f"{url}/whatsapp/main/webhook")

    def account_config(self) -> dict[str, Any]:
        return {"access_token": self.graph.token, "phone_number_id": self.graph.phone_number_id,
                "app_secret": APP_SECRET, "verify_token": VERIFY_TOKEN,
                "api_base": self.graph.base_url, **self.account_extra}

    def channel_config(self) -> dict[str, Any]:
        return fast_pacing()

    # A chat is the user: their business-scoped user id (BSUID), which Meta sends
    # beside the phone number and which is the chat's id in the kernel.
    def phone(self, n: int) -> str:
        """User ``n``'s phone number (digits)."""
        return f"1555010{n:04d}"

    def user_id(self, n: int) -> str:
        return self.graph.user_id(self.phone(n))

    def direct_chat(self, n: int) -> str:
        return self.user_id(n)

    async def inject(self, chat_id: str, text: str, *, sender_id: str = "user-1",
                     sender_name: str = "", group: bool = False, mention: bool = False,
                     thread_id: str | None = None) -> None:
        # The user writes from their phone: Meta sends its number and their BSUID.
        phone = self.graph.phones.get(sender_id, sender_id)
        message = self.graph.message(phone, text)
        self.graph.inject_messages([message], names={phone: sender_name or "User"})

    async def inject_own_message(self, chat_id: str, text: str) -> None:
        # What the business itself sent (from the WhatsApp Business app, on a number
        # shared with it) comes back as an echo.
        business = self.graph._metadata()["display_phone_number"]
        echo = {"from": business, "to": chat_id, "id": self.graph._wamid(),
                "timestamp": str(int(time.time())), "type": "text", "text": {"body": text}}
        self.graph.post(self.graph.notification([{
            "_field": "smb_message_echoes", "messaging_product": "whatsapp",
            "metadata": self.graph._metadata(), "message_echoes": [echo]}]), user=chat_id)

    async def inject_non_message_event(self, kind: str, chat_id: str, *, sender_id: str,
                                       text: str) -> None:
        graph = self.graph
        if kind == "status":
            value = {"messaging_product": "whatsapp", "metadata": graph._metadata(),
                     "statuses": [{"id": graph._wamid(), "status": "delivered",
                                   "timestamp": str(int(time.time())),
                                   "recipient_id": chat_id}]}
            graph.post(graph.notification([value]), user=chat_id)
            return
        content = {
            "reaction": {"reaction": {"message_id": graph._wamid(), "emoji": "👍"}},
            "system": {"system": {"body": f"User changed from {sender_id} to 15550999999",
                                  "wa_id": "15550999999", "type": "user_changed_number"}},
            "unsupported": {"errors": [{"code": 131051, "title": "Message type unknown",
                                        "message": "Message type unknown", "error_data": {
                                            "details": "Message type is not supported."}}]},
        }[kind]
        phone = graph.phones.get(sender_id, sender_id)
        graph.inject_messages([graph.message(phone, kind=kind, **content)])

    def sent_texts(self, chat_id: str, *, thread_id: str | None = None) -> list[str]:
        return [m.plain_text or "" for m in self.graph.sent(chat_id) if m.type == "text"]

    def sent_media(self, chat_id: str) -> list[tuple[str, str | None]]:
        return [(m.type, m.filename) for m in self.graph.sent(chat_id)
                if m.type in ("image", "video", "audio", "document")]

    def typing_count(self, chat_id: str) -> int:
        return len(self.graph.typing(chat_id))

    async def redeliver_last(self) -> None:
        self.graph.redeliver(next(n for n in reversed(self.graph.notifications)
                                  if "messages" in str(n.body)))

    async def revoke_credentials(self) -> None:
        self.graph.revoke_token()

    async def refuse_chat(self, chat_id: str) -> None:
        self.graph.fail_delivery(chat_id)  # accepted, then a late "failed" 131026
