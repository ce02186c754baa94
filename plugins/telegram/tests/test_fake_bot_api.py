"""The fake Telegram Bot API (``chatkernel_telegram.fake``), exercised over real HTTP.

The plugin's own tests run the real client against :class:`FakeBotAPI`, so the fake must
answer as Telegram does: URL shapes, encodings, result objects, errors (wording, HTTP
status, ``parameters``), limits and failure modes. Result objects are checked against the
published Bot API spec (``telegram-bot-api-10.1.json``, found beside the repository in
``shared/specs/`` or named by ``TELEGRAM_BOT_API_SPEC``; those checks skip without it).
"""

from __future__ import annotations

import io
import json
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from aiohttp import web

from chatkernel_telegram import entities, fake
from chatkernel_telegram.entities import (
    EntityParseError,
    parse_html,
    parse_markdown,
    parse_markdown_v2,
    utf16_len,
)
from chatkernel_telegram.fake import LEGACY_PARAMS, METHOD_PARAMS, MB, FakeBotAPI

TOKEN = "123456:ABC-DEF1234ghIkl-zyx57W2v1u123ew11"
OTHER_TOKEN = "654321:ZYX-other-bot-token"
SPEC_NAME = "telegram-bot-api-10.1.json"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def api():
    async with FakeBotAPI(token=TOKEN, username="chatkernel_bot") as fake:
        yield fake


@pytest.fixture
async def http():
    # A fresh connection per request: a test that drops connections must not leave a
    # dead keep-alive connection for the next request.
    async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True)) as session:
        yield session


def png(width: int, height: int) -> bytes:
    """A valid (tiny, grey) PNG of the given size."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    raw = b"".join(b"\0" + b"\x80" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height,
                                                               8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


async def call(http: aiohttp.ClientSession, api: FakeBotAPI, method: str,
               params: dict[str, Any] | None = None, *, token: str | None = None,
               via: str = "json") -> tuple[int, dict[str, Any]]:
    """Calls the fake as a client would: ``via`` json | form | query | multipart."""
    url = f"{api.base_url}/bot{token or api.token}/{method}"
    params = params or {}

    def text(value: Any) -> str:
        return json.dumps(value) if isinstance(value, (dict, list, bool)) else str(value)

    if via == "json":
        request = http.post(url, json=params)
    elif via == "query":
        request = http.get(url, params={k: text(v) for k, v in params.items()})
    elif via == "form":
        request = http.post(url, data={k: text(v) for k, v in params.items()})
    elif via == "multipart":
        form = aiohttp.FormData()
        for key, value in params.items():
            if isinstance(value, tuple):   # (filename, bytes, content type)
                filename, data, content_type = value
                body = io.BytesIO(data) if len(data) > MB else data   # aiohttp warns on big bytes
                form.add_field(key, body, filename=filename, content_type=content_type)
            else:
                form.add_field(key, text(value))
        request = http.post(url, data=form)
    else:
        raise ValueError(via)
    async with request as response:
        return response.status, await response.json(content_type=None)


def ok(answer: tuple[int, dict[str, Any]]) -> Any:
    status, body = answer
    assert status == 200 and body["ok"] is True, body
    return body["result"]


def error(answer: tuple[int, dict[str, Any]], code: int,
          description: str | None = None) -> dict[str, Any]:
    """Checks Telegram's error shape; returns the body."""
    status, body = answer
    assert body["ok"] is False, body
    assert status == code == body["error_code"], body
    assert isinstance(body["description"], str)
    if description is not None:
        assert body["description"] == description
    assert set(body.get("parameters", {})) <= {"retry_after", "migrate_to_chat_id"}
    return body


# ---------------------------------------------------------------------------------------
# The spec: result objects are subsets of the published types, required fields present
# ---------------------------------------------------------------------------------------


def _find_spec() -> Path | None:
    candidates = []
    if os.environ.get("TELEGRAM_BOT_API_SPEC"):
        candidates.append(Path(os.environ["TELEGRAM_BOT_API_SPEC"]))
    here = Path(__file__).resolve()
    candidates.append(here.parent / "data" / SPEC_NAME)
    candidates += [parent / "shared" / "specs" / SPEC_NAME for parent in here.parents]
    return next((path for path in candidates if path.is_file()), None)


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    path = _find_spec()
    if path is None:
        pytest.fail(f"{SPEC_NAME} not found: it ships in tests/data (or set "
                    "TELEGRAM_BOT_API_SPEC)")
    return json.loads(path.read_text(encoding="utf-8"))


def spec_problems(spec: dict[str, Any], value: Any, type_name: str,
                  path: str = "result") -> list[str]:
    """What in ``value`` is not a ``type_name`` of the spec ([] when it conforms): unknown
    fields, missing required fields, wrong primitive types, recursively."""
    if type_name.startswith("Array of "):
        if not isinstance(value, list):
            return [f"{path}: expected {type_name}, got {type(value).__name__}"]
        inner = type_name[len("Array of "):]
        return [p for i, item in enumerate(value)
                for p in spec_problems(spec, item, inner, f"{path}[{i}]")]
    primitive = {
        "Integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "Float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "String": lambda v: isinstance(v, str),
        "Boolean": lambda v: isinstance(v, bool),
        "True": lambda v: v is True,
    }
    if type_name in primitive:
        return [] if primitive[type_name](value) else [f"{path}: not a {type_name}: {value!r}"]
    kind = spec["types"].get(type_name)
    if kind is None:   # InputFile and the like: nothing a result carries
        return []
    if "subtypes" in kind:
        options = [spec_problems(spec, value, sub, path) for sub in kind["subtypes"]]
        return [] if any(not o for o in options) else min(options, key=len)
    if not isinstance(value, dict):
        return [f"{path}: expected {type_name} object, got {value!r}"]
    fields = {f["name"]: f for f in kind.get("fields", [])}
    problems = [f"{path}.{key}: not a field of {type_name}" for key in value if key not in fields]
    problems += [f"{path}.{name}: required by {type_name}, missing"
                 for name, f in fields.items() if f["required"] and name not in value]
    for key, item in value.items():
        if key in fields:
            options = [spec_problems(spec, item, t, f"{path}.{key}") for t in fields[key]["types"]]
            if all(options):
                problems += min(options, key=len)
    return problems


