"""A fake iLink gateway and CDN on 127.0.0.1, strict about what a client sends.

:class:`FakeILink` serves ``/ilink/bot/*`` and the CDN (``/c2c/upload``,
``/c2c/download``) on one port, as Tencent's gateway does for a personal bot:

- every POST must carry the iLink headers (``AuthorizationType``, a bearer token the
  fake issued, a fresh ``X-WECHAT-UIN`` that is base64 of a uint32's decimal
  string, ``iLink-App-Id``, ``iLink-App-ClientVersion``) and ``base_info``; a
  request that does not is answered 400 and recorded in :attr:`violations`;
- ``getupdates`` long-polls; its cursor acknowledges everything before it, and an
  older cursor than one already presented does not replay;
- every inbound message has its own ``context_token``; ``sendmessage`` takes
  exactly one item, a ``client_id`` of its own, and answers ``ret=-2`` when the user
  has not written since the bot's last ten messages, for 24 hours
  (:attr:`clock_offset`), for a stale token, or a body over 16 KB; a tokenless
  send is answered ``{}`` and dropped (:attr:`dropped`), as the real peer does; a
  message in progress (a live reply) is ``message_state`` 1 (GENERATING), sent again
  and again on one ``client_id`` with the text so far, then 2 (FINISH) with the whole:
  one message, counted once against the quota (the fake's reading: the quota counts
  messages, and the states of one ``client_id`` are one); nothing may follow a FINISH
  on its ``client_id`` (:attr:`history` keeps the order of it all); with
  :attr:`refuse_finish_after_generating` it reads the other way, as one client reports
  iLink does: the context_token was spent by the first state, so a FINISH after
  GENERATING is answered ``ret=-2`` and the message stays half-written;
- :meth:`expire_session` makes every call of a token answer ``-14``;
- media both ways: AES-128-ECB, with the ciphertext's size and its plaintext's md5
  checked against what ``getuploadurl`` declared;
- the QR login's states are set by :meth:`set_qr_state` (or the dev server's
  control routes).
"""

from __future__ import annotations

import base64
import binascii
import itertools
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from chatkernel.testing import Call, ErrorAnswer, FakePlatform
from chatkernel.testing.devserver import fields, json_body, listing, wait_until
from chatkernel_wechat import crypto

WINDOW_MESSAGES = 10
WINDOW_SECONDS = 24 * 3600
LARGE_BODY = 16 * 1024
ITEM_FIELDS = {1: "text_item", 2: "image_item", 3: "voice_item", 4: "file_item", 5: "video_item"}
MEDIA_TYPES = {1: 2, 2: 5, 3: 4, 4: 3}  # getuploadurl media_type -> the item type it sends
#: The QR states ``/_fake/qr`` can set: those the real gateway answers.
QR_STATES = frozenset({"wait", "scaned", "confirmed", "expired", "need_verifycode",
                       "verify_code_blocked", "scaned_but_redirect", "binded_redirect"})


def ilink_error(ret: int, errmsg: str = "", status: int = 200) -> ErrorAnswer:
    body: dict[str, Any] = {"ret": ret, "errcode": ret}
    if errmsg:
        body["errmsg"] = errmsg
    return ErrorAnswer(status, body, message=f"ret={ret} {errmsg}")


@dataclass
class Sent:
    """One message the bot sent, as the user would see it."""

    to: str
    item: dict[str, Any]
    context_token: str | None
    client_id: str
    kind: str = "text"               # text, image, video, file
    #: 1 while it is being generated (a live reply), 2 once finished.
    state: int = 2
    #: How many GENERATING states came on its client_id after the first one.
    updates: int = 0
    text: str | None = None
    filename: str | None = None
    data: bytes | None = None        # the decrypted media


@dataclass
class Upload:
    filekey: str
    media_type: int
    to_user_id: str
    rawsize: int
    rawfilemd5: str
    filesize: int
    aeskey: str
    plaintext: bytes | None = None   # once uploaded and checked


@dataclass
class Peer:
    tokens: list[str] = field(default_factory=list)
    last_wrote: float = 0.0
    sent_since: int = 0


