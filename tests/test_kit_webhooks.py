"""The channel kit's webhooks: the verifiers (with properties), and the route over real
HTTP on 127.0.0.1 — caps, content types, refusals that journal nothing, the journal
before the 200, a protocol answer, the GET handshake."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import aiohttp
import anyio
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from chatkernel.channels import (
    Channel,
    ChannelLimits,
    InboundMessage,
    HmacSignature,
    SecretHeader,
    Webhook,
    WebhookRejected,
    hookimpl,
)
from chatkernel.testing import KernelHarness
from chatkernel.testing.contract import wait_until

pytestmark = pytest.mark.anyio

APP_SECRET = "app-secret"
VERIFY_TOKEN = "verify-me"


# -- verifiers ------------------------------------------------------------------------------


def stamped_headers(secret: str, body: bytes, ts: int) -> dict[str, str]:
    digest = hmac.new(secret.encode(), f"t0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Stamp": str(ts), "X-Stamped-Signature": f"t0={digest}"}


def body_headers(secret: str, body: bytes, header: str = "X-Body-Signature") -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {header: f"sha256={digest}"}


def stamped_verifier(secret: str, now: float) -> HmacSignature:
    """A platform that signs ``t0:<timestamp>:<body>`` (Slack's shape, other names)."""
    return HmacSignature(secret, header="X-Stamped-Signature", prefix="t0=",
                         timestamp_header="X-Stamp",
                         signed=lambda ts, body: b"t0:" + ts.encode() + b":" + body,
                         clock=lambda: now)


class SignedWithHandshake(HmacSignature):
    """An HMAC of the body, and a GET handshake that echoes a challenge for the token."""

    def __init__(self, secret: str, token: str) -> None:
        super().__init__(secret, header="X-Body-Signature", prefix="sha256=", wrong_status=403)
        self.token = token

    def handshake(self, query):
        if query.get("hub.mode") != "subscribe" or query.get("hub.verify_token") != self.token:
            raise WebhookRejected(403, "wrong handshake")
        return query.get("hub.challenge", "")


def refused(verifier, headers, body=b"{}") -> int:
    with pytest.raises(WebhookRejected) as info:
        verifier.verify(headers, body)
    return info.value.status


def test_secret_header_takes_only_the_exact_secret():
    verifier = SecretHeader("X-Secret", "s3cret")
    verifier.verify({"X-Secret": "s3cret"}, b"")
    assert refused(verifier, {}) == refused(verifier, {"X-Secret": "s3cre"}) == 401
    assert refused(verifier, {"X-Secret": "s3cret "}) == 401
    with pytest.raises(ValueError):
        SecretHeader("X-Secret", "")


def test_an_hmac_of_the_body_alone():
    verifier = HmacSignature(APP_SECRET, header="X-Body-Signature", prefix="sha256=",
                             wrong_status=403)
    # Unicode and "@" exactly as sent: never re-serialised.
    body = '{"text":"ünïcödé @mention \\u00e9"}'.encode()
    verifier.verify(body_headers(APP_SECRET, body), body)
    assert refused(verifier, {}, body) == 401
    assert refused(verifier, body_headers("wrong", body), body) == 403
    reserialised = json.dumps(json.loads(body)).encode()
    assert reserialised != body
    assert refused(verifier, body_headers(APP_SECRET, body), reserialised) == 403
    with pytest.raises(WebhookRejected) as info:
        verifier.handshake({})
    assert info.value.status == 405
    with pytest.raises(ValueError):
        HmacSignature("", header="X-Body-Signature")


def test_an_hmac_with_a_signed_timestamp_and_its_window():
    now = 1_700_000_000
    verifier = stamped_verifier("stamp-secret", now)
    body = b'{"type":"event","text":"caf\xc3\xa9 @here"}'
    verifier.verify(stamped_headers("stamp-secret", body, now), body)
    verifier.verify(stamped_headers("stamp-secret", body, now - 300), body)
    assert refused(verifier, stamped_headers("stamp-secret", body, now - 301), body) == 401
    assert refused(verifier, stamped_headers("stamp-secret", body, now + 301), body) == 401
    assert refused(verifier, stamped_headers("other", body, now), body) == 401
    assert refused(verifier, stamped_headers("stamp-secret", body + b" ", now), body) == 401
    assert refused(verifier, {"X-Stamped-Signature": "t0=00"}, body) == 401
    assert refused(verifier, {"X-Stamp": "soon", "X-Stamped-Signature": "t0=00"}, body) == 401


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(secret=st.text(min_size=1, max_size=40), body=st.binary(max_size=300),
       flip=st.integers(min_value=0))
def test_hmac_signatures_verify_their_own_body_and_no_other(secret, body, flip):
    plain = HmacSignature(secret, header="X-Body-Signature", prefix="sha256=")
    stamped = stamped_verifier(secret, 1000)
    plain.verify({"X-Body-Signature": plain.signature(body)}, body)
    stamped.verify({"X-Stamp": "1000", "X-Stamped-Signature": stamped.signature(body, "1000")},
                   body)
    # The verifier's signature is the formula (computed independently).
    assert plain.signature(body) == body_headers(secret, body, "X-Body-Signature")[
        "X-Body-Signature"]
    assert stamped.signature(body, "1000") == stamped_headers(secret, body, 1000)[
        "X-Stamped-Signature"]
    if body:
        index = flip % len(body)
        other = body[:index] + bytes([body[index] ^ 1]) + body[index + 1:]
        with pytest.raises(WebhookRejected):
            plain.verify({"X-Body-Signature": plain.signature(body)}, other)
        with pytest.raises(WebhookRejected):
            stamped.verify({"X-Stamp": "1000",
                            "X-Stamped-Signature": stamped.signature(body, "1000")}, other)


# -- the route ----------------------------------------------------------------------------


class HookChannel(Channel):
    """A webhook channel: HMAC-signed JSON ``{"messages": [...]}``, a ``challenge`` ping."""

    name = "hooked"
    limits = ChannelLimits()

    def transport(self) -> "Hook":
        return Hook(self)

    async def normalize(self, event: dict[str, Any]) -> InboundMessage:
        return InboundMessage(channel=self.name, account=self.account.name,
                              chat_id=event["chat"], message_id=event["id"],
                              sender_id=event["from"], text=event["text"])


class Hook(Webhook):
    max_bytes = 2000
    registered = 0

    def verifier(self):
        return SignedWithHandshake(APP_SECRET, VERIFY_TOKEN)

    async def register(self):
        type(self).registered += 1

    def answer(self, payload):
        if isinstance(payload, dict) and "challenge" in payload:
            return web.json_response({"challenge": payload["challenge"]})
        return None

    def events(self, payload):
        if not isinstance(payload, dict) or not isinstance(payload.get("messages"), list):
            raise WebhookRejected(400, "expected a list of messages")
        return payload["messages"]


class Plugin:
    @staticmethod
    @hookimpl
    def register_channels(register):
        register(HookChannel)


class Journal:
    """The kernel's receiver, noting what was journaled and when."""

    def __init__(self, receiver) -> None:
        self.receiver = receiver
        self.journaled: list[str] = []
        self.outcomes: list[str] = []

    async def __call__(self, message):
        return (await self.many([message]))[0]

    async def many(self, messages):
        outcomes = await self.receiver.many(messages)
        self.journaled += [m.text for m in messages]
        self.outcomes += outcomes
        return outcomes


@pytest.fixture
async def hook(tmp_path):
    config = {"channels": {"hooked": {"accounts": {"main": {"allow_from": ["*"]}}}}}
    async with KernelHarness(tmp_path, config=config, plugins=[("hooked", Plugin)]) as h:
        channel = h.kernel.accounts["hooked:main"].channel
        app = web.Application()
        for method, path, handler in channel.account.transport.http_routes():
            app.router.add_route(method, path, handler)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        url = f"http://{host}:{port}{channel.account.transport.path}"
        journal = Journal(h.kernel.receiver)
        try:
            async with aiohttp.ClientSession() as http, anyio.create_task_group() as tg:
                yield h, channel, journal, tg, http, url
                tg.cancel_scope.cancel()
        finally:
            await runner.cleanup()


def messages(*texts: str) -> bytes:
    return json.dumps({"messages": [{"chat": "c1", "id": f"m-{t}", "from": "u1", "text": t}
                                    for t in texts]}, ensure_ascii=False).encode()


async def post(http, url, body: bytes, *, signed: bool = True,
               content_type: str = "application/json", secret: str = APP_SECRET):
    headers = {"Content-Type": content_type, **(body_headers(secret, body) if signed else {})}
    async with http.post(url, data=body, headers=headers) as response:
        return response.status, await response.text()


async def start(tg, channel, journal):
    tg.start_soon(channel.account.transport.run, journal)
    await wait_until(lambda: channel.account.transport.accepting, timeout=5,
                     what="the webhook accepting", interval=0.005)


async def test_the_webhook_path_and_a_quiet_account(hook):
    h, channel, journal, tg, http, url = hook
    assert channel.account.transport.path == "/hooked/main/webhook"
    assert channel.account.transport.quiet  # judged by its probe, not by silence


async def test_before_the_loop_runs_requests_get_503_and_nothing_is_kept(hook):
    h, channel, journal, tg, http, url = hook
    assert (await post(http, url, messages("early")))[0] == 503
    assert journal.journaled == []


async def test_a_verified_request_is_journaled_before_its_200(hook):
    h, channel, journal, tg, http, url = hook
    await start(tg, channel, journal)
    assert Hook.registered >= 1 and channel.account.runtime.last_event_at is not None
    status, text = await post(http, url, messages("one", "two ünï @x"))
    assert status == 200 and json.loads(text) == {"ok": True}
    assert journal.journaled == ["one", "two ünï @x"]  # every message of the request
    # A redelivery of the same request is answered 200 and dropped by the journal.
    assert (await post(http, url, messages("one")))[0] == 200
    assert journal.outcomes == ["accepted", "accepted", "duplicate"]


@pytest.mark.parametrize(("case", "status"), [
    ("unsigned", 401), ("wrong signature", 403), ("not JSON", 400), ("form", 415),
    ("too big", 413), ("malformed events", 400), ("nested too deep", 400)])
async def test_refused_requests_journal_nothing(hook, case, status):
    h, channel, journal, tg, http, url = hook
    await start(tg, channel, journal)
    body = {"not JSON": b"{nope", "too big": messages("x" * 3000),
            "malformed events": b'{"messages": 3}',
            "nested too deep": b"[" * 1900}.get(case, messages("forged"))
    answer = await post(http, url, body, signed=case != "unsigned",
                        secret="wrong" if case == "wrong signature" else APP_SECRET,
                        content_type="application/x-www-form-urlencoded"
                        if case == "form" else "application/json")
    assert answer[0] == status, answer
    assert journal.journaled == []


async def test_a_body_over_the_cap_is_refused_without_a_content_length(hook):
    h, channel, journal, tg, http, url = hook
    await start(tg, channel, journal)

    async def chunks():
        for _ in range(10):
            yield b"x" * 500

    async with http.post(url, data=chunks(), headers={"Content-Type": "application/json"}
                         ) as response:
        assert response.status == 413
    assert journal.journaled == []


async def test_a_protocol_message_is_answered_at_once(hook):
    h, channel, journal, tg, http, url = hook
    await start(tg, channel, journal)
    status, text = await post(http, url, b'{"challenge": "abc123"}')
    assert status == 200 and json.loads(text) == {"challenge": "abc123"}
    assert journal.journaled == []


async def test_the_get_handshake_is_checked_and_needs_no_signature(hook):
    h, channel, journal, tg, http, url = hook
    query = {"hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN, "hub.challenge": "42"}
    async with http.get(url, params=query) as response:
        assert response.status == 200 and await response.text() == "42"
    async with http.get(url, params={**query, "hub.mode": "unsubscribe"}) as response:
        assert response.status == 403
