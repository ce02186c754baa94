"""The fake-platform base (``chatkernel.testing.fake_platform``), over real HTTP.

A tiny platform built on it exercises each part: calls, latency, faults, rate windows,
long polls and their end at exit, webhook pushes with retries, and the three signers
(checked against HMACs computed here from the bytes the receiver got, and against the
platforms' published examples).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Any

import aiohttp
import anyio
import pytest
from aiohttp import web

from chatkernel.testing.contract import wait_until
from chatkernel.testing.fake_platform import (
    Call,
    FakePlatform,
    HmacSigner,
    ErrorAnswer,
    RateWindows,
    SecretTokenSigner,
    WebhookPusher,
)

pytestmark = pytest.mark.anyio


class TinyPlatform(FakePlatform):
    """``POST /api/<method>`` with JSON; ``send`` records a message (two a minute per
    chat); ``GET /poll?timeout=S`` long-polls for :attr:`inbox`."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.inbox: list[str] = []
        self.inbox_signal = self.new_signal()

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/api/{method}", self._api), web.get("/poll", self._poll)]

    async def _api(self, request: web.Request) -> web.StreamResponse:
        call = Call(method=request.match_info["method"], params=await request.json(),
                    http_method=request.method, content_type=request.content_type)
        return await self.serve_call(request, call, lambda: self._answer(call))

    async def _answer(self, call: Call) -> web.Response:
        if call.method == "send":
            self.check_rates([(("chat", call.params["chat"]), 2, 60.0)])
            self.record_sent(call.params["text"])
        return web.json_response({"ok": True})

    async def _poll(self, request: web.Request) -> web.Response:
        await self.hold(lambda: bool(self.inbox), float(request.query["timeout"]),
                        self.inbox_signal)
        messages, self.inbox = self.inbox, []
        return web.json_response({"messages": messages})

    def deliver(self, text: str) -> None:
        self.inbox.append(text)
        self.inbox_signal.fire()


@pytest.fixture
async def platform():
    async with TinyPlatform() as fake:
        yield fake


@pytest.fixture
async def http():
    # A connection per request: a dropped connection must not be reused.
    async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True)) as session:
        yield session


async def send(http, platform, method="send", **params) -> tuple[int, Any, Any]:
    async with http.post(f"{platform.base_url}/api/{method}", json=params) as response:
        return response.status, await response.json(content_type=None), response.headers


