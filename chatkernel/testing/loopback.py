"""A small chat platform and its channel, for end-to-end and crash tests.

:class:`LoopbackPlatform` is a real HTTP server on 127.0.0.1 (on the fake-platform
base, :mod:`chatkernel.testing.fake_platform`) that behaves the way
long-polling platforms do (Telegram's ``getUpdates`` is the model): updates
are kept until a later poll confirms them with ``offset``, so a client that
crashes before confirming gets them again; sends are recorded in order, with
injectable failures (429 with ``retry_after``, 5xx, dropped connections, an
answer held back) and deduped by their idempotency key, as Matrix dedupes by
``txnId``. :class:`LoopbackChannel` is a complete channel plugin for it; an
account with ``idempotent_sends = true`` declares its sends idempotent. It shows
live replies (chatkernel.sdk.live) by editing a preview message, when the account
or the channel sets ``streaming = "on"`` (off by default, so the kit's other tests
see whole replies).

``python -m chatkernel.testing.loopback --platform URL [--idempotent-sends]
[--streaming] [--echo-typing-ms N]`` runs the real gateway with the loopback channel
(``CHATKERNEL_HOME`` as usual): the crash tests kill that process.
"""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
from aiohttp import web
from pydantic import Field

from chatkernel.channels import (
    AccountConfig,
    Channel,
    ChannelLimits,
    Deliver,
    HttpClient,
    InboundMessage,
    LiveMode,
    LiveReplies,
    OutboundPayload,
    PlatformError,
    Polled,
    Preview,
    ProbeResult,
    RateLimit,
    Route,
    SendResult,
    hookimpl,
)
from chatkernel.testing.fake_platform import Call, ErrorAnswer, FakePlatform


@dataclass
class PlatformMessage:
    """What the platform recorded for one send."""

    message_id: int
    chat_id: str
    text: str  # a media message's caption
    ts: float = field(default_factory=time.time)
    thread_id: str | None = None
    media_kind: str | None = None  # "image", "voice", "document"...; None: a text message
    filename: str | None = None
    key: str | None = None  # the send's idempotency key, if it had one
    #: A live reply's preview: every text it showed, in order (the first is its start).
    shown: list[str] = field(default_factory=list)
    #: The final text was put in it (the last of ``shown``): nothing may change it since.
    final: bool = False
    deleted: bool = False


#: The methods a send fault applies to (``edit``: a live reply's final text).
SENDS = ("send", "send_media", "edit")
#: The calls of live replies' previews.
PREVIEWS = ("preview", "preview_edit", "delete")


