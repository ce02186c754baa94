"""The kit's RedisServer stopped and started again: on a TCP port, anything else may
take the port meanwhile; on a Unix socket, its address stays its own
(chatkernel.testing.redis)."""

from __future__ import annotations

import socket

import pytest

from chatkernel.testing.redis import RedisServer, RedisStore

pytestmark = pytest.mark.anyio


@pytest.mark.slow
def test_a_restart_on_tcp_fails_once_another_process_took_the_port(tmp_path):
    with RedisServer(tmp_path / "redis") as server:
        server.stop()
        with socket.create_server(("127.0.0.1", server.port)):  # what a busy machine does
            with pytest.raises(pytest.fail.Exception, match=f"port {server.port}"):
                server.start()


@pytest.mark.slow
async def test_a_server_on_a_unix_socket_restarts_on_it_with_its_data(tmp_path):
    with RedisServer(tmp_path / "redis", unix_socket=True) as server:
        assert server.url == f"unix://{server.socket_path}?db=0"
        assert len(server.socket_path) < 100  # within a socket path's limit
        async with RedisStore(url=server.url, prefix="restart:") as store:
            await store.set_cursor("telegram", "main", "42")
        server.restart()
        async with RedisStore(url=server.url, prefix="restart:") as store:
            assert await store.get_cursor("telegram", "main") == "42"
    assert server.process is None
