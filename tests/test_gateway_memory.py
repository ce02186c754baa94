"""Memory a request leaves behind in a real gateway process: none.

These run ``chatkernel run`` as a child process on 127.0.0.1 and read its resident
memory from ``/proc``: bounds on memory, never timings.
"""

from __future__ import annotations

import http.client
import json
import sys
import urllib.parse
from pathlib import Path

import pytest

from chatkernel.testing.process import gateway_process

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads resident memory from /proc")

MB = 1024 * 1024
#: Bodies larger than any limit of the gateway (the old app-wide cap was 64 MB).
REJECTED_BODY = 70 * MB
#: How far above its baseline a gateway's resident memory may end up: the start-up
#: heap's growth under ordinary traffic, not a rejected body (each is tens of MB).
ALLOWED_GROWTH = 40 * MB


def resident(pid: int) -> int:
    """The process's resident set size, in bytes (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def connect(url: str) -> http.client.HTTPConnection:
    parts = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)


def post_oversized(url: str, path: str, *, chunked: bool, headers: dict[str, str] | None = None
                   ) -> int:
    """POST ``REJECTED_BODY`` bytes (declared with Content-Length, or chunked); returns the
    status. The whole body is sent, as a client that does not look at early answers does."""
    chunk = b"x" * MB
    conn = connect(url)
    try:
        conn.putrequest("POST", path)
        conn.putheader("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        if chunked:
            conn.putheader("Transfer-Encoding", "chunked")
        else:
            conn.putheader("Content-Length", str(REJECTED_BODY))
        conn.endheaders()
        try:
            for _ in range(REJECTED_BODY // MB):
                conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
            if chunked:
                conn.send(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the gateway stopped reading: its answer is waiting
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def post_json(conn: http.client.HTTPConnection, path: str, body: dict,
              headers: dict[str, str] | None = None) -> int:
    conn.request("POST", path, body=json.dumps(body),
                 headers={"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    response.read()
    return response.status


def ordinary_traffic(url: str, count: int) -> None:
    """``count`` web chat messages over a few chats, each followed by a transcript read."""
    conn = connect(url)
    try:
        for n in range(count):
            chat = f"soak-{n % 5}"
            assert post_json(conn, "/webchat/messages",
                             {"chat_id": chat, "user_id": "u", "text": f"message {n}"}) == 202
            conn.request("GET", f"/webchat/messages?chat_id={chat}&after={10 ** 9}")
            response = conn.getresponse()
            response.read()
            assert response.status == 200
    finally:
        conn.close()


@pytest.mark.slow
def test_rejected_bodies_leave_no_memory_behind(tmp_path):
    with gateway_process(tmp_path) as gateway:
        pid = gateway.process.pid
        token = json.loads((tmp_path / "gateway.json").read_text())["token"]
        ordinary_traffic(gateway.url, 300)
        baseline = resident(pid)

        control = {"Authorization": f"Bearer {token}"}
        statuses = []
        for _ in range(4):
            statuses.append(post_oversized(gateway.url, "/webchat/messages", chunked=False))
            statuses.append(post_oversized(gateway.url, "/webchat/messages", chunked=True))
            statuses.append(post_oversized(gateway.url, "/control/status", chunked=True,
                                           headers=control))
            statuses.append(post_oversized(gateway.url, "/control/status", chunked=False,
                                           headers=control))
        assert set(statuses) == {413}

        ordinary_traffic(gateway.url, 2000)
        after = resident(pid)
        assert after - baseline < ALLOWED_GROWTH, (
            f"resident memory went from {baseline / MB:.0f} MB to {after / MB:.0f} MB "
            f"after {len(statuses)} rejected bodies and 2,000 ordinary requests")
