"""The loopback channel (the sample channel named ``loopback``, tighter limits and backoff,
live replies) and its platform (the sample's fake platform, with injectable failures):
see :mod:`chatkernel.testing.loopback`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any

from aiohttp import web
from pydantic import Field

from chatkernel.channels import (
    ChannelLimits,
    LiveMode,
    LiveReplies,
    OutboundPayload,
    PlatformError,
    Preview,
    RateLimit,
    Route,
    SendResult,
    hookimpl,
)
from chatkernel.testing.sample import fake as sample
from chatkernel.testing.sample.channel import SampleAccount, SampleChannel, SamplePolling
from chatkernel.testing.sample.fake import SamplePlatform, SentMessage, error_body

__all__ = ["SENDS", "LoopbackAccount", "LoopbackChannel", "LoopbackMessage",
           "LoopbackPlatform", "LoopbackPlugin", "LoopbackPolling", "SentMessage"]

#: The token both sides use unless a test says otherwise.
TOKEN = "test-token"
#: The methods a send fault applies to (``edit``: a live reply's final text).
SENDS = (*sample.SENDS, "edit")
#: The calls of live replies' previews.
PREVIEWS = ("preview", "preview_edit", "delete")


@dataclass
class LoopbackMessage(SentMessage):
    """A message sent, and what became of it as a live reply's preview."""

    #: Every text the preview showed, in order (the first is its start).
    shown: list[str] = field(default_factory=list)
    #: The final text was put in it (the last of ``shown``): nothing may change it since.
    final: bool = False
    deleted: bool = False


