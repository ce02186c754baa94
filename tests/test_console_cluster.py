"""The console of several gateway processes on one Redis (docs/console.md, "Several
gateways"): two bot accounts of the fake Bot API, one owned by each gateway. The
console of either shows both with their owner's health, and its actions on the other's
account are done by the owner: a failed send retried goes out once, a pairing approved
lets the stranger in. Gateways with different control tokens say why they cannot show
each other's accounts."""

from __future__ import annotations

import aiohttp
import anyio
import pytest

from chatkernel.console.api import TOKEN_REFUSED
from chatkernel.core.inbound.access import APPROVED_TEXT
from chatkernel.testing import GatewayInstances, RedisStore
from chatkernel_telegram.fake import FakeBotAPI

pytestmark = pytest.mark.anyio

LEASE_SECONDS = 2.0
TOKEN = "console-cluster-token-0a1b2c3d4e5f"
OTHER_TOKEN = "console-cluster-other-token-9f8e7d6c"
SECOND_BOT = "222222222:BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
FRIEND = 777


def cluster_config(api: FakeBotAPI, redis_url: str, prefix: str, token: str) -> dict:
    account = {"api_base": api.base_url, "allow_from": [str(FRIEND)], "poll_timeout": 1}
    return {
        "gateway": {"control_token": token},
        "store": {"backend": "redis", "url": redis_url, "prefix": prefix,
                  "lease_seconds": LEASE_SECONDS},
        "agent": {"kind": "echo"},
        "queue": {"mode": "followup", "debounce_ms": 0},
        "heartbeat": {"every": "0"},
        "channels": {"webchat": {"enabled": False}, "telegram": {"accounts": {
            "a": {"bot_token": api.token, **account},
            "b": {"bot_token": SECOND_BOT, **account}}}},
    }


async def owners(store: RedisStore, timeout: float) -> dict[str, str]:
    """``{account key: holder}`` once each account has an owner of its own (the first
    instance takes both, and hands one over to the second as it comes)."""
    with anyio.fail_after(timeout):
        while True:
            leases = await store.leases()
            held = {key: leases[f"account:{key}"][0] for key in ("telegram:a", "telegram:b")
                    if f"account:{key}" in leases}
            if len(held) == 2 and len(set(held.values())) == 2:
                return held
            await anyio.sleep(0.1)  # real time: reads the store real processes write


class Console:
    """The console's API of one gateway, as its page calls it."""

    def __init__(self, http: aiohttp.ClientSession, url: str, token: str) -> None:
        self.http, self.url, self.token = http, url, token

    async def get(self, path: str) -> tuple[int, dict]:
        async with self.http.get(self.url + path, headers={
                "Authorization": f"Bearer {self.token}"}) as answer:
            return answer.status, await answer.json()

    async def post(self, path: str, body: dict) -> tuple[int, dict]:
        async with self.http.post(self.url + path, json=body, headers={
                "Authorization": f"Bearer {self.token}", "Origin": self.url}) as answer:
            return answer.status, await answer.json()

    async def accounts(self) -> dict[str, dict]:
        status, overview = await self.get("/api/overview")
        assert status == 200, overview
        return {account["key"]: account for account in overview["accounts"]}

    async def own_instance(self) -> str:
        return (await self.get("/api/overview?local=1"))[1]["gateway"]["instance"]


async def until(condition, timeout: float):
    """``await condition()`` once it is true; real processes change it."""
    with anyio.fail_after(timeout):
        while not (found := await condition()):
            await anyio.sleep(0.1)  # real time: polls real processes
        return found


