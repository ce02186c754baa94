"""The dev server's developer routes: write as a user, read what the business sent."""

from __future__ import annotations

import aiohttp
import pytest

from chatkernel_whatsapp.api import GraphAPI
from chatkernel_whatsapp.fake import FakeGraph

pytestmark = pytest.mark.anyio


async def test_developer_routes_inject_and_list(tmp_path):
    async with FakeGraph(extra_routes=FakeGraph.developer_routes) as graph, \
            aiohttp.ClientSession() as http:
        base = graph.base_url
        async with http.post(f"{base}/_fake/messages", json={"from": "15551234567",
                                                              "text": "hello"}) as answer:
            assert answer.status == 200 and len((await answer.json())["ids"]) == 1
        async with http.post(f"{base}/_fake/messages", json={"text": "no sender"}) as answer:
            assert answer.status == 400 and "expected" in (await answer.json())["error"]
        assert graph.notifications and graph.window_open("15551234567")
        client = GraphAPI(graph.token, graph.phone_number_id, base)
        await client.send_message("15551234567", "text", {"body": "hi back"})
        await client.close()
        async with http.get(f"{base}/_fake/sent", params={"to": "15551234567"}) as answer:
            (sent,) = (await answer.json())["messages"]
            assert (sent["type"], sent["text"]) == ("text", "hi back")
        async with http.post(f"{base}/_fake/close-window", json={"to": "15551234567"}):
            assert not graph.window_open("15551234567")
        async with http.post(f"{base}/_fake/subscribe",
                             json={"url": f"{base}/nowhere"}) as answer:
            assert (await answer.json()) == {"passed": False}