def assert_conforms(spec: dict[str, Any], value: Any, type_name: str) -> None:
    problems = spec_problems(spec, value, type_name)
    assert not problems, "\n".join(problems)


def assert_returns(spec: dict[str, Any], method: str, result: Any) -> None:
    """``result`` is what the spec says ``method`` returns."""
    returns = spec["methods"][method]["returns"]
    options = [spec_problems(spec, result, t) for t in returns]
    assert any(not o for o in options), (returns, options)


def test_the_fake_implements_only_spec_methods_with_spec_parameters(spec) -> None:
    for method in FakeBotAPI.methods():
        assert method in spec["methods"], method
        documented = {f["name"] for f in spec["methods"][method].get("fields", [])}
        assert documented <= METHOD_PARAMS[method], (method, documented - METHOD_PARAMS[method])
        assert METHOD_PARAMS[method] - LEGACY_PARAMS <= documented, method


async def _valid_request(api: FakeBotAPI, method: str) -> tuple[dict[str, Any], str]:
    """A request the fake accepts, and how to send it."""
    if method in ("sendPhoto", "sendDocument", "sendVideo", "sendAudio", "sendVoice",
                  "sendAnimation"):
        field = method[len("send"):].lower()
        upload = ("cat.png", png(4, 3), "image/png") if field == "photo" \
            else ("file.bin", b"some bytes", "application/octet-stream")
        return {"chat_id": 42, field: upload, "caption": "<b>look</b>",
                "parse_mode": "HTML"}, "multipart"
    requests: dict[str, dict[str, Any]] = {
        "sendMessage": {"chat_id": 42, "text": "<b>hi</b> @someone", "parse_mode": "HTML",
                        "link_preview_options": {"is_disabled": True}},
        "sendChatAction": {"chat_id": 42, "action": "typing"},
        "getFile": {"file_id": api.add_file(b"data", "a.txt", "text/plain")},
        "setWebhook": {"url": "https://127.0.0.1:9/hook", "secret_token": "s3cret"},
        "setMyCommands": {"commands": [{"command": "help", "description": "Help"}]},
        "sendMessageDraft": {"chat_id": 42, "draft_id": 7, "text": "<b>thinking</b>",
                             "parse_mode": "HTML"},
    }
    if method in ("editMessageText", "deleteMessage"):  # a message of the bot's to act on
        async with aiohttp.ClientSession() as http:
            sent = ok(await call(http, api, "sendMessage", {"chat_id": 42, "text": "first"}))
        requests[method] = {"chat_id": 42, "message_id": sent["message_id"],
                            **({"text": "first, then more"} if method == "editMessageText"
                               else {})}
    return requests.get(method, {}), "json"


@pytest.mark.anyio
@pytest.mark.parametrize("method", FakeBotAPI.methods())
async def test_every_method_answers_its_spec_type(api, http, spec, method) -> None:
    api.inject_message(42, "hello")
    params, via = await _valid_request(api, method)
    result = ok(await call(http, api, method, params, via=via))
    assert_returns(spec, method, result)


@pytest.mark.anyio
@pytest.mark.parametrize("method", FakeBotAPI.methods())
async def test_every_method_rejects_a_missing_required_parameter(api, http, spec,
                                                                 method) -> None:
    params, via = await _valid_request(api, method)
    required = [f["name"] for f in spec["methods"][method].get("fields", []) if f["required"]]
    # setWebhook: "Use an empty string to remove webhook integration" - Telegram reads a
    # missing url as empty, and answers true.
    required = [name for name in required if (method, name) != ("setWebhook", "url")]
    for name in required:
        assert name in params, (method, name)
        body = error(await call(http, api, method,
                                {k: v for k, v in params.items() if k != name}, via=via), 400)
        assert body["description"].startswith("Bad Request: ")


@pytest.mark.anyio
async def test_updates_and_messages_conform_to_the_spec(api, http, spec) -> None:
    photo = api.add_file(png(64, 48), "cat.png", "image/png")
    voice = api.add_file(b"OggS voice", "v.ogg", "audio/ogg")
    sent = ok(await call(http, api, "sendMessage", {"chat_id": -1001234567890, "text": "hi",
                                                    "message_thread_id": 7}))
    api.inject_message(-1001234567890, "@chatkernel_bot /help look", chat_type="supergroup",
                       message_thread_id=7, is_topic_message=True, from_id=5,
                       from_username="alice", reply_to_bot=True)
    api.inject_message(42, None, photo=photo, caption="a cat")
    api.inject_message(42, None, voice=voice)
    updates = ok(await call(http, api, "getUpdates"))
    assert len(updates) == 3
    assert_conforms(spec, updates, "Array of Update")
    assert_conforms(spec, sent, "Message")


# ---------------------------------------------------------------------------------------
# Identity, routing, encodings
# ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_get_me_is_the_bot(api, http) -> None:
    me = ok(await call(http, api, "getMe", via="query"))
    assert me == {"id": 123456, "is_bot": True, "first_name": "chatkernel_bot",
                  "username": "chatkernel_bot", "can_join_groups": True,
                  "can_read_all_group_messages": False, "supports_inline_queries": False,
                  "can_connect_to_business": False, "has_main_web_app": False}
    assert ok(await call(http, api, "getme")) == me   # method names are case-insensitive


@pytest.mark.anyio
async def test_unknown_token_is_401_and_unknown_method_is_404(api, http) -> None:
    error(await call(http, api, "getMe", token="999:nope"), 401, "Unauthorized")
    error(await call(http, api, "sendTelepathy"), 404, "Not Found")
    async with http.get(f"{api.base_url}/elsewhere") as response:
        assert response.status == 404
        assert await response.json() == {"ok": False, "error_code": 404,
                                          "description": "Not Found"}
    api.revoke_token()
    error(await call(http, api, "getMe"), 401, "Unauthorized")


