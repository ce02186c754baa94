"""A protocol-faithful fake of the WhatsApp Cloud API (Graph API), for tests and offline use.

:class:`FakeGraph` is a real aiohttp server on 127.0.0.1 that speaks the Graph API's wire
format for one business phone number: ``POST /{version}/{phone-number-id}/messages``
(text, media by id, templates, read receipts with the typing indicator),
``POST /{version}/{phone-number-id}/media`` (multipart upload), ``GET
/{version}/{media-id}`` (a short-lived download URL, fetched with the token) and ``GET
/{version}/{phone-number-id}`` (the probe), with Meta's error shape
``{"error": {"message", "type", "code", "error_subcode", "error_data", "fbtrace_id"}}``
and codes: 190 for a bad or revoked token, 100 for a request the published schema
refuses (every request body is checked against Meta's OpenAPI description,
:mod:`chatkernel_whatsapp.spec`), 131047 outside the 24-hour window, 131053 for a media
type Meta refuses (``audio/opus``), 130429 / 131056 when the throughput or pair rate is
exceeded (when :attr:`FakeGraph.throughput` / :attr:`FakeGraph.pair_rate` are set).

It is also Meta's side of the webhook: :meth:`FakeGraph.subscribe` performs the GET
verification (``hub.mode``, ``hub.verify_token``, ``hub.challenge``) before anything is
posted; every notification is signed (``X-Hub-Signature-256``, the kit's
:class:`MetaSigner`), retried on anything but a 2xx, delivered in
order per user; :meth:`FakeGraph.inject_messages` batches several messages (and
entries, and changes) in one notification; :meth:`FakeGraph.redeliver` posts one again;
and after every accepted send the fake posts its statuses, ``sent`` then ``delivered``
(``read`` with :attr:`FakeGraph.auto_read`), or, for a recipient :meth:`fail_delivery`
names, an asynchronous ``failed`` with Meta's error. Users have business-scoped user ids
(BSUIDs) as Meta gives them now: a phone's contact carries its ``user_id``
(``user_ids=False``: as before BSUIDs), a user written as ``US.…`` has no phone at all
(``from_user_id``, no ``from``), sends may go by ``recipient`` (``to`` wins when both are
given), statuses carry ``recipient_user_id``, and :meth:`FakeGraph.user_id_update`
changes a user's BSUID::

    async with FakeGraph() as graph:
        await graph.subscribe(f"{gateway}/whatsapp/main/webhook")
        graph.inject_message("15551234567", "hello")
        sent = await graph.wait_for_sent(1)
        assert sent[0].text == "re: hello"

Built on the kernel's fake-platform base (:mod:`chatkernel.testing.fake_platform`); it
is a model, not Meta: no conversations or pricing, templates are not looked up (any
name is approved unless :attr:`FakeGraph.templates` lists the approved ones), and media
are kept in memory.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
from aiohttp import web

from chatkernel.testing.devserver import bad_request, fields, json_body, listing
from chatkernel.testing.fake_platform import Call, ErrorAnswer, FakePlatform, HmacSigner
from chatkernel_whatsapp import spec

__all__ = ["FakeGraph", "GraphErrorAnswer", "Notification", "SentMessage", "StoredMedia"]

DEFAULT_TOKEN = "EAAFakeGraphTokenForOfflineTests0123456789"
DEFAULT_PHONE_NUMBER_ID = "106540352242922"
DEFAULT_DISPLAY_NUMBER = "+1 555-078-3881"
WINDOW_SECONDS = 24 * 3600
TEXT_LIMIT = 4096
#: What Meta takes per media kind (https: "Supported media types"), by MIME type.
ACCEPTED_MIME: dict[str, frozenset[str]] = {
    "image": frozenset({"image/jpeg", "image/png"}),
    "video": frozenset({"video/mp4", "video/3gpp"}),
    "audio": frozenset({"audio/ogg", "audio/mpeg", "audio/amr", "audio/mp4", "audio/aac"}),
    "sticker": frozenset({"image/webp"}),
    "document": frozenset({
        "text/plain", "application/pdf", "application/msword",
        "application/vnd.ms-excel", "application/vnd.ms-powerpoint",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "image/webp", "image/jpeg", "image/png"}),
}
UPLOAD_MIME = frozenset().union(*ACCEPTED_MIME.values())
_MARKERS = re.compile(r"(?<![\w*_~`])([*_~])(?=\S)(.+?)(?<=\S)\1(?![\w*_~`])")


class MetaSigner(HmacSigner):
    """Meta's webhook signature, as Meta makes it: ``X-Hub-Signature-256:
    sha256=<hex HMAC-SHA256(app_secret, raw body)>``."""

    def __init__(self, app_secret: str) -> None:
        super().__init__(app_secret, header="X-Hub-Signature-256", prefix="sha256=")


def _fbtrace() -> str:
    return "A" + secrets.token_urlsafe(16)


class GraphErrorAnswer(ErrorAnswer):
    """Meta's error answer: ``{"error": {...}}`` with its HTTP status."""

    def __init__(self, status: int, code: int, message: str, *, type_: str = "OAuthException",
                 subcode: int | None = None, details: str | None = None,
                 title: str | None = None) -> None:
        error: dict[str, Any] = {"message": message, "type": type_, "code": code,
                                 "fbtrace_id": _fbtrace()}
        if subcode is not None:
            error["error_subcode"] = subcode
        if title is not None:
            error["error_user_title"] = title
        if details is not None:
            error["error_data"] = {"messaging_product": "whatsapp", "details": details}
        super().__init__(status, {"error": error}, message=f"{code}: {message}")
        self.code = code


