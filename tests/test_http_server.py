"""The gateway's HTTP server against clients that connect and say nothing, keep a
connection open, or send request heads over aiohttp's limits: a real ``chatkernel run``
under a lowered descriptor limit (chatkernel.core.gateway.http_server)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import selectors
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import anyio
import pytest
from aiohttp import web

from chatkernel.core import config as cfg
from chatkernel.core.gateway.http_server import (
    ConnectionLimits,
    GuardedSite,
    connection_cap,
    track_requests,
)
from chatkernel.testing.contract import wait_until
from chatkernel.testing.process import gateway_process

IDLE_CLIENTS = 1_100
GATEWAY_NOFILE = 1024
#: Long enough for the idle clients to be open at once past the connection cap (they all
#: connect within about a second: the listen backlog takes the burst), short so the test
#: need not wait long for the server to close them.
HEADER_TIMEOUT, IDLE_TIMEOUT = 4, 2
#: What reading a connection the server closed raises.
CLOSED = (anyio.EndOfStream, anyio.BrokenResourceError)


@pytest.fixture
def many_descriptors():
    """This process may open the idle clients (its soft limit raised for the test)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = IDLE_CLIENTS + 512
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"the hard descriptor limit ({hard}) is below {wanted}")
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def low_nofile() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (GATEWAY_NOFILE, GATEWAY_NOFILE))


def healthz_seconds(url: str) -> float:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=5) as response:
            response.read()
    except urllib.error.HTTPError as exc:  # 503 while an account starts is an answer too
        exc.read()
    return time.monotonic() - started


def wait_closed_by_server(socks: list[socket.socket], timeout: float) -> int:
    """How many of ``socks`` the server closed (EOF or reset) within ``timeout``."""
    selector = selectors.DefaultSelector()
    for sock in socks:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    closed = 0
    deadline = time.monotonic() + timeout
    while closed < len(socks) and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.5):
            try:
                data = key.fileobj.recv(65536)
            except ConnectionError:
                data = b""
            if not data:
                selector.unregister(key.fileobj)
                closed += 1
    selector.close()
    return closed


def read_response(sock: socket.socket) -> bytes:
    """One HTTP response's head and body (by Content-Length) from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        body += sock.recv(65536)
    return head


@pytest.mark.slow
def test_idle_connections_leave_healthz_answering_and_are_closed_quietly(
        tmp_path, many_descriptors):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f"[gateway]\nheader_timeout = {HEADER_TIMEOUT}\nidle_timeout = {IDLE_TIMEOUT}\n")
    log_file = tmp_path / "gateway.log"
    with gateway_process(home, log_file=log_file, preexec_fn=low_nofile) as gateway:
        port = urllib.parse.urlsplit(gateway.url).port
        idle: list[socket.socket] = []
        try:
            for _ in range(IDLE_CLIENTS):
                sock = socket.socket()
                sock.settimeout(3)
                try:
                    sock.connect(("127.0.0.1", port))
                except OSError:
                    sock.close()
                    break
                idle.append(sock)
            took = healthz_seconds(gateway.url)
            assert len(idle) == IDLE_CLIENTS
            assert took < 1.0, f"/healthz took {took:.2f} s beside {len(idle)} idle clients"
            # The cap made room for the last ones by closing the first...
            assert "closed to make room for new ones" in log_file.read_text()
            # ...and those that sent nothing are closed after the header timeout.
            assert wait_closed_by_server(idle, HEADER_TIMEOUT + 15) == IDLE_CLIENTS
        finally:
            for sock in idle:
                sock.close()

        # A kept-alive connection is closed once it waited idle_timeout.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert read_response(sock).startswith(b"HTTP/1.1 ")
            assert wait_closed_by_server([sock], IDLE_TIMEOUT + 15) == 1

        # Heads over aiohttp's 8,190-byte limits: refused, no traceback each.
        for head in [b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                     b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n"
                     ] * 20:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(head)
                assert read_response(sock).split(b" ")[1] in (b"400", b"431")
        assert healthz_seconds(gateway.url) < 5
        assert gateway.stop() == 0
    log = log_file.read_text(errors="replace")
    assert log_file.stat().st_size < 1_000_000
    assert "Traceback" not in log and "Error handling request" not in log, log[-3000:]
    assert "out of system resource" not in log and "Too many open files" not in log
    assert log.count("request heads refused") <= 2, log  # 40 refusals, one line (or two)


def test_the_connection_cap_stays_below_the_descriptor_limit():
    assert connection_cap(None, 1024) == 768
    assert connection_cap(500, 1024) == 500
    assert connection_cap(5000, 1024) == 768  # with a warning: more than descriptors allow
    assert connection_cap(None, 200) == 72
    assert connection_cap(None, None) == 10_000


def test_the_timeouts_and_the_cap_are_validated_gateway_settings():
    gateway = cfg.KernelConfig.model_validate(
        {"gateway": {"header_timeout": 5, "idle_timeout": 30, "max_connections": 200}}).gateway
    assert (gateway.header_timeout, gateway.idle_timeout, gateway.max_connections) == \
        (5, 30, 200)
    for bad in ({"header_timeout": 0}, {"idle_timeout": -1}, {"max_connections": 0}):
        with pytest.raises(Exception, match=next(iter(bad))):
            cfg.KernelConfig.model_validate({"gateway": bad})


@pytest.mark.anyio
async def test_out_of_descriptors_accepting_backs_off_then_resumes(caplog):
    """EMFILE on accept pauses the listener (one line said), instead of a hot loop."""
    app = web.Application(middlewares=[track_requests])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = GuardedSite(runner, "127.0.0.1", 0, limits=ConnectionLimits(),
                       handler_args={"access_log": None})
    await site.start()
    listener = site.listener
    port = runner.addresses[0][1]
    clients = 40
    holder = subprocess.Popen(
        [sys.executable, "-c", (
            "import socket, sys\n"
            f"s = [socket.create_connection(('127.0.0.1', {port})) for _ in range({clients})]\n"
            "print('open', flush=True); sys.stdin.read()")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        # Room for a few connections only, then EMFILE.
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 5, hard))
        with caplog.at_level(logging.WARNING, logger="chatkernel.http"):
            assert await anyio.to_thread.run_sync(holder.stdout.readline) == "open\n"
            await wait_until(lambda: listener.paused, what="accepting paused", interval=0.01)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            await wait_until(lambda: listener.open_count >= clients,  # resumed: the rest
                             what="every client accepted", interval=0.01)  # are accepted
        lines = [r.getMessage() for r in caplog.records if "cannot accept" in r.getMessage()]
        assert len(lines) == 1 and "Too many open files" in lines[0], lines
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        holder.stdin.close()
        holder.wait(timeout=10)
        await runner.cleanup()


@pytest.mark.anyio
async def test_a_client_that_hangs_up_on_a_refused_body_does_not_hold_its_connection():
    """After answering a request whose body was left unread (a 413), aiohttp reads the
    rest for ``lingering_time`` so a client still sending gets the answer; a client that
    hung up instead held its connection's handler, and the server's shutdown, that long
    (10 s by default; 60 s here)."""
    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"error": "the request body is too large"}, status=413)

    handler_args = {"access_log": None, "lingering_time": 60}
    app = web.Application(middlewares=[track_requests])
    app.router.add_post("/x", refuse)
    runner = web.AppRunner(app, **handler_args)
    await runner.setup()
    site = GuardedSite(runner, "127.0.0.1", 0, limits=ConnectionLimits(),
                       handler_args=handler_args)
    await site.start()
    try:
        async with await anyio.connect_tcp("127.0.0.1", runner.addresses[0][1]) as client:
            await client.send(b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              b"Content-Length: 100000000\r\n\r\n" + b"x" * 1000)
            answer = await client.receive()
        assert answer.startswith(b"HTTP/1.1 413")
    finally:
        with anyio.fail_after(30):  # half the lingering time: the hang-up ended it
            await runner.cleanup()


@contextlib.asynccontextmanager
async def guarded_site(app: web.Application, limits: ConnectionLimits):
    """``app`` served by a :class:`GuardedSite` on 127.0.0.1 under ``limits``: yields its
    listener and port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = GuardedSite(runner, "127.0.0.1", 0, limits=limits,
                       handler_args={"access_log": None})
    await site.start()
    try:
        yield site.listener, runner.addresses[0][1]
    finally:
        await runner.cleanup()


