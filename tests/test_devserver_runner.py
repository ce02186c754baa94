"""The dev-server runner (``chatkernel.testing.devserver``): a tiny fake served as a real
process (its first line, ``/_fake/ready``, its snippet, signals, a taken port), and its
route helpers (body checks, ``?wait=``) in this event loop."""

from __future__ import annotations

import argparse
import io
import json
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import aiohttp
import anyio
import pytest
from aiohttp import web

from chatkernel.testing.contract import wait_until as wait_for
from chatkernel.testing.devserver import DevServer, fields, json_body, listing
from chatkernel.testing.fake_platform import FakePlatform

#: A dev server in a few lines, as a plugin writes one.
TINY = textwrap.dedent("""
    from aiohttp import web
    from chatkernel.testing.devserver import DevServer
    from chatkernel.testing.fake_platform import FakePlatform

    server = DevServer(
        prog="tiny", port=0, platform=lambda args: FakePlatform(),
        announce=lambda fake, args: {"base_url": fake.base_url, "token": args.token},
        snippet=lambda fake, args: f'api_base = "{fake.base_url}"',
        options=lambda parser: parser.add_argument("--token", default="t0ken"))
    server.main()
""")


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", TINY, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def get(url: str) -> tuple[int, dict]:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, json.load(response)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_first_line_comes_once_it_listens_and_a_signal_stops_it(signum):
    process = start("--token", "abc")
    try:
        first = json.loads(process.stdout.readline())
        # Printed once bound: the server answers at once, with the same JSON.
        assert first["token"] == "abc" and first["base_url"].startswith("http://127.0.0.1:")
        assert get(f"{first['base_url']}/_fake/ready") == (200, first)
        process.send_signal(signum)
        out, err = process.communicate(timeout=15)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert out == ""  # nothing but the first line on stdout
    assert f'api_base = "{first["base_url"]}"' in err and "Traceback" not in err


@pytest.mark.slow
def test_a_signal_right_after_the_first_line_still_stops_it_cleanly():
    process = start()
    try:
        process.stdout.readline()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=15)
    finally:
        process.kill()
    assert process.returncode == 0, err


def test_a_taken_port_is_one_line_and_exit_status_1():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = start("--port", str(port))
        out, err = process.communicate(timeout=30)
    assert process.returncode == 1
    assert out == ""
    assert err.strip() == (f"tiny: cannot listen on 127.0.0.1:{port}: the port is taken "
                           "(another dev server? --port 0 picks a free one)")


# -- the route helpers, in this event loop ------------------------------------------------


def inbox_routes(fake: FakePlatform) -> list[web.RouteDef]:
    async def write(request: web.Request) -> web.Response:
        body = fields(await json_body(request), {"chat": int, "text": str, "loud": bool},
                      required=("chat",))
        fake.record_sent(body)
        return web.json_response({"ok": True})

    async def sent(request: web.Request) -> web.Response:
        return web.json_response({"messages": await listing(
            request, fake, lambda: fake.sent_messages)})

    return [web.post("/_fake/write", write), web.get("/_fake/sent", sent)]


@pytest.fixture
async def served():
    stop = anyio.Event()
    out, err = io.StringIO(), io.StringIO()
    platforms: list[FakePlatform] = []

    def platform(args: argparse.Namespace) -> FakePlatform:
        platforms.append(FakePlatform())
        return platforms[-1]

    server = DevServer(prog="tiny", port=0, platform=platform,
                       announce=lambda fake, args: {"base_url": fake.base_url},
                       routes=inbox_routes)
    async with anyio.create_task_group() as tasks, aiohttp.ClientSession() as http:
        tasks.start_soon(lambda: server.serve(argparse.Namespace(port=0), stop=stop,
                                              stdout=out, stderr=err))
        await wait_for(out.getvalue, what="the first line", interval=0.01)
        yield http, json.loads(out.getvalue())["base_url"], platforms[0]
        stop.set()


@pytest.mark.anyio
@pytest.mark.parametrize(("body", "error"), [
    ("not json", "the body must be JSON"),
    ("[1]", "the body must be a JSON object"),
    ('{"text": "hi"}', "chat is required (fields: chat, text, loud)"),
    ('{"chat": 1, "colour": "red"}', "unknown field 'colour' (fields: chat, text, loud)"),
    ('{"chat": "1"}', "chat must be a int, not '1'"),
    ('{"chat": true}', "chat must be a int, not True"),
    ('{"chat": 1, "loud": 1}', "loud must be a bool, not 1"),
])
async def test_a_bad_body_is_a_400_naming_what_is_wrong(served, body, error):
    http, base, _ = served
    async with http.post(f"{base}/_fake/write", data=body) as answer:
        assert (answer.status, await answer.json()) == (400, {"error": error})


async def answer_held_until_written(served, params: dict[str, str], text: str) -> dict:
    """``GET /_fake/sent`` with ``params``, held (an early answer would be empty) until
    ``text`` is written; its answer."""
    http, base, fake = served
    got: list[dict] = []
    async with anyio.create_task_group() as tasks:
        async def waiting() -> None:
            async with http.get(f"{base}/_fake/sent", params=params) as answer:
                got.append(await answer.json())

        tasks.start_soon(waiting)
        await wait_for(lambda: fake.holding == 1, what="the GET held")
        async with http.post(f"{base}/_fake/write", json={"chat": 1, "text": text}):
            pass
    return got[0]


@pytest.mark.anyio
async def test_wait_holds_the_answer_until_there_is_something(served):
    http, base, _ = served
    async with http.get(f"{base}/_fake/sent") as answer:  # no wait: at once, empty
        assert (await answer.json()) == {"messages": []}
    assert await answer_held_until_written(served, {"wait": "30"}, "hi") == {
        "messages": [{"chat": 1, "text": "hi"}]}


