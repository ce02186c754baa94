"""Configuring one thing does not switch another off: the web chat keeps its default
account unless the config gives it accounts or turns it off, and when it is off, ``/``
says so (a page, never a bare 404)."""

from __future__ import annotations

import aiohttp
import anyio
import pytest

from chatkernel.core import config as cfg
from chatkernel.core.kernel import Kernel
from chatkernel.core.plugins import config_view
from chatkernel.testing.contract import wait_until
from chatkernel.testing.gateway import start_gateway
from chatkernel.webchat.landing import webchat_off

#: A Telegram account whose API is a closed port on this machine: its receive loop fails
#: and backs off, which is all these tests need of it.
TELEGRAM = {"telegram": {"accounts": {"main": {"bot_token": "123456:test-token-abc",
                                               "api_base": "http://127.0.0.1:9",
                                               "allow_from": ["42"]}}}}


async def chat_round_trip(http, base, text, parts=1):
    """Post ``text`` to the web chat and return the bot's messages once it answered in
    ``parts`` messages (a chunked answer)."""
    body = {"chat_id": "c1", "user_id": "u1", "text": text}
    async with http.post(f"{base}/webchat/messages", json=body) as response:
        assert response.status == 202, await response.text()
    bots: list[dict] = []

    async def answered() -> bool:
        nonlocal bots
        async with http.get(f"{base}/webchat/messages", params={"chat_id": "c1"}) as r:
            bots = [m for m in (await r.json())["messages"] if m["role"] == "bot"]
        return len(bots) >= parts

    await wait_until(answered, what=f"an answer in {parts} part(s)", state=lambda: bots)
    return bots


def check(data, listen="127.0.0.1:8787"):
    """The accounts a gateway on ``listen`` would run for ``data``, without starting one."""
    config = cfg.parse({"gateway": {"listen": listen, "control_token": "t" * 32}, **data})
    kernel = Kernel(config)
    kernel.check()
    return sorted(kernel.accounts), config, kernel


@pytest.mark.anyio
async def test_a_channel_setting_alone_keeps_the_web_chat_and_applies(tmp_path):
    async with anyio.create_task_group() as tg:
        base, stop = await start_gateway(tg, tmp_path,
                                         {"channels": {"webchat": {"text_limit": 1000}}})
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/") as r:
                assert r.status == 200
                page = await r.text()
            assert "The web chat is off" not in page and "chatkernel" in page
            answer = await chat_round_trip(http, base, "x" * 2500, parts=3)
            assert [len(m["text"]) for m in answer] == [1000, 1000, 500]  # its text_limit
        stop.set()


@pytest.mark.anyio
async def test_configuring_telegram_only_keeps_the_web_chat(tmp_path):
    pytest.importorskip("chatkernel_telegram")
    async with anyio.create_task_group() as tg:
        base, stop = await start_gateway(tg, tmp_path, {"channels": TELEGRAM})
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/") as r:
                assert r.status == 200 and "The web chat is off" not in await r.text()
            assert [m["text"] for m in await chat_round_trip(http, base, "hello")] == ["hello"]
        stop.set()


@pytest.mark.anyio
async def test_when_the_web_chat_is_off_the_root_is_a_landing_page(tmp_path):
    async with anyio.create_task_group() as tg:
        base, stop = await start_gateway(tg, tmp_path,
                                         {"channels": {"webchat": {"enabled": False}}})
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/") as r:
                assert r.status == 200
                assert r.content_type == "text/html"
                page = await r.text()
            assert "The web chat is off" in page
            assert "[channels.webchat] has enabled = false" in page
            assert "remove that line (or set enabled = true)" in page
            assert '<a href="/status">/status</a>' in page
            async with http.get(base + "/status") as r:
                assert r.status == 200  # the link works
            body = {"chat_id": "c1", "user_id": "u1", "text": "anyone?"}
            async with http.post(f"{base}/webchat/messages", json=body) as r:
                assert r.status == 404  # no web chat account: nothing takes the message
        stop.set()


def test_accounts_of_its_own_replace_the_default_one():
    accounts, _, _ = check({"channels": {"webchat": {"accounts": {"support": {}}}}})
    assert accounts == ["webchat:support"]


def test_telegram_only_runs_the_web_chat_beside_it():
    pytest.importorskip("chatkernel_telegram")
    accounts, _, _ = check({"channels": TELEGRAM})
    assert accounts == ["telegram:main", "webchat:default"]


def test_beyond_this_machine_the_web_chat_needs_its_table():
    accounts, config, kernel = check({}, listen="0.0.0.0:8787")
    assert accounts == []  # it admits everyone: not served to the world unasked
    why, how = webchat_off(config_view(config), kernel.channel_types)
    assert "listens on 0.0.0.0:8787, beyond this machine" in why
    assert "add a [channels.webchat] table" in how
    accounts, _, _ = check({"channels": {"webchat": {}}}, listen="0.0.0.0:8787")
    assert accounts == ["webchat:default"]


@pytest.mark.parametrize(("data", "why"), [
    ({"webchat": {"enabled": False}}, "[channels.webchat] has enabled = false"),
    ({"webchat": {"accounts": {"default": {"enabled": False}}}},
     "[channels.webchat.accounts.default] has enabled = false"),
    ({"webchat": {"accounts": {"support": {}, "sales": {}}}},
     "accounts of its own (sales, support), none named 'default'"),
])
def test_the_landing_page_says_why_the_web_chat_is_off(data, why):
    accounts, config, kernel = check({"channels": data})
    assert "webchat:default" not in accounts
    assert why in webchat_off(config_view(config), kernel.channel_types)[0]

