"""The channel kit's socket supervision against a real websocket server on 127.0.0.1:
reconnecting when the socket closes, liveness from real traffic (an open but silent
socket is seen, reported and replaced), failures classified like a failed poll."""

from __future__ import annotations

from typing import Any

import aiohttp
import anyio
import pytest
from aiohttp import web

from chatkernel.channels import (
    Channel,
    ChannelLimits,
    InboundMessage,
    PlatformError,
    Socket,
    hookimpl,
)
from chatkernel.testing import KernelHarness
from chatkernel.testing.contract import wait_until

pytestmark = pytest.mark.anyio


class SocketServer:
    """Each connection gets the next script: frames to send, then "close", "silent"
    (say nothing, keep the socket open) or "hello-then-silent"."""

    def __init__(self) -> None:
        self.scripts: list[list[Any]] = []
        self.connections = 0
        self.refuse_with: int | None = None
        self.url = ""

    async def __aenter__(self) -> "SocketServer":
        app = web.Application()
        app.router.add_get("/socket", self.socket)
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/socket"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()

    async def socket(self, request: web.Request) -> web.StreamResponse:
        self.connections += 1
        if self.refuse_with is not None:
            return web.Response(status=self.refuse_with)
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        script = self.scripts.pop(0) if self.scripts else ["silent"]
        for step in script:
            if step == "close":
                await ws.close()
                return ws
            if step == "silent":
                await anyio.sleep(30)  # real time: a socket that goes quiet (bounded)
                return ws
            await ws.send_json(step)
        await anyio.sleep(30)  # real time: held open until the client leaves (bounded)
        return ws


class SocketChannel(Channel):
    name = "socketed"
    limits = ChannelLimits()
    url = ""

    def transport(self) -> "TestSocket":
        return TestSocket(self)

    async def normalize(self, event: dict[str, Any]) -> InboundMessage:
        return InboundMessage(channel=self.name, account=self.account.name, chat_id="c1",
                              message_id=event["id"], sender_id="u1", text=event["text"])


class TestSocket(Socket):
    __test__ = False  # not a test class
    backoff = (0.01, 0.05)
    silent_after = 0.3

    async def session(self, link) -> None:
        async with aiohttp.ClientSession() as http:
            try:
                ws = await http.ws_connect(self.channel.url)
            except aiohttp.WSServerHandshakeError as exc:
                raise PlatformError(f"connect: HTTP {exc.status}", status=exc.status) from None
            async for frame in ws:
                data = frame.json()
                if data.get("type") == "event":
                    await link.deliver([data])
                else:
                    link.alive()


class Plugin:
    @staticmethod
    @hookimpl
    def register_channels(register):
        register(SocketChannel)


class Journal:
    def __init__(self, receiver) -> None:
        self.receiver = receiver
        self.texts: list[str] = []

    async def __call__(self, message):
        return (await self.many([message]))[0]

    async def many(self, messages):
        outcomes = await self.receiver.many(messages)
        self.texts += [m.text for m in messages]
        return outcomes


async def until(predicate, what: str, timeout: float = 5.0) -> None:
    await wait_until(predicate, timeout=timeout, what=what, interval=0.005)


@pytest.fixture
async def socketed(tmp_path):
    config = {"channels": {"socketed": {"accounts": {"main": {"allow_from": ["*"]}}}}}
    async with SocketServer() as server, KernelHarness(
            tmp_path, config=config, plugins=[("socketed", Plugin)]) as h:
        channel = h.kernel.accounts["socketed:main"].channel
        channel.url = server.url
        journal = Journal(h.kernel.receiver)
        async with anyio.create_task_group() as tg:
            yield server, channel, journal, tg
            tg.cancel_scope.cancel()


def event(n: int) -> dict[str, Any]:
    return {"type": "event", "id": f"e{n}", "text": f"event {n}"}


@pytest.mark.slow
async def test_a_closed_socket_is_opened_again_and_nothing_is_missed(socketed):
    server, channel, journal, tg = socketed
    server.scripts = [[{"type": "hello"}, event(1), "close"], [{"type": "hello"}, event(2)]]
    tg.start_soon(channel.account.transport.run, journal)
    await until(lambda: journal.texts == ["event 1", "event 2"], "both events")
    assert server.connections == 2
    assert channel.account.runtime.problem is None


@pytest.mark.slow
async def test_an_open_but_silent_socket_is_seen_reported_and_replaced(socketed):
    server, channel, journal, tg = socketed
    runtime = channel.account.runtime
    server.scripts = [[{"type": "hello"}, "silent"], ["silent"], [{"type": "hello"}, event(3)]]
    tg.start_soon(channel.account.transport.run, journal)
    await until(lambda: runtime.problem is not None, "the silence reported")
    assert "open but silent for 0.3s" in runtime.problem and runtime.problem_restartable
    await until(lambda: journal.texts == ["event 3"], "the event after reconnecting")
    assert server.connections == 3
    assert runtime.problem is None  # real traffic cleared it


async def test_a_refused_connection_is_classified_like_a_failed_poll(socketed):
    server, channel, journal, tg = socketed
    runtime = channel.account.runtime
    server.refuse_with = 403
    tg.start_soon(channel.account.transport.run, journal)
    # The default trouble: rejected credentials, which a restart cannot fix.
    await until(lambda: runtime.problem is not None, "the refusal reported")
    assert runtime.problem.startswith("the platform refused the account's credentials "
                                      "(HTTP 403): set working credentials in channels.")
    assert runtime.problem_restartable is False and runtime.state == "failed"


@pytest.mark.slow
async def test_a_server_that_cannot_be_reached_is_retried_with_backoff(socketed):
    server, channel, journal, tg = socketed
    runtime = channel.account.runtime
    channel.url = "http://127.0.0.1:9/socket"  # the discard port: nobody listens
    tg.start_soon(channel.account.transport.run, journal)
    await until(lambda: runtime.problem is not None, "repeated failures reported")
    assert runtime.problem.startswith("the socket failed: connect: cannot connect to the platform")
    channel.url = server.url
    server.scripts = [[{"type": "hello"}, event(4)]]
    await until(lambda: journal.texts == ["event 4"], "the event once it connects")
    assert runtime.problem is None
