"""The Discord channel: one bot (an application's bot user), over the gateway and REST.

Only Discord lives here: the account config, reading ``MESSAGE_CREATE`` dispatches,
sending (``POST /channels/{id}/messages``, with replies, safe ``allowed_mentions`` and
files), typing, live replies as one message edited in place, what Discord's close codes
and errors mean, and the probe. The gateway's connection is its transport
(chatkernel_discord.gateway); the REST calls and their rate-limit buckets are
chatkernel_discord.api. Sessions, chunking (2,000 characters, code fences closed and
reopened), pacing, retries, dedupe and the outbox are the kernel's.
"""

from __future__ import annotations

import logging
import mimetypes
import re
import time
from collections import OrderedDict
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator

from chatkernel.channels import (
    AccountConfig,
    Capabilities,
    Channel,
    ChannelContext,
    ChannelLimits,
    HttpClient,
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
    SendResult,
    Trouble,
    refusal,
)
from chatkernel_discord import api as discord_api
from chatkernel_discord.api import DEFAULT_API_BASE, TOKEN_PATTERNS, DiscordAPI
from chatkernel_discord.gateway import FATAL_CLOSES, DiscordGateway

log = logging.getLogger("chatkernel.discord")

MB = 1024 * 1024
#: Gateway intents by name (Discord's docs, "Gateway Intents").
INTENTS = {
    "GUILDS": 1 << 0, "GUILD_MEMBERS": 1 << 1, "GUILD_MODERATION": 1 << 2,
    "GUILD_EXPRESSIONS": 1 << 3, "GUILD_INTEGRATIONS": 1 << 4, "GUILD_WEBHOOKS": 1 << 5,
    "GUILD_INVITES": 1 << 6, "GUILD_VOICE_STATES": 1 << 7, "GUILD_PRESENCES": 1 << 8,
    "GUILD_MESSAGES": 1 << 9, "GUILD_MESSAGE_REACTIONS": 1 << 10,
    "GUILD_MESSAGE_TYPING": 1 << 11, "DIRECT_MESSAGES": 1 << 12,
    "DIRECT_MESSAGE_REACTIONS": 1 << 13, "DIRECT_MESSAGE_TYPING": 1 << 14,
    "MESSAGE_CONTENT": 1 << 15, "GUILD_SCHEDULED_EVENTS": 1 << 16,
    "AUTO_MODERATION_CONFIGURATION": 1 << 20, "AUTO_MODERATION_EXECUTION": 1 << 21,
    "GUILD_MESSAGE_POLLS": 1 << 24, "DIRECT_MESSAGE_POLLS": 1 << 25,
}
ALL_INTENTS = sum(INTENTS.values())
DEFAULT_INTENTS = ("GUILDS", "GUILD_MESSAGES", "DIRECT_MESSAGES", "MESSAGE_CONTENT")
#: Channel types that are threads (announcement, public, private).
THREAD_TYPES = frozenset({10, 11, 12})
#: Message types a person writes: DEFAULT and REPLY (the rest are system messages).
USER_MESSAGE_TYPES = frozenset({0, 19})
#: A chat id that names a user: the bot's DM channel with them (opened on first use).
USER_PREFIX = "user:"
#: How long a channel that refused the typing indicator (403) is not asked again.
NO_TYPING_SECONDS = 600.0
#: Channels, threads and DM channels remembered (bounded).
MEMORY = 100_000
#: The largest file a bot uploads outside boosted servers.
FILE_LIMIT = 10 * MB

_MENTION = re.compile(r"<@!?(\d+)>")
_ROLE_MENTION = re.compile(r"<@&(\d+)>")


