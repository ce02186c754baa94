"""The channel kit's webhooks: platform events POSTed to the gateway's HTTP server.

A webhook channel's route is ``/<channel>/<account>/webhook`` on the gateway's
server. Every request goes through the same steps before the channel sees it:

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

A GET on the same path is the platform's subscription handshake where it has
one (Meta's ``hub.challenge``); the signature is never asked for on it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
from aiohttp import web

from chatkernel.sdk.receiving import identify, receive_events, until_done
from chatkernel.sdk.codec import decode_json

if TYPE_CHECKING:
    from chatkernel.sdk.channel import Channel, Deliver

__all__ = ["HmacSignature", "SecretHeader", "Verifier", "WebhookRejected", "serve_webhook",
           "webhook_routes"]

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
        digest = hmac.new(self._secret, self._signed(timestamp, body), hashlib.sha256)
        return self.prefix + digest.hexdigest()

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


def _refuse(status: int, reason: str) -> web.Response:
    return web.json_response({"ok": False, "error": reason}, status=status)


async def _read_capped(request: web.Request, cap: int) -> bytes:
    if request.content_length is not None and request.content_length > cap:
        raise WebhookRejected(413, f"the body is over {cap} bytes")
    parts, size = [], 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > cap:
            raise WebhookRejected(413, f"the body is over {cap} bytes")
        parts.append(chunk)
    return b"".join(parts)


def webhook_routes(channel: "Channel", verifier: Verifier) -> list[tuple[str, str, Any]]:
    """The ``(method, path, handler)`` pairs of the channel's webhook."""

    async def post(request: web.Request) -> web.StreamResponse:
        deliver = channel.webhook_deliver
        try:
            body = await _read_capped(request, channel.webhook_max_bytes)
            if request.content_type not in channel.webhook_content_types:
                raise WebhookRejected(415, f"expected {' or '.join(channel.webhook_content_types)}")
            verifier.verify(request.headers, body)
        except WebhookRejected as exc:
            if exc.status in (401, 403):
                log.warning("%s: webhook request refused: %s", channel.account.key, exc.reason)
            return _refuse(exc.status, exc.reason)
        if deliver is None:  # the platform retries; nothing was recorded
            return _refuse(503, "the receive loop is not running")
        try:
            payload = decode_json(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return _refuse(400, "the body is not JSON")
        try:
            answer = channel.webhook_answer(payload)
            if answer is not None:
                return answer
            events = channel.webhook_events(payload)
        except WebhookRejected as exc:
            return _refuse(exc.status, exc.reason)
        await receive_events(channel, deliver, events)
        return channel.webhook_ok()

    async def get(request: web.Request) -> web.StreamResponse:
        try:
            return web.Response(text=verifier.handshake(request.query))
        except WebhookRejected as exc:
            return _refuse(exc.status, exc.reason)

    return [("POST", channel.webhook_path, post), ("GET", channel.webhook_path, get)]


async def accept_webhooks_elsewhere(channel: "Channel", deliver: "Deliver") -> None:
    """Take a webhook's requests on an instance that does not own the account (see
    :meth:`Channel.serve_elsewhere`): identify, then journal what comes, until
    cancelled. Registering the webhook is the owner's."""
    await identify(channel)
    channel.webhook_deliver = deliver
    try:
        await anyio.sleep_forever()
    finally:
        if channel.webhook_deliver is deliver:
            channel.webhook_deliver = None


async def serve_webhook(channel: "Channel", deliver: "Deliver") -> None:
    """A webhook channel's receive loop: identify, register the webhook with the
    platform (both retried with backoff until they work), then take requests
    until cancelled."""
    await identify(channel)
    await until_done(channel, channel.register_webhook, "registering the webhook")
    channel.clear_problem()
    channel.report_alive()
    channel.webhook_deliver = deliver
    try:
        await anyio.sleep_forever()
    finally:
        channel.webhook_deliver = None
