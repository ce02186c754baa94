"""A protocol-faithful fake of the Telegram Bot API, for tests and offline development.

:class:`FakeBotAPI` is a real aiohttp server on 127.0.0.1 that speaks the Bot API wire
format (https://core.telegram.org/bots/api): the same URL shapes
(``{base_url}/bot<TOKEN>/<method>``, ``{base_url}/file/bot<TOKEN>/<file_path>``), the same
parameter encodings (query string, form, JSON, multipart), the same answers
(``{"ok":true,"result":...}``) and the same errors, with Telegram's wording, HTTP status
equal to ``error_code`` and ``parameters`` (``retry_after``, ``migrate_to_chat_id``)::

    async with FakeBotAPI(token="123456:ABC-DEF", username="chatkernel_bot") as api:
        client = MyClient(api_base=api.base_url, token=api.token)
        update_id = api.inject_message(42, "hello @chatkernel_bot")
        ...                                   # the client polls getUpdates and answers
        sent = await api.wait_for_sent(1)
        assert sent[0].text == "hi"

What it models, beyond the happy path: getUpdates offsets (confirm / forget, negative
offsets), long polling woken by injected updates, the 409 for a second poller ("terminated
by other getUpdates request") and for polling while a webhook is set, webhook delivery
with the secret-token header and retries, HTML / MarkdownV2 / Markdown entity parsing
with TDLib's error wording ("can't parse entities: ... at byte offset N"), the 4096 and
1024 UTF-16 limits, upload size caps, getFile and downloads (20 MB), group-to-supergroup
migration, optional rate limits answering 429 with ``retry_after``, added latency, and
injected failures and dropped connections; and live replies: ``sendMessageDraft`` (private
chats only, a non-zero ``draft_id``, as the Bot API refuses otherwise), ``editMessageText``
("message is not modified", "message to edit not found") and ``deleteMessage``, each
recorded in :attr:`FakeBotAPI.drafts`, :attr:`FakeBotAPI.edits` and the order of
:attr:`FakeBotAPI.history`.

It is built on the kernel's fake-platform base (:mod:`chatkernel.testing.fake_platform`:
the server, the call record, faults, rate windows, latency, webhook pushes) and reads
markup with :mod:`chatkernel_telegram.entities`; it ships with the plugin and works
offline. It is a model, not Telegram: Markdown parsing is close to TDLib's but not
byte-for-byte, URLs given to send* methods are not fetched, and methods not listed in
:meth:`FakeBotAPI.methods` answer 404 like an unknown method.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import itertools
import json
import math
import mimetypes
import re
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from chatkernel.testing import fake_platform
from chatkernel.testing.devserver import bad_request, fields, json_body, listing
from chatkernel.testing.fake_platform import (
    ErrorAnswer,
    FakePlatform,
    SecretTokenSigner,
    json_object,
)
from chatkernel_telegram.entities import (
    EntityParseError,
    detect_entities,
    parse_entities,
    parse_html,
    parse_markdown,
    parse_markdown_v2,
    utf16_len,
)

__all__ = [
    "DEFAULT_TOKEN",
    "BotAPIError",
    "Call",
    "ChatActionRecord",
    "EntityParseError",
    "FakeBotAPI",
    "SentFile",
    "SentMessage",
    "StoredFile",
    "UploadedFile",
    "WebhookDelivery",
    "detect_entities",
    "parse_entities",
    "parse_html",
    "parse_markdown",
    "parse_markdown_v2",
    "utf16_len",
]

#: The example token from Telegram's documentation.
DEFAULT_TOKEN = "123456:ABC-DEF1234ghIkl-zyx57W2v1u123ew11"

MB = 1024 * 1024
#: What ``POST /_fake/messages`` takes (:meth:`FakeBotAPI.developer_routes`).
DEVELOPER_MESSAGE_FIELDS = {"chat_id": int, "text": str, "from_id": int, "chat_type": str,
                            "chat_title": str, "message_thread_id": int}
TEXT_LIMIT = 4096
CAPTION_LIMIT = 1024

#: ``sendChatAction`` actions, as documented.
CHAT_ACTIONS = (
    "typing", "upload_photo", "record_video", "upload_video", "record_voice",
    "upload_voice", "upload_document", "choose_sticker", "find_location",
    "record_video_note", "upload_video_note",
)

#: Update kinds (the optional fields of ``Update``), for ``allowed_updates``.
UPDATE_TYPES = (
    "message", "edited_message", "channel_post", "edited_channel_post",
    "business_connection", "business_message", "edited_business_message",
    "deleted_business_messages", "guest_message", "message_reaction",
    "message_reaction_count", "inline_query", "chosen_inline_result", "callback_query",
    "shipping_query", "pre_checkout_query", "purchased_paid_media", "poll", "poll_answer",
    "my_chat_member", "chat_member", "chat_join_request", "chat_boost",
    "removed_chat_boost", "managed_bot",
)
#: Sent only when asked for explicitly in ``allowed_updates``.
OPT_IN_UPDATE_TYPES = frozenset({"chat_member", "message_reaction", "message_reaction_count"})

_SEND_COMMON = (
    "business_connection_id", "chat_id", "message_thread_id", "direct_messages_topic_id",
    "disable_notification", "protect_content", "allow_paid_broadcast", "message_effect_id",
    "suggested_post_parameters", "reply_parameters", "reply_markup",
)
#: Parameters Telegram still accepts although the current docs no longer list them.
LEGACY_PARAMS = frozenset({"reply_to_message_id", "allow_sending_without_reply",
                           "disable_web_page_preview"})
_CAPTIONED = ("caption", "parse_mode", "caption_entities")

#: The parameters each implemented method reads (Bot API 10.1, plus LEGACY_PARAMS).
#: Anything else a client sends is recorded in :attr:`FakeBotAPI.unknown_params`.
METHOD_PARAMS: dict[str, frozenset[str]] = {
    "getMe": frozenset(),
    "logOut": frozenset(),
    "close": frozenset(),
    "getUpdates": frozenset({"offset", "limit", "timeout", "allowed_updates"}),
    "setWebhook": frozenset({"url", "certificate", "ip_address", "max_connections",
                             "allowed_updates", "drop_pending_updates", "secret_token"}),
    "deleteWebhook": frozenset({"drop_pending_updates"}),
    "getWebhookInfo": frozenset(),
    "sendMessage": frozenset({*_SEND_COMMON, "text", "parse_mode", "entities",
                              "link_preview_options", *LEGACY_PARAMS}),
    "sendPhoto": frozenset({*_SEND_COMMON, *_CAPTIONED, "photo", "show_caption_above_media",
                            "has_spoiler", "reply_to_message_id",
                            "allow_sending_without_reply"}),
    "sendDocument": frozenset({*_SEND_COMMON, *_CAPTIONED, "document", "thumbnail",
                               "disable_content_type_detection", "reply_to_message_id",
                               "allow_sending_without_reply"}),
    "sendVideo": frozenset({*_SEND_COMMON, *_CAPTIONED, "video", "duration", "width",
                            "height", "thumbnail", "cover", "start_timestamp",
                            "show_caption_above_media", "has_spoiler", "supports_streaming",
                            "reply_to_message_id", "allow_sending_without_reply"}),
    "sendAudio": frozenset({*_SEND_COMMON, *_CAPTIONED, "audio", "duration", "performer",
                            "title", "thumbnail", "reply_to_message_id",
                            "allow_sending_without_reply"}),
    "sendVoice": frozenset({*_SEND_COMMON, *_CAPTIONED, "voice", "duration",
                            "reply_to_message_id", "allow_sending_without_reply"}),
    "sendAnimation": frozenset({*_SEND_COMMON, *_CAPTIONED, "animation", "duration", "width",
                                "height", "thumbnail", "show_caption_above_media",
                                "has_spoiler", "reply_to_message_id",
                                "allow_sending_without_reply"}),
    "sendChatAction": frozenset({"business_connection_id", "chat_id", "message_thread_id",
                                 "action"}),
    "sendMessageDraft": frozenset({"chat_id", "message_thread_id", "draft_id", "text",
                                   "parse_mode", "entities"}),
    "editMessageText": frozenset({"business_connection_id", "chat_id", "message_id",
                                  "inline_message_id", "text", "parse_mode", "entities",
                                  "link_preview_options", "reply_markup", "rich_message"}),
    "deleteMessage": frozenset({"chat_id", "message_id"}),
    "getFile": frozenset({"file_id"}),
    "setMyCommands": frozenset({"commands", "scope", "language_code"}),
    "getMyCommands": frozenset({"scope", "language_code"}),
    "deleteMyCommands": frozenset({"scope", "language_code"}),
}

#: send* method -> (parameter holding the file, Message field, folder of file_path).
MEDIA_METHODS: dict[str, tuple[str, str]] = {
    "sendPhoto": ("photo", "photos"),
    "sendDocument": ("document", "documents"),
    "sendVideo": ("video", "videos"),
    "sendAudio": ("audio", "music"),
    "sendVoice": ("voice", "voice"),
    "sendAnimation": ("animation", "animations"),
}
_FILE_ID_PREFIX = {"photo": "AgACAgIAAxkBAA", "document": "BQACAgIAAxkBAA",
                   "video": "BAACAgIAAxkBAA", "audio": "CQACAgIAAxkBAA",
                   "voice": "AwACAgIAAxkBAA", "animation": "CgACAgIAAxkBAA",
                   None: "BQACAgIAAxkBAA"}


# ---------------------------------------------------------------------------------------
# Records the tests read back
# ---------------------------------------------------------------------------------------


@dataclass
class UploadedFile:
    """A file part of a multipart request, as the server received it."""

    name: str                      # the form field ("photo", "document", ...)
    filename: str | None
    content_type: str | None
    data: bytes = field(repr=False)

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass
class StoredFile:
    """A file the fake holds: uploaded by a client, or added by a test."""

    file_id: str
    file_unique_id: str
    token: str                     # file ids are per bot, as on Telegram
    data: bytes = field(repr=False)
    filename: str | None
    mime_type: str | None
    file_path: str
    kind: str | None               # photo, document, ... (None: usable as anything)
    url: str | None = None         # sent by URL (never fetched)

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass
class SentFile:
    """One file of a send* call: how it arrived and what it became."""

    field: str                     # the parameter: photo, document, video, ...
    method: str
    source: str                    # "upload" | "file_id" | "url"
    filename: str | None
    content_type: str | None
    data: bytes | None = field(repr=False)
    size: int
    file_id: str
    url: str | None = None


@dataclass
class SentMessage:
    """A message the bot sent (sendMessage or a send* media method)."""

    token: str
    method: str
    chat_id: int
    text: str | None               # the text or caption as sent (markup included)
    parse_mode: str | None
    message_thread_id: int | None
    reply_to: int | None           # the message id it replies to
    files: list[SentFile]
    timestamp: float
    message: dict[str, Any] = field(repr=False)   # the Message the fake answered
    plain_text: str | None = None  # text / caption after entity parsing
    entities: list[dict[str, Any]] = field(default_factory=list)
    kind: str = "text"             # text | photo | document | video | audio | voice | animation
    params: dict[str, Any] = field(default_factory=dict, repr=False)

    #: Edits since it was sent (editMessageText), and whether deleteMessage removed it.
    edits: int = 0
    deleted: bool = False

    @property
    def message_id(self) -> int:
        return int(self.message["message_id"])


@dataclass
class DraftRecord:
    """One sendMessageDraft: the draft ``draft_id`` of a private chat showed ``plain_text``."""

    token: str
    chat_id: int
    draft_id: int
    text: str
    plain_text: str
    timestamp: float


@dataclass
class ChatActionRecord:
    token: str
    chat_id: int
    action: str
    message_thread_id: int | None
    timestamp: float


@dataclass(kw_only=True)
class Call(fake_platform.Call):
    """Every request that reached a known bot and method, in arrival order: ``method`` in
    its canonical spelling ("sendMessage"), ``params`` decoded (file parts as
    UploadedFile), ``status`` the HTTP status answered (None: dropped, not answered yet)."""

    token: str

    @property
    def description(self) -> str | None:
        """The error description, if the call failed."""
        return self.error.description if isinstance(self.error, BotAPIError) else None


@dataclass
class WebhookDelivery:
    """One POST of an update to the bot's webhook."""

    token: str
    url: str
    update_id: int
    attempt: int                   # 1 for the first try
    status: int | None             # HTTP status, None when the connection failed
    error: str | None
    secret_token: str | None       # the X-Telegram-Bot-Api-Secret-Token header sent
    timestamp: float
    update: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class BotAPIError(ErrorAnswer):
    """An error answer: ``{"ok":false,"error_code":code,"description":...}``, HTTP status
    ``code``."""

    def __init__(self, code: int, description: str,
                 parameters: dict[str, Any] | None = None) -> None:
        self.code = code
        self.description = description
        self.parameters = parameters
        super().__init__(code, self.payload(), message=description)

    def payload(self) -> dict[str, Any]:
        body: dict[str, Any] = {"ok": False, "error_code": self.code,
                                "description": self.description}
        if self.parameters:
            body["parameters"] = dict(self.parameters)
        return body


