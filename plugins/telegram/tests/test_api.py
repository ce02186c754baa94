"""The Bot API client's connections: a long poll never waits behind sends."""

from __future__ import annotations

import anyio
import pytest
from aiohttp import web

from chatkernel.testing import serve_routes, wait_until
from chatkernel_telegram.api import BotAPI

pytestmark = pytest.mark.anyio


async def test_a_long_poll_gets_through_while_the_send_pool_is_full():
    release = anyio.Event()
    held = 0

    async def handle(request: web.Request) -> web.Response:
        nonlocal held
        if request.match_info["method"] == "sendMessage":
            held += 1
            await release.wait()  # every send connection stays busy
            return web.json_response({"ok": True, "result": {"message_id": held}})
        return web.json_response({"ok": True, "result": []})

    async with serve_routes(web.post("/bot{token}/{method}", handle)) as base:
        api = BotAPI("1:TOKEN", base)
        try:
            async with anyio.create_task_group() as tg:
                for chat in range(100):  # the whole send pool
                    tg.start_soon(api.call, "sendMessage", {"chat_id": chat, "text": "x"})
                try:
                    await wait_until(lambda: held >= 100, timeout=10,
                                     what="every send connection busy", state=lambda: held)
                    with anyio.fail_after(10):
                        # With one pool for everything this would wait for a send to finish.
                        assert await api.call("getUpdates", {"timeout": 0}) == []
                finally:
                    release.set()
        finally:
            await api.close()
