"""The console's API (chatkernel.console): the token, Origin, the live stream's tickets,
failed sends retried once, and no answer holding a secret."""

from __future__ import annotations

import ast
import logging
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from chatkernel.console.auth import FREE_FAILURES, MAX_CLIENTS, Gate
from chatkernel.core.gateway.process import build_app
from chatkernel.sdk.models import SendError
from chatkernel.testing.memory import KernelHarness

pytestmark = pytest.mark.anyio

TOKEN = "console-test-token-0123456789abcdef"
SECRET = "sk-console-secret-9f8e7d6c5b4a"
CONFIG = {"agent": {"kind": "echo", "env": {"UPSTREAM_API_KEY": SECRET}},
          "channels": {"memory": {"accounts": {"main": {"allow_from": ["*"]}}}}}
ROOT = Path(__file__).resolve().parents[1]

GETS = ["/api/overview", "/api/sessions", "/api/sessions/log?key=memory:main:chat-1",
        "/api/pairing", "/api/deliveries", "/api/logins", "/api/config", "/api/logs"]
POSTS = ["/api/sessions/send", "/api/sessions/policy", "/api/pairing/approve",
         "/api/pairing/deny", "/api/pairing/revoke", "/api/deliveries/retry",
         "/api/deliveries/discard", "/api/logins/start", "/api/logins/cancel",
         "/api/events/ticket"]


@asynccontextmanager
async def served(tmp_path):
    async with KernelHarness(tmp_path, config=CONFIG) as h:
        app = build_app(h.kernel, TOKEN)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            yield h, client


def auth(token=TOKEN):
    return {"Authorization": f"Bearer {token}"}


async def test_every_api_route_answers_401_without_the_token(tmp_path):
    async with served(tmp_path) as (h, client):
        for path in GETS:
            response = await client.get(path)
            assert response.status == 401, path
            assert response.headers["WWW-Authenticate"] == "Bearer"
        for path in POSTS:
            assert (await client.post(path, json={})).status == 401, path
        # A wrong token, and the token in a query string, count for nothing.
        assert (await client.get("/api/overview", headers=auth("nope"))).status == 401
        assert (await client.get(f"/api/overview?token={TOKEN}")).status == 401
        assert (await client.get("/api/overview", headers=auth())).status == 200


async def test_wrong_tokens_are_slowed_down_per_address(tmp_path):
    async with served(tmp_path) as (h, client):
        for _ in range(FREE_FAILURES + 1):
            assert (await client.get("/api/overview", headers=auth("guess"))).status == 401
        # Locked for a while: the right token waits too, or guessing would go on.
        locked = await client.get("/api/overview", headers=auth())
        assert locked.status == 429 and int(locked.headers["Retry-After"]) >= 1


def test_the_gate_locks_longer_each_time_and_forgets_what_is_old():
    now = [0.0]
    gate = Gate(TOKEN, clock=lambda: now[0])
    right = f"Bearer {TOKEN}"
    for _ in range(FREE_FAILURES):
        assert gate.check("Bearer x", "10.0.0.1").status == 401
    assert gate.check(right, "10.0.0.1").ok  # a right token clears the count
    for _ in range(FREE_FAILURES + 1):
        gate.check("Bearer x", "10.0.0.1")
    assert gate.check(right, "10.0.0.1").retry_after == 1.0
    now[0] += 1.1
    assert gate.check("Bearer x", "10.0.0.1").status == 401  # one more: twice as long
    verdict = gate.check(right, "10.0.0.1")
    assert verdict.status == 429 and verdict.retry_after == 2.0
    assert gate.check(right, "10.0.0.2").ok  # another address is not held up
    now[0] += 2.1
    assert gate.check(right, "10.0.0.1").ok
    for number in range(MAX_CLIENTS + 100):
        gate.check("Bearer x", f"10.1.{number // 256}.{number % 256}")
    assert len(gate._clients) <= MAX_CLIENTS