class LoopbackPlatform(FakePlatform):
    """The platform side: ``async with LoopbackPlatform() as platform: platform.url``.

    Its wire protocol: ``GET /updates?offset=&timeout=`` (a long poll; updates below
    ``offset`` are confirmed and forgotten), ``POST /send`` (JSON ``chat_id``, ``text``,
    ``thread_id``), ``POST /send_media`` (multipart ``chat_id``, ``kind``, ``caption``,
    ``thread_id``, ``file``), ``POST /typing`` (JSON ``chat_id``), ``GET /me`` (the
    probe); live replies: ``POST /preview`` (JSON ``chat_id``, ``thread_id``, ``text``:
    a new message), ``POST /preview_edit`` and ``POST /edit`` (``chat_id``,
    ``message_id``, ``text``; ``/edit`` puts the final text, after which the message
    changes no more: a later edit answers 400), ``POST /delete`` (``chat_id``,
    ``message_id``). Answers are ``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code",
    "description", "parameters"}``. Sends are the calls :attr:`calls` records, and the
    ones ``latency`` and faults apply to. A send may carry ``idempotency_key``: a later
    send with the same key records nothing and is answered the first one's
    ``message_id`` (:attr:`deduped` counts them).
    """

    #: The bot's own user id: /me answers it, and its own messages carry it as sender.
    bot_id = "loopback-bot"

    def __init__(self, *, seed: int = 0) -> None:
        super().__init__(seed=seed)
        #: Updates not confirmed yet, oldest first.
        self.updates: list[dict[str, Any]] = []
        #: The chat of every typing indication, in order.
        self.typing: list[str] = []
        #: The ``retry_after`` a 429 from :meth:`fail_next` carries.
        self.retry_after: float = 1
        #: The bot's credentials were revoked: /me answers 401.
        self.revoked = False
        #: Sends answered with an earlier send's message, by their idempotency key.
        self.deduped = 0
        #: What a user saw, in order: ``(chat_id, kind, text)``, kind ``"preview"`` (a
        #: live reply's preview sent or edited) or ``"final"`` (a message sent, or a
        #: preview edited to its final text).
        self.timeline: list[tuple[str, str, str]] = []
        self._ids = itertools.count(1)
        self._update_ids = itertools.count(1)
        self._injected: list[dict[str, Any]] = []
        self._by_key: dict[str, PlatformMessage] = {}

    @property
    def url(self) -> str:
        """The platform's base URL (the account's ``base_url``)."""
        return self.base_url

    @property
    def sent(self) -> list[PlatformMessage]:
        """Every message the bot sent, in order."""
        return self.sent_messages

    @property
    def send_latency(self) -> float:
        """Seconds each send takes (a network round trip), so a crash can hit one mid-way."""
        return self.latency

    @send_latency.setter
    def send_latency(self, seconds: float) -> None:
        self.latency = seconds

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/updates", self._get_updates), web.post("/send", self._send),
                web.post("/send_media", self._send_media), web.post("/typing", self._typing),
                web.get("/me", self._me), web.post("/preview", self._preview),
                web.post("/preview_edit", self._edit), web.post("/edit", self._edit),
                web.post("/delete", self._delete)]

    # -- test side -------------------------------------------------------------------

    def inject(self, chat_id: str, text: str, sender_id: str = "user-1", *,
               sender_name: str = "", is_group: bool = False, mentions_bot: bool = False,
               thread_id: str | None = None) -> int:
        """A user (or, with ``sender_id=bot_id``, the bot itself) writes; returns the
        update id."""
        update_id = next(self._update_ids)
        self.updates.append({"update_id": update_id, "chat_id": chat_id,
                             "sender_id": sender_id, "sender_name": sender_name,
                             "text": text, "message_id": f"m{update_id}",
                             "is_group": is_group, "mentions_bot": mentions_bot,
                             "thread_id": thread_id})
        self._injected.append(self.updates[-1])
        self.changed()
        return update_id

    def redeliver(self, message_id: str) -> int:
        """Serve an injected message again under a new update id (the same message
        id), as a platform resends an event it thinks was missed."""
        original = next(u for u in reversed(self.injected) if u["message_id"] == message_id)
        update_id = next(self._update_ids)
        self.updates.append({**original, "update_id": update_id})
        self.changed()
        return update_id

    @property
    def injected(self) -> list[dict[str, Any]]:
        """Every update injected so far, confirmed or not."""
        return self._injected

    def fail_next(self, *failures: int | str) -> None:
        """The next sends answer these, in order: an HTTP status (a 429 carries
        :attr:`retry_after`), or ``"drop"``: the connection dies before an answer."""
        for failure in failures:
            if failure == "drop":
                self.faults.drop(SENDS)
                continue
            status = int(failure)
            body: dict[str, Any] = {"ok": False, "error_code": status, "description": "failure"}
            if status == 429:
                body.update(description="Too Many Requests",
                            parameters={"retry_after": self.retry_after})
            self.faults.fail(SENDS, ErrorAnswer(status, body))

    def hold_next_answer(self) -> None:
        """The next send takes effect (it is in :attr:`sent`) and its answer is held
        back until :meth:`release` or the platform closes: a crash test kills the
        gateway exactly while a send it made is unanswered."""
        self.faults.stall(SENDS)

    def texts(self, chat_id: str | None = None, *, thread_id: str | None = None) -> list[str]:
        """Texts of the text messages sent (to a chat; with thread_id, in that thread)."""
        return [m.text for m in self.sent if m.media_kind is None and not m.deleted
                and (chat_id is None or m.chat_id == chat_id)
                and (thread_id is None or m.thread_id == thread_id)]

    def media(self, chat_id: str | None = None) -> list[tuple[str, str | None]]:
        """``(kind, filename)`` of the files sent, in order."""
        return [(m.media_kind, m.filename) for m in self.sent if m.media_kind is not None
                and (chat_id is None or m.chat_id == chat_id)]

    # -- wire side -----------------------------------------------------------------------

    async def _get_updates(self, request: web.Request) -> web.Response:
        offset = int(request.query.get("offset", "0"))
        timeout = min(float(request.query.get("timeout", "0")), 10.0)
        # Confirmed updates are forgotten, as Telegram does.
        self.updates = [u for u in self.updates if u["update_id"] >= offset]
        await self.hold(lambda: bool(self.updates), timeout)
        return web.json_response({"ok": True, "result": list(self.updates[:100])})

    async def _send(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        message = PlatformMessage(0, str(body["chat_id"]), str(body["text"]),
                                  thread_id=body.get("thread_id"),
                                  key=body.get("idempotency_key"))
        return await self.serve_call(request, Call(method="send", params=body),
                                     lambda: self._record(message))

    async def _send_media(self, request: web.Request) -> web.StreamResponse:
        """Multipart: chat_id, kind, optional thread_id and caption, and the file."""
        form = await request.post()
        upload = form.get("file")
        message = PlatformMessage(
            0, str(form["chat_id"]), str(form.get("caption", "")),
            thread_id=form.get("thread_id") or None, media_kind=str(form["kind"]),
            filename=getattr(upload, "filename", None),
            key=str(form["idempotency_key"]) if form.get("idempotency_key") else None)

        async def answer() -> web.Response:
            if not isinstance(upload, web.FileField) or not upload.file.read():
                raise ErrorAnswer(400, {"ok": False, "error_code": 400,
                                          "description": "Bad Request: file is empty"})
            return await self._record(message)

        return await self.serve_call(request, Call(method="send_media", params=dict(form)),
                                     answer)

    async def _record(self, message: PlatformMessage) -> web.Response:
        earlier = self._by_key.get(message.key) if message.key else None
        if earlier is not None:
            # The same key: the message this key made already, not a second one.
            self.deduped += 1
            self.changed()
            return web.json_response({"ok": True, "result": {"message_id": earlier.message_id}})
        message.message_id = next(self._ids)
        if message.key:
            self._by_key[message.key] = message
        if message.media_kind is None:
            self.timeline.append((message.chat_id, "preview" if message.shown else "final",
                                  message.text))
        self.record_sent(message)
        return web.json_response({"ok": True, "result": {"message_id": message.message_id}})

    async def _preview(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        message = PlatformMessage(0, str(body["chat_id"]), str(body["text"]),
                                  thread_id=body.get("thread_id"), shown=[str(body["text"])])
        return await self.serve_call(request, Call(method="preview", params=body),
                                     lambda: self._record(message))

    def _message(self, body: dict[str, Any]) -> PlatformMessage:
        found = next((m for m in self.sent if str(m.message_id) == str(body["message_id"])
                      and m.chat_id == str(body["chat_id"]) and not m.deleted), None)
        if found is None:
            raise ErrorAnswer(400, {"ok": False, "error_code": 400,
                                    "description": "Bad Request: message to edit not found"})
        return found

    async def _edit(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        final = request.path == "/edit"

        async def answer() -> web.Response:
            message = self._message(body)
            if message.final:
                raise ErrorAnswer(400, {"ok": False, "error_code": 400, "description":
                                        "Bad Request: the message is final already"})
            message.text = str(body["text"])
            message.shown.append(message.text)
            message.final = final
            self.timeline.append((message.chat_id, "final" if final else "preview",
                                  message.text))
            self.changed()
            return web.json_response({"ok": True, "result": {
                "message_id": message.message_id}})

        return await self.serve_call(
            request, Call(method="edit" if final else "preview_edit", params=body), answer)

    async def _delete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()

        async def answer() -> web.Response:
            self._message(body).deleted = True
            self.changed()
            return web.json_response({"ok": True, "result": True})

        return await self.serve_call(request, Call(method="delete", params=body), answer)

    async def _typing(self, request: web.Request) -> web.Response:
        self.typing.append(str((await request.json())["chat_id"]))
        self.changed()
        return web.json_response({"ok": True, "result": True})

    async def _me(self, request: web.Request) -> web.Response:
        if self.revoked:
            return web.json_response({"ok": False, "error_code": 401,
                                      "description": "Unauthorized"}, status=401)
        return web.json_response({"ok": True, "result": {"id": self.bot_id,
                                                         "name": "loopback-bot"}})


class LoopbackAccount(AccountConfig):
    base_url: str
    allow_from: list[str] = Field(default_factory=lambda: ["*"])
    poll_timeout: float = 1.0
    #: Declare the sends idempotent (``Channel.idempotent_sends``): the platform
    #: dedupes them by ``idempotency_key`` either way; this tells the kernel it may
    #: repeat a send whose answer was lost.
    idempotent_sends: bool = False


class LoopbackChannel(Channel, LiveReplies):
    """A channel for :class:`LoopbackPlatform`, on the channel kit: long polling,
    confirm-by-offset. It is what a small polling plugin looks like."""

    name = "loopback"
    account_model = LoopbackAccount
    limits = ChannelLimits(text_limit=1000, rates={"chat": RateLimit(100, 1.0)},
                           media_kinds={".png": "image", ".jpg": "image", ".ogg": "voice"},
                           retry_base_delay=0.05)
    receive_backoff = (0.05, 1.0)
    streaming_default = False  # the kit's tests turn it on where they test it

    def __init__(self, account, settings=None) -> None:
        super().__init__(account, settings)
        self.http = HttpClient(self.config.base_url, timeout=self.config.poll_timeout + 10,
                               platform="the loopback platform")
        # Per account, so one test kit channel serves both kinds of platform.
        self.idempotent_sends = self.config.idempotent_sends  # type: ignore[misc]

    async def run(self, deliver: Deliver) -> None:
        await self.poll_forever(deliver)

    async def identify(self) -> None:
        self.self_id = str((await self._call("GET", "/me"))["id"])

    async def poll(self, cursor: str | None) -> Polled:
        updates = await self._call("GET", "/updates", long_poll=True, params={
            "offset": cursor or "0", "timeout": str(self.config.poll_timeout)})
        last = max((update["update_id"] for update in updates), default=None)
        return Polled(updates, None if last is None else str(last + 1))

    def event_chat(self, update: dict[str, Any]) -> str:
        return update["chat_id"]

    async def normalize(self, update: dict[str, Any]) -> InboundMessage:
        return InboundMessage(
            channel=self.name, account=self.account.name,
            chat_id=update["chat_id"], message_id=update["message_id"],
            sender_id=update["sender_id"], text=update["text"],
            sender_name=update.get("sender_name", ""), is_group=update.get("is_group", False),
            mentions_bot=update.get("mentions_bot", False), thread_id=update.get("thread_id"))

    async def send(self, route: Route, payload: OutboundPayload) -> SendResult:
        fields = {"chat_id": route.chat_id, "thread_id": route.thread_id,
                  "idempotency_key": payload.key}
        try:
            if payload.is_media:
                result = await self._call("POST", "/send_media", files={
                    "file": payload.media_path}, data={
                    **fields, "kind": payload.media_kind or "document",
                    "caption": payload.caption})
            else:
                result = await self._call("POST", "/send", json={
                    **{k: v for k, v in fields.items() if v}, "text": payload.text})
        except PlatformError as exc:
            raise exc.send_error() from None
        return SendResult(message_id=str(result["message_id"]))

    # -- live replies (chatkernel.sdk.live) ------------------------------------------------

    def live_mode(self, route: Route) -> LiveMode | None:
        return "edit"

    async def start_preview(self, route: Route, mode: LiveMode,
                            payload: OutboundPayload) -> str:
        fields = {"chat_id": route.chat_id, "thread_id": route.thread_id}
        result = await self._call("POST", "/preview", json={
            **{k: v for k, v in fields.items() if v}, "text": payload.text})
        return str(result["message_id"])

    async def update_preview(self, route: Route, preview: Preview,
                             payload: OutboundPayload) -> None:
        await self._call("POST", "/preview_edit", json={
            "chat_id": route.chat_id, "message_id": preview.id, "text": payload.text})

    async def replace_preview(self, route: Route, payload: OutboundPayload) -> SendResult:
        try:
            result = await self._call("POST", "/edit", json={
                "chat_id": route.chat_id, "message_id": payload.replaces,
                "text": payload.text})
        except PlatformError as exc:
            raise exc.send_error() from None
        return SendResult(message_id=str(result["message_id"]))

    async def delete_preview(self, route: Route, preview: Preview) -> None:
        await self._call("POST", "/delete", json={"chat_id": route.chat_id,
                                                  "message_id": preview.id})

    async def indicate(self, route: Route) -> None:
        await self._call("POST", "/typing", json={"chat_id": route.chat_id})

    async def probe(self) -> ProbeResult:
        try:
            await self._call("GET", "/me")
        except PlatformError as exc:
            return ProbeResult(ok=False, detail=f"credentials rejected ({exc.status})"
                               if exc.status == 401 else str(exc))
        return ProbeResult(ok=True, detail="loopback platform")

    async def _call(self, method: str, path: str, **options: Any) -> Any:
        """The platform's answer ``{"ok": true, "result": ...}``, or a PlatformError."""
        answer = await self.http.request(method, path, **options)
        body = answer.json()
        if not isinstance(body, dict) or not body.get("ok"):
            body = body if isinstance(body, dict) else {}
            raise PlatformError.from_answer(
                answer, str(body.get("description", "error")), code=body.get("error_code"),
                retry_after=(body.get("parameters") or {}).get("retry_after"))
        return body["result"]

    async def aclose(self) -> None:
        await self.http.close()


class LoopbackPlugin:
    """Registers :class:`LoopbackChannel`."""

    @staticmethod
    @hookimpl
    def register_channels(register):
        register(LoopbackChannel)


def main() -> None:
    """Run the real gateway with the loopback channel (for crash tests)."""
    from chatkernel.core import config as cfg
    from chatkernel.core import logs
    from chatkernel.core.gateway.process import run_gateway
    from chatkernel.core.plugins import PluginManager

    parser = argparse.ArgumentParser()
    parser.add_argument("--platform", required=True, help="the LoopbackPlatform's URL")
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--idempotent-sends", action="store_true",
                        help="declare the loopback account's sends idempotent")
    parser.add_argument("--streaming", action="store_true",
                        help="live replies on (streaming = \"on\")")
    parser.add_argument("--echo-typing-ms", type=int, default=0,
                        help="the echo agent types its answer a word every N ms")
    args = parser.parse_args()
    config = cfg.parse({
        "gateway": {"listen": args.listen},
        "agent": {"echo_typing_ms": args.echo_typing_ms},
        "queue": {"debounce_ms": 0, "mode": "followup"},
        "channels": {"loopback": {"streaming": "on" if args.streaming else "off",
                                  "streaming_interval_ms": 100,
                                  "accounts": {"main": {
                                      "base_url": args.platform, "poll_timeout": 0.5,
                                      "idempotent_sends": args.idempotent_sends}}}},
    })
    logs.configure("text", "info")
    pm = PluginManager()
    pm.load(only=[])
    pm.register(LoopbackPlugin, name="chatkernel.testing.loopback")
    anyio.run(lambda: run_gateway(config, pm=pm))


if __name__ == "__main__":
    main()
