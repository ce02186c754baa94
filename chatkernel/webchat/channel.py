"""The built-in web chat channel: a chat page and its JSON API on the gateway.

API (the page uses it, and so do tests)::

    POST /webchat/messages  {"chat_id", "user_id", "text", "client_message_id"?}
         -> 202 {"message_id"}
    GET  /webchat/messages?chat_id=...&after=<id>
         -> {"messages": [{"id", "role": "user"|"bot", "text", "media", "ts"}]}
    GET  /webchat/events?chat_id=...&after=<id>      (Server-Sent Events, one per message)

The event stream also carries live replies (chatkernel.sdk.live, mode ``draft``): an
``event: preview`` with ``{"preview_id", "text"}`` each time the answer being written
grows, ``"text": null`` when a preview is gone. Previews are not in the transcript
(the finished answer is, as a ``message``, once) and live in the instance's memory:
with several instances, only a page connected to the one running the turn sees them.

An account other than ``default`` is served under ``/webchat/<account>/...``.
The transcript (what each chat showed: the person's messages, everything sent
to it) lives in the store, so a page reloaded after a restart shows the
conversation again; ids grow across restarts, so ``after`` and an event
stream's ``Last-Event-ID`` keep working through one. Pages get the last
``history_limit`` messages of their chat.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
from aiohttp import web
from pydantic import Field

from chatkernel.sdk.channel import Channel, ChannelLimits, Deliver
from chatkernel.sdk.errors import Backlogged
from chatkernel.sdk.receiving.transport import Transport
from chatkernel.sdk.live import LiveMode, LiveReplies, Preview
from chatkernel.core.config import AccountConfig
from chatkernel.sdk.accounts import DmPolicy
from chatkernel.core.gateway.http_guard import RequestError, read_json_object
from chatkernel.sdk.models import (
    INBOUND_FIELD_LIMITS,
    InboundMessage,
    OutboundPayload,
    ProbeResult,
    Route,
    SendError,
    SendResult,
)
from chatkernel.core.store.base import TranscriptEntry

log = logging.getLogger("chatkernel.webchat")

MAX_TEXT = 64_000
#: The largest POST body: the longest text, JSON-escaped, and the other fields.
MAX_BODY_BYTES = 1024 * 1024
SSE_KEEPALIVE_SECONDS = 15.0
#: How often a stream reads the transcript when several instances share the store.
SHARED_POLL_SECONDS = 1.0


class WebChatAccount(AccountConfig):
    """A web chat account. The page is local, so anyone who reaches it may talk: its
    ``dm_policy`` is ``"open"`` by default, not ``"pairing"`` (unset: open). A config that
    lists its own ``allow_from`` (without ``"*"``) and names no policy keeps admitting
    exactly those senders, as it did before there were policies
    (chatkernel.core.inbound.access.dm_policy_of)."""

    allow_from: list[str] = Field(default_factory=lambda: ["*"])
    dm_policy: DmPolicy | None = None  # type: ignore[assignment]
    require_mention: bool = False
    history_limit: int = Field(500, ge=10)


class WebChatChannel(Channel, LiveReplies):
    name = "webchat"
    account_model = WebChatAccount
    limits = ChannelLimits(text_limit=4000, text_unit="chars")
    settings_keys = frozenset({"text_limit"})
    #: Its platform is the gateway's own page: without the gateway's HTTP server no one
    #: sees what it sends (a proactive send with no gateway running is refused).
    needs_http_server = True
    config_example = """\
