"""The discord channel: Discord bots over the gateway websocket and the REST API.

Built only on the public plugin API (``chatkernel.channels``). The kernel does
everything that is the same on every platform (sessions, the queue, chunking,
retries, pacing, the journal and outbox, health); this module holds only the
platform's differences: its account config, its limits, how its events become
messages, its wire calls and its probe.

It speaks the protocol of the fake platform in ``fake.py`` (documented there).
Replace each call below with your platform's, keeping ``tests/test_contract.py``
green.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from pydantic import Field

from chatkernel.channels import (
    AccountConfig,
    Capabilities,
    Channel,
    ChannelLimits,
    HttpClient,
    InboundMessage,
    OutboundPayload,
    PlatformError,
    ProbeResult,
    RateLimit,
    Route,
    SendResult,
    Socket,
    SocketLink,
)


class DiscordAccount(AccountConfig):
    """``[channels.discord.accounts.<name>]``. The common keys
    (``allow_from``, ``require_mention``, the access level, rate and retry overrides) come
    from AccountConfig; these are the platform's own."""

    #: The bot's API token, sent as ``Authorization: Bearer <token>``.
    token: str = Field(min_length=1)
    #: Where the platform's API is (replace the default with your platform's).
    base_url: str = "http://127.0.0.1:8900"
    #: Seconds of silence after which an open socket is closed and opened again.
    silent_after: float = Field(default=60.0, gt=0)


class DiscordChannel(Channel):
    """The discord platform's channel (socket)."""

    name = "discord"
    account_model = DiscordAccount
    # Declarations the kernel acts on: chunking, media kinds and caps, pacing, retries.
    # Replace them with your platform's documented limits.
    limits = ChannelLimits(
        text_limit=2000,
        caption_limit=1000,
        media_kinds={".png": "image", ".jpg": "image", ".jpeg": "image", ".ogg": "voice",
                     ".pdf": "document"},
        default_media_kind="document",
        media_max_bytes={"image": 5 * 2**20, "document": 50 * 2**20},
        rates={"account": RateLimit(30, 1.0), "chat": RateLimit(5, 1.0)},
        retry_base_delay=0.5,
    )
    # What the platform does beyond plain sends. Here: its error codes about one chat,
    # not the account (the kernel reports a send refused with one on that send and keeps
    # the account healthy). 400 and 403 answers are a chat's already; list the codes that
    # come with other statuses.
    # The fake dedupes sends by their idempotency key, as Matrix does by txnId; declare
    # idempotent_sends=True only once your platform does too (docs/writing-a-channel.md).
    capabilities = Capabilities(recipient_error_codes=frozenset({"chat_not_found"}))
    # What `chatkernel config init` writes for this channel (commented out): the keys a
    # first account needs, secrets as ${ENV_VAR} references. Keep it valid as you change
    # the account model.
    config_example = """\
[channels.discord.accounts.main]
token = "${DISCORD_TOKEN}"   # the bot's API token
allow_from = ["*"]            # sender ids allowed in; "*" anyone
"""

    def __init__(self, account, context=None) -> None:
        super().__init__(account, context)
        token = self.config.token
        timeout = 30.0
        self.http = HttpClient(self.config.base_url, secrets=[token], timeout=timeout,
                               headers={"Authorization": f"Bearer {token}"},
                               platform=self.name)

    # -- receiving ------------------------------------------------------------------------

    def transport(self) -> "DiscordSocket":
        """How the account receives: socket (:class:`DiscordSocket`)."""
        return DiscordSocket(self)

    async def identify(self) -> None:
        """Learn the bot's own id: its own messages are never delivered."""
        self.self_id = str((await self.call("GET", "/me"))["id"])

    async def normalize(self, event: dict[str, Any]) -> InboundMessage | None:
        """A platform event as a message for the agent; None for what is not one (edits,
        members joining: replace with your platform's event types)."""
        if event.get("type") != "message":
            return None
        return InboundMessage(
            channel=self.name, account=self.account.name,
            chat_id=str(event["chat_id"]), message_id=str(event["message_id"]),
            sender_id=str(event["sender_id"]), text=event.get("text", ""),
            sender_name=event.get("sender_name", ""), is_group=event.get("is_group", False),
            mentions_bot=event.get("mentions_bot", False), thread_id=event.get("thread_id"))

    # -- sending --------------------------------------------------------------------------

    async def send(self, route: Route, payload: OutboundPayload) -> SendResult:
        """One request: a text chunk, or one file with its caption. The payload's key is
        the same across the kernel's retries and restarts: the platform makes one message
        of the requests that carry it."""
        fields = {"chat_id": route.chat_id}
        if route.thread_id:
            fields["thread_id"] = route.thread_id
        if payload.key:
            fields["idempotency_key"] = payload.key
        try:
            if payload.is_media:
                result = await self.call("POST", "/send_media", files={
                    "file": payload.media_path}, data={
                    **fields, "kind": payload.media_kind or "document",
                    "caption": payload.caption})
            else:
                result = await self.call("POST", "/send", json={**fields,
                                                                 "text": payload.text})
        except PlatformError as exc:
            raise exc.send_error() from None
        return SendResult(message_id=str(result["message_id"]))

    async def indicate(self, route: Route) -> None:
        """Show "typing…" while a turn runs."""
        await self.call("POST", "/typing", json={"chat_id": route.chat_id})

    # -- health ---------------------------------------------------------------------------

    async def probe(self) -> ProbeResult:
        """The platform answers and the token works."""
        try:
            me = await self.call("GET", "/me")
        except PlatformError as exc:
            if exc.status == 401:
                return ProbeResult(ok=False, detail="token rejected (401)", restartable=False)
            return ProbeResult(ok=False, detail=str(exc))
        return ProbeResult(ok=True, detail=str(me.get("name", me["id"])))

    # -- the wire -------------------------------------------------------------------------

    async def call(self, method: str, path: str, **options: Any) -> Any:
        """The answer's ``result``, or a PlatformError classified by status (the
        protocol's errors are ``{"ok": false, "error", "description", "retry_after"}``)."""
        answer = await self.http.request(method, path, what=path.strip("/"), **options)
        body = answer.json() if answer.body else None
        if isinstance(body, dict) and body.get("ok") and answer.ok:
            return body.get("result")
        body = body if isinstance(body, dict) else {}
        raise PlatformError.from_answer(
            answer, str(body.get("description") or f"HTTP {answer.status}"),
            code=body.get("error"), retry_after=body.get("retry_after"))

    async def aclose(self) -> None:
        await self.http.close()