def test_a_ticket_opens_one_stream_within_its_minute():
    now = [0.0]
    gate = Gate(TOKEN, clock=lambda: now[0])
    ticket = gate.ticket()
    assert gate.use_ticket(ticket) and not gate.use_ticket(ticket)
    late = gate.ticket()
    now[0] += 61
    assert not gate.use_ticket(late) and not gate.use_ticket(None)


async def test_a_state_changing_call_from_another_site_is_refused(tmp_path):
    async with served(tmp_path) as (h, client):
        foreign = await client.post("/api/deliveries/retry", json={"id": 1},
                                    headers={**auth(), "Origin": "http://evil.example"})
        assert foreign.status == 403
        host = f"http://127.0.0.1:{client.port}"
        own = await client.post("/api/deliveries/retry", json={"id": 1},
                                headers={**auth(), "Origin": host})
        assert own.status == 404  # through: no failed send 1
        text = await client.post("/api/deliveries/retry", data="id=1",
                                 headers={**auth(), "Content-Type": "text/plain"})
        assert text.status == 415


async def test_the_live_stream_needs_a_ticket_and_says_hello(tmp_path):
    async with served(tmp_path) as (h, client):
        assert (await client.get("/api/events")).status == 401
        ticket = (await (await client.post("/api/events/ticket", headers=auth())).json())["ticket"]
        assert TOKEN not in ticket
        response = await client.get(f"/api/events?ticket={ticket}")
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/event-stream"
        assert await response.content.readuntil(b"\n\n") == b"retry: 1000\n\n"
        assert (await response.content.readuntil(b"\n\n")).startswith(b"event: hello\n")
        response.close()
        assert (await client.get(f"/api/events?ticket={ticket}")).status == 401  # used up


async def test_a_failed_send_is_listed_retried_once_and_sent_once(tmp_path):
    async with served(tmp_path) as (h, client):
        h.channel.fail_next = [SendError("Bad Request: chat not found", status=400)]
        await h.channel.receive("first question")
        await h.settle()
        listed = await (await client.get("/api/deliveries", headers=auth())).json()
        assert listed["failed_last_hour"] == 1
        [failed] = listed["failed"]
        assert failed["reason"] == "Bad Request: chat not found"
        assert failed["preview"] == "first question" and failed["chat_id"] == "chat-1"
        snapshot = await h.kernel.health.snapshot()
        assert snapshot.failed_sends_last_hour == 1

        retried = await client.post("/api/deliveries/retry", json={"id": failed["id"]},
                                    headers=auth())
        assert retried.status == 200
        await h.settle()
        assert h.channel.texts() == ["first question"]
        again = await client.post("/api/deliveries/retry", json={"id": failed["id"]},
                                  headers=auth())
        assert again.status == 404
        await h.settle()
        assert h.channel.texts() == ["first question"]  # once
        listed = await (await client.get("/api/deliveries", headers=auth())).json()
        assert listed["failed"] == []
        log = await h.session_log("memory:main:chat-1", roles=("notification",))
        assert any(entry.text.startswith("retried: 1 failed part(s)") for entry in log)


async def test_a_discarded_send_is_gone_and_never_sent(tmp_path):
    async with served(tmp_path) as (h, client):
        h.channel.fail_next = [SendError("Forbidden: bot was blocked by the user", status=403)]
        await h.channel.receive("hello")
        await h.settle()
        [failed] = (await (await client.get("/api/deliveries", headers=auth())).json())["failed"]
        answer = await client.post("/api/deliveries/discard", json={"id": failed["id"]},
                                   headers=auth())
        assert (await answer.json())["discarded"] == failed["id"]
        assert (await client.post("/api/deliveries/retry", json={"id": failed["id"]},
                                  headers=auth())).status == 404
        assert h.channel.texts() == []
        bad = await client.post("/api/deliveries/retry", json={"id": "x"}, headers=auth())
        assert bad.status == 400


