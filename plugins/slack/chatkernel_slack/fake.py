"""A protocol-faithful fake of Slack, for tests and offline development.

:class:`FakeSlack` is a real aiohttp server on 127.0.0.1 that speaks what a Slack app
sees, built on the kernel's fake-platform base
(:class:`chatkernel.testing.FakePlatform`: the server, the call record, faults, rate
windows, latency, the signed webhook pusher):

- **the Web API** at ``{base_url}/api/<method>``: tokens as ``Authorization: Bearer`` or
  a ``token`` parameter, parameters as a query string, a form or JSON, answers
  ``{"ok": true, ...}`` or ``{"ok": false, "error": "<code>"}`` with HTTP 200, 429 with
  ``Retry-After`` and ``{"ok": false, "error": "ratelimited"}``. Methods:
  ``auth.test``, ``apps.connections.open``, ``chat.postMessage``,
  ``files.getUploadURLExternal`` / ``files.completeUploadExternal`` (upload v2; the
  bytes go to ``{base_url}/upload/v1/<ticket>``), ``assistant.threads.setStatus``,
  and what live replies use: ``chat.update``, ``chat.delete`` and the stream methods
  ``chat.startStream`` / ``chat.appendStream`` / ``chat.stopStream`` (a stream lives in a
  thread; appending to a stopped one is ``message_not_in_streaming_state``), with their
  rate tiers when limits are enforced (:data:`METHOD_TIERS`); the
  answers' shapes follow Slack's published OpenAPI spec (the tests check them against
  it). Private files at ``url_private_download`` need the bot token. Every answer to a
  known token names its granted scopes in ``x-oauth-scopes`` (and the method's in
  ``x-accepted-oauth-scopes``), as Slack does; a method whose scope the token lacks is
  ``missing_scope``. A test takes a scope away with ``slack.app.scopes.discard(...)``
  (the bot token's, :data:`BOT_SCOPES` at first) or ``slack.app.app_scopes`` (the
  app-level token's: ``connections:write``).
- **Socket Mode** over a real websocket: ``apps.connections.open`` (app-level token)
  answers ``ws://127.0.0.1:<port>/link/?ticket=...``; a connection gets ``hello`` (with
  ``num_connections``), then ``events_api`` envelopes, each given to one of the app's
  open connections at random; an envelope not acknowledged (``{"envelope_id": ...}``)
  within :attr:`FakeSlack.ack_timeout` seconds, or whose connection closed first, is
  sent again with ``retry_attempt`` + 1 and ``retry_reason`` ``timeout``, up to
  :attr:`FakeSlack.max_retries` times; events that happen while no connection is open
  wait for one and come as retries. ``disconnect`` frames (:meth:`FakeSlack.disconnect`),
  dropped sockets (:meth:`FakeSlack.drop_sockets`) and sockets that stay open but go
  silent, pongs included (:meth:`FakeSlack.freeze`).
- **the Events API**: for an app in events mode, every event is POSTed to its request
  URL, signed (``X-Slack-Signature`` v0, ``X-Slack-Request-Timestamp``), retried after a
  non-2xx or no answer within 3 s with ``X-Slack-Retry-Num`` / ``X-Slack-Retry-Reason``;
  :meth:`FakeSlack.verify_url` makes the ``url_verification`` handshake.

Users act with :meth:`FakeSlack.inject_message` (a DM, a channel message, a thread
reply, files): like Slack, a message that mentions the bot in a channel produces two
events, ``message`` and ``app_mention``, in an order drawn from the fake's seeded
``random``; the bot's own posts come back to it as ``message`` events. Tests read what
the bot did in :attr:`sent_messages` (:class:`SentMessage`), :attr:`statuses`,
:attr:`envelopes`, :attr:`acks` and :attr:`calls`.

It is a model, not Slack: one workspace per app, every app a member of every channel,
no pagination, no Block Kit validation beyond ``blocks`` being a list of objects with a
``type``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import re
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import aiohttp
import anyio
from aiohttp import web

from chatkernel.testing.devserver import bad_request, fields, json_body, listing
from chatkernel.testing.fake_platform import (
    Call,
    ErrorAnswer,
    FakePlatform,
    HmacSigner,
    Signal,
    json_object,
)

__all__ = ["App", "Envelope", "FakeSlack", "SentMessage", "SlackError", "StatusRecord",
           "StoredFile", "mrkdwn_to_text"]

MB = 1024 * 1024
TEXT_MAX = 40_000  # chat.postMessage refuses longer texts with msg_too_long
#: assistant.threads.setStatus a minute per workspace under enforce_limits: Slack says
#: "special" without a figure; its sibling assistant.threads methods are Tier 4.
STATUS_TIER_PER_MINUTE = 100

#: Parameters each implemented method takes (Slack's docs; the OpenAPI spec where it has
#: the method). Anything else a client sends is recorded in ``FakeSlack.unknown_params``.
METHOD_PARAMS: dict[str, frozenset[str]] = {
    "auth.test": frozenset(),
    "apps.connections.open": frozenset(),
    "chat.postMessage": frozenset({
        "channel", "text", "as_user", "attachments", "blocks", "icon_emoji", "icon_url",
        "link_names", "mrkdwn", "parse", "reply_broadcast", "thread_ts", "unfurl_links",
        "unfurl_media", "username", "metadata", "markdown_text", "container_id"}),
    "files.getUploadURLExternal": frozenset({"filename", "length", "alt_txt",
                                             "snippet_type"}),
    "files.completeUploadExternal": frozenset({"files", "channel_id", "channels",
                                               "initial_comment", "thread_ts", "blocks"}),
    "assistant.threads.setStatus": frozenset({"channel_id", "thread_ts", "status",
                                              "loading_messages", "icon_emoji", "icon_url",
                                              "username"}),
    "chat.update": frozenset({"channel", "ts", "text", "as_user", "attachments", "blocks",
                              "link_names", "parse", "markdown_text", "metadata",
                              "reply_broadcast", "file_ids"}),
    "chat.delete": frozenset({"channel", "ts", "as_user"}),
    "chat.startStream": frozenset({"channel", "thread_ts", "markdown_text",
                                   "recipient_team_id", "recipient_user_id", "chunks",
                                   "task_display_mode", "icon_emoji", "icon_url",
                                   "username"}),
    "chat.appendStream": frozenset({"channel", "ts", "markdown_text", "chunks"}),
    "chat.stopStream": frozenset({"channel", "ts", "markdown_text", "blocks", "metadata",
                                  "chunks", "session_status"}),
}
#: Calls a minute per workspace of the methods whose tier the fake enforces (with
#: :meth:`FakeSlack.enforce_limits`): chat.update and chat.delete are Tier 3,
#: chat.stopStream Tier 2 (Slack's docs); the tiers of chat.startStream (2) and
#: chat.appendStream (4) are the fake's reading, unverified.
METHOD_TIERS = {"chat.update": 50, "chat.delete": 50, "chat.startStream": 20,
                "chat.appendStream": 100, "chat.stopStream": 20}
#: chat.startStream / appendStream / stopStream take at most this much markdown_text.
STREAM_TEXT_MAX = 12_000
#: Scopes each method needs with a bot token (missing_scope otherwise).
METHOD_SCOPES = {"chat.postMessage": "chat:write", "chat.update": "chat:write",
                 "chat.delete": "chat:write", "chat.startStream": "chat:write",
                 "chat.appendStream": "chat:write", "chat.stopStream": "chat:write",
                 "files.getUploadURLExternal": "files:write",
                 "files.completeUploadExternal": "files:write",
                 "assistant.threads.setStatus": "chat:write"}
#: ... and with the app-level token.
APP_TOKEN_SCOPES = {"apps.connections.open": "connections:write"}
BOT_SCOPES = frozenset({"app_mentions:read", "channels:history", "groups:history",
                        "im:history", "mpim:history", "chat:write", "files:read",
                        "files:write"})
_ID_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
#: What ``POST /_fake/messages`` takes (:meth:`FakeSlack.developer_routes`).
DEVELOPER_MESSAGE_FIELDS = {"channel": str, "text": str, "user": str, "user_name": str,
                            "thread_ts": str, "mention": bool, "files": list}


class SlackSigner(HmacSigner):
    """Slack's v0 request signature, as Slack makes it: ``X-Slack-Request-Timestamp:
    <unix seconds>`` and ``X-Slack-Signature: v0=<hex HMAC-SHA256(signing_secret,
    "v0:<ts>:<raw body>")>``, signed anew for each attempt."""

    def __init__(self, signing_secret: str, clock: Callable[[], float] = time.time) -> None:
        super().__init__(signing_secret, header="X-Slack-Signature", prefix="v0=",
                         timestamp_header="X-Slack-Request-Timestamp",
                         signed=lambda ts, body: b"v0:" + ts.encode() + b":" + body,
                         clock=clock)


class SlackError(ErrorAnswer):
    """A Web API error: HTTP 200 and ``{"ok": false, "error": code, ...extra}``."""

    def __init__(self, error: str, status: int = 200, headers: dict[str, str] | None = None,
                 **extra: Any) -> None:
        super().__init__(status, {"ok": False, "error": error, **extra}, headers,
                         message=f"{error} ({status})")
        self.error = error


@dataclass
class StoredFile:
    """A file the fake holds: uploaded by the bot, or attached by a user."""

    id: str
    name: str
    data: bytes = field(repr=False)
    mimetype: str = "application/octet-stream"
    title: str = ""
    user: str = ""

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass
class SentMessage:
    """What the bot posted: a message (chat.postMessage) or shared files."""

    app: str                         # the app's id
    channel: str
    ts: str
    text: str
    thread_ts: str | None = None
    mrkdwn: bool = True
    files: list[StoredFile] = field(default_factory=list)
    method: str = "chat.postMessage"
    params: dict[str, Any] = field(default_factory=dict, repr=False)
    #: When the fake took it (Unix time).
    at: float = field(default_factory=time.time)
    #: A stream (chat.startStream) still taking text; chat.update and chat.delete since.
    streaming: bool = False
    updates: int = 0
    deleted: bool = False

    @property
    def plain_text(self) -> str:
        """The text as a person reads it in Slack (mrkdwn rendered, escapes undone)."""
        return mrkdwn_to_text(self.text) if self.mrkdwn else _unescape(self.text)

    @property
    def kind(self) -> str:
        return "file" if self.files else "message"


@dataclass
class StatusRecord:
    """One assistant.threads.setStatus call ("" clears the status)."""

    app: str
    channel: str
    thread_ts: str
    status: str
    at: float


@dataclass
class Envelope:
    """One Socket Mode envelope sent to a connection."""

    envelope_id: str
    event_id: str
    retry_attempt: int
    retry_reason: str
    payload: dict[str, Any] = field(repr=False)
    acked: bool = False


@dataclass
class App:
    """One Slack app installed in one workspace: its tokens, its bot user, its sockets."""

    app_id: str
    team_id: str
    team_name: str
    bot_token: str = field(repr=False)
    app_token: str = field(repr=False)
    signing_secret: str = field(repr=False)
    bot_user: str = ""
    bot_id: str = ""
    bot_name: str = "chatkernel"
    mode: str = "socket"               # "socket" (Socket Mode) or "events" (Events API)
    request_url: str | None = None     # events mode: where events are POSTed
    scopes: set[str] = field(default_factory=lambda: set(BOT_SCOPES))
    #: The app-level token's scopes.
    app_scopes: set[str] = field(default_factory=lambda: {"connections:write"})
    revoked: bool = False
    #: No frames at all (hello, envelopes, pongs) while True: an open but dead socket.
    frozen: bool = False
    sockets: list[_Socket] = field(default_factory=list, repr=False)
    pending: list[_Delivery] = field(default_factory=list, repr=False)
    unacked: dict[str, _Delivery] = field(default_factory=dict, repr=False)
    signal: Signal = field(default_factory=Signal, repr=False)
    worker: bool = False
    #: Events API: the conversations with an event in flight (see FakeSlack.events_workers).
    pushing: set[str] = field(default_factory=set, repr=False)

    @property
    def open_sockets(self) -> list[_Socket]:
        return [s for s in self.sockets if not s.ws.closed]


def _conversation(delivery: _Delivery) -> str:
    """The conversation an event is in ("" when it names none: a malformed one too)."""
    event = delivery.wrapper.get("event") if isinstance(delivery.wrapper, dict) else None
    if not isinstance(event, dict):
        return ""
    item = event.get("item")
    channel = event.get("channel") or (item.get("channel") if isinstance(item, dict) else None)
    return str(channel or "")


@dataclass
class _Socket:
    app: App
    ws: web.WebSocketResponse
    number: int
    transport: Any = None
    closing: bool = False


@dataclass
class _Delivery:
    """An event on its way to the app: its wrapper and how often it was tried."""

    seq: int
    event_id: str
    wrapper: dict[str, Any]
    attempt: int = 0
    reason: str = ""
    deadline: float = math.inf
    envelope_id: str = ""
    socket: _Socket | None = None


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


_LINK = re.compile(r"<([^<>|]+)(?:\|([^<>]*))?>")
_MARKS = re.compile(r"(?<![\w*_~`])([*_~`])(?=\S)(.+?)(?<=\S)\1(?![\w*_~`])")


def mrkdwn_to_text(text: str) -> str:
    """mrkdwn as Slack shows it: ``<url|label>`` as its label, ``<@U1>`` as ``@U1``,
    ``*b*`` / ``_i_`` / ``~s~`` / `` `c` `` without their marks, fences dropped."""
    def link(match: re.Match[str]) -> str:
        target, label = match.group(1), match.group(2)
        if target.startswith(("@", "#")):
            return label or target
        if target.startswith("!"):
            return label or "@" + target[1:]
        return label or target

    text = text.replace("```", "")
    text = _LINK.sub(link, text)
    for _ in range(3):  # nested marks: *_x_*
        text = _MARKS.sub(lambda m: m.group(2), text)
    return _unescape(text)


def _new_id(prefix: str, seed: Iterable[int]) -> str:
    n = next(iter(seed))
    digits = []
    for _ in range(10):
        n, r = divmod(n, len(_ID_CHARS))
        digits.append(_ID_CHARS[r])
    return prefix + "".join(reversed(digits))


#: A dev server's config snippet (:meth:`FakeSlack.config_snippet`).
DEV_SNIPPET = """# the fake Slack is up ({mode} mode); point an account at it:
#   export SLACK_BOT_TOKEN={s.bot_token}
#   {secret}
[channels.slack.accounts.main]
bot_token = "${{SLACK_BOT_TOKEN}}"
{setting}
api_base = "{s.base_url}/api/"
allow_from = ["*"]
# then write as a user (in a DM; a channel message needs "mention": true):
#   curl -d '{{"channel": "D0DIRECT01", "text": "hello"}}' {s.base_url}/_fake/messages
#   curl '{s.base_url}/_fake/sent?channel=D0DIRECT01&wait=10'{events}"""
#: Per mode: the secret to export, the account's settings for it, what else to do.
DEV_MODES = {"socket": dict(secret="export SLACK_APP_TOKEN={s.app_token}", events="",
                            setting='app_token = "${{SLACK_APP_TOKEN}}"'),
             "events": dict(secret="export SLACK_SIGNING_SECRET={s.signing_secret}",
                            setting='mode = "events"\n'
                                    'signing_secret = "${{SLACK_SIGNING_SECRET}}"',
                            events="\n# events mode: once the gateway runs, tell the fake "
                                   "where to post:\n#   curl -d '{{\"url\": \"http://"
                                   "127.0.0.1:8787/slack/main/webhook\"}}' "
                                   "{s.base_url}/_fake/request_url")}