class Receiver:
    """A webhook endpoint: answers the statuses queued (then 200) and keeps each
    request's raw body and headers."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.requests: list[tuple[bytes, dict[str, str]]] = []
        self.url = ""

    async def __aenter__(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/hook"
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._runner.cleanup()

    async def _hook(self, request: web.Request) -> web.Response:
        self.requests.append((await request.read(), dict(request.headers)))
        return web.Response(status=self.statuses.pop(0) if self.statuses else 200)


# -- the server, calls, sent messages ---------------------------------------------------------


async def test_the_server_records_calls_and_what_the_bot_sent(platform, http) -> None:
    assert platform.base_url.startswith("http://127.0.0.1:")
    assert (await send(http, platform, text="hello", chat=1))[:2] == (200, {"ok": True})
    assert (await send(http, platform, "ping"))[0] == 200
    async with http.get(f"{platform.base_url}/nowhere") as response:
        assert response.status == 404
    assert [(c.method, c.status, c.http_method) for c in platform.calls] == [
        ("send", 200, "POST"), ("ping", 200, "POST")]
    assert platform.calls[0].params == {"text": "hello", "chat": 1}
    assert [c.method for c in platform.calls_to("SEND")] == ["send"]
    assert await platform.wait_for_sent(1) == ["hello"]
    assert await platform.wait_for_sent(1, where=lambda m: m.startswith("h")) == ["hello"]


async def test_extra_routes_are_served_before_the_catch_all() -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="dev route")

    async with TinyPlatform(extra_routes=lambda p: [web.get("/_dev", hello)]) as platform:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{platform.base_url}/_dev") as response:
                assert await response.text() == "dev route"


async def test_wait_until_wakes_on_a_change_and_times_out(platform) -> None:
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(platform.wait_until, lambda: bool(platform.sent_messages))
            await anyio.sleep(0)
            platform.record_sent("x")
    with pytest.raises(TimeoutError):
        await platform.wait_until(lambda: False, timeout=0.1)


# -- latency ----------------------------------------------------------------------------------


@pytest.mark.slow
async def test_latency_holds_each_answer_and_jitter_is_seeded(platform, http) -> None:
    platform.latency = 0.5
    answers: list[Any] = []

    async def ping() -> None:
        answers.append(await send(http, platform, "ping"))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ping)
            await platform.wait_until(lambda: bool(platform.calls))
            assert platform.calls[-1].status is None  # arrived, not answered yet
    assert answers[0][0] == 200 and platform.calls[-1].status == 200

    def delays(seed: int) -> list[float]:
        fake = FakePlatform(seed=seed)
        fake.latency, fake.jitter = 0.05, 0.02
        return [fake.request_delay() for _ in range(5)]

    assert delays(3) == delays(3) != delays(4)
    assert all(0.05 <= d <= 0.07 for d in delays(3)) and len(set(delays(3))) == 5


# -- faults -----------------------------------------------------------------------------------


async def test_faults_answer_errors_in_queue_order_without_effect(platform, http) -> None:
    platform.faults.fail("send", ErrorAnswer(503, {"error": "busy"}, {"Retry-After": "2"}))
    platform.faults.fail("*", ErrorAnswer(500, {"error": "oops"}), times=2)
    status, body, headers = await send(http, platform, text="a", chat=1)
    assert (status, body, headers["Retry-After"]) == (503, {"error": "busy"}, "2")
    assert (await send(http, platform, "ping"))[:2] == (500, {"error": "oops"})
    assert (await send(http, platform, text="b", chat=1))[0] == 500
    assert (await send(http, platform, text="c", chat=1))[0] == 200
    assert platform.sent_messages == ["c"]
    assert [c.status for c in platform.calls] == [503, 500, 500, 200]
    assert platform.calls[0].error is not None and platform.calls[0].error.status == 503


async def test_a_fault_can_match_several_methods_or_one_call(platform, http) -> None:
    platform.faults.fail(("ping", "pong"), ErrorAnswer(500, {}), times=2)
    platform.faults.fail("send", ErrorAnswer(400, {}), match=lambda c: c.params["chat"] == 2)
    assert [(await send(http, platform, m))[0] for m in ("pong", "ping", "ping")] == \
        [500, 500, 200]
    assert (await send(http, platform, text="to 1", chat=1))[0] == 200
    assert (await send(http, platform, text="to 2", chat=2))[0] == 400
    assert platform.faults.pending == []


async def test_dropped_connections_before_and_after_the_effect(platform, http) -> None:
    platform.faults.drop("send")
    with pytest.raises(aiohttp.ClientError):
        await send(http, platform, text="lost", chat=1)
    assert platform.sent_messages == [] and platform.calls[-1].status is None
    platform.faults.drop("send", after_processing=True)
    with pytest.raises(aiohttp.ClientError):
        await send(http, platform, text="sent, answer lost", chat=1)
    assert platform.sent_messages == ["sent, answer lost"]
    assert platform.calls[-1].status is None
    platform.faults.drop("send")
    platform.faults.clear()
    assert (await send(http, platform, text="fine", chat=1))[0] == 200


async def test_a_stalled_call_takes_effect_and_is_answered_once_released(platform, http) -> None:
    platform.faults.stall("send")
    answers: list[tuple] = []
    async with anyio.create_task_group() as tg:
        async def stalled() -> None:
            answers.append(await send(http, platform, text="landed", chat=1))

        tg.start_soon(stalled)
        await platform.wait_until(lambda: platform.stalled)
        assert platform.sent_messages == ["landed"] and answers == []  # in effect, unanswered
        assert (await send(http, platform, text="next", chat=2))[0] == 200  # only that one
        platform.release()
    assert answers[0][0] == 200 and platform.stalled == []


# -- rate windows -----------------------------------------------------------------------------


async def test_rate_windows_answer_429_and_count_the_throttled(platform, http) -> None:
    answers = [await send(http, platform, text=str(n), chat=1) for n in range(3)]
    assert [status for status, _, _ in answers] == [200, 200, 429]
    status, body, headers = answers[2]
    assert 1 <= int(headers["Retry-After"]) <= 60 and body["retry_after"] >= 1
    assert platform.throttled == 1 and platform.sent_messages == ["0", "1"]
    assert (await send(http, platform, text="other chat", chat=2))[0] == 200  # per key


def test_rate_windows_roll_rather_than_reset() -> None:
    now = [0.0]
    windows = RateWindows(clock=lambda: now[0])
    rule = [("chat", 2, 10.0)]

    def at(t: float) -> float:
        now[0] = t
        return windows.admit(rule)

    assert at(0) == 0 and at(1) == 0
    assert at(2) == pytest.approx(8.0)       # full until the hit at 0 leaves the window
    assert at(10) == 0                         # it left: one slot
    assert at(10.5) == pytest.approx(0.5)    # the hit at 1 still counts: no new burst
    assert windows.throttled == 2
    windows.reset()
    assert at(10.6) == 0


# -- long polls and shutdown ------------------------------------------------------------------


async def test_a_long_poll_answers_when_something_arrives(platform, http) -> None:
    answers: list[Any] = []

    async def poll() -> None:
        async with http.get(f"{platform.base_url}/poll", params={"timeout": "30"}) as r:
            answers.append(await r.json())

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(poll)
            await wait_until(lambda: platform.holding == 1, what="the poll held")
            platform.deliver("hi")
    assert answers == [{"messages": ["hi"]}]


async def test_exit_answers_long_polls_at_once_and_cancels_background_work(http) -> None:
    answers: list[Any] = []
    cancelled = anyio.Event()

    async def background() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    async def poll(url: str) -> None:
        async with http.get(f"{url}/poll", params={"timeout": "60"}) as r:
            answers.append(await r.json())

    platform = TinyPlatform()
    assert platform.start_soon(background) is False  # not running yet
    with anyio.fail_after(5):  # far below the poll's 60 s
        async with anyio.create_task_group() as tg:
            async with platform:
                assert platform.start_soon(background) is True
                tg.start_soon(poll, platform.base_url)
                await wait_until(lambda: platform.holding == 1, what="the poll held")
    assert answers == [{"messages": []}] and cancelled.is_set()
    assert platform.start_soon(background) is False


# -- webhooks and signers ---------------------------------------------------------------------


async def test_webhook_push_retries_and_records_every_attempt() -> None:
    seen: list[int] = []
    async with Receiver([500, 502]) as receiver, WebhookPusher(delays=(0.01, 0.01, 0.01)) \
            as pusher:
        last = await pusher.push(receiver.url, {"n": 1}, on_attempt=lambda a: seen.append(
            a.attempt), headers=lambda n: {"X-Retry-Num": str(n - 1)} if n > 1 else {})
    assert last is not None and last.ok and last.attempt == 3
    assert [(a.attempt, a.status, a.error) for a in pusher.attempts] == [
        (1, 500, None), (2, 502, None), (3, 200, None)]
    assert pusher.attempts[1].reason == "Bad Gateway" and seen == [1, 2, 3]
    assert [body for body, _ in receiver.requests] == [b'{"n": 1}'] * 3
    assert [h.get("X-Retry-Num") for _, h in receiver.requests] == [None, "1", "2"]


async def test_webhook_push_gives_up_or_stops_when_no_longer_wanted() -> None:
    async with Receiver() as receiver:
        dead_url = receiver.url
    async with WebhookPusher(delays=(0.01,)) as pusher:
        given_up = await pusher.push(dead_url, {"n": 1})
        assert given_up is not None and not given_up.ok and given_up.attempt == 2
        assert given_up.status is None and given_up.error.startswith("Connection failed")
        async with Receiver([500, 500]) as receiver:
            stopped = await pusher.push(receiver.url, {"n": 2}, delays=(0.01, 0.01),
                                        wanted=lambda: len(receiver.requests) < 2)
        assert stopped is None and len(receiver.requests) == 2


def stamped_signer(secret: str, clock=time.time) -> HmacSigner:
    return HmacSigner(secret, header="X-Stamped-Signature", prefix="t0=",
                      timestamp_header="X-Stamp",
                      signed=lambda ts, body: b"t0:" + ts.encode() + b":" + body, clock=clock)


async def test_signers_sign_the_exact_bytes_sent() -> None:
    raw = ' {"text":  "h\u00e9llo",\n "n":1}\n'.encode()  # not how json.dumps writes it
    signers = [SecretTokenSigner("Abc_123-xyz"), stamped_signer("stamp-secret"),
               HmacSigner("body-secret", header="X-Body-Signature", prefix="sha256=")]
    async with Receiver() as receiver, WebhookPusher() as pusher:
        for signer in signers:
            assert (await pusher.push(receiver.url, raw, signer=signer)).ok
        assert (await pusher.push(receiver.url, {"a": "é"}, signer=signers[2])).ok
    (b1, telegram), (b2, stamped), (b3, plain), (b4, plain_json) = receiver.requests
    assert b1 == b2 == b3 == raw
    assert telegram["X-Telegram-Bot-Api-Secret-Token"] == "Abc_123-xyz"
    timestamp = stamped["X-Stamp"]
    expected = hmac.new(b"stamp-secret", b"t0:" + timestamp.encode() + b":" + raw,
                        hashlib.sha256).hexdigest()
    assert stamped["X-Stamped-Signature"] == f"t0={expected}"
    for body, headers in ((raw, plain), (b4, plain_json)):
        expected = hmac.new(b"body-secret", body, hashlib.sha256).hexdigest()
        assert headers["X-Body-Signature"] == f"sha256={expected}"
    assert "secret" not in repr(signers)


def test_the_hmac_signer_matches_a_published_example() -> None:
    # HMAC-SHA256("secret", "test"), as HMAC libraries document it.
    assert HmacSigner("secret", header="X-Sig", prefix="sha256=")(b"test") == {
        "X-Sig": "sha256=0329a06b62cd16b33eb6792be8c60b158d89a2ee3a876fce9a881ebb488c0914"}
    assert stamped_signer("s", clock=lambda: 1531420618)(b"x")["X-Stamp"] == "1531420618"
