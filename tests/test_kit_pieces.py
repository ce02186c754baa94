"""The small pieces of the test kit plugins share instead of writing them again: a free
port, a test's own HTTP endpoint, a JSON object body, a gateway home, stopping a child."""

from __future__ import annotations

import socket
import subprocess
import sys

import aiohttp
import pytest
from aiohttp import web

from chatkernel.testing import free_port, serve_routes
from chatkernel.testing.fake_platform import json_object
from chatkernel.testing.process import ONE_ANSWER_PER_MESSAGE, gateway_home, stop_process


def test_a_free_port_refuses_connections_and_can_be_listened_on():
    port = free_port()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


@pytest.mark.anyio
async def test_serve_routes_serves_them_while_the_block_runs():
    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"hello": request.match_info["name"]})

    async with serve_routes(web.get("/hi/{name}", hello)) as base:
        assert base.startswith("http://127.0.0.1:")
        async with aiohttp.ClientSession() as http, http.get(f"{base}/hi/ann") as answer:
            assert await answer.json() == {"hello": "ann"}
    port = int(base.rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError):  # gone once the block ends
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


@pytest.mark.parametrize(("body", "expected"), [
    (b'{"chat_id": 1}', {"chat_id": 1}), ('{"a": [1]}', {"a": [1]}),
    (b"[1, 2]", None), (b'"text"', None), (b"{not json", None), (b"\xff", None)])
def test_json_object_is_the_body_as_an_object_or_none(body, expected):
    assert json_object(body) == expected


def test_gateway_home_writes_the_config_after_a_queue_of_one_answer_a_message(tmp_path):
    home = gateway_home(tmp_path / "home", '[channels.x.accounts.main]\ntoken = "t"\n')
    assert home == tmp_path / "home"
    assert (home / "config.toml").read_text() == (
        ONE_ANSWER_PER_MESSAGE + '[channels.x.accounts.main]\ntoken = "t"\n')


@pytest.mark.slow
def test_stop_process_kills_a_child_that_ignores_sigterm():
    stubborn = subprocess.Popen(
        [sys.executable, "-c", "import signal, time\n"
         "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n"
         # real time: the child sleeps until stop_process kills it
         "time.sleep(120)\n"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert stubborn.stdout.readline() == "ready\n"  # its handler is in place
    stop_process(stubborn, timeout=0.5)
    assert stubborn.returncode == -9 and stubborn.stderr.closed
    stubborn.stdout.close()


def test_stop_process_ends_a_child_with_sigterm():
    # real time: the child sleeps until stop_process ends it
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                             stderr=subprocess.PIPE)
    stop_process(child, timeout=30)
    assert child.returncode == -15