async def test_a_later_part_held_back_by_a_failed_one_is_retried_with_it(tmp_path):
    async with served(tmp_path) as (h, client):
        store = h.kernel.store
        h.channel.fail_next = [SendError("Bad Request: chat not found", status=400)]
        long = "word " * 1000  # two chunks at the memory channel's 4,000 characters
        await h.channel.receive(long)
        await h.settle()
        failed = (await (await client.get("/api/deliveries", headers=auth())).json())["failed"]
        assert sorted(f["part"] for f in failed) == ["1/2", "2/2"]
        first = next(f for f in failed if f["part"] == "1/2")
        answer = await (await client.post("/api/deliveries/retry", json={"id": first["id"]},
                                          headers=auth())).json()
        assert sorted(answer["retried"]) == sorted(f["id"] for f in failed)
        await h.settle()
        assert len(h.channel.texts()) == 2 and await store.outbox_failed() == []


async def test_sessions_send_and_policy_through_the_api(tmp_path):
    async with served(tmp_path) as (h, client):
        await h.channel.receive("hi")
        await h.settle()
        sessions = (await (await client.get("/api/sessions", headers=auth())).json())["sessions"]
        assert [(s["key"], s["agent"], s["policy"]) for s in sessions] == [
            ("memory:main:chat-1", "default", "inherit")]
        sent = await client.post("/api/sessions/send", headers=auth(),
                                 json={"session": "memory:main:chat-1", "text": "from the console"})
        assert (await sent.json())["outcome"] == "sent"
        assert h.channel.texts()[-1] == "from the console"
        log = await (await client.get("/api/sessions/log?key=memory:main:chat-1",
                                      headers=auth())).json()
        assert [e["text"] for e in log["entries"]][-1] == "from the console"
        policy = await client.post("/api/sessions/policy", headers=auth(),
                                   json={"session": "memory:main:chat-1", "policy": "deny"})
        assert (await policy.json())["policy"] == "deny"
        refused = await client.post("/api/sessions/send", headers=auth(),
                                    json={"session": "memory:main:chat-1", "text": "no"})
        assert refused.status == 403
        assert (await client.get("/api/sessions/log?key=nope", headers=auth())).status == 404


async def test_no_answer_holds_a_token_or_a_secret(tmp_path):
    async with served(tmp_path) as (h, client):
        h.kernel.secrets.add(SECRET)
        await h.channel.receive(f"my key is {SECRET}")
        logging.getLogger("chatkernel.test").warning("the key %s and the token %s", SECRET,
                                                    TOKEN)
        await h.settle()
        bodies = []
        for path in GETS:
            response = await client.get(path, headers=auth())
            assert response.status == 200, (path, await response.text())
            bodies.append(await response.text())
        logs = "\n".join(bodies)
        assert "the key *** and the token ***" in logs
        assert '"UPSTREAM_API_KEY": "***"' in logs  # the config page masks it by its name
        for body in bodies:
            assert TOKEN not in body and SECRET not in body


async def test_the_page_and_its_files_are_served_and_nothing_else(tmp_path):
    async with served(tmp_path) as (h, client):
        page = await client.get("/ui/")
        assert page.status == 200 and page.content_type == "text/html"
        text = await page.text()
        assert 'src="app.js"' in text and "Gateway token" in text
        assert "script-src 'self'" in page.headers["Content-Security-Policy"]
        for name in ("app.js", "api.js", "dom.js", "pages.js", "style.css"):
            assert (await client.get(f"/ui/{name}")).status == 200, name
        for path in ("/ui/..%2Fapi.py", "/ui/api.py", "/ui/.hidden.js", "/ui/nope.js"):
            assert (await client.get(path)).status == 404, path
        assert (await client.get("/ui", allow_redirects=False)).headers["Location"] == "/ui/"


def test_the_console_stands_on_the_core_and_names_no_channel():
    above = ("chatkernel.cli", "chatkernel.builtin", "chatkernel.webchat", "chatkernel.testing")
    for path in (ROOT / "chatkernel" / "console").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names]
        names += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        assert not [n for n in names if n.startswith(above)], path
    for path in (ROOT / "chatkernel" / "console").rglob("*"):
        if path.is_file() and path.suffix in (".py", ".js", ".html"):
            text = path.read_text(encoding="utf-8").lower()
            for channel in ("webchat", "wechat", "telegram", "slack", "whatsapp"):
                assert channel not in text, (path, channel)
