"""The checks every request to the gateway's HTTP server goes through (core/http_guard.py)."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import aiohttp
import anyio
import pytest
from aiohttp import web

from chatkernel.core import http_guard
from chatkernel.core.http_guard import MAX_BODY_BYTES, RequestError, parse_json_object

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None)
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
            await anyio.sleep(0.05)
            assert alive(web.HTTPRequestEntityTooLarge) == 0
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
            await anyio.sleep(0.05)
            assert alive(web.HTTPFound) == alive(web.HTTPBadRequest) == 0
    finally:
        gc.enable()


async def test_a_declared_oversized_body_is_refused_before_it_is_read() -> None:
    reached = []

    async def handler(request: web.Request) -> web.Response:
        reached.append(request)
        return web.json_response({})

    async with serve(guarded_app(("POST", "/x", handler))) as base:
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
