"""The gateway: `chatkernel run` on the embedded default, the web chat API, supervision."""

from __future__ import annotations

import gc
import json
import os
import subprocess

import aiohttp
import anyio
import pytest

from chatkernel.core.gateway.gc_tuning import GEN0_THRESHOLD
from chatkernel.core.gateway.process import supervise
from chatkernel.testing.contract import wait_until
from chatkernel.testing.gateway import start_gateway
from chatkernel.testing.memory import KernelHarness
from chatkernel.testing.process import CHATKERNEL, gateway_process
from chatkernel.webchat.channel import SSE_KEEPALIVE_SECONDS


async def poll_messages(http, base, chat_id, want, timeout=5.0):
    messages: list[dict] = []

    async def enough() -> bool:
        nonlocal messages
        async with http.get(f"{base}/webchat/messages", params={"chat_id": chat_id}) as r:
            assert r.status == 200
            messages = (await r.json())["messages"]
        return len(messages) >= want

    await wait_until(enough, timeout=timeout, what=f"{want} messages in {chat_id}",
                     state=lambda: messages)
    return messages


@pytest.mark.anyio
async def test_embedded_default_web_chat_echoes(tmp_path):
    async with anyio.create_task_group() as tg:
        base, stop = await start_gateway(tg, tmp_path)
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/") as r:
                assert r.status == 200
                assert "chatkernel" in await r.text()
            body = {"chat_id": "c1", "user_id": "u1", "text": "hello gateway"}
            async with http.post(f"{base}/webchat/messages", json=body) as r:
                assert r.status == 202
                message_id = (await r.json())["message_id"]
            messages = await poll_messages(http, base, "c1", 2)
            assert messages[0] == {**messages[0], "id": int(message_id), "role": "user",
                                   "text": "hello gateway"}
            assert messages[1]["role"] == "bot" and messages[1]["text"] == "hello gateway"
            # `after` returns only newer messages
            async with http.get(f"{base}/webchat/messages",
                                params={"chat_id": "c1", "after": str(messages[0]["id"])}) as r:
                assert [m["role"] for m in (await r.json())["messages"]] == ["bot"]
        stop.set()


@pytest.mark.anyio
async def test_a_serving_gateway_tunes_the_collector_and_restores_it_when_stopped(tmp_path):
    before = gc.get_threshold()
    async with anyio.create_task_group() as tg:
        _, stop = await start_gateway(tg, tmp_path)
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] >= GEN0_THRESHOLD
        stop.set()
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


@pytest.mark.anyio
async def test_web_chat_rejects_malformed_requests_with_clear_errors(tmp_path):
    async with anyio.create_task_group() as tg:
        base, stop = await start_gateway(tg, tmp_path)
        async with aiohttp.ClientSession() as http:
            cases = [
                (b"not json", "JSON object"),
                (json.dumps(["list"]).encode(), "JSON object"),
                (json.dumps({"user_id": "u", "text": "x"}).encode(), "'chat_id'"),
                (json.dumps({"chat_id": "c", "user_id": "u", "text": ""}).encode(), "'text'"),
                (json.dumps({"chat_id": "c", "user_id": 5, "text": "x"}).encode(), "'user_id'"),
            ]
            for raw, needle in cases:
                async with http.post(f"{base}/webchat/messages", data=raw,
                                     headers={"Content-Type": "application/json"}) as r:
                    assert r.status == 400
                    assert needle in (await r.json())["error"]
            async with http.get(f"{base}/webchat/messages") as r:
                assert r.status == 400
            async with http.get(f"{base}/webchat/messages",
                                params={"chat_id": "c", "after": "x"}) as r:
                assert r.status == 400
        stop.set()