def _bad(reason: str, parameters: dict[str, Any] | None = None) -> BotAPIError:
    return BotAPIError(400, f"Bad Request: {reason}", parameters)


# ---------------------------------------------------------------------------------------
# Request parameters
# ---------------------------------------------------------------------------------------


class _Params:
    """Decoded request parameters with the Bot API's lenient typing."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def present(self, name: str) -> bool:
        value = self.values.get(name)
        return value is not None and value != ""

    def raw(self, name: str) -> Any:
        return self.values.get(name)

    def str(self, name: str) -> str | None:
        value = self.values.get(name)
        if value is None or isinstance(value, UploadedFile):
            return None
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (dict, list)):
            return json.dumps(value)
        return str(value)

    def int(self, name: str, default: int | None = None) -> int | None:
        value = self.values.get(name)
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                return default
        return default

    def float(self, name: str, default: float = 0.0) -> float:
        value = self.values.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                result = float(value.strip())
            except ValueError:
                return default
            return result if math.isfinite(result) else default
        return default

    def bool(self, name: str) -> bool:
        value = self.values.get(name)
        if isinstance(value, str):
            return value.strip().lower() in ("true", "1", "yes")
        return bool(value)

    def json(self, name: str, what: str | None = None) -> Any:
        value = self.values.get(name)
        if value is None or value == "":
            return None
        if isinstance(value, (dict, list, int, float, bool)):
            return value
        if isinstance(value, UploadedFile):
            value = value.data.decode("utf-8", "replace")
        try:
            return json.loads(value)
        except ValueError:
            raise _bad(f"can't parse {what or name.replace('_', ' ')} JSON object") from None


# ---------------------------------------------------------------------------------------
# Per-bot state
# ---------------------------------------------------------------------------------------


@dataclass
class _Webhook:
    url: str
    secret_token: str | None
    max_connections: int
    ip_address: str | None
    generation: int


@dataclass
class _Poll:
    terminated: bool = False
    done: bool = False


@dataclass
class _Bot:
    token: str
    user: dict[str, Any]
    first_update_id: int
    pending: list[dict[str, Any]] = field(default_factory=list)
    history: dict[int, dict[str, Any]] = field(default_factory=dict)
    next_update_id: int = 0
    allowed_updates: list[str] | None = None
    webhook: _Webhook | None = None
    webhook_generation: int = 0
    webhook_worker: bool = False
    last_error_date: int | None = None
    last_error_message: str | None = None
    poll: _Poll | None = None
    signal: fake_platform.Signal = field(default_factory=fake_platform.Signal)
    commands: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    revoked: bool = False

    def __post_init__(self) -> None:
        self.next_update_id = self.first_update_id

    def allows(self, update: dict[str, Any]) -> bool:
        kind = next((k for k in update if k != "update_id"), None)
        if kind is None:
            return True
        if self.allowed_updates:
            return kind in self.allowed_updates
        return kind not in OPT_IN_UPDATE_TYPES


def _update_id(update: dict[str, Any]) -> int:
    return update["update_id"]


def _image_size(data: bytes) -> tuple[int, int] | None:
    """Width and height of a PNG, GIF or JPEG, read from its header."""
    try:
        if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
            return struct.unpack(">II", data[16:24])
        if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
            return struct.unpack("<HH", data[6:10])
        if data[:2] == b"\xff\xd8":
            i = 2
            while i + 9 < len(data):
                if data[i] != 0xFF:
                    return None
                marker = data[i + 1]
                if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                    height, width = struct.unpack(">HH", data[i + 5:i + 9])
                    return width, height
                i += 2 + struct.unpack(">H", data[i + 2:i + 4])[0]
    except struct.error:
        return None
    return None


def _for_bot(token: str | None) -> Callable[[fake_platform.Call], bool] | None:
    """A fault's condition: calls made with ``token`` (None: with any bot's)."""
    if token is None:
        return None
    return lambda call: getattr(call, "token", None) == token


_SECRET_TOKEN = re.compile(r"^[A-Za-z0-9_-]*$")
_WEBHOOK_ACTIVE = ("Conflict: can't use getUpdates method while webhook is active; "
                   "use deleteWebhook to delete the webhook first")
_BOT_COMMAND = re.compile(r"^[a-z0-9_]{1,32}$")


# ---------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------


#: A dev server's config snippet (:meth:`FakeBotAPI.config_snippet`).
DEV_SNIPPET = """# the fake Bot API is up; point an account at it:
#   export TELEGRAM_BOT_TOKEN={api.token}
[channels.telegram.accounts.main]
bot_token = "${{TELEGRAM_BOT_TOKEN}}"
api_base = "{api.base_url}"
allow_from = ["*"]
# then write as a user:
#   curl -d '{{"chat_id": 42, "text": "hello"}}' {api.base_url}/_fake/messages
#   curl '{api.base_url}/_fake/sent?chat_id=42&wait=10'"""