@pytest.mark.slow
async def test_the_console_of_either_gateway_shows_and_acts_on_every_account(
        tmp_path, redis_server, redis_prefix):
    async with FakeBotAPI(strict_chats=True) as api, \
            RedisStore(url=redis_server, prefix=redis_prefix) as store, \
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        api.add_bot(SECOND_BOT, "second_bot")
        config = cluster_config(api, redis_server, redis_prefix, "${CONSOLE_TOKEN}")
        async with GatewayInstances(tmp_path, config,
                                    env={"CONSOLE_TOKEN": TOKEN}) as instances:
            for _ in range(2):
                await instances.start()
            held = await owners(store, timeout=LEASE_SECONDS * 8)
            owner_of = {key: instances.owner(holder) for key, holder in held.items()}
            consoles = {i.name: Console(http, i.url, TOKEN) for i in instances.instances}
            instance_of = {key: await consoles[gateway.name].own_instance()
                           for key, gateway in owner_of.items()}
            assert len(set(instance_of.values())) == 2
            b_owner = owner_of["telegram:b"]
            a_console = consoles[owner_of["telegram:a"].name]  # not telegram:b's owner

            # Either console: both accounts, green, as their owner sees them.
            for console in consoles.values():
                async def both_green(console=console):
                    accounts = await console.accounts()
                    return accounts if all(
                        accounts[key]["health"] == "ok" for key in held) else None

                accounts = await until(both_green, timeout=20)
                for key in held:
                    assert accounts[key]["state"] != "elsewhere", accounts[key]
                    assert accounts[key]["instance"] == instance_of[key]

            # A send of telegram:b fails (the chat is not known to the platform yet)...
            async with http.post(f"{b_owner.url}/control/send", json={
                    "channel": "telegram", "account": "b", "to": str(FRIEND),
                    "text": "the reply that failed overnight", "wait": 10},
                    headers={"Authorization": f"Bearer {TOKEN}"}) as response:
                answer = await response.json()
            assert answer["outcome"] == "failed", answer
            status, listed = await a_console.get("/api/deliveries")
            assert status == 200
            (failed,) = [f for f in listed["failed"] if f["account"] == "telegram:b"]
            assert "chat not found" in failed["reason"]

            # ...and retried through the other gateway's console once the chat exists,
            # goes out once, sent by the owner.
            api.inject_message(FRIEND, "I am here", token=SECOND_BOT)
            await api.wait_for_sent(1, token=SECOND_BOT, timeout=20)  # the echo
            status, retried = await a_console.post("/api/deliveries/retry",
                                                   {"id": failed["id"]})
            assert status == 200, retried
            assert retried["account"] == "telegram:b"
            await api.wait_for_sent(2, token=SECOND_BOT, timeout=20)

            async def settled():
                entries = await store.outbox_reply(retried["reply_id"])
                return entries if entries and all(e.status == "sent" for e in entries) \
                    else None

            await until(settled, timeout=10)
            status, _ = await consoles[b_owner.name].post("/api/deliveries/retry",
                                                          {"id": failed["id"]})
            assert status == 404  # taken once: a second retry, anywhere, finds nothing
            assert [m.plain_text for m in api.sent(SECOND_BOT, chat_id=FRIEND)] == [
                "I am here", "the reply that failed overnight"]

            # A message written into the chat from the other gateway's console.
            status, answer = await a_console.post("/api/sessions/send", {
                "session": f"telegram:b:{FRIEND}", "text": "hello from the console"})
            assert (status, answer["outcome"]) == (200, "sent"), answer
            assert [m.plain_text for m in api.sent(SECOND_BOT, chat_id=FRIEND)][2:] == [
                "hello from the console"]

            # A stranger asks telegram:b in; the other gateway's console approves them.
            api.inject_message(555, "let me in", token=SECOND_BOT)

            async def requested():
                _, pairing = await a_console.get("/api/pairing")
                return [r for r in pairing["requests"] if r["account"] == "b"]

            (request,) = await until(requested, timeout=20)
            status, approved = await a_console.post("/api/pairing/approve", {
                "channel": "telegram", "code": request["code"], "account": "b"})
            assert status == 200, approved
            assert approved["notice"] == "sent"
            api.inject_message(555, "hello bot", token=SECOND_BOT)
            await api.wait_for_sent(6, token=SECOND_BOT, timeout=20)
    to_stranger = [m.plain_text for m in api.sent(SECOND_BOT, chat_id=555)]
    assert request["code"] in to_stranger[0]
    assert to_stranger[1:] == [APPROVED_TEXT, "hello bot"]  # the echo agent answers them now


@pytest.mark.slow
async def test_gateways_with_different_tokens_say_so_in_each_others_rows(
        tmp_path, redis_server, redis_prefix):
    async with FakeBotAPI() as api, \
            RedisStore(url=redis_server, prefix=redis_prefix) as store, \
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        api.add_bot(SECOND_BOT, "second_bot")
        tokens = (TOKEN, OTHER_TOKEN)
        async with GatewayInstances(tmp_path, {}) as instances:
            for token in tokens:
                await instances.start(config=cluster_config(
                    api, redis_server, redis_prefix, token))
            held = await owners(store, timeout=LEASE_SECONDS * 8)
            for gateway, token in zip(instances.instances, tokens):
                console = Console(http, gateway.url, token)
                (theirs,) = [key for key, holder in held.items()
                             if instances.owner(holder) is not gateway]

                async def asked(console=console, theirs=theirs):
                    # (each instance says what it owns as it renews its leases)
                    accounts = await console.accounts()
                    return accounts if "peer" in accounts[theirs] else None

                accounts = await until(asked, timeout=LEASE_SECONDS * 4)
                row = accounts[theirs]
                assert (row["state"], row["peer"]) == ("elsewhere", "refused"), row
                assert row["detail"] == f"owned by {held[theirs]}; {TOKEN_REFUSED}"
                (ours,) = set(held) - {theirs}
                assert accounts[ours]["health"] in ("ok", "warn")
                assert "peer" not in accounts[ours]
                assert OTHER_TOKEN not in str(accounts) and TOKEN not in str(accounts)


async def test_an_instance_that_refused_the_token_is_not_asked_again_for_a_while(
        tmp_path, monkeypatch):
    """Each ask with a wrong token is a wrong guess to the instance asked: asked every
    few seconds it would lock this gateway's address out of its console (operators at
    that address too). A refusal is believed until the instance starts again."""
    import types

    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from chatkernel.console import api as console_api
    from chatkernel.testing.memory import KernelHarness

    asked: list[str] = []

    async def refuse(request: web.Request) -> web.Response:
        asked.append(request.headers["Authorization"])
        return web.json_response({"error": "missing or wrong token"}, status=401)

    now = [1000.0]
    monkeypatch.setattr(console_api, "time", types.SimpleNamespace(
        monotonic=lambda: now[0], time=console_api.time.time))
    peer = web.Application()
    peer.router.add_get("/api/overview", refuse)
    async with KernelHarness(tmp_path) as h, TestServer(peer, host="127.0.0.1") as server:
        console = console_api.Console(h.kernel, TOKEN)
        url = str(server.make_url("")).rstrip("/")
        for _ in range(10):  # as a page polling the overview would
            assert await console._peer_accounts("gateway-b/41/x", url) == ([], TOKEN_REFUSED)
            now[0] += console_api.PEER_SECONDS
        assert asked == [f"Bearer {TOKEN}"]
        await console._peer_accounts("gateway-b/42/y", url)  # started again: asked
        assert len(asked) == 2
        now[0] += console_api.REFUSED_SECONDS
        await console._peer_accounts("gateway-b/41/x", url)
        assert len(asked) == 3
