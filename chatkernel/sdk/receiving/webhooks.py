"""The channel kit's webhooks: platform events POSTed to the gateway's HTTP server.

A webhook channel's transport is a :class:`Webhook`; its route is
``/<channel>/<account>/webhook`` on the gateway's server. Every request goes through the same steps before the channel sees it:

1. the body is read up to the channel's cap (413 beyond it, without reading the
   rest) and its content type checked (415);
2. a :class:`Verifier` checks that the platform sent it — a shared secret in a
   header (:class:`SecretHeader`: Telegram's), an HMAC over the raw bytes
   (:class:`HmacSignature`: Slack's and Meta's schemes, in their plugins), compared
   in constant time.
   A request that fails gets 401 or 403 and nothing is journaled;
3. the JSON is parsed (400 if it is not JSON), the channel may answer a
   protocol message at once (Slack's ``url_verification``), and otherwise its
   events are normalized and journaled, and the platform gets its 200 as soon
   as the journal has them: the turn runs behind (Slack retries after 3 s).
   Requests that arrive together share one journal commit (the store's group
   commit), each answered only once its own events are durable. While the kernel
   has a full backlog of accepted messages, a request waits for room a short
   while (``WEBHOOK_ROOM_SECONDS`` in core/inbound/pipeline.py), then gets 503
   with ``Retry-After`` and nothing journaled, rather than an answer past the
   platform's timeout.

A GET on the same path is the platform's subscription handshake where it has
one (Meta's ``hub.challenge``); the signature is never asked for on it.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
from aiohttp import web

from chatkernel.sdk.codec import decode_json
from chatkernel.sdk.errors import Backlogged
from chatkernel.sdk.receiving import SharedCommit
from chatkernel.sdk.receiving.transport import Transport

if TYPE_CHECKING:
    from chatkernel.sdk.channel import Channel, Deliver

__all__ = ["HmacSignature", "SecretHeader", "Verifier", "Webhook", "WebhookRejected"]

log = logging.getLogger("chatkernel.channel")


class WebhookRejected(Exception):
    """A webhook request refused: ``status`` is the HTTP answer, the message says why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Verifier:
    """Checks that a webhook request was sent by the platform.

    :meth:`verify` gets the request's headers and its raw body and raises
    :class:`WebhookRejected` (401 or 403) when it is not the platform's;
    :meth:`handshake` answers the platform's GET subscription check, if it has one.
    """

    def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        raise NotImplementedError

    def handshake(self, query: Mapping[str, str]) -> str:
        """The body to answer a GET with; raise :class:`WebhookRejected` to refuse it."""
        raise WebhookRejected(405, "this webhook takes POST requests only")


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"),
                               expected.encode("utf-8", "surrogatepass"))


class SecretHeader(Verifier):
    """The platform echoes a shared secret in ``header`` (Telegram:
    ``X-Telegram-Bot-Api-Secret-Token``, the ``secret_token`` given to setWebhook)."""

    def __init__(self, header: str, secret: str) -> None:
        if not secret:
            raise ValueError("a webhook secret must not be empty")
        self.header, self._secret = header, secret

    def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        if not _same(headers.get(self.header, ""), self._secret):
            raise WebhookRejected(401, f"wrong or missing {self.header}")


class HmacSignature(Verifier):
    """An HMAC-SHA256 over the raw body, hex, behind ``prefix`` in ``header``: the
    scheme of most platforms that sign their webhooks (Meta's ``X-Hub-Signature-256:
    sha256=...``; Slack's ``X-Slack-Signature: v0=...``).

    Where the platform signs a timestamp too, ``timestamp_header`` names its header,
    ``signed(timestamp, body)`` gives the bytes signed (by default the body alone),
    and a request more than ``tolerance`` seconds from ``clock()`` is refused as a
    replay. A missing signature gets 401, a wrong one ``wrong_status`` (401, or 403
    where the platform's docs say so). Compared in constant time.
    """

    def __init__(self, secret: str, *, header: str, prefix: str = "",
                 timestamp_header: str | None = None,
                 signed: Callable[[str, bytes], bytes] | None = None,
                 tolerance: float = 300.0, clock: Callable[[], float] = time.time,
                 wrong_status: int = 401) -> None:
        if not secret:
            raise ValueError("a signing secret must not be empty")
        self._secret = secret.encode()
        self.header, self.prefix = header, prefix
        self.timestamp_header = timestamp_header
        self._signed = signed or (lambda _timestamp, body: body)
        self.tolerance, self.clock, self.wrong_status = tolerance, clock, wrong_status

    def signature(self, body: bytes, timestamp: str = "") -> str:
        """The header's value for ``body`` (sent at ``timestamp``, where one is signed)."""
        # hmac.digest: OpenSSL's one-shot HMAC, without an HMAC object per request.
        return self.prefix + hmac.digest(self._secret, self._signed(timestamp, body),
                                         "sha256").hex()

    def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        given = headers.get(self.header, "")
        timestamp = ""
        if self.timestamp_header is not None:
            timestamp = headers.get(self.timestamp_header, "")
            if not timestamp or not given:
                raise WebhookRejected(401, f"missing {self.header} or {self.timestamp_header}")
            try:
                age = abs(self.clock() - int(timestamp))
            except ValueError:
                raise WebhookRejected(401, f"{self.timestamp_header} is not a number") from None
            if age > self.tolerance:
                raise WebhookRejected(401, f"{self.timestamp_header} is more than "
                                           f"{self.tolerance:g}s old (a replay?)")
        elif not given:
            raise WebhookRejected(401, f"missing {self.header}")
        if not _same(given, self.signature(body, timestamp)):
            raise WebhookRejected(self.wrong_status, f"wrong {self.header}")