[channels.webchat]                    # enabled = false here turns the web chat off
[channels.webchat.accounts.default]   # the page at /
dm_policy = "open"                    # the page admits everyone who reaches it
allow_from = ["*"]
history_limit = 500                   # messages of its chat a page shows
"""

    def __init__(self, account, context=None) -> None:
        super().__init__(account, context)
        settings = self.context.settings
        text_limit = getattr(settings, "text_limit", None) if settings is not None else None
        if text_limit is not None:
            if not isinstance(text_limit, int) or text_limit < 1:
                from chatkernel.core.config import ConfigError

                raise ConfigError(f"expected a whole number of at least 1, got {text_limit!r}",
                                  key="channels.webchat.text_limit")
            self.limits = ChannelLimits(text_limit=text_limit, text_unit="chars")
        self._changed: dict[str, anyio.Event] = {}
        self._streams: dict[str, int] = {}  # open event streams per chat
        #: The live replies' previews a page shows now: chat -> preview id -> text.
        self._previews: dict[str, dict[str, str]] = {}
        #: The previews an answer has taken the place of, per chat: a late update of one
        #: (a coalesced update still on its way) must not bring its draft back.
        self._finished: dict[str, set[str]] = {}
        self._preview_ids = 0
        self._deliver: Deliver | None = None
        self._stopped = False  # the receive loop ended: event streams end too
        self.prefix = "/webchat" if account.name == "default" else f"/webchat/{account.name}"

    # -- the channel contract ------------------------------------------------------

    def transport(self) -> "WebChatTransport":
        return WebChatTransport(self)

    async def serve(self, deliver: Deliver) -> None:
        """Take the page's posts and feed its streams, until cancelled."""
        self._deliver = deliver
        self._stopped = False
        self.context.report_alive()  # serving the page is all there is to connect
        try:
            await anyio.sleep_forever()
        finally:
            self._deliver = None
            # End every open event stream now: the gateway's HTTP server waits for its
            # handlers when it stops, and a stream would otherwise wait for a keepalive
            # to find its client gone. Browsers reconnect by themselves.
            self._stopped = True
            for event in self._changed.values():
                event.set()
            self._changed.clear()

    async def send(self, route: Route, payload: OutboundPayload) -> SendResult:
        if payload.is_media:
            media = [{"name": Path(payload.media_path).name, "kind": payload.media_kind}]
            entry = await self._append(route.chat_id, "bot", payload.caption, media)
        else:
            if not payload.text:
                raise SendError("empty message")
            entry = await self._append(route.chat_id, "bot", payload.text)
        assert entry is not None  # no client id: never a retry
        taken = self._previews.pop(route.chat_id, None)
        if taken:  # the answer takes the drafts' place
            self._finished.setdefault(route.chat_id, set()).update(taken)
            self._wake(route.chat_id)
        return SendResult(message_id=str(entry.id))

    # -- live replies: drafts on the page's event stream -------------------------------

    def live_mode(self, route: Route) -> LiveMode | None:
        return "draft"

    async def start_preview(self, route: Route, mode: LiveMode,
                            payload: OutboundPayload) -> str:
        self._preview_ids += 1
        preview_id = str(self._preview_ids)
        self._finished.pop(route.chat_id, None)  # a new answer: the last one's are over
        self._show_preview(route.chat_id, preview_id, payload.text)
        return preview_id

    async def update_preview(self, route: Route, preview: Preview,
                             payload: OutboundPayload) -> None:
        self._show_preview(route.chat_id, preview.id, payload.text)

    async def stop_preview(self, route: Route, preview: Preview) -> None:
        """An interrupted turn's draft goes, as a draft does (it was never a message)."""
        await self.delete_preview(route, preview)

    async def delete_preview(self, route: Route, preview: Preview) -> None:
        previews = self._previews.get(route.chat_id, {})
        if previews.pop(preview.id, None) is not None:
            if not previews:
                self._previews.pop(route.chat_id, None)
            self._wake(route.chat_id)

    def _show_preview(self, chat_id: str, preview_id: str, text: str) -> None:
        if preview_id in self._finished.get(chat_id, ()):
            return  # its answer is on the page already
        self._previews.setdefault(chat_id, {})[preview_id] = text
        self._wake(chat_id)

    async def probe(self) -> ProbeResult:
        if self._deliver is not None:
            return ProbeResult(ok=True, detail="serving", latency_ms=0.0)
        if self.account.runtime.loop_started_at is None:
            # Never started in this process (a command probing from its own kernel): the
            # web chat has no platform or credentials to check, only the gateway serving it.
            return ProbeResult(ok=True, detail="nothing to check: the running gateway serves "
                                              "it", latency_ms=0.0)
        return ProbeResult(ok=False, detail="not running", latency_ms=0.0)

    def routes(self) -> list[tuple[str, str, Any]]:
        """The page and its API, under this account's prefix."""
        routes = [
            ("POST", f"{self.prefix}/messages", self.post_message),
            ("GET", f"{self.prefix}/messages", self.get_messages),
            ("GET", f"{self.prefix}/events", self.events),
        ]
        if self.account.name == "default":
            routes.append(("GET", "/", self.page))
        return routes

    # -- transcript ------------------------------------------------------------------------

    async def _append(self, chat_id: str, role: str, text: str,
                      media: list[dict[str, Any]] | None = None, *,
                      client_id: str | None = None) -> TranscriptEntry | None:
        """Add to the chat's transcript (in the store) and wake its event streams; None
        when ``client_id`` is there already."""
        entry = await self.context.store.transcript_add(self.name, self.account.name, chat_id, role,
                                                text, media, client_id=client_id)
        self._wake(chat_id)
        return entry

    def _wake(self, chat_id: str) -> None:
        event = self._changed.pop(chat_id, None)
        if event is not None:
            event.set()  # wake every SSE stream of this chat

    async def messages(self, chat_id: str, after: int = 0) -> list[dict[str, Any]]:
        """The chat's last ``history_limit`` messages after ``after``, as the API shows them."""
        limit = getattr(self.config, "history_limit", 500)
        entries = await self.context.store.transcript_read(self.name, self.account.name, chat_id,
                                                   after=after, limit=limit)
        return [entry.as_dict() for entry in entries]

    def _changed_event(self, chat_id: str) -> anyio.Event:
        event = self._changed.get(chat_id)
        if event is None:
            event = self._changed[chat_id] = anyio.Event()
        return event

    # -- HTTP handlers -----------------------------------------------------------------------

    async def post_message(self, request: web.Request) -> web.Response:
        try:
            posted = parse_post(await read_json_object(request, limit=MAX_BODY_BYTES))
        except RequestError as exc:
            return _error(exc.status, str(exc))
        if self._deliver is None:
            return _error(503, "the web chat channel is not running")
        # A full backlog refuses the post before its transcript entry is written (that
        # entry and the journal's are one): the page offers to send it again.
        room = getattr(self._deliver, "room", None)  # the kernel's receiver has it
        if room is not None:
            try:
                await room(self.name, self.account.name)
            except Backlogged as exc:
                return web.json_response({"error": str(exc)}, status=503,
                                         headers=exc.headers)
        client_id = posted.client_message_id
        # Written with the journal entry deliver() makes (one commit): a message is in
        # the transcript exactly when the kernel has it.
        entry = await self._append(posted.chat_id, "user", posted.text, client_id=client_id)
        if entry is None:  # a client retrying, even after a restart: same answer
            known = await self.context.store.transcript_find(self.name, self.account.name,
                                                     posted.chat_id, client_id)
            return web.json_response({"message_id": str(known.id if known else "")},
                                     status=202)
        message = InboundMessage(
            channel=self.name, account=self.account.name, chat_id=posted.chat_id,
            # The journal dedupes per account; a client's ids are its chat's own.
            message_id=(f"{posted.chat_id}:{client_id}" if client_id
                        else f"wc-{entry.id}-{int(entry.ts * 1000)}"),
            sender_id=posted.user_id, sender_name=posted.user_name,
            text=posted.text, timestamp=entry.ts)
        await self._deliver(message)
        return web.json_response({"message_id": str(entry.id)}, status=202)

    async def get_messages(self, request: web.Request) -> web.Response:
        try:
            chat_id, after = parse_transcript_query(request.query)
        except RequestError as exc:
            return _error(exc.status, str(exc))
        return web.json_response({"messages": await self.messages(chat_id, after)})

    async def events(self, request: web.Request) -> web.StreamResponse:
        try:
            chat_id, after = parse_transcript_query(request.query)
            last_seen = request.headers.get("Last-Event-ID")
            if last_seen:  # EventSource reconnecting: resume where it was
                after = max(after, parse_message_id(last_seen, "the Last-Event-ID header"))
        except RequestError as exc:
            return _error(exc.status, str(exc))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        self._streams[chat_id] = self._streams.get(chat_id, 0) + 1
        # With several gateway instances the bot's answers may be written by another
        # one, which cannot wake this stream: it looks at the transcript every second.
        wait = SHARED_POLL_SECONDS if self.context.shares_store else SSE_KEEPALIVE_SECONDS
        keepalive_at = anyio.current_time() + SSE_KEEPALIVE_SECONDS
        drafts: dict[str, str] = {}  # the previews this page shows
        try:
            await response.prepare(request)
            while not self._stopped:
                event = self._changed_event(chat_id)
                for entry in await self.messages(chat_id, after):
                    after = entry["id"]
                    await response.write(f"id: {after}\nevent: message\ndata: "
                                         f"{json.dumps(entry)}\n\n".encode())
                drafts = await self._write_previews(response, chat_id, drafts)
                with anyio.move_on_after(wait) as scope:
                    await event.wait()
                if scope.cancelled_caught and anyio.current_time() >= keepalive_at:
                    await response.write(b": keepalive\n\n")
                    keepalive_at = anyio.current_time() + SSE_KEEPALIVE_SECONDS
        except ConnectionResetError:
            # The page was closed or reloaded: an everyday event, not an error. (The
            # page reconnects by itself, and picks up after the last id it saw.)
            log.debug("%s: an event stream of chat %s was closed by its client",
                      self.account.key, chat_id)
        finally:
            self._streams[chat_id] -= 1
            if not self._streams[chat_id]:  # the last stream of the chat: nobody waits
                del self._streams[chat_id]
                self._changed.pop(chat_id, None)
        return response

    async def _write_previews(self, response: web.StreamResponse, chat_id: str,
                              shown: dict[str, str]) -> dict[str, str]:
        """Tell a page what changed of the chat's previews since ``shown``; returns what
        it shows now. (No ``id:``: a reconnecting page resumes after messages only.)"""
        now = dict(self._previews.get(chat_id, {}))
        changes = [(pid, text) for pid, text in now.items() if shown.get(pid) != text]
        changes += [(pid, None) for pid in shown if pid not in now]
        for preview_id, text in changes:
            data = json.dumps({"preview_id": preview_id, "text": text})
            await response.write(f"event: preview\ndata: {data}\n\n".encode())
        return now

    async def page(self, request: web.Request) -> web.Response:
        html = resources.files("chatkernel.webchat").joinpath("static/index.html").read_text(
            encoding="utf-8")
        return web.Response(text=html, content_type="text/html",
                            headers={"Cache-Control": "no-cache"})


