"""The web chat keeps its transcript in the store: a restart loses nothing the page
showed, ids keep growing, a retried message is known after a restart too, and a page
closed mid-stream is not an error."""

from __future__ import annotations

import json
import logging

import aiohttp
import anyio
import pytest

from chatkernel.core import config as cfg
from chatkernel.testing.contract import wait_until

pytestmark = pytest.mark.anyio


@pytest.fixture
def config(tmp_path):
    return cfg.parse({"gateway": {"workspace": str(tmp_path / "workspace"),
                                  "listen": "127.0.0.1:0"},
                      "store": {"path": str(tmp_path / "state.db")},
                      "queue": {"debounce_ms": 0}})


async def messages(http, base, chat_id, want, after=0):
    found: list[dict] = []

    async def enough() -> bool:
        nonlocal found
        async with http.get(f"{base}/webchat/messages",
                            params={"chat_id": chat_id, "after": str(after)}) as r:
            found = (await r.json())["messages"]
        return len(found) >= want

    await wait_until(enough, timeout=5, what=f"{want} messages in {chat_id}",
                     state=lambda: found)
    return found


async def post(http, base, body):
    async with http.post(f"{base}/webchat/messages", json=body) as r:
        assert r.status == 202
        return (await r.json())["message_id"]


@pytest.mark.slow
async def test_the_conversation_survives_a_restart_and_ids_keep_growing(
        config, gateway_run):
    async with aiohttp.ClientSession() as http:
        async with gateway_run(config) as base:
            await post(http, base, {"chat_id": "c1", "user_id": "u1", "text": "hello",
                                    "client_message_id": "m-1"})
            await messages(http, base, "c1", 2)
            await post(http, base, {"chat_id": "c1", "user_id": "u1", "text": "/whoami"})
            before = await messages(http, base, "c1", 4)
        async with gateway_run(config) as base:
            # What the page showed, all of it: messages, the echo, a command's answer.
            after_restart = await messages(http, base, "c1", 4)
            assert after_restart == before
            assert [(m["role"], m["text"].split("\n")[0]) for m in before] == [
                ("user", "hello"), ("bot", "hello"), ("user", "/whoami"),
                ("bot", "You are u1 on webchat:default.")]
            # A retry of a message sent before the restart is known: same id, no new turn.
            again = await post(http, base, {"chat_id": "c1", "user_id": "u1",
                                            "text": "hello", "client_message_id": "m-1"})
            assert int(again) == before[0]["id"]
            # New entries come after the old ones, so `after` (and Last-Event-ID) holds.
            await post(http, base, {"chat_id": "c1", "user_id": "u1", "text": "new"})
            newer = await messages(http, base, "c1", 2, after=before[-1]["id"])
            assert [(m["role"], m["text"]) for m in newer] == [("user", "new"), ("bot", "new")]
            assert len(await messages(http, base, "c1", 6)) == 6


async def test_an_event_stream_resumes_after_the_last_event_id_across_a_restart(
        config, gateway_run):
    async with aiohttp.ClientSession() as http:
        async with gateway_run(config) as base:
            await post(http, base, {"chat_id": "c2", "user_id": "u", "text": "one"})
            last = (await messages(http, base, "c2", 2))[-1]["id"]
        async with gateway_run(config) as base:
            async with http.get(f"{base}/webchat/events", params={"chat_id": "c2"},
                                headers={"Last-Event-ID": str(last)}) as events:
                await post(http, base, {"chat_id": "c2", "user_id": "u", "text": "two"})
                seen = []
                with anyio.fail_after(5):
                    async for line in events.content:
                        if line.startswith(b"data: "):
                            seen.append(json.loads(line[6:])["text"])
                            if len(seen) == 2:
                                break
                assert seen == ["two", "two"]  # nothing it had seen, nothing missed


