"""The checks every request to the gateway's HTTP server goes through (core/gateway/http_guard.py)."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import anyio
import pytest
from aiohttp import web

from chatkernel.core.gateway import http_guard
from chatkernel.core.gateway.http_guard import MAX_BODY_BYTES, RequestError, parse_json_object
from chatkernel.testing.contract import wait_until

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def serve(app: web.Application, **handler_args: Any) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None, **handler_args)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def guarded_app(*routes: tuple[str, str, Callable]) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    http_guard.install(app)
    for method, path, handler in routes:
        app.router.add_route(method, path, handler)
    return app


async def parses_json(request: web.Request) -> web.Response:
    return web.json_response(await request.json())


def alive(kind: type) -> int:
    return sum(isinstance(obj, kind) for obj in gc.get_objects())


async def chunks(total: int) -> AsyncIterator[bytes]:
    chunk = b"x" * (256 * 1024)
    for _ in range(total // len(chunk)):
        yield chunk


async def test_an_oversized_body_rejected_by_aiohttp_leaves_no_cycle_behind() -> None:
    # aiohttp keeps a handler's HTTPException in a frame its own traceback holds: a
    # cycle with the body's buffer in it, which only the collector frees. The guard
    # answers in its place, so reference counting frees everything at once.
    app = guarded_app(("POST", "/json", parses_json))
    gc.collect()
    gc.disable()
    try:
        async with serve(app) as base, aiohttp.ClientSession() as http:
            for _ in range(3):  # chunked: nothing declares the size, the reader finds out
                async with http.post(f"{base}/json", data=chunks(MAX_BODY_BYTES + 1024 * 1024),
                                     headers={"Content-Type": "application/json"}) as r:
                    assert r.status == 413
            # freed as the handlers end (a cycle would keep them until a collection)
            await wait_until(lambda: alive(web.HTTPRequestEntityTooLarge) == 0, timeout=5,
                             what="the 413s freed", state=lambda: alive(
                                 web.HTTPRequestEntityTooLarge), interval=0.01)
    finally:
        gc.enable()


async def test_a_raised_http_exception_is_answered_as_raised() -> None:
    async def redirects(request: web.Request) -> web.Response:
        raise web.HTTPFound("/elsewhere")

    async def refuses(request: web.Request) -> web.Response:
        raise web.HTTPBadRequest(text='{"error": "no"}', content_type="application/json")

    gc.collect()
    gc.disable()
    try:
        async with serve(guarded_app(("GET", "/go", redirects), ("GET", "/no", refuses))) \
                as base, aiohttp.ClientSession() as http:
            async with http.get(f"{base}/go", allow_redirects=False) as r:
                assert r.status == 302 and r.headers["Location"] == "/elsewhere"
            async with http.get(f"{base}/no") as r:
                assert r.status == 400 and await r.json() == {"error": "no"}
            # freed as the handlers end (a cycle would keep them until a collection)
            await wait_until(lambda: alive(web.HTTPFound) == alive(web.HTTPBadRequest) == 0,
                             timeout=5, what="the answers freed", interval=0.01)
    finally:
        gc.enable()


async def test_a_request_the_store_cannot_record_is_answered_503_to_be_sent_again() -> None:
    from chatkernel.core.store.base import StoreError

    async def journals(request: web.Request) -> web.Response:
        raise StoreError("redis at redis://127.0.0.1:1/0: journal_inbound failed")

    async with serve(guarded_app(("POST", "/hook", journals))) as base, \
            aiohttp.ClientSession() as http:
        async with http.post(f"{base}/hook", json={}) as r:
            assert r.status == 503 and r.headers["Retry-After"] == "5"
            assert "send it again" in (await r.json())["error"]


async def test_a_declared_oversized_body_is_refused_before_it_is_read() -> None:
    reached = []

    async def handler(request: web.Request) -> web.Response:
        reached.append(request)
        return web.json_response({})

    # After answering, aiohttp reads a refused body for lingering_time (10 s by default)
    # so a client still sending gets the answer, and does not notice this one hung up:
    # the server's cleanup would wait for it.
    async with serve(guarded_app(("POST", "/x", handler)), lingering_time=0.2) as base:
        reader = await anyio.connect_tcp("127.0.0.1", int(base.rsplit(":", 1)[1]))
        async with reader:
            await reader.send(b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              b"Content-Type: application/json\r\n"
                              b"Content-Length: %d\r\n\r\n" % (100 * 1024 * 1024))
            answer = await reader.receive()
    assert answer.startswith(b"HTTP/1.1 413")
    assert b"larger than 8 MB" in answer
    assert reached == []


async def test_read_json_object_enforces_its_own_limit() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(await http_guard.read_json_object(request, limit=1024))

    async with serve(guarded_app(("POST", "/x", handler))) as base, \
            aiohttp.ClientSession() as http:
        async with http.post(f"{base}/x", json={"a": "b" * 2000}) as r:
            assert r.status == 413
            assert (await r.json())["error"] == "the request body is larger than 1 KB"
        async with http.post(f"{base}/x", data=chunks(256 * 1024),
                             headers={"Content-Type": "application/json"}) as r:
            assert r.status == 413
        async with http.post(f"{base}/x", json={"a": 1}) as r:
            assert r.status == 200 and await r.json() == {"a": 1}


@pytest.mark.parametrize("raw", [
    b"", b"not json", b"[1]", b'"text"', b"\xff\xfe\x00", b"[" * 100_000 + b"]" * 100_000,
    b'{"a": ' * 100_000 + b"1" + b"}" * 100_000, b'{"a": NaN}', b'{"a": Infinity}',
    b'{"a": 1e999}', b'{"a": ' + b"9" * 5000 + b"}",
])
def test_parse_json_object_refuses_what_is_not_a_json_object(raw: bytes) -> None:
    with pytest.raises(RequestError) as caught:
        parse_json_object(raw)
    assert caught.value.status == 400
    assert str(caught.value) == "the body must be a JSON object"


def test_parse_json_object_takes_an_object() -> None:
    assert parse_json_object(b'{"a": [1, 2.5, "\\ud800"]}') == {"a": [1, 2.5, "\ud800"]}


@pytest.mark.parametrize("raw", [
    '{"a": "é"}'.encode("utf-16"), '{"a": "é"}'.encode("utf-32-le"),
    b'\xef\xbb\xbf{"a": "\xc3\xa9"}', '{"a": "é"}',
])
def test_parse_json_object_reads_bytes_and_text_as_json_loads_does(raw: bytes | str) -> None:
    assert parse_json_object(raw) == {"a": "é"}


def test_parse_json_object_refuses_text_that_starts_with_a_byte_order_mark() -> None:
    with pytest.raises(RequestError, match="must be a JSON object"):
        parse_json_object('\ufeff{"a": 1}')


# -- Host, Origin, content type, headers ------------------------------------------------


async def echo_json(request: web.Request) -> web.Response:
    return web.json_response({"body": await request.text()})


async def stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(b"data: hi\n\n")
    return response


def checked_app(**hosts) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    http_guard.install(app, hosts=http_guard.HostCheck(**hosts),
                       webhooks=["/chat/main/webhook"])
    for method, path, handler in [("GET", "/page", echo_json), ("POST", "/api", echo_json),
                                  ("POST", "/chat/main/webhook", echo_json),
                                  ("GET", "/events", stream)]:
        app.router.add_route(method, path, handler)
    return app


@pytest.mark.parametrize(("header", "name"), [
    ("127.0.0.1:8787", "127.0.0.1"), ("LOCALHOST", "localhost"), ("[::1]:80", "::1"),
    ("example.com.", "example.com"), ("a.example.com:443", "a.example.com"),
    ("[::1]", "::1"), ("host:", None), ("host:²", None), ("host:123456", None),
    ("[::1]x", None), ("a:b:c", None), ("", None),
])
def test_host_name_of_a_host_header(header: str, name: str | None) -> None:
    assert http_guard.host_name(header) == name


@pytest.mark.parametrize(("host", "allowed"), [
    (None, True), ("127.0.0.1:8787", True), ("[::1]:8787", True), ("192.168.1.5", True),
    ("localhost:8787", True), ("chat.localhost", True), ("gw.lan:8787", True),
    ("chat.example.com", True), ("evil.example", False), ("127.0.0.1.evil.example", False),
    ("localhost.evil.example", False), ("", False),
])
def test_which_hosts_are_the_gateways(host: str | None, allowed: bool) -> None:
    check = http_guard.HostCheck("gw.lan", frozenset({"chat.example.com"}))
    assert check.allows(host) is allowed


def test_each_check_answers_for_its_own_names_whatever_another_answered_first() -> None:
    # The answers are remembered by Host header: a check must not get another's.
    lan, public = http_guard.HostCheck("gw.lan"), http_guard.HostCheck(
        "0.0.0.0", frozenset({"chat.example.com"}))
    for _ in range(2):
        assert lan.allows("gw.lan:8787") and not public.allows("gw.lan:8787")
        assert public.allows("chat.example.com") and not lan.allows("chat.example.com")


async def test_a_request_for_a_foreign_host_is_refused_except_on_webhooks() -> None:
    async with serve(checked_app()) as base, aiohttp.ClientSession() as http:
        rebound = {"Host": "attacker.example:8787"}
        async with http.get(f"{base}/page", headers=rebound) as r:
            assert r.status == 403
            error = (await r.json())["error"]
            assert "'attacker.example:8787'" in error and "gateway.public_hosts" in error
        async with http.post(f"{base}/api", json={}, headers=rebound) as r:
            assert r.status == 403
        async with http.get(f"{base}/page", headers={"Host": "localhost:1"}) as r:
            assert r.status == 200
        # The platform calls its webhook by the public name it was given, with whatever
        # content type it uses; the channel checks the signature.
        async with http.post(f"{base}/chat/main/webhook", data="a=1",
                             headers={"Host": "bot.example.org",
                                      "Content-Type": "application/x-www-form-urlencoded"}) as r:
            assert r.status == 200 and (await r.json())["body"] == "a=1"


async def test_public_hosts_are_answered() -> None:
    app = checked_app(public_hosts=frozenset({"chat.example.com"}))
    async with serve(app) as base, aiohttp.ClientSession() as http:
        proxied = {"Host": "chat.example.com", "Origin": "https://chat.example.com"}
        async with http.post(f"{base}/api", json={"a": 1}, headers=proxied) as r:
            assert r.status == 200
        # Behind a proxy that rewrites Host, the Origin is still the public name.
        async with http.post(f"{base}/api", json={"a": 1},
                             headers={"Origin": "https://chat.example.com"}) as r:
            assert r.status == 200


async def test_a_cross_site_request_is_refused() -> None:
    async with serve(checked_app()) as base, aiohttp.ClientSession() as http:
        host = base.removeprefix("http://")
        for origin in ("https://evil.example", "null", "http://127.0.0.1:1", "not an origin"):
            async with http.post(f"{base}/api", json={}, headers={"Origin": origin}) as r:
                assert r.status == 403, origin
                assert "another site" in (await r.json())["error"]
        async with http.post(f"{base}/chat/main/webhook", json={},
                             headers={"Origin": "https://evil.example"}) as r:
            assert r.status == 403
        for origin in (f"http://{host}", f"HTTP://{host.upper()}"):  # the gateway's own page
            async with http.post(f"{base}/api", json={}, headers={"Origin": origin}) as r:
                assert r.status == 200, origin
        async with http.post(f"{base}/api", json={}) as r:  # no Origin: not a browser
            assert r.status == 200
        # Reads are the browser's to protect (no CORS header is ever sent).
        async with http.get(f"{base}/page", headers={"Origin": "https://evil.example"}) as r:
            assert r.status == 200 and "Access-Control-Allow-Origin" not in r.headers


async def test_state_changing_requests_must_be_json() -> None:
    async with serve(checked_app()) as base, aiohttp.ClientSession() as http:
        for content_type in ("text/plain", "application/x-www-form-urlencoded",
                             "multipart/form-data; boundary=x", "", "text/json"):
            headers = {"Content-Type": content_type} if content_type else {}
            async with http.post(f"{base}/api", data=b'{"a": 1}', headers=headers) as r:
                assert r.status == 415, content_type
                assert "Content-Type: application/json" in (await r.json())["error"]
        for content_type in ("application/json; charset=utf-8", "application/ld+json"):
            async with http.post(f"{base}/api", data=b'{"a": 1}',
                                 headers={"Content-Type": content_type}) as r:
                assert r.status == 200, content_type
        async with http.post(f"{base}/api") as r:  # no body: nothing to be JSON
            assert r.status == 200


async def test_every_response_forbids_framing_and_sniffing() -> None:
    async with serve(checked_app()) as base, aiohttp.ClientSession() as http:
        for method, path, headers in [("GET", "/page", {}), ("GET", "/missing", {}),
                                      ("GET", "/events", {}),
                                      ("GET", "/page", {"Host": "evil.example"}),
                                      ("POST", "/api", {"Content-Type": "text/plain"})]:
            async with http.request(method, f"{base}{path}", headers=headers) as r:
                assert r.headers["X-Frame-Options"] == "DENY", path
                assert r.headers["Content-Security-Policy"] == "frame-ancestors 'none'"
                assert r.headers["X-Content-Type-Options"] == "nosniff"