def invalid_parameter(details: str) -> GraphErrorAnswer:
    return GraphErrorAnswer(400, 100, "(#100) Invalid parameter", details=details)


@dataclass
class StoredMedia:
    """A file the fake holds: uploaded by the business, or sent by a user (a test)."""

    media_id: str
    data: bytes = field(repr=False)
    mime_type: str
    filename: str | None = None

    @property
    def sha256(self) -> str:
        return base64.b64encode(hashlib.sha256(self.data).digest()).decode()


@dataclass
class SentMessage:
    """A message the business sent, as the fake accepted it."""

    wamid: str
    #: Whom it was addressed to: ``to`` (a phone number) or, without one, ``recipient``
    #: (a BSUID); :attr:`addressed_by` says which.
    to: str
    type: str
    body: dict[str, Any] = field(repr=False)
    media: StoredMedia | None = None
    when: float = field(default_factory=time.time)
    addressed_by: str = "to"

    @property
    def content(self) -> dict[str, Any]:
        return self.body.get(self.type) or {}

    @property
    def text(self) -> str | None:
        """The text body, a caption, or a template's first body parameter."""
        if self.type == "text":
            return self.content.get("body")
        if self.type == "template":
            for component in self.content.get("components") or []:
                for parameter in component.get("parameters") or []:
                    if parameter.get("type") == "text":
                        return parameter.get("text")
            return None
        return self.content.get("caption")

    @property
    def plain_text(self) -> str | None:
        """The text as the user reads it: WhatsApp's ``*bold*`` and the like shown as
        formatting, so without their markers."""
        text = self.text
        if text is None:
            return None
        text = text.replace("```", "")
        previous = None
        while previous != text:
            previous, text = text, _MARKERS.sub(r"\2", text)
        return text

    @property
    def reply_to(self) -> str | None:
        return (self.body.get("context") or {}).get("message_id")

    @property
    def filename(self) -> str | None:
        return self.content.get("filename") or (self.media.filename if self.media else None)


@dataclass
class Notification:
    """A webhook notification the fake posts (and may post again)."""

    number: int
    body: dict[str, Any]
    #: The user it is about (notifications of one user are delivered in order).
    user: str
    delivered: bool = False
    attempts: int = 0


#: A dev server's config snippet (:meth:`FakeGraph.config_snippet`).
DEV_SNIPPET = """# the fake Graph API is up; point an account at it:
#   export WHATSAPP_TOKEN={g.token}
#   export WHATSAPP_APP_SECRET={g.app_secret}
#   export WHATSAPP_VERIFY_TOKEN={g.verify_token}
[channels.whatsapp.accounts.main]
access_token = "${{WHATSAPP_TOKEN}}"
phone_number_id = "{g.phone_number_id}"
app_secret = "${{WHATSAPP_APP_SECRET}}"
verify_token = "${{WHATSAPP_VERIFY_TOKEN}}"
api_base = "{g.base_url}"
allow_from = ["*"]
# start chatkernel run, then subscribe its webhook and write as a user:
#   curl -d '{{"url": "http://127.0.0.1:8787/whatsapp/main/webhook"}}' {g.base_url}/_fake/subscribe
#   curl -d '{{"from": "15551234567", "text": "hello"}}' {g.base_url}/_fake/messages
#   curl '{g.base_url}/_fake/sent?to=15551234567&wait=10'"""