@pytest.mark.anyio
async def test_after_leaves_out_what_a_poller_has_read_and_waits_for_what_is_new(served):
    http, base, _ = served
    for text in ("one", "two"):
        async with http.post(f"{base}/_fake/write", json={"chat": 1, "text": text}):
            pass
    async with http.get(f"{base}/_fake/sent", params={"after": "1"}) as answer:
        assert (await answer.json()) == {"messages": [{"chat": 1, "text": "two"}]}
    assert await answer_held_until_written(served, {"after": "2", "wait": "30"}, "three") == {
        "messages": [{"chat": 1, "text": "three"}]}
    async with http.get(f"{base}/_fake/sent", params={"after": "-1"}) as answer:
        assert (answer.status, await answer.json()) == (
            400, {"error": "after must be a count (0 or more), not '-1'"})


@pytest.mark.anyio
@pytest.mark.parametrize(("wait", "error"), [
    ("soon", "wait must be a number of seconds, not 'soon'"),
    ("61", "wait must be between 0 and 60 seconds, not 61"),
    ("-1", "wait must be between 0 and 60 seconds, not -1"),
])
async def test_a_bad_wait_is_a_400(served, wait, error):
    http, base, _ = served
    async with http.get(f"{base}/_fake/sent", params={"wait": wait}) as answer:
        assert (answer.status, await answer.json()) == (400, {"error": error})


# -- the fake's developer routes, served by the runner ------------------------------------


class Chatty(FakePlatform):
    """A fake with a control surface of its own and a line to narrate."""

    def developer_routes(self) -> list[web.RouteDef]:
        async def poke(request: web.Request) -> web.Response:
            self.narrate("poked")
            return web.json_response({"latency": self.latency})

        return [web.post("/_fake/poke", poke)]


@pytest.mark.anyio
async def test_the_fakes_developer_routes_and_options_given_as_a_mapping():
    server = DevServer(prog="chatty", port=0, platform=lambda args: Chatty(),
                       announce=lambda fake, args: {"base_url": fake.base_url,
                                                    "colour": args.colour},
                       options={"--colour": {"default": "red"}})
    args = server.parser().parse_args(["--colour", "blue", "--latency", "0.01"])
    stop, out, err = anyio.Event(), io.StringIO(), io.StringIO()
    async with anyio.create_task_group() as tasks, aiohttp.ClientSession() as http:
        tasks.start_soon(lambda: server.serve(args, stop=stop, stdout=out, stderr=err))
        await wait_for(out.getvalue, what="the first line", interval=0.01)
        first = json.loads(out.getvalue())
        assert first["colour"] == "blue"
        async with http.post(f"{first['base_url']}/_fake/poke") as answer:
            assert answer.status == 200 and await answer.json() == {"latency": 0.01}
        async with http.get(f"{first['base_url']}/_fake/ready") as answer:
            assert await answer.json() == first  # the runner's own route, beside the fake's
        stop.set()
    assert err.getvalue() == "poked\n"  # what the fake narrates, on stderr


class Described(FakePlatform):
    """A fake that says itself what a dev server's first line and snippet are."""

    def developer_info(self) -> dict:
        return {**super().developer_info(), "token": "t0ken"}

    def config_snippet(self) -> str:
        return f'[channels.described.accounts.main]\napi_base = "{self.base_url}"'


@pytest.mark.anyio
async def test_the_first_line_and_the_snippet_are_the_fakes_own_by_default():
    server = DevServer(prog="described", port=0, platform=lambda args: Described())
    stop, out, err = anyio.Event(), io.StringIO(), io.StringIO()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: server.serve(server.parser().parse_args([]), stop=stop,
                                              stdout=out, stderr=err))
        await wait_for(err.getvalue, what="the snippet", interval=0.01)
        stop.set()
    first = json.loads(out.getvalue())
    assert first == {"base_url": first["base_url"], "token": "t0ken"}
    assert err.getvalue() == (f'[channels.described.accounts.main]\n'
                              f'api_base = "{first["base_url"]}"\n')


@pytest.mark.anyio
async def test_a_fake_without_a_snippet_prints_none():
    server = DevServer(prog="bare", port=0, platform=lambda args: FakePlatform())
    stop, out, err = anyio.Event(), io.StringIO(), io.StringIO()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: server.serve(server.parser().parse_args([]), stop=stop,
                                              stdout=out, stderr=err))
        await wait_for(out.getvalue, what="the first line", interval=0.01)
        stop.set()
    assert list(json.loads(out.getvalue())) == ["base_url"] and err.getvalue() == ""


# -- the plugins' dev servers are declarations ---------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
DEVSERVERS = sorted(ROOT.glob("plugins/*/chatkernel_*/devserver.py")) + [
    ROOT / "cookiecutter-plugin" / "{{cookiecutter.__dist_name}}"
    / "{{cookiecutter.__package_name}}" / "devserver.py"]


@pytest.mark.parametrize("path", DEVSERVERS, ids=lambda p: p.parts[-3])
def test_a_devserver_is_a_declaration_and_its_fake_owns_the_routes(path):
    """A plugin's ``devserver.py`` is the ``DevServer(...)`` declaration, its snippet and
    ``main``: the ``/_fake/*`` routes are its fake's ``developer_routes()`` (the template's
    too), so none is written twice."""
    source = path.read_text()
    assert len(source.splitlines()) <= 40, f"{path.name}: {len(source.splitlines())} lines"
    assert "async def" not in source and "aiohttp" not in source
    assert "DevServer(" in source
    fake = path.with_name("fake.py").read_text()
    assert "def developer_routes(self)" in fake and '"/_fake/messages"' in fake
