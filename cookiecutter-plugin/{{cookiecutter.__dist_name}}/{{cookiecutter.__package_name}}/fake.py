{%- set P = cookiecutter.__class_prefix -%}
{%- set T = cookiecutter.transport -%}
{%- set NAME = cookiecutter.channel_name | upper -%}
"""A fake {{ cookiecutter.channel_name }} platform: a real HTTP server on 127.0.0.1 for the tests.

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
- A chat takes :attr:`{{ P }}Platform.sends_per_chat_second` sends a second; more answer 429.
- ``POST /typing`` JSON ``{"chat_id"}`` → ``true``.
{%- if T == "polling" %}
- ``GET /updates?offset=<n>&timeout=<seconds>`` → a list of events: a long poll.
  Events below ``offset`` are confirmed and forgotten; the rest are served again
  until confirmed, so a client that crashes before confirming gets them again.
{%- elif T == "webhook" %}
- Events are POSTed to the webhook URL the fake is pointed at
  (:meth:`{{ P }}Platform.point_webhook`) as ``{"events": [event]}`` with the header
  ``X-{{ P }}-Secret: <secret>``, one at a time and in order; an event that is not
  answered 2xx is retried, so none is lost while the gateway restarts.
{%- else %}
- ``GET /socket`` (a websocket): the platform sends ``{"type": "hello"}``, then
  ``{"type": "event", "event": {...}}`` per event and ``{"type": "ping"}`` every
  :attr:`{{ P }}Platform.ping_interval` seconds; the client answers
  ``{"type": "ack", "event_id": n}`` once it has stored an event. Events not
  acknowledged are sent again on the next connection.
{%- endif %}

An event is ``{"event_id": n, "type": "message", "chat_id", "message_id",
"sender_id", "sender_name", "text", "is_group", "mentions_bot", "thread_id"}``;
``type`` is ``"edit"`` or ``"join"`` for events that are not messages.
"""

from __future__ import annotations

{%- if T == "socket" %}
import contextlib
{%- endif %}
import itertools
{%- if T == "socket" %}
import json
{%- endif %}
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

{% if T == "socket" -%}
import aiohttp
import anyio
{% endif -%}
from aiohttp import web

from chatkernel.testing import Call, ErrorAnswer, FakePlatform{% if T == "webhook" %}, SecretTokenSigner{% endif %}
from chatkernel.testing.devserver import fields, json_body, listing

#: The calls that send something: the ones :meth:`{{ P }}Platform.fail_next` applies to.
SENDS = ("send", "send_media")
#: What ``POST /_fake/messages`` takes (:meth:`{{ P }}Platform.developer_routes`).
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