@pytest.mark.slow
async def test_a_page_closed_mid_stream_is_not_logged_as_an_error(
        config, gateway_run, caplog):
    caplog.set_level(logging.DEBUG)
    async with aiohttp.ClientSession() as http:
        async with gateway_run(config) as base:
            events = await http.get(f"{base}/webchat/events", params={"chat_id": "c3"})
            assert events.status == 200
            events.close()  # the tab is closed
            # real time: the closed connection reaches the server before the next write
            await anyio.sleep(0.1)
            # The stream's next write finds the client gone.
            await post(http, base, {"chat_id": "c3", "user_id": "u", "text": "anyone?"})
            await messages(http, base, "c3", 2)
            await wait_until(lambda: "an event stream of chat c3 was closed by its client"
                             in caplog.text, timeout=5, what="the closed stream logged")
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
    assert "an event stream of chat c3 was closed by its client" in caplog.text


async def test_the_stores_transcript(tmp_path):
    from chatkernel.core.store.sqlite import SQLiteStore

    async with SQLiteStore.at(tmp_path / "state.db") as store:
        first = await store.transcript_add("webchat", "default", "c", "user", "hi",
                                           client_id="x")
        assert await store.transcript_add("webchat", "default", "c", "user", "hi",
                                          client_id="x") is None  # a retry
        other = await store.transcript_add("webchat", "default", "d", "user", "hi",
                                           client_id="x")  # another chat's own id
        media = [{"name": "a.png", "kind": "photo"}]
        bot = await store.transcript_add("webchat", "default", "c", "bot", "", media)
        assert (await store.transcript_find("webchat", "default", "c", "x")).id == first.id
        assert [e.id for e in await store.transcript_read("webchat", "default", "c")] == [
            first.id, bot.id]
        [last] = await store.transcript_read("webchat", "default", "c", limit=1)
        assert last.as_dict() == {"id": bot.id, "role": "bot", "text": "", "media": media,
                                  "ts": bot.ts}
        assert await store.transcript_read("webchat", "default", "c", after=bot.id) == []
        assert first.id < other.id < bot.id


async def test_two_chats_may_use_the_same_client_message_id(config, gateway_run):
    async with aiohttp.ClientSession() as http:
        async with gateway_run(config) as base:
            for chat in ("a", "b"):
                await post(http, base, {"chat_id": chat, "user_id": "u", "text": f"in {chat}",
                                        "client_message_id": "same"})
            for chat in ("a", "b"):
                found = await messages(http, base, chat, 2)
                assert [(m["role"], m["text"]) for m in found] == [("user", f"in {chat}"),
                                                                   ("bot", f"in {chat}")]


async def test_a_post_that_finds_the_backlog_full_is_refused_before_its_transcript_entry(
        config, gateway_run, monkeypatch):
    from chatkernel.core.inbound import pipeline

    backlog = pipeline.ACCEPT_BACKLOG
    # No room at all (as if 2,000 accepted messages were waiting), a short wait for it.
    monkeypatch.setattr(pipeline, "ACCEPT_BACKLOG", 0)
    monkeypatch.setattr(pipeline, "WEBHOOK_ROOM_SECONDS", 0.2)
    body = {"chat_id": "c1", "user_id": "u1", "text": "hello", "client_message_id": "m-1"}
    async with aiohttp.ClientSession() as http, gateway_run(config) as base:
        with anyio.fail_after(10):  # answered after its wait, not held
            async with http.post(f"{base}/webchat/messages", json=body) as r:
                assert r.status == 503
                assert r.headers["Retry-After"] == str(pipeline.BACKLOGGED_RETRY_AFTER)
                assert "messages waiting: send it again" in (await r.json())["error"]
        async with http.get(f"{base}/webchat/messages", params={"chat_id": "c1"}) as r:
            assert (await r.json())["messages"] == []  # nothing the kernel does not have
        # The page's retry, with the same client id, is taken once there is room.
        monkeypatch.setattr(pipeline, "ACCEPT_BACKLOG", backlog)
        await post(http, base, body)
        found = await messages(http, base, "c1", 2)
        assert [(m["role"], m["text"]) for m in found] == [("user", "hello"), ("bot", "hello")]
