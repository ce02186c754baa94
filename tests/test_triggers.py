"""Inbound triggers and the web chat's /remind, through a gateway run in this process
(docs/jobs.md): a signed request delivers to two chats once each; a replayed, unsigned,
stale, oversized or incomplete one is refused with a 4xx saying why, and nothing runs."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import sqlite3
import time

import aiohttp
import anyio
import pytest

from chatkernel.core import config as cfg
from chatkernel.core.jobs.triggers import fill_prompt, sign
from chatkernel.testing.contract import wait_until

pytestmark = pytest.mark.anyio

SECRET = "s3cret-for-tests-only"


@pytest.fixture
def config(tmp_path):
    return cfg.parse({"gateway": {"workspace": str(tmp_path / "workspace"),
                                  "listen": "127.0.0.1:0"},
                      "store": {"path": str(tmp_path / "state.db")},
                      "queue": {"debounce_ms": 0},
                      "triggers": {
                          "ci": {"secret": SECRET, "prompt": "Build {status} of {repo}",
                                 "deliver_to": ["webchat:default:ops",
                                                "webchat:default:dev"],
                                 "max_body_bytes": 200},
                          "alert": {"token": "tok-for-tests", "prompt": "Alert: {what}",
                                    "deliver_to": ["webchat:default:ops"],
                                    "per_minute": 2}}})


async def messages(http, base, chat_id, want) -> list[dict]:
    found: list[dict] = []

    async def enough() -> bool:
        nonlocal found
        async with http.get(f"{base}/webchat/messages", params={"chat_id": chat_id}) as r:
            found = (await r.json())["messages"]
        return len(found) >= want

    await wait_until(enough, timeout=10, what=f"{want} messages in {chat_id}",
                     state=lambda: found)
    return found


def store_rows(db, sql: str) -> list[tuple]:
    """Rows of the gateway's state database, read beside it (what it has committed)."""
    with contextlib.closing(sqlite3.connect(db, timeout=5)) as conn:
        return conn.execute(sql).fetchall()


def openssl_style_signature(body: bytes, timestamp: str) -> str:
    """The header as docs/jobs.md's curl example makes it (openssl dgst -sha256 -hmac),
    spelled apart from the gateway's verifier."""
    digest = hmac.new(SECRET.encode(), f"v1:{timestamp}:".encode() + body, hashlib.sha256)
    return "v1=" + digest.hexdigest()


@pytest.mark.slow
async def test_a_signed_trigger_delivers_to_two_chats_once_and_refusals_run_nothing(
        config, gateway_run, tmp_path):
    db = tmp_path / "state.db"
    body = json.dumps({"status": "green", "repo": "chatkernel"}).encode()
    now = str(int(time.time()))
    signed = {"X-Chatkernel-Timestamp": now,
              "X-Chatkernel-Signature": openssl_style_signature(body, now),
              "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http, gateway_run(config) as base:
        url = f"{base}/hooks/ci"
        async with http.post(url, data=body, headers=signed) as r:
            assert r.status == 202
            taken = await r.json()
        refusals = {
            "replayed": (signed, body),
            "unsigned": ({"Content-Type": "application/json"}, body),
            "stale": (sign(SECRET, body, int(time.time()) - 600), body),
            "wrong": ({**signed, "X-Chatkernel-Signature": "v1=" + "0" * 64}, body),
            "oversized": (sign(SECRET, b"{" + b" " * 300 + b"}", now), b"{" + b" " * 300 + b"}"),
            "incomplete": (sign(SECRET, b'{"status": "red"}', now), b'{"status": "red"}'),
        }
        answers = {}
        for what, (headers, data) in refusals.items():
            async with http.post(url, data=data, headers=headers) as r:
                answers[what] = (r.status, (await r.json())["error"])
        assert answers["replayed"][0] == 409 and "replay" in answers["replayed"][1]
        assert answers["unsigned"][0] == 401 and "missing" in answers["unsigned"][1]
        assert answers["stale"][0] == 401 and "old" in answers["stale"][1]
        assert answers["wrong"][0] == 401
        assert answers["oversized"] == (413, "the body is over 200 bytes")
        assert answers["incomplete"][0] == 400 and "repo" in answers["incomplete"][1]
        # The one taken ran once, to each chat.
        assert [m["text"] for m in await messages(http, base, "ops", 1)] == [
            "Build green of chatkernel"]
        assert [m["text"] for m in await messages(http, base, "dev", 1)] == [
            "Build green of chatkernel"]
        status_headers = sign(SECRET, b"", int(time.time()))
        async def done() -> bool:
            async with http.get(f"{base}{taken['status_url']}", headers=status_headers) as r:
                return (await r.json())["status"] == "done"
        await wait_until(done, timeout=10, what="the run is done")
        async with http.get(f"{base}{taken['status_url']}") as r:  # the credential is asked
            assert r.status == 401
        async with http.get(f"{base}/hooks/ci/runs/{taken['run_id']}",
                            headers=status_headers) as r:
            run = await r.json()
        assert run["outcome"] == "sent to webchat:default:ops, webchat:default:dev"
        async with http.post(f"{base}/hooks/alert", json={"what": "disk"},
                             headers={"Authorization": "Bearer nope"}) as r:
            assert r.status == 401
        bearer = {"Authorization": "Bearer tok-for-tests"}
        alerts = []
        for _ in range(2):
            async with http.post(f"{base}/hooks/alert", json={"what": "disk"},
                                 headers=bearer) as r:
                assert r.status == 202
                alerts.append((await r.json())["status_url"])
        async with http.post(f"{base}/hooks/alert", json={"what": "disk"},
                             headers=bearer) as r:
            assert r.status == 429 and int(r.headers["Retry-After"]) >= 1

        async def settled() -> bool:
            """Every run taken has ended and the outbox has sent all it was given:
            nothing is left that could deliver a second time."""
            for status_url in alerts:
                async with http.get(f"{base}{status_url}", headers=bearer) as r:
                    if (await r.json())["status"] != "done":
                        return False
            return store_rows(db, "SELECT id FROM outbox"
                                  " WHERE status IN ('pending', 'sending')") == []
        await wait_until(settled, timeout=10, what="the alerts' runs and their sends")
        # Nothing else ran: one run in the ci trigger's history, delivered once to each.
        assert store_rows(db, "SELECT run_id, status FROM job_runs"
                              " WHERE job = 'trigger:ci'") == [(taken["run_id"], "done")]
        assert len(await messages(http, base, "ops", 3)) == 3
        async with http.get(f"{base}/webchat/messages", params={"chat_id": "dev"}) as r:
            assert len((await r.json())["messages"]) == 1


@pytest.mark.slow
async def test_remind_on_the_web_chat(config, gateway_run):
    async with aiohttp.ClientSession() as http, gateway_run(config) as base:
        async with http.post(f"{base}/webchat/messages",
                             json={"chat_id": "kitchen", "user_id": "u1",
                                   "text": "/remind 1s check the oven"}) as r:
            assert r.status == 202
        found = await messages(http, base, "kitchen", 3)  # the command, its answer, then it
        texts = [m["text"] for m in found]
        assert texts[1].startswith("Reminder ") and texts[2] == "Reminder: check the oven"


def test_a_prompt_is_filled_from_the_top_level_fields():
    body = json.dumps({"status": "red", "jobs": [1, 2], "extra": "ignored"}).encode()
    assert fill_prompt("{status}: {jobs}", body) == "red: [1, 2]"
