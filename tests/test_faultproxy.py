"""The kit's FaultProxy answers a chosen status, holds requests, and recovers."""

from __future__ import annotations

import socket

import aiohttp
import anyio
import pytest
from aiohttp import web

from chatkernel.testing.contract import wait_until
from chatkernel.testing.fakes.faultproxy import FaultProxy

pytestmark = pytest.mark.anyio


async def test_fail_answers_the_status_hold_answers_nothing_and_recover_forwards():
    seen: list[str] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append(await request.text())
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/call", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    listener = socket.create_server(("127.0.0.1", 0))
    await web.SockSite(runner, listener).start()
    target = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        async with FaultProxy(target) as proxy, aiohttp.ClientSession() as http:
            async def call(body: str) -> tuple[int, str, str | None]:
                async with http.post(f"{proxy.url}/call", data=body) as answer:
                    return answer.status, await answer.text(), answer.headers.get("Retry-After")

            proxy.fail(503, headers={"Retry-After": "7"})
            status, text, retry_after = await call("one")
            assert (status, retry_after) == (503, "7") and "503 Service Unavailable" in text
            assert seen == [] and proxy.failed == 1  # not forwarded
            proxy.recover()
            proxy.hold()
            async with anyio.create_task_group() as tg:
                answers: list[int] = []

                async def held() -> None:
                    answers.append((await call("two"))[0])

                tg.start_soon(held)
                await wait_until(lambda: proxy.held >= 1, timeout=5, what="the call held",
                                 interval=0.01)
                assert answers == [] and seen == []  # taken, not answered
                proxy.recover()
            assert answers == [200] and seen == ["two"] and proxy.held == 0
            assert (await call("three"))[0] == 200 and seen == ["two", "three"]
    finally:
        await runner.cleanup()


async def test_a_connection_the_target_drops_is_dropped_not_answered_502():
    """A platform that took a request and lost its answer: the client sees the drop it
    would see without the proxy, never a 502 that invites it to send again."""
    seen: list[str] = []

    async def lose_the_answer(request: web.Request) -> web.Response:
        seen.append(await request.text())
        request.transport.close()  # the effect happened; no answer goes back
        return web.Response()

    app = web.Application()
    app.router.add_post("/call", lose_the_answer)
    runner = web.AppRunner(app)
    await runner.setup()
    listener = socket.create_server(("127.0.0.1", 0))
    await web.SockSite(runner, listener).start()
    target = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        async with FaultProxy(target) as proxy, aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.ServerDisconnectedError):
                async with http.post(f"{proxy.url}/call", data="once") as answer:
                    await answer.read()
            assert seen == ["once"] and proxy.forwarded == 0
    finally:
        await runner.cleanup()