class FakeGraph(FakePlatform):
    """The Graph API of one WhatsApp business phone number, and its webhook pusher."""

    def __init__(self, *, token: str = DEFAULT_TOKEN,
                 phone_number_id: str = DEFAULT_PHONE_NUMBER_ID,
                 display_phone_number: str = DEFAULT_DISPLAY_NUMBER,
                 verified_name: str = "Chatkernel Test", quality_rating: str = "GREEN",
                 app_secret: str = "fake-app-secret", verify_token: str = "fake-verify-token",
                 waba_id: str = "419561257915477", version: str = "v23.0",
                 webhook_workers: int = 1, statuses: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tokens = {token}
        self.token = token
        self.revoked: set[str] = set()
        self.phone_number_id = phone_number_id
        self.display_phone_number = display_phone_number
        self.verified_name = verified_name
        self.quality_rating = quality_rating
        self.app_secret = app_secret
        self.verify_token = verify_token
        self.waba_id = waba_id
        self.version = version
        #: Rolling limits answered with Meta's codes; None: not enforced.
        self.throughput: tuple[int, float] | None = None   # 130429, per number
        self.pair_rate: tuple[int, float] | None = None    # 131056, per recipient
        #: Statuses posted after every accepted send (``sent``, ``delivered``).
        self.statuses = statuses
        self.auto_read = False
        #: Approved template names (None: any name is approved).
        self.templates: set[str] | None = None
        self.media: dict[str, StoredMedia] = {}
        self.read_receipts: list[dict[str, Any]] = []
        #: Every inbound message id made so far, and the user who wrote it.
        self.inbound: dict[str, str] = {}
        #: Each BSUID made for a phone number (:meth:`user_id`), and that number.
        self.phones: dict[str, str] = {}
        #: A user's new BSUID -> the one before (:meth:`user_id_update`).
        self.previous_ids: dict[str, str] = {}
        self.unknown_params: list[str] = []
        #: When each user last wrote: the 24-hour customer-service window.
        self.last_user_message: dict[str, float] = {}
        #: Notifications in the order made; delivery attempts are in webhooks.attempts.
        self.notifications: list[Notification] = []
        self.webhook_url: str | None = None
        self.verifications: list[dict[str, Any]] = []
        self.webhook_workers = webhook_workers
        self.status_delay = 0.02
        self._failures: dict[str, tuple[int, str, str]] = {}
        self._ids = itertools.count(1)
        self._queues: list[list[Notification]] = [[] for _ in range(webhook_workers)]
        self._queue_signal = self.new_signal()
        self._workers_started = False
        self.webhooks.delays = (0.05, 0.1, 0.2, 0.4, 0.8)

    # -- routes -------------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/{version}/{node}/messages", self._messages),
                web.post("/{version}/{node}/media", self._upload),
                web.get("/{version}/{node}", self._node),
                web.get("/_media/{media_id}", self._download)]

    def developer_info(self) -> dict[str, Any]:
        return {**super().developer_info(), "token": self.token,
                "phone_number_id": self.phone_number_id, "app_secret": self.app_secret,
                "verify_token": self.verify_token}

    def config_snippet(self) -> str:
        """An account pointed at the fake, and how to subscribe its webhook and write."""
        return DEV_SNIPPET.format(g=self)

    def developer_routes(self) -> list[web.RouteDef]:
        """A dev server's routes: ``POST /_fake/subscribe`` (``{"url"}``: subscribe a
        webhook, after Meta's verification handshake), ``POST /_fake/messages``
        (``{"from", "text"}`` or ``{"messages": [...]}``: users write; answers the
        ``ids``), ``POST /_fake/fail`` (``{"to", "code", "title"}``: that number's
        deliveries fail), ``POST /_fake/close-window`` (``{"to"}``: its 24-hour window
        closes) and ``GET /_fake/sent`` (``?to=``, ``?wait=``, ``?after=``: what the business
        sent)."""

        async def recipient(request: web.Request, **more: type) -> dict:
            return fields(await json_body(request), {"to": str, **more}, required=("to",))

        async def subscribe(request: web.Request) -> web.Response:
            url = fields(await json_body(request), {"url": str}, required=("url",))["url"]
            return web.json_response({"passed": await self.subscribe(url)})

        async def messages(request: web.Request) -> web.Response:
            body = await json_body(request)
            items = body.get("messages", [body])
            if not isinstance(items, list) or not items or not all(
                    isinstance(m, dict) and isinstance(m.get("from"), str)
                    and isinstance(m.get("text", ""), str) for m in items):
                raise bad_request('expected {"from": "<wa_id>", "text": "..."} or '
                                  '{"messages": [...]}')
            made = [self.message(m["from"], m.get("text", "")) for m in items]
            self.inject_messages(made)
            return web.json_response({"ids": [m["id"] for m in made]})

        async def fail(request: web.Request) -> web.Response:
            body = await recipient(request, code=int, title=str)
            self.fail_delivery(body["to"], code=body.get("code", 131026),
                               title=body.get("title", "Message undeliverable"))
            return web.json_response({"ok": True})

        async def close_window(request: web.Request) -> web.Response:
            self.close_window((await recipient(request))["to"])
            return web.json_response({"ok": True})

        async def sent(request: web.Request) -> web.Response:
            to = request.query.get("to")
            return web.json_response({"messages": [
                {"to": m.to, "type": m.type, "text": m.text, "when": m.when, "id": m.wamid}
                for m in await listing(request, self, lambda: self.sent(to))]})

        return [web.post("/_fake/subscribe", subscribe), web.post("/_fake/messages", messages),
                web.post("/_fake/fail", fail), web.post("/_fake/close-window", close_window),
                web.get("/_fake/sent", sent)]

    async def unknown_route(self, request: web.Request) -> web.StreamResponse:
        return GraphErrorAnswer(400, 100, "Unsupported request - method type: "
                                f"{request.method.lower()}", type_="GraphMethodException"
                                ).response()

    def _authorize(self, request: web.Request) -> None:
        header = request.headers.get("Authorization", "")
        token = header[7:] if header.startswith("Bearer ") else ""
        if token in self.revoked:
            raise GraphErrorAnswer(401, 190, "Error validating access token: Session has "
                                   "expired", subcode=463)
        if token not in self.tokens:
            raise GraphErrorAnswer(401, 190, "Invalid OAuth access token - Cannot parse "
                                   "access token")

    def _check_node(self, request: web.Request) -> None:
        version = request.match_info["version"]
        if not re.fullmatch(r"v[0-9]+\.[0-9]+", version):
            raise GraphErrorAnswer(400, 2500, f"Unknown path components: /{version}")
        if request.match_info["node"] != self.phone_number_id:
            raise GraphErrorAnswer(400, 100, "Unsupported post request. Object with ID "
                                   f"'{request.match_info['node']}' does not exist, cannot "
                                   "be loaded due to missing permissions, or does not "
                                   "support this operation", type_="GraphMethodException",
                                   subcode=33)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        try:
            params = await request.json()
        except ValueError:
            params = None
        body = params if isinstance(params, dict) else {}
        method = "read" if "status" in body else "messages"
        call = Call(method=method, params=body, http_method="POST",
                    content_type=request.content_type)

        async def answer() -> web.Response:
            self._authorize(request)
            self._check_node(request)
            if not isinstance(params, dict):
                raise invalid_parameter("the request body must be a JSON object")
            if method == "read":
                return self._read(body)
            return self._send(body)

        return await self.serve_call(request, call, answer)

    def _read(self, body: dict[str, Any]) -> web.Response:
        problems = spec.problems(body, "MarkMessageRequestPayload")
        if body.get("status") != "read":
            problems.append(f"$.status: {body.get('status')!r} is not 'read'")
        typing = body.get("typing_indicator")
        if typing is not None and typing != {"type": "text"}:
            problems.append("$.typing_indicator: expected {\"type\": \"text\"}")
        if problems:
            raise invalid_parameter("; ".join(problems))
        self.read_receipts.append(body)
        self.changed()
        return web.json_response({"success": True})

    def _send(self, body: dict[str, Any]) -> web.Response:
        # ``recipient`` (a BSUID) is newer than the v23.0 description, which requires
        # ``to``: checked as if it were ``to``. Both given: ``to`` wins, as Meta says.
        addressed_by = "to" if "to" in body or "recipient" not in body else "recipient"
        checked = {key: value for key, value in body.items() if key != "recipient"}
        if addressed_by == "recipient":
            checked["to"] = body["recipient"]
        problems = spec.problems(checked, "Message")
        if addressed_by == "recipient" and not _is_user_id(str(body["recipient"])):
            problems.append(f"$.recipient: {body['recipient']!r} is not a business-scoped "
                            "user id")
        if problems:
            raise invalid_parameter("; ".join(problems))
        kind, to = body["type"], str(checked["to"])
        content = body.get(kind) or {}
        if kind == "text" and len(content.get("body") or "") > TEXT_LIMIT:
            raise GraphErrorAnswer(400, 100, "(#100) Param text['body'] must be at most "
                                   f"{TEXT_LIMIT} characters long.")
        if kind == "text" and not (content.get("body") or "").strip():
            raise GraphErrorAnswer(400, 100, "(#100) Param text['body'] is required")
        media = None
        if kind in ACCEPTED_MIME:
            media = self.media.get(str(content.get("id")))
            if media is None:
                raise GraphErrorAnswer(400, 131009, "(#131009) Parameter value is not valid",
                                       details="Media id is not valid")
            if media.mime_type.split(";")[0] not in ACCEPTED_MIME[kind]:
                raise GraphErrorAnswer(400, 131053, "Media upload error", details=(
                    f"Unsupported {kind} type {media.mime_type}"))
        if kind == "template":
            name = content.get("name")
            if self.templates is not None and name not in self.templates:
                raise GraphErrorAnswer(404, 132001, "Template name does not exist in the "
                                       "translation", details=f"template name ({name}) does "
                                       f"not exist in {content['language'].get('code')}")
        elif not self.window_open(to):
            raise GraphErrorAnswer(400, 131047, "Re-engagement message", details=(
                "Message failed to send because more than 24 hours have passed since the "
                "customer last replied to this number."))
        rules = []
        if self.throughput is not None:
            rules.append((("throughput",), *self.throughput))
        if self.pair_rate is not None:
            rules.append((("pair", to), *self.pair_rate))
        if rules:
            wait = self.rates.admit(rules)
            if wait > 0:
                pair_full = self.pair_rate is not None and self._full(("pair", to),
                                                                      self.pair_rate)
                if pair_full:
                    raise GraphErrorAnswer(400, 131056, "(Business Account, Consumer Account) "
                                           "pair rate limit hit", details=(
                                               "Message failed to send because there were "
                                               "too many messages sent from this phone "
                                               "number to the same phone number in a short "
                                               "period of time."))
                raise GraphErrorAnswer(400, 130429, "Rate limit hit", details=(
                    "Cloud API message throughput has been reached."))
        wamid = self._wamid()
        sent = SentMessage(wamid=wamid, to=to, type=kind, body=body, media=media,
                           addressed_by=addressed_by)
        self.record_sent(sent)
        self._after_send(sent)
        contact = {"input": to, "wa_id": to} if addressed_by == "to" else \
            {"input": to, "user_id": to}
        return web.json_response({"messaging_product": "whatsapp", "contacts": [contact],
                                  "messages": [{"id": wamid}]})

    def _full(self, key: Any, rule: tuple[int, float]) -> bool:
        return self.rates.count(key, rule[1]) >= rule[0]

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        call = Call(method="media", params={}, http_method="POST",
                    content_type=request.content_type)

        async def answer() -> web.Response:
            self._authorize(request)
            self._check_node(request)
            if request.content_type != "multipart/form-data":
                raise invalid_parameter("the upload must be multipart/form-data")
            form = await request.post()
            upload = form.get("file")
            call.params = {key: value for key, value in form.items() if key != "file"}
            if not isinstance(upload, web.FileField):
                raise invalid_parameter("file is required")
            if form.get("messaging_product") != "whatsapp":
                raise invalid_parameter("messaging_product is required")
            declared = str(form.get("type") or "")
            part = (upload.content_type or "").split(";")[0].strip()
            base = declared.split(";")[0].strip()
            call.params["file"] = {"filename": upload.filename, "content_type":
                                   upload.content_type}
            if base not in UPLOAD_MIME or (part and part != "application/octet-stream"
                                           and part != base):
                raise GraphErrorAnswer(400, 131053, "Media upload error", details=(
                    f"Param file must be a file with one of the following types: "
                    f"{', '.join(sorted(UPLOAD_MIME))}. Received file of type "
                    f"'{part or declared}'."))
            media = StoredMedia(media_id=self._media_id(), data=upload.file.read(),
                                mime_type=declared, filename=upload.filename)
            self.media[media.media_id] = media
            self.changed()
            return web.json_response({"id": media.media_id})

        return await self.serve_call(request, call, answer)

    async def _node(self, request: web.Request) -> web.StreamResponse:
        node = request.match_info["node"]
        method = "phone_number" if node == self.phone_number_id else "media_info"
        call = Call(method=method, params=dict(request.query), http_method="GET")

        async def answer() -> web.Response:
            self._authorize(request)
            if node == self.phone_number_id:
                return web.json_response({
                    "id": self.phone_number_id, "display_phone_number": self.display_phone_number,
                    "verified_name": self.verified_name, "quality_rating": self.quality_rating})
            media = self.media.get(node)
            if media is None:
                raise GraphErrorAnswer(400, 100, f"Unsupported get request. Object with ID "
                                       f"'{node}' does not exist", type_="GraphMethodException",
                                       subcode=33)
            return web.json_response({
                "messaging_product": "whatsapp", "id": media.media_id,
                "url": f"{self.base_url}/_media/{media.media_id}?ext={int(time.time())}",
                "mime_type": media.mime_type, "sha256": media.sha256,
                "file_size": str(len(media.data))})

        return await self.serve_call(request, call, answer)

    async def _download(self, request: web.Request) -> web.StreamResponse:
        call = Call(method="download", params={"media_id": request.match_info["media_id"]},
                    http_method="GET")

        async def answer() -> web.Response:
            try:
                self._authorize(request)
            except GraphErrorAnswer:
                raise ErrorAnswer(404, "Not Found") from None  # as the media host answers
            media = self.media.get(request.match_info["media_id"])
            if media is None:
                raise ErrorAnswer(404, "Not Found")
            return web.Response(body=media.data, content_type=media.mime_type.split(";")[0])

        return await self.serve_call(request, call, answer)

    # -- the business's side ---------------------------------------------------------------

    def revoke_token(self, token: str | None = None) -> None:
        """The token expires (or is revoked): calls with it answer code 190."""
        token = token or self.token
        self.tokens.discard(token)
        self.revoked.add(token)

    def window_open(self, wa_id: str) -> bool:
        last = self.last_user_message.get(self.user_key(wa_id))
        return last is not None and time.time() - last < WINDOW_SECONDS

    def close_window(self, wa_id: str) -> None:
        """The user last wrote more than 24 hours ago."""
        self.last_user_message[self.user_key(wa_id)] = time.time() - WINDOW_SECONDS - 60

    def fail_delivery(self, wa_id: str, code: int = 131026,
                      title: str = "Message undeliverable",
                      details: str = "Message Undeliverable.") -> None:
        """Messages to ``wa_id`` are accepted, then reported ``failed`` (asynchronously,
        as Meta does: the send itself answers with an id). ``wa_id``: the user's phone
        number or BSUID."""
        self._failures[self.user_key(wa_id)] = (code, title, details)

    def sent(self, to: str | None = None) -> list[SentMessage]:
        """What the business sent, to the user ``to`` names (their phone number or
        BSUID, whichever the send was addressed by), or to anyone."""
        if to is None:
            return list(self.sent_messages)
        user = self.user_key(str(to))
        return [m for m in self.sent_messages if self.user_key(m.to) == user]

    def typing(self, wa_id: str) -> list[dict[str, Any]]:
        """The read receipts with the typing indicator sent for ``wa_id``'s messages."""
        user = self.user_key(str(wa_id))
        return [r for r in self.read_receipts if "typing_indicator" in r
                and self.inbound.get(r["message_id"]) == user]

    def user_key(self, user: str) -> str:
        """One name for a user, whichever of their ids ``user`` is: their phone number
        when they have one, else their first BSUID."""
        while user in self.previous_ids:
            user = self.previous_ids[user]
        return self.phones.get(user, user)

    def add_media(self, data: bytes, mime_type: str, filename: str | None = None) -> str:
        """A file a user sends: its media id, for :meth:`inject_message`."""
        media = StoredMedia(media_id=self._media_id(), data=data, mime_type=mime_type,
                            filename=filename)
        self.media[media.media_id] = media
        return media.media_id

    # -- the user's side: notifications ------------------------------------------------------

    def message(self, wa_id: str, text: str | None = None, *, kind: str | None = None,
                timestamp: float | None = None, message_id: str | None = None,
                **content: Any) -> dict[str, Any]:
        """An inbound message object as Meta writes it (a text, or ``kind`` with its
        ``content``: ``image={"id": ..., "mime_type": ...}``...). ``wa_id`` is the
        sender's phone number, or a BSUID (``US.…``) for a user Meta shows without one
        (a username): the message then has ``from_user_id`` and no ``from``."""
        kind = kind or ("text" if not content else next(iter(content)))
        sender = {"from_user_id": str(wa_id)} if _is_user_id(str(wa_id)) else \
            {"from": str(wa_id)}
        message: dict[str, Any] = {**sender, "id": message_id or self._wamid(),
                                   "timestamp": str(int(timestamp if timestamp is not None
                                                        else time.time())),
                                   "type": kind}
        if kind == "text":
            message["text"] = {"body": text or ""}
        message.update(content)
        return message

    def notification(self, changes: list[dict[str, Any]],
                     entries: int = 1) -> dict[str, Any]:
        """A notification: ``changes`` (values) spread over ``entries`` entries."""
        entry_list: list[dict[str, Any]] = [{"id": self.waba_id, "changes": []}
                                            for _ in range(max(1, entries))]
        per_entry = -(-len(changes) // len(entry_list))  # consecutive changes per entry
        for index, value in enumerate(changes):
            entry_list[index // per_entry]["changes"].append(
                {"value": value, "field": value.pop("_field", "messages")})
        return {"object": "whatsapp_business_account",
                "entry": [entry for entry in entry_list if entry["changes"]]}

    def messages_value(self, messages: list[dict[str, Any]],
                       names: dict[str, str] | None = None,
                       usernames: dict[str, str] | None = None,
                       user_ids: bool = True) -> dict[str, Any]:
        """A change's value: the messages and a contact for each sender, as Meta writes
        them now: ``wa_id`` (the phone, for a sender who has one) and ``user_id`` (their
        BSUID; ``user_ids=False``: none for a phone, as before BSUIDs), and in
        ``profile`` the ``name`` (``names``; a username-only user may have none: an
        empty name leaves it out) and the ``username`` (``usernames``)."""
        senders = list(dict.fromkeys(_sender(m) for m in messages))
        contacts = []
        for s in senders:
            name = (names or {}).get(s, f"User {s[-4:]}")
            profile = {"name": name} if name else {}
            if usernames and s in usernames:
                profile["username"] = usernames[s]
            contact: dict[str, Any] = {"profile": profile}
            if _is_user_id(s):
                contact["user_id"] = s
            else:
                contact["wa_id"] = s
                if user_ids:
                    contact["user_id"] = self.user_id(s)
            contacts.append(contact)
        return {"messaging_product": "whatsapp", "metadata": self._metadata(),
                "contacts": contacts, "messages": messages}

    def inject_message(self, wa_id: str, text: str | None = None, **fields: Any) -> dict[str, Any]:
        """A user writes to the business: posted to the webhook as its own
        notification; returns the message object."""
        message = self.message(wa_id, text, **fields)
        self.inject_messages([message])
        return message

    def inject_messages(self, messages: list[dict[str, Any]], *, per_change: int | None = None,
                        entries: int = 1, names: dict[str, str] | None = None,
                        usernames: dict[str, str] | None = None,
                        user_ids: bool = True) -> Notification:
        """Several messages in one notification: ``per_change`` messages in each change
        (all in one by default), the changes spread over ``entries`` entries; the
        contacts as :meth:`messages_value` makes them."""
        for message in messages:
            user = self.user_key(_sender(message))
            self.inbound[message["id"]] = user
            if message.get("type") != "system":
                self.last_user_message[user] = time.time()
        size = per_change or len(messages) or 1
        values = [self.messages_value(messages[i:i + size], names, usernames, user_ids)
                  for i in range(0, len(messages), size)]
        return self.post(self.notification(values, entries),
                         user=self.user_key(_sender(messages[0])))

    def user_id_update(self, previous: str, *, phone: str | None = None) -> str:
        """The user whose BSUID is ``previous`` (or whose phone number it is) gets a new
        BSUID; with ``phone``, because they changed their number to it. Posted as Meta
        does since its correction of August 2026 (``user_id_update`` is no webhook field
        of its own): a ``system`` message, ``user_changed_number`` (with the new
        ``wa_id``) or ``user_changed_user_id``, carrying ``previous_user_id`` and the
        new ``user_id``, and no contacts. Returns the new BSUID; the user's later
        messages come from it."""
        old_phone = None if _is_user_id(previous) else previous
        old_id = self.user_id(previous) if old_phone else previous
        if phone is not None:  # the new number's BSUID, as its messages will carry
            new_id = self.user_id(phone)
        else:
            digest = hashlib.sha256(f"{old_id}:changed".encode()).digest()
            new_id = f"US.{int.from_bytes(digest[:8], 'big')}"
        self.previous_ids[new_id] = old_id
        system: dict[str, Any] = {"type": "user_changed_user_id", "user_id": new_id,
                                  "previous_user_id": old_id,
                                  "body": "User's business-scoped user id changed"}
        if phone is not None:
            system.update(type="user_changed_number", wa_id=phone,
                          body=f"User changed from {old_phone or old_id} to {phone}")
        message: dict[str, Any] = {"id": self._wamid(), "timestamp": str(int(time.time())),
                                   "type": "system", "system": system}
        message.update({"from": old_phone} if old_phone else {"from_user_id": old_id})
        value = {"messaging_product": "whatsapp", "metadata": self._metadata(),
                 "messages": [message]}
        self.post(self.notification([value]), user=self.user_key(old_id))
        return new_id

    def post(self, body: dict[str, Any], *, user: str = "") -> Notification:
        """Queue a notification for the webhook (posted in order per user)."""
        notification = Notification(number=len(self.notifications) + 1, body=body, user=user)
        self.notifications.append(notification)
        self._enqueue(notification)
        return notification

    def redeliver(self, notification: Notification | None = None) -> Notification:
        """Post a notification again, byte for byte the same JSON (Meta redelivers
        after a failure, for days)."""
        original = notification or self.notifications[-1]
        return self.post(original.body, user=original.user)

    def status_value(self, sent: SentMessage, status: str,
                     error: tuple[int, str, str] | None = None) -> dict[str, Any]:
        """A status of ``sent``: with the recipient's BSUID (``recipient_user_id``), and
        their phone (``recipient_id``) only when the send named it."""
        item: dict[str, Any] = {"id": sent.wamid, "status": status,
                                "timestamp": str(int(time.time()))}
        if sent.addressed_by == "to":
            item["recipient_id"] = sent.to
            item["recipient_user_id"] = self.user_id(sent.to)
        else:
            item["recipient_user_id"] = sent.to
        if error is not None:
            code, title, details = error
            item["errors"] = [{"code": code, "title": title, "message": title,
                               "error_data": {"details": details},
                               "href": "https://developers.facebook.com/docs/whatsapp/"
                                       "cloud-api/support/error-codes/"}]
        return {"messaging_product": "whatsapp", "metadata": self._metadata(),
                "statuses": [item]}

    def _after_send(self, sent: SentMessage) -> None:
        if not self.statuses:
            return
        failure = self._failures.get(self.user_key(sent.to))
        order = ["sent", "failed"] if failure else ["sent", "delivered"] + (
            ["read"] if self.auto_read else [])

        async def report() -> None:
            await anyio.sleep(self.status_delay)  # after the send's answer, as Meta
            for status in order:
                self.post(self.notification([self.status_value(
                    sent, status, failure if status == "failed" else None)]),
                    user=self.user_key(sent.to))

        self.start_soon(report)

    def _metadata(self) -> dict[str, str]:
        digits = "".join(ch for ch in self.display_phone_number if ch.isdigit())
        return {"display_phone_number": digits, "phone_number_id": self.phone_number_id}

    def user_id(self, wa_id: str) -> str:
        """The business-scoped user id Meta gives the sender ``wa_id`` in ``contacts[]``
        (``user_id``), the same for the same sender."""
        digest = hashlib.sha256(f"{self.phone_number_id}:{wa_id}".encode()).digest()
        user_id = f"US.{int.from_bytes(digest[:8], 'big')}"
        self.phones[user_id] = str(wa_id)
        return user_id

    def _wamid(self) -> str:
        raw = f"{self.phone_number_id}:{next(self._ids)}:{secrets.token_hex(8)}".encode()
        return "wamid." + base64.b64encode(raw).decode()

    def _media_id(self) -> str:
        return str(10**15 + next(self._ids) * 7919)

    # -- the webhook -------------------------------------------------------------------------

    async def subscribe(self, url: str, *, verify_token: str | None = None) -> bool:
        """Meta's verification of a callback URL: a GET with ``hub.mode=subscribe``,
        ``hub.verify_token`` and a random ``hub.challenge``, which must come back as the
        body of a 200. Only then are notifications posted there. Returns whether it
        passed (recorded in :attr:`verifications`)."""
        import aiohttp

        challenge = str(secrets.randbelow(10**9))
        query = {"hub.mode": "subscribe", "hub.verify_token": verify_token or self.verify_token,
                 "hub.challenge": challenge}
        status, text = None, ""
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(url, params=query, timeout=aiohttp.ClientTimeout(10)) as r:
                    status, text = r.status, await r.text()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            text = f"{type(exc).__name__}: {exc}"
        passed = status == 200 and text == challenge
        self.verifications.append({"url": url, "status": status, "passed": passed})
        if passed:
            self.webhook_url = url
            self._start_workers()
        return passed

    def point_webhook(self, url: str) -> None:
        """Post to ``url`` from now on, without a new verification (a gateway moved)."""
        self.webhook_url = url
        self._start_workers()

    def _enqueue(self, notification: Notification) -> None:
        index = hash(notification.user) % self.webhook_workers
        self._queues[index].append(notification)
        self._queue_signal.fire()

    def _start_workers(self) -> None:
        if self._workers_started:
            return
        self._workers_started = True
        for index in range(self.webhook_workers):
            self.start_soon(self._deliver_forever, index)

    async def _deliver_forever(self, index: int) -> None:
        queue = self._queues[index]
        while not self.closing:
            if not queue or self.webhook_url is None:
                await self._queue_signal.wait(0.25)
                continue
            notification = queue[0]
            url = self.webhook_url
            body = notification.body if isinstance(notification.body, bytes) else \
                _encode(notification.body)
            attempt = await self.webhooks.push(
                url, body, signer=MetaSigner(self.app_secret),
                wanted=lambda: not self.closing and self.webhook_url == url)
            notification.attempts += 1
            if attempt is None:
                continue  # the callback URL changed: the next attempts go to the new one
            notification.delivered = attempt.ok
            queue.pop(0)  # delivered, or given up after the retries
            self.changed()

    async def wait_delivered(self, timeout: float = 10.0) -> None:
        """Wait until every notification made so far was delivered or given up."""
        await self.wait_until(lambda: not any(self._queues), timeout)

    def delivered_bodies(self) -> list[bytes]:
        return [a.body for a in self.webhooks.attempts if a.ok]


def _is_user_id(user: str) -> bool:
    """A BSUID (``US.13491208655302741918``), not a phone number (digits only)."""
    return "." in user


def _sender(message: dict[str, Any]) -> str:
    """Who wrote an inbound message: its phone number, else its BSUID."""
    return str(message.get("from") or message.get("from_user_id"))


def _encode(body: Any) -> bytes:
    """JSON as Meta writes it: no spaces, every non-ASCII character as ``\\uXXXX``, and
    ``/`` and ``@`` escaped too (``\\/``, ``\\u0040``). A verifier that parses the body
    and signs it re-serialised gets other bytes, and a wrong signature."""
    return (json.dumps(body, ensure_ascii=True, separators=(",", ":"))
            .replace("/", "\\/").replace("@", "\\u0040").encode())


def every_message(notifications: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every message object in ``notifications``."""
    return [m for n in notifications for e in n.get("entry", []) for c in e.get("changes", [])
            for m in c.get("value", {}).get("messages", [])]