@pytest.mark.anyio
@pytest.mark.parametrize("via", ["query", "form", "json", "multipart"])
async def test_parameters_arrive_in_every_encoding(api, http, via) -> None:
    api.inject_message(42, "question")   # message 1 in chat 42
    result = ok(await call(http, api, "sendMessage",
                           {"chat_id": 42, "text": "answer", "disable_notification": True,
                            "reply_parameters": {"message_id": 1}}, via=via))
    assert result["text"] == "answer"
    assert result["reply_to_message"]["text"] == "question"
    [sent] = api.sent()
    assert (sent.chat_id, sent.text, sent.reply_to) == (42, "answer", 1)
    assert api.calls[-1].http_method == ("GET" if via == "query" else "POST")
    assert api.unknown_params == []


@pytest.mark.anyio
async def test_unknown_parameters_are_noted(api, http) -> None:
    ok(await call(http, api, "sendMessage", {"chat_id": 42, "text": "x", "reply_to": 3}))
    assert api.unknown_params == [("sendMessage", "reply_to")]


@pytest.mark.anyio
async def test_several_bots_are_separate(api, http) -> None:
    other = api.add_bot(OTHER_TOKEN, "other_bot")
    assert ok(await call(http, api, "getMe", token=OTHER_TOKEN))["id"] == other["id"] == 654321
    api.inject_message(42, "for the first")
    api.inject_message(42, "for the other", token=OTHER_TOKEN)
    first = ok(await call(http, api, "getUpdates"))
    second = ok(await call(http, api, "getUpdates", token=OTHER_TOKEN))
    assert [u["message"]["text"] for u in first] == ["for the first"]
    assert [u["message"]["text"] for u in second] == ["for the other"]
    ok(await call(http, api, "sendMessage", {"chat_id": 42, "text": "b"}, token=OTHER_TOKEN))
    assert [s.text for s in api.sent(OTHER_TOKEN)] == ["b"] and api.sent(TOKEN) == []
    # file ids belong to one bot
    file_id = api.add_file(b"mine")
    error(await call(http, api, "getFile", {"file_id": file_id}, token=OTHER_TOKEN), 400)


# ---------------------------------------------------------------------------------------
# getUpdates: offsets, limits, long polling, conflicts
# ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_offset_confirms_and_forgets_earlier_updates(api, http) -> None:
    ids = [api.inject_message(42, f"m{i}") for i in range(3)]
    assert ids == sorted(ids) and ids[1] == ids[0] + 1
    updates = ok(await call(http, api, "getUpdates"))
    assert [u["update_id"] for u in updates] == ids
    # unconfirmed updates are served again
    assert len(ok(await call(http, api, "getUpdates"))) == 3
    updates = ok(await call(http, api, "getUpdates", {"offset": ids[1]}))
    assert [u["update_id"] for u in updates] == ids[1:]
    assert ok(await call(http, api, "getUpdates", {"offset": ids[2] + 1})) == []
    assert api.pending_updates() == []
    assert api.update(ids[0])["message"]["text"] == "m0"


@pytest.mark.anyio
async def test_a_negative_offset_keeps_only_the_last_updates(api, http) -> None:
    ids = [api.inject_message(42, f"m{i}") for i in range(4)]
    updates = ok(await call(http, api, "getUpdates", {"offset": -1}))
    assert [u["update_id"] for u in updates] == ids[-1:]
    assert [u["update_id"] for u in api.pending_updates()] == ids[-1:]


@pytest.mark.anyio
async def test_limit_is_between_1_and_100(api, http) -> None:
    for i in range(105):
        api.inject_message(42, str(i))
    assert len(ok(await call(http, api, "getUpdates", {"limit": 1}))) == 1
    assert len(ok(await call(http, api, "getUpdates", {"limit": 500}))) == 100
    first = ok(await call(http, api, "getUpdates"))
    assert [u["message"]["text"] for u in first] == [str(i) for i in range(100)]
    rest = ok(await call(http, api, "getUpdates", {"offset": first[-1]["update_id"] + 1}))
    assert [u["message"]["text"] for u in rest] == [str(i) for i in range(100, 105)]


@pytest.mark.anyio
async def test_an_update_given_an_earlier_id_is_served_in_id_order(api, http) -> None:
    later = api.inject_update({"update_id": 500, "message": {"text": "later"}})
    earlier = api.inject_update({"update_id": 400, "message": {"text": "earlier"}})
    after = api.inject_message(42, "after")
    updates = ok(await call(http, api, "getUpdates"))
    assert [u["update_id"] for u in updates] == [earlier, later, after]
    assert earlier < later < after


@pytest.mark.anyio
async def test_a_long_poll_returns_as_soon_as_an_update_arrives(api, http) -> None:
    answers: list[Any] = []

    async def poll() -> None:
        answers.append(ok(await call(http, api, "getUpdates", {"timeout": 30})))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(poll)
            await api.wait_until(lambda: bool(api.calls_to("getUpdates")))
            assert answers == []
            api.inject_message(42, "wake up")
    assert [u["message"]["text"] for u in answers[0]] == ["wake up"]


@pytest.mark.anyio
async def test_a_long_poll_ends_empty_at_its_timeout_and_huge_timeouts_are_clamped(
        api, http) -> None:
    with anyio.fail_after(5):
        assert ok(await call(http, api, "getUpdates", {"timeout": 0.1})) == []
        api.max_poll_timeout = 0.1
        assert ok(await call(http, api, "getUpdates", {"timeout": 10**9})) == []


@pytest.mark.anyio
async def test_a_second_poller_terminates_the_first_with_409(api, http) -> None:
    first: list[Any] = []
    second: list[Any] = []

    async def poll(into: list[Any]) -> None:
        into.append(await call(http, api, "getUpdates", {"timeout": 30}))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(poll, first)
            await api.wait_until(lambda: len(api.calls_to("getUpdates")) == 1)
            tg.start_soon(poll, second)
            await api.wait_until(lambda: bool(first))
            error(first[0], 409, "Conflict: terminated by other getUpdates request; "
                                 "make sure that only one bot instance is running")
            assert second == []
            api.inject_message(42, "for the survivor")
    assert [u["message"]["text"] for u in ok(second[0])] == ["for the survivor"]


