"""The Telegram channel: Bot API long polling (default) or a webhook.

Only what differs from other platforms lives here: turning an Update into an
InboundMessage, the Bot API calls, the media-kind table, the error mapping and
the probe. Chunking, order, retries, pacing, the outbox and dedupe are the
kernel's.
"""

from __future__ import annotations

import hmac
import logging
import re
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

import anyio
from aiohttp import web
from pydantic import Field, field_validator

from chatkernel.core.channel import (
    Channel,
    ChannelLimits,
    Deliver,
    RateLimit,
    deliver_many,
    normalize_batch,
)
from chatkernel.core.config import AccountConfig
from chatkernel.core.models import (
    InboundMessage,
    MediaRef,
    OutboundPayload,
    ProbeResult,
    Route,
    SendError,
    SendResult,
)
from chatkernel_telegram.api import DEFAULT_API_BASE, BotAPI, TelegramError

log = logging.getLogger("chatkernel.telegram")

PHOTO_MAX_BYTES = 10 * 1024 * 1024
DOWNLOAD_MAX_BYTES = 20 * 1024 * 1024
CONFLICT_BACKOFF_SECONDS = 30.0
POLL_ERROR_BACKOFF_SECONDS = 5.0
REJECTED_BACKOFF_SECONDS = 60.0
_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")

# Bot API method and multipart field per media kind.
SEND_METHODS = {
    "photo": ("sendPhoto", "photo"),
    "video": ("sendVideo", "video"),
    "audio": ("sendAudio", "audio"),
    "voice": ("sendVoice", "voice"),
    "animation": ("sendAnimation", "animation"),
    "document": ("sendDocument", "document"),
}
# Inbound message fields that carry a file, and the media kind they become.
INBOUND_MEDIA = (("photo", "image"), ("document", "document"), ("voice", "voice"),
                 ("audio", "audio"), ("video", "video"), ("animation", "video"),
                 ("video_note", "video"), ("sticker", "image"))


class TelegramAccount(AccountConfig):
    """``[channels.telegram.accounts.<name>]``."""

    bot_token: str = Field(min_length=1)
    api_base: str = DEFAULT_API_BASE
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str | None = None  # the public URL Telegram posts to (webhook mode)
    secret_token: str | None = None  # echoed by Telegram in X-Telegram-Bot-Api-Secret-Token
    poll_timeout: int = Field(30, ge=0, le=50)
    allowed_updates: list[str] = Field(default_factory=lambda: ["message"])

    @field_validator("secret_token")
    @classmethod
    def _secret(cls, value: str | None) -> str | None:
        if value is not None and not _SECRET_TOKEN.fullmatch(value):
            raise ValueError("expected 1-256 characters of A-Z a-z 0-9 _ -")
        return value


def _chat_of(update: dict[str, Any]) -> Any:
    message = update.get("message")
    if isinstance(message, dict) and isinstance(message.get("chat"), dict):
        return message["chat"].get("id")
    return None  # updates we skip: any order will do


def _has_file(update: dict[str, Any]) -> bool:
    message = update.get("message")
    return isinstance(message, dict) and any(field in message for field, _ in INBOUND_MEDIA)


def _display_name(user: dict[str, Any]) -> str:
    name = " ".join(part for part in (user.get("first_name"), user.get("last_name")) if part)
    return name or user.get("username") or ""