class WebChatTransport(Transport):
    """The web chat receives on the gateway's own HTTP server: its page and API."""

    channel: WebChatChannel
    quiet = True  # it waits for a person, not a platform

    async def run(self, deliver: Deliver) -> None:
        await self.channel.serve(deliver)

    async def serve_elsewhere(self, deliver: Deliver) -> None:
        """Another gateway instance owns this account: the page, its posts and its
        streams are served here all the same (the owner answers)."""
        await self.channel.serve(deliver)

    def http_routes(self) -> list[tuple[str, str, Any]]:
        return self.channel.routes()


@dataclass(frozen=True, slots=True)
class PostedMessage:
    """A valid ``POST /webchat/messages`` body."""

    chat_id: str
    user_id: str
    text: str
    user_name: str = ""
    client_message_id: str | None = None


#: The most characters of each field of a posted message: the kernel's caps of the
#: InboundMessage fields they become, and the web chat's own for the text.
FIELD_LIMITS: dict[str, int] = {
    "chat_id": INBOUND_FIELD_LIMITS["chat_id"],
    "user_id": INBOUND_FIELD_LIMITS["sender_id"],
    "user_name": INBOUND_FIELD_LIMITS["sender_name"],
    # The journal's message id is "<chat_id>:<client_message_id>": both fit its cap.
    "client_message_id": INBOUND_FIELD_LIMITS["chat_id"],
    "text": MAX_TEXT,
}