@pytest.mark.anyio
async def test_allowed_updates_filters_and_is_remembered(api, http) -> None:
    api.inject_message(42, "a message")
    api.inject_update({"callback_query": {"id": "1", "from": {"id": 42, "is_bot": False,
                                                             "first_name": "A"},
                                          "chat_instance": "x", "data": "go"}})
    api.inject_update({"chat_member": {}})
    # chat_member comes only when asked for
    kinds = [next(k for k in u if k != "update_id")
             for u in ok(await call(http, api, "getUpdates"))]
    assert kinds == ["message", "callback_query"]
    only = ok(await call(http, api, "getUpdates", {"allowed_updates": ["callback_query"]},
                         via="form"))
    assert [u["callback_query"]["data"] for u in only] == ["go"]
    again = ok(await call(http, api, "getUpdates"))   # the setting persists
    assert [list(u)[1] for u in again] == ["callback_query"]


# ---------------------------------------------------------------------------------------
# Webhooks
# ---------------------------------------------------------------------------------------


class Receiver:
    """The bot's webhook endpoint: answers the statuses queued, then 200."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.url = ""

    async def __aenter__(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/hook"
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._runner.cleanup()

    async def _hook(self, request: web.Request) -> web.Response:
        self.requests.append((dict(request.headers), await request.json()))
        return web.Response(status=self.statuses.pop(0) if self.statuses else 200)


@pytest.mark.anyio
async def test_webhook_delivery_with_the_secret_header_and_retries(api, http) -> None:
    async with Receiver([500, 502]) as receiver:
        answer = await call(http, api, "setWebhook",
                            {"url": receiver.url, "secret_token": "Abc_123-xyz"})
        assert answer[1] == {"ok": True, "result": True, "description": "Webhook was set"}
        update_id = api.inject_message(42, "via webhook")
        deliveries = await api.wait_for_deliveries(1, ok_only=True)
    assert [(d.attempt, d.status) for d in deliveries] == [(1, 500), (2, 502), (3, 200)]
    assert {d.update_id for d in deliveries} == {update_id}
    for headers, body in receiver.requests:
        assert headers["X-Telegram-Bot-Api-Secret-Token"] == "Abc_123-xyz"
        assert body["message"]["text"] == "via webhook"
    info = ok(await call(http, api, "getWebhookInfo"))
    assert info["url"] == receiver.url and info["pending_update_count"] == 0
    assert info["has_custom_certificate"] is False
    assert info["last_error_message"] == "Wrong response from the webhook: 502 Bad Gateway"


@pytest.mark.anyio
async def test_webhook_retries_are_bounded(api, http) -> None:
    api.webhook_retry_delays = (0.01, 0.01)
    async with Receiver([500, 500, 500]) as receiver:
        ok(await call(http, api, "setWebhook", {"url": receiver.url}))
        api.inject_message(42, "doomed")
        api.inject_message(42, "fine")
        await api.wait_for_deliveries(1, ok_only=True)
    statuses = [d.status for d in api.webhook_deliveries]
    assert statuses == [500, 500, 500, 200]   # 3 attempts, given up; the next one lands
    assert "X-Telegram-Bot-Api-Secret-Token" not in receiver.requests[0][0]
    assert api.pending_updates() == []


@pytest.mark.anyio
async def test_polling_while_a_webhook_is_set_is_409(api, http) -> None:
    waiting: list[Any] = []

    async def poll() -> None:
        waiting.append(await call(http, api, "getUpdates", {"timeout": 30}))

    conflict = ("Conflict: can't use getUpdates method while webhook is active; "
                "use deleteWebhook to delete the webhook first")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(poll)
            await api.wait_until(lambda: bool(api.calls_to("getUpdates")))
            ok(await call(http, api, "setWebhook", {"url": "http://127.0.0.1:9/hook",
                                                    "drop_pending_updates": True}))
    error(waiting[0], 409, conflict)
    error(await call(http, api, "getUpdates"), 409, conflict)
    answer = await call(http, api, "deleteWebhook")
    assert answer[1]["description"] == "Webhook was deleted"
    assert (await call(http, api, "deleteWebhook"))[1]["description"] == \
        "Webhook is already deleted"
    assert ok(await call(http, api, "getUpdates")) == []


@pytest.mark.anyio
async def test_set_webhook_checks_its_parameters(api, http) -> None:
    error(await call(http, api, "setWebhook", {"url": "https://h.example/x",
                                               "secret_token": "no spaces!"}),
          400, "Bad Request: secret token contains unallowed characters")
    error(await call(http, api, "setWebhook", {"url": "https://h.example/x",
                                               "secret_token": "a" * 257}), 400)
    ok(await call(http, api, "setWebhook", {"url": "https://h.example/x",
                                            "secret_token": "a" * 256}))
    again = await call(http, api, "setWebhook", {"url": "https://h.example/x",
                                                 "secret_token": "a" * 256})
    assert again[1]["description"] == "Webhook is already set"
    api.require_https_webhooks = True
    error(await call(http, api, "setWebhook", {"url": "http://h.example/x"}), 400,
          "Bad Request: bad webhook: An HTTPS URL must be provided for webhook")
    # an empty url removes the webhook
    assert ok(await call(http, api, "setWebhook", {"url": ""})) is True
    assert ok(await call(http, api, "getWebhookInfo"))["url"] == ""


# ---------------------------------------------------------------------------------------
# sendMessage: markup, limits, chats, replies, threads
# ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_valid_nested_html_is_accepted_with_its_entities(api, http) -> None:
    markup = ('<b>bold <i>both</i></b> <a href="https://example.org/x?a=1&amp;b=2">link</a> '
              '<tg-spoiler>s</tg-spoiler> <span class="tg-spoiler">t</span> '
              '<pre><code class="language-python">print(1 &lt; 2)</code></pre> '
              '<blockquote expandable>q</blockquote> 😀<u>u</u> &#169; &copy;')
    message = ok(await call(http, api, "sendMessage",
                            {"chat_id": 42, "text": markup, "parse_mode": "HTML"}))
    assert message["text"] == ("bold both link s t print(1 < 2) q 😀u © &copy;")
    entities = {(e["type"], e["offset"], e["length"]) for e in message["entities"]}
    assert ("bold", 0, 9) in entities and ("italic", 5, 4) in entities
    assert {"type": "text_link", "offset": 10, "length": 4,
            "url": "https://example.org/x?a=1&b=2"} in message["entities"]
    assert {"type": "pre", "offset": 19, "length": 12, "language": "python"} \
        in message["entities"]
    assert ("spoiler", 15, 1) in entities and ("spoiler", 17, 1) in entities
    assert ("expandable_blockquote", 32, 1) in entities
    assert ("underline", 36, 1) in entities   # after 😀: two UTF-16 units
    assert api.sent()[0].parse_mode == "HTML" and api.sent()[0].text == markup


@pytest.mark.anyio
@pytest.mark.parametrize("markup, reason", [
    ("a <foo>b</foo>", 'Unsupported start tag "foo" at byte offset 2'),
    ("é <br/>", 'Unsupported start tag "br/" at byte offset 3'),
    ("<b>bold", 'Can\'t find end tag corresponding to start tag "b"'),
    ("<b><i>x</b></i>", 'Unmatched end tag at byte offset 7, expected "</i>", found "</b>"'),
    ("x</b>", "Unexpected end tag at byte offset 1"),
    ("1 < 2", 'Unsupported start tag "" at byte offset 2'),
    ("<b", "Unclosed start tag at byte offset 0"),
    ('<span class="x">s</span>', 'Tag "span" must have class "tg-spoiler" at byte offset 0'),
])
async def test_invalid_html_cannot_be_parsed(api, http, markup, reason) -> None:
    body = error(await call(http, api, "sendMessage",
                            {"chat_id": 42, "text": markup, "parse_mode": "HTML"}), 400)
    assert body["description"] == f"Bad Request: can't parse entities: {reason}"
    assert api.sent() == []
    # the same text as plain text goes through
    ok(await call(http, api, "sendMessage", {"chat_id": 42, "text": markup}))


@pytest.mark.anyio
async def test_markdown_v2_and_markdown(api, http) -> None:
    good = ok(await call(http, api, "sendMessage", {
        "chat_id": 42, "parse_mode": "MarkdownV2",
        "text": "*bold* _it_ __u__ ~s~ ||sp|| `c` [l](https://t.me) 1\\.5\n```py\nx\n```"}))
    assert good["text"] == "bold it u s sp c l 1.5\nx\n"
    assert [e["type"] for e in good["entities"]] == [
        "bold", "italic", "underline", "strikethrough", "spoiler", "code", "text_link", "pre"]
    body = error(await call(http, api, "sendMessage", {"chat_id": 42, "text": "v1.5!",
                                                       "parse_mode": "MarkdownV2"}), 400)
    assert body["description"] == ("Bad Request: can't parse entities: Character '.' is "
                                   "reserved and must be escaped with the preceding '\\'")
    legacy = ok(await call(http, api, "sendMessage", {"chat_id": 42, "parse_mode": "Markdown",
                                                      "text": "*b* _i_ [x](http://a.b) 1.5!"}))
    assert legacy["text"] == "b i x 1.5!"
    error(await call(http, api, "sendMessage", {"chat_id": 42, "text": "*open",
                                                "parse_mode": "Markdown"}), 400,
          "Bad Request: can't parse entities: Can't find end of the entity starting at "
          "byte offset 0")
    error(await call(http, api, "sendMessage", {"chat_id": 42, "text": "x",
                                                "parse_mode": "BBCode"}), 400,
          "Bad Request: unsupported parse_mode")


def test_parsers_follow_tdlib() -> None:
    for name in entities.__all__:   # still importable from the fake, where they began
        assert getattr(fake, name) is getattr(entities, name), name
    assert parse_html("🏟 🏟&lt;<i>a</em   >".replace("</em   >", "</i>")) == (
        "🏟 🏟<a", [{"type": "italic", "offset": 6, "length": 1}])
    assert parse_html("&ge;&lt;&gt;&amp;&quot;&#12345678;&lt")[0] == '&ge;<>&"&#12345678;<'
    with pytest.raises(EntityParseError, match="unmatched surrogate"):
        parse_html("&#xDFDF;")
    assert parse_markdown_v2(">asd\n>q||e||w||\nasdad") == ("asd\nqew\nasdad", [
        {"type": "expandable_blockquote", "offset": 0, "length": 8},
        {"type": "spoiler", "offset": 5, "length": 1}])
    with pytest.raises(EntityParseError, match="Can't find end of Italic entity at byte "
                                               "offset 9"):
        parse_markdown_v2("🏟 🏟_abacaba")
    assert parse_markdown("`code` ```py\nx```") == ("code x", [
        {"offset": 0, "length": 4, "type": "code"},
        {"offset": 5, "length": 1, "type": "pre", "language": "py"}])


@pytest.mark.anyio
async def test_text_is_limited_to_4096_utf16_units_after_parsing(api, http) -> None:
    assert utf16_len("😀") == 2
    ok(await call(http, api, "sendMessage", {"chat_id": 42, "text": "😀" * 2048}))
    error(await call(http, api, "sendMessage", {"chat_id": 42, "text": "😀" * 2048 + "a"}),
          400, "Bad Request: message is too long")
    ok(await call(http, api, "sendMessage", {"chat_id": 42, "text": "a" * 4096}))
    error(await call(http, api, "sendMessage", {"chat_id": 42, "text": "a" * 4097}), 400,
          "Bad Request: message is too long")
    # markup does not count
    ok(await call(http, api, "sendMessage", {"chat_id": 42, "parse_mode": "HTML",
                                             "text": "<b>" + "&lt;" * 4096 + "</b>"}))


@pytest.mark.anyio
async def test_empty_text_and_missing_chat(api, http) -> None:
    error(await call(http, api, "sendMessage", {"chat_id": 42, "text": ""}), 400,
          "Bad Request: message text is empty")
    error(await call(http, api, "sendMessage", {"chat_id": 42}), 400,
          "Bad Request: message text is empty")
    error(await call(http, api, "sendMessage", {"chat_id": 42, "text": "<b> </b>",
                                                "parse_mode": "HTML"}), 400,
          "Bad Request: message must be non-empty")
    error(await call(http, api, "sendMessage", {"text": "x"}), 400,
          "Bad Request: chat_id is empty")
    error(await call(http, api, "sendMessage", {"chat_id": "nobody", "text": "x"}), 400,
          "Bad Request: chat not found")


@pytest.mark.anyio
async def test_strict_chats_migration_and_blocking(api, http) -> None:
    api.strict_chats = True
    error(await call(http, api, "sendMessage", {"chat_id": 77, "text": "x"}), 400,
          "Bad Request: chat not found")
    api.add_chat(77)
    api.add_chat(-100500, "supergroup", title="Team", username="team_chat")
    api.inject_message(88, "hi")   # a user who wrote is known
    ok(await call(http, api, "sendMessage", {"chat_id": 77, "text": "x"}))
    ok(await call(http, api, "sendMessage", {"chat_id": 88, "text": "x"}))
    assert ok(await call(http, api, "sendMessage", {"chat_id": "@team_chat",
                                                    "text": "x"}))["chat"]["id"] == -100500
    api.migrate_chat(-4001, -1004001)
    body = error(await call(http, api, "sendMessage", {"chat_id": -4001, "text": "x"}), 400,
                 "Bad Request: group chat was upgraded to a supergroup chat")
    assert body["parameters"] == {"migrate_to_chat_id": -1004001}
    assert ok(await call(http, api, "sendMessage", {"chat_id": -1004001,
                                                    "text": "x"}))["chat"]["type"] == "supergroup"
    api.block_chat(77)
    error(await call(http, api, "sendMessage", {"chat_id": 77, "text": "x"}), 403,
          "Forbidden: bot was blocked by the user")


@pytest.mark.anyio
async def test_migration_can_announce_itself(api, http) -> None:
    api.migrate_chat(-4001, -1004001, inject_service_messages=True)
    messages = [u["message"] for u in ok(await call(http, api, "getUpdates"))]
    assert messages[0]["chat"]["id"] == -4001 and messages[0]["migrate_to_chat_id"] == -1004001
    assert messages[1]["chat"]["id"] == -1004001
    assert messages[1]["migrate_from_chat_id"] == -4001


@pytest.mark.anyio
async def test_replies_threads_and_message_ids(api, http) -> None:
    forum = -1001234567890
    api.add_chat(forum, "supergroup", title="Forum", is_forum=True)
    api.inject_message(forum, "in a topic", message_thread_id=7, is_topic_message=True)
    reply = ok(await call(http, api, "sendMessage", {
        "chat_id": forum, "text": "answer", "message_thread_id": 7,
        "reply_parameters": {"message_id": 1},
        "link_preview_options": {"is_disabled": True}}))
    assert reply["message_id"] == 2
    assert reply["message_thread_id"] == 7 and reply["is_topic_message"] is True
    assert reply["reply_to_message"]["text"] == "in a topic"
    assert reply["link_preview_options"] == {"is_disabled": True}
    legacy = ok(await call(http, api, "sendMessage", {"chat_id": forum, "text": "again",
                                                      "reply_to_message_id": 2}, via="form"))
    assert legacy["reply_to_message"]["message_id"] == 2
    assert "reply_to_message" not in legacy["reply_to_message"]
    error(await call(http, api, "sendMessage", {"chat_id": forum, "text": "x",
                                                "reply_parameters": {"message_id": 99}}),
          400, "Bad Request: message to be replied not found")
    lenient = ok(await call(http, api, "sendMessage", {
        "chat_id": forum, "text": "x",
        "reply_parameters": {"message_id": 99, "allow_sending_without_reply": True}}))
    assert "reply_to_message" not in lenient
    # message ids count per chat
    assert ok(await call(http, api, "sendMessage", {"chat_id": 5, "text": "x"}))[
        "message_id"] == 1
    assert [s.message_id for s in api.sent(chat_id=forum)] == [2, 3, 4]
    assert [s.message_thread_id for s in api.sent(chat_id=forum)] == [7, None, None]
    assert api.sent(chat_id=forum)[0].reply_to == 1


# ---------------------------------------------------------------------------------------
# Injected messages
# ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_mentions_and_commands_get_utf16_entities(api, http) -> None:
    text = "héllo 😀 @ChatKernel_Bot /status@chatkernel_bot mail a@b.cd"
    api.inject_message(-4001, text, chat_type="group", from_id=5, from_username="alice")
    [update] = ok(await call(http, api, "getUpdates"))
    message = update["message"]
    assert message["chat"] == {"id": -4001, "type": "group", "title": "Group -4001"}
    assert message["from"]["id"] == 5 and message["from"]["username"] == "alice"
    units = text.encode("utf-16-le")

    def piece(entity: dict[str, Any]) -> str:
        start, end = entity["offset"] * 2, (entity["offset"] + entity["length"]) * 2
        return units[start:end].decode("utf-16-le")

    assert [(e["type"], piece(e)) for e in message["entities"]] == [
        ("mention", "@ChatKernel_Bot"), ("bot_command", "/status@chatkernel_bot")]


@pytest.mark.anyio
async def test_replies_to_the_bot_and_edits(api, http) -> None:
    sent = ok(await call(http, api, "sendMessage", {"chat_id": 42, "text": "bot says"}))
    api.inject_message(42, "user replies", reply_to_bot=True)
    api.inject_message(43, "reply with no earlier bot message", reply_to_bot=True)
    api.inject_message(42, "user replies (edited)", edited_message_id=sent["message_id"] + 1)
    first, second, edit = ok(await call(http, api, "getUpdates"))
    assert first["message"]["reply_to_message"]["message_id"] == sent["message_id"]
    assert first["message"]["reply_to_message"]["from"]["id"] == api.bot_id
    assert second["message"]["reply_to_message"]["from"]["id"] == api.bot_id
    assert edit["edited_message"]["message_id"] == first["message"]["message_id"]
    assert edit["edited_message"]["text"] == "user replies (edited)"
    assert "edit_date" in edit["edited_message"]


@pytest.mark.anyio
async def test_a_message_from_the_bot_itself(api, http) -> None:
    api.inject_message(42, "user first")
    api.inject_message(42, "the bot's own", from_bot=True)
    user, own = [u["message"] for u in ok(await call(http, api, "getUpdates"))]
    assert own["from"] == api.bot_user() and own["from"]["is_bot"] is True
    assert own["chat"] == user["chat"]   # the user's private chat, as before


@pytest.mark.anyio
async def test_injected_media_can_be_downloaded(api, http) -> None:
    picture = png(200, 100)
    photo = api.add_file(picture, "cat.png", "image/png")
    document = api.add_file(b"%PDF-1.4", "doc.pdf", "application/pdf")
    api.inject_message(42, None, photo=photo, caption="a cat @chatkernel_bot")
    api.inject_message(42, None, document=document)
    cat, doc = [u["message"] for u in ok(await call(http, api, "getUpdates"))]
    thumb, full = cat["photo"]
    assert full["file_id"] == photo and (full["width"], full["height"]) == (200, 100)
    assert thumb["width"] < full["width"]
    assert cat["caption"] == "a cat @chatkernel_bot"
    assert cat["caption_entities"] == [{"offset": 6, "length": 15, "type": "mention"}]
    assert doc["document"]["file_name"] == "doc.pdf"
    assert doc["document"]["mime_type"] == "application/pdf"
    for file_id, expected in ((full["file_id"], picture), (document, b"%PDF-1.4")):
        info = ok(await call(http, api, "getFile", {"file_id": file_id}))
        assert info["file_size"] == len(expected)
        async with http.get(f"{api.base_url}/file/bot{TOKEN}/{info['file_path']}") as resp:
            assert resp.status == 200 and await resp.read() == expected
    # the thumbnail is another (small) file: taking photo[0] gets the wrong bytes
    info = ok(await call(http, api, "getFile", {"file_id": thumb["file_id"]}))
    async with http.get(f"{api.base_url}/file/bot{TOKEN}/{info['file_path']}") as resp:
        assert await resp.read() != picture


@pytest.mark.anyio
async def test_get_file_errors(api, http) -> None:
    error(await call(http, api, "getFile", {"file_id": "nope"}), 400,
          "Bad Request: wrong file_id or the file is temporarily unavailable")
    big = api.add_file(b"\0" * (20 * MB + 1), "big.bin")
    error(await call(http, api, "getFile", {"file_id": big}), 400,
          "Bad Request: file is too big")
    async with http.get(f"{api.base_url}/file/bot{TOKEN}/documents/missing.bin") as resp:
        assert resp.status == 404
    async with http.get(f"{api.base_url}/file/bot999:x/{api.file(big).file_path}") as resp:
        assert resp.status == 404


# ---------------------------------------------------------------------------------------
# Media out
# ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_multipart_uploads_are_recorded_and_answered(api, http) -> None:
    picture = png(320, 240)
    photo = ok(await call(http, api, "sendPhoto", {
        "chat_id": 42, "photo": ("cat.png", picture, "image/png"),
        "caption": "<b>a</b> cat", "parse_mode": "HTML",
        "reply_parameters": json.dumps({"message_id": 1, "allow_sending_without_reply": True})},
        via="multipart"))
    assert (photo["photo"][-1]["width"], photo["photo"][-1]["height"]) == (320, 240)
    assert photo["caption"] == "a cat"
    assert photo["caption_entities"] == [{"type": "bold", "offset": 0, "length": 1}]
    [record] = api.sent()
    assert record.method == "sendPhoto" and record.kind == "photo"
    assert record.text == "<b>a</b> cat" and record.plain_text == "a cat"
    [upload] = record.files
    assert (upload.field, upload.source, upload.filename, upload.content_type,
            upload.data, upload.method) == ("photo", "upload", "cat.png", "image/png",
                                             picture, "sendPhoto")
    kinds = {"sendDocument": ("document", "report.pdf", "application/pdf"),
             "sendVideo": ("video", "clip.mp4", "video/mp4"),
             "sendAudio": ("audio", "song.mp3", "audio/mpeg"),
             "sendVoice": ("voice", "note.ogg", "audio/ogg"),
             "sendAnimation": ("animation", "fun.gif", "image/gif")}
    for method, (name, filename, mime) in kinds.items():
        message = ok(await call(http, api, method, {
            "chat_id": 42, name: (filename, b"bytes of " + filename.encode(), mime),
            "duration": 3}, via="multipart"))
        media = message[name]
        assert media["file_size"] == len(b"bytes of " + filename.encode())
        assert media.get("mime_type") == mime
        if name in ("video", "audio", "voice", "animation"):
            assert media["duration"] == 3
        assert api.sent()[-1].files[0].filename == filename
    assert "document" in api.sent()[-1].message   # animations also carry document
    # the returned file_id can be sent again, but not as another kind
    reuse = ok(await call(http, api, "sendPhoto", {"chat_id": 42,
                                                   "photo": photo["photo"][-1]["file_id"]}))
    assert reuse["photo"][-1]["file_id"] == photo["photo"][-1]["file_id"]
    assert api.sent()[-1].files[0].source == "file_id"
    error(await call(http, api, "sendDocument", {"chat_id": 42,
                                                 "document": photo["photo"][-1]["file_id"]}),
          400, "Bad Request: type of file mismatch")
    error(await call(http, api, "sendDocument", {"chat_id": 42, "document": "made-up"}), 400,
          "Bad Request: wrong file identifier/HTTP URL specified")
    by_url = ok(await call(http, api, "sendDocument", {"chat_id": 42,
                                                       "document": "https://x.example/a.pdf"}))
    assert by_url["document"]["file_name"] == "a.pdf"
    assert api.sent()[-1].files[0].url == "https://x.example/a.pdf"
    error(await call(http, api, "sendPhoto", {"chat_id": 42}), 400,
          "Bad Request: there is no photo in the request")


@pytest.mark.anyio
async def test_attach_references_and_caption_limit(api, http) -> None:
    message = ok(await call(http, api, "sendDocument", {
        "chat_id": 42, "document": "attach://file1",
        "file1": ("a.txt", b"attached", "text/plain")}, via="multipart"))
    assert message["document"]["file_name"] == "a.txt"
    assert api.unknown_params == []
    ok(await call(http, api, "sendDocument", {
        "chat_id": 42, "document": ("b.txt", b"x", "text/plain"), "caption": "😀" * 512},
        via="multipart"))
    error(await call(http, api, "sendDocument", {
        "chat_id": 42, "document": ("b.txt", b"x", "text/plain"), "caption": "😀" * 512 + "!"},
        via="multipart"), 400, "Bad Request: message caption is too long")


@pytest.mark.anyio
async def test_upload_size_caps(api, http) -> None:
    assert (api.max_photo_upload, api.max_upload, api.max_download) == (
        10 * MB, 50 * MB, 20 * MB)
    body = error(await call(http, api, "sendPhoto", {
        "chat_id": 42, "photo": ("big.png", b"\0" * (10 * MB + 1), "image/png")},
        via="multipart"), 400)
    assert body["description"].startswith("Bad Request: ")
    ok(await call(http, api, "sendDocument", {
        "chat_id": 42, "document": ("big.bin", b"\0" * (10 * MB + 1), "application/zip")},
        via="multipart"))
    api.max_upload = 1 * MB   # the 50 MB rule, at a size quick to send
    error(await call(http, api, "sendDocument", {
        "chat_id": 42, "document": ("huge.bin", b"\0" * (MB + 1), "application/zip")},
        via="multipart"), 413, "Request Entity Too Large")
    error(await call(http, api, "sendDocument", {
        "chat_id": 42, "document": ("empty.bin", b"", "application/zip")}, via="multipart"),
        400, "Bad Request: file must be non-empty")


@pytest.mark.anyio
async def test_chat_actions(api, http) -> None:
    assert ok(await call(http, api, "sendChatAction", {"chat_id": 42, "action": "typing",
                                                       "message_thread_id": 3})) is True
    [action] = await api.wait_for_chat_actions(1)
    assert (action.chat_id, action.action, action.message_thread_id) == (42, "typing", 3)
    assert action.timestamp > 0
    error(await call(http, api, "sendChatAction", {"chat_id": 42, "action": "dancing"}), 400,
          "Bad Request: wrong parameter action in request")


@pytest.mark.anyio
async def test_bot_commands(api, http) -> None:
    commands = [{"command": "help", "description": "What I can do"},
                {"command": "status", "description": "Status"}]
    assert ok(await call(http, api, "setMyCommands", {"commands": commands}, via="form"))
    assert ok(await call(http, api, "getMyCommands")) == commands
    assert api.commands() == commands
    error(await call(http, api, "setMyCommands", {"commands": [
        {"command": "Bad Command", "description": "x"}]}), 400,
        "Bad Request: BOT_COMMAND_INVALID")


# ---------------------------------------------------------------------------------------
# Rate limits, latency, injected faults
# ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_rate_limits_answer_429_with_retry_after(api, http) -> None:
    # Off by default.
    for _ in range(5):
        ok(await call(http, api, "sendMessage", {"chat_id": 42, "text": "x"}))
    api.enforce_limits(per_bot_per_second=1000, per_chat_per_second=1,
                       per_group_per_minute=2)
    answers = [await call(http, api, "sendMessage", {"chat_id": 42, "text": "y"})
               for _ in range(5)]
    throttled = [a for a in answers if a[0] == 429]
    assert throttled and api.throttled == len(throttled)
    body = error(throttled[0], 429)
    retry_after = body["parameters"]["retry_after"]
    assert body["description"] == f"Too Many Requests: retry after {retry_after}"
    assert retry_after == 1
    # 20 a minute per group (here 2): the third send waits for most of a minute
    api.enforce_limits(per_bot_per_second=1000, per_chat_per_second=1000,
                       per_group_per_minute=2)
    for _ in range(2):
        ok(await call(http, api, "sendMessage", {"chat_id": -4001, "text": "g"}))
    body = error(await call(http, api, "sendMessage", {"chat_id": -4001, "text": "g"}), 429)
    assert 1 <= body["parameters"]["retry_after"] <= 60
    # throttled sends were not delivered
    assert len(api.sent(chat_id=-4001)) == 2
    api.enforce_limits(per_bot_per_second=2, per_chat_per_second=1000,
                       per_group_per_minute=1000)
    answers = [await call(http, api, "sendMessage", {"chat_id": 100 + i, "text": "b"})
               for i in range(10)]
    assert any(a[0] == 429 for a in answers)
    api.disable_limits()
    ok(await call(http, api, "sendMessage", {"chat_id": 42, "text": "free"}))


@pytest.mark.slow
@pytest.mark.anyio
async def test_latency_delays_every_answer(api, http) -> None:
    api.latency = 0.5
    answers: list[Any] = []

    async def me() -> None:
        answers.append(await call(http, api, "getMe"))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(me)
            await api.wait_until(lambda: bool(api.calls_to("getMe")))
            assert api.calls[-1].status is None   # arrived, not answered yet
    assert ok(answers[0])["username"] == "chatkernel_bot"
    assert api.calls[-1].status == 200


@pytest.mark.anyio
async def test_fail_next_answers_the_queued_errors(api, http) -> None:
    api.fail_next("sendMessage", 429, "Too Many Requests: retry after 3", {"retry_after": 3})
    api.fail_next("*", 502, "Bad Gateway", times=2)
    body = error(await call(http, api, "sendMessage", {"chat_id": 42, "text": "x"}), 429,
                 "Too Many Requests: retry after 3")
    assert body["parameters"] == {"retry_after": 3}
    error(await call(http, api, "getMe"), 502, "Bad Gateway")
    error(await call(http, api, "sendMessage", {"chat_id": 42, "text": "x"}), 502)
    ok(await call(http, api, "sendMessage", {"chat_id": 42, "text": "x"}))
    assert len(api.sent()) == 1   # failed calls had no effect
    assert [c.status for c in api.calls] == [429, 502, 502, 200]


@pytest.mark.anyio
async def test_drop_next_closes_the_connection(api, http) -> None:
    api.drop_next("sendMessage")
    with pytest.raises(aiohttp.ClientError):
        await call(http, api, "sendMessage", {"chat_id": 42, "text": "lost"})
    assert api.sent() == [] and api.calls[-1].params["text"] == "lost"
    api.drop_next("sendMessage", after_processing=True)
    with pytest.raises(aiohttp.ClientError):
        await call(http, api, "sendMessage", {"chat_id": 42, "text": "sent, answer lost"})
    assert [s.text for s in api.sent()] == ["sent, answer lost"]
    ok(await call(http, api, "sendMessage", {"chat_id": 42, "text": "fine"}))
