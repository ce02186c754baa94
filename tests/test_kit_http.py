"""The channel kit's HTTP client against a real server on 127.0.0.1: answers, the
classification of every failure, redaction, uploads, capped downloads, the
long-poll connection."""

from __future__ import annotations

import socket
from email.utils import formatdate

import anyio
import pytest
from aiohttp import web

from chatkernel.channels import HttpClient, PlatformError, SendError, parse_retry_after

pytestmark = pytest.mark.anyio

SECRET = "123456:SECRET-token-value-abcdefghijklmn"


class Server:
    """A small HTTP server whose routes answer what each test needs."""

    def __init__(self) -> None:
        self.seen: list[web.Request] = []
        self.bodies: dict[str, object] = {}
        self.release = anyio.Event()
        self.url = ""

    async def __aenter__(self) -> "Server":
        app = web.Application()
        app.router.add_route("*", "/ok", self.ok)
        app.router.add_get("/status/{code}", self.status)
        app.router.add_get("/slow", self.slow)
        app.router.add_get("/hold", self.hold)
        app.router.add_post("/drop", self.drop)
        app.router.add_post("/upload", self.upload)
        app.router.add_get("/file/{size}", self.file)
        app.router.add_get("/text", self.text)
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()
        await self.runner.cleanup()

    async def ok(self, request: web.Request) -> web.Response:
        self.seen.append(request)
        body = await request.read()
        return web.json_response({"ok": True, "method": request.method, "body": body.decode(),
                                  "query": dict(request.query),
                                  "auth": request.headers.get("Authorization"),
                                  "type": request.content_type})

    async def text(self, request: web.Request) -> web.Response:
        return web.Response(text="<html>oops</html>")

    async def status(self, request: web.Request) -> web.Response:
        code = int(request.match_info["code"])
        headers = {"Retry-After": request.query["retry"]} if "retry" in request.query else {}
        return web.json_response({"ok": False, "error": "nope"}, status=code, headers=headers)

    async def slow(self, request: web.Request) -> web.Response:
        await anyio.sleep(5)  # real time: answers after the client's timeout (bounded)
        return web.json_response({})

    async def hold(self, request: web.Request) -> web.Response:
        await self.release.wait()
        return web.json_response({"held": True})

    async def drop(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        assert request.transport is not None
        request.transport.close()
        return web.Response()

    async def upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload = form["file"]
        assert isinstance(upload, web.FileField)
        return web.json_response({"name": upload.filename, "data": upload.file.read().decode(),
                                  "type": upload.content_type,
                                  "caption": form["caption"], "extra": form["extra"]})

    async def file(self, request: web.Request) -> web.StreamResponse:
        size = int(request.match_info["size"])
        response = web.StreamResponse()
        if "length" in request.query:
            response.content_length = size
        await response.prepare(request)
        for start in range(0, size, 1000):
            await response.write(b"x" * min(1000, size - start))
        await response.write_eof()
        return response


@pytest.fixture
async def server():
    async with Server() as running:
        yield running


@pytest.fixture
async def client(server):
    http = HttpClient(f"{server.url}/", secrets=[SECRET], headers={"Authorization": "Bearer t"},
                      timeout=5, platform="the test platform")
    yield http
    await http.close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_an_answer_whatever_its_status_with_json_query_and_headers(client):
    answer = await client.request("POST", "ok", json={"a": 1, "t": "é"}, params={
        "n": 2, "s": "x", "skip": None})
    assert answer.ok and answer.status == 200
    body = answer.json()
    assert body["body"] == '{"a":1,"t":"é"}' and body["type"] == "application/json"
    assert body["query"] == {"n": "2", "s": "x"} and body["auth"] == "Bearer t"
    missing = await client.request("GET", "status/404")
    assert not missing.ok and missing.status == 404 and missing.json() == {"ok": False,
                                                                           "error": "nope"}


async def test_a_body_that_is_not_json_is_a_platform_error(client):
    answer = await client.request("GET", "text", what="getThing")
    with pytest.raises(PlatformError, match="getThing: HTTP 200 without a readable answer"):
        answer.json()


async def test_refused_before_sending_is_not_sent_and_safe_to_repeat():
    http = HttpClient(f"http://127.0.0.1:{closed_port()}/bot{SECRET}", secrets=[SECRET],
                      platform="the test platform")
    try:
        with pytest.raises(PlatformError) as info:
            await http.request("POST", "sendMessage", json={"x": 1})
    finally:
        await http.close()
    error = info.value
    assert error.kind == "not_sent" and error.repeatable and error.status is None
    assert "sendMessage: cannot connect to the test platform" in str(error)
    sent = error.send_error()
    assert sent.retryable and not sent.delivery_unknown
    assert SECRET not in str(error)


@pytest.mark.slow
async def test_no_answer_after_sending_is_delivery_unknown(client):
    with pytest.raises(PlatformError) as timed_out:
        await client.request("GET", "slow", timeout=0.2)
    with pytest.raises(PlatformError) as dropped:
        await client.request("POST", "drop", json={"text": "hi"})
    for error in (timed_out.value, dropped.value):
        assert error.kind == "no_answer" and not error.repeatable
        sent = error.send_error()
        assert sent.delivery_unknown and not sent.retryable
    assert "no answer within 0.2s" in str(timed_out.value)


@pytest.mark.parametrize(("code", "kind", "retryable"), [
    (429, "rate_limited", True), (502, "unavailable", True), (503, "unavailable", True),
    (504, "unavailable", True), (500, "rejected", False), (400, "rejected", False),
    (403, "rejected", False)])
async def test_answers_are_classified_by_status(client, code, kind, retryable):
    answer = await client.request("GET", f"status/{code}", params={"retry": "7"})
    error = PlatformError.from_answer(answer, "nope", code="some_code")
    assert error.kind == kind and error.repeatable is retryable
    assert error.retry_after == 7.0 and error.status == code
    sent = error.send_error()
    assert sent.retryable is retryable and sent.status == code and sent.code == "some_code"
    assert not sent.delivery_unknown
    # The same classification for a client that is not this one (an SDK's answer).
    again = SendError.from_http(code, "nope", retry_after=7)
    assert (again.retryable, again.retry_after, again.status) == (retryable, 7, code)


async def test_a_platform_can_say_rate_limited_in_its_body_and_flags_are_added(client):
    answer = await client.request("GET", "status/200")
    error = PlatformError.from_answer(answer, "slow down", rate_limited=True, retry_after=3)
    assert error.kind == "rate_limited" and error.retry_after == 3
    sent = error.send_error(markup_rejected=True)
    assert sent.retryable and sent.markup_rejected
    assert SendError.from_http(None, "lost").delivery_unknown


def test_retry_after_reads_seconds_and_http_dates():
    assert parse_retry_after("12") == 12.0 and parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    import time

    in_a_minute = parse_retry_after(formatdate(time.time() + 60, usegmt=True))
    assert in_a_minute is not None and 55 <= in_a_minute <= 61


def test_every_secret_is_redacted_longest_first():
    http = HttpClient("", secrets=["abc", "abcdef", ""])
    http.add_secret("later-secret")
    assert http.redact("x abcdef abc later-secret") == "x *** *** ***"


async def test_multipart_upload_sends_the_file_and_the_fields(client, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello file")
    answer = await client.request("POST", "upload", files={"file": path},
                                  data={"caption": "a caption", "extra": {"k": [1]},
                                        "skipped": None})
    assert answer.json() == {"name": "notes.txt", "data": "hello file", "type": "text/plain",
                             "caption": "a caption", "extra": '{"k":[1]}'}


async def test_a_multipart_file_part_can_name_its_content_type(client, tmp_path):
    """A platform that refuses the type guessed from the name (WhatsApp refuses
    ``audio/opus`` for an .opus file) gets the type the channel names."""
    path = tmp_path / "voice.opus"
    path.write_text("opus bytes")
    answer = await client.request("POST", "upload", data={"caption": "", "extra": ""},
                                  files={"file": (path, "audio/ogg; codecs=opus")})
    assert answer.json()["type"] == "audio/ogg; codecs=opus"
    assert answer.json()["name"] == "voice.opus"


async def test_a_raw_body_upload_sends_the_bytes_as_they_are(client, tmp_path):
    """A platform that takes a file as the request's whole body (Matrix's media upload):
    ``data=`` bytes, or an open file (streamed), with the part's type as a header."""
    path = tmp_path / "picture.png"
    path.write_bytes(b"not really a png")
    answer = await client.request("POST", "ok", data=path.read_bytes(),
                                  headers={"Content-Type": "image/png"},
                                  params={"filename": path.name})
    assert answer.json()["body"] == "not really a png" and answer.json()["type"] == "image/png"
    assert answer.json()["query"] == {"filename": "picture.png"}
    with path.open("rb") as handle:
        answer = await client.request("POST", "ok", data=handle,
                                      headers={"Content-Type": "image/png"})
    assert answer.json()["body"] == "not really a png" and answer.json()["type"] == "image/png"


@pytest.mark.parametrize("with_length", [True, False])
async def test_downloads_stream_and_stop_at_the_cap(client, with_length):
    query = "?length=1" if with_length else ""
    chunks = [chunk async for chunk in client.download(f"file/5000{query}", max_bytes=5000)]
    assert b"".join(chunks) == b"x" * 5000
    with pytest.raises(PlatformError, match="larger than") as info:
        async for _ in client.download(f"file/5001{query}", max_bytes=5000):
            pass
    assert info.value.kind == "rejected"
    with pytest.raises(PlatformError, match="HTTP 404"):
        async for _ in client.download("missing", max_bytes=10):
            pass


async def test_a_long_poll_has_its_own_connection(client, server):
    assert client.poll_session is not client.session
    assert client.poll_session.connector.limit == 1
    async with anyio.create_task_group() as tg:
        held: list[object] = []

        async def poll() -> None:
            held.append((await client.request("GET", "hold", long_poll=True)).json())

        tg.start_soon(poll)
        with anyio.fail_after(5):  # a send while the poll holds its connection
            while not any(r.path == "/ok" for r in server.seen):
                assert (await client.request("GET", "ok")).ok
            await anyio.sleep(0)
        server.release.set()
    assert held == [{"held": True}]


async def test_sessions_are_made_again_after_close(client):
    first = client.session
    await client.close()
    assert first.closed and client.session is not first
    assert (await client.request("GET", "ok")).ok