@pytest.mark.slow
@pytest.mark.anyio
async def test_web_chat_caps_every_field_and_names_the_one_at_fault(tmp_path):
    async with anyio.create_task_group() as tg:
        base, stop = await start_gateway(tg, tmp_path)
        ok = {"chat_id": "c", "user_id": "u", "text": "x"}
        cases = [
            ("chat_id", "c" * 257, 400, "'chat_id' is longer than 256 characters"),
            ("user_id", "u" * 257, 400, "'user_id' is longer than 256 characters"),
            ("client_message_id", "m" * 257, 400,
             "'client_message_id' is longer than 256 characters"),
            ("user_name", "n" * 257, 400, "'user_name' must be a string of at most 256"),
            ("user_name", {"a": 1}, 400, "'user_name' must be a string"),
            ("text", "t" * 64_001, 400, "'text' is longer than 64,000 characters"),
            ("chat_id", "c" * (2 * 1024 * 1024), 413, "body is larger than 1 MB"),
            ("chat_id", "c" * (10 * 1024 * 1024), 413, "body is larger than 8 MB"),
        ]
        async with aiohttp.ClientSession() as http:
            for name, value, status, needle in cases:
                async with http.post(f"{base}/webchat/messages",
                                     json={**ok, name: value}) as r:
                    assert r.status == status, name
                    assert needle in (await r.json())["error"]
            async with http.post(f"{base}/webchat/messages",
                                 json={**ok, "chat_id": "c" * 256, "user_name": "n" * 256,
                                       "client_message_id": "m" * 256}) as r:
                assert r.status == 202  # at the caps: fine
            messages = await poll_messages(http, base, "c" * 256, 2)
            assert [m["role"] for m in messages] == ["user", "bot"]
            async with http.get(f"{base}/webchat/messages", params={"chat_id": "c"}) as r:
                assert (await r.json())["messages"] == []  # nothing refused was kept
        stop.set()


@pytest.mark.slow
@pytest.mark.anyio
async def test_no_other_site_reaches_the_agent_or_reads_the_gateway(tmp_path):
    async with anyio.create_task_group() as tg:
        base, stop = await start_gateway(tg, tmp_path)
        port = base.rsplit(":", 1)[1]
        async with aiohttp.ClientSession() as http:
            # What a page on another site can send without asking: text/plain, its Origin
            # (and, rebinding its name to 127.0.0.1, its own Host).
            body = json.dumps({"chat_id": "c", "user_id": "u", "text": "from a web page"})
            for headers in ({"Origin": "https://evil.example"},
                            {"Origin": f"http://evil.example:{port}",
                             "Host": f"evil.example:{port}"}):
                async with http.post(f"{base}/webchat/messages", data=body,
                                     headers={"Content-Type": "text/plain", **headers}) as r:
                    assert r.status == 403
            async with http.post(f"{base}/webchat/messages", data=body,
                                 headers={"Content-Type": "text/plain"}) as r:
                assert r.status == 415
            # A rebound page reads nothing: not the transcript, the status page, metrics.
            for path in ("/webchat/messages?chat_id=c", "/status", "/metrics", "/healthz", "/"):
                async with http.get(base + path, headers={"Host": f"evil.example:{port}"}) as r:
                    assert r.status == 403, path
            async with http.get(f"{base}/webchat/messages", params={"chat_id": "c"}) as r:
                assert (await r.json())["messages"] == []  # the agent never heard of it
            async with http.get(base + "/") as r:
                assert r.status == 200
                assert r.headers["X-Frame-Options"] == "DENY"
                assert r.headers["Content-Security-Policy"] == "frame-ancestors 'none'"
        stop.set()


@pytest.mark.anyio
async def test_gateway_public_hosts_are_served(tmp_path):
    async with anyio.create_task_group() as tg:
        base, stop = await start_gateway(
            tg, tmp_path, {"gateway": {"workspace": str(tmp_path / "workspace"),
                                       "listen": "127.0.0.1:0",
                                       "public_hosts": ["chat.example.com"]}})
        async with aiohttp.ClientSession() as http:
            headers = {"Host": "chat.example.com", "Origin": "https://chat.example.com"}
            async with http.post(f"{base}/webchat/messages", headers=headers,
                                 json={"chat_id": "c", "user_id": "u", "text": "hi"}) as r:
                assert r.status == 202
            async with http.get(f"{base}/status", headers={"Host": "chat.example.com"}) as r:
                assert r.status == 200
        stop.set()


@pytest.mark.slow
@pytest.mark.anyio
async def test_web_chat_client_message_id_dedupes_retries(tmp_path):
    async with anyio.create_task_group() as tg:
        base, stop = await start_gateway(tg, tmp_path)
        async with aiohttp.ClientSession() as http:
            body = {"chat_id": "c1", "user_id": "u1", "text": "once",
                    "client_message_id": "abc"}
            ids = []
            for _ in range(2):
                async with http.post(f"{base}/webchat/messages", json=body) as r:
                    assert r.status == 202
                    ids.append((await r.json())["message_id"])
            assert ids[0] == ids[1]
            # A message after them: the retry, had it been taken, would be in the chat
            # before it, and answered before it.
            async with http.post(f"{base}/webchat/messages",
                                 json={**body, "text": "next", "client_message_id": "def"}) as r:
                assert r.status == 202
            messages = await poll_messages(http, base, "c1", 4)
            said = [(m["role"], m["text"]) for m in messages]
            assert [text for role, text in said if role == "user"] == ["once", "next"]
            assert [text for role, text in said if role == "bot"] == ["once", "next"]
        stop.set()