class {{ P }}Platform(FakePlatform):
    """The fake platform: ``async with {{ P }}Platform() as platform: platform.base_url``."""

    bot_id = "bot-1"
    #: How many sends a chat takes in any one second.
    sends_per_chat_second = 50
    #: The calls the faults of :meth:`fail_next` apply to.
    sends: tuple[str, ...] = SENDS
{%- if T == "socket" %}
    #: Seconds between the platform's pings on an idle socket.
    ping_interval = 5.0
{%- endif %}

    def __init__(self, *, token: str = "test-token", seed: int = 0{% if T == "webhook" %},
                 secret: str = "test-secret"{% endif %}) -> None:
        super().__init__(seed=seed)
        self.token = token
{%- if T == "webhook" %}
        #: What every webhook request carries in ``X-{{ P }}-Secret``.
        self.secret = secret
        #: Where events are posted (None: nowhere yet; they wait).
        self.webhook_url: str | None = None
        self._pushing = False
{%- endif %}
        #: Events not confirmed yet{% if T == "webhook" %} (not delivered yet){% elif T == "socket" %} (not acknowledged yet){% endif %}, oldest first.
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
{%- if T == "socket" %}
        #: Websocket connections opened so far.
        self.connections = 0
{%- endif %}

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/me", self._me), web.post("/send", self._send),
                web.post("/send_media", self._send_media),
                web.post("/typing", self._typing){% if T == "polling" %}, web.get("/updates", self._updates){% elif T == "socket" %}, web.get("/socket", self._socket){% endif %}]

    def developer_info(self) -> dict[str, Any]:
        """The dev server's first line: where the fake is, and what an account needs."""
        return {**super().developer_info(), "token": self.token{% if T == "webhook" %},
                "secret": self.secret{% endif %}}

    def config_snippet(self) -> str:
        """What the dev server prints on stderr: an account pointed at the fake, and how
        to write as a user."""
        base = self.base_url
        return "\n".join([
            "# the fake {{ cookiecutter.channel_name }} platform is up; point an account at it:",
            "#   export {{ NAME }}_TOKEN=" + self.token,
{%- if T == "webhook" %}
            "#   export {{ NAME }}_WEBHOOK_SECRET=" + self.secret,
{%- endif %}
            "[channels.{{ cookiecutter.channel_name }}.accounts.main]",
            'token = "${{ '{' }}{{ NAME }}_TOKEN}"',
{%- if T == "webhook" %}
            'webhook_secret = "${{ '{' }}{{ NAME }}_WEBHOOK_SECRET}"',
{%- endif %}
            'base_url = "' + base + '"',
            'allow_from = ["*"]',
{%- if T == "webhook" %}
            "# once the gateway runs, point the fake's webhook at it:",
            "#   curl -d '{\"url\": \"http://127.0.0.1:8787/{{ cookiecutter.channel_name }}/main/webhook\"}' "
            + base + "/_fake/webhook",
{%- endif %}
            "# then write as a user:",
            "#   curl -d '{\"chat_id\": \"dm-1\", \"text\": \"hello\"}' " + base + "/_fake/messages",
            "#   curl '" + base + "/_fake/sent?chat_id=dm-1&wait=10'"])

    def developer_routes(self) -> list[web.RouteDef]:
        """The dev server's routes (``python -m {{ cookiecutter.__package_name }}.devserver``), which the
        real platform does not have; grow them with your fake:

        ``POST /_fake/messages``  ``{"chat_id": "dm-1", "text": "hi"}`` (optional ``sender_id``,
                                  ``sender_name``, ``is_group``, ``mentions_bot``, ``thread_id``):
                                  a user writes; answers ``{"event_id": n}``.
        ``GET /_fake/sent``       ``?chat_id=dm-1`` (optional; ``&wait=10`` waits for one,
                                  ``&after=N`` leaves the first N out): what the bot sent,
                                  ``{"messages": [{"chat_id", "text", ...}]}``.
{%- if T == "webhook" %}
        ``POST /_fake/webhook``   ``{"url": "http://127.0.0.1:8787/{{ cookiecutter.channel_name }}/main/webhook"}``:
                                  where events are posted from now on.
{%- endif %}
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
{%- if T == "webhook" %}

        async def webhook(request: web.Request) -> web.Response:
            self.point_webhook(fields(await json_body(request), {"url": str},
                                      required=("url",))["url"])
            return web.json_response({"ok": True})
{%- endif %}

        return [web.post("/_fake/messages", messages), web.get("/_fake/sent", sent){% if T == "webhook" %},
                web.post("/_fake/webhook", webhook){% endif %}]

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
{%- if T == "webhook" %}
        self._start_pushing()
{%- endif %}
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
            return self._ok({"id": self.bot_id, "name": "{{ cookiecutter.channel_name }}-bot"})

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
{%- if T == "polling" %}

    async def _updates(self, request: web.Request) -> web.StreamResponse:
        try:
            self._authorize(request)
        except ErrorAnswer as error:
            return error.response()
        offset = int(request.query.get("offset", "0"))
        timeout = min(float(request.query.get("timeout", "0")), 30.0)
        # Confirmed events are forgotten.
        self.pending = [e for e in self.pending if e["event_id"] >= offset]
        await self.hold(lambda: bool(self.pending), timeout)
        return self._ok(self.pending[:100])
{%- elif T == "webhook" %}

    # -- webhook deliveries ---------------------------------------------------------------------

    def point_webhook(self, url: str) -> None:
        """Post events to ``url`` from now on (what a platform's dashboard or its
        ``setWebhook`` call does)."""
        self.webhook_url = url
        self.changed()
        self._start_pushing()

    def _start_pushing(self) -> None:
        if not self._pushing and self.webhook_url is not None:
            self._pushing = self.start_soon(self._push_forever)

    async def _push_forever(self) -> None:
        """Deliver pending events one at a time, in order, retrying each until the
        webhook answers 2xx (to the webhook's newest URL)."""
        while not self.closing:
            if not self.pending or self.webhook_url is None:
                await self.activity.wait(0.25)
                continue
            event, url = self.pending[0], self.webhook_url
            attempt = await self.webhooks.push(
                url, {"events": [event]}, signer=SecretTokenSigner(self.secret,
                                                                   "X-{{ P }}-Secret"),
                delays=(0.05, 0.1, 0.2, 0.4, 0.8, 1.6),
                wanted=lambda: not self.closing and self.webhook_url == url)
            if attempt is not None and attempt.ok:
                self.pending.remove(event)
                self.changed()
            elif attempt is not None:
                await self.activity.wait(0.5)  # given up for now: try again soon
{%- else %}

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
{%- endif %}