class FakeBotAPI(FakePlatform):
    """The Telegram Bot API, on ``127.0.0.1``: ``async with FakeBotAPI() as api``.

    Give clients ``api.base_url`` as their API root and ``api.token``. Tests drive it with
    ``inject_message`` / ``inject_update`` and read back ``sent()``, ``chat_actions``,
    ``calls`` and ``webhook_deliveries``. See the module docstring for what it models;
    the server, ``latency``, the call record and ``wait_until`` are
    :class:`~chatkernel.testing.fake_platform.FakePlatform`'s.
    """

    #: ``getUpdates`` timeouts above this are clamped (Telegram's own cap is 50 s).
    max_poll_timeout: float = 50.0
    #: Multipart upload caps: photos 10 MB, other files 50 MB; getFile serves up to 20 MB.
    max_photo_upload: int = 10 * MB
    max_upload: int = 50 * MB
    max_download: int = 20 * MB

    def __init__(self, token: str = DEFAULT_TOKEN, username: str = "chatkernel_bot", *,
                 first_name: str | None = None, host: str = "127.0.0.1", port: int = 0,
                 strict_chats: bool = False,
                 extra_routes: Callable[[FakeBotAPI], list[web.RouteDef]] | None = None
                 ) -> None:
        super().__init__(host=host, port=port, extra_routes=extra_routes)
        #: When True, sends to chats that were never declared (``add_chat``) or seen
        #: (``inject_message``) answer 400 "chat not found".
        self.strict_chats = strict_chats
        #: Delays between webhook delivery attempts; attempts = len + 1, then the update
        #: is given up (Telegram retries longer, but also gives up eventually).
        self.webhook_retry_delays: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4)
        self.webhook_timeout = 10.0
        #: Telegram accepts only HTTPS webhooks; the fake accepts http:// too unless this
        #: is set (local tests have no certificates).
        self.require_https_webhooks = False

        self.calls: list[Call] = []
        self.chat_actions: list[ChatActionRecord] = []
        self.webhook_deliveries: list[WebhookDelivery] = []
        #: (method, parameter) pairs a client sent that the method does not take.
        self.unknown_params: list[tuple[str, str]] = []
        #: Methods called with an unknown or revoked token (answered 401), in order.
        self.unauthorized_calls: list[str] = []
        #: Every draft state shown (sendMessageDraft), in order.
        self.drafts: list[DraftRecord] = []
        #: ``(message, its new visible text)`` for every editMessageText, in order.
        self.edits: list[tuple[SentMessage, str]] = []
        #: What a user saw change, in order: ``(kind, chat_id, visible text)``, kind
        #: ``"draft"``, ``"message"`` (sent), ``"edit"`` or ``"delete"``.
        self.history: list[tuple[str, int, str]] = []

        self._bots: dict[str, _Bot] = {}
        self._default_token = token
        self._chats: dict[int, dict[str, Any]] = {}
        self._migrated: dict[int, int] = {}
        self._blocked: dict[int, tuple[int, str]] = {}
        self._messages: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
        self._message_ids: dict[tuple[str, int], itertools.count[int]] = {}
        self._files: dict[str, StoredFile] = {}
        self._file_paths: dict[tuple[str, str], StoredFile] = {}
        self._photo_sizes: dict[str, list[dict[str, Any]]] = {}
        self._file_counter = itertools.count(1)
        self._limits: dict[str, float] | None = None
        self.add_bot(token, username, first_name=first_name)

    @property
    def client_max_size(self) -> int:  # type: ignore[override]
        return self.max_upload + 16 * MB

    def routes(self) -> list[web.RouteDef]:
        return [web.route("*", "/file/bot{token}/{file_path:.+}", self._download),
                web.route("*", "/bot{token}/{method}", self._handle)]

    def developer_info(self) -> dict[str, Any]:
        return {**super().developer_info(), "token": self.token}

    def config_snippet(self) -> str:
        """An account pointed at the fake, and how to write as a user."""
        return DEV_SNIPPET.format(api=self)

    def developer_routes(self) -> list[web.RouteDef]:
        """A dev server's routes: ``POST /_fake/messages`` (a user writes: ``chat_id``,
        optional ``text``, ``from_id``, ``chat_type``, ``chat_title``,
        ``message_thread_id``; answers the ``update_id``) and ``GET /_fake/sent``
        (``?chat_id=``, ``?wait=``, ``?after=``: what the bot sent)."""

        async def inject(request: web.Request) -> web.Response:
            body = fields(await json_body(request), DEVELOPER_MESSAGE_FIELDS,
                          required=("chat_id",))
            chat_id, text = body.pop("chat_id"), body.pop("text", None)
            if "message_thread_id" in body:
                body["is_topic_message"] = True
            return web.json_response({"update_id": self.inject_message(chat_id, text, **body)})

        async def sent(request: web.Request) -> web.Response:
            chat = request.query.get("chat_id")
            if chat is not None and not chat.lstrip("-").isdigit():
                raise bad_request(f"chat_id must be a number, not {chat!r}")
            chat_id = int(chat) if chat is not None else None
            return web.json_response({"messages": [
                {"chat_id": s.chat_id, "method": s.method, "text": s.plain_text,
                 "parse_mode": s.parse_mode, "kind": s.kind}
                for s in await listing(request, self, lambda: self.sent(chat_id=chat_id))]})

        return [web.post("/_fake/messages", inject), web.get("/_fake/sent", sent)]

    def record_sent(self, message: SentMessage) -> None:
        super().record_sent(message)
        self.narrate(f"bot -> chat {message.chat_id}: {message.method} (parse_mode "
                     f"{message.parse_mode or 'none'}, {message.kind}): {message.text!r}")

    async def serve_call(self, request, call, answer):
        response = await super().serve_call(request, call, answer)
        if call.error is not None:
            self.narrate(f"bot -> {call.method} refused: {call.error}")
        return response

    # -- bots -----------------------------------------------------------------------------

    @property
    def token(self) -> str:
        """The default bot's token (the one given to the constructor)."""
        return self._default_token

    @property
    def username(self) -> str:
        return self._bots[self._default_token].user["username"]

    @property
    def bot_id(self) -> int:
        return self._bots[self._default_token].user["id"]

    def bot_user(self, token: str | None = None) -> dict[str, Any]:
        """The bot as a ``User`` in messages: id, is_bot, first_name, username."""
        user = self._bot(token).user
        return {k: user[k] for k in ("id", "is_bot", "first_name", "username")}

    def add_bot(self, token: str, username: str, *, first_name: str | None = None,
                can_join_groups: bool = True, can_read_all_group_messages: bool = False,
                supports_inline_queries: bool = False) -> dict[str, Any]:
        """Registers another bot (token). Returns its getMe ``User``."""
        head = token.split(":", 1)[0]
        bot_id = int(head) if head.isdigit() else 7_000_000_000 + len(self._bots)
        user = {"id": bot_id, "is_bot": True, "first_name": first_name or username,
                "username": username, "can_join_groups": can_join_groups,
                "can_read_all_group_messages": can_read_all_group_messages,
                "supports_inline_queries": supports_inline_queries,
                "can_connect_to_business": False, "has_main_web_app": False}
        # Update ids start from "a certain positive number": a different one per bot.
        first_update_id = 100_000_001 + 10_000_000 * len(self._bots)
        self._bots[token] = _Bot(token=token, user=user, first_update_id=first_update_id,
                                 signal=self.new_signal())
        return dict(user)

    def revoke_token(self, token: str | None = None) -> None:
        """The token stops working: every method answers 401 Unauthorized."""
        self._bot(token).revoked = True

    def _bot(self, token: str | None) -> _Bot:
        return self._bots[token or self._default_token]

    # -- chats ----------------------------------------------------------------------------

    @staticmethod
    def _chat_type_for(chat_id: int) -> str:
        if chat_id > 0:
            return "private"
        return "supergroup" if chat_id <= -1_000_000_000_000 else "group"

    def add_chat(self, chat_id: int, type: str | None = None, *, title: str | None = None,
                 username: str | None = None, first_name: str | None = None,
                 is_forum: bool = False) -> dict[str, Any]:
        """Declares a chat (needed with ``strict_chats``). Returns its ``Chat``."""
        kind = type or self._chat_type_for(chat_id)
        chat: dict[str, Any] = {"id": chat_id, "type": kind}
        if kind == "private":
            chat["first_name"] = first_name or "User"
        else:
            chat["title"] = title or f"{kind.title()} {chat_id}"
        if username:
            chat["username"] = username
        if is_forum and kind == "supergroup":
            chat["is_forum"] = True
        self._chats[chat_id] = chat
        return dict(chat)

    def migrate_chat(self, old_chat_id: int, new_chat_id: int, *,
                     inject_service_messages: bool = False,
                     token: str | None = None) -> None:
        """The group became a supergroup: sends to ``old_chat_id`` answer 400 "group chat
        was upgraded to a supergroup chat" with ``parameters.migrate_to_chat_id``. With
        ``inject_service_messages`` the two service messages (``migrate_to_chat_id`` in
        the old chat, ``migrate_from_chat_id`` in the new one) arrive as updates."""
        self._migrated[old_chat_id] = new_chat_id
        old = self._chats.get(old_chat_id) or {"id": old_chat_id, "type": "group",
                                               "title": f"Group {old_chat_id}"}
        new = self.add_chat(new_chat_id, "supergroup", title=old.get("title"))
        if inject_service_messages:
            bot = self._bot(token)
            actor = {"id": 1, "is_bot": False, "first_name": "Admin"}
            self._inject_service(bot, old, actor, {"migrate_to_chat_id": new_chat_id})
            self._inject_service(bot, new, actor, {"migrate_from_chat_id": old_chat_id})

    def block_chat(self, chat_id: int, description: str = "Forbidden: bot was blocked by the user",
                   error_code: int = 403) -> None:
        """Sends to ``chat_id`` fail (default: 403 "bot was blocked by the user")."""
        self._blocked[chat_id] = (error_code, description)

    def unblock_chat(self, chat_id: int) -> None:
        self._blocked.pop(chat_id, None)

    def _resolve_chat(self, p: _Params) -> dict[str, Any]:
        raw = p.raw("chat_id")
        if raw is None or raw == "":
            raise _bad("chat_id is empty")
        chat_id: int | None = None
        if isinstance(raw, int) and not isinstance(raw, bool):
            chat_id = raw
        elif isinstance(raw, str) and re.fullmatch(r"\s*-?\d{1,20}\s*", raw):
            chat_id = int(raw)
        elif isinstance(raw, str) and raw.startswith("@"):
            wanted = raw[1:].lower()
            chat = next((c for c in self._chats.values()
                         if str(c.get("username", "")).lower() == wanted), None)
            if chat is None:
                raise _bad("chat not found")
            chat_id = chat["id"]
        if chat_id is None or chat_id == 0:
            raise _bad("chat not found")
        if chat_id in self._migrated:
            raise _bad("group chat was upgraded to a supergroup chat",
                       {"migrate_to_chat_id": self._migrated[chat_id]})
        if chat_id in self._blocked:
            code, description = self._blocked[chat_id]
            raise BotAPIError(code, description)
        chat = self._chats.get(chat_id)
        if chat is None:
            if self.strict_chats:
                raise _bad("chat not found")
            chat = self.add_chat(chat_id)
        return chat

    # -- messages -------------------------------------------------------------------------

    def _new_message(self, bot: _Bot, chat: dict[str, Any], sender: dict[str, Any], *,
                     thread_id: int | None = None, is_topic: bool = False,
                     reply_to: dict[str, Any] | None = None,
                     date: int | None = None) -> dict[str, Any]:
        key = (bot.token, chat["id"])
        counter = self._message_ids.setdefault(key, itertools.count(1))
        message: dict[str, Any] = {"message_id": next(counter)}
        if thread_id is not None:
            message["message_thread_id"] = thread_id
        message["from"] = dict(sender)
        message["date"] = int(date if date is not None else time.time())
        message["chat"] = dict(chat)
        if thread_id is not None and (is_topic or chat.get("is_forum")):
            message["is_topic_message"] = True
        if reply_to is not None:
            # A replied message carries no reply_to_message of its own, as on Telegram.
            message["reply_to_message"] = {k: v for k, v in reply_to.items()
                                           if k != "reply_to_message"}
        self._messages.setdefault(key, {})[message["message_id"]] = message
        return message

    def messages(self, chat_id: int, token: str | None = None) -> list[dict[str, Any]]:
        """Every message in the chat the fake knows (injected and sent), oldest first."""
        return list(self._messages.get((self._bot(token).token, chat_id), {}).values())

    def _reply_target(self, bot: _Bot, chat: dict[str, Any],
                      p: _Params) -> dict[str, Any] | None:
        parameters = p.json("reply_parameters", "reply parameters")
        if parameters is not None:
            if not isinstance(parameters, dict):
                raise _bad("can't parse reply parameters JSON object")
            message_id = parameters.get("message_id")
            allow = bool(parameters.get("allow_sending_without_reply"))
        else:
            message_id = p.int("reply_to_message_id")
            allow = p.bool("allow_sending_without_reply")
        if not message_id:
            return None
        found = self._messages.get((bot.token, chat["id"]), {}).get(int(message_id))
        if found is None and not allow:
            raise _bad("message to be replied not found")
        return found

    # -- files ----------------------------------------------------------------------------

    def add_file(self, data: bytes, filename: str | None = None, mime: str | None = None, *,
                 token: str | None = None, kind: str | None = None) -> str:
        """Stores a file the bot can getFile and download (as if a user had sent it).
        Returns its file_id; use it in ``inject_message(photo=..., document=...)``."""
        return self._store_file(self._bot(token), data, filename, mime, kind).file_id

    def file(self, file_id: str) -> StoredFile:
        return self._files[file_id]

    def _store_file(self, bot: _Bot, data: bytes, filename: str | None, mime: str | None,
                    kind: str | None, url: str | None = None) -> StoredFile:
        n = next(self._file_counter)
        digest = hashlib.sha256(f"{bot.token}:{n}".encode()).digest()
        file_id = _FILE_ID_PREFIX.get(kind, _FILE_ID_PREFIX[None]) + \
            base64.urlsafe_b64encode(digest).decode().rstrip("=")
        unique = hashlib.sha1(data if data else (url or str(n)).encode()).digest()
        file_unique_id = "AQAD" + base64.urlsafe_b64encode(unique[:9]).decode()
        if mime is None and filename:
            mime = mimetypes.guess_type(filename)[0]
        extension = ""
        if filename and "." in filename:
            extension = "." + filename.rsplit(".", 1)[1]
        elif mime:
            extension = mimetypes.guess_extension(mime) or ""
        folder = {"photo": "photos", "document": "documents", "video": "videos",
                  "audio": "music", "voice": "voice", "animation": "animations"}.get(
                      kind or "", "documents")
        stored = StoredFile(file_id=file_id, file_unique_id=file_unique_id, token=bot.token,
                            data=data, filename=filename, mime_type=mime,
                            file_path=f"{folder}/file_{n}{extension}", kind=kind, url=url)
        self._files[file_id] = stored
        self._file_paths[(bot.token, stored.file_path)] = stored
        return stored

    def _photo_array(self, bot: _Bot, stored: StoredFile) -> list[dict[str, Any]]:
        """A photo comes in sizes: a thumbnail first (its own small file), the original
        last, so a client that takes ``photo[0]`` gets the wrong bytes, as on Telegram."""
        cached = self._photo_sizes.get(stored.file_id)
        if cached is not None:
            return [dict(size) for size in cached]
        width, height = _image_size(stored.data) or (1280, 960)
        scale = min(1.0, 90 / max(width, height, 1))
        thumb = self._store_file(bot, b"thumbnail of " + stored.file_unique_id.encode(),
                                 "thumb.jpg", "image/jpeg", "photo")
        sizes = [
            {"file_id": thumb.file_id, "file_unique_id": thumb.file_unique_id,
             "file_size": thumb.size, "width": max(1, round(width * scale)),
             "height": max(1, round(height * scale))},
            {"file_id": stored.file_id, "file_unique_id": stored.file_unique_id,
             "file_size": stored.size, "width": width, "height": height},
        ]
        if not stored.size:
            del sizes[1]["file_size"]
        self._photo_sizes[stored.file_id] = sizes
        self._photo_sizes[thumb.file_id] = sizes
        return [dict(size) for size in sizes]

    def _media_object(self, bot: _Bot, stored: StoredFile, kind: str,
                      p: _Params | None = None) -> Any:
        if kind == "photo":
            return self._photo_array(bot, stored)
        p = p or _Params({})
        obj: dict[str, Any] = {"file_id": stored.file_id,
                               "file_unique_id": stored.file_unique_id}
        dims = _image_size(stored.data) or (640, 360)
        if kind in ("video", "animation"):
            obj["width"] = p.int("width") or dims[0]
            obj["height"] = p.int("height") or dims[1]
        if kind in ("video", "animation", "audio", "voice"):
            obj["duration"] = p.int("duration") or 0
        if kind == "audio":
            for name in ("performer", "title"):
                if p.str(name):
                    obj[name] = p.str(name)
        if kind != "voice" and stored.filename:
            obj["file_name"] = stored.filename
        mime = stored.mime_type
        if kind == "voice":
            mime = mime if mime and mime.startswith("audio/") else "audio/ogg"
        if mime:
            obj["mime_type"] = mime
        if stored.size:
            obj["file_size"] = stored.size
        return obj

    def _accept_file(self, bot: _Bot, method: str, name: str,
                     p: _Params) -> tuple[StoredFile, SentFile]:
        source = p.raw(name)
        if isinstance(source, UploadedFile):
            limit = self.max_photo_upload if name == "photo" else self.max_upload
            if source.size > limit:
                if name == "photo":
                    # (unverified) the wording Telegram uses for an oversized photo upload
                    raise _bad("PHOTO_SAVE_FILE_INVALID")
                raise BotAPIError(413, "Request Entity Too Large")
            if not source.size:
                raise _bad("file must be non-empty")
            stored = self._store_file(bot, source.data, source.filename, source.content_type,
                                      name)
            return stored, SentFile(name, method, "upload", source.filename,
                                    source.content_type, source.data, source.size,
                                    stored.file_id)
        reference = (p.str(name) or "").strip()
        if reference.startswith("attach://"):
            attached = p.raw(reference[len("attach://"):])
            if not isinstance(attached, UploadedFile):
                raise _bad(f"there is no {name} in the request")
            return self._accept_file(bot, method, name, _Params({**p.values, name: attached}))
        if re.match(r"^https?://", reference, re.IGNORECASE):
            # The fake never fetches URLs: the file is recorded, empty.
            stored = self._store_file(bot, b"", reference.rsplit("/", 1)[-1] or None, None,
                                      name, url=reference)
            return stored, SentFile(name, method, "url", stored.filename, None, None, 0,
                                    stored.file_id, url=reference)
        stored = self._files.get(reference)
        if stored is None or stored.token != bot.token:
            raise _bad("wrong file identifier/HTTP URL specified")
        if stored.kind is not None and stored.kind != name:
            raise _bad("type of file mismatch")
        return stored, SentFile(name, method, "file_id", stored.filename, stored.mime_type,
                                stored.data, stored.size, stored.file_id)

    # -- injecting updates -----------------------------------------------------------------

    def inject_update(self, update: dict[str, Any], *, token: str | None = None) -> int:
        """Queues a raw Update (``update_id`` is assigned when missing). Returns its id."""
        bot = self._bot(token)
        update_id = int(update.get("update_id", bot.next_update_id))
        update = {"update_id": update_id,
                  **{k: v for k, v in update.items() if k != "update_id"}}
        bot.next_update_id = max(bot.next_update_id, update_id + 1)
        # Kept in update_id order: an id given out of order goes to its place.
        if bot.pending and bot.pending[-1]["update_id"] > update_id:
            bisect.insort(bot.pending, update, key=_update_id)
        else:
            bot.pending.append(update)
        bot.history[update_id] = update
        bot.signal.fire()
        self.changed()
        return update_id

    def inject_message(self, chat_id: int, text: str | None = None, *,
                       from_id: int | None = None, from_username: str | None = None,
                       from_first_name: str | None = None, chat_type: str | None = None,
                       chat_title: str | None = None, message_thread_id: int | None = None,
                       is_topic_message: bool = False, reply_to_bot: bool = False,
                       reply_to_message_id: int | None = None,
                       entities: list[dict[str, Any]] | None = None,
                       caption: str | None = None,
                       caption_entities: list[dict[str, Any]] | None = None,
                       photo: str | None = None, document: str | None = None,
                       video: str | None = None, audio: str | None = None,
                       voice: str | None = None, animation: str | None = None,
                       date: int | None = None, edited_message_id: int | None = None,
                       from_bot: bool = False, token: str | None = None) -> int:
        """A user writes to the bot; returns the update_id.

        Builds a real Update/Message: the chat (type from ``chat_type``, else the declared
        chat, else the id's sign: > 0 private, -100… supergroup, other < 0 group), the
        sender, ``mention`` / ``bot_command`` entities with UTF-16 offsets (unless
        ``entities`` is given), a reply to the bot's last message in the chat with
        ``reply_to_bot``, media from file ids made by :meth:`add_file`. With
        ``edited_message_id`` it is an ``edited_message`` update of that message; with
        ``from_bot`` the bot itself is the sender.
        """
        bot = self._bot(token)
        declared = self._chats.get(chat_id)
        kind = chat_type or (declared["type"] if declared else self._chat_type_for(chat_id))
        user: dict[str, Any] = {"id": from_id if from_id is not None else
                                (chat_id if kind == "private" else 1_000_001),
                                "is_bot": False,
                                "first_name": from_first_name or from_username or "User"}
        if from_username:
            user["username"] = from_username
        user["language_code"] = "en"
        if declared is not None and declared["type"] == kind:
            chat = dict(declared)
        else:
            chat = self.add_chat(chat_id, kind, title=chat_title,
                                 first_name=user["first_name"], username=from_username
                                 if kind == "private" else None)
        if kind == "supergroup" and is_topic_message and not chat.get("is_forum"):
            chat["is_forum"] = True
            self._chats[chat_id] = dict(chat)
        reply_to = None
        if reply_to_message_id is not None:
            reply_to = self._messages.get((bot.token, chat_id), {}).get(reply_to_message_id)
            if reply_to is None:
                raise ValueError(f"no message {reply_to_message_id} in chat {chat_id}")
        elif reply_to_bot:
            reply_to = next((m for m in reversed(self.messages(chat_id, bot.token))
                             if m.get("from", {}).get("id") == bot.user["id"]), None)
            if reply_to is None:   # the bot has not written here yet: an earlier message
                reply_to = self._new_message(bot, chat, self.bot_user(bot.token),
                                             thread_id=message_thread_id,
                                             is_topic=is_topic_message,
                                             date=(date or int(time.time())) - 60)
                reply_to["text"] = "(an earlier message from the bot)"
        if edited_message_id is not None:
            message = dict(self._messages[(bot.token, chat_id)][edited_message_id])
            message["edit_date"] = int(date if date is not None else time.time())
        else:
            sender = self.bot_user(bot.token) if from_bot else user
            message = self._new_message(bot, chat, sender, thread_id=message_thread_id,
                                        is_topic=is_topic_message, reply_to=reply_to, date=date)
        if text is not None:
            message["text"] = text
            found = entities if entities is not None else detect_entities(text)
            if found:
                message["entities"] = found
        for name, file_id in (("animation", animation), ("audio", audio),
                              ("document", document), ("photo", photo), ("video", video),
                              ("voice", voice)):
            if file_id is not None:
                message[name] = self._media_object(bot, self._files[file_id], name)
                if name == "animation":   # "the document field will also be set"
                    message["document"] = self._media_object(
                        bot, self._files[file_id], "document")
        if caption is not None:
            message["caption"] = caption
            found = caption_entities if caption_entities is not None \
                else detect_entities(caption)
            if found:
                message["caption_entities"] = found
        if edited_message_id is not None:
            self._messages[(bot.token, chat_id)][edited_message_id] = message
            return self.inject_update({"edited_message": message}, token=bot.token)
        return self.inject_update({"message": message}, token=bot.token)

    def _inject_service(self, bot: _Bot, chat: dict[str, Any], actor: dict[str, Any],
                        fields: dict[str, Any]) -> int:
        message = self._new_message(bot, chat, actor)
        message.update(fields)
        return self.inject_update({"message": message}, token=bot.token)

    def pending_updates(self, token: str | None = None) -> list[dict[str, Any]]:
        """Updates not yet confirmed (getUpdates) or delivered (webhook)."""
        return [dict(u) for u in self._bot(token).pending]

    def update(self, update_id: int, token: str | None = None) -> dict[str, Any]:
        """An injected update by id (also after it was confirmed)."""
        return self._bot(token).history[update_id]

    # -- read-back ---------------------------------------------------------------------

    def sent(self, token: str | None = None, *, chat_id: int | None = None) -> list[SentMessage]:
        """Messages sent by the bots (all bots when ``token`` is None), in order."""
        return [s for s in self.sent_messages
                if (token is None or s.token == token)
                and (chat_id is None or s.chat_id == chat_id)]

    def texts(self, chat_id: int | None = None, token: str | None = None) -> list[str]:
        """The visible text (or caption) of each sent message not deleted since."""
        return [s.plain_text or "" for s in self.sent(token, chat_id=chat_id) if not s.deleted]

    def commands(self, token: str | None = None, *, scope: dict[str, Any] | None = None,
                 language_code: str = "") -> list[dict[str, str]]:
        """The bot's commands as set by setMyCommands for that scope and language."""
        return list(self._bot(token).commands.get(self._commands_key(scope, language_code), []))

    async def wait_for_sent(self, count: int, *, token: str | None = None,  # type: ignore[override]
                            timeout: float = 10.0) -> list[SentMessage]:
        """Waits until the bots (one bot, with ``token``) sent ``count`` messages."""
        return await super().wait_for_sent(
            count, timeout, where=lambda s: token is None or s.token == token)

    async def wait_for_chat_actions(self, count: int, *,
                                    timeout: float = 10.0) -> list[ChatActionRecord]:
        await self.wait_until(lambda: len(self.chat_actions) >= count, timeout)
        return list(self.chat_actions)

    async def wait_for_deliveries(self, count: int, *, ok_only: bool = False,
                                  timeout: float = 10.0) -> list[WebhookDelivery]:
        def done() -> bool:
            return len([d for d in self.webhook_deliveries if d.ok or not ok_only]) >= count
        await self.wait_until(done, timeout)
        return list(self.webhook_deliveries)

    # -- knobs ----------------------------------------------------------------------------

    def enforce_limits(self, per_bot_per_second: int = 30, per_chat_per_second: int = 1,
                       per_group_per_minute: int = 20) -> None:
        """Answers sends over these rolling-window rates with 429 "Too Many Requests:
        retry after N" and ``parameters.retry_after`` N (off by default)."""
        self._limits = {"bot": per_bot_per_second, "chat": per_chat_per_second,
                        "group": per_group_per_minute}
        self.rates.reset()

    def disable_limits(self) -> None:
        self._limits = None

    def fail_next(self, method: str, error_code: int, description: str,
                  parameters: dict[str, Any] | None = None, *, times: int = 1,
                  token: str | None = None) -> None:
        """The next ``times`` calls of ``method`` ("*": any method) answer this error
        (HTTP status = ``error_code``) and have no effect. Faults apply in queue order."""
        self.faults.fail(method, BotAPIError(error_code, description, parameters), times=times,
                         match=_for_bot(token))

    def fail_next_with_retry_after(self, method: str, retry_after: int) -> None:
        """Shorthand: 429 "Too Many Requests: retry after N" with ``retry_after``."""
        self.fail_next(method, 429, f"Too Many Requests: retry after {retry_after}",
                       {"retry_after": retry_after})

    def drop_next(self, method: str, *, after_processing: bool = False, times: int = 1,
                  token: str | None = None) -> None:
        """The next call of ``method`` reads the request, then the connection is closed
        without an answer. With ``after_processing`` the call takes effect first (the
        message IS sent), as when an answer is lost on the way back."""
        self.faults.drop(method, after_processing=after_processing, times=times,
                         match=_for_bot(token))

    def clear_faults(self) -> None:
        self.faults.clear()

    # -- HTTP plumbing -----------------------------------------------------------------

    @classmethod
    def methods(cls) -> list[str]:
        """The Bot API methods the fake implements (canonical spelling)."""
        return list(METHOD_PARAMS)

    async def unknown_route(self, request: web.Request) -> web.Response:
        return BotAPIError(404, "Not Found").response()

    async def _read_params(self, request: web.Request) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for key, value in request.query.items():
            values[key] = value
        if not request.can_read_body:
            return values
        content_type = request.content_type
        if content_type.startswith("multipart/"):
            reader = await request.multipart()
            while True:
                part = await reader.next()
                if part is None:
                    break
                if not isinstance(part, aiohttp.BodyPartReader) or not part.name:
                    continue
                data = await part.read()
                if part.filename is not None:
                    values[part.name] = UploadedFile(
                        part.name, part.filename,
                        part.headers.get(aiohttp.hdrs.CONTENT_TYPE), bytes(data))
                else:
                    values[part.name] = bytes(data).decode("utf-8", "replace")
            return values
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise BotAPIError(413, "Request Entity Too Large") from None
        if not body:
            return values
        if content_type == "application/json":
            decoded = json_object(body)
            if decoded is None:
                raise _bad("can't parse JSON object")
            values.update(decoded)
        else:   # form-urlencoded, or anything a client labels oddly
            form = await request.post()
            for key, value in form.items():
                if isinstance(value, web.FileField):
                    values[key] = UploadedFile(key, value.filename, value.content_type,
                                               value.file.read())
                else:
                    values[key] = value
        return values

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        token = request.match_info["token"]
        bot = self._bots.get(token)
        if bot is None or bot.revoked:
            self.unauthorized_calls.append(request.match_info["method"])
            return BotAPIError(401, "Unauthorized").response()
        name = request.match_info["method"]
        method = next((m for m in METHOD_PARAMS if m.lower() == name.lower()), None)
        if method is None:
            return BotAPIError(404, "Not Found").response()
        try:
            values = await self._read_params(request)
        except BotAPIError as error:
            return error.response()
        attached = {v[len("attach://"):] for v in values.values()
                    if isinstance(v, str) and v.startswith("attach://")}
        for key in values:
            if key not in METHOD_PARAMS[method] and key not in attached:
                self.unknown_params.append((method, key))
        call = Call(token=token, method=method, params=values, http_method=request.method,
                    content_type=request.content_type)
        return await self.serve_call(request, call, lambda: self._answer(bot, method, values))

    async def _answer(self, bot: _Bot, method: str, values: dict[str, Any]) -> web.Response:
        params = _Params(values)
        if method in MEDIA_METHODS:  # sendPhoto, sendDocument...: one way to send a file
            result = await self._send_media(bot, method, params)
        else:
            result = await getattr(self, f"_api_{method}")(bot, params)
        if isinstance(result, _Described):
            return web.json_response({"ok": True, "result": result.result,
                                      "description": result.description})
        return web.json_response({"ok": True, "result": result})

    async def _download(self, request: web.Request) -> web.StreamResponse:
        bot = self._bots.get(request.match_info["token"])
        stored = None
        if bot is not None and not bot.revoked:
            stored = self._file_paths.get((bot.token, request.match_info["file_path"]))
        if stored is None:
            return BotAPIError(404, "Not Found").response()
        return web.Response(body=stored.data,
                            content_type=stored.mime_type or "application/octet-stream")

    # -- rate limits ------------------------------------------------------------------

    def _check_rate(self, bot: _Bot, chat: dict[str, Any]) -> None:
        if self._limits is None:
            return
        rules = [(("bot", bot.token), int(self._limits["bot"]), 1.0),
                 (("chat", bot.token, chat["id"]), int(self._limits["chat"]), 1.0)]
        if chat["type"] in ("group", "supergroup"):
            rules.append((("group", bot.token, chat["id"]), int(self._limits["group"]), 60.0))
        self.check_rates(rules)

    def rate_limited(self, wait: float) -> BotAPIError:
        retry_after = max(1, math.ceil(wait))
        return BotAPIError(429, f"Too Many Requests: retry after {retry_after}",
                           {"retry_after": retry_after})

    # -- methods: identity and updates ----------------------------------------------------

    async def _api_getMe(self, bot: _Bot, p: _Params) -> dict[str, Any]:
        return dict(bot.user)

    async def _api_logOut(self, bot: _Bot, p: _Params) -> bool:
        return True

    async def _api_close(self, bot: _Bot, p: _Params) -> bool:
        return True

    async def _api_getUpdates(self, bot: _Bot, p: _Params) -> list[dict[str, Any]]:
        if bot.webhook is not None:
            raise BotAPIError(409, _WEBHOOK_ACTIVE)
        offset = p.int("offset", 0) or 0
        limit = min(max(p.int("limit", 100) or 100, 1), 100)
        # Telegram takes whole seconds; the fake also takes fractions, for fast tests.
        timeout = min(max(p.float("timeout", 0.0), 0.0), self.max_poll_timeout)
        allowed = p.json("allowed_updates", "allowed updates")
        if isinstance(allowed, list):
            bot.allowed_updates = [str(kind) for kind in allowed]
        if offset > 0:  # confirms every update below it
            del bot.pending[:bisect.bisect_left(bot.pending, offset, key=_update_id)]
        elif offset < 0:
            bot.pending = bot.pending[offset:]
        # The newer request wins; the one waiting gets 409 (Telegram's behaviour).
        previous = bot.poll
        if previous is not None and not previous.done:
            previous.terminated = True
            bot.signal.fire()
        poll = bot.poll = _Poll()
        try:
            await self.hold(lambda: poll.terminated or bot.webhook is not None
                            or any(bot.allows(u) for u in bot.pending), timeout, bot.signal)
        finally:
            poll.done = True
            if bot.poll is poll:
                bot.poll = None
        if poll.terminated:
            raise BotAPIError(409, "Conflict: terminated by other getUpdates request; "
                                   "make sure that only one bot instance is running")
        if bot.webhook is not None:
            raise BotAPIError(409, _WEBHOOK_ACTIVE)
        # A copy of each update handed out (the caller may change it), the first
        # ``limit`` only: a backlog of thousands is not copied on every poll.
        batch = itertools.islice((u for u in bot.pending if bot.allows(u)), limit)
        return [json.loads(json.dumps(u)) for u in batch]

    # -- methods: webhooks ----------------------------------------------------------------

    async def _api_setWebhook(self, bot: _Bot, p: _Params) -> Any:
        url = (p.str("url") or "").strip()
        if not url:   # "Use an empty string to remove webhook integration"
            return self._remove_webhook(bot, p.bool("drop_pending_updates"))
        if not re.match(r"^https?://[^/\s]+", url, re.IGNORECASE):
            raise _bad("bad webhook: Failed to resolve host: Name or service not known")
        if self.require_https_webhooks and not url.lower().startswith("https://"):
            raise _bad("bad webhook: An HTTPS URL must be provided for webhook")
        secret = p.str("secret_token")
        if secret is not None:
            if len(secret) > 256:
                raise _bad("secret token is too long")
            if not _SECRET_TOKEN.match(secret):
                raise _bad("secret token contains unallowed characters")
        max_connections = min(max(p.int("max_connections", 40) or 40, 1), 100)
        allowed = p.json("allowed_updates", "allowed updates")
        if isinstance(allowed, list):
            bot.allowed_updates = [str(kind) for kind in allowed]
        if p.bool("drop_pending_updates"):
            bot.pending.clear()
        same = (bot.webhook is not None and bot.webhook.url == url
                and bot.webhook.secret_token == (secret or None)
                and bot.webhook.max_connections == max_connections)
        self.set_webhook(url, secret_token=secret or None, max_connections=max_connections,
                         ip_address=p.str("ip_address"), token=bot.token)
        return _Described(True, "Webhook is already set" if same else "Webhook was set")

    async def _api_deleteWebhook(self, bot: _Bot, p: _Params) -> Any:
        return self._remove_webhook(bot, p.bool("drop_pending_updates"))

    def _remove_webhook(self, bot: _Bot, drop_pending: bool) -> Any:
        had = bot.webhook is not None
        self.delete_webhook(drop_pending_updates=drop_pending, token=bot.token)
        return _Described(True, "Webhook was deleted" if had else "Webhook is already deleted")

    async def _api_getWebhookInfo(self, bot: _Bot, p: _Params) -> dict[str, Any]:
        return self.webhook_info(bot.token)

    def set_webhook(self, url: str, *, secret_token: str | None = None,
                    max_connections: int = 40, ip_address: str | None = None,
                    token: str | None = None) -> None:
        """Sets the bot's webhook directly (what setWebhook does, without validation)."""
        bot = self._bot(token)
        bot.webhook_generation += 1
        bot.webhook = _Webhook(url, secret_token, max_connections, ip_address,
                               bot.webhook_generation)
        bot.signal.fire()   # a waiting getUpdates answers 409, the worker wakes
        if not bot.webhook_worker and self.start_soon(self._webhook_worker, bot):
            bot.webhook_worker = True

    def delete_webhook(self, *, drop_pending_updates: bool = False,
                       token: str | None = None) -> None:
        bot = self._bot(token)
        bot.webhook = None
        if drop_pending_updates:
            bot.pending.clear()
        bot.signal.fire()

    def webhook_info(self, token: str | None = None) -> dict[str, Any]:
        """The ``WebhookInfo`` getWebhookInfo answers."""
        bot = self._bot(token)
        info: dict[str, Any] = {"url": bot.webhook.url if bot.webhook else "",
                                "has_custom_certificate": False,
                                "pending_update_count": len(bot.pending)}
        if bot.webhook is not None:
            if bot.webhook.ip_address:
                info["ip_address"] = bot.webhook.ip_address
            if bot.last_error_date is not None:
                info["last_error_date"] = bot.last_error_date
                info["last_error_message"] = bot.last_error_message or ""
            info["max_connections"] = bot.webhook.max_connections
            if bot.allowed_updates:
                info["allowed_updates"] = list(bot.allowed_updates)
        return info

    async def _webhook_worker(self, bot: _Bot) -> None:
        """Delivers the bot's pending updates to its webhook, in order, one at a time."""
        try:
            while not self.closing and bot.webhook is not None:
                hook = bot.webhook
                update = None
                for candidate in list(bot.pending):
                    if bot.allows(candidate):
                        update = candidate
                        break
                    bot.pending.remove(candidate)   # never delivered: not allowed
                if update is None:
                    await bot.signal.wait()
                    continue
                settled = await self._deliver(bot, hook, update)
                if settled and update in bot.pending:
                    bot.pending.remove(update)
                self.changed()
        except Exception as exc:  # noqa: BLE001 - a crash must not cancel the host task
            bot.last_error_message = f"fake webhook worker failed: {exc!r}"
        finally:
            bot.webhook_worker = False

    async def _deliver(self, bot: _Bot, hook: _Webhook, update: dict[str, Any]) -> bool:
        """POSTs one update with retries. True when it is settled (delivered or given up),
        False when the webhook changed meanwhile (the update stays pending)."""
        def record(attempt: fake_platform.WebhookAttempt) -> None:
            self.webhook_deliveries.append(WebhookDelivery(
                token=bot.token, url=hook.url, update_id=update["update_id"],
                attempt=attempt.attempt, status=attempt.status, error=attempt.error,
                secret_token=hook.secret_token, timestamp=attempt.timestamp, update=update))
            if not attempt.ok:
                bot.last_error_date = int(attempt.timestamp)
                bot.last_error_message = (attempt.error or f"Wrong response from the webhook: "
                                                           f"{attempt.status} {attempt.reason}")
            self.changed()

        last = await self.webhooks.push(
            hook.url, update, on_attempt=record,
            signer=SecretTokenSigner(hook.secret_token) if hook.secret_token else None,
            wanted=lambda: bot.webhook is hook and not self.closing,
            delays=self.webhook_retry_delays, timeout=self.webhook_timeout)
        return last is not None

    # -- methods: sending -----------------------------------------------------------------

    def _parse_text(self, p: _Params, text: str, entities_param: str
                    ) -> tuple[str, list[dict[str, Any]]]:
        explicit = p.json(entities_param, entities_param.replace("_", " "))
        if explicit is not None:
            if not isinstance(explicit, list):
                raise _bad(f"can't parse {entities_param.replace('_', ' ')} JSON object")
            return text, [dict(e) for e in explicit if isinstance(e, dict)]
        try:
            return parse_entities(text, p.str("parse_mode"))
        except EntityParseError as exc:
            raise _bad(f"can't parse entities: {exc}") from None
        except ValueError as exc:   # a parse mode Telegram does not know
            raise _bad(str(exc)) from None

    def _record(self, bot: _Bot, method: str, chat: dict[str, Any], p: _Params,
                message: dict[str, Any], *, text: str | None, plain: str | None,
                entities: list[dict[str, Any]], kind: str, files: list[SentFile],
                reply_to: dict[str, Any] | None, thread_id: int | None) -> None:
        self.history.append(("message", chat["id"], plain or ""))
        self.record_sent(SentMessage(
            token=bot.token, method=method, chat_id=chat["id"], text=text,
            parse_mode=p.str("parse_mode") or None, message_thread_id=thread_id,
            reply_to=reply_to["message_id"] if reply_to else None, files=files,
            timestamp=time.time(), message=message, plain_text=plain,
            entities=entities, kind=kind, params=dict(p.values)))

    async def _api_sendMessage(self, bot: _Bot, p: _Params) -> dict[str, Any]:
        chat = self._resolve_chat(p)
        text = p.str("text")
        if not text:
            raise _bad("message text is empty")
        plain, entities = self._parse_text(p, text, "entities")
        if not plain.strip():
            raise _bad("message must be non-empty")
        if utf16_len(plain) > TEXT_LIMIT:
            raise _bad("message is too long")
        message, reply_to, thread_id = self._outgoing(bot, chat, p)
        message["text"] = plain
        if entities:
            message["entities"] = entities
        preview = p.json("link_preview_options", "link preview options")
        if isinstance(preview, dict) and preview:
            message["link_preview_options"] = {
                k: v for k, v in preview.items()
                if k in ("is_disabled", "url", "prefer_small_media", "prefer_large_media",
                         "show_above_text")}
        self._echo_markup(p, message)
        self._record(bot, "sendMessage", chat, p, message, text=text, plain=plain,
                     entities=entities, kind="text", files=[], reply_to=reply_to,
                     thread_id=thread_id)
        return message

    def _outgoing(self, bot: _Bot, chat: dict[str, Any], p: _Params,
                  ) -> tuple[dict[str, Any], dict[str, Any] | None, int | None]:
        """A new message of the bot's in ``chat`` once its reply target is checked and
        the chat's rate allows it: the message, what it replies to, its thread."""
        reply_to = self._reply_target(bot, chat, p)
        thread_id = p.int("message_thread_id")
        self._check_rate(bot, chat)
        message = self._new_message(bot, chat, self.bot_user(bot.token), thread_id=thread_id,
                                    reply_to=reply_to)
        return message, reply_to, thread_id

    # -- methods: live replies ---------------------------------------------------------

    async def _api_sendMessageDraft(self, bot: _Bot, p: _Params) -> bool:
        chat = self._resolve_chat(p)
        # Drafts exist in private chats only; the wording of these two refusals is
        # Telegram's server codes (TEXTDRAFT_PEER_INVALID, DRAFT_ID_INVALID).
        if chat["type"] != "private":
            raise _bad("TEXTDRAFT_PEER_INVALID")
        if not p.int("draft_id"):
            raise _bad("DRAFT_ID_INVALID")
        text = p.str("text") or ""
        plain, _ = self._parse_text(p, text, "entities")
        if utf16_len(plain) > TEXT_LIMIT:
            raise _bad("text is too long")
        self._check_rate(bot, chat)
        self.drafts.append(DraftRecord(token=bot.token, chat_id=chat["id"],
                                       draft_id=int(p.int("draft_id") or 0), text=text,
                                       plain_text=plain, timestamp=time.time()))
        self.history.append(("draft", chat["id"], plain))
        self.changed()
        return True

    def _own_message(self, bot: _Bot, chat: dict[str, Any], p: _Params,
                     missing: str) -> SentMessage:
        message_id = p.int("message_id")
        found = next((s for s in self.sent_messages if s.token == bot.token
                      and s.chat_id == chat["id"] and s.message_id == message_id
                      and not s.deleted), None)
        if found is None:
            raise _bad(missing)
        return found

    async def _api_editMessageText(self, bot: _Bot, p: _Params) -> dict[str, Any]:
        chat = self._resolve_chat(p)
        sent = self._own_message(bot, chat, p, "message to edit not found")
        text = p.str("text")
        if not text:
            raise _bad("message text is empty")
        plain, entities = self._parse_text(p, text, "entities")
        if not plain.strip():
            raise _bad("message must be non-empty")
        if utf16_len(plain) > TEXT_LIMIT:
            raise _bad("MESSAGE_TOO_LONG")
        if plain == sent.plain_text and entities == sent.entities:
            raise _bad("message is not modified: specified new message content and reply "
                       "markup are exactly the same as a current content and reply markup "
                       "of the message")
        self._check_rate(bot, chat)
        sent.text, sent.plain_text, sent.entities = text, plain, entities
        sent.parse_mode = p.str("parse_mode") or None
        sent.edits += 1
        message = sent.message
        message["text"] = plain
        message["edit_date"] = int(time.time())
        if entities:
            message["entities"] = entities
        else:
            message.pop("entities", None)
        self.edits.append((sent, plain))
        self.history.append(("edit", chat["id"], plain))
        self.changed()
        return dict(message)

    async def _api_deleteMessage(self, bot: _Bot, p: _Params) -> bool:
        chat = self._resolve_chat(p)
        sent = self._own_message(bot, chat, p, "message to delete not found")
        sent.deleted = True
        self.history.append(("delete", chat["id"], sent.plain_text or ""))
        self.changed()
        return True

    @staticmethod
    def _echo_markup(p: _Params, message: dict[str, Any]) -> None:
        markup = p.json("reply_markup", "reply markup")
        if isinstance(markup, dict) and "inline_keyboard" in markup:
            message["reply_markup"] = markup   # only inline keyboards come back

    async def _send_media(self, bot: _Bot, method: str, p: _Params) -> dict[str, Any]:
        name, _ = MEDIA_METHODS[method]
        chat = self._resolve_chat(p)
        if not p.present(name):
            raise _bad(f"there is no {name} in the request")
        stored, sent_file = self._accept_file(bot, method, name, p)
        caption = p.str("caption")
        plain, entities = ("", [])
        if caption:
            plain, entities = self._parse_text(p, caption, "caption_entities")
            if utf16_len(plain) > CAPTION_LIMIT:
                raise _bad("message caption is too long")
        message, reply_to, thread_id = self._outgoing(bot, chat, p)
        message[name] = self._media_object(bot, stored, name, p)
        if name == "animation":
            message["document"] = self._media_object(bot, stored, "document", p)
        if plain:
            message["caption"] = plain
            if entities:
                message["caption_entities"] = entities
        if p.bool("show_caption_above_media") and name in ("photo", "video", "animation"):
            message["show_caption_above_media"] = True
        if p.bool("has_spoiler") and name in ("photo", "video", "animation"):
            message["has_media_spoiler"] = True
        self._echo_markup(p, message)
        self._record(bot, method, chat, p, message, text=caption, plain=plain or None,
                     entities=entities, kind=name, files=[sent_file], reply_to=reply_to,
                     thread_id=thread_id)
        return message

    async def _api_sendChatAction(self, bot: _Bot, p: _Params) -> bool:
        chat = self._resolve_chat(p)
        action = (p.str("action") or "").strip()
        if action not in CHAT_ACTIONS:
            raise _bad("wrong parameter action in request")
        self.chat_actions.append(ChatActionRecord(bot.token, chat["id"], action,
                                                  p.int("message_thread_id"), time.time()))
        return True

    # -- methods: files -------------------------------------------------------------------

    async def _api_getFile(self, bot: _Bot, p: _Params) -> dict[str, Any]:
        file_id = (p.str("file_id") or "").strip()
        if not file_id:
            raise _bad("invalid file_id")
        stored = self._files.get(file_id)
        if stored is None or stored.token != bot.token:
            raise _bad("wrong file_id or the file is temporarily unavailable")
        if stored.size > self.max_download:
            raise _bad("file is too big")
        result: dict[str, Any] = {"file_id": stored.file_id,
                                  "file_unique_id": stored.file_unique_id}
        if stored.size:
            result["file_size"] = stored.size
        result["file_path"] = stored.file_path
        return result

    # -- methods: commands ----------------------------------------------------------------

    @staticmethod
    def _commands_key(scope: Any, language_code: str | None) -> str:
        scope = scope if isinstance(scope, dict) else {"type": "default"}
        return json.dumps(scope, sort_keys=True) + "|" + (language_code or "")

    async def _api_setMyCommands(self, bot: _Bot, p: _Params) -> bool:
        commands = p.json("commands")
        if commands is None:
            raise _bad("commands is empty")   # (unverified wording)
        if not isinstance(commands, list) or len(commands) > 100:
            raise _bad("can't parse commands JSON object")
        cleaned = []
        for command in commands:
            if not isinstance(command, dict):
                raise _bad("can't parse BotCommand")
            name = str(command.get("command", "")).lstrip("/")
            description = str(command.get("description", ""))
            if not _BOT_COMMAND.match(name):
                raise _bad("BOT_COMMAND_INVALID")
            if not 1 <= len(description) <= 256:
                raise _bad("command description is empty" if not description
                           else "BOT_COMMAND_DESCRIPTION_INVALID")
            cleaned.append({"command": name, "description": description})
        key = self._commands_key(p.json("scope"), p.str("language_code"))
        bot.commands[key] = cleaned
        return True

    async def _api_getMyCommands(self, bot: _Bot, p: _Params) -> list[dict[str, str]]:
        key = self._commands_key(p.json("scope"), p.str("language_code"))
        return list(bot.commands.get(key, []))

    async def _api_deleteMyCommands(self, bot: _Bot, p: _Params) -> bool:
        bot.commands.pop(self._commands_key(p.json("scope"), p.str("language_code")), None)
        return True


@dataclass
class _Described:
    """A success answer that also carries a description (setWebhook, deleteWebhook)."""

    result: Any
    description: str