@pytest.mark.anyio
async def test_each_phase_sets_the_deadline_and_the_sweep_closes_only_those_past_it():
    """A connection's header and idle timeouts are a time on the connection (none while
    a request is in progress), and the listener's sweep closes those past it."""
    release = anyio.Event()

    async def held(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="ok")

    app = web.Application(middlewares=[track_requests])
    app.router.add_get("/held", held)
    limits = ConnectionLimits(header_timeout=30, idle_timeout=60)
    clock = asyncio.get_running_loop().time
    async with guarded_site(app, limits) as (listener, port):
        assert listener.sweep_interval == 1.0  # a quarter of 30 s is more than a second
        before = clock()
        async with await anyio.connect_tcp("127.0.0.1", port) as silent, \
                await anyio.connect_tcp("127.0.0.1", port) as asking:
            await wait_until(lambda: len(listener.waiting_handlers) == 2,
                             what="both connections open", interval=0.01)
            for handler in listener.waiting_handlers:  # the head's wait, from connecting
                assert handler.phase == "head"
                assert before + 30 <= handler.deadline <= clock() + 30
            await asking.send(b"GET /held HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            await wait_until(lambda: len(listener.busy_handlers) == 1,
                             what="a request in progress", interval=0.01)
            [busy] = listener.busy_handlers
            assert (busy.phase, busy.deadline) == ("busy", None)
            [waiting] = listener.waiting_handlers
            waiting.deadline = clock() - 1  # its head's time ran out
            listener.close_expired()
            with pytest.raises(CLOSED), anyio.fail_after(5):
                await silent.receive()
            assert listener.open_count == 1  # the busy one is left alone
            answered = clock()
            release.set()
            assert (await asking.receive()).startswith(b"HTTP/1.1 200")
            await wait_until(lambda: busy.phase == "idle", what="answered", interval=0.01)
            assert answered + 60 <= busy.deadline <= clock() + 60  # the idle wait now
            listener.close_expired()
            assert listener.open_count == 1  # not due yet


@pytest.mark.anyio
async def test_the_sweep_closes_a_silent_connection_after_its_header_timeout():
    # (aiohttp's own keep-alive timer, the backstop, is set past both: 30.4 s)
    limits = ConnectionLimits(header_timeout=0.4, idle_timeout=30)
    app = web.Application(middlewares=[track_requests])
    async with guarded_site(app, limits) as (listener, port):
        assert listener.sweep_interval == 0.1
        async with await anyio.connect_tcp("127.0.0.1", port) as silent:
            with pytest.raises(CLOSED), anyio.fail_after(10):
                await silent.receive()


@pytest.mark.slow
def test_the_gateway_raises_its_soft_descriptor_limit_to_the_hard_one():
    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 2048))

    script = ("import resource; from chatkernel.core.gateway.http_server import raise_nofile_limit\n"
              "print(raise_nofile_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))")
    done = subprocess.run([sys.executable, "-c", script], preexec_fn=limits,
                          capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.split() == ["2048", "2048", "2048"]