#: A dev server's config snippet (:meth:`FakeILink.config_snippet`).
DEV_SNIPPET = """# the fake iLink gateway is up; log in against it:
#   chatkernel login wechat --api-base {i.base_url}
#   curl -d '{{"status": "confirmed"}}' '{i.base_url}/_fake/qr?wait=10'
# or use the bot token {i.token!r} with api_base = "{i.base_url}";
# then set cdn_base = "{i.cdn_base}" and allow_from = ["*"] on the account, and write:
#   curl -d '{{"user": "u1@im.wechat", "text": "hello"}}' {i.base_url}/_fake/messages"""


class FakeILink(FakePlatform):
    """The fake gateway: ``async with FakeILink(token=...) as ilink``."""

    def __init__(self, *, token: str = "fake-bot-token", bot_id: str = "0a1b2c3d@im.bot",
                 owner: str = "owner@im.wechat", poll_timeout_ms: int = 1000, **kwargs) -> None:
        super().__init__(**kwargs)
        self.bot_id = bot_id
        self.owner = owner
        #: token -> the bot id it belongs to; expired tokens answer -14.
        self.tokens: dict[str, str] = {token: bot_id}
        self.token = token
        self.expired: set[str] = set()
        self.poll_timeout_ms = poll_timeout_ms
        self.updates: list[dict[str, Any]] = []
        self.acked = 0                       # the newest cursor position presented
        self.peers: dict[str, Peer] = {}
        self.client_ids: set[str] = set()
        #: Messages still GENERATING, by client_id.
        self.generating: dict[str, Sent] = {}
        #: What the user saw change, in order: ``(user, client_id, state, text)``.
        self.history: list[tuple[str, str, int, str | None]] = []
        self.uins: set[str] = set()
        self.violations: list[str] = []
        self.dropped: list[Sent] = []        # tokenless sends: "success", never shown
        self.refused: list[tuple[str, str]] = []   # (user, why) of every ret=-2
        #: Answer ret=-2 to a FINISH on a client_id that was GENERATING (the message stays
        #: as its last GENERATING state showed it).
        self.refuse_finish_after_generating = False
        self.typing: list[tuple[str, int]] = []
        self.uploads: dict[str, Upload] = {}       # upload_param -> declared upload
        self.files: dict[str, tuple[bytes, str]] = {}  # download param -> (ciphertext, hex key)
        self.clock_offset = 0.0
        self._ids = itertools.count(7_000_000_000_000_000_001)  # 64-bit, as the real ones
        self._updates = self.new_signal()
        # QR login
        self.qr_codes: dict[str, dict[str, Any]] = {}
        self.qr_hold = 2.0
        self.qr_requests: list[Call] = []
        self.redirect_to: str | None = None

    @property
    def cdn_base(self) -> str:
        return f"{self.base_url}/c2c"

    def now(self) -> float:
        return time.time() + self.clock_offset

    # -- routes -------------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        return [web.route("*", "/ilink/bot/get_bot_qrcode", self._qrcode),
                web.get("/ilink/bot/get_qrcode_status", self._qr_status),
                web.post("/ilink/bot/{endpoint:.+}", self._api),
                web.post("/c2c/upload", self._cdn_upload),
                web.get("/c2c/download", self._cdn_download)]

    def developer_info(self) -> dict[str, Any]:
        return {**super().developer_info(), "cdn_base": self.cdn_base, "token": self.token}

    def config_snippet(self) -> str:
        """How to log in against the fake (or use its token), and write as a user."""
        return DEV_SNIPPET.format(i=self)

    def developer_routes(self) -> list[web.RouteDef]:
        """A dev server's routes: ``POST /_fake/messages`` (``{"user", "text"}``: a user
        writes; answers the ``message_id``), ``GET /_fake/sent`` (``?user=``, ``?wait=``,
        ``?after=``: what the bot sent), ``POST /_fake/qr`` (``{"status"}``, one of
        :data:`QR_STATES`: the phone scans, confirms...; with ``?wait=``, once a QR code
        was fetched), ``POST /_fake/redeliver`` (the last update again) and
        ``POST /_fake/expire`` (every session expires)."""

        def conflict(reason: str) -> web.Response:
            return web.json_response({"error": reason}, status=409)

        async def inject(request: web.Request) -> web.Response:
            body = fields(await json_body(request), {"user": str, "text": str},
                          required=("user", "text"))
            message = self.inject_message(body["user"], body["text"])
            return web.json_response({"message_id": str(message["message_id"])})

        async def sent(request: web.Request) -> web.Response:
            user = request.query.get("user")
            return web.json_response({"messages": [
                {"to": m.to, "kind": m.kind, "text": m.text, "filename": m.filename}
                for m in await listing(request, self, lambda: self.sent(user))]})

        async def qr(request: web.Request) -> web.Response:
            status = fields(await json_body(request), {"status": str}, required=("status",))
            if status["status"] not in QR_STATES:
                return web.json_response(
                    {"error": f"status must be one of {sorted(QR_STATES)}"}, status=400)
            if not await wait_until(request, self, lambda: self.qr_code is not None):
                return conflict("no QR code was fetched yet")
            self.set_qr_state(status["status"])
            return web.json_response({"qrcode": self.qr_code})

        async def redeliver(request: web.Request) -> web.Response:
            if not self.updates:
                return conflict("nothing to redeliver")
            self.redeliver(self.updates[-1])
            return web.json_response({"ok": True})

        async def expire(request: web.Request) -> web.Response:
            for token in list(self.tokens):
                self.expire_session(token)
            return web.json_response({"ok": True})

        return [web.post("/_fake/messages", inject), web.get("/_fake/sent", sent),
                web.post("/_fake/qr", qr), web.post("/_fake/redeliver", redeliver),
                web.post("/_fake/expire", expire)]

    def _violation(self, what: str) -> ErrorAnswer:
        self.violations.append(what)
        return ilink_error(-1, f"bad request: {what}", status=400)

    def _check_headers(self, request: web.Request, *, auth: bool = True) -> str | None:
        """The bot id of the request's token (None before login); raises on a bad header."""
        h = request.headers
        if h.get("Content-Type", "").split(";")[0].strip() != "application/json":
            raise self._violation("Content-Type must be application/json")
        if h.get("AuthorizationType") != "ilink_bot_token":
            raise self._violation("AuthorizationType must be ilink_bot_token")
        if h.get("iLink-App-Id") != "bot":
            raise self._violation("iLink-App-Id must be bot")
        if not h.get("iLink-App-ClientVersion", "").isdigit():
            raise self._violation("iLink-App-ClientVersion must be a uint32")
        uin = h.get("X-WECHAT-UIN", "")
        try:
            decoded = base64.b64decode(uin, validate=True).decode()
            if not decoded.isdigit() or int(decoded) >= 2**32:
                raise ValueError
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise self._violation(f"X-WECHAT-UIN {uin!r} is not base64 of a uint32") from None
        if uin in self.uins and len(self.uins) < 2**16:
            raise self._violation("X-WECHAT-UIN reused: it must be new for every request")
        self.uins.add(uin)
        if not auth:
            return None
        bearer = h.get("Authorization", "")
        token = bearer.removeprefix("Bearer ") if bearer.startswith("Bearer ") else None
        if token is None or token not in self.tokens or token in self.expired:
            raise ilink_error(-14, "session timeout")
        return self.tokens[token]

    async def _body(self, request: web.Request, *, base_info: bool = True) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise self._violation("the body is not JSON") from None
        if not isinstance(body, dict):
            raise self._violation("the body is not a JSON object")
        if base_info:
            info = body.get("base_info")
            if not isinstance(info, dict) or not isinstance(info.get("channel_version"), str):
                raise self._violation("base_info.channel_version missing")
        return body

    async def _api(self, request: web.Request) -> web.StreamResponse:
        endpoint = request.match_info["endpoint"]
        handler = {"getupdates": self._getupdates, "sendmessage": self._sendmessage,
                   "getuploadurl": self._getuploadurl, "getconfig": self._getconfig,
                   "sendtyping": self._sendtyping, "msg/notifystart": self._ok,
                   "msg/notifystop": self._ok}.get(endpoint)
        call = Call(method=endpoint, params={}, http_method="POST",
                    content_type=request.headers.get("Content-Type", ""))

        async def answer() -> web.StreamResponse:
            if handler is None:
                raise self._violation(f"unknown endpoint {endpoint}")
            self._check_headers(request)
            call.params = await self._body(request)
            return await handler(call.params)

        return await self.serve_call(request, call, answer)

    async def _ok(self, body: dict[str, Any]) -> web.Response:
        return web.json_response({"ret": 0})

    # -- receiving ------------------------------------------------------------------------

    @staticmethod
    def cursor(position: int) -> str:
        return base64.b64encode(f"buf:{position}".encode()).decode()

    def _position(self, cursor: Any) -> int:
        if cursor in ("", None):
            return 0
        if not isinstance(cursor, str):
            raise self._violation("get_updates_buf must be a string")
        try:
            return int(base64.b64decode(cursor).decode().split(":", 1)[1])
        except (ValueError, IndexError, binascii.Error):
            raise self._violation(f"unknown get_updates_buf {cursor!r}") from None

    async def _getupdates(self, body: dict[str, Any]) -> web.Response:
        # A cursor acknowledges what came before it; an older one does not replay.
        start = max(self._position(body.get("get_updates_buf")), self.acked)
        self.acked = start
        await self.hold(lambda: len(self.updates) > start, self.poll_timeout_ms / 1000,
                        self._updates)
        msgs = self.updates[start:start + 20]
        return web.json_response({"ret": 0, "msgs": msgs,
                                  "get_updates_buf": self.cursor(start + len(msgs)),
                                  "longpolling_timeout_ms": self.poll_timeout_ms})

    def _push(self, message: dict[str, Any]) -> dict[str, Any]:
        self.updates.append(message)
        self._updates.fire()
        self.changed()
        return message

    def inject_message(self, user: str, text: str | None = None, *,
                       items: list[dict[str, Any]] | None = None, from_bot: bool = False,
                       message_type: int | None = None) -> dict[str, Any]:
        """A user writes to the bot: a new message with its own context_token."""
        token = f"ctx-{secrets.token_hex(8)}"
        message_id = str(next(self._ids))
        if not from_bot:
            peer = self.peers.setdefault(user, Peer())
            peer.tokens.append(token)
            peer.last_wrote, peer.sent_since = self.now(), 0
        item_list = items if items is not None else [{"type": 1, "text_item": {"text": text}}]
        return self._push({
            "seq": len(self.updates) + 1, "message_id": int(message_id),
            "from_user_id": self.bot_id if from_bot else user,
            "to_user_id": user if from_bot else self.bot_id,
            "client_id": f"c-{message_id}", "create_time_ms": int(self.now() * 1000),
            "session_id": "", "group_id": "",
            "message_type": message_type or (2 if from_bot else 1), "message_state": 2,
            "item_list": item_list, "context_token": token})

    def inject_captured(self, message: dict[str, Any]) -> dict[str, Any]:
        """Serve a message captured elsewhere (a client's test data) as it is, but for the
        ``seq`` and ``message_id`` the gateway gives every message it serves, added where
        it has none. Its ``context_token``, if any, is its sender's latest."""
        message = dict(message)
        message.setdefault("seq", len(self.updates) + 1)
        message.setdefault("message_id", next(self._ids))
        sender, token = message.get("from_user_id"), message.get("context_token")
        if isinstance(sender, str) and sender and token and message.get("message_type") != 2:
            peer = self.peers.setdefault(sender, Peer())
            peer.tokens.append(str(token))
            peer.last_wrote, peer.sent_since = self.now(), 0
        return self._push(message)

    def inject_media(self, user: str, kind: str, data: bytes, *, filename: str = "file.bin",
                     key_format: str = "hex", text: str | None = None) -> dict[str, Any]:
        """A user sends a file: encrypted with a fresh key and put on the CDN.
        ``key_format``: ``hex`` (image_item.aeskey), ``b64raw`` or ``b64hex``
        (media.aes_key as base64 of 16 bytes or of 32 hex characters)."""
        key = crypto.new_key()
        param = f"dl-{secrets.token_hex(12)}"
        ciphertext = crypto.encrypt(data, key)
        self.files[param] = (ciphertext, key.hex())
        media: dict[str, Any] = {"encrypt_query_param": param, "encrypt_type": 1}
        if key_format == "b64raw":
            media["aes_key"] = base64.b64encode(key).decode()
        elif key_format == "b64hex":
            media["aes_key"] = base64.b64encode(key.hex().encode()).decode()
        item_type = {"image": 2, "voice": 3, "file": 4, "video": 5}[kind]
        body: dict[str, Any] = {"media": media}
        if key_format == "hex":
            body["aeskey"] = key.hex()
        if kind == "file":
            body.update(file_name=filename, len=str(len(data)), md5=crypto.md5_hex(data))
        if kind == "voice":
            body.update(encode_type=6, playtime=1200, text=text)
        if kind == "video":
            body.update(video_size=len(ciphertext))
        return self.inject_message(user, items=[{"type": item_type,
                                                 ITEM_FIELDS[item_type]: body}])

    def redeliver(self, message: dict[str, Any]) -> None:
        """The gateway serves the same message again (same ids, same token)."""
        self._push(dict(message))

    def expire_session(self, token: str | None = None) -> None:
        """Every call of the token answers ``-14`` from now on."""
        self.expired.add(token or self.token)
        self.changed()

    # -- sending --------------------------------------------------------------------------

    def sent(self, user: str | None = None) -> list[Sent]:
        return [m for m in self.sent_messages if user is None or m.to == user]

    async def _sendmessage(self, body: dict[str, Any]) -> web.Response:
        msg = body.get("msg")
        if not isinstance(msg, dict):
            raise self._violation("sendmessage needs msg")
        for key, want in (("from_user_id", ""), ("message_type", 2)):
            if msg.get(key) != want:
                raise self._violation(f"msg.{key} must be {want!r}")
        state = msg.get("message_state")
        if state not in (1, 2):
            raise self._violation("msg.message_state must be 1 (generating) or 2 (finish)")
        user, client_id = msg.get("to_user_id"), msg.get("client_id")
        if not isinstance(user, str) or not user:
            raise self._violation("msg.to_user_id missing")
        ongoing = self.generating.get(client_id) if isinstance(client_id, str) else None
        if not isinstance(client_id, str) or not client_id or (
                client_id in self.client_ids and ongoing is None):
            raise self._violation("msg.client_id must be new, or the client_id of a message "
                                  "still generating")
        if ongoing is not None and ongoing.to != user:
            raise self._violation("msg.client_id belongs to another user's message")
        items = msg.get("item_list")
        if not isinstance(items, list) or len(items) != 1:
            raise self._violation("msg.item_list must hold exactly one item")
        sent = self._read_item(user, items[0], msg.get("context_token"), client_id)
        if ongoing is not None:  # the same message, further along
            if sent.kind != "text":
                raise self._violation("a generating message goes on with text only")
            if state == 2 and self.refuse_finish_after_generating:
                self.refused.append((user, "FINISH after GENERATING on one client_id"))
                raise ilink_error(-2)
            ongoing.text, ongoing.item, ongoing.state = sent.text, sent.item, state
            ongoing.updates += 1
            if state == 2:
                del self.generating[client_id]
            self.history.append((user, client_id, state, sent.text))
            self.changed()
            return web.json_response({})
        self.client_ids.add(client_id)
        sent.state = state
        token = msg.get("context_token")
        if not token:
            self.dropped.append(sent)  # the peer answers success and shows nothing
            return web.json_response({})
        peer = self.peers.setdefault(user, Peer())
        from chatkernel.channels import encode_json

        why = None
        if token not in peer.tokens:
            why = "stale context_token"
        elif peer.sent_since >= WINDOW_MESSAGES:
            why = "quota: ten bot messages since the user wrote"
        elif self.now() - peer.last_wrote > WINDOW_SECONDS:
            why = "window: 24 hours since the user wrote"
        elif len(encode_json(body).encode()) > LARGE_BODY:
            why = "payload too large"
        if why is not None:
            self.refused.append((user, why))
            raise ilink_error(-2)
        peer.sent_since += 1
        if state == 1:
            self.generating[client_id] = sent
        self.history.append((user, client_id, state, sent.text))
        self.record_sent(sent)
        return web.json_response({})

    def _read_item(self, user: str, item: Any, token: Any, client_id: str) -> Sent:
        kind = item.get("type") if isinstance(item, dict) else None
        field_name = ITEM_FIELDS.get(kind)  # type: ignore[arg-type]
        if field_name is None or not isinstance(item.get(field_name), dict):
            raise self._violation(f"unknown item {item!r}")
        body = item[field_name]
        sent = Sent(to=user, item=item, context_token=token, client_id=client_id)
        if kind == 1:
            if not isinstance(body.get("text"), str):
                raise self._violation("text_item.text must be a string")
            sent.text = body["text"]
            return sent
        media = body.get("media") or {}
        param = media.get("encrypt_query_param")
        if param not in self.files or media.get("encrypt_type") != 1:
            raise self._violation("media.encrypt_query_param is not an uploaded file")
        ciphertext, key_hex = self.files[param]
        try:
            if base64.b64decode(media.get("aes_key", "")).decode() != key_hex:
                raise ValueError
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise self._violation("media.aes_key must be base64 of the key's hex") from None
        sent.data = crypto.decrypt(ciphertext, bytes.fromhex(key_hex))
        if kind == 2:
            sent.kind = "image"
            if body.get("mid_size") != len(ciphertext):
                raise self._violation("image_item.mid_size must be the ciphertext size")
        elif kind == 5:
            sent.kind = "video"
            if body.get("video_size") != len(ciphertext):
                raise self._violation("video_item.video_size must be the ciphertext size")
        elif kind == 4:
            sent.kind, sent.filename = "file", body.get("file_name")
            if body.get("len") != str(len(sent.data)) or not sent.filename:
                raise self._violation("file_item needs file_name and len (a string)")
        else:
            raise self._violation("voice items are not sent by bots")
        return sent

    async def _getuploadurl(self, body: dict[str, Any]) -> web.Response:
        try:
            upload = Upload(filekey=str(body["filekey"]), media_type=int(body["media_type"]),
                            to_user_id=str(body["to_user_id"]), rawsize=int(body["rawsize"]),
                            rawfilemd5=str(body["rawfilemd5"]), filesize=int(body["filesize"]),
                            aeskey=str(body["aeskey"]))
        except (KeyError, ValueError, TypeError) as exc:
            raise self._violation(f"getuploadurl: {exc!r}") from None
        if upload.media_type not in MEDIA_TYPES or body.get("no_need_thumb") is not True:
            raise self._violation("getuploadurl: media_type 1-4 and no_need_thumb: true")
        if upload.filesize != crypto.ciphertext_size(upload.rawsize):
            raise self._violation("getuploadurl: filesize must be the ciphertext's size")
        if len(upload.aeskey) != 32:
            raise self._violation("getuploadurl: aeskey must be 32 hex characters")
        param = f"up-{secrets.token_hex(12)}"
        self.uploads[param] = upload
        return web.json_response({"ret": 0, "upload_param": param})

    async def _cdn_upload(self, request: web.Request) -> web.StreamResponse:
        param = request.query.get("encrypted_query_param", "")
        upload = self.uploads.get(param)
        body = await request.read()

        def refuse(reason: str) -> web.Response:
            self.violations.append(f"CDN upload: {reason}")
            return web.Response(status=400, headers={"x-error-message": reason})

        if upload is None or request.query.get("filekey") != upload.filekey:
            return refuse("unknown upload parameter or filekey")
        if request.headers.get("Content-Type") != "application/octet-stream":
            return refuse("Content-Type must be application/octet-stream")
        if len(body) != upload.filesize:
            return refuse(f"{len(body)} bytes, declared {upload.filesize}")
        try:
            plaintext = crypto.decrypt(body, bytes.fromhex(upload.aeskey))
        except ValueError as exc:
            return refuse(str(exc))
        if crypto.md5_hex(plaintext) != upload.rawfilemd5 or len(plaintext) != upload.rawsize:
            return refuse("the decrypted file does not match rawfilemd5 / rawsize")
        download = f"dl-{secrets.token_hex(12)}"
        self.files[download] = (body, upload.aeskey)
        return web.Response(status=200, headers={"x-encrypted-param": download})

    async def _cdn_download(self, request: web.Request) -> web.StreamResponse:
        found = self.files.get(request.query.get("encrypted_query_param", ""))
        if found is None:
            return web.Response(status=404, headers={"x-error-message": "no such file"})
        return web.Response(body=found[0], content_type="application/octet-stream")

    # -- typing -------------------------------------------------------------------------------

    async def _getconfig(self, body: dict[str, Any]) -> web.Response:
        if not isinstance(body.get("ilink_user_id"), str):
            raise self._violation("getconfig needs ilink_user_id")
        return web.json_response({"ret": 0, "typing_ticket": f"tt-{body['ilink_user_id']}"})

    async def _sendtyping(self, body: dict[str, Any]) -> web.Response:
        user, ticket = body.get("ilink_user_id"), body.get("typing_ticket")
        if ticket != f"tt-{user}" or body.get("status") not in (1, 2):
            raise self._violation("sendtyping needs the user's typing_ticket and status 1|2")
        self.typing.append((user, body["status"]))
        self.changed()
        return web.json_response({"ret": 0})

    # -- QR login -------------------------------------------------------------------------------

    async def _qrcode(self, request: web.Request) -> web.StreamResponse:
        call = Call(method="get_bot_qrcode", params=dict(request.query),
                    http_method=request.method)

        async def answer() -> web.Response:
            if request.query.get("bot_type") != "3":
                raise self._violation("get_bot_qrcode needs bot_type=3")
            if request.method == "POST":
                self._check_headers(request, auth=False)
                body = await self._body(request, base_info=False)
                if not isinstance(body.get("local_token_list", []), list):
                    raise self._violation("local_token_list must be a list")
            code = f"qr-{len(self.qr_codes) + 1}"
            self.qr_codes[code] = {"status": "wait", "served": None}
            self.changed()
            return web.json_response({"ret": 0, "qrcode": code,
                                      "qrcode_img_content": f"https://liteapp.weixin.qq.com/"
                                                            f"q/{code}?qrcode={code}&bot_type=3"})

        return await self.serve_call(request, call, answer)

    @property
    def qr_code(self) -> str | None:
        """The newest QR code handed out."""
        return next(reversed(self.qr_codes), None)

    def set_qr_state(self, status: str, **fields: Any) -> None:
        """Move the newest QR code to ``status`` (wait, scaned, confirmed, expired,
        scaned_but_redirect...). ``confirmed`` issues a new bot token."""
        code = self.qr_code
        assert code is not None, "no QR code was fetched yet"
        state = {"status": status, **fields}
        if status == "confirmed":
            token = fields.get("bot_token") or f"{secrets.token_hex(4)}@im.bot:" \
                                                f"{secrets.token_urlsafe(24)}"
            self.tokens[token] = self.bot_id
            state.update(bot_token=token, ilink_bot_id=self.bot_id,
                         baseurl=fields.get("baseurl", self.base_url),
                         ilink_user_id=self.owner)
        if status == "scaned_but_redirect":
            state.setdefault("redirect_host", self.redirect_to or f"{self.host}:{self.port}")
        self.qr_codes[code].update(state, served=None)
        self.changed()

    async def _qr_status(self, request: web.Request) -> web.StreamResponse:
        code = request.query.get("qrcode", "")
        call = Call(method="get_qrcode_status", params=dict(request.query), http_method="GET")
        self.qr_requests.append(call)

        async def answer() -> web.Response:
            extra = set(request.headers) & {"Authorization", "AuthorizationType",
                                            "X-WECHAT-UIN"}
            if extra or request.headers.get("iLink-App-Id") != "bot":
                raise self._violation("get_qrcode_status sends only the iLink-App-* headers")
            state = self.qr_codes.get(code)
            if state is None:
                raise self._violation(f"unknown qrcode {code!r}")
            # A long poll: it answers when the state changes, or after qr_hold.
            await self.hold(lambda: state["served"] != state["status"], self.qr_hold)
            state["served"] = state["status"]
            return web.json_response({k: v for k, v in state.items() if k != "served"})

        return await self.serve_call(request, call, answer)
