"""The Telegram channel: Bot API long polling (default) or a webhook.

Only Telegram lives here: turning an Update into an InboundMessage, the Bot
API calls, the media-kind table, what its error codes mean, the probe. Its two
transports (``getUpdates`` polling and the webhook) are in
:mod:`chatkernel_telegram.receiving`; the loops they run, retries, pacing, the
outbox and dedupe are the kit's and the kernel's.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import re
import secrets
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from chatkernel.channels import (
    Account,
    AccountConfig,
    Channel,
    ChannelContext,
    ChannelLimits,
    ConfigError,
    InboundMessage,
    LiveMode,
    LiveReplies,
    MediaRef,
    OutboundPayload,
    PlatformError,
    Preview,
    ProbeResult,
    RateLimit,
    Route,
    SendError,
    SendResult,
    Trouble,
    refusal,
    render_payload,
)
from chatkernel_telegram.api import DEFAULT_API_BASE, TOKEN_PATTERN, BotAPI
from chatkernel_telegram.markup import TelegramHTML
from chatkernel_telegram.receiving import (
    INBOUND_MEDIA,
    TelegramPolling,
    TelegramWebhook,
    has_media,
    present,
)

log = logging.getLogger("chatkernel.telegram")

MB = 1024 * 1024
DOWNLOAD_MAX_BYTES = 20 * MB
#: What a person may send that the channel does not read (it reads text, captions and
#: files): such a message is logged as not answered, where a service message (a pin, a
#: join, a new title) passes without a word. A venue carries a location too.
UNREAD_CONTENT = ("venue", "location", "contact", "poll", "dice", "game", "invoice",
                  "story", "paid_media", "checklist", "giveaway")
#: How long the receive loop waits when another process polls the token, or the
#: token was rejected, before trying again (neither is fixed by trying sooner).
CONFLICT_WAIT_SECONDS = 30.0
REJECTED_WAIT_SECONDS = 60.0
_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")
_BOT_TOKEN = re.compile(r"\d+:[A-Za-z0-9_-]+")

# Bot API method and multipart field per media kind.
SEND_METHODS = {kind: (f"send{kind.capitalize()}", kind)
                for kind in ("photo", "video", "audio", "voice", "animation", "document")}


class TelegramAccount(AccountConfig):
    """``[channels.telegram.accounts.<name>]``."""

    bot_token: str = Field(min_length=1)
    api_base: str = DEFAULT_API_BASE
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str | None = None  # the public URL Telegram posts to (webhook mode)
    #: Echoed by Telegram in X-Telegram-Bot-Api-Secret-Token; random per start if unset.
    secret_token: str | None = None
    poll_timeout: int = Field(30, ge=0, le=50)
    allowed_updates: list[str] = Field(default_factory=lambda: ["message"])

    identity = ("api_base", "bot_token")

    @field_validator("bot_token")
    @classmethod
    def _token(cls, value: str) -> str:
        # "<bot id>:<secret>", as BotFather gives it; an unresolved ${VAR} (config set
        # checks before the environment is read) is left to the start.
        if not (_BOT_TOKEN.fullmatch(value) or value.startswith("${")):
            raise ValueError("expected the token BotFather gave, <digits>:<letters, digits, "
                             "_ and ->")
        return value

    @field_validator("secret_token")
    @classmethod
    def _secret(cls, value: str | None) -> str | None:
        if value is not None and not _SECRET_TOKEN.fullmatch(value):
            raise ValueError("expected 1-256 characters of A-Z a-z 0-9 _ -")
        return value


def _timestamp(date: Any) -> float:
    """A message's Unix time: Telegram's ``date``, or now when it has none a clock can
    hold (missing, or not finite)."""
    value = float(date) if date is not None else time.time()
    return value if math.isfinite(value) else time.time()


def _display_name(user: dict[str, Any]) -> str:
    def text(key: str) -> str:  # a name is a string; anything else in its place is no name
        value = user.get(key)
        return value if isinstance(value, str) else ""

    name = " ".join(part for part in (text("first_name"), text("last_name")) if part)
    return name or text("username")


#: Seconds between two updates of a live reply in a group: an edit counts against the
#: group's 20 messages a minute, which the answers need too.
GROUP_LIVE_INTERVAL = 3.0
#: Telegram's answer to an edit that changes nothing: the message shows it already.
NOT_MODIFIED = "message is not modified"
#: What a refusal means where Telegram's words do not say it: added to the send's error
#: (what `chatkernel send`, the outbox and `status` show).
REFUSAL_MEANINGS = {
    "chat not found": "the user has not started the bot (a bot writes to a person only "
                      "once they sent it /start or a message), or the chat id is wrong",
}


def explained(error: SendError) -> SendError:
    """``error`` with what the refusal means, where :data:`REFUSAL_MEANINGS` knows it."""
    for words, meaning in REFUSAL_MEANINGS.items():
        if words in str(error):
            error.args = (f"{error}: {meaning}",)
            break
    return error


class TelegramChannel(Channel, LiveReplies):
    """One bot."""

    name = "telegram"
    config_example = """\