def parse_post(body: dict[str, Any]) -> PostedMessage:
    """Check a posted message's fields; :class:`RequestError` (400) names every one at
    fault. Unknown fields are ignored."""
    problems: list[str] = []

    def field(name: str, *, required: bool) -> str | None:
        value = body.get(name)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value.strip():
            problems.append(f"{name!r} must be a non-empty string"
                            + ("" if required else " when given"))
            return None
        if len(value) > FIELD_LIMITS[name]:
            problems.append(f"{name!r} is longer than {FIELD_LIMITS[name]:,} characters")
            return None
        return value

    chat_id = field("chat_id", required=True)
    user_id = field("user_id", required=True)
    text = field("text", required=True)
    user_name = body.get("user_name")
    if user_name is not None and (not isinstance(user_name, str)
                                  or len(user_name) > FIELD_LIMITS["user_name"]):
        problems.append(f"'user_name' must be a string of at most "
                        f"{FIELD_LIMITS['user_name']:,} characters when given")
    client_id = field("client_message_id", required=False)
    if problems:
        raise RequestError(400, "; ".join(problems))
    assert chat_id is not None and user_id is not None and text is not None
    return PostedMessage(chat_id, user_id, text, user_name or "", client_id)


#: The most digits of a message id in a request (the transcript's ids count from 1).
MAX_ID_DIGITS = 18


def parse_transcript_query(query: Mapping[str, str]) -> tuple[str, int]:
    """``chat_id`` and ``after`` of a transcript request (``GET messages``, ``events``);
    :class:`RequestError` (400) says what is wrong."""
    chat_id = query.get("chat_id", "")
    if not chat_id:
        raise RequestError(400, "'chat_id' is required")
    if len(chat_id) > FIELD_LIMITS["chat_id"]:
        raise RequestError(400, f"'chat_id' is longer than {FIELD_LIMITS['chat_id']:,} "
                                "characters")
    return chat_id, parse_message_id(query.get("after", "0"), "'after'")


def parse_message_id(value: str, name: str) -> int:
    """A message id: ASCII digits only (``isdigit`` takes ``²`` and ``٣``), and few enough
    of them; :class:`RequestError` (400) names ``name`` otherwise."""
    if not (0 < len(value) <= MAX_ID_DIGITS and value.isascii() and value.isdigit()):
        raise RequestError(400, f"{name} must be a message id (a whole number of at most "
                                f"{MAX_ID_DIGITS} digits)")
    return int(value)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)
