"""A fake Discord on 127.0.0.1: the REST subset a bot uses (API v10) and the gateway.

Built from Discord's published docs (the discord/discord-api-docs repository: "Gateway",
"Gateway Events", "Opcodes and Status Codes", "Rate Limits", the channel and message
resources), never from what the channel sends; a real client (discord.py) connects to it
too (tests/test_real_client.py). On the test kit's ``FakePlatform``: calls recorded,
faults queued, latency.

REST, under ``{base_url}/api/v10`` with ``Authorization: Bot <token>`` (else 401
``{"message": "401: Unauthorized", "code": 0}``); every answer carries ``Via: 1.1
google`` and ``Content-Type: application/json`` exactly, and the rate-limit headers
(``X-RateLimit-Limit``, ``-Remaining``, ``-Reset``, ``-Reset-After``, ``-Bucket``):

- ``GET /gateway/bot`` → ``{"url", "shards": 1, "session_start_limit": {"total",
  "remaining", "reset_after", "max_concurrency"}}``;
- ``GET /users/@me`` → the bot's user; ``GET /oauth2/applications/@me`` → its
  application (discord.py asks as it logs in);
- ``POST /channels/{id}/messages``: JSON, or multipart ``payload_json`` + ``files[n]``;
  ``content`` ≤ 2,000 characters (else 400, code 50035), not empty (50006), a file ≤
  :attr:`FakeDiscord.upload_limit` (413, 40005); ``nonce`` with ``enforce_nonce``
  answers the message that nonce made already; the bot's message comes back to it as a
  ``MESSAGE_CREATE`` (as on Discord);
- ``PATCH /channels/{id}/messages/{mid}``, ``DELETE`` it (204), ``POST
  /channels/{id}/typing`` (204), ``POST /users/@me/channels {"recipient_id"}`` (the DM
  channel); an unknown channel is 404 ``{"message": "Unknown Channel", "code": 10003}``;
- buckets of fixed windows per route and channel (a message create: 5 per 5 s), the
  global 50 requests a second; a 429 is ``{"message", "retry_after", "global"}`` with
  ``Retry-After``, ``X-RateLimit-Scope`` and, for the global limit,
  ``X-RateLimit-Global: true``; attachments are served at ``/attachments/...``.

The gateway (``GET /gateway/bot``'s ``url``, and READY's ``resume_gateway_url``, a
different path): HELLO with ``heartbeat_interval``; op 1 answered with op 11; IDENTIFY
(op 2) checked — a wrong token closes 4004, an unknown intent bit 4013, a privileged
intent the bot's application has not turned on 4014, a second IDENTIFY 4005, one over
``max_concurrency`` per five seconds op 9 ``false``; READY then ``GUILD_CREATE``;
RESUME (op 6) replays the session's dispatches after ``seq`` then ``RESUMED``, or op 9
``false`` for a session gone, or closes 4007 for a ``seq`` ahead of the session; a
client closing with 1000 or 1001 ends its session. Dispatches carry ``s``; without the
``MESSAGE_CONTENT`` intent a guild message arrives with empty ``content`` unless it
mentions the bot. Fault switches: :meth:`FakeDiscord.reconnect` (op 7),
:meth:`FakeDiscord.invalidate` (op 9), :meth:`FakeDiscord.zombie` (ACKs and dispatches
withheld), :meth:`FakeDiscord.close` (a close code, or none at all),
:meth:`FakeDiscord.expire_sessions`, :meth:`FakeDiscord.move_gateway` (the cached URL
stops answering), and the REST faults of the base (``fail_next``).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import aiohttp
import anyio
from aiohttp import web

from chatkernel.testing import Call, ErrorAnswer, FakePlatform
from chatkernel.testing.devserver import fields, json_body, listing, wait_until

API = "/api/v10"
DISCORD_EPOCH_MS = 1_420_070_400_000
#: The heartbeat interval HELLO gives, in milliseconds (Discord's is 41250).
HEARTBEAT_INTERVAL_MS = 41_250
#: Intents a bot's application must turn on in the Developer Portal.
PRIVILEGED = {"GUILD_MEMBERS": 1 << 1, "GUILD_PRESENCES": 1 << 8, "MESSAGE_CONTENT": 1 << 15}
KNOWN_INTENTS = sum(1 << bit for bit in (*range(0, 17), 20, 21, 24, 25))
GUILD_MESSAGES, DIRECT_MESSAGES, MESSAGE_CONTENT = 1 << 9, 1 << 12, 1 << 15
#: Per route: (bucket id, limit, window in seconds), per major parameter.
BUCKETS = {
    "createMessage": ("80c17d2f203122d936070c88c8d10f33", 5, 5.0),
    "editMessage": ("d8f6b6b0d0f1f0a4b2e1c3d4e5f60718", 5, 5.0),
    "deleteMessage": ("f2d1a0b9c8e7d6c5b4a3928170615243", 5, 1.0),
    "triggerTyping": ("3a6c1f0e2d4b5a69788796a5b4c3d2e1", 5, 5.0),
    "createDM": ("b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6", 10, 10.0),
    "getCurrentUser": ("0a1b2c3d4e5f60718293a4b5c6d7e8f9", 5, 5.0),
    "getGatewayBot": ("1b2c3d4e5f60718293a4b5c6d7e8f90a", 2, 5.0),
}
GLOBAL_LIMIT = 50


def snowflake(ms: float, counter: int) -> str:
    """A Discord id: milliseconds since 2015 in the top bits, a counter below."""
    return str((int(ms) - DISCORD_EPOCH_MS) << 22 | (counter & 0xFFF))


def make_token(bot_id: str, secret: str = "fake") -> str:
    """A bot token shaped as Discord's: the bot's id in base64, a timestamp, an HMAC."""
    head = base64.urlsafe_b64encode(bot_id.encode()).decode().rstrip("=")
    tail = (secret * 40)[:38].replace(" ", "_")
    return f"{head}.GfAkE1.{tail}"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()


class DiscordError(ErrorAnswer):
    """An error answer in Discord's shape, with its exact headers."""

    def __init__(self, status: int, message: str, code: int = 0, *,
                 headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(status, {"message": message, "code": code, **extra}, headers)

    def response(self) -> web.Response:
        return _json(self.body, self.status, self.headers)


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # Exactly "application/json", no charset: discord.py compares the header as it is.
    return web.Response(body=json.dumps(body).encode(), status=status,
                        headers={"Content-Type": "application/json", "Via": "1.1 google",
                                 **(headers or {})})


@dataclass
class Bot:
    """One bot user and its application's settings."""

    id: str
    username: str
    token: str
    #: The privileged intents turned on for its application in the Developer Portal.
    privileged: set[str] = field(default_factory=lambda: {"MESSAGE_CONTENT"})
    #: Session starts left today (``session_start_limit.remaining``).
    starts_left: int = 1000
    max_concurrency: int = 1
    identified_at: list[float] = field(default_factory=list)

    def user(self) -> dict[str, Any]:
        return {"id": self.id, "username": self.username, "global_name": None,
                "discriminator": "0", "avatar": None, "bot": True}


@dataclass
class SentMessage:
    """A message the bot made, as it is now."""

    id: str
    channel_id: str
    content: str
    author_id: str
    nonce: str | None = None
    reference: str | None = None
    allowed_mentions: Any = None
    attachments: list[dict[str, Any]] = field(default_factory=list)
    edits: int = 0
    deleted: bool = False


class Session:
    """A gateway session (server side): its dispatches, kept for RESUME."""

    def __init__(self, session_id: str, bot: Bot, intents: int) -> None:
        self.id = session_id
        self.bot = bot
        self.intents = intents
        self.seq = 0
        self.events: list[dict[str, Any]] = []
        self.connection: Connection | None = None
        self.invalid = False


class Connection:
    """One websocket: what it sends goes through its queue, in order."""

    def __init__(self, socket: web.WebSocketResponse, request: web.Request) -> None:
        self.socket = socket
        self.request = request
        self.path = request.path
        self.session: Session | None = None
        self.queue: list[dict[str, Any]] = []
        self.wake = anyio.Event()
        self.heartbeats: list[Any] = []
        self.identify: dict[str, Any] | None = None
        self.resume: dict[str, Any] | None = None
        #: Dispatches and ACKs withheld: open, but nothing gets through (a zombie).
        self.zombie = False
        self.close_code: int | None = None
        self.closed_by_client: int | None = None

    def push(self, payload: dict[str, Any]) -> None:
        self.queue.append(payload)
        self.wake.set()


class FakeDiscord(FakePlatform):
    """``async with FakeDiscord() as discord``: give accounts ``discord.api_base`` and a
    bot's ``token`` (``discord.bot`` is the first; :meth:`add_bot` makes more)."""

    client_max_size = 32 * 1024 * 1024
    #: The largest file a bot uploads (Discord: 10 MiB outside boosted servers).
    upload_limit = 10 * 1024 * 1024
    #: Seconds a session with no connection stays resumable.
    session_kept = 300.0

    def __init__(self, *, seed: int = 0, heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS,
                 token: str | None = None) -> None:
        super().__init__(seed=seed)
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self._ids = itertools.count(1)
        self.bots: dict[str, Bot] = {}
        #: The first bot (``token``: its token, else one made like Discord's).
        self.bot = self.add_bot("chatkernel-bot", token=token)
        self.guild_id = self.new_id()
        #: Channel id -> channel object (guild channels, threads, DM channels).
        self.channels: dict[str, dict[str, Any]] = {}
        self.users: dict[str, dict[str, Any]] = {}
        self.sessions: dict[str, Session] = {}
        self.connections: list[Connection] = []
        #: Messages users and bots wrote, by id (the bots' are also in sent_messages).
        self.messages: dict[str, dict[str, Any]] = {}
        #: (channel, message id, text, kind) of every create, edit and delete by a bot.
        self.history: list[tuple[str, str, str, str]] = []
        self.typing: list[str] = []
        #: Channels whose messages the bot may no longer send (see refuse_chat).
        self.refused_chats: set[str] = set()
        #: Dispatches made while a bot had no session: Discord keeps none of them.
        self.lost: list[dict[str, Any]] = []
        #: The gateway URL's generation: move_gateway() makes the cached one fail.
        self.generation = 1
        self.buckets: dict[tuple[str, str], list[float]] = {}  # (bucket, major) -> [count, reset]
        self.nonces: dict[tuple[str, str], SentMessage] = {}
        self.attachments: dict[str, bytes] = {}
        #: Resumes to answer by dropping the connection (a resume that fails).
        self.failing_resumes = 0
        #: A close code every IDENTIFY is answered with (4010–4013 are hard to cause).
        self.identify_close: int | None = None

    # -- ids, users, channels ----------------------------------------------------------------

    def new_id(self) -> str:
        return snowflake(time.time() * 1000, next(self._ids))

    def add_bot(self, username: str, *, privileged: set[str] | None = None,
                token: str | None = None) -> Bot:
        bot_id = self.new_id()
        bot = Bot(bot_id, username, token or make_token(bot_id, username),
                  privileged={"MESSAGE_CONTENT"} if privileged is None else privileged)
        self.bots[bot.token] = bot
        return bot

    def user(self, user_id: str, name: str = "") -> dict[str, Any]:
        user = self.users.get(user_id)
        if user is None:
            user = self.users[user_id] = {"id": user_id, "username": name or f"user{user_id[-4:]}",
                                          "global_name": name or None, "discriminator": "0",
                                          "avatar": None}
        return user

    def text_channel(self, channel_id: str, *, name: str = "general") -> dict[str, Any]:
        """A text channel of the guild (made on first use)."""
        channel = self.channels.get(channel_id)
        if channel is None:
            channel = self.channels[channel_id] = {
                "id": channel_id, "type": 0, "guild_id": self.guild_id, "name": name,
                "position": len(self.channels), "parent_id": None, "nsfw": False}
            self._to_all("CHANNEL_CREATE", channel)
        return channel

    def thread(self, thread_id: str, parent_id: str) -> dict[str, Any]:
        """A public thread under a text channel (made on first use: THREAD_CREATE)."""
        channel = self.channels.get(thread_id)
        if channel is None:
            self.text_channel(parent_id)
            channel = self.channels[thread_id] = {
                "id": thread_id, "type": 11, "guild_id": self.guild_id, "parent_id": parent_id,
                "name": f"thread {thread_id[-4:]}", "owner_id": None,
                "thread_metadata": {"archived": False, "auto_archive_duration": 1440,
                                    "locked": False}}
            self._to_all("THREAD_CREATE", {**channel, "newly_created": True})
        return channel

    def dm_channel(self, bot: Bot, user_id: str, channel_id: str | None = None) -> dict[str, Any]:
        """The DM channel of a bot and a user (made on first use, with ``channel_id``)."""
        for channel in self.channels.values():
            if channel["type"] == 1 and channel["bot"] == bot.id and \
                    channel["recipients"][0]["id"] == user_id:
                return channel
        channel_id = channel_id or self.new_id()
        channel = self.channels[channel_id] = {
            "id": channel_id, "type": 1, "last_message_id": None,
            "recipients": [self.user(user_id)], "bot": bot.id}
        return channel

    # -- a user writes --------------------------------------------------------------------------

    def inject_message(self, channel_id: str, content: str, *, author: str = "", name: str = "",
                       bot: Bot | None = None, dm: bool = False, thread_of: str | None = None,
                       mention: bool = False, reply_to: str | None = None,
                       attachments: list[tuple[str, bytes, str]] | None = None,
                       author_is_bot: bool = False, kind: int | None = None,
                       dm_user: str | None = None) -> dict[str, Any]:
        """A user (``author``) writes in ``channel_id`` (a DM with ``bot`` when ``dm``, whose
        other side is ``dm_user``, by default the author; a thread of ``thread_of``); the
        bot gets a ``MESSAGE_CREATE``. Returns the message. ``author`` may be the bot: its
        own post, as Discord sends it back."""
        bot = bot or self.bot
        author = author or "300000000000000001"
        if dm:
            channel = self.dm_channel(bot, dm_user or author, channel_id)
        elif thread_of is not None:
            channel = self.thread(channel_id, thread_of)
        else:
            channel = self.text_channel(channel_id)
        if mention:
            content = f"<@{bot.id}> {content}"
        user = bot.user() if author == bot.id else \
            {**self.user(author, name), **({"bot": True} if author_is_bot else {})}
        message_id = self.new_id()
        message: dict[str, Any] = {
            "id": message_id, "channel_id": channel["id"], "author": user, "content": content,
            "timestamp": _iso(time.time()), "edited_timestamp": None, "tts": False,
            "mention_everyone": False, "mentions": [bot.user()] if f"<@{bot.id}>" in content
            else [], "mention_roles": [], "attachments": [], "embeds": [], "pinned": False,
            "type": 0, "flags": 0, "components": []}
        for n, (filename, data, mime) in enumerate(attachments or []):
            attachment_id = self.new_id()
            path = f"/attachments/{channel['id']}/{attachment_id}/{filename}"
            self.attachments[path] = data
            message["attachments"].append({
                "id": attachment_id, "filename": filename, "size": len(data),
                "content_type": mime, "url": self.base_url + path,
                "proxy_url": self.base_url + path})
        if reply_to is not None:
            referenced = self.messages.get(reply_to)
            message["type"] = 19
            message["message_reference"] = {"type": 0, "message_id": reply_to,
                                            "channel_id": channel["id"]}
            message["referenced_message"] = referenced
            if referenced is not None and referenced["author"]["id"] == bot.id:
                message["mentions"] = [bot.user()]
        if kind is not None:
            message["type"] = kind
        self.messages[message_id] = message
        self._message_event("MESSAGE_CREATE", message, channel, bot)
        return message

    def redeliver(self, message: dict[str, Any], bot: Bot | None = None) -> None:
        """The same MESSAGE_CREATE again (under a new sequence number)."""
        bot = bot or self.bot
        self._message_event("MESSAGE_CREATE", message, self.channels[message["channel_id"]], bot)

    def inject_event(self, kind: str, data: dict[str, Any], bot: Bot | None = None) -> None:
        """Any dispatch (``MESSAGE_UPDATE``, ``TYPING_START``...) to the bot's session."""
        self._dispatch_to(bot or self.bot, kind, data)

    def _message_event(self, kind: str, message: dict[str, Any], channel: dict[str, Any],
                       bot: Bot) -> None:
        guild = channel.get("guild_id")
        data = dict(message)
        data["channel_type"] = channel["type"]
        if guild is not None:
            data["guild_id"] = guild
            data["member"] = {"nick": None, "roles": [], "joined_at": _iso(0),
                              "deaf": False, "mute": False, "flags": 0}
        session = self._session_of(bot)
        intents = session.intents if session is not None else GUILD_MESSAGES | DIRECT_MESSAGES
        if not intents & (GUILD_MESSAGES if guild else DIRECT_MESSAGES):
            return  # the bot did not ask for these
        mentioned = any(user.get("id") == bot.id for user in data.get("mentions") or [])
        if guild and not intents & MESSAGE_CONTENT and not mentioned and \
                data["author"]["id"] != bot.id:
            data.update(content="", embeds=[], attachments=[], components=[])
        self._dispatch_to(bot, kind, data)

    # -- the test's side: faults ----------------------------------------------------------------

    def revoke(self, bot: Bot | None = None) -> None:
        """The bot's token is reset: REST answers 401, the gateway closes 4004."""
        bot = bot or self.bot
        self.bots.pop(bot.token, None)
        bot.token = "revoked." + bot.token
        self.bots[bot.token] = bot
        for connection in self._connections_of(bot):
            self.start_soon(self._close, connection, 4004)

    def refuse_chat(self, channel_id: str) -> None:
        """The bot lost access to a channel: sends there answer 403."""
        self.refused_chats.add(channel_id)

    def reconnect(self, bot: Bot | None = None) -> None:
        """Discord asks the bot's connection to reconnect (op 7)."""
        for connection in self._connections_of(bot or self.bot):
            connection.push({"op": 7, "d": None})

    def invalidate(self, resumable: bool, bot: Bot | None = None) -> None:
        """Op 9 to the bot's connection; unless ``resumable``, its session is gone."""
        for connection in self._connections_of(bot or self.bot):
            if not resumable and connection.session is not None:
                connection.session.invalid = True
            connection.push({"op": 9, "d": resumable})

    def zombie(self, bot: Bot | None = None) -> None:
        """The bot's connection stays open but nothing gets through: no ACK, no dispatch
        (they wait in the session, for a RESUME)."""
        for connection in self._connections_of(bot or self.bot):
            connection.zombie = True

    def close(self, code: int | None, bot: Bot | None = None) -> None:
        """Close the bot's connection with ``code`` (None: drop it with no close frame)."""
        for connection in self._connections_of(bot or self.bot):
            self.start_soon(self._close, connection, code)

    def expire_sessions(self) -> None:
        """Every session is gone: a RESUME gets op 9 ``false``."""
        for session in self.sessions.values():
            session.invalid = True

    def move_gateway(self) -> None:
        """The gateway URL handed out so far stops answering (a host gone)."""
        self.generation += 1

    def fail_next(self, method: str, status: int, *, retry_after: float = 1.0,
                  times: int = 1, is_global: bool = False) -> None:
        """The next calls of ``method`` (``createMessage``...) answer ``status``; a 429
        says ``retry_after``."""
        if status == 429:
            error = self.too_many_requests(retry_after, is_global=is_global,
                                           bucket=BUCKETS.get(method, ("", 0, 0))[0])
        else:
            error = DiscordError(status, "failure", 0)
        self.faults.fail(method, error, times=times)

    def too_many_requests(self, retry_after: float, *, is_global: bool = False,
                          bucket: str = "") -> DiscordError:
        headers = {"Retry-After": str(math.ceil(retry_after)),
                   "X-RateLimit-Scope": "global" if is_global else "user"}
        if is_global:
            headers["X-RateLimit-Global"] = "true"
        else:
            headers.update({"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "0",
                            "X-RateLimit-Reset": f"{time.time() + retry_after:.3f}",
                            "X-RateLimit-Reset-After": f"{retry_after:.3f}"})
            if bucket:
                headers["X-RateLimit-Bucket"] = bucket
        return DiscordError(429, "You are being rate limited.", headers=headers,
                            retry_after=round(retry_after, 3), **{"global": is_global})

    def rate_limited(self, wait: float) -> ErrorAnswer:
        """The global limit's 429."""
        return self.too_many_requests(wait, is_global=True)

    # -- what the bots did ------------------------------------------------------------------

    def sent(self, channel_id: str | None = None) -> list[SentMessage]:
        return [m for m in self.sent_messages
                if channel_id is None or m.channel_id == channel_id]

    def texts(self, channel_id: str | None = None) -> list[str]:
        """The bots' messages as they stand (deleted ones left out), in order."""
        return [m.content for m in self.sent(channel_id) if not m.deleted and m.content]

    @property
    def rate_limited_calls(self) -> list[Call]:
        return [call for call in self.calls if call.status == 429]

    def session_of(self, bot: Bot | None = None) -> Session | None:
        return self._session_of(bot or self.bot)

    def identifies(self, bot: Bot | None = None) -> list[Connection]:
        bot = bot or self.bot
        return [c for c in self.connections if c.identify is not None
                and self.bots.get(c.identify.get("token")) is bot]

    def resumes(self) -> list[Connection]:
        return [c for c in self.connections if c.resume is not None]

    # -- the wire: REST ---------------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get(f"{API}/gateway/bot", self._gateway_bot),
            web.get(f"{API}/users/@me", self._me),
            web.get(f"{API}/oauth2/applications/@me", self._application),
            web.post(f"{API}/users/@me/channels", self._create_dm),
            web.post(f"{API}/channels/{{channel}}/messages", self._create_message),
            web.patch(f"{API}/channels/{{channel}}/messages/{{message}}", self._edit_message),
            web.delete(f"{API}/channels/{{channel}}/messages/{{message}}", self._delete_message),
            web.post(f"{API}/channels/{{channel}}/typing", self._typing),
            web.get("/attachments/{tail:.*}", self._attachment),
            web.get("/gateway/{generation}", self._gateway),
            web.get("/resume", self._gateway),
        ]

    @property
    def api_base(self) -> str:
        return self.base_url + API

    def gateway_url(self) -> str:
        return self.base_url.replace("http://", "ws://") + f"/gateway/{self.generation}"

    def resume_url(self) -> str:
        return self.base_url.replace("http://", "ws://") + "/resume"

    def _bot(self, request: web.Request) -> Bot:
        header = request.headers.get("Authorization", "")
        bot = self.bots.get(header[4:]) if header.startswith("Bot ") else None
        if bot is None or bot.token.startswith("revoked."):
            raise DiscordError(401, "401: Unauthorized", 0)
        return bot

    async def _serve(self, request: web.Request, method: str, params: dict[str, Any],
                     answer: Any, major: str = "") -> web.StreamResponse:
        async def run() -> web.StreamResponse:
            bot = self._bot(request)
            self.check_rates([((bot.id, "global"), GLOBAL_LIMIT, 1.0)])
            headers = self._bucket(method, major)
            response = await answer(bot)
            response.headers.update(headers)
            return response

        return await self.serve_call(request, Call(method=method, params=params,
                                                   http_method=request.method), run)

    def _bucket(self, method: str, major: str) -> dict[str, str]:
        """Count the call in its bucket (fixed windows), or a 429 when it is spent."""
        if method not in BUCKETS:
            return {}
        name, limit, window = BUCKETS[method]
        now = self.rates.clock()
        state = self.buckets.get((name, major))
        if state is None or now >= state[1]:
            state = self.buckets[(name, major)] = [0, now + window]
        if state[0] >= limit:
            self.rates.throttled += 1
            raise self.too_many_requests(state[1] - now, bucket=name)
        state[0] += 1
        reset_after = state[1] - now
        return {"X-RateLimit-Limit": str(limit), "X-RateLimit-Remaining": str(limit - state[0]),
                "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
                "X-RateLimit-Reset-After": f"{reset_after:.3f}", "X-RateLimit-Bucket": name}

    async def _gateway_bot(self, request: web.Request) -> web.StreamResponse:
        async def answer(bot: Bot) -> web.Response:
            return _json({"url": self.gateway_url(), "shards": 1, "session_start_limit": {
                "total": 1000, "remaining": bot.starts_left, "reset_after": 14_400_000,
                "max_concurrency": bot.max_concurrency}})

        return await self._serve(request, "getGatewayBot", {}, answer)

    async def _me(self, request: web.Request) -> web.StreamResponse:
        async def answer(bot: Bot) -> web.Response:
            return _json({**bot.user(), "verified": True, "flags": 0, "mfa_enabled": False,
                          "locale": "en-US"})

        return await self._serve(request, "getCurrentUser", {}, answer)

    async def _application(self, request: web.Request) -> web.StreamResponse:
        async def answer(bot: Bot) -> web.Response:
            return _json({"id": bot.id, "name": bot.username, "icon": None, "description": "",
                          "summary": "", "bot_public": True, "bot_require_code_grant": False,
                          "verify_key": "0" * 64, "flags": 0, "team": None,
                          "owner": self.user("300000000000000000", "owner"), "bot": bot.user()})

        return await self._serve(request, "getCurrentApplication", {}, answer)

    async def _create_dm(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()

        async def answer(bot: Bot) -> web.Response:
            user = str(body.get("recipient_id", ""))
            if not user.isdigit():
                raise DiscordError(400, "Invalid Form Body", 50035)
            channel = self.dm_channel(bot, user)
            return _json({k: v for k, v in channel.items() if k != "bot"})

        return await self._serve(request, "createDM", body, answer)

    def _channel(self, channel_id: str, bot: Bot) -> dict[str, Any]:
        channel = self.channels.get(channel_id)
        if channel is None or (channel["type"] == 1 and channel["bot"] != bot.id):
            raise DiscordError(404, "Unknown Channel", 10003)
        return channel

    async def _create_message(self, request: web.Request) -> web.StreamResponse:
        channel_id = request.match_info["channel"]
        files: list[tuple[str, bytes, str]] = []
        if request.content_type.startswith("multipart/"):
            form = await request.post()
            try:
                body = json.loads(str(form.get("payload_json") or "{}"))
            except ValueError:
                body = None
            for name, value in form.items():
                if name.startswith("files[") and isinstance(value, web.FileField):
                    files.append((value.filename, value.file.read(),
                                  value.content_type or "application/octet-stream"))
        else:
            try:
                body = await request.json()
            except ValueError:
                body = None

        async def answer(bot: Bot) -> web.Response:
            if not isinstance(body, dict):
                raise DiscordError(400, "400: Bad Request", 50109)
            channel = self._channel(channel_id, bot)
            if channel_id in self.refused_chats:
                if channel["type"] == 1:
                    raise DiscordError(403, "Cannot send messages to this user", 50007)
                raise DiscordError(403, "Missing Access", 50001)
            content = body.get("content") or ""
            if len(content) > 2000:
                raise DiscordError(400, "Invalid Form Body", 50035, errors={"content": {
                    "_errors": [{"code": "BASE_TYPE_MAX_LENGTH",
                                 "message": "Must be 2000 or fewer in length."}]}})
            if not content and not files:
                raise DiscordError(400, "Cannot send an empty message", 50006)
            if any(len(data) > self.upload_limit for _, data, _ in files):
                raise DiscordError(413, "Request entity too large", 40005)
            nonce = body.get("nonce")
            if nonce is not None and body.get("enforce_nonce"):
                earlier = self.nonces.get((bot.id, str(nonce)))
                if earlier is not None:
                    return _json(self.messages[earlier.id])
            message_id = self.new_id()
            message = {
                "id": message_id, "channel_id": channel_id, "author": bot.user(),
                "content": content, "timestamp": _iso(time.time()), "edited_timestamp": None,
                "tts": False, "mention_everyone": False, "mentions": [], "mention_roles": [],
                "attachments": [{"id": self.new_id(), "filename": name, "size": len(data),
                                 "content_type": mime} for name, data, mime in files],
                "embeds": [], "pinned": False, "type": 0, "flags": 0, "components": []}
            reference = (body.get("message_reference") or {}).get("message_id")
            if reference:
                message["type"] = 19
                message["message_reference"] = {"type": 0, "message_id": reference,
                                                "channel_id": channel_id}
            if nonce is not None:
                message["nonce"] = nonce
            self.messages[message_id] = message
            sent = SentMessage(message_id, channel_id, content, bot.id,
                               nonce=None if nonce is None else str(nonce),
                               reference=reference,
                               allowed_mentions=body.get("allowed_mentions"),
                               attachments=message["attachments"])
            if nonce is not None:
                self.nonces[(bot.id, str(nonce))] = sent
            self.history.append((channel_id, message_id, content, "create"))
            self.record_sent(sent)
            self._message_event("MESSAGE_CREATE", message, channel, bot)
            return _json(message)

        return await self._serve(request, "createMessage", body if isinstance(body, dict)
                                 else {}, answer, channel_id)

    async def _edit_message(self, request: web.Request) -> web.StreamResponse:
        channel_id, message_id = request.match_info["channel"], request.match_info["message"]
        body = await request.json()

        async def answer(bot: Bot) -> web.Response:
            self._channel(channel_id, bot)
            message = self.messages.get(message_id)
            if message is None or message["channel_id"] != channel_id:
                raise DiscordError(404, "Unknown Message", 10008)
            if message["author"]["id"] != bot.id:
                raise DiscordError(403, "Cannot edit a message authored by another user",
                                   50005)
            content = body.get("content") or ""
            if len(content) > 2000:
                raise DiscordError(400, "Invalid Form Body", 50035)
            message.update(content=content, edited_timestamp=_iso(time.time()))
            for sent in self.sent_messages:
                if sent.id == message_id:
                    sent.content, sent.edits = content, sent.edits + 1
            self.history.append((channel_id, message_id, content, "edit"))
            self.changed()
            return _json(message)

        return await self._serve(request, "editMessage", body, answer, channel_id)

    async def _delete_message(self, request: web.Request) -> web.StreamResponse:
        channel_id, message_id = request.match_info["channel"], request.match_info["message"]

        async def answer(bot: Bot) -> web.Response:
            self._channel(channel_id, bot)
            if self.messages.pop(message_id, None) is None:
                raise DiscordError(404, "Unknown Message", 10008)
            for sent in self.sent_messages:
                if sent.id == message_id:
                    sent.deleted = True
            self.history.append((channel_id, message_id, "", "delete"))
            self.changed()
            return web.Response(status=204, headers={"Via": "1.1 google"})

        return await self._serve(request, "deleteMessage", {"message": message_id}, answer,
                                 channel_id)

    async def _typing(self, request: web.Request) -> web.StreamResponse:
        channel_id = request.match_info["channel"]

        async def answer(bot: Bot) -> web.Response:
            self._channel(channel_id, bot)
            if channel_id in self.refused_chats:
                raise DiscordError(403, "Missing Permissions", 50013)
            self.typing.append(channel_id)
            self.changed()
            return web.Response(status=204, headers={"Via": "1.1 google"})

        return await self._serve(request, "triggerTyping", {"channel": channel_id}, answer,
                                 channel_id)

    async def _attachment(self, request: web.Request) -> web.StreamResponse:
        data = self.attachments.get(request.path)
        if data is None:
            return web.Response(status=404)
        return web.Response(body=data, content_type="application/octet-stream")

    # -- the wire: the gateway ---------------------------------------------------------------------

    def _session_of(self, bot: Bot) -> Session | None:
        live = [s for s in self.sessions.values() if s.bot is bot and not s.invalid]
        return live[-1] if live else None

    def _connections_of(self, bot: Bot) -> list[Connection]:
        return [c for c in self.connections if c.session is not None
                and c.session.bot is bot and not c.socket.closed]

    def _dispatch_to(self, bot: Bot, kind: str, data: Any) -> None:
        session = self._session_of(bot)
        if session is None:
            self.lost.append({"t": kind, "d": data})
            self.changed()
            return
        self._dispatch(session, kind, data)

    def _dispatch(self, session: Session, kind: str, data: Any) -> None:
        session.seq += 1
        payload = {"op": 0, "t": kind, "s": session.seq, "d": data}
        session.events.append(payload)
        connection = session.connection
        if connection is not None and not connection.zombie and connection.session is session:
            connection.push(payload)
        self.changed()

    def _to_all(self, kind: str, data: Any) -> None:
        for session in {id(s): s for s in self.sessions.values() if not s.invalid}.values():
            self._dispatch(session, kind, data)

    async def _close(self, connection: Connection, code: int | None) -> None:
        connection.close_code = code
        if code is None:
            transport = connection.request.transport
            if transport is not None:
                transport.abort()
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            await connection.socket.close(code=code, message=b"")

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        generation = request.match_info.get("generation")
        if generation is not None and generation != str(self.generation):
            return web.Response(status=404, text="404: Not Found")
        socket = web.WebSocketResponse(autoping=True, max_msg_size=4096 * 4)
        await socket.prepare(request)
        connection = Connection(socket, request)
        self.connections.append(connection)
        self.changed()
        if request.query.get("v") != "10":
            await self._close(connection, 4012)
            return socket
        connection.push({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms,
                                         "_trace": ["fake-gateway"]}})
        async with anyio.create_task_group() as tasks:
            async def write() -> None:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    while not socket.closed:
                        while connection.queue:
                            await socket.send_str(json.dumps(connection.queue.pop(0)))
                        connection.wake = anyio.Event()
                        await connection.wake.wait()

            tasks.start_soon(write)
            with contextlib.suppress(ConnectionError, RuntimeError):
                async for frame in socket:
                    if frame.type != aiohttp.WSMsgType.TEXT:
                        break
                    await self._received(connection, frame.data)
            tasks.cancel_scope.cancel()
        connection.closed_by_client = socket.close_code
        session = connection.session
        if session is not None and socket.close_code in (1000, 1001) and \
                connection.close_code is None:
            session.invalid = True  # a client leaving with 1000/1001 ends its session
        if session is not None and session.connection is connection:
            session.connection = None
        self.changed()
        return socket

    async def _received(self, connection: Connection, text: str) -> None:
        try:
            payload = json.loads(text)
            op = payload["op"]
        except (ValueError, KeyError, TypeError):
            await self._close(connection, 4002)
            return
        data = payload.get("d")
        if op == 1:
            connection.heartbeats.append(data)
            if not connection.zombie:
                connection.push({"op": 11})
        elif op == 2:
            await self._identify(connection, data)
        elif op == 6:
            await self._resume(connection, data)
        elif op in (3, 4, 8, 31):
            if connection.session is None:
                await self._close(connection, 4003)
        else:
            await self._close(connection, 4001)
        self.changed()

    async def _identify(self, connection: Connection, data: Any) -> None:
        if connection.session is not None or connection.identify is not None:
            await self._close(connection, 4005)
            return
        if not isinstance(data, dict):
            await self._close(connection, 4002)
            return
        connection.identify = data
        if self.identify_close is not None:
            await self._close(connection, self.identify_close)
            return
        bot = self.bots.get(str(data.get("token")))
        if bot is None or bot.token.startswith("revoked."):
            await self._close(connection, 4004)
            return
        intents = data.get("intents")
        if not isinstance(intents, int) or intents & ~KNOWN_INTENTS:
            await self._close(connection, 4013)
            return
        if any(intents & bit and name not in bot.privileged for name, bit in PRIVILEGED.items()):
            await self._close(connection, 4014)
            return
        now = self.rates.clock()
        bot.identified_at = [t for t in bot.identified_at if t > now - 5.0]
        if len(bot.identified_at) >= bot.max_concurrency or bot.starts_left <= 0:
            connection.push({"op": 9, "d": False})
            return
        bot.identified_at.append(now)
        bot.starts_left -= 1
        for old in list(self.sessions.values()):  # one shard: a new session replaces the old
            if old.bot is bot:
                old.invalid = True
        session = Session(f"{next(self._ids):032x}", bot, intents)
        self.sessions[session.id] = session
        connection.session = session
        session.connection = connection
        ready = {
            "v": 10, "user": bot.user(), "guilds": [{"id": self.guild_id, "unavailable": True}],
            "session_id": session.id, "resume_gateway_url": self.resume_url(),
            "application": {"id": bot.id, "flags": 0}, "_trace": ["fake-gateway"]}
        if "shard" in data:  # echoed when the client sent it
            ready["shard"] = data["shard"]
        self._dispatch(session, "READY", ready)
        guild_channels = [c for c in self.channels.values() if c.get("guild_id")]
        self._dispatch(session, "GUILD_CREATE", {
            "id": self.guild_id, "name": "Fake Server", "unavailable": False,
            "member_count": len(self.users) + 1,
            "channels": [c for c in guild_channels if c["type"] not in (10, 11, 12)],
            "threads": [c for c in guild_channels if c["type"] in (10, 11, 12)],
            "members": [], "roles": []})

    async def _resume(self, connection: Connection, data: Any) -> None:
        if not isinstance(data, dict):
            await self._close(connection, 4002)
            return
        connection.resume = data
        bot = self.bots.get(str(data.get("token")))
        if bot is None or bot.token.startswith("revoked."):
            await self._close(connection, 4004)
            return
        if self.failing_resumes > 0:
            self.failing_resumes -= 1
            await self._close(connection, None)
            return
        session = self.sessions.get(str(data.get("session_id")))
        if session is None or session.invalid or session.bot is not bot:
            connection.push({"op": 9, "d": False})
            return
        seq = data.get("seq")
        if not isinstance(seq, int) or seq > session.seq:
            await self._close(connection, 4007)
            return
        previous = session.connection
        if previous is not None and previous is not connection and not previous.socket.closed:
            previous.session = None
            self.start_soon(self._close, previous, 4000)
        connection.session = session
        session.connection = connection
        for payload in session.events:
            if payload["s"] > seq:
                connection.push(payload)
        session.seq += 1
        resumed = {"op": 0, "t": "RESUMED", "s": session.seq, "d": {"_trace": ["fake"]}}
        session.events.append(resumed)
        connection.push(resumed)

    # -- a person trying it by hand (the dev server) --------------------------------------------

    def developer_info(self) -> dict[str, Any]:
        return {**super().developer_info(), "api_base": self.api_base,
                "token": self.bot.token, "bot_id": self.bot.id}

    def config_snippet(self) -> str:
        base = self.base_url
        return "\n".join([
            "# the fake Discord is up; point an account at it:",
            f"#   export DISCORD_BOT_TOKEN={self.bot.token}",
            "[channels.discord.accounts.main]",
            'token = "${DISCORD_BOT_TOKEN}"',
            f'api_base = "{self.api_base}"',
            'allow_from = ["*"]',
            "# then write as a user (a DM; add \"channel_id\" and \"mention\" for a server):",
            "#   curl -d '{\"text\": \"hello\"}' " + base + "/_fake/messages",
            "#   curl '" + base + "/_fake/sent?wait=10'"])

    def developer_routes(self) -> list[web.RouteDef]:
        """``GET /_fake/session`` (``?wait=SECONDS``): whether the bot has a gateway
        session (a message sent before it has one is lost, as on Discord);
        ``POST /_fake/messages`` ``{"text", "user_id"?, "channel_id"?, "dm"?,
        "mention"?}``: a user writes (a DM by default); ``GET /_fake/sent``
        (``?channel_id=``, ``&wait=``, ``&after=``): what the bot sent."""

        async def messages(request: web.Request) -> web.Response:
            body = fields(await json_body(request), {
                "text": str, "user_id": str, "channel_id": str, "dm": bool, "mention": bool},
                required=("text",))
            user = body.get("user_id", "300000000000000001")
            dm = body.get("dm", "channel_id" not in body)
            channel = body.get("channel_id") or (self.dm_channel(self.bot, user)["id"] if dm
                                                  else "")
            message = self.inject_message(channel, body["text"], author=user, dm=dm,
                                          mention=body.get("mention", False))
            return web.json_response({"id": message["id"], "channel_id": message["channel_id"]})

        async def sent(request: web.Request) -> web.Response:
            channel = request.query.get("channel_id")
            found = await listing(request, self, lambda: [
                m for m in self.sent_messages if channel in (None, m.channel_id)])
            return web.json_response({"messages": [
                {"id": m.id, "channel_id": m.channel_id, "content": m.content}
                for m in found]})

        async def session(request: web.Request) -> web.Response:
            await wait_until(request, self, lambda: self.session_of() is not None)
            current = self.session_of()
            return web.json_response({"connected": current is not None,
                                      "session_id": current.id if current else None})

        return [web.post("/_fake/messages", messages), web.get("/_fake/sent", sent),
                web.get("/_fake/session", session)]
