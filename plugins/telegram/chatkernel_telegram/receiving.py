"""How a Telegram bot receives: ``getUpdates`` long polling, or a webhook.

Both transports carry the same Updates, so what the kit needs to know of an
Update (its chat, whether it brings a file, its id) is written once, in
:class:`TelegramUpdates`, which both inherit. The Bot API calls are the
channel's (``channel.api``); the webhook's secret is the channel's
(:attr:`TelegramChannel.secret_token`), so every transport of one start agrees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chatkernel.channels import Polled, Polling, SecretHeader, Webhook, WebhookRejected

if TYPE_CHECKING:
    from chatkernel_telegram.channel import TelegramChannel

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
# Inbound message fields that carry a file, and the media kind they become.
INBOUND_MEDIA = (("photo", "image"), ("document", "document"), ("voice", "voice"),
                 ("audio", "audio"), ("video", "video"), ("animation", "video"),
                 ("video_note", "video"), ("sticker", "image"))
#: The fields of INBOUND_MEDIA, for asking whether a message has any.
MEDIA_FIELDS = frozenset(field for field, _ in INBOUND_MEDIA)


def present(value: Any) -> Any:
    """``value`` with every ``null`` field of its objects left out, at any depth.

    Telegram leaves out a field that has no value, but other senders of Updates (a
    bridge, a library re-serializing its objects) write ``"photo": null``, and the two
    must read the same. :meth:`TelegramChannel.normalize` reads every message through this.
    """
    if isinstance(value, dict):
        return {key: present(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [present(item) for item in value]
    return value


def has_media(message: dict[str, Any]) -> bool:
    """Whether a message brings a file (a null field brings none)."""
    return any(message.get(field) is not None for field in MEDIA_FIELDS)


class TelegramUpdates:
    """What a Bot API Update is to the kit, for either transport (a null field is an
    absent one here too)."""

    def event_chat(self, update: dict[str, Any]) -> Any:
        return ((update.get("message") or {}).get("chat") or {}).get("id")

    def event_has_media(self, update: dict[str, Any]) -> bool:
        message = update.get("message")
        return isinstance(message, dict) and has_media(message)

    def describe_event(self, update: dict[str, Any]) -> str:
        return f"update {update.get('update_id')}"

    def event_id(self, update: dict[str, Any]) -> str | None:
        update_id = update.get("update_id")
        return str(update_id) if isinstance(update_id, int) else None


class TelegramPolling(TelegramUpdates, Polling):
    """``getUpdates`` long polling (``mode = "polling"``, the default)."""

    channel: "TelegramChannel"

    async def prepare(self) -> None:
        # A webhook left from an earlier run would make getUpdates fail.
        await self.channel.api.call("deleteWebhook", {"drop_pending_updates": False})

    async def poll(self, cursor: str | None) -> Polled:
        config = self.channel.config
        updates = await self.channel.api.call("getUpdates", {
            "offset": int(cursor) if cursor else None, "timeout": config.poll_timeout,
            "allowed_updates": config.allowed_updates})
        # The offset confirms every update before it: it moves once the batch is journaled.
        last = max((int(update["update_id"]) for update in updates), default=None)
        return Polled(updates, None if last is None else str(last + 1))


class TelegramWebhook(TelegramUpdates, Webhook):
    """Telegram posts each Update to ``webhook_url`` (``mode = "webhook"``), with the
    secret given to ``setWebhook`` in ``X-Telegram-Bot-Api-Secret-Token``."""

    channel: "TelegramChannel"

    def verifier(self) -> SecretHeader:
        return SecretHeader(SECRET_HEADER, self.channel.secret_token)

    async def register(self) -> None:
        config = self.channel.config
        await self.channel.api.call("setWebhook", {
            "url": config.webhook_url, "secret_token": self.channel.secret_token,
            "allowed_updates": config.allowed_updates})

    async def webhook_status(self) -> tuple[bool, str]:
        """Whether Telegram posts to this account's ``webhook_url`` (``chatkernel
        doctor``; ``--fix`` registers it again when not)."""
        info = await self.channel.api.call("getWebhookInfo")
        url, wanted = info.get("url") or "", self.channel.config.webhook_url
        if url != wanted:
            return False, f"Telegram posts to {url or 'no webhook'}, not {wanted}"
        error = info.get("last_error_message")
        return True, f"webhook registered at {url}" + (f" (last error: {error})"
                                                       if error else "")

    def events(self, payload: Any) -> list[Any]:
        if not isinstance(payload, dict):
            raise WebhookRejected(400, "the body must be an Update")
        return [payload]