class FakeSlack(FakePlatform):
    """Slack on ``127.0.0.1``: ``async with FakeSlack() as slack``.

    One app is made at start (:attr:`app`, its tokens :attr:`bot_token`,
    :attr:`app_token`, :attr:`signing_secret`); :meth:`add_app` adds more (other
    workspaces, other apps). See the module docstring for what it models.
    """

    #: Seconds Slack waits for an envelope's acknowledgement before sending it again.
    ack_timeout: float = 3.0
    #: Retries after the first delivery (Slack: 3), then the event is dropped.
    max_retries: int = 3
    #: Seconds between a disconnect frame and the server closing the socket.
    disconnect_grace: float = 1.0
    client_max_size: int = 64 * MB

    def __init__(self, *, mode: str = "socket", host: str = "127.0.0.1", port: int = 0,
                 seed: int = 0, extra_routes: Callable[[FakeSlack], list[web.RouteDef]] | None
                 = None) -> None:
        super().__init__(host=host, port=port, seed=seed, extra_routes=extra_routes)
        self._ids = itertools.count(1)
        self._seq = itertools.count(1)
        self._ts_last = 0
        self.apps: dict[str, App] = {}
        #: channel id -> {"id", "type" (im, channel, group, mpim), "messages": {ts: msg}}.
        self.channels: dict[str, dict[str, Any]] = {}
        self.files: dict[str, StoredFile] = {}
        self._tickets: dict[str, App] = {}         # Socket Mode connection tickets
        self._uploads: dict[str, tuple[App, str, str, int]] = {}  # ticket -> app, file, name, length
        self.statuses: list[StatusRecord] = []
        self.envelopes: list[Envelope] = []
        self._envelopes_by_id: dict[str, Envelope] = {}
        #: Envelope ids acknowledged, in the order the acks arrived.
        self.acks: list[str] = []
        #: Events given up after max_retries unacknowledged deliveries.
        self.dropped: list[dict[str, Any]] = []
        #: Every wrapper delivered by the Events API pusher: (attempt, status, event_id).
        self.deliveries: list[tuple[int, int | None, str]] = []
        self.unknown_params: list[tuple[str, str]] = []
        #: Every event the fake sent the apps, in order: (app id, wrapper).
        self.emitted: list[tuple[str, dict[str, Any]]] = []
        #: The order of a mention's two events: "random" (seeded), "message" or "mention" first.
        self.mention_order = "random"
        #: Whether the bot's own posts come back as message events (Slack sends them).
        self.echo_own_messages = True
        self.events_retry_delays: tuple[float, ...] = (0.05, 0.1, 0.2)
        self.events_timeout = 3.0
        #: Events API requests in flight at once per app (Slack sends several at a
        #: time); each conversation's events still go one after another, in order.
        self.events_workers = 1
        self._limits: dict[str, float] | None = None
        #: Channels whose posts are refused, with Slack's error (see refuse_posts).
        self.refused_posts: dict[str, str] = {}
        #: What a user saw change, in order: ``(kind, channel, ts, visible text)``, kind
        #: ``"message"`` (posted), ``"stream"`` (started or appended: the text so far),
        #: ``"stop"`` (a stream ended), ``"update"`` or ``"delete"``.
        self.history: list[tuple[str, str, str, str]] = []
        self._socket_numbers = itertools.count(1)
        self._pushed: list[tuple[int, int, dict[str, Any]]] = []
        self.app = self.add_app(mode=mode)

    # -- apps and ids ----------------------------------------------------------------------

    def new_id(self, prefix: str) -> str:
        """A Slack-shaped id: ``U``, ``C``, ``F``... and ten of [A-Z0-9]."""
        return _new_id(prefix, [next(self._ids) * 7919 + 104729])

    def add_app(self, *, mode: str = "socket", team_name: str = "Fake Workspace",
                bot_name: str = "chatkernel", team_id: str | None = None) -> App:
        """Install another app (its own workspace unless ``team_id`` is given)."""
        secret = uuid.uuid4().hex
        n = next(self._ids)
        app = App(app_id=self.new_id("A"), team_id=team_id or self.new_id("T"),
                  team_name=team_name,
                  bot_token=f"xoxb-{n:011d}-{n + 1:013d}-{uuid.uuid4().hex[:24]}",
                  app_token=f"xapp-1-{self.new_id('A')}-{n:013d}-{uuid.uuid4().hex}",
                  signing_secret=secret, bot_user=self.new_id("U"), bot_id=self.new_id("B"),
                  bot_name=bot_name, mode=mode)
        self.apps[app.app_id] = app
        return app

    @property
    def bot_token(self) -> str:
        return self.app.bot_token

    @property
    def app_token(self) -> str:
        return self.app.app_token

    @property
    def signing_secret(self) -> str:
        return self.app.signing_secret

    @property
    def bot_user(self) -> str:
        return self.app.bot_user

    def revoke(self, app: App | None = None) -> None:
        """Refuse the app's tokens from now on (``token_revoked``)."""
        (app or self.app).revoked = True

    def next_ts(self) -> str:
        """A message timestamp, unique and increasing: ``"1712345678.000123"``."""
        now = max(int(time.time() * 1_000_000), self._ts_last + 1)
        self._ts_last = now
        return f"{now // 1_000_000}.{now % 1_000_000:06d}"

    def channel(self, channel_id: str, kind: str | None = None) -> dict[str, Any]:
        """The channel (made on first use; the type from the id: D… a DM, C… a channel,
        G… a private channel)."""
        found = self.channels.get(channel_id)
        if found is None:
            if kind is None:
                kind = {"D": "im", "G": "group"}.get(channel_id[:1], "channel")
            found = self.channels[channel_id] = {"id": channel_id, "type": kind,
                                                 "messages": {}}
        return found

    # -- what users do ---------------------------------------------------------------------

    def inject_message(self, channel: str, text: str = "", *, user: str = "U0USER0001",
                       user_name: str = "", thread_ts: str | None = None,
                       files: Iterable[tuple[str, bytes, str]] = (), mention: bool = False,
                       app: App | None = None, channel_type: str | None = None,
                       subtype: str | None = None, bot_id: str | None = None) -> str:
        """A user writes ``text`` in ``channel``; returns the message's ts.

        ``mention``: prefix the app's bot mention (``<@U…> ``). ``thread_ts``: a reply in
        that thread. ``files``: ``(name, bytes, mimetype)`` attached (``file_share``).
        The app gets a ``message`` event, plus an ``app_mention`` when the text mentions
        it outside a DM, in :attr:`mention_order`.
        """
        app = app or self.app
        room = self.channel(channel, channel_type)
        if mention:
            text = f"<@{app.bot_user}> {text}"
        ts = self.next_ts()
        message: dict[str, Any] = {"type": "message", "user": user, "text": text, "ts": ts,
                                   "team": app.team_id}
        if bot_id is None:
            message["client_msg_id"] = str(uuid.uuid4())
        else:
            message["bot_id"] = bot_id
        if user_name:
            message["user_profile"] = {
                "avatar_hash": "g0000000000", "image_72": "https://a.slack-edge.com/x.png",
                "first_name": user_name, "real_name": user_name, "display_name": user_name,
                "team": app.team_id, "name": user_name.lower(), "is_restricted": False,
                "is_ultra_restricted": False}
        stored = [self._store_file(name, data, mime, user) for name, data, mime in files]
        if stored:
            message["subtype"] = "file_share"
            message["upload"] = False
            message["files"] = [self._file_object(f, app) for f in stored]
        if subtype is not None:
            message["subtype"] = subtype
        if thread_ts:
            parent = room["messages"].get(thread_ts)
            message["thread_ts"] = thread_ts
            message["parent_user_id"] = (parent or {}).get("user", user)
        room["messages"][ts] = message
        event = {**message, "channel": channel, "event_ts": ts, "channel_type": room["type"]}
        events = [event]
        if room["type"] != "im" and f"<@{app.bot_user}" in text:
            mention_event = {key: value for key, value in event.items()
                             if key not in ("channel_type", "subtype", "upload")}
            mention_event["type"] = "app_mention"
            first = self.mention_order == "mention" or (
                self.mention_order == "random" and self.random.random() < 0.5)
            events = [mention_event, event] if first else [event, mention_event]
        for item in events:
            self.emit(item, app=app)
        return ts

    def inject_event(self, event: dict[str, Any], *, app: App | None = None) -> str:
        """Deliver any event (an edit, a deletion, a join...) as Slack would; returns its
        event id."""
        event = dict(event)
        event.setdefault("event_ts", self.next_ts())
        return self.emit(event, app=app)

    def _store_file(self, name: str, data: bytes, mime: str, user: str) -> StoredFile:
        stored = StoredFile(id=self.new_id("F"), name=name, data=data, mimetype=mime,
                            title=name, user=user)
        self.files[stored.id] = stored
        return stored

    def _file_object(self, stored: StoredFile, app: App) -> dict[str, Any]:
        private = f"{self.base_url}/files-pri/{app.team_id}-{stored.id}/{stored.name}"
        return {"id": stored.id, "created": int(time.time()), "timestamp": int(time.time()),
                "name": stored.name, "title": stored.title or stored.name,
                "mimetype": stored.mimetype,
                "filetype": stored.name.rsplit(".", 1)[-1] if "." in stored.name else "binary",
                "user": stored.user, "mode": "hosted", "size": stored.size,
                "is_external": False, "is_public": False, "url_private": private,
                "url_private_download": f"{self.base_url}/files-pri/{app.team_id}-"
                                        f"{stored.id}/download/{stored.name}"}

    # -- events on their way to the app ------------------------------------------------------

    def wrap(self, event: dict[str, Any], app: App, event_id: str | None = None
             ) -> dict[str, Any]:
        """The Events API wrapper around an event (Socket Mode's envelope payload)."""
        return {"token": "fakeVerificationToken", "team_id": app.team_id,
                "api_app_id": app.app_id, "event": event, "type": "event_callback",
                "event_id": event_id or self.new_id("Ev"), "event_time": int(time.time()),
                "authorizations": [{"enterprise_id": None, "team_id": app.team_id,
                                    "user_id": app.bot_user, "is_bot": True,
                                    "is_enterprise_install": False}],
                "authed_users": [app.bot_user],
                "is_ext_shared_channel": False,
                "event_context": f"4-{uuid.uuid4().hex[:40]}"}

    def emit(self, event: dict[str, Any], *, app: App | None = None) -> str:
        """Send one event to the app, by Socket Mode or the Events API; its event id."""
        app = app or self.app
        wrapper = self.wrap(event, app)
        self.emitted.append((app.app_id, wrapper))
        delivery = _Delivery(next(self._seq), wrapper["event_id"], wrapper)
        if app.mode == "socket" and not app.open_sockets:
            # Slack tried and nobody was there: it comes as a retry when someone is.
            delivery.attempt, delivery.reason = 1, "timeout"
        app.pending.append(delivery)
        self._ensure_worker(app)
        app.signal.fire()
        self.changed()
        return wrapper["event_id"]

    def redeliver(self, event_id: str, *, app: App | None = None) -> None:
        """Slack sends an event again (a retry: same event id, ``retry_attempt`` + 1)."""
        app = app or self.app
        previous = [e for e in self.envelopes if e.event_id == event_id]
        wrappers = [e.payload for e in previous] or [
            w for _, _, w in self._pushed if w["event_id"] == event_id]
        if not wrappers:
            raise KeyError(f"event {event_id} was never delivered")
        attempt = max((e.retry_attempt for e in previous), default=0) + 1
        delivery = _Delivery(next(self._seq), event_id, wrappers[-1], attempt=attempt,
                             reason="timeout")
        app.pending.append(delivery)
        self._ensure_worker(app)
        app.signal.fire()

    def _ensure_worker(self, app: App) -> None:
        if not app.worker and self.running:
            app.worker = True
            if app.mode == "socket":
                self.start_soon(self._socket_worker, app)
            else:
                for _ in range(max(1, self.events_workers)):
                    self.start_soon(self._http_worker, app)

    # Socket Mode

    async def _socket_worker(self, app: App) -> None:
        try:
            while not self.closing:
                now = anyio.current_time()
                for delivery in [d for d in app.unacked.values() if d.deadline <= now]:
                    self._retry(app, delivery)
                if app.pending and self._ready(app):
                    app.pending.sort(key=lambda d: d.seq)
                    while app.pending and (sockets := self._ready(app)):
                        await self._send_envelope(app, app.pending.pop(0), sockets)
                    continue
                deadline = min((d.deadline for d in app.unacked.values()), default=math.inf)
                await app.signal.wait(None if deadline == math.inf
                                      else max(0.0, deadline - anyio.current_time()))
        finally:
            app.worker = False

    @staticmethod
    def _ready(app: App) -> list[_Socket]:
        """The sockets an envelope may go to now (none while frozen)."""
        return [] if app.frozen else [s for s in app.open_sockets if not s.closing]

    async def _send_envelope(self, app: App, delivery: _Delivery, sockets: list[_Socket]
                             ) -> None:
        if delivery.attempt > self.max_retries:
            self.dropped.append(delivery.wrapper)
            self.changed()
            return
        socket = sockets[0] if len(sockets) == 1 else self.random.choice(sockets)
        delivery.envelope_id = str(uuid.uuid4())
        delivery.socket = socket
        delivery.deadline = anyio.current_time() + self.ack_timeout
        app.unacked[delivery.envelope_id] = delivery
        envelope = {"envelope_id": delivery.envelope_id, "payload": delivery.wrapper,
                    "type": "events_api", "accepts_response_payload": False,
                    "retry_attempt": delivery.attempt, "retry_reason": delivery.reason}
        record = Envelope(delivery.envelope_id, delivery.event_id, delivery.attempt,
                          delivery.reason, delivery.wrapper)
        self.envelopes.append(record)
        self._envelopes_by_id[record.envelope_id] = record
        try:
            await socket.ws.send_str(json.dumps(envelope))
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            # Never sent: not an attempt. Back in the queue, for another socket.
            socket.closing = True
            app.unacked.pop(delivery.envelope_id, None)
            self._envelopes_by_id.pop(self.envelopes.pop().envelope_id, None)
            delivery.deadline, delivery.socket = math.inf, None
            app.pending.append(delivery)
        self.changed()

    def _retry(self, app: App, delivery: _Delivery) -> None:
        if app.unacked.pop(delivery.envelope_id, None) is None:
            return
        delivery.attempt += 1
        delivery.reason = "timeout"
        delivery.deadline = math.inf
        delivery.socket = None
        app.pending.append(delivery)
        app.signal.fire()

    def _hello(self, app: App) -> dict[str, Any]:
        return {"type": "hello", "num_connections": len(app.open_sockets),
                "debug_info": {"host": "applink-fake-1", "build_number": 1,
                               "approximate_connection_time": 18060},
                "connection_info": {"app_id": app.app_id}}

    async def _link(self, request: web.Request) -> web.StreamResponse:
        app = self._tickets.pop(request.query.get("ticket", ""), None)
        if app is None:
            return web.Response(status=401, text="invalid ticket")
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        socket = _Socket(app, ws, next(self._socket_numbers), request.transport)
        app.sockets.append(socket)
        self.changed()
        try:
            if not app.frozen:
                await ws.send_str(json.dumps(self._hello(app)))
            app.signal.fire()
            async for message in ws:
                if message.type == aiohttp.WSMsgType.TEXT:
                    self._ack(app, message.data)
                elif message.type == aiohttp.WSMsgType.PING and not app.frozen:
                    await ws.pong(message.data)
        finally:
            app.sockets.remove(socket)
            for delivery in [d for d in app.unacked.values() if d.socket is socket]:
                self._retry(app, delivery)
            self.changed()
        return ws

    def _ack(self, app: App, data: str) -> None:
        try:
            frame = json.loads(data)
        except ValueError:
            return
        envelope_id = frame.get("envelope_id") if isinstance(frame, dict) else None
        if envelope_id in app.unacked:
            del app.unacked[envelope_id]
        if envelope_id:
            self.acks.append(envelope_id)
            envelope = self._envelopes_by_id.get(envelope_id)
            if envelope is not None:
                envelope.acked = True
            self.changed()
            app.signal.fire()

    async def disconnect(self, reason: str = "refresh_requested", *, app: App | None = None
                         ) -> None:
        """Send a ``disconnect`` frame to every connection of the app; the server closes
        each one :attr:`disconnect_grace` seconds later."""
        app = app or self.app
        for socket in list(app.open_sockets):
            socket.closing = True
            with contextlib.suppress(ConnectionError, RuntimeError):
                await socket.ws.send_str(json.dumps({
                    "type": "disconnect", "reason": reason,
                    "debug_info": {"host": "applink-fake-1"}}))
            self.start_soon(self._close_later, socket)

    async def _close_later(self, socket: _Socket) -> None:
        await anyio.sleep(self.disconnect_grace)
        await socket.ws.close()

    def drop_sockets(self, app: App | None = None) -> None:
        """Cut every connection of the app without a close frame (a network failure)."""
        for socket in list((app or self.app).open_sockets):
            if socket.transport is not None:
                socket.transport.close()

    def freeze(self, app: App | None = None) -> None:
        """The app's sockets stay open but Slack stops talking on them (no hello, no
        envelopes, no pongs), and new ones get nothing either."""
        (app or self.app).frozen = True

    async def thaw(self, app: App | None = None) -> None:
        """Undo :meth:`freeze`: each open socket gets its hello and the queued envelopes."""
        app = app or self.app
        app.frozen = False
        for socket in app.open_sockets:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await socket.ws.send_str(json.dumps(self._hello(app)))
        app.signal.fire()

    # Events API

    def _next_push(self, app: App) -> _Delivery | None:
        """The first pending event whose conversation has none in flight (None: none)."""
        for index, delivery in enumerate(app.pending):
            if _conversation(delivery) not in app.pushing:
                return app.pending.pop(index)
        return None

    async def _http_worker(self, app: App) -> None:
        """Pushes the app's events to its request URL, each conversation's in order
        (:attr:`events_workers` of these run, one request in flight each)."""
        try:
            while not self.closing:
                delivery = self._next_push(app) if app.request_url else None
                if delivery is None:
                    await app.signal.wait()
                    continue
                conversation = _conversation(delivery)
                app.pushing.add(conversation)
                try:
                    await self._push(app, delivery)
                finally:
                    app.pushing.discard(conversation)
                    app.signal.fire()  # its conversation's next event may go now
        finally:
            app.worker = False

    async def _push(self, app: App, delivery: _Delivery) -> None:
        """One event to the request URL, retried as Slack does."""
        self._pushed.append((delivery.seq, delivery.attempt, delivery.wrapper))
        first = delivery.attempt

        def headers(number: int, first: int = first) -> dict[str, str]:
            retry = first + number - 1
            return {"X-Slack-Retry-Num": str(retry),
                    "X-Slack-Retry-Reason": "http_timeout"} if retry else {}

        def record(attempt: Any, first: int = first,
                   event_id: str = delivery.event_id) -> None:
            self.deliveries.append((first + attempt.attempt - 1, attempt.status,
                                    event_id))
            self.changed()

        signer = SlackSigner(app.signing_secret)
        delays = self.events_retry_delays[max(0, first - 1):] if first else \
            self.events_retry_delays
        url = app.request_url
        last = await self.webhooks.push(
            url, delivery.wrapper, signer=signer, headers=headers,
            on_attempt=record, delays=delays, timeout=self.events_timeout,
            wanted=lambda url=url: app.request_url == url and not self.closing)
        if last is None:  # the request URL changed: the event goes there
            app.pending.insert(0, delivery)
        elif not last.ok:
            self.dropped.append(delivery.wrapper)
        self.changed()

    async def verify_url(self, url: str, *, app: App | None = None) -> bool:
        """Slack's ``url_verification``: POST a challenge, signed; True when the answer
        echoes it. Then events go to ``url``."""
        app = app or self.app
        challenge = uuid.uuid4().hex
        body = json.dumps({"token": "fakeVerificationToken", "challenge": challenge,
                           "type": "url_verification"}).encode()
        headers = {"Content-Type": "application/json", **SlackSigner(app.signing_secret)(body)}
        try:
            async with aiohttp.ClientSession() as http, http.post(
                    url, data=body, headers=headers,
                    timeout=aiohttp.ClientTimeout(total=self.events_timeout)) as response:
                answer = await response.text()
                ok = response.status == 200 and challenge in answer
        except (aiohttp.ClientError, TimeoutError):
            return False
        if ok:
            self.set_request_url(url, app=app)
        return ok

    def set_request_url(self, url: str, *, app: App | None = None) -> None:
        app = app or self.app
        app.request_url = url
        self._ensure_worker(app)
        app.signal.fire()

    # -- reading back ----------------------------------------------------------------------

    def sent(self, channel: str | None = None, *, app: App | None = None,
             thread_ts: str | None = None) -> list[SentMessage]:
        """What the app's bot posted (every app's when ``app`` is None), in order."""
        return [m for m in self.sent_messages
                if (channel is None or m.channel == channel)
                and (app is None or m.app == app.app_id)
                and (thread_ts is None or m.thread_ts == thread_ts)]

    def texts(self, channel: str | None = None) -> list[str]:
        return [m.plain_text for m in self.sent(channel) if not m.files and not m.deleted]

    def status_calls(self, channel: str) -> list[StatusRecord]:
        return [s for s in self.statuses if s.channel == channel]

    # -- knobs -----------------------------------------------------------------------------

    def enforce_limits(self, per_channel_per_second: int = 1,
                       per_workspace_per_minute: int = 600,
                       statuses_per_minute: int = STATUS_TIER_PER_MINUTE) -> None:
        """chat.postMessage's limits: at most ``per_channel_per_second`` a second in a
        channel and ``per_workspace_per_minute`` a minute in a workspace; and
        assistant.threads.setStatus's, ``statuses_per_minute`` a minute in a workspace
        (sets and clears alike); in rolling windows; beyond, 429 with Retry-After (off
        by default)."""
        self._limits = {"channel": per_channel_per_second,
                        "workspace": per_workspace_per_minute,
                        "statuses": statuses_per_minute}
        self.rates.reset()

    def disable_limits(self) -> None:
        self._limits = None

    def refuse_posts(self, channel_id: str, error: str = "channel_not_found") -> None:
        """From now on chat.postMessage to ``channel_id`` answers ``ok: false`` with
        ``error`` (``channel_not_found``, ``not_in_channel``, ``is_archived``), HTTP 200
        as Slack does; its events still arrive."""
        self.refused_posts[channel_id] = error

    def fail_next(self, method: str, error: str, *, times: int = 1, status: int = 200,
                  **extra: Any) -> None:
        """The next ``times`` calls of ``method`` answer ``{"ok": false, "error": error}``
        and have no effect."""
        self.faults.fail(method, SlackError(error, status, **extra), times=times)

    def fail_next_with_retry_after(self, method: str, retry_after: int) -> None:
        self.faults.fail(method, self.rate_limited(retry_after))

    def drop_next(self, method: str, *, after_processing: bool = False, times: int = 1) -> None:
        """The next call loses its connection: before it takes effect, or after (the
        message IS posted, the answer is lost)."""
        self.faults.drop(method, after_processing=after_processing, times=times)

    def rate_limited(self, wait: float) -> SlackError:
        retry_after = max(1, math.ceil(wait))
        return SlackError("ratelimited", 429, {"Retry-After": str(retry_after)})

    # -- HTTP ------------------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        return [web.route("*", "/api/{method}", self._api),
                web.get("/link/", self._link),
                web.post("/upload/v1/{ticket}", self._upload),
                web.get("/files-pri/{team}-{file}/download/{name}", self._file),
                web.get("/files-pri/{team}-{file}/{name}", self._file)]

    def developer_info(self) -> dict[str, Any]:
        return {**super().developer_info(), "api_base": f"{self.base_url}/api/",
                "bot_token": self.bot_token, "app_token": self.app_token,
                "signing_secret": self.signing_secret, "bot_user": self.bot_user,
                "team_id": self.app.team_id, "mode": self.app.mode}

    def config_snippet(self) -> str:
        """An account of the app's mode pointed at the fake, and how to write as a user."""
        mode = {part: text.format(s=self) for part, text in DEV_MODES[self.app.mode].items()}
        return DEV_SNIPPET.format(s=self, mode=self.app.mode, **mode)

    def developer_routes(self) -> list[web.RouteDef]:
        """A dev server's routes: ``POST /_fake/messages`` (a user writes: ``channel``,
        optional ``text``, ``user``, ``user_name``, ``thread_ts``, ``mention``, ``files``
        of ``{"name", "text"}``; answers the ``ts``), ``GET /_fake/sent`` (``?channel=``,
        ``?wait=``, ``?after=``: what the bot posted) and ``POST /_fake/request_url``
        (``{"url"}``: verify an Events API request URL, as Slack's app settings do)."""

        async def inject(request: web.Request) -> web.Response:
            body = fields(await json_body(request), DEVELOPER_MESSAGE_FIELDS,
                          required=("channel",))
            files = []
            for item in body.pop("files", []):
                if not isinstance(item, dict) or not isinstance(item.get("name"), str) \
                        or not isinstance(item.get("text"), str):
                    raise bad_request('each file is {"name": "notes.txt", "text": "..."}')
                files.append((item["name"], item["text"].encode(), "text/plain"))
            channel, text = body.pop("channel"), body.pop("text", "")
            return web.json_response({"ts": self.inject_message(channel, text, files=files,
                                                                **body)})

        async def sent(request: web.Request) -> web.Response:
            channel = request.query.get("channel")
            return web.json_response({"messages": [
                {"channel": m.channel, "ts": m.ts, "thread_ts": m.thread_ts,
                 "text": m.plain_text, "files": [f.name for f in m.files]}
                for m in await listing(request, self, lambda: self.sent(channel))]})

        async def request_url(request: web.Request) -> web.Response:
            url = fields(await json_body(request), {"url": str}, required=("url",))["url"]
            return web.json_response({"verified": await self.verify_url(url)})

        return [web.post("/_fake/messages", inject), web.get("/_fake/sent", sent),
                web.post("/_fake/request_url", request_url)]

    async def unknown_route(self, request: web.Request) -> web.StreamResponse:
        return web.Response(status=404, text="Not Found")

    async def _params(self, request: web.Request) -> dict[str, Any]:
        values: dict[str, Any] = dict(request.query)
        if not request.can_read_body:
            return values
        body = await request.read()
        if not body:
            return values
        if request.content_type == "application/json":
            decoded = json_object(body)
            if decoded is None:
                raise SlackError("invalid_json")
            values.update(decoded)
        elif request.content_type == "application/x-www-form-urlencoded":
            values.update(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        else:
            raise SlackError("invalid_form_data")
        return values

    def _app_for(self, token: str | None, method: str) -> App:
        if not token:
            raise SlackError("not_authed")
        for app in self.apps.values():
            if token == app.bot_token or token == app.app_token:
                if app.revoked:
                    raise SlackError("token_revoked")
                if method == "apps.connections.open" and token != app.app_token:
                    raise SlackError("not_allowed_token_type")
                if method != "apps.connections.open" and token == app.app_token:
                    raise SlackError("not_allowed_token_type")
                return app
        raise SlackError("invalid_auth")

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        if method not in METHOD_PARAMS:
            return SlackError("unknown_method").response()
        try:
            params = await self._params(request)
        except SlackError as error:
            return error.response()
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header.startswith("Bearer ") else params.pop("token", None)
        params.pop("token", None)
        for key in params:
            if key not in METHOD_PARAMS[method]:
                self.unknown_params.append((method, key))
        call = Call(method=method, params=params, http_method=request.method,
                    content_type=request.content_type)

        async def answer() -> web.StreamResponse:
            app = self._app_for(token, method)
            scopes = self._granted(token) or set()
            scope = (APP_TOKEN_SCOPES if token == app.app_token else METHOD_SCOPES).get(method)
            if scope and scope not in scopes:
                raise SlackError("missing_scope", needed=scope,
                                 provided=",".join(sorted(scopes)))
            handler = getattr(self, "_api_" + method.replace(".", "_"))
            return web.json_response({"ok": True, **await handler(app, params)})

        response = await self.serve_call(request, call, answer)
        granted = self._granted(token)
        if granted is not None:
            response.headers["x-oauth-scopes"] = ",".join(sorted(granted))
            response.headers["x-accepted-oauth-scopes"] = \
                {**METHOD_SCOPES, **APP_TOKEN_SCOPES}.get(method, "")
        return response

    def _granted(self, token: str | None) -> set[str] | None:
        """The scopes of a token the fake knows (None: an unknown or revoked one)."""
        for app in self.apps.values():
            if not app.revoked and token == app.bot_token:
                return app.scopes
            if not app.revoked and token == app.app_token:
                return app.app_scopes
        return None

    # -- methods ---------------------------------------------------------------------------

    async def _api_auth_test(self, app: App, p: dict[str, Any]) -> dict[str, Any]:
        return {"url": f"https://{app.team_name.lower().replace(' ', '-')}.slack.com/",
                "team": app.team_name, "user": app.bot_name, "team_id": app.team_id,
                "user_id": app.bot_user, "bot_id": app.bot_id, "is_enterprise_install": False}

    async def _api_apps_connections_open(self, app: App, p: dict[str, Any]) -> dict[str, Any]:
        ticket = uuid.uuid4().hex
        self._tickets[ticket] = app
        host, port = self.base_url.removeprefix("http://").rsplit(":", 1)
        return {"url": f"ws://{host}:{port}/link/?ticket={ticket}&app_id={app.app_id}"}

    def _room(self, channel: Any) -> dict[str, Any]:
        if not isinstance(channel, str) or channel not in self.channels:
            raise SlackError("channel_not_found")
        return self.channels[channel]

    def _check_tier(self, app: App, method: str) -> None:
        if self._limits is None:
            return
        self.check_rates([(("tier", app.team_id, method), METHOD_TIERS[method], 60.0)])

    def _check_rate(self, app: App, channel: str) -> None:
        if self._limits is None:
            return
        self.check_rates([(("channel", app.team_id, channel), int(self._limits["channel"]), 1.0),
                          (("workspace", app.team_id), int(self._limits["workspace"]), 60.0)])

    def _post(self, app: App, channel: str, text: str, thread_ts: str | None, *,
              files: list[StoredFile] = (), mrkdwn: bool = True, method: str,
              params: dict[str, Any]) -> dict[str, Any]:
        room = self.channels[channel]
        ts = self.next_ts()
        message: dict[str, Any] = {
            "type": "message", "text": text, "ts": ts, "user": app.bot_user,
            "bot_id": app.bot_id, "team": app.team_id,
            "bot_profile": {"id": app.bot_id, "deleted": False, "name": app.bot_name,
                            "updated": int(time.time()), "app_id": app.app_id,
                            "icons": {"image_36": "https://a.slack-edge.com/36.png",
                                      "image_48": "https://a.slack-edge.com/48.png",
                                      "image_72": "https://a.slack-edge.com/72.png"},
                            "team_id": app.team_id}}
        if thread_ts:
            message["thread_ts"] = thread_ts
            message["parent_user_id"] = room["messages"].get(thread_ts, {}).get("user",
                                                                              app.bot_user)
        if files:
            message["files"] = [self._file_object(f, app) for f in files]
            message["upload"] = True
        room["messages"][ts] = message
        # Slack clears the working status of a thread the app replies in.
        if thread_ts and any(s.thread_ts == thread_ts and s.channel == channel and s.status
                             for s in self.statuses[-50:]):
            self.statuses.append(StatusRecord(app.app_id, channel, thread_ts, "", time.time()))
        self.history.append(("stream" if method == "chat.startStream" else "message", channel,
                             ts, mrkdwn_to_text(text) if mrkdwn else _unescape(text)))
        self.record_sent(SentMessage(app=app.app_id, channel=channel, ts=ts, text=text,
                                     thread_ts=thread_ts, mrkdwn=mrkdwn, files=list(files),
                                     method=method, params=params,
                                     streaming=method == "chat.startStream"))
        if self.echo_own_messages:
            event = {**message, "channel": channel, "event_ts": ts,
                     "channel_type": room["type"]}
            if files:
                event["subtype"] = "file_share"
            self.emit(event, app=app)
        return message

    async def _api_chat_postMessage(self, app: App, p: dict[str, Any]) -> dict[str, Any]:
        if p.get("channel") in self.refused_posts:
            raise SlackError(self.refused_posts[p["channel"]])
        room = self._room(p.get("channel"))
        text = p.get("text")
        blocks = p.get("blocks")
        if isinstance(blocks, str):
            try:
                blocks = json.loads(blocks)
            except ValueError:
                raise SlackError("invalid_blocks_format") from None
        if blocks is not None and (not isinstance(blocks, list) or not all(
                isinstance(b, dict) and isinstance(b.get("type"), str) for b in blocks)):
            raise SlackError("invalid_blocks")
        if text is not None and not isinstance(text, str):
            raise SlackError("invalid_arguments")
        if not (text or "").strip() and not blocks and not p.get("attachments"):
            raise SlackError("no_text")
        if len(text or "") > TEXT_MAX:
            raise SlackError("msg_too_long")
        thread_ts = p.get("thread_ts") or None
        if thread_ts is not None and not re.fullmatch(r"\d{10}\.\d{6}", str(thread_ts)):
            raise SlackError("invalid_thread_ts")
        self._check_rate(app, room["id"])
        mrkdwn = p.get("mrkdwn", True) not in (False, "false", "0", 0)
        message = self._post(app, room["id"], text or "", thread_ts, mrkdwn=mrkdwn,
                             method="chat.postMessage", params=p)
        return {"channel": room["id"], "ts": message["ts"], "message": message}

    # -- live replies: updates, deletes, streams ------------------------------------------

    def _bot_message(self, app: App, p: dict[str, Any], refusal: str) -> SentMessage:
        room = self._room(p.get("channel"))
        ts = p.get("ts")
        if not ts or ts not in room["messages"]:
            raise SlackError("message_not_found")
        found = next((m for m in self.sent_messages if m.channel == room["id"] and m.ts == ts
                      and not m.deleted), None)
        if found is None:
            raise SlackError("message_not_found")
        if found.app != app.app_id:
            raise SlackError(refusal)
        return found

    def _stream_text(self, p: dict[str, Any]) -> str:
        text = p.get("markdown_text") or ""
        if not isinstance(text, str):
            raise SlackError("invalid_arguments")
        if len(text) > STREAM_TEXT_MAX:
            raise SlackError("msg_too_long")
        return text

    async def _api_chat_update(self, app: App, p: dict[str, Any]) -> dict[str, Any]:
        message = self._bot_message(app, p, "cant_update_message")
        text = p.get("text")
        if text is not None and not isinstance(text, str):
            raise SlackError("invalid_arguments")
        if not (text or "").strip() and not p.get("blocks"):
            raise SlackError("no_text")
        if len(text or "") > TEXT_MAX:
            raise SlackError("msg_too_long")
        self._check_tier(app, "chat.update")
        message.text, message.updates = text or "", message.updates + 1
        message.mrkdwn = True  # chat.update's text is mrkdwn
        stored = self.channels[message.channel]["messages"][message.ts]
        stored["text"] = message.text
        stored["edited"] = {"user": app.bot_user, "ts": self.next_ts()}
        self.history.append(("update", message.channel, message.ts, message.plain_text))
        self.changed()
        return {"channel": message.channel, "ts": message.ts, "text": message.text,
                "message": dict(stored)}

    async def _api_chat_delete(self, app: App, p: dict[str, Any]) -> dict[str, Any]:
        message = self._bot_message(app, p, "cant_delete_message")
        self._check_tier(app, "chat.delete")
        message.deleted = True
        del self.channels[message.channel]["messages"][message.ts]
        self.history.append(("delete", message.channel, message.ts, message.plain_text))
        self.changed()
        return {"channel": message.channel, "ts": message.ts}

    async def _api_chat_startStream(self, app: App, p: dict[str, Any]) -> dict[str, Any]:
        room = self._room(p.get("channel"))
        thread_ts = p.get("thread_ts")
        if not thread_ts:  # a stream is a reply in a thread
            raise SlackError("invalid_arguments")
        if not re.fullmatch(r"\d{10}\.\d{6}", str(thread_ts)):
            raise SlackError("invalid_thread_ts")
        text = self._stream_text(p)
        self._check_tier(app, "chat.startStream")
        message = self._post(app, room["id"], text, str(thread_ts), method="chat.startStream",
                             params=p)
        return {"channel": room["id"], "ts": message["ts"]}

    def _streaming(self, app: App, p: dict[str, Any]) -> SentMessage:
        message = self._bot_message(app, p, "message_not_owned_by_app")
        if not message.streaming:
            raise SlackError("message_not_in_streaming_state")
        return message

    async def _api_chat_appendStream(self, app: App, p: dict[str, Any]) -> dict[str, Any]:
        message = self._streaming(app, p)
        text = self._stream_text(p)
        if not text:
            raise SlackError("invalid_arguments")  # markdown_text is required
        self._check_tier(app, "chat.appendStream")
        self._append(message, text, "stream")
        return {"channel": message.channel, "ts": message.ts}

    async def _api_chat_stopStream(self, app: App, p: dict[str, Any]) -> dict[str, Any]:
        message = self._streaming(app, p)
        text = self._stream_text(p)
        self._check_tier(app, "chat.stopStream")
        message.streaming = False
        self._append(message, text, "stop")
        return {"channel": message.channel, "ts": message.ts,
                "message": dict(self.channels[message.channel]["messages"][message.ts])}

    def _append(self, message: SentMessage, text: str, kind: str) -> None:
        message.text += text
        self.channels[message.channel]["messages"][message.ts]["text"] = message.text
        self.history.append((kind, message.channel, message.ts, message.plain_text))
        self.changed()

    async def _api_files_getUploadURLExternal(self, app: App, p: dict[str, Any]
                                              ) -> dict[str, Any]:
        name = p.get("filename")
        try:
            length = int(p.get("length", ""))
        except ValueError:
            raise SlackError("invalid_arguments") from None
        if not name or length <= 0:
            raise SlackError("invalid_arguments")
        if length > 1024 * MB:
            raise SlackError("file_too_large")
        ticket = uuid.uuid4().hex
        file_id = self.new_id("F")
        self._uploads[ticket] = (app, file_id, str(name), length)
        return {"upload_url": f"{self.base_url}/upload/v1/{ticket}", "file_id": file_id}

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        found = self._uploads.pop(request.match_info["ticket"], None)
        if found is None:
            return web.Response(status=404, text="upload URL not found or used")
        app, file_id, name, length = found
        data = await request.read()
        call = Call(method="upload", params={"file_id": file_id, "bytes": len(data)},
                    http_method=request.method, content_type=request.content_type)

        async def answer() -> web.StreamResponse:
            if len(data) != length:
                self._uploads[request.match_info["ticket"]] = found
                return web.Response(status=400, text=f"expected {length} bytes, got "
                                                     f"{len(data)}")
            import mimetypes

            mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
            self.files[file_id] = StoredFile(id=file_id, name=name, data=data, mimetype=mime,
                                             title=name, user=app.bot_user)
            return web.Response(text=f"OK - {len(data)}", content_type="text/plain")

        return await self.serve_call(request, call, answer)

    async def _api_files_completeUploadExternal(self, app: App, p: dict[str, Any]
                                                ) -> dict[str, Any]:
        raw = p.get("files")
        try:
            items = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            raise SlackError("invalid_arguments") from None
        if not isinstance(items, list) or not items:
            raise SlackError("invalid_arguments")
        stored = []
        for item in items:
            found = self.files.get(item.get("id")) if isinstance(item, dict) else None
            if found is None:
                raise SlackError("file_not_found")
            if item.get("title"):
                found.title = item["title"]
            stored.append(found)
        channel = p.get("channel_id")
        if channel is not None:
            room = self._room(channel)
            comment = p.get("initial_comment") or ""
            self._check_rate(app, room["id"])
            self._post(app, room["id"], comment, p.get("thread_ts") or None, files=stored,
                       method="files.completeUploadExternal", params=p)
        return {"files": [{"id": f.id, "title": f.title} for f in stored]}

    async def _api_assistant_threads_setStatus(self, app: App, p: dict[str, Any]
                                               ) -> dict[str, Any]:
        room = self._room(p.get("channel_id"))
        thread_ts = p.get("thread_ts")
        if not isinstance(thread_ts, str) or not re.fullmatch(r"\d{10}\.\d{6}", thread_ts):
            raise SlackError("invalid_thread_ts")
        status = p.get("status")
        if not isinstance(status, str):
            raise SlackError("invalid_arguments")
        if self._limits is not None:
            self.check_rates([(("statuses", app.team_id), int(self._limits["statuses"]),
                               60.0)])
        self.statuses.append(StatusRecord(app.app_id, room["id"], thread_ts, status,
                                          time.time()))
        self.changed()
        return {}

    async def _file(self, request: web.Request) -> web.StreamResponse:
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header.startswith("Bearer ") else ""
        app = next((a for a in self.apps.values()
                    if a.bot_token == token and not a.revoked), None)
        stored = self.files.get(request.match_info["file"])
        if app is None or app.team_id != request.match_info["team"]:
            # Slack answers a file request without a valid token with its login page.
            return web.Response(text="<!DOCTYPE html><html><body>Sign in to Slack"
                                     "</body></html>", content_type="text/html")
        if stored is None or "files:read" not in app.scopes:
            return web.Response(status=404, text="file_not_found")
        return web.Response(body=stored.data, content_type=stored.mimetype)
