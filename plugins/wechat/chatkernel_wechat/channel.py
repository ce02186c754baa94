"""The WeChat channel: Tencent's iLink personal-bot gateway.

Only WeChat lives here: turning a ``getupdates`` message into an InboundMessage,
the ``context_token`` every send must echo, the CDN's AES media, what ``ret=-2``
and ``-14`` mean, the probe. Its transport, the ``getupdates`` long poll, is in
:mod:`chatkernel_wechat.receiving`; the loop it runs, dedupe, retries, pacing and
the outbox are the kit's and the kernel's.

Direct chats only: a chat is the user who writes (``from_user_id``).
"""

from __future__ import annotations

import base64
import logging
import secrets
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from pydantic import Field

from chatkernel.channels import (
    Account,
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
    SendError,
    SendResult,
    Trouble,
    encode_json,
    render_payload,
)
from chatkernel_wechat import crypto
from chatkernel_wechat.api import (
    DEFAULT_API_BASE,
    DEFAULT_CDN_BASE,
    SEND_REFUSED,
    TOKEN_PATTERN,
    ILinkAPI,
    ILinkError,
)
from chatkernel_wechat.receiving import (
    FILE_ITEM,
    IMAGE_ITEM,
    INBOUND_MEDIA,
    TEXT_ITEM,
    VIDEO_ITEM,
    VOICE_ITEM,
    WeChatPolling,
)

log = logging.getLogger("chatkernel.wechat")

MB = 1024 * 1024
#: Tencent's client pauses every call of an account this long after ``-14``.
SESSION_PAUSE_SECONDS = 3600.0
#: iLink ends a bot's session about this long after its QR login (openclaw/openclaw#90949:
#: "after roughly 30 days, iLink rotates the token"), or at once when the WeChat account
#: binds another bot: every call then answers ``-14`` until a new login.
TOKEN_LIFETIME_SECONDS = 30 * 86400.0
#: From this age on, ``chatkernel doctor`` warns that the session is near its end.
TOKEN_WARN_SECONDS = 25 * 86400.0
#: What an expired session is (followed by WeChatChannel.login_advice).
SESSION_EXPIRED = "session expired (iLink ret=-14)"
#: After a ``ret=-2`` the user's sends are held back this long, or until they write.
REFUSED_HOLD_SECONDS = 600.0
#: Tencent's published send window: the user writes again after this many bot messages...
WINDOW_MESSAGES = 10
#: ...and at least once in this many seconds.
WINDOW_SECONDS = 24 * 3600.0
#: Payloads over about this many bytes have drawn ``-2``.
LARGE_PAYLOAD = 16 * 1024
#: Outbound media kind -> (getuploadurl media_type, item type, the item's field).
OUTBOUND_MEDIA = {"image": (1, IMAGE_ITEM, "image_item"), "video": (2, VIDEO_ITEM, "video_item"),
                  "file": (3, FILE_ITEM, "file_item")}
TOKEN_STATE = "context_token:"
PAUSE_STATE = "session_expired"
class WeChatAccount(AccountConfig):
    """``[channels.wechat.accounts.<name>]``: ``chatkernel login wechat`` writes the first
    four keys."""

    bot_token: str = Field(min_length=1)
    #: The API host: the ``baseurl`` the login returned, else Tencent's default.
    api_base: str = DEFAULT_API_BASE
    cdn_base: str = DEFAULT_CDN_BASE
    bot_id: str | None = None          # "<hex>@im.bot"
    owner_user_id: str | None = None   # who scanned the QR code: "<...>@im.wechat"
    route_tag: str | None = None       # the optional SKRouteTag header

    identity = ("api_base", "bot_token")


