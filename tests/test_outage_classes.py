"""Transport failures classified by the kit, for every channel: what the outbox's retry
and outage policy reads from whatever a channel's send lets escape. Real HTTP on
127.0.0.1 where a platform is involved."""

from __future__ import annotations

import asyncio
import socket
from types import SimpleNamespace

import aiohttp
import pytest
from aiohttp import web

from chatkernel import SendError
from chatkernel.builtin.outbound import outbound_send
from chatkernel.core.outbound.retry import is_retryable, never_sent, platform_down
from chatkernel.sdk.http_client import HttpClient, PlatformError, as_send_error
from chatkernel.sdk.models import OutboundPayload, Route
from chatkernel.testing.fakes.faultproxy import FaultProxy

pytestmark = pytest.mark.anyio


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def failure(client: HttpClient, path: str = "send") -> SendError:
    """What one call of ``client`` raised, as the outbox sees it."""
    try:
        answer = await client.request("POST", path, json={"text": "hi"})
        answer.json()  # a body that is no JSON (a load balancer's page) raises here
        if not answer.ok:  # a readable one: the platform's own error answer
            raise PlatformError.from_answer(answer, f"send: HTTP {answer.status}")
    except Exception as exc:  # what a channel that catches nothing lets escape
        error = as_send_error(exc)
        assert error is not None, repr(exc)
        return error
    raise AssertionError(f"no failure: HTTP {answer.status}")


def waited_out(error: SendError) -> bool:
    """Whether the outbox waits the failure out (retries it, or holds the payload)."""
    return is_retryable(error) and (never_sent(error) or platform_down(error))


async def test_a_refused_connection_was_never_sent_and_is_waited_out() -> None:
    client = HttpClient(f"http://127.0.0.1:{free_port()}", platform="the Graph API")
    try:
        error = await failure(client)
    finally:
        await client.close()
    assert isinstance(error, SendError) and isinstance(error, PlatformError)
    assert "cannot connect to the Graph API" in str(error)
    assert never_sent(error) and waited_out(error) and not error.delivery_unknown


@pytest.mark.parametrize("status", [502, 503, 504])
@pytest.mark.parametrize("body", [b"<html><body><h1>Bad Gateway</h1></body></html>", b"",
                                  b'{"error": {"message": "down", "code": 2}}'])
async def test_a_5xx_is_the_platform_down_whatever_its_body(status, body) -> None:
    async with FaultProxy(f"http://127.0.0.1:{free_port()}") as proxy:
        proxy.fail(status, body=body)
        client = HttpClient(proxy.url)
        try:
            error = await failure(client)
        finally:
            await client.close()
    assert error.status == status
    assert platform_down(error) and waited_out(error)
    assert not never_sent(error) and not error.delivery_unknown


async def test_a_connection_reset_after_the_request_is_delivery_unknown() -> None:
    async def reset(request: web.Request) -> web.StreamResponse:
        await request.read()
        assert request.transport is not None
        request.transport.abort()  # the platform took the request, then the line died
        return web.Response()

    app = web.Application()
    app.router.add_post("/send", reset)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = HttpClient(f"http://127.0.0.1:{port}")
    try:
        error = await failure(client)
    finally:
        await client.close()
        await runner.cleanup()
    assert error.delivery_unknown and not is_retryable(error) and not never_sent(error)


async def test_a_timeout_after_the_request_was_written_is_never_repeated_blindly() -> None:
    async with FaultProxy(f"http://127.0.0.1:{free_port()}") as proxy:
        proxy.hold()  # takes the request, answers nothing
        client = HttpClient(proxy.url, timeout=0.3)
        try:
            error = await failure(client)
        finally:
            await client.close()
            proxy.recover()
    assert "no answer within 0.3s" in str(error)
    assert error.delivery_unknown and not is_retryable(error) and not waited_out(error)


@pytest.mark.parametrize("exc, sent", [
    (aiohttp.ConnectionTimeoutError("connect timed out"), False),
    (ConnectionRefusedError(111, "Connection refused"), False),
    (socket.gaierror(-2, "Name or service not known"), False),
    (ConnectionResetError(104, "Connection reset by peer"), True),
    (aiohttp.ServerDisconnectedError(), True),
    (asyncio.TimeoutError(), True),
])
def test_raw_transport_failures_are_classified(exc, sent) -> None:
    error = as_send_error(exc)
    assert error is not None
    if sent:  # it may have arrived: reported as delivery unknown, never repeated
        assert error.delivery_unknown and not is_retryable(error)
    else:  # it cannot have arrived: waited out as an outage
        assert never_sent(error) and waited_out(error)


def test_an_sdk_raise_for_status_is_classified_by_its_status() -> None:
    info = SimpleNamespace(real_url="http://127.0.0.1/x")
    error = as_send_error(aiohttp.ClientResponseError(info, (), status=503, message="down"))
    assert error is not None and error.status == 503 and platform_down(error)
    refused = as_send_error(aiohttp.ClientResponseError(info, (), status=400, message="bad"))
    assert refused is not None and not is_retryable(refused)


def test_what_is_no_transport_failure_stays_what_it_is() -> None:
    assert as_send_error(ValueError("a bug")) is None
    error = SendError("refused", status=400)
    assert as_send_error(error) is error


async def test_the_kits_outbound_send_classifies_what_a_channel_lets_escape() -> None:
    class Careless:
        """A channel's send that catches nothing of its transport."""

        async def send(self, route: Route, payload: OutboundPayload) -> None:
            raise aiohttp.ClientConnectorError(
                SimpleNamespace(host="127.0.0.1", port=1, ssl=None),
                ConnectionRefusedError(111, "Connection refused"))

    account = SimpleNamespace(channel=Careless(), channel_name="careless", key="careless:main")
    payload = OutboundPayload(text="hi")
    with pytest.raises(SendError) as raised:
        await outbound_send(account, Route("careless", "main", "c1"), payload)
    assert never_sent(raised.value) and waited_out(raised.value)
    assert "cannot connect to the careless platform" in str(raised.value)