[channels.telegram.accounts.main]
bot_token = "${TELEGRAM_BOT_TOKEN}"   # the token @BotFather gave
allow_from = ["123456789"]            # Telegram user ids; "chat:-100123" a group; "*" anyone
dm_policy = "pairing"                 # others get a code: chatkernel pairing approve telegram CODE
"""
    account_model = TelegramAccount
    limits = ChannelLimits(
        text_limit=4096, text_unit="utf16", caption_limit=1024,
        media_kinds={".jpg": "photo", ".jpeg": "photo", ".png": "photo", ".webp": "photo",
                     ".mp4": "video", ".mov": "video", ".webm": "video",
                     ".mp3": "audio", ".m4a": "audio", ".flac": "audio", ".wav": "audio",
                     ".ogg": "voice", ".oga": "voice", ".opus": "voice",
                     ".gif": "animation"},
        default_media_kind="document",
        # Photos up to 10 MB (a larger one goes as a document, whole); 50 MB otherwise.
        media_max_bytes={"photo": 10 * MB, **{kind: 50 * MB for kind in SEND_METHODS
                                               if kind != "photo"}},
        rates={"account": RateLimit(30, 1.0), "chat": RateLimit(1, 1.0),
               "group": RateLimit(20, 60.0)},
        retry_base_delay=0.4,
    )
    markup = TelegramHTML
    secret_patterns = (TOKEN_PATTERN,)

    def __init__(self, account: Account, context: ChannelContext | None = None) -> None:
        super().__init__(account, context)
        self.api = BotAPI(self.config.bot_token, self.config.api_base,
                          timeout=self.config.poll_timeout + 15)
        self.bot: dict[str, Any] | None = None
        self._random_secret = secrets.token_urlsafe(32)
        if self.config.mode == "webhook" and not self.config.webhook_url:
            raise ConfigError("webhook mode needs webhook_url (the public URL Telegram posts "
                              "to)", key=f"channels.telegram.accounts.{account.name}.webhook_url")

    @property
    def secret_token(self) -> str:
        """The webhook's secret: the configured one; else, when several gateway instances
        share the store (any of them may take Telegram's request), one derived from the
        bot token, which they all know; else a random one for this start."""
        if self.config.secret_token:
            return self.config.secret_token
        if self.context.shares_store:
            return hmac.new(self.config.bot_token.encode(), b"chatkernel webhook secret",
                            hashlib.sha256).hexdigest()
        return self._random_secret

    # -- receiving ----------------------------------------------------------------

    def transport(self) -> TelegramPolling | TelegramWebhook:
        return TelegramWebhook(self) if self.config.mode == "webhook" else TelegramPolling(self)

    async def identify(self) -> None:
        if self.bot is None:
            self.bot = await self.api.call("getMe")
            self.self_id = str(self.bot["id"])

    def receive_trouble(self, error: Exception) -> Trouble:
        if isinstance(error, PlatformError):
            if error.status == 409:  # not a crash to restart from: another process polls
                return Trouble("another instance is polling this bot token",
                               wait=CONFLICT_WAIT_SECONDS, restartable=False)
            if error.status in (401, 404):  # 404 is the answer to a malformed token
                return Trouble(
                    f"the Bot API rejected the token ({error.status} {error.description})",
                    wait=REJECTED_WAIT_SECONDS, restartable=False, refused=True,
                    advice="get a new token from @BotFather (/token, or /revoke for a leaked "
                           f"one) and set it in {self.account.config_key('bot_token')}, then "
                           "restart the gateway")
        return super().receive_trouble(error)

    async def normalize(self, update: dict[str, Any]) -> InboundMessage | None:
        """An Update as an InboundMessage (None for updates that are not messages).
        A null field reads as an absent one, at any depth (:func:`present`)."""
        data = present(update.get("message"))
        if not isinstance(data, dict) or "chat" not in data:
            return None
        if not (data.get("text") or data.get("caption") or has_media(data)):
            kind = next((kind for kind in UNREAD_CONTENT if kind in data), None)
            if kind is not None:
                chat = data["chat"] if isinstance(data["chat"], dict) else {}
                log.info("%s: message %s in chat %s not answered: a %s (the channel reads "
                         "text, captions and files)", self.account.key,
                         data.get("message_id"), chat.get("id"), kind)
            return None  # or a service message (pinned, joined, a new title): nothing said
        await self.identify()
        bot = self.bot or {}
        chat = data["chat"]
        sender = data.get("from") or {}
        text = data.get("text") or data.get("caption") or ""
        if not isinstance(text, str):
            raise ValueError(f"its text is a {type(text).__name__}, not a string")
        entities = data.get("entities") or data.get("caption_entities") or []
        reply = data.get("reply_to_message") or {}
        thread = data.get("message_thread_id") if data.get("is_topic_message") else None
        media = []
        if has_media(data):
            media = [ref for ref in [await self._download(data, field, kind)
                                     for field, kind in INBOUND_MEDIA if field in data] if ref]
        return InboundMessage(
            channel=self.name, account=self.account.name, chat_id=str(chat["id"]),
            # message_id is unique within a chat only.
            message_id=f"{chat['id']}:{data['message_id']}",
            sender_id=str(sender.get("id", chat["id"])), sender_name=_display_name(sender),
            text=text, thread_id=str(thread) if thread is not None else None,
            is_group=chat.get("type") in ("group", "supergroup"),
            mentions_bot=self._mentions(text, entities, bot),
            reply_to_bot=(reply.get("from") or {}).get("id") == bot.get("id"),
            media=media, timestamp=_timestamp(data.get("date")))

    @staticmethod
    def _mentions(text: str, entities: list[dict[str, Any]], bot: dict[str, Any]) -> bool:
        username = (bot.get("username") or "").lower()
        encoded = text.encode("utf-16-le", "surrogatepass")
        for entity in entities:
            kind = entity.get("type")
            if kind == "text_mention" and (entity.get("user") or {}).get("id") == bot.get("id"):
                return True
            if kind in ("mention", "bot_command"):
                start, length = entity.get("offset", 0) * 2, entity.get("length", 0) * 2
                word = encoded[start:start + length].decode("utf-16-le", "replace").lower()
                if kind == "mention" and word == f"@{username}":
                    return True
                if kind == "bot_command" and word.endswith(f"@{username}"):
                    return True
        return False

    async def _download(self, data: dict[str, Any], field: str, kind: str) -> MediaRef | None:
        item = data[field]
        if field == "photo":  # the sizes of one photo: keep the largest picture
            item = max(item, key=lambda size: size.get("width", 0) * size.get("height", 0),
                       default=None)
        if not isinstance(item, dict) or "file_id" not in item:
            return None
        name, size, file_id = item.get("file_name"), item.get("file_size"), item["file_id"]
        if size is not None and size > DOWNLOAD_MAX_BYTES:
            return MediaRef(kind=kind, filename=name, size=size, platform_id=file_id,
                            note="not saved: over the Bot API's 20 MB download limit")
        try:
            path = (await self.api.call("getFile", {"file_id": file_id}))["file_path"]
            chunks = self.api.download(path, max_bytes=min(DOWNLOAD_MAX_BYTES,
                                                           self.context.max_inbound_bytes))
            return await self.context.save_media(
                chunks, kind=kind, filename=name or Path(path).name,
                mime=item.get("mime_type"), platform_id=file_id, declared_size=size)
        except PlatformError as exc:
            return MediaRef(kind=kind, filename=name, size=size, platform_id=file_id,
                            note=f"not saved: {exc}")

    # -- sending ------------------------------------------------------------------------

    async def send(self, route: Route, payload: OutboundPayload) -> SendResult:
        params: dict[str, Any] = {"chat_id": route.chat_id}
        if route.thread_id:
            params["message_thread_id"] = int(route.thread_id)
        if route.reply_to:
            params["reply_parameters"] = {"message_id": int(route.reply_to.rsplit(":", 1)[-1]),
                                          "allow_sending_without_reply": True}
        files = None
        if payload.is_media:
            method, field = SEND_METHODS.get(payload.media_kind or "", SEND_METHODS["document"])
            files = {field: payload.media_path}
            if payload.caption:
                params["caption"], markup = render_payload(
                    OutboundPayload(text=payload.caption, format=payload.format), self.markup)
                params["parse_mode"] = "HTML" if markup else None
        else:
            method = "sendMessage"
            params["text"], markup = render_payload(payload, self.markup)
            params["parse_mode"] = "HTML" if markup else None
            params["link_preview_options"] = {"is_disabled": False}
        try:
            result = await self.api.call(method, params, files=files)
        except PlatformError as exc:
            moved = exc.details.get("migrate_to_chat_id")
            raise explained(exc.send_error(
                moved_to=str(moved) if moved is not None else None,
                markup_rejected=exc.status == 400 and "can't parse entities" in str(exc)
            )) from None
        return SendResult(message_id=str(result.get("message_id")) if result else None)

    # -- live replies: drafts in private chats, edits in groups -------------------------

    def live_mode(self, route: Route) -> LiveMode | None:
        private = not route.is_group and route.chat_id.lstrip("-").isdigit() \
            and int(route.chat_id) > 0
        return "draft" if private else "edit"

    def live_interval(self, route: Route, mode: LiveMode) -> float:
        return GROUP_LIVE_INTERVAL if mode == "edit" else self.live_interval_seconds

    async def start_preview(self, route: Route, mode: LiveMode,
                            payload: OutboundPayload) -> str:
        if mode == "draft":
            draft_id = secrets.randbelow(2**31 - 1) + 1  # any non-zero id of ours
            await self._draft(route, draft_id, payload)
            return str(draft_id)
        result = await self.send(route, payload)  # the first text, as any message
        if result.message_id is None:
            raise PlatformError("sendMessage answered no message_id")
        return result.message_id

    async def update_preview(self, route: Route, preview: Preview,
                             payload: OutboundPayload) -> None:
        if preview.mode == "draft":
            await self._draft(route, int(preview.id), payload)
            return
        try:
            await self._edit(route, preview.id, payload)
        except PlatformError as exc:
            if NOT_MODIFIED not in str(exc):
                raise

    async def replace_preview(self, route: Route, payload: OutboundPayload) -> SendResult:
        assert payload.replaces is not None
        try:
            await self._edit(route, payload.replaces, payload)
        except PlatformError as exc:
            if NOT_MODIFIED in str(exc):  # it shows the answer already (a repeat)
                return SendResult(message_id=payload.replaces)
            if exc.status == 400 and "message to edit not found" in str(exc):
                return await self.send(route, payload)  # someone deleted the preview
            raise exc.send_error(
                markup_rejected=exc.status == 400 and "can't parse entities" in str(exc)
            ) from None
        return SendResult(message_id=payload.replaces)

    async def delete_preview(self, route: Route, preview: Preview) -> None:
        if preview.mode == "draft":
            return  # a draft is no message: it goes away by itself
        await self.api.call("deleteMessage", {"chat_id": route.chat_id,
                                              "message_id": int(preview.id)})

    async def _draft(self, route: Route, draft_id: int, payload: OutboundPayload) -> None:
        text, markup = render_payload(payload, self.markup)
        await self.api.call("sendMessageDraft", {
            "chat_id": route.chat_id, "draft_id": draft_id, "text": text,
            "message_thread_id": int(route.thread_id) if route.thread_id else None,
            "parse_mode": "HTML" if markup else None})

    async def _edit(self, route: Route, message_id: str, payload: OutboundPayload) -> None:
        text, markup = render_payload(payload, self.markup)
        await self.api.call("editMessageText", {
            "chat_id": route.chat_id, "message_id": int(message_id), "text": text,
            "parse_mode": "HTML" if markup else None,
            "link_preview_options": {"is_disabled": False}})

    async def indicate(self, route: Route) -> None:
        params: dict[str, Any] = {"chat_id": route.chat_id, "action": "typing"}
        if route.thread_id:
            params["message_thread_id"] = int(route.thread_id)
        await self.api.call("sendChatAction", params, timeout=10)

    async def probe(self) -> ProbeResult:
        try:
            self.bot = me = await self.api.call("getMe", timeout=10)
        except PlatformError as exc:
            # A rejected token stays rejected: restarting the loop cannot help.
            refused = refusal(self, exc)
            return ProbeResult(ok=False, detail=refused or str(exc),
                               restartable=refused is None)
        self.self_id = str(me.get("id"))
        return ProbeResult(ok=True, detail=f"@{me.get('username')}",
                           extra={"username": me.get("username"), "id": me.get("id"),
                                  "server_date": self.api.http.server_date()})

    async def aclose(self) -> None:
        await self.api.close()