@dataclass
class Peer:
    """What the channel knows about one user, persisted in the store: their latest
    ``context_token`` and when it came, and the send window it implies."""

    token: str | None = None
    token_at: float | None = None       # when the token arrived (the user's last message)
    message_at: float | None = None     # the message's own time (older redeliveries lose)
    sent_since: int = 0                 # bot messages since the user last wrote
    held_until: float = 0.0             # after a ret=-2: no sends before this
    held_reason: str = ""

    def age(self, now: float) -> str:
        if not self.token or self.token_at is None:
            return "context_token missing"
        return f"context_token age {format_age(now - self.token_at)}"


def format_age(seconds: float) -> str:
    """``45s``, ``79m``, ``26h``."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 100 * 60:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def format_days(seconds: float) -> str:
    """``3 hours``, ``1 day``, ``26 days``."""
    if seconds < 86400:
        hours = int(seconds // 3600)
        return f"{hours} hour{'s' if hours != 1 else ''}"
    days = int(seconds // 86400)
    return f"{days} day{'s' if days != 1 else ''}"


def refused_cause(peer: Peer, size: int, now: float) -> str:
    """The likely reason iLink answered ``ret=-2``, from what the channel saw."""
    causes = []
    if not peer.token:
        causes.append("the context_token is missing")
    if peer.sent_since >= WINDOW_MESSAGES:
        causes.append(f"the user has not written since the bot's last {WINDOW_MESSAGES} "
                      "messages")
    if peer.token_at is not None and now - peer.token_at > WINDOW_SECONDS:
        causes.append("more than 24 hours since the user's last message")
    if size > LARGE_PAYLOAD:
        causes.append(f"the payload is too large ({size // 1024} KB)")
    if not causes:
        causes.append("the context_token is stale, or too many sends in a burst")
    return "; ".join(causes)


def unread_item(item: dict[str, Any]) -> str:
    """An item the channel found nothing in, in a few words for the log."""
    if item.get("type") == TEXT_ITEM:
        return "a text item with no text"
    return f"an item of type {item.get('type')!r}"


#: iLink's ``message_state`` of a message being written (a live reply), and of one done.
GENERATING, FINISH = 1, 2
#: What a live reply's preview ends with when it turned out to be no answer.
CUT_SHORT = "⚠️ (this answer was cut short)"


class WeChatChannel(Channel, LiveReplies):
    """One bot of the iLink gateway."""

    name = "wechat"
    config_example = """\