@pytest.mark.anyio
async def test_web_chat_server_sent_events(tmp_path):
    async with anyio.create_task_group() as tg:
        base, stop = await start_gateway(tg, tmp_path)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/webchat/events", params={"chat_id": "c9"}) as events:
                assert events.headers["Content-Type"].startswith("text/event-stream")
                body = {"chat_id": "c9", "user_id": "u", "text": "streamed"}
                async with http.post(f"{base}/webchat/messages", json=body) as r:
                    assert r.status == 202
                seen = []
                with anyio.fail_after(5):
                    async for line in events.content:
                        if line.startswith(b"data: "):
                            seen.append(json.loads(line[6:]))
                            if len(seen) == 2:
                                break
                assert [(m["role"], m["text"]) for m in seen] == [("user", "streamed"),
                                                                   ("bot", "streamed")]
        stop.set()


@pytest.mark.anyio
async def test_open_event_streams_end_when_the_gateway_stops(tmp_path):
    async with anyio.create_task_group() as tg:
        base, stop = await start_gateway(tg, tmp_path)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/webchat/events", params={"chat_id": "c1"}) as events:
                assert events.status == 200
                stop.set()
                # The stream ends (EOF) as the gateway stops, not at the next keepalive.
                with anyio.fail_after(SSE_KEEPALIVE_SECONDS / 2):
                    assert await events.content.read() == b""


@pytest.mark.anyio
async def test_web_chat_text_limit_chunks_replies(tmp_path):
    data = {"channels": {"webchat": {"text_limit": 20, "accounts": {"default": {}}}}}
    async with anyio.create_task_group() as tg:
        base, stop = await start_gateway(tg, tmp_path, data)
        async with aiohttp.ClientSession() as http:
            text = "one two three four five six seven eight nine ten"
            body = {"chat_id": "c", "user_id": "u", "text": text}
            async with http.post(f"{base}/webchat/messages", json=body) as r:
                assert r.status == 202
            messages = await poll_messages(http, base, "c", 4)
            bot = [m["text"] for m in messages if m["role"] == "bot"]
            assert len(bot) >= 3 and all(len(t) <= 20 for t in bot)
            assert " ".join(bot) == text
        stop.set()


@pytest.mark.slow
@pytest.mark.anyio
async def test_crashed_receive_loop_is_restarted_with_backoff(tmp_path):
    waits = []
    async with KernelHarness(tmp_path) as h:
        account = h.kernel.accounts["memory:main"]
        calls = {"n": 0}

        async def flaky_run(deliver):
            calls["n"] += 1
            if calls["n"] <= 3:
                raise ConnectionError("platform went away")
            await anyio.sleep_forever()

        account.transport.run = flaky_run

        async def fake_sleep(seconds):
            waits.append(seconds)

        with anyio.move_on_after(2):
            await supervise(h.kernel.supervisors, account, sleep=fake_sleep)
        assert calls["n"] == 4
        assert waits == [1.0, 2.0, 4.0]
        assert h.kernel.metrics.restarts.labels("memory", "main")._value.get() == 3


@pytest.mark.slow
def test_run_command_serves_then_stops_cleanly_on_sigterm(tmp_path):
    import urllib.request

    with gateway_process(tmp_path / "home") as gateway:
        request = urllib.request.Request(
            f"{gateway.url}/webchat/messages", method="POST",
            data=json.dumps({"chat_id": "c", "user_id": "u", "text": "ping"}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 202
        messages = gateway.webchat_messages("c", 2)
        assert messages[1]["text"] == "ping"
        assert gateway.stop() == 0
    assert (tmp_path / "home" / "state.db").exists()


@pytest.mark.slow
def test_run_with_a_bad_config_names_the_file_and_key(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[queue]\nmode = "sometimes"\n')
    env = {**os.environ, "CHATKERNEL_HOME": str(home)}
    env.pop("CHATKERNEL_CONFIG", None)
    result = subprocess.run([CHATKERNEL, "run"], env=env, capture_output=True, text=True,
                            timeout=30)
    assert result.returncode != 0
    assert str(home / "config.toml") in result.stderr
    assert "queue.mode" in result.stderr
    assert "Traceback" not in result.stderr
