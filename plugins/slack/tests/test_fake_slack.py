"""The fake Slack against Slack's published shapes and slack_sdk's own behaviour.

Answers and events are checked against the OpenAPI spec and the Events API wrapper
schema in tests/data (a small JSON-Schema reader below: type, enum, pattern, required,
properties, additionalProperties, items, $ref); Socket Mode and the upload flow are
driven with slack_sdk's own clients, so the fake follows the official SDK, not ours.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from chatkernel.testing import serve_routes
from chatkernel_slack.signature import SlackSignature
from chatkernel_slack.fake import FakeSlack, mrkdwn_to_text

pytestmark = pytest.mark.anyio

DATA = Path(__file__).parent / "data"
SPEC = json.loads((DATA / "slack-web-openapi-v2.json").read_text())
WRAPPER = json.loads((DATA / "slack-event-wrapper-schema.json").read_text())

_TYPES = {"string": str, "boolean": bool, "object": dict, "array": list, "null": type(None)}


def violations(value: Any, schema: dict[str, Any], root: dict[str, Any], path: str = "$"
               ) -> list[str]:
    """Where ``value`` breaks ``schema`` (the subset of JSON Schema the specs use)."""
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return violations(value, target, root, path)
    found: list[str] = []
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        ok = any((kind == "integer" and isinstance(value, int) and not isinstance(value, bool))
                 or (kind == "number" and isinstance(value, (int, float))
                     and not isinstance(value, bool))
                 or (kind in _TYPES and isinstance(value, _TYPES[kind])
                     and not (kind != "boolean" and isinstance(value, bool)))
                 for kind in kinds)
        if not ok:
            return [f"{path}: {value!r} is not {kinds}"]
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        found.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        found += [f"{path}: {key} is required" for key in schema.get("required", [])
                  if key not in value]
        for key, item in value.items():
            if key in properties:
                found += violations(item, properties[key], root, f"{path}.{key}")
            elif schema.get("additionalProperties") is False:
                found.append(f"{path}: {key} is not in the schema")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            found += violations(item, schema["items"], root, f"{path}[{i}]")
    return found


def response_schema(method: str, status: str = "200") -> dict[str, Any]:
    operations = SPEC["paths"][f"/{method}"]
    operation = operations.get("post") or operations.get("get")
    return operation["responses"][status]["schema"]


def spec_params(method: str) -> set[str]:
    operations = SPEC["paths"][f"/{method}"]
    operation = operations.get("post") or operations.get("get")
    return {p["name"] for p in operation["parameters"]} - {"token"}


async def api(slack: FakeSlack, method: str, token: str | None = None, **params: Any
              ) -> tuple[int, dict[str, str], dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token or slack.bot_token}"}
    async with aiohttp.ClientSession() as http, http.post(
            f"{slack.base_url}/api/{method}", json=params, headers=headers) as response:
        return response.status, dict(response.headers), await response.json()


async def test_auth_test_answers_as_the_spec_says():
    async with FakeSlack() as slack:
        status, _, body = await api(slack, "auth.test")
        assert status == 200 and body["ok"] and body["user_id"] == slack.bot_user
        assert violations(body, response_schema("auth.test"), SPEC) == []
        _, _, refused = await api(slack, "auth.test", token="xoxb-0-0-unknown")
        assert refused == {"ok": False, "error": "invalid_auth"}
        slack.revoke()
        _, _, revoked = await api(slack, "auth.test")
        assert revoked["error"] == "token_revoked"
        assert violations(revoked, {"type": "object", "required": ["ok", "error"]}, SPEC) == []


async def test_chat_post_message_answers_and_errors_as_the_spec_says():
    async with FakeSlack() as slack:
        slack.inject_message("C0GENERAL1", "hi", user="U0USER0001")
        status, _, body = await api(slack, "chat.postMessage", channel="C0GENERAL1",
                                    text="*hello*")
        assert status == 200 and body["ok"], body
        assert violations(body, response_schema("chat.postMessage"), SPEC) == []
        error_schema = response_schema("chat.postMessage", "default")
        for params, code in (({"channel": "C0NOWHERE1", "text": "x"}, "channel_not_found"),
                             ({"channel": "C0GENERAL1", "text": " "}, "no_text"),
                             ({"channel": "C0GENERAL1", "text": "x" * 40_001}, "msg_too_long")):
            _, _, error = await api(slack, "chat.postMessage", **params)
            assert error == {"ok": False, "error": code}
            assert violations(error, error_schema, SPEC) == []
        assert [m.plain_text for m in slack.sent("C0GENERAL1")] == ["hello"]


async def test_a_rate_limited_post_is_a_429_with_retry_after():
    async with FakeSlack() as slack:
        slack.inject_message("C0GENERAL1", "hi")
        slack.enforce_limits(per_channel_per_second=1)
        first = await api(slack, "chat.postMessage", channel="C0GENERAL1", text="1")
        second = await api(slack, "chat.postMessage", channel="C0GENERAL1", text="2")
        assert first[0] == 200
        assert second[0] == 429 and second[1]["Retry-After"] == "1"
        assert second[2] == {"ok": False, "error": "ratelimited"}
        assert slack.throttled == 1 and len(slack.sent()) == 1


async def test_every_event_wrapper_matches_the_events_api_schema():
    async with FakeSlack() as slack:
        slack.inject_message("D0DIRECT01", "a dm")
        slack.inject_message("C0GENERAL1", "a mention", mention=True, user_name="Ada")
        slack.inject_message("C0GENERAL1", "in a thread", thread_ts="1600000000.000001")
        slack.inject_message("C0GENERAL1", "", files=[("a.txt", b"abc", "text/plain")])
        assert len(slack.emitted) == 5  # the mention is two events
        for _, wrapper in slack.emitted:
            assert violations(wrapper, WRAPPER, WRAPPER) == [], wrapper
            event = wrapper["event"]
            assert re.fullmatch(r"\d{10}\.\d{6}", event["ts"])
            assert violations(event.get("user_profile", {}),
                              {"$ref": "#/definitions/objs_user_profile_short"}
                              if "user_profile" in event else {}, SPEC) == []
        kinds = sorted(w["event"]["type"] for _, w in slack.emitted)
        assert kinds == ["app_mention", "message", "message", "message", "message"]


def test_the_mrkdwn_reader_shows_text_as_slack_does():
    assert mrkdwn_to_text("*bold* _it_ ~s~ `c` <https://e.com|site> <@U1> &lt;&amp;&gt;") \
        == "bold it s c site @U1 <&>"


# -- Socket Mode, driven by slack_sdk's own client ------------------------------------------


async def test_socket_mode_with_slack_sdks_client_hello_envelopes_and_acks():
    from slack_sdk.socket_mode.aiohttp import SocketModeClient
    from slack_sdk.socket_mode.response import SocketModeResponse
    from slack_sdk.web.async_client import AsyncWebClient

    async with FakeSlack() as slack:
        got: list[dict[str, Any]] = []

        async def listener(client: Any, request: Any) -> None:
            got.append(request.payload)
            await client.send_socket_mode_response(
                SocketModeResponse(envelope_id=request.envelope_id))

        client = SocketModeClient(app_token=slack.app_token, ping_interval=1,
                                  web_client=AsyncWebClient(base_url=f"{slack.base_url}/api/"))
        client.socket_mode_request_listeners.append(listener)
        try:
            await client.connect()
            slack.inject_message("D0DIRECT01", "over the socket")
            await slack.wait_until(lambda: len(slack.acks) == 1, timeout=5)
        finally:
            await client.close()
        assert got[0]["event"]["text"] == "over the socket"
        assert slack.envelopes[0].acked and slack.envelopes[0].retry_attempt == 0
        call = slack.calls_to("apps.connections.open")[0]
        assert call.http_method == "POST"


async def raw_socket(slack: FakeSlack, http: aiohttp.ClientSession, *, autoping: bool = True
                     ) -> Any:
    _, _, opened = await api(slack, "apps.connections.open", token=slack.app_token)
    ws = await http.ws_connect(opened["url"], autoping=autoping)
    hello = json.loads((await ws.receive()).data)
    assert hello["type"] == "hello"
    return ws, hello


@pytest.mark.slow
async def test_an_unacknowledged_envelope_comes_again_as_a_retry_then_is_dropped():
    async with FakeSlack() as slack, aiohttp.ClientSession() as http:
        slack.ack_timeout = 0.2
        slack.max_retries = 2
        ws, hello = await raw_socket(slack, http)
        assert hello["num_connections"] == 1
        slack.inject_message("D0DIRECT01", "ignored")
        attempts = []
        for _ in range(3):
            frame = json.loads((await ws.receive(timeout=5)).data)
            attempts.append((frame["retry_attempt"], frame["retry_reason"]))
        assert attempts == [(0, ""), (1, "timeout"), (2, "timeout")]
        await slack.wait_until(lambda: slack.dropped, timeout=5)
        await ws.close()


async def test_events_while_nobody_is_connected_come_as_retries_on_the_next_socket():
    async with FakeSlack() as slack, aiohttp.ClientSession() as http:
        slack.inject_message("D0DIRECT01", "while down")
        ws, _ = await raw_socket(slack, http)
        frame = json.loads((await ws.receive(timeout=5)).data)
        assert frame["retry_attempt"] == 1 and frame["payload"]["event"]["text"] == "while down"
        await ws.send_str(json.dumps({"envelope_id": frame["envelope_id"]}))
        await slack.wait_until(lambda: slack.acks, timeout=5)
        await ws.close()


@pytest.mark.slow
async def test_events_are_spread_over_the_apps_connections_at_random():
    async with FakeSlack(seed=3) as slack, aiohttp.ClientSession() as http:
        (one, _), (two, hello) = await raw_socket(slack, http), await raw_socket(slack, http)
        assert hello["num_connections"] == 2
        for n in range(20):
            slack.inject_message("D0DIRECT01", f"m{n}")
        seen = {id(one): 0, id(two): 0}

        async def drain(ws: Any) -> None:
            with anyio.move_on_after(1):
                while True:
                    frame = json.loads((await ws.receive()).data)
                    seen[id(ws)] += 1
                    await ws.send_str(json.dumps({"envelope_id": frame["envelope_id"]}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, one)
            tg.start_soon(drain, two)
        assert sum(seen.values()) == 20 and all(seen.values()), seen


async def test_a_disconnect_frame_then_the_socket_closes_and_unacked_envelopes_come_again():
    async with FakeSlack() as slack, aiohttp.ClientSession() as http:
        slack.disconnect_grace = 0.1
        ws, _ = await raw_socket(slack, http)
        slack.inject_message("D0DIRECT01", "unacked")
        envelope = json.loads((await ws.receive(timeout=5)).data)
        await slack.disconnect("refresh_requested")
        frame = json.loads((await ws.receive(timeout=5)).data)
        assert frame["type"] == "disconnect" and frame["reason"] == "refresh_requested"
        assert (await ws.receive(timeout=5)).type in (aiohttp.WSMsgType.CLOSE,
                                                      aiohttp.WSMsgType.CLOSED)
        again, _ = await raw_socket(slack, http)
        frame = json.loads((await again.receive(timeout=5)).data)
        assert frame["payload"]["event_id"] == envelope["payload"]["event_id"]
        assert frame["retry_attempt"] == 1
        await again.close()


@pytest.mark.slow
async def test_a_frozen_socket_stays_open_and_answers_no_ping():
    async with FakeSlack() as slack, aiohttp.ClientSession() as http:
        ws, _ = await raw_socket(slack, http, autoping=False)
        await ws.ping(b"alive?")
        assert (await ws.receive(timeout=5)).type == aiohttp.WSMsgType.PONG
        slack.freeze()
        await ws.ping(b"alive?")
        slack.inject_message("D0DIRECT01", "held")
        with pytest.raises(TimeoutError):
            await ws.receive(timeout=0.5)
        assert not ws.closed
        await slack.thaw()
        assert json.loads((await ws.receive(timeout=5)).data)["type"] == "hello"
        assert json.loads((await ws.receive(timeout=5)).data)["type"] == "events_api"
        await ws.close()


# -- the Events API pusher ---------------------------------------------------------------


async def test_events_are_posted_signed_and_retried_with_the_retry_headers():
    from aiohttp import web

    seen: list[tuple[dict[str, str], bytes]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append((dict(request.headers), await request.read()))
        return web.Response(status=500 if len(seen) == 1 else 200)

    async with serve_routes(web.post("/events", handler)) as base, \
            FakeSlack(mode="events") as slack:
        slack.set_request_url(f"{base}/events")
        slack.inject_message("D0DIRECT01", "pushed")
        await slack.wait_until(lambda: len(seen) == 2, timeout=5)
        verifier = SlackSignature(slack.signing_secret)
        for headers, body in seen:
            verifier.verify(headers, body)  # raises when the signature is wrong
        assert "X-Slack-Retry-Num" not in seen[0][0]
        assert seen[1][0]["X-Slack-Retry-Num"] == "1"
        assert seen[1][0]["X-Slack-Retry-Reason"] == "http_timeout"
        assert json.loads(seen[0][1]) == json.loads(seen[1][1])


async def test_events_workers_post_several_conversations_at_once_each_in_order():
    from aiohttp import web

    arrived: list[tuple[str, str]] = []
    in_flight: dict[str, int] = {}
    overlapping: list[str] = []
    all_three = anyio.Event()

    async def handler(request: web.Request) -> web.Response:
        event = json.loads(await request.read())["event"]
        channel = event["channel"]
        if in_flight.get(channel):
            overlapping.append(channel)
        in_flight[channel] = in_flight.get(channel, 0) + 1
        arrived.append((channel, event["text"]))
        if sum(in_flight.values()) == 3:
            all_three.set()
        await all_three.wait()  # held until three requests are in flight at once
        in_flight[channel] -= 1
        return web.Response()

    async with serve_routes(web.post("/events", handler)) as base, \
            FakeSlack(mode="events") as slack:
        slack.events_workers = 3
        for number in (1, 2):
            for channel in ("D0DIRECT01", "D0DIRECT02", "D0DIRECT03"):
                slack.inject_message(channel, f"{channel} {number}")
        slack.set_request_url(f"{base}/events")
        await slack.wait_until(lambda: len(arrived) == 6, timeout=5)
    assert all_three.is_set() and overlapping == []
    for channel in ("D0DIRECT01", "D0DIRECT02", "D0DIRECT03"):
        assert [text for c, text in arrived if c == channel] == [f"{channel} 1", f"{channel} 2"]


# -- files ----------------------------------------------------------------------------------


async def test_slack_sdks_upload_v2_works_against_the_fake():
    from slack_sdk.web.async_client import AsyncWebClient

    async with FakeSlack() as slack:
        slack.inject_message("C0GENERAL1", "send me a file", thread_ts="1600000000.000001")
        async with aiohttp.ClientSession() as session:
            client = AsyncWebClient(token=slack.bot_token, base_url=f"{slack.base_url}/api/",
                                    session=session)
            await client.files_upload_v2(channel="C0GENERAL1", content=b"file bytes",
                                         filename="notes.txt", initial_comment="here",
                                         thread_ts="1600000000.000001")
        [shared] = slack.sent("C0GENERAL1")
        assert shared.files[0].data == b"file bytes" and shared.files[0].name == "notes.txt"
        assert shared.text == "here" and shared.thread_ts == "1600000000.000001"
        steps = [c.method for c in slack.calls]
        assert steps == ["files.getUploadURLExternal", "upload", "files.completeUploadExternal"]


async def test_private_files_need_the_bot_token():
    async with FakeSlack() as slack:
        slack.inject_message("D0DIRECT01", "", files=[("pic.png", b"\x89PNG...", "image/png")])
        url = slack.emitted[-1][1]["event"]["files"][0]["url_private_download"]
        async with aiohttp.ClientSession() as http:
            async with http.get(url, headers={"Authorization": f"Bearer {slack.bot_token}"}) as r:
                assert r.status == 200 and await r.read() == b"\x89PNG..."
            async with http.get(url) as r:  # Slack's login page, not the file
                assert r.content_type == "text/html"


async def test_missing_scope_names_the_scope():
    async with FakeSlack() as slack:
        slack.app.scopes.discard("files:write")
        _, _, body = await api(slack, "files.getUploadURLExternal", filename="a", length=1)
        assert body["error"] == "missing_scope" and body["needed"] == "files:write"


def test_the_clients_post_parameters_are_in_the_spec():
    from chatkernel_slack.fake import METHOD_PARAMS

    # What the fake takes for chat.postMessage is what Slack documents (plus the newer
    # metadata, markdown_text and container_id); the channel only sends documented ones.
    assert spec_params("chat.postMessage") <= METHOD_PARAMS["chat.postMessage"]
    assert {"channel", "text", "thread_ts", "mrkdwn"} <= spec_params("chat.postMessage")


async def test_every_answer_names_the_token_s_scopes_and_a_taken_one_is_missing():
    """Slack's ``x-oauth-scopes`` header: the scopes granted to the token the call used
    (the bot token's, or the app-level token's), on every answer to a known token."""
    async with FakeSlack() as slack:
        _, headers, _ = await api(slack, "auth.test")
        assert set(headers["x-oauth-scopes"].split(",")) == set(slack.app.scopes)
        slack.app.scopes.discard("chat:write")
        _, headers, refused = await api(slack, "chat.postMessage", channel="D0DIRECT01",
                                        text="hi")
        assert refused["error"] == "missing_scope" and refused["needed"] == "chat:write"
        assert "chat:write" not in headers["x-oauth-scopes"].split(",")
        assert headers["x-accepted-oauth-scopes"] == "chat:write"
        _, headers, opened = await api(slack, "apps.connections.open", token=slack.app_token)
        assert opened["ok"] and headers["x-oauth-scopes"] == "connections:write"
        slack.app.app_scopes.clear()
        _, _, refused = await api(slack, "apps.connections.open", token=slack.app_token)
        assert refused["error"] == "missing_scope" and refused["needed"] == "connections:write"
        _, headers, _ = await api(slack, "auth.test", token="xoxb-0-0-unknown")
        assert "x-oauth-scopes" not in headers