[channels.wechat.accounts.main]       # chatkernel login wechat writes this table for you
bot_token = "${WECHAT_BOT_TOKEN}"     # what the QR login gave
allow_from = []                       # WeChat user ids; "*" anyone who finds the bot
dm_policy = "pairing"                 # others get a code: chatkernel pairing approve wechat CODE
"""
    account_model = WeChatAccount
    limits = ChannelLimits(
        text_limit=3500, text_unit="chars", caption_limit=3500,
        media_kinds={".jpg": "image", ".jpeg": "image", ".png": "image", ".gif": "image",
                     ".webp": "image", ".bmp": "image",
                     ".mp4": "video", ".mov": "video", ".m4v": "video"},
        default_media_kind="file",
        media_max_bytes={"image": 20 * MB, "video": 100 * MB, "file": 100 * MB},
        # One message after the other to a user: bursts draw ret=-2.
        rates={"account": RateLimit(20, 1.0), "chat": RateLimit(1, 1.0)},
        retry_base_delay=1.0,
        indicator_interval=5.0,
    )
    markup = "plain"
    secret_patterns = (TOKEN_PATTERN,)
    #: Live replies are off unless configured: whether iLink takes a FINISH after
    #: GENERATING on one client_id is contested (one client reports ``ret=-2``, the
    #: context_token spent; another that the message is replaced in place). When on, a
    #: refused FINISH sends the whole answer as a new message (:meth:`replace_preview`).
    streaming_default = False
    capabilities = Capabilities(
        # Every bot message spends the user's quota of ten: the answers get it all.
        busy_hint=False,
        # ``ret=-2`` is one user's (quota, window, a stale context_token): theirs alone.
        recipient_error_codes=frozenset({SEND_REFUSED}))

    def __init__(self, account: Account, context: ChannelContext | None = None) -> None:
        super().__init__(account, context)
        self.api = ILinkAPI(self.config.bot_token, self.config.api_base,
                            route_tag=self.config.route_tag)
        self.cdn_base = self.config.cdn_base.rstrip("/")
        self.cdn = HttpClient(self.cdn_base, platform="the WeChat CDN", timeout=120.0)
        self.peers: dict[str, Peer] = {}
        self.typing_tickets: dict[str, str] = {}
        #: No iLink call before this time (after ``-14``).
        self.paused_until = 0.0
        self._pause_loaded = False

    # -- the session pause (-14) ------------------------------------------------------

    async def _load_pause(self) -> None:
        if self._pause_loaded or self.context.store is None:
            return
        self._pause_loaded = True
        state = await self.context.get_state(PAUSE_STATE)
        if not state:
            return
        login = await self.context.credentials_issued_at() or 0.0
        if float(login) <= float(state.get("at", 0)):  # no login since the session expired
            self.paused_until = max(self.paused_until, float(state.get("until", 0)))

    async def _expire(self) -> None:
        """The session expired: no calls for an hour, health red until a new login."""
        now = self.context.clock.now()  # the pause is a timer: on the channel's clock
        self.paused_until = now + SESSION_PAUSE_SECONDS
        self.typing_tickets.clear()
        self.context.report_problem(self.session_expired, restartable=False)
        log.error("%s: %s", self.account.key, self.session_expired)
        if self.context.store is not None:
            await self.context.set_state(PAUSE_STATE, {"at": now, "until": self.paused_until})

    async def paused(self) -> bool:
        await self._load_pause()
        return self.context.clock.now() < self.paused_until

    async def call(self, endpoint: str, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """An iLink call, unless the account is paused; ``-14`` pauses it."""
        if await self.paused():
            raise ILinkError(self.session_expired, code=-14, kind="rejected")
        try:
            return await self.api.call(endpoint, body, **kwargs)
        except ILinkError as exc:
            if exc.session_expired:
                await self._expire()
            raise

    async def notify(self, endpoint: str) -> None:
        """``msg/notifystart`` or ``msg/notifystop``: failures are logged, not raised."""
        try:  # Tencent's client ignores their failures too
            await self.call(endpoint, {}, timeout=5.0)
        except PlatformError as exc:
            log.debug("%s: %s failed: %s", self.account.key, endpoint, exc)

    # -- receiving ----------------------------------------------------------------------

    def transport(self) -> WeChatPolling:
        return WeChatPolling(self)

    async def identify(self) -> None:
        self.self_id = self.config.bot_id

    def receive_trouble(self, error: Exception) -> Trouble:
        if isinstance(error, ILinkError):
            if error.session_expired:
                return Trouble(SESSION_EXPIRED, restartable=False, refused=True,
                               wait=max(1.0, self.paused_until - self.context.clock.now()),
                               advice=self.login_advice)
            return Trouble()  # 2 s, doubling to 30 s (WeChatPolling.backoff)
        return super().receive_trouble(error)

    @property
    def login_advice(self) -> str:
        """What a person does about an expired session."""
        account = "" if self.account.name == "main" else f" --account {self.account.name}"
        return (f"run `chatkernel login wechat{account}` to log in again, then restart the "
                "gateway; calls to iLink are paused meanwhile")

    @property
    def session_expired(self) -> str:
        """An expired session, with what to do: the account's problem, the probe's
        detail and the reason of a send it stopped."""
        return f"{SESSION_EXPIRED}: {self.login_advice}"

    async def normalize(self, message: dict[str, Any]) -> InboundMessage | None:
        """A getupdates message as an InboundMessage (None: a bot's message, or nothing
        said)."""
        if message.get("message_type") == 2:  # the bot's own
            return None
        items = message.get("item_list") or ()
        if not items:
            return None  # nothing said, whoever it names as its sender
        sender = message.get("from_user_id")
        if not sender or not isinstance(sender, str):
            raise ValueError("it has no from_user_id")
        message_id = next((str(message[key]) for key in ("message_id", "msg_id", "svr_id")
                           if message.get(key) not in (None, "", 0)), None)
        if message_id is None:
            raise ValueError("it has no message_id")
        texts: list[str] = []
        media: list[MediaRef] = []
        for item in items:
            kind = item.get("type")
            if kind == TEXT_ITEM:
                text = (item.get("text_item") or {}).get("text")
                if text:
                    texts.append(str(text))
            elif kind in INBOUND_MEDIA:
                if kind == VOICE_ITEM:
                    transcript = (item.get("voice_item") or {}).get("text")
                    if transcript:
                        texts.append(str(transcript))
                ref = await self._download(item, kind, message_id)
                if ref is not None:
                    media.append(ref)
        if not texts and not media:
            log.info("%s: message %s from %s not answered: %s (the channel reads text, "
                     "images, voice, files and videos)", self.account.key, message_id, sender,
                     ", ".join(unread_item(item) for item in items))
            return None
        created = message.get("create_time_ms")
        timestamp = float(created) / 1000 if created else time.time()
        token = message.get("context_token")
        if token:
            await self.remember_token(sender, str(token), timestamp)
        return InboundMessage(
            channel=self.name, account=self.account.name, chat_id=sender,
            message_id=message_id, sender_id=sender, text="\n".join(texts), media=media,
            timestamp=timestamp,
            route_extra={"context_token": str(token)} if token else {})

    async def _download(self, item: dict[str, Any], kind: int, message_id: str
                        ) -> MediaRef | None:
        field, media_kind, default_name = INBOUND_MEDIA[kind]
        body = item.get(field) or {}
        media = body.get("media") or {}
        name = body.get("file_name") or default_name
        size = int(body["len"]) if str(body.get("len") or "").isdigit() else None
        try:
            key = crypto.parse_key(hex_key=body.get("aeskey"), b64_key=media.get("aes_key"))
            url = self._cdn_url(media.get("full_url"), "download",
                                encrypted_query_param=media.get("encrypt_query_param"))
            cap = self.context.max_inbound_bytes
            ciphertext = b"".join([chunk async for chunk in
                                   self.cdn.download(url, max_bytes=crypto.ciphertext_size(cap))])
            plaintext = crypto.decrypt(ciphertext, key)
        except (PlatformError, ValueError) as exc:
            return MediaRef(kind=media_kind, filename=name, size=size,
                            note=f"not saved: {exc}")

        async def chunks():
            yield plaintext

        return await self.context.save_media(chunks(), kind=media_kind, filename=name,
                                             platform_id=f"{message_id}:{kind}",
                                             declared_size=len(plaintext))

    def _cdn_url(self, full_url: str | None, endpoint: str, **query: str | None) -> str:
        """``full_url`` when it points at the configured CDN (never anywhere else), else
        ``{cdn}/<endpoint>?...``."""
        if full_url and urlsplit(full_url).netloc == urlsplit(self.cdn_base).netloc \
                and urlsplit(full_url).scheme in ("http", "https"):
            return full_url
        if not any(query.values()):
            raise ValueError(f"the media has no {endpoint} parameter")
        params = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in query.items() if v)
        return f"{self.cdn_base}/{endpoint}?{params}"

    # -- context tokens -------------------------------------------------------------------

    async def peer(self, user: str) -> Peer:
        """The user's state, from memory or the store."""
        peer = self.peers.get(user)
        if peer is None:
            stored = None
            if self.context.store is not None:
                stored = await self.context.get_state(TOKEN_STATE + user)
            peer = Peer(**stored) if isinstance(stored, dict) else Peer()
            self.peers[user] = peer
        return peer

    async def _save_peer(self, user: str, peer: Peer) -> None:
        if self.context.store is not None:
            await self.context.set_state(TOKEN_STATE + user, asdict(peer))

    async def remember_token(self, user: str, token: str, message_at: float) -> None:
        """Keep the user's latest token (a redelivered older message does not win): the
        user wrote, so the send window opens again."""
        peer = await self.peer(user)
        if peer.message_at is not None and message_at < peer.message_at:
            return
        if peer.token == token and peer.message_at == message_at:
            return  # the same message again
        peer.token, peer.token_at, peer.message_at = token, time.time(), message_at
        peer.sent_since, peer.held_until, peer.held_reason = 0, 0.0, ""
        await self._save_peer(user, peer)

    # -- sending --------------------------------------------------------------------------

    async def send(self, route: Route, payload: OutboundPayload) -> SendResult:
        user = route.chat_id
        if await self.paused():
            raise SendError(f"not sent: {self.session_expired}")
        peer = await self.peer(user)
        token = peer.token or route.extra.get("context_token")
        now = time.time()
        if not token:
            # Peers drop a tokenless message and still answer success.
            raise SendError(f"not sent: no context_token for {user} yet (the user must write "
                            "to the bot first; a message without one is lost silently)")
        if now < peer.held_until:
            raise SendError(f"not sent: held back after WeChat refused a message "
                            f"(ret=-2: {peer.held_reason}) until the user writes again; "
                            f"{peer.age(now)}", code=SEND_REFUSED)
        items: list[dict[str, Any]] = []
        if payload.is_media:
            if payload.caption:
                items.append(self._text_item(OutboundPayload(text=payload.caption,
                                                             format=payload.format)))
            items.append(await self._upload(user, token, payload))
        else:
            items.append(self._text_item(payload))
        client_id = None
        for item in items:
            client_id = await self._send_item(user, token, peer, item)
        return SendResult(message_id=client_id)

    def _text_item(self, payload: OutboundPayload) -> dict[str, Any]:
        text, _ = render_payload(payload, self.markup)
        return {"type": TEXT_ITEM, "text_item": {"text": text}}

    async def _send_item(self, user: str, token: str, peer: Peer, item: dict[str, Any], *,
                         client_id: str | None = None, state: int = FINISH) -> str:
        """One sendmessage; ``client_id``: a message still generating, which this goes
        on with (its first state counted against the quota already)."""
        going_on = client_id is not None
        client_id = client_id or f"chatkernel-{secrets.token_hex(12)}"
        body = {"msg": {"from_user_id": "", "to_user_id": user, "client_id": client_id,
                        "message_type": 2, "message_state": state, "item_list": [item],
                        "context_token": token}}
        try:
            await self.call("sendmessage", body)
        except ILinkError as exc:
            now = time.time()
            if exc.code == SEND_REFUSED:
                cause = refused_cause(peer, len(encode_json(body).encode()), now)
                if not going_on:  # a live message's later state refused: that message's
                    peer.held_until, peer.held_reason = now + REFUSED_HOLD_SECONDS, cause
                    await self._save_peer(user, peer)
                raise SendError(f"WeChat refused the message (sendmessage ret=-2): likely "
                                f"{cause}; {peer.age(now)}", code=SEND_REFUSED) from None
            if exc.session_expired:
                raise SendError(f"not sent: {self.session_expired}", code=exc.code) from None
            raise exc.send_error() from None
        except PlatformError as exc:
            raise exc.send_error() from None
        if not going_on:
            peer.sent_since += 1
            await self._save_peer(user, peer)
        return client_id

    # -- live replies: one message GENERATING, then FINISH, on one client_id ---------------

    def live_mode(self, route: Route) -> LiveMode | None:
        return "edit"

    async def start_preview(self, route: Route, mode: LiveMode,
                            payload: OutboundPayload) -> str:
        return await self._live_state(route, payload, None, GENERATING)

    async def update_preview(self, route: Route, preview: Preview,
                             payload: OutboundPayload) -> None:
        await self._live_state(route, payload, preview.id, GENERATING)

    async def replace_preview(self, route: Route, payload: OutboundPayload) -> SendResult:
        """FINISH the preview with the answer; if iLink refuses that (``ret=-2`` or any
        error), the answer goes out whole as a new message, once, and the refusal is
        logged and noted in the session's log: never a half answer left silently."""
        try:
            client_id = await self._live_state(route, payload, payload.replaces, FINISH)
        except SendError as exc:
            if await self.paused():
                raise  # an expired session: a new message would be refused as well
            notice = (f"live reply not finished: WeChat refused to finish the preview "
                      f"({exc}); the whole answer is sent as a new message")
            log.warning("%s: %s (chat %s)", self.account.key, notice, route.chat_id)
            result = await self.send(route, replace(payload, replaces=None))
            return SendResult(message_id=result.message_id, extra={"notice": notice})
        return SendResult(message_id=client_id)

    async def delete_preview(self, route: Route, preview: Preview) -> None:
        # iLink cannot take a message back: a preview that is no answer is finished
        # with a note that says so, so no half-answer stays "generating".
        await self._live_state(route, OutboundPayload(text=CUT_SHORT, format="plain"),
                               preview.id, FINISH)

    async def _live_state(self, route: Route, payload: OutboundPayload,
                          client_id: str | None, state: int) -> str:
        user = route.chat_id
        if await self.paused():
            raise SendError(f"not sent: {self.session_expired}")
        peer = await self.peer(user)
        token = peer.token or route.extra.get("context_token")
        if not token:
            raise SendError(f"not sent: no context_token for {user} yet")
        if client_id is None and time.time() < peer.held_until:
            raise SendError(f"not sent: held back after WeChat refused a message "
                            f"({peer.held_reason})", code=SEND_REFUSED)
        return await self._send_item(user, token, peer, self._text_item(payload),
                                     client_id=client_id, state=state)

    async def _upload(self, user: str, token: str, payload: OutboundPayload) -> dict[str, Any]:
        """Encrypt the file, upload it to the CDN, and return the item that sends it."""
        path = Path(payload.media_path)  # type: ignore[arg-type]
        kind = payload.media_kind if payload.media_kind in OUTBOUND_MEDIA else "file"
        media_type, item_type, field = OUTBOUND_MEDIA[kind]
        plaintext = path.read_bytes()
        key = crypto.new_key()
        ciphertext = crypto.encrypt(plaintext, key)
        filekey = secrets.token_hex(16)
        try:
            answer = await self.call("getuploadurl", {
                "filekey": filekey, "media_type": media_type, "to_user_id": user,
                "rawsize": len(plaintext), "rawfilemd5": crypto.md5_hex(plaintext),
                "filesize": len(ciphertext), "no_need_thumb": True, "aeskey": key.hex()})
            url = self._cdn_url(answer.get("upload_full_url"), "upload",
                                encrypted_query_param=answer.get("upload_param"),
                                filekey=filekey)
            uploaded = await self.cdn.request(
                "POST", url, data=ciphertext, what="CDN upload",
                headers={"Content-Type": "application/octet-stream"})
        except ILinkError as exc:
            if exc.session_expired:
                raise SendError(f"not sent: {self.session_expired}", code=exc.code) from None
            raise exc.send_error() from None
        except PlatformError as exc:
            raise exc.send_error() from None
        except ValueError as exc:
            raise SendError(f"upload failed: {exc}") from None
        param = uploaded.headers.get("x-encrypted-param")
        if uploaded.status != 200 or not param:
            reason = uploaded.headers.get("x-error-message") or f"HTTP {uploaded.status}"
            raise SendError.from_http(uploaded.status, f"CDN upload failed: {reason}")
        media = {"encrypt_query_param": param,
                 "aes_key": base64.b64encode(key.hex().encode()).decode(), "encrypt_type": 1}
        body: dict[str, Any] = {"media": media}
        if kind == "image":
            body["mid_size"] = len(ciphertext)
        elif kind == "video":
            body["video_size"] = len(ciphertext)
        else:
            body["file_name"] = path.name
            body["len"] = str(len(plaintext))
        return {"type": item_type, field: body}

    async def indicate(self, route: Route) -> None:
        user = route.chat_id
        if await self.paused():
            return
        ticket = self.typing_tickets.get(user)
        if ticket is None:
            peer = await self.peer(user)
            body: dict[str, Any] = {"ilink_user_id": user}
            if peer.token:
                body["context_token"] = peer.token
            ticket = (await self.call("getconfig", body)).get("typing_ticket")
            if not ticket:
                return
            self.typing_tickets[user] = ticket
        await self.call("sendtyping", {"ilink_user_id": user, "typing_ticket": ticket,
                                        "status": 1})

    # -- health -------------------------------------------------------------------------------

    async def probe(self) -> ProbeResult:
        """``getconfig`` with the bot token; the token's age (from the login's time) or its
        expired session as ``extra["findings"]``, for ``chatkernel doctor``."""
        if await self.paused():
            return ProbeResult(ok=False, detail=self.session_expired, restartable=False,
                               extra={"findings": [await self.token_finding("expired")]})
        owner = self.config.owner_user_id
        try:
            await self.call("getconfig", {"ilink_user_id": owner or ""}, timeout=10.0)
        except ILinkError as exc:
            if exc.session_expired:
                return ProbeResult(ok=False, detail=self.session_expired, restartable=False,
                                   extra={"findings": [await self.token_finding("expired")]})
            return ProbeResult(ok=False, detail=str(exc),
                               extra={"findings": [await self.token_finding()]})
        except PlatformError as exc:
            if exc.status in (401, 403):
                return ProbeResult(ok=False, restartable=False,
                                   detail="token rejected: run `chatkernel login wechat`",
                                   extra={"findings": [await self.token_finding("rejected")]})
            return ProbeResult(ok=False, detail=str(exc),
                               extra={"findings": [await self.token_finding()]})
        return ProbeResult(ok=True, detail=self.config.bot_id or "logged in",
                           extra={"bot_id": self.config.bot_id, "owner": owner,
                                  "findings": [await self.token_finding()]})

    async def token_finding(self, refused: str = "") -> dict[str, str]:
        """Doctor's finding about the bot token: its age since the login that gave it
        (``chatkernel login`` notes the time; a token set by hand, or by a login older
        than that, has none), a warning once iLink may end its session soon, a failure
        when iLink ended it (``refused``: ``"expired"``, ``-14``; ``"rejected"``, 401)."""
        issued = None
        if self.context.store is not None:
            issued = await self.context.credentials_issued_at()
        age = None if issued is None else max(0.0, time.time() - issued)
        aged = "age unknown" if age is None else f"{format_days(age)} old"
        account = "" if self.account.name == "main" else f" --account {self.account.name}"
        fix = f"chatkernel login wechat{account}, then restart the gateway"
        ends = f"iLink ends a session about {TOKEN_LIFETIME_SECONDS / 86400:.0f} days " \
               "after its login"
        if refused:
            what = "the session expired (iLink ret=-14)" if refused == "expired" else \
                "iLink refused the bot token"
            return {"check": "token", "status": "fail",
                    "message": f"{what}: the bot token ({aged}) no longer works", "fix": fix}
        if age is None:
            return {"check": "token", "status": "ok",
                    "message": "the bot token's age unknown (set by hand, or by a login "
                               f"before chatkernel noted its time); {ends}"}
        if age >= TOKEN_WARN_SECONDS:
            return {"check": "token", "status": "warn",
                    "message": f"the bot token is {aged}: {ends}, and then nothing is "
                               "received or sent until a new login", "fix": fix}
        return {"check": "token", "status": "ok", "message": f"the bot token is {aged} ({ends})"}

    async def aclose(self) -> None:
        if not await self.paused():
            await self.notify("msg/notifystop")
        await self.api.close()
        await self.cdn.close()
