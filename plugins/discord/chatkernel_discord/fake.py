"""A fake discord platform: a real HTTP server on 127.0.0.1 for the tests.

REPLACE THIS WITH YOUR PLATFORM. It speaks a small made-up JSON protocol so the
baked plugin works at once; a real plugin's fake speaks the platform's wire
format exactly (URL shapes, JSON shapes, error bodies, 429s, limits), built from
its published API, never from what the channel happens to send. It is built on
the test kit's fake-platform base (``chatkernel.testing.FakePlatform``), which
records calls, queues faults, enforces rolling rate windows and long-polls.

The protocol
------------

Every call carries ``Authorization: Bearer <token>``; a wrong token answers 401.
Answers are ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": "<code>", "description": "...", "retry_after": <seconds>}``
(``retry_after`` on 429 only, with a ``Retry-After`` header).

- ``GET /me`` → ``{"id", "name"}``: who the bot is (the probe, and ``identify``).
- ``POST /send`` JSON ``{"chat_id", "text", "thread_id"?, "idempotency_key"?}`` →
  ``{"message_id"}``.
- ``POST /send_media`` multipart ``chat_id``, ``kind``, ``caption``, ``thread_id``?,
  ``idempotency_key``?, ``file`` → ``{"message_id"}``.
- A send with an ``idempotency_key`` an earlier send had makes no second message: it is
  answered the first one's ``message_id``.
- A chat takes :attr:`DiscordPlatform.sends_per_chat_second` sends a second; more answer 429.
- ``POST /typing`` JSON ``{"chat_id"}`` → ``true``.
- ``GET /socket`` (a websocket): the platform sends ``{"type": "hello"}``, then
  ``{"type": "event", "event": {...}}`` per event and ``{"type": "ping"}`` every
  :attr:`DiscordPlatform.ping_interval` seconds; the client answers
  ``{"type": "ack", "event_id": n}`` once it has stored an event. Events not
  acknowledged are sent again on the next connection.

An event is ``{"event_id": n, "type": "message", "chat_id", "message_id",
"sender_id", "sender_name", "text", "is_group", "mentions_bot", "thread_id"}``;
``type`` is ``"edit"`` or ``"join"`` for events that are not messages.
"""

from __future__ import annotations
import contextlib
import itertools
import json
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
import anyio
from aiohttp import web

from chatkernel.testing import Call, ErrorAnswer, FakePlatform
from chatkernel.testing.devserver import fields, json_body, listing

#: The calls that send something: the ones :meth:`DiscordPlatform.fail_next` applies to.
SENDS = ("send", "send_media")
#: What ``POST /_fake/messages`` takes (:meth:`DiscordPlatform.developer_routes`).
DEVELOPER_MESSAGE_FIELDS = {"chat_id": str, "text": str, "sender_id": str, "sender_name": str,
                            "is_group": bool, "mentions_bot": bool, "thread_id": str}


@dataclass
class SentMessage:
    """What the platform recorded for one send."""

    message_id: int
    chat_id: str
    text: str  # a file's caption
    thread_id: str | None = None
    kind: str | None = None  # "image", "voice", "document"...; None: a text message
    filename: str | None = None
    key: str | None = None  # the send's idempotency key, if it had one
    ts: float = field(default_factory=time.time)


def error_body(status: int, error: str, description: str, **extra: Any) -> ErrorAnswer:
    """An error answer in the protocol's shape."""
    return ErrorAnswer(status, {"ok": False, "error": error, "description": description,
                                **extra})