class DiscordEvents:
    """What the platform's events are, for the kit's receive loop: the chat of each (a
    chat's events are read in order) and a name for a log line."""

    def event_chat(self, event: dict[str, Any]) -> str:
        return str(event.get("chat_id", ""))

    def describe_event(self, event: dict[str, Any]) -> str:
        return f"{event.get('type', '?')} event {event.get('event_id', '?')}"

    def event_id(self, event: dict[str, Any]) -> str | None:
        return str(event["event_id"]) if "event_id" in event else None


class DiscordSocket(DiscordEvents, Socket):
    """A websocket at ``/socket`` the platform pushes events over."""

    channel: DiscordChannel
    backoff = (0.1, 30.0)

    @property
    def silent_after(self) -> float:  # type: ignore[override]
        return self.channel.config.silent_after

    async def session(self, link: SocketLink) -> None:
        """One socket session: every frame is a sign of life; events are acknowledged
        only once they are journaled, so the platform resends what a crash lost."""
        http = self.channel.http
        try:
            socket = await http.session.ws_connect(http.url("/socket"), heartbeat=30)
        except aiohttp.WSServerHandshakeError as exc:
            raise PlatformError(f"cannot open the socket: HTTP {exc.status}",
                                status=exc.status) from None
        async with socket:
            async for frame in socket:
                if frame.type != aiohttp.WSMsgType.TEXT:
                    break  # closed or failed: the kit opens the socket again
                data = frame.json()
                if data.get("type") == "event":
                    await link.deliver([data["event"]])
                    await socket.send_json({"type": "ack", "event_id": data["event"]["event_id"]})
                else:
                    link.alive()  # hello, ping