class DiscordAccount(AccountConfig):
    """``[channels.discord.accounts.<name>]``: one Discord bot.

    The common keys (``allow_from``, ``require_mention``, the access level...) come from
    :class:`~chatkernel.channels.AccountConfig`.
    """

    identity: ClassVar[tuple[str, ...]] = ("api_base", "token")

    #: The bot's token (Developer Portal → the application → Bot → Reset Token).
    token: str = Field(min_length=1, repr=False)
    #: The REST API; the gateway's URL always comes from ``GET {api_base}/gateway/bot``.
    api_base: str = DEFAULT_API_BASE
    #: The gateway intents: names (``"GUILD_MESSAGES"``) or their sum as a number.
    #: ``MESSAGE_CONTENT`` is privileged: it must be turned on in the Developer Portal.
    intents: list[str] | int = Field(default_factory=lambda: list(DEFAULT_INTENTS))

    @field_validator("intents")
    @classmethod
    def _intents(cls, value: list[str] | int) -> list[str] | int:
        if isinstance(value, int):
            if value < 0 or value & ~ALL_INTENTS:
                raise ValueError(f"{value} has bits that are no gateway intent "
                                 f"(known: {', '.join(INTENTS)})")
            return value
        names = [name.upper() for name in value]
        unknown = [name for name in names if name not in INTENTS]
        if unknown:
            raise ValueError(f"unknown intent {unknown[0]!r} (known: {', '.join(INTENTS)})")
        return names

    @property
    def intents_value(self) -> int:
        """The intents as the number IDENTIFY sends."""
        if isinstance(self.intents, int):
            return self.intents
        return sum(INTENTS[name] for name in self.intents)


class _Bounded(OrderedDict):
    """A dict that forgets its oldest keys beyond :data:`MEMORY`."""

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        if len(self) > MEMORY:
            self.popitem(last=False)


