"""Access on the web chat (docs/access.md): its page admits everyone who reaches it
(``dm_policy = "open"`` by default), a config listing its own ``allow_from`` keeps
admitting exactly those, and under ``"pairing"`` a stranger on the page gets a code and
never reaches the agent."""

from __future__ import annotations

import aiohttp
import anyio
import pytest

from chatkernel.core.inbound.access import dm_policy_of
from chatkernel.testing.contract import wait_until
from chatkernel.testing.gateway import start_gateway
from chatkernel.webchat.channel import WebChatAccount

pytestmark = pytest.mark.anyio


def test_the_web_chat_admits_everyone_unless_its_config_lists_who():
    assert dm_policy_of(WebChatAccount()) == "open"
    assert dm_policy_of(WebChatAccount(allow_from=["u1"])) == "allowlist"
    assert dm_policy_of(WebChatAccount(allow_from=["*"])) == "open"
    assert dm_policy_of(WebChatAccount(allow_from=["u1"], dm_policy="pairing")) == "pairing"


async def bot_messages(http, base, chat):
    async with http.get(f"{base}/webchat/messages", params={"chat_id": chat}) as r:
        return [m["text"] for m in (await r.json())["messages"] if m["role"] == "bot"]


async def test_a_stranger_on_the_page_gets_a_code_under_pairing(tmp_path):
    config = {"agent": {"kind": "echo"},
              "channels": {"webchat": {"accounts": {"default": {"dm_policy": "pairing",
                                                                "allow_from": ["owner"]}}}}}
    async with anyio.create_task_group() as tg:
        base, stop = await start_gateway(tg, tmp_path, config)
        async with aiohttp.ClientSession() as http:
            for user, chat in (("stranger", "c1"), ("owner", "c2")):
                body = {"chat_id": chat, "user_id": user, "text": f"hello from {user}"}
                async with http.post(f"{base}/webchat/messages", json=body) as response:
                    assert response.status == 202, await response.text()
            seen: dict[str, list[str]] = {}

            async def both_answered() -> bool:
                for chat in ("c1", "c2"):
                    seen[chat] = await bot_messages(http, base, chat)
                return all(seen.values())

            await wait_until(both_answered, what="a code and an answer", state=lambda: seen)
            (code_text,) = seen["c1"]
            assert "pairing approve webchat" in code_text
            assert "hello from stranger" not in code_text  # the echo agent never saw it
            assert any("hello from owner" in text for text in seen["c2"])
        stop.set()