class DiscordPlatform(FakePlatform):
    """The fake platform: ``async with DiscordPlatform() as platform: platform.base_url``."""

    bot_id = "bot-1"
    #: How many sends a chat takes in any one second.
    sends_per_chat_second = 50
    #: The calls the faults of :meth:`fail_next` apply to.
    sends: tuple[str, ...] = SENDS
    #: Seconds between the platform's pings on an idle socket.
    ping_interval = 5.0

    def __init__(self, *, token: str = "test-token", seed: int = 0) -> None:
        super().__init__(seed=seed)
        self.token = token
        #: Events not confirmed yet (not acknowledged yet), oldest first.
        self.pending: list[dict[str, Any]] = []
        #: Every event made so far, in order.
        self.events: list[dict[str, Any]] = []
        #: The chat of every typing indication, in order.
        self.typing: list[str] = []
        #: Chats the bot can no longer post in (see refuse_chat).
        self.refused_chats: set[str] = set()
        #: Sends answered with an earlier send's message, by their idempotency key.
        self.deduped = 0
        self._by_key: dict[str, SentMessage] = {}
        self._message_ids = itertools.count(1)
        self._event_ids = itertools.count(1)
        #: Websocket connections opened so far.
        self.connections = 0

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/me", self._me), web.post("/send", self._send),
                web.post("/send_media", self._send_media),
                web.post("/typing", self._typing), web.get("/socket", self._socket)]

    def developer_info(self) -> dict[str, Any]:
        """The dev server's first line: where the fake is, and what an account needs."""
        return {**super().developer_info(), "token": self.token}

    def config_snippet(self) -> str:
        """What the dev server prints on stderr: an account pointed at the fake, and how
        to write as a user."""
        base = self.base_url
        return "\n".join([
            "# the fake discord platform is up; point an account at it:",
            "#   export DISCORD_TOKEN=" + self.token,
            "[channels.discord.accounts.main]",
            'token = "${DISCORD_TOKEN}"',
            'base_url = "' + base + '"',
            'allow_from = ["*"]',
            "# then write as a user:",
            "#   curl -d '{\"chat_id\": \"dm-1\", \"text\": \"hello\"}' " + base + "/_fake/messages",
            "#   curl '" + base + "/_fake/sent?chat_id=dm-1&wait=10'"])

    def developer_routes(self) -> list[web.RouteDef]:
        """The dev server's routes (``python -m chatkernel_discord.devserver``), which the
        real platform does not have; grow them with your fake:

        ``POST /_fake/messages``  ``{"chat_id": "dm-1", "text": "hi"}`` (optional ``sender_id``,
                                  ``sender_name``, ``is_group``, ``mentions_bot``, ``thread_id``):
                                  a user writes; answers ``{"event_id": n}``.
        ``GET /_fake/sent``       ``?chat_id=dm-1`` (optional; ``&wait=10`` waits for one,
                                  ``&after=N`` leaves the first N out): what the bot sent,
                                  ``{"messages": [{"chat_id", "text", ...}]}``.
        """

        async def messages(request: web.Request) -> web.Response:
            body = fields(await json_body(request), DEVELOPER_MESSAGE_FIELDS,
                          required=("chat_id", "text"))
            event = self.inject(body.pop("chat_id"), body.pop("text"), **body)
            return web.json_response({"event_id": event["event_id"]})

        async def sent(request: web.Request) -> web.Response:
            chat_id = request.query.get("chat_id")

            def chosen() -> list[SentMessage]:
                return [m for m in self.sent_messages if chat_id in (None, m.chat_id)]

            return web.json_response({"messages": [
                asdict(m) for m in await listing(request, self, chosen)]})

        return [web.post("/_fake/messages", messages), web.get("/_fake/sent", sent)]

    # -- the test's side: users write, failures happen --------------------------------------

    def inject(self, chat_id: str, text: str, *, sender_id: str = "user-1",
               sender_name: str = "", is_group: bool = False, mentions_bot: bool = False,
               thread_id: str | None = None, kind: str = "message") -> dict[str, Any]:
        """A user writes (or, with ``sender_id=bot_id``, the bot itself); returns the event."""
        event_id = next(self._event_ids)
        return self._add({"event_id": event_id, "type": kind, "chat_id": chat_id,
                          "message_id": f"m{event_id}", "sender_id": sender_id,
                          "sender_name": sender_name, "text": text, "is_group": is_group,
                          "mentions_bot": mentions_bot, "thread_id": thread_id})

    def redeliver(self, event: dict[str, Any]) -> dict[str, Any]:
        """Send an event again under a new event id (the same message id), as platforms
        resend what they think was missed."""
        return self._add({**event, "event_id": next(self._event_ids)})

    def _add(self, event: dict[str, Any]) -> dict[str, Any]:
        self.events.append(event)
        self.pending.append(event)
        self.changed()
        return event

    def revoke(self) -> None:
        """The bot's token is revoked: every call answers 401 from now on."""
        self.token = "revoked:" + self.token

    def refuse_chat(self, chat_id: str) -> None:
        """The bot was removed from ``chat_id``: sends there answer 404 ``chat_not_found``
        from now on (the chat's error, not the account's)."""
        self.refused_chats.add(chat_id)

    def fail_next(self, *failures: int | str, retry_after: int = 1) -> None:
        """The next sends answer these, in order: an HTTP status (a 429 carries
        ``retry_after``), or ``"drop"``: the connection dies before an answer."""
        for failure in failures:
            if failure == "drop":
                self.faults.drop(self.sends)
            elif int(failure) == 429:
                self.faults.fail(self.sends, self.too_many_requests(retry_after))
            else:
                self.faults.fail(self.sends, error_body(int(failure), "failure", "failure"))

    def rate_limited(self, wait: float) -> ErrorAnswer:
        """The 429 of a send ``wait`` seconds too early: the wait in whole seconds."""
        return self.too_many_requests(max(1, round(wait)))

    def too_many_requests(self, retry_after: float) -> ErrorAnswer:
        """A 429 that says to wait ``retry_after`` seconds (the header in whole ones)."""
        error = error_body(429, "rate_limited", "Too Many Requests", retry_after=retry_after)
        error.headers["Retry-After"] = str(math.ceil(retry_after))
        return error

    # -- what the bot did ----------------------------------------------------------------------

    def texts(self, chat_id: str | None = None, *, thread_id: str | None = None) -> list[str]:
        """The texts sent (to a chat; with ``thread_id``, in that thread), in order."""
        return [m.text for m in self.sent_messages if m.kind is None
                and (chat_id is None or m.chat_id == chat_id)
                and (thread_id is None or m.thread_id == thread_id)]

    def media(self, chat_id: str | None = None) -> list[tuple[str, str | None]]:
        """``(kind, filename)`` of the files sent, in order."""
        return [(m.kind, m.filename) for m in self.sent_messages if m.kind is not None
                and (chat_id is None or m.chat_id == chat_id)]

    # -- the wire --------------------------------------------------------------------------------

    def _authorize(self, request: web.Request) -> None:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            raise error_body(401, "unauthorized", "Unauthorized: invalid token")

    async def _serve(self, request: web.Request, method: str, params: dict[str, Any],
                     answer: Any) -> web.StreamResponse:
        """Authorize, record and answer one call (faults and latency from the base)."""
        async def authorized() -> web.StreamResponse:
            self._authorize(request)
            return await answer()

        return await self.serve_call(request, Call(method=method, params=params), authorized)

    @staticmethod
    def _ok(result: Any) -> web.Response:
        return web.json_response({"ok": True, "result": result})

    async def _me(self, request: web.Request) -> web.StreamResponse:
        async def answer() -> web.Response:
            return self._ok({"id": self.bot_id, "name": "discord-bot"})

        return await self._serve(request, "me", {}, answer)

    async def _send(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()

        async def answer() -> web.Response:
            if not body.get("chat_id") or not isinstance(body.get("text"), str):
                raise error_body(400, "bad_request", "chat_id and text are required")
            return self._record(SentMessage(0, str(body["chat_id"]), body["text"],
                                            thread_id=body.get("thread_id"),
                                            key=body.get("idempotency_key")))

        return await self._serve(request, "send", body, answer)

    async def _send_media(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        upload = form.get("file")

        async def answer() -> web.Response:
            if not isinstance(upload, web.FileField) or not upload.file.read():
                raise error_body(400, "bad_request", "file is missing or empty")
            return self._record(SentMessage(
                0, str(form["chat_id"]), str(form.get("caption", "")),
                thread_id=form.get("thread_id") or None, kind=str(form["kind"]),
                filename=upload.filename, key=str(form.get("idempotency_key") or "") or None))

        return await self._serve(request, "send_media", dict(form), answer)

    def _record(self, message: SentMessage) -> web.Response:
        earlier = self._by_key.get(message.key) if message.key else None
        if earlier is not None:
            # The same key: the message this key made already, not a second one.
            self.deduped += 1
            self.changed()
            return self._ok({"message_id": earlier.message_id})
        if message.chat_id in self.refused_chats:
            raise error_body(404, "chat_not_found", "Not Found: the bot is not in this chat")
        self.check_rates([(("chat", message.chat_id), self.sends_per_chat_second, 1.0)])
        message.message_id = next(self._message_ids)
        if message.key:
            self._by_key[message.key] = message
        self.record_sent(message)
        return self._ok({"message_id": message.message_id})

    async def _typing(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()

        async def answer() -> web.Response:
            self.typing.append(str(body["chat_id"]))
            self.changed()
            return self._ok(True)

        return await self._serve(request, "typing", body, answer)

    # -- the socket -----------------------------------------------------------------------------

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        try:
            self._authorize(request)
        except ErrorAnswer as error:
            return error.response()
        self.connections += 1
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        await socket.send_json({"type": "hello"})
        sent: set[int] = set()  # the events this connection sent
        async with anyio.create_task_group() as tasks:
            async def read_acks() -> None:
                async for frame in socket:
                    if frame.type != aiohttp.WSMsgType.TEXT:
                        break
                    data = json.loads(frame.data)
                    if data.get("type") == "ack":
                        self.pending = [e for e in self.pending
                                        if e["event_id"] != data.get("event_id")]
                        self.changed()
                tasks.cancel_scope.cancel()  # the client left

            tasks.start_soon(read_acks)
            with contextlib.suppress(ConnectionResetError):  # the client went away
                while not self.closing and not socket.closed:
                    for event in [e for e in self.pending if e["event_id"] not in sent]:
                        sent.add(event["event_id"])
                        await socket.send_json({"type": "event", "event": event})
                    news = await self.hold(lambda: any(e["event_id"] not in sent
                                                       for e in self.pending),
                                           self.ping_interval)
                    if not news and not self.closing:
                        await socket.send_json({"type": "ping"})
            tasks.cancel_scope.cancel()
        await socket.close()
        return socket