#: The body of every default 200: encoded once, not per request.
_OK_BODY = b'{"ok": true}'


def _refuse(status: int, reason: str, *, headers: dict[str, str] | None = None
            ) -> web.Response:
    return web.json_response({"ok": False, "error": reason}, status=status, headers=headers)


async def _read_capped(request: web.Request, cap: int) -> bytes:
    length = request.content_length
    if length is not None:
        if length > cap:
            raise WebhookRejected(413, f"the body is over {cap} bytes")
        # Declared and within the cap: aiohttp reads no more than that, in one call.
        return await request.read()
    parts, size = [], 0  # chunked: counted as it comes
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > cap:
            raise WebhookRejected(413, f"the body is over {cap} bytes")
        parts.append(chunk)
    return b"".join(parts)


class Webhook(Transport):
    """The platform POSTs events to ``/<channel>/<account>/webhook`` on the gateway.

    Subclasses give :meth:`verifier` (how a request proves it is the platform's)
    and may override :meth:`register` (tell the platform where to post),
    :meth:`answer` (a protocol message answered at once), :meth:`events` (the
    events in one request) and :meth:`ok` (the answer once they are journaled).
    :meth:`run` identifies the bot, registers, and takes requests until
    cancelled; on a process that does not own the account
    (:meth:`serve_elsewhere`) requests are journaled for the owner to answer.
    """

    #: A request the store cannot take (a full disk) is answered 5xx: the platform
    #: sends it again, rather than the request being held past its timeout.
    store_waits_in_place = False

    quiet = True  # it waits for the platform to call
    #: The largest body taken (413 beyond) and the content types taken (415 others).
    max_bytes: ClassVar[int] = 1024 * 1024
    content_types: ClassVar[tuple[str, ...]] = ("application/json",)

    def __init__(self, channel: "Channel") -> None:
        super().__init__(channel)
        #: The receiver requests are handed to while a loop runs (None: answered 503).
        self._deliver: "Deliver | None" = None

    # -- what a webhook implements -------------------------------------------------------

    def verifier(self) -> Verifier:
        """The verifier of this account's requests (a secret header, an HMAC)."""
        raise NotImplementedError(f"{type(self).__name__} has no verifier")

    async def register(self) -> None:
        """Tell the platform where to post (Telegram's setWebhook), when it is told by a
        call rather than in its console."""

    def answer(self, payload: Any) -> web.StreamResponse | None:
        """An answer the platform expects at once, instead of delivering (Slack's
        ``url_verification`` challenge); None for ordinary events."""
        return None

    def events(self, payload: Any) -> list[Any]:
        """The events in one verified request's JSON (default: the payload itself).
        Raise :class:`WebhookRejected` for a malformed one."""
        return [payload]

    def ok(self) -> web.StreamResponse:
        """The answer once the request's messages are journaled."""
        return web.Response(body=_OK_BODY, content_type="application/json")

    # -- the loop ----------------------------------------------------------------------

    @property
    def accepting(self) -> bool:
        """Whether requests are taken now (a loop runs); otherwise they get 503."""
        return self._deliver is not None

    @property
    def path(self) -> str:
        """Where the platform posts: ``/<channel>/<account>/webhook``."""
        account = self.channel.account
        return f"/{account.channel_name}/{account.name}/webhook"

    async def run(self, deliver: "Deliver") -> None:
        await self.identify()
        await self.until_done(self.register, "registering the webhook")
        self.context.clear_problem()
        self.context.report_alive()
        await self._take_requests(deliver)

    async def serve_elsewhere(self, deliver: "Deliver") -> None:
        # The bot is identified (its own id, to ignore its own messages); registering
        # the webhook is the owner's.
        await self.identify()
        await self._take_requests(deliver)

    async def _take_requests(self, deliver: "Deliver") -> None:
        # Requests come side by side: those that arrive together share a commit.
        shared = self._deliver = SharedCommit(deliver)
        try:
            await anyio.sleep_forever()
        finally:
            if self._deliver is shared:
                self._deliver = None

    def http_routes(self) -> list[tuple[str, str, Any]]:
        verifier = self.verifier()

        async def post(request: web.Request) -> web.StreamResponse:
            return await self._post(request, verifier)

        async def get(request: web.Request) -> web.StreamResponse:
            try:
                return web.Response(text=verifier.handshake(request.query))
            except WebhookRejected as exc:
                return _refuse(exc.status, exc.reason)

        return [("POST", self.path, post), ("GET", self.path, get)]

    async def _post(self, request: web.Request, verifier: Verifier) -> web.StreamResponse:
        deliver = self._deliver
        try:
            body = await _read_capped(request, self.max_bytes)
            if request.content_type not in self.content_types:
                raise WebhookRejected(415, f"expected {' or '.join(self.content_types)}")
            verifier.verify(request.headers, body)
        except WebhookRejected as exc:
            if exc.status in (401, 403):
                log.warning("%s: webhook request refused: %s", self.channel.account.key,
                            exc.reason)
            return _refuse(exc.status, exc.reason)
        if deliver is None:  # the platform retries; nothing was recorded
            return _refuse(503, "the receive loop is not running")
        try:
            payload = decode_json(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return _refuse(400, "the body is not JSON")
        try:
            answer = self.answer(payload)
            if answer is not None:
                return answer
            events = self.events(payload)
        except WebhookRejected as exc:
            return _refuse(exc.status, exc.reason)
        try:
            await self.receive(deliver, events)
        except Backlogged as exc:  # nothing journaled: the platform sends it again
            return _refuse(503, str(exc), headers=exc.headers)
        return self.ok()