class LoopbackPlatform(SamplePlatform):
    """The sample platform for the kernel's tests:
    ``async with LoopbackPlatform() as platform: platform.url``.

    Its chats take any pace the kernel sends at, its 429s ask for :attr:`retry_after`
    (fractions of a second, for fast tests), and :meth:`hold_next_answer` lets a crash
    test kill the gateway while a send is unanswered.

    Live replies: ``POST /preview`` (JSON ``chat_id``, ``thread_id``, ``text``: a new
    message), ``POST /preview_edit`` and ``POST /edit`` (``chat_id``, ``message_id``,
    ``text``; ``/edit`` puts the final text, after which the message changes no more: a
    later edit answers 400), ``POST /delete`` (``chat_id``, ``message_id``).
    """

    bot_id = "loopback-bot"
    sends_per_chat_second = 10_000  # the kernel's own pacing is what the tests watch
    sends = SENDS

    def __init__(self, *, token: str = TOKEN, seed: int = 0) -> None:
        super().__init__(token=token, seed=seed)
        #: The ``retry_after`` a 429 from :meth:`fail_next` carries.
        self.retry_after: float = 1
        #: What a user saw, in order: ``(chat_id, kind, text)``, kind ``"preview"`` (a
        #: live reply's preview sent or edited) or ``"final"`` (a message sent, or a
        #: preview edited to its final text).
        self.timeline: list[tuple[str, str, str]] = []

    def routes(self) -> list[web.RouteDef]:
        return [*super().routes(), web.post("/preview", self._preview),
                web.post("/preview_edit", self._edit), web.post("/edit", self._edit),
                web.post("/delete", self._delete)]

    @property
    def url(self) -> str:
        """The platform's base URL (the account's ``base_url``)."""
        return self.base_url

    @property
    def sent(self) -> list[SentMessage]:
        """Every message the bot sent, in order."""
        return self.sent_messages

    @property
    def send_latency(self) -> float:
        """Seconds each call takes (a network round trip), so a crash can hit a send
        mid-way."""
        return self.latency

    @send_latency.setter
    def send_latency(self, seconds: float) -> None:
        self.latency = seconds

    def fail_next(self, *failures: int | str, retry_after: float | None = None) -> None:
        """As the sample's (a live reply's final edit included), a 429 asking for
        :attr:`retry_after` unless told otherwise."""
        super().fail_next(*failures, retry_after=self.retry_after if retry_after is None
                          else retry_after)

    def hold_next_answer(self) -> None:
        """The next send takes effect (it is in :attr:`sent`) and its answer is held
        back until :meth:`release` or the platform closes: a crash test kills the
        gateway exactly while a send it made is unanswered."""
        self.faults.stall(SENDS)

    def texts(self, chat_id: str | None = None, *, thread_id: str | None = None) -> list[str]:
        """The texts sent and not deleted (to a chat; with ``thread_id``, in that thread)."""
        return [m.text for m in self.sent_messages if m.kind is None
                and not m.deleted
                and (chat_id is None or m.chat_id == chat_id)
                and (thread_id is None or m.thread_id == thread_id)]

    # -- live replies' wire ----------------------------------------------------------------

    def _record(self, message: SentMessage) -> web.Response:
        if not isinstance(message, LoopbackMessage):  # every message can be a preview's
            message = LoopbackMessage(**{f.name: getattr(message, f.name)
                                         for f in fields(SentMessage)})
        answer = super()._record(message)
        if message.kind is None and message.message_id:
            self.timeline.append((message.chat_id, "preview" if message.shown else "final",
                                  message.text))
        return answer

    async def _preview(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()

        async def answer() -> web.Response:
            return self._record(LoopbackMessage(0, str(body["chat_id"]), str(body["text"]),
                                                thread_id=body.get("thread_id"),
                                                shown=[str(body["text"])]))

        return await self._serve(request, "preview", body, answer)

    def _message(self, body: dict[str, Any]) -> LoopbackMessage:
        found = next((m for m in self.sent_messages if str(m.message_id) == str(body["message_id"])
                      and m.chat_id == str(body["chat_id"]) and not m.deleted), None)
        if found is None:
            raise error_body(400, "message_not_found", "Bad Request: message to edit not found")
        return found

    async def _edit(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        final = request.path == "/edit"

        async def answer() -> web.Response:
            message = self._message(body)
            if message.final:
                raise error_body(400, "message_final", "Bad Request: the message is final "
                                                       "already")
            message.text = str(body["text"])
            message.shown.append(message.text)
            message.final = final
            self.timeline.append((message.chat_id, "final" if final else "preview",
                                  message.text))
            self.changed()
            return self._ok({"message_id": message.message_id})

        return await self._serve(request, "edit" if final else "preview_edit", body, answer)

    async def _delete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()

        async def answer() -> web.Response:
            self._message(body).deleted = True
            self.changed()
            return self._ok(True)

        return await self._serve(request, "delete", body, answer)


class LoopbackAccount(SampleAccount):
    token: str = Field(default=TOKEN, min_length=1)
    allow_from: list[str] = Field(default_factory=lambda: ["*"])
    poll_timeout: float = Field(default=1.0, gt=0)
    #: Declare the sends idempotent (``Capabilities.idempotent_sends``): the platform
    #: dedupes them by ``idempotency_key`` either way; this tells the kernel it may
    #: repeat a send whose answer was lost.
    idempotent_sends: bool = False


class LoopbackChannel(SampleChannel, LiveReplies):
    """The sample channel as ``loopback``, for :class:`LoopbackPlatform`: limits and a
    backoff short enough for tests, idempotent sends an account's choice, and live
    replies shown by editing a preview message."""

    name = "loopback"
    account_model = LoopbackAccount
    limits = ChannelLimits(text_limit=1000, rates={"chat": RateLimit(100, 1.0)},
                           media_kinds={".png": "image", ".jpg": "image", ".ogg": "voice"},
                           retry_base_delay=0.05)
    config_example = ""  # a test kit channel: not in the starter file
    streaming_default = False  # the kit's tests turn it on where they test it

    def __init__(self, account, context=None) -> None:
        super().__init__(account, context)
        # Per account, so one test kit channel serves both kinds of platform.
        self.capabilities = dataclasses.replace(
            SampleChannel.capabilities, idempotent_sends=self.config.idempotent_sends)

    def transport(self) -> "LoopbackPolling":
        return LoopbackPolling(self)

    # -- live replies (chatkernel.sdk.live) ------------------------------------------------

    def live_mode(self, route: Route) -> LiveMode | None:
        return "edit"

    async def start_preview(self, route: Route, mode: LiveMode,
                            payload: OutboundPayload) -> str:
        fields = {"chat_id": route.chat_id, "thread_id": route.thread_id}
        result = await self.call("POST", "/preview", json={
            **{k: v for k, v in fields.items() if v}, "text": payload.text})
        return str(result["message_id"])

    async def update_preview(self, route: Route, preview: Preview,
                             payload: OutboundPayload) -> None:
        await self.call("POST", "/preview_edit", json={
            "chat_id": route.chat_id, "message_id": preview.id, "text": payload.text})

    async def replace_preview(self, route: Route, payload: OutboundPayload) -> SendResult:
        try:
            result = await self.call("POST", "/edit", json={
                "chat_id": route.chat_id, "message_id": payload.replaces,
                "text": payload.text})
        except PlatformError as exc:
            raise exc.send_error() from None
        return SendResult(message_id=str(result["message_id"]))

    async def delete_preview(self, route: Route, preview: Preview) -> None:
        await self.call("POST", "/delete", json={"chat_id": route.chat_id,
                                                 "message_id": preview.id})


class LoopbackPolling(SamplePolling):
    """The sample's long poll, retried soon after a failure."""

    channel: LoopbackChannel
    backoff = (0.05, 1.0)


class LoopbackPlugin:
    """Registers :class:`LoopbackChannel`."""

    @staticmethod
    @hookimpl
    def register_channels(register):
        register(LoopbackChannel)