class TelegramChannel(Channel):
    """One bot."""

    name = "telegram"
    account_model = TelegramAccount
    limits = ChannelLimits(
        text_limit=4096, text_unit="utf16", caption_limit=1024,
        media_kinds={".jpg": "photo", ".jpeg": "photo", ".png": "photo", ".webp": "photo",
                     ".mp4": "video", ".mov": "video", ".webm": "video",
                     ".mp3": "audio", ".m4a": "audio", ".flac": "audio", ".wav": "audio",
                     ".ogg": "voice", ".oga": "voice", ".opus": "voice",
                     ".gif": "animation"},
        default_media_kind="document",
        rates={"account": RateLimit(30, 1.0), "chat": RateLimit(1, 1.0),
               "group": RateLimit(20, 60.0)},
        retry_base_delay=0.4,
    )
    markup: ClassVar[str | None] = "telegram_html"

    def __init__(self, account, settings=None) -> None:
        super().__init__(account, settings)
        self.api = BotAPI(self.config.bot_token, self.config.api_base,
                          timeout=self.config.poll_timeout + 15)
        self.bot: dict[str, Any] | None = None
        #: Why polling is stuck, when it is (another poller, a rejected token).
        self.problem: str | None = None
        self._deliver: Deliver | None = None
        if self.config.mode == "webhook" and not self.config.webhook_url:
            from chatkernel.core.config import ConfigError

            raise ConfigError("webhook mode needs webhook_url (the public URL Telegram posts "
                              "to)", key=f"channels.telegram.accounts.{account.name}.webhook_url")

    @property
    def webhook_path(self) -> str:
        return f"/telegram/{self.account.name}/webhook"

    # -- receiving ----------------------------------------------------------------

    async def run(self, deliver: Deliver) -> None:
        self._deliver = deliver
        while True:  # a rejected token or a network outage waits here, not in restarts
            try:
                await self._identify()
                break
            except TelegramError as exc:
                await self._poll_failed(exc)
        if self.config.mode == "webhook":
            await self.api.call("setWebhook", {
                "url": self.config.webhook_url, "secret_token": self.config.secret_token,
                "allowed_updates": self.config.allowed_updates})
            log.info("%s: webhook set", self.account.key)
            self.report_alive()
            await anyio.sleep_forever()
        # Polling: a webhook left from an earlier run would make getUpdates fail.
        await self.api.call("deleteWebhook", {"drop_pending_updates": False})
        offset = int(await self.load_cursor() or 0)
        while True:
            try:
                updates = await self.api.call("getUpdates", {
                    "offset": offset or None, "timeout": self.config.poll_timeout,
                    "allowed_updates": self.config.allowed_updates})
            except TelegramError as exc:
                await self._poll_failed(exc)
                continue
            self.problem = None
            # An answered poll, even an empty one, is the platform's sign of life: the
            # health monitor restarts a loop only when these stop coming.
            self.report_alive()
            if not updates:
                continue
            # The offset moves once the whole batch is journaled (a crash before
            # that gets it again, and dedupe drops what was already in).
            await deliver_many(deliver, await self._normalize_batch(updates))
            offset = max(int(update["update_id"]) for update in updates) + 1
            await self.save_cursor(str(offset))

    async def _poll_failed(self, exc: TelegramError) -> None:
        if exc.error_code == 409:
            # Not a crash to restart from: another process owns this token.
            self.problem = "another instance is polling this bot token"
            log.error("%s: %s (Telegram: %s); retrying in %.0fs", self.account.key,
                      self.problem, exc.description, CONFLICT_BACKOFF_SECONDS)
            await anyio.sleep(CONFLICT_BACKOFF_SECONDS)
        elif exc.error_code in (401, 404):
            # 404 is what the Bot API answers for a malformed token. Restarting will
            # not fix either: wait, keep the account red, try again later.
            self.problem = "token rejected"
            log.error("%s: %s (Telegram: %s); retrying in %.0fs", self.account.key,
                      self.problem, exc.description, REJECTED_BACKOFF_SECONDS)
            await anyio.sleep(REJECTED_BACKOFF_SECONDS)
        else:
            log.warning("%s: getUpdates failed: %s", self.account.key, exc)
            await anyio.sleep(exc.retry_after or POLL_ERROR_BACKOFF_SECONDS)

    async def _identify(self) -> dict[str, Any]:
        if self.bot is None:
            self.bot = await self.api.call("getMe")
        return self.bot

    async def _normalize_batch(self, updates: list[dict[str, Any]]) -> list[InboundMessage]:
        """The batch's messages in update order (see :func:`normalize_batch`)."""
        return await normalize_batch(updates, self.normalize, chat_of=_chat_of,
                                     downloads=_has_file, account=self.account.key,
                                     describe=lambda u: f"update {u.get('update_id')}")

    async def normalize(self, update: dict[str, Any]) -> InboundMessage | None:
        """An Update as an InboundMessage (None for updates that are not messages)."""
        data = update.get("message")
        if not isinstance(data, dict) or "chat" not in data:
            return None
        bot = await self._identify()
        chat = data["chat"]
        sender = data.get("from") or {}
        is_group = chat.get("type") in ("group", "supergroup")
        text = data.get("text") or data.get("caption") or ""
        entities = data.get("entities") or data.get("caption_entities") or []
        reply = data.get("reply_to_message") or {}
        thread = data.get("message_thread_id") if data.get("is_topic_message") else None
        media = [ref for ref in [await self._download(data, field, kind)
                                 for field, kind in INBOUND_MEDIA if field in data] if ref]
        return InboundMessage(
            channel=self.name, account=self.account.name, chat_id=str(chat["id"]),
            # message_id is unique within a chat only.
            message_id=f"{chat['id']}:{data['message_id']}",
            sender_id=str(sender.get("id", chat["id"])), sender_name=_display_name(sender),
            text=text, thread_id=str(thread) if thread is not None else None,
            is_group=is_group, mentions_bot=self._mentions(text, entities, bot),
            reply_to_bot=(reply.get("from") or {}).get("id") == bot.get("id"),
            media=media, timestamp=float(data.get("date", time.time())))

    @staticmethod
    def _mentions(text: str, entities: list[dict[str, Any]], bot: dict[str, Any]) -> bool:
        username = (bot.get("username") or "").lower()
        encoded = text.encode("utf-16-le")
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
        name = item.get("file_name")
        size = item.get("file_size")
        if size is not None and size > DOWNLOAD_MAX_BYTES:
            return MediaRef(kind=kind, filename=name, size=size, platform_id=item["file_id"],
                            note="not saved: over the Bot API's 20 MB download limit")
        try:
            info = await self.api.call("getFile", {"file_id": item["file_id"]})
            path = info["file_path"]
            return await self.save_media(self.api.download(path), kind=kind,
                                         filename=name or Path(path).name,
                                         mime=item.get("mime_type"),
                                         platform_id=item["file_id"], declared_size=size)
        except TelegramError as exc:
            log.warning("%s: could not download a %s: %s", self.account.key, field, exc)
            return MediaRef(kind=kind, filename=name, size=size, platform_id=item["file_id"],
                            note=f"not saved: {exc}")

    def http_routes(self) -> list[tuple[str, str, Any]]:
        if self.config.mode != "webhook":
            return []
        return [("POST", self.webhook_path, self._webhook)]

    async def _webhook(self, request: web.Request) -> web.Response:
        expected = self.config.secret_token
        given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if expected is None or not hmac.compare_digest(given.encode(), expected.encode()):
            # Nothing is processed without the secret Telegram was given.
            return web.json_response({"error": "wrong or missing secret token"}, status=401)
        if self._deliver is None:
            return web.json_response({"error": "not running"}, status=503)  # Telegram retries
        try:
            update = await request.json()
        except ValueError:
            return web.json_response({"error": "the body must be JSON"}, status=400)
        if not isinstance(update, dict):
            return web.json_response({"error": "the body must be an Update"}, status=400)
        await deliver_many(self._deliver, await self._normalize_batch([update]))
        return web.json_response({"ok": True})

    # -- sending ------------------------------------------------------------------------

    async def send(self, route: Route, payload: OutboundPayload) -> SendResult:
        params: dict[str, Any] = {"chat_id": route.chat_id}
        if route.thread_id:
            params["message_thread_id"] = int(route.thread_id)
        if route.reply_to and payload.chunk_index == 1:
            reply_to = route.reply_to.rsplit(":", 1)[-1]
            params["reply_parameters"] = {"message_id": int(reply_to),
                                          "allow_sending_without_reply": True}
        if payload.is_media:
            path = payload.media_path
            assert path is not None
            kind = payload.media_kind or "document"
            if kind == "photo" and path.stat().st_size > PHOTO_MAX_BYTES:
                kind = "document"  # Telegram's photo cap; a document keeps the file whole
            method, field = SEND_METHODS.get(kind, SEND_METHODS["document"])
            if payload.caption:
                caption, markup = self.render_text(
                    OutboundPayload(text=payload.caption, format=payload.format))
                params["caption"] = caption
                if markup:
                    params["parse_mode"] = "HTML"
            result = await self._send(method, params, files={field: path})
        else:
            text, markup = self.render_text(payload)
            params["text"] = text
            if markup:
                params["parse_mode"] = "HTML"
            params["link_preview_options"] = {"is_disabled": False}
            result = await self._send("sendMessage", params)
        return SendResult(message_id=str(result.get("message_id")) if result else None)

    async def _send(self, method: str, params: dict[str, Any],
                    files: dict[str, Path] | None = None) -> Any:
        try:
            return await self.api.call(method, params, files=files)
        except TelegramError as exc:
            raise self._send_error(exc) from None

    @staticmethod
    def _send_error(exc: TelegramError) -> SendError:
        code = exc.error_code
        description = exc.description
        if not exc.sent:
            return SendError(description, retryable=True)  # it never left
        if code == 0:
            # No answer: Telegram may have delivered it. Never resend blindly.
            return SendError(description, delivery_unknown=True)
        if exc.migrate_to_chat_id is not None:
            return SendError(description, status=code, moved_to=str(exc.migrate_to_chat_id))
        return SendError(description, status=code, code=code,
                         retryable=code in (429, 502, 503, 504),
                         retry_after=exc.retry_after,
                         markup_rejected=code == 400 and "can't parse entities" in description)

    async def indicate(self, route: Route) -> None:
        params: dict[str, Any] = {"chat_id": route.chat_id, "action": "typing"}
        if route.thread_id:
            params["message_thread_id"] = int(route.thread_id)
        await self.api.call("sendChatAction", params, timeout=10)

    def is_quiet(self) -> bool:
        # A webhook waits for Telegram to call: silence says nothing, the probe does.
        return self.config.mode == "webhook"

    async def probe(self) -> ProbeResult:
        started = time.monotonic()
        try:
            me = await self.api.call("getMe", timeout=10)
        except TelegramError as exc:
            # A rejected token stays rejected: restarting the loop cannot help.
            rejected = exc.error_code in (401, 404)
            detail = "token rejected" if rejected else str(exc)
            return ProbeResult(ok=False, detail=detail, restartable=not rejected,
                               latency_ms=(time.monotonic() - started) * 1000)
        latency = (time.monotonic() - started) * 1000
        self.bot = me
        if self.problem:
            # Another poller or a rejected token: a person has to act, not the monitor.
            return ProbeResult(ok=False, detail=self.problem, latency_ms=latency,
                               restartable=False, extra={"username": me.get("username")})
        return ProbeResult(ok=True, detail=f"@{me.get('username')}", latency_ms=latency,
                           extra={"username": me.get("username"), "id": me.get("id")})

    async def aclose(self) -> None:
        await self.api.close()