class DiscordChannel(Channel, LiveReplies):
    """One Discord bot: guild channels, threads and DMs."""

    name = "discord"
    account_model = DiscordAccount
    config_example = """\
[channels.discord.accounts.main]
token = "${DISCORD_BOT_TOKEN}"   # Developer Portal → your application → Bot → Reset Token
allow_from = ["*"]               # Discord user ids let in; "*" anyone who can write to the bot
# require_mention = true         # in servers, answer only when mentioned or replied to
"""
    limits = ChannelLimits(
        text_limit=2000, text_unit="chars", caption_limit=2000,
        media_kinds={}, default_media_kind="file", media_max_bytes={"file": FILE_LIMIT},
        # Discord says its limits in headers (the api module follows them); these keep
        # the kernel's pacing under the usual ones: 5 messages per 5 s in a channel, and
        # the bot's 50 requests a second.
        rates={"chat": RateLimit(5, 5.0), "account": RateLimit(50, 1.0)},
        retry_base_delay=0.5,
        # A typing indicator lasts about ten seconds.
        indicator_interval=8.0,
    )
    # Discord dedupes a message by its nonce with enforce_nonce (for a few minutes).
    capabilities = Capabilities(idempotent_sends=True, recipient_error_codes=frozenset({
        discord_api.UNKNOWN_CHANNEL, discord_api.MISSING_ACCESS, discord_api.CANNOT_DM,
        discord_api.MISSING_PERMISSIONS, discord_api.UNKNOWN_USER,
        discord_api.EMPTY_MESSAGE, discord_api.INVALID_FORM_BODY, discord_api.TOO_LARGE}))
    markup = None  # Discord reads Markdown as agents write it
    secret_patterns = TOKEN_PATTERNS

    def __init__(self, account: Any, context: ChannelContext | None = None) -> None:
        super().__init__(account, context)
        self.api = DiscordAPI(self.config.token, self.config.api_base,
                              clock=self.context.clock)
        #: Attachments come from Discord's CDN: no Authorization header goes there.
        self.cdn = HttpClient(timeout=120.0, platform="Discord's CDN")
        #: ``GET /users/@me`` (or READY's user): the bot.
        self.me: dict[str, Any] | None = None
        #: Channel id -> (type, parent id, guild id), from the gateway's dispatches.
        self.channels: dict[str, tuple[int, str | None, str | None]] = _Bounded()
        self._dm_channels: dict[str, str] = _Bounded()  # user id -> DM channel id
        self._no_typing: dict[str, float] = _Bounded()  # channel -> until (clock.now())
        self.gateway: DiscordGateway | None = None

    @property
    def intents(self) -> int:
        return self.config.intents_value

    # -- receiving ----------------------------------------------------------------------

    def transport(self) -> DiscordGateway:
        self.gateway = DiscordGateway(self)
        return self.gateway

    async def identify(self) -> None:
        # recheck: the receive loop's slow retries are how a refused token is tried again.
        self.learn_self(await self.api.call("GET", "/users/@me", recheck=True))

    def learn_self(self, user: dict[str, Any]) -> None:
        self.me = user
        self.self_id = str(user["id"])

    def learn(self, kind: str, data: dict[str, Any]) -> None:
        """Keep what the gateway says about channels and threads (a message in a thread
        names only the thread; its parent comes from here)."""
        if kind == "GUILD_CREATE":
            guild = data.get("id")
            for item in [*(data.get("channels") or []), *(data.get("threads") or [])]:
                self._learn_channel(item, guild)
        elif kind in ("CHANNEL_CREATE", "CHANNEL_UPDATE", "THREAD_CREATE", "THREAD_UPDATE"):
            self._learn_channel(data, data.get("guild_id"))
        elif kind in ("CHANNEL_DELETE", "THREAD_DELETE"):
            self.channels.pop(str(data.get("id")), None)
        elif kind == "THREAD_LIST_SYNC":
            for item in data.get("threads") or []:
                self._learn_channel(item, data.get("guild_id"))

    def _learn_channel(self, item: Any, guild: Any) -> None:
        if isinstance(item, dict) and item.get("id") is not None:
            parent = item.get("parent_id")
            self.channels[str(item["id"])] = (
                int(item.get("type") or 0), str(parent) if parent else None,
                str(guild) if guild else None)

    def receive_trouble(self, error: Exception) -> Trouble:
        if isinstance(error, PlatformError):
            close = error.details.get("close_code") if error.details else None
            token = self.account.config_key("token")
            if close == 4004 or error.status == 401:
                what = ("Discord refused the bot token (gateway close 4004, authentication "
                        "failed)" if close == 4004 else "Discord refused the bot token (401)")
                return Trouble(what, restartable=False, refused=True, advice=(
                    "the token was reset or is not this bot's: copy a new one from the "
                    "Developer Portal (Applications → your application → Bot → Reset "
                    f"Token), set it in {token} and restart the gateway"))
            if close in FATAL_CLOSES:
                return Trouble(f"{error}", restartable=False, refused=True,
                               advice=self._close_advice(close))
        return super().receive_trouble(error)

    def _close_advice(self, close: int) -> str:
        intents = self.account.config_key("intents")
        if close == 4014:
            return ("the bot asks for a privileged intent its application does not have: turn "
                    "on 'Message Content Intent' (and any other privileged intent it asks "
                    "for: Server Members, Presence) under Privileged Gateway Intents on the "
                    "Bot page of the Developer Portal (Applications → your application → "
                    f"Bot), or take it out of {intents}; it is tried again every few minutes, "
                    "no restart needed")
        if close == 4013:
            return f"{intents} holds a value that is no gateway intent: fix it and restart"
        if close == 4012:
            return (f"{self.account.config_key('api_base')} must name API v10 "
                    f"({DEFAULT_API_BASE}): fix it and restart")
        return ("the bot is in too many servers for one gateway connection (Discord asks "
                "for sharding from 2,500 servers), which this channel does not do")

    async def normalize(self, event: Any) -> InboundMessage | None:
        """A ``MESSAGE_CREATE`` as a message (None: the bot's own, another bot's, a
        system message, or nothing to read)."""
        author = event.get("author") or {}
        sender = str(author["id"])
        if sender == self.self_id or author.get("bot") or event.get("webhook_id"):
            return None  # the bot's own posts come back as MESSAGE_CREATE too
        if int(event.get("type") or 0) not in USER_MESSAGE_TYPES:
            return None
        content = event.get("content") or ""
        if not isinstance(content, str):
            raise ValueError("its content is not a string")
        channel_id = str(event["channel_id"])
        guild = event.get("guild_id")
        known = self.channels.get(channel_id)
        kind = event.get("channel_type", known[0] if known else None)
        chat, thread = channel_id, None
        if kind in THREAD_TYPES:
            thread = channel_id
            chat = known[1] if known and known[1] else channel_id
        bot = self.self_id
        mentions = {str(user.get("id")) for user in event.get("mentions") or []
                    if isinstance(user, dict)}
        referenced = event.get("referenced_message") or {}
        media = [await self._download(item) for item in event.get("attachments") or []
                 if isinstance(item, dict)]
        text = _strip_mentions(content, bot)
        if not text and not media:
            return None
        return InboundMessage(
            channel=self.name, account=self.account.name, chat_id=chat,
            message_id=str(event["id"]), sender_id=sender,
            sender_name=_display_name(event, author), text=text, thread_id=thread,
            is_group=guild is not None,
            mentions_bot=bot is not None and (bot in mentions or bot in _MENTION.findall(
                content)),
            reply_to_bot=bot is not None and str((referenced.get("author") or {}).get("id"))
            == bot,
            media=media, timestamp=_timestamp(event.get("timestamp")))

    async def _download(self, item: dict[str, Any]) -> MediaRef:
        name, size = item.get("filename"), item.get("size")
        mime = item.get("content_type") or (mimetypes.guess_type(name or "")[0])
        kind = _media_kind(mime)
        url = item.get("url")
        if not url:
            return MediaRef(kind=kind, filename=name, size=size, mime=mime,
                            platform_id=str(item.get("id")), note="not saved: no URL")
        try:
            context = self.context
            return await context.save_media(
                self.cdn.download(url, max_bytes=context.max_inbound_bytes), kind=kind,
                filename=name, mime=mime, platform_id=str(item.get("id")),
                declared_size=size)
        except PlatformError as exc:
            return MediaRef(kind=kind, filename=name, size=size, mime=mime,
                            platform_id=str(item.get("id")), note=f"not saved: {exc}")

    # -- sending ----------------------------------------------------------------------------

    async def _target(self, route: Route) -> str:
        """The channel a reply goes to: the thread, the channel, or a user's DM channel
        (a chat id ``user:<id>``, opened with ``POST /users/@me/channels``)."""
        if route.thread_id:
            return route.thread_id
        chat = route.chat_id
        if not chat.startswith(USER_PREFIX):
            return chat
        user = chat[len(USER_PREFIX):]
        channel = self._dm_channels.get(user)
        if channel is None:
            answer = await self.api.call("POST", "/users/@me/channels",
                                         json={"recipient_id": user}, what="opening a DM")
            channel = self._dm_channels[user] = str(answer["id"])
        return channel

    async def send(self, route: Route, payload: OutboundPayload) -> SendResult:
        try:
            channel = await self._target(route)
            body: dict[str, Any] = {"allowed_mentions": allowed_mentions(
                payload.caption if payload.is_media else payload.text)}
            if payload.key:
                body["nonce"], body["enforce_nonce"] = payload.key, True
            if route.reply_to:
                body["message_reference"] = {"message_id": route.reply_to,
                                             "fail_if_not_exists": False}
            if payload.is_media:
                path = Path(payload.media_path)  # type: ignore[arg-type]
                body["attachments"] = [{"id": 0, "filename": path.name}]
                if payload.caption:
                    body["content"] = payload.caption
                answer = await self.api.call(
                    "POST", "/channels/{channel_id}/messages", channel_id=channel,
                    files={"files[0]": path}, data={"payload_json": body}, timeout=300,
                    what="uploading a file")
            else:
                body["content"] = payload.text
                answer = await self.api.call("POST", "/channels/{channel_id}/messages",
                                             channel_id=channel, json=body,
                                             what="sending a message")
        except PlatformError as exc:
            if exc.status == 413 or exc.code == discord_api.TOO_LARGE:
                raise exc.send_error(retryable=False) from None
            raise exc.send_error() from None
        return SendResult(message_id=f"{channel}:{answer['id']}")

    async def indicate(self, route: Route) -> None:
        """``POST /channels/{id}/typing``: lasts about ten seconds, or until the bot posts."""
        channel = await self._target(route)
        now = self.context.clock.now()
        if self._no_typing.get(channel, 0) > now:
            return
        try:
            await self.api.call("POST", "/channels/{channel_id}/typing", channel_id=channel,
                                what="typing")
        except PlatformError as exc:
            if exc.status == 403:  # not allowed here: asking again would only count against us
                self._no_typing[channel] = now + NO_TYPING_SECONDS
            raise

    # -- live replies: one message, edited in place ------------------------------------------

    def live_mode(self, route: Route) -> LiveMode | None:
        return "edit"

    def live_interval(self, route: Route, mode: LiveMode) -> float:
        # An edit takes a slot of the channel's 5 per 5 s like a message does.
        return 1.2

    async def start_preview(self, route: Route, mode: LiveMode,
                            payload: OutboundPayload) -> str:
        return str((await self.send(route, payload)).message_id)

    async def update_preview(self, route: Route, preview: Preview,
                             payload: OutboundPayload) -> None:
        channel, message = preview.id.split(":", 1)
        await self._edit(channel, message, payload.text)

    async def replace_preview(self, route: Route, payload: OutboundPayload) -> SendResult:
        assert payload.replaces is not None
        channel, message = payload.replaces.split(":", 1)
        try:
            await self._edit(channel, message, payload.text)
        except PlatformError as exc:
            if exc.code == discord_api.UNKNOWN_MESSAGE:  # someone deleted the preview
                return await self.send(route, payload)
            raise exc.send_error() from None
        return SendResult(message_id=payload.replaces)

    async def delete_preview(self, route: Route, preview: Preview) -> None:
        channel, message = preview.id.split(":", 1)
        await self.api.call("DELETE", "/channels/{channel_id}/messages/{message_id}",
                            channel_id=channel, message_id=message, what="deleting a preview")

    async def _edit(self, channel: str, message: str, text: str) -> None:
        await self.api.call("PATCH", "/channels/{channel_id}/messages/{message_id}",
                            channel_id=channel, message_id=message, what="editing a message",
                            json={"content": text, "allowed_mentions": allowed_mentions(text)})

    # -- health -----------------------------------------------------------------------------

    async def probe(self) -> ProbeResult:
        if self.api.refused is not None:  # no request on a refused token: say what the loop says
            words = refusal(self, PlatformError(self.api.refused, status=401, code=0))
            return ProbeResult(ok=False, detail=words or self.api.refused, restartable=False)
        try:
            me = await self.api.call("GET", "/users/@me", what="GET /users/@me")
        except PlatformError as exc:
            refused = refusal(self, exc)
            if refused is not None:
                return ProbeResult(ok=False, detail=refused, restartable=False)
            return ProbeResult(ok=False, detail=str(exc))
        self.learn_self(me)
        gateway = self.gateway
        detail = f"@{me.get('username')} ({me.get('id')})"
        extra: dict[str, Any] = {"user_id": me.get("id"), "username": me.get("username")}
        if gateway is not None:
            detail += f"; {gateway.describe()}"
            latency = gateway.latency
            extra.update(gateway=gateway.state, reconnects=gateway.reconnects.attempts,
                         heartbeat_ms=None if latency is None else round(latency * 1000))
        return ProbeResult(ok=True, detail=detail, extra=extra)

    async def aclose(self) -> None:
        await self.api.close()
        await self.cdn.close()


def allowed_mentions(text: str) -> dict[str, Any]:
    """Who a message may ping: nobody the text does not name as ``<@id>`` or ``<@&id>``;
    never @everyone or @here (Discord's default would parse them all)."""
    users = list(dict.fromkeys(_MENTION.findall(text)))[:100]
    roles = list(dict.fromkeys(_ROLE_MENTION.findall(text)))[:100]
    allowed: dict[str, Any] = {"parse": [], "replied_user": False}
    if users:
        allowed["users"] = users
    if roles:
        allowed["roles"] = roles
    return allowed


def _strip_mentions(content: str, bot: str | None) -> str:
    if bot is None:
        return content.strip()
    text = re.sub(rf"<@!?{re.escape(bot)}>", " ", content)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def _display_name(event: dict[str, Any], author: dict[str, Any]) -> str:
    member = event.get("member") or {}
    return str(member.get("nick") or author.get("global_name") or author.get("username") or "")


def _timestamp(value: Any) -> float:
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return time.time()


def _media_kind(mime: str | None) -> str:
    kind = (mime or "").split("/", 1)[0]
    return kind if kind in ("image", "video", "audio") else "document"
