"""A real ``redis-server`` for tests: the ``redis_server`` fixture and :class:`RedisServer`.

The fixture (session-scoped, from the test kit's pytest plugin) starts one
``redis-server`` on a free port of 127.0.0.1 with a temporary directory, and
yields its URL (``redis://127.0.0.1:PORT/0``); ``redis_prefix`` gives each test
a key prefix of its own, so tests sharing the server never see each other's
keys. A test that stops and restarts the server (a lost connection) makes its
own ``RedisServer``; one that makes it hang (a stopped process: connections
open, nothing answered) uses ``RedisServer.paused()``.

The server persists to an append-only file with ``appendfsync everysec``: a
restart (``RedisServer.restart``) keeps every write, since Redis writes each
command to the file before it answers, and only an operating-system crash could
lose the last second, which no test makes. ``appendfsync always`` would fsync
every write and slow a shared machine for nothing; RDB snapshots are off
(``--save ""``): the AOF is what restarts read.

``redis-server`` must be on ``PATH`` (Debian's ``redis-server`` package;
``scripts/system-packages`` installs it): without it the fixture fails, saying so,
rather than skipping the tests.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# The store, for tests that look at what gateway processes keep in Redis (their leases,
# their outbox) without importing the kernel's internals.
from chatkernel.core.store.redis import RedisStore
from chatkernel.testing.process import free_port, stop_process

__all__ = ["RedisServer", "RedisStore", "redis_prefix", "redis_server"]

#: How long a starting server may take to answer PING, in seconds.
START_TIMEOUT = 15.0


def _ping(address: int | str) -> bool:
    """Whether the server at ``address`` (a port of 127.0.0.1, or a socket's path)
    answers PING."""
    try:
        if isinstance(address, str):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(1.0)
            try:
                sock.connect(address)
            except OSError:
                sock.close()
                raise
        else:
            sock = socket.create_connection(("127.0.0.1", address), timeout=1.0)
        with sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """A ``redis-server`` process on 127.0.0.1 with its own data directory.

    ``start()`` returns once it answers PING; ``stop()`` shuts it down (SIGTERM:
    the AOF is written); ``restart()`` starts it again on the same port and data.
    Also a context manager.

    ``unix_socket=True``: it listens on a Unix socket instead (:attr:`url` is
    ``unix://...``), for a test that stops it a while and starts it again: a port
    free while the server is down may be taken by any other process of a busy
    machine (a parallel test's server, a client's outgoing connection), and the
    restart would fail or, worse, reach another server; the socket's path is this
    server's alone.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None, *,
                 executable: str | None = None, unix_socket: bool = False) -> None:
        found = executable or shutil.which("redis-server")
        if found is None:
            pytest.fail("redis-server is not installed (it is not on PATH): the Redis store's "
                        "tests run a real one. Install Debian's redis-server package "
                        "(scripts/system-packages does), or put redis-server on PATH.",
                        pytrace=False)
        self.executable = found
        self._own_directory = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="chatkernel-redis-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = 0
        # A short directory of its own: a socket's path is limited to 107 bytes.
        self._socket_directory = (Path(tempfile.mkdtemp(prefix="ck-redis-"))
                                  if unix_socket else None)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def socket_path(self) -> str | None:
        """The Unix socket it listens on (with ``unix_socket=True``), else None."""
        if self._socket_directory is None:
            return None
        return str(self._socket_directory / "redis.sock")

    @property
    def url(self) -> str:
        if self.socket_path is not None:
            return f"unix://{self.socket_path}?db=0"
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> str:
        """Start the server (on a free port the first time); returns its URL."""
        if self.process is not None:
            return self.url
        for attempt in range(3):  # another process may take the free port first
            port = self.port or (0 if self.socket_path else free_port())
            listen = ["--port", "0", "--unixsocket", self.socket_path,
                      "--unixsocketperm", "700"] if self.socket_path else \
                ["--port", str(port), "--bind", "127.0.0.1"]
            process = subprocess.Popen(
                [self.executable, *listen,
                 "--dir", str(self.directory), "--save", "", "--appendonly", "yes",
                 "--appendfsync", "everysec", "--protected-mode", "yes",
                 "--logfile", str(self.directory / "redis.log")],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            deadline = time.monotonic() + START_TIMEOUT
            while time.monotonic() < deadline and process.poll() is None:
                if _ping(self.socket_path or port):
                    self.port, self.process = port, process
                    return self.url
                time.sleep(0.05)
            if process.poll() is None:
                process.kill()
            process.wait()
            stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
            if self.port or self.socket_path:  # a restart keeps its address: no other try
                break
        log = self.directory / "redis.log"
        tail = (log.read_text(errors="replace") if log.exists() else stderr)[-2000:]
        pytest.fail(f"redis-server did not answer PING within {START_TIMEOUT:.0f} s "
                    f"({self.socket_path or f'port {port}'}):\n{tail}", pytrace=False)

    def stop(self) -> None:
        """Shut the server down (SIGTERM, then SIGKILL after 10 s)."""
        process, self.process = self.process, None
        if process is None:
            return
        stop_process(process, timeout=10)

    def restart(self) -> str:
        self.stop()
        return self.start()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Stop the server with SIGSTOP for the block: it hangs (connections stay open,
        nothing is answered) until SIGCONT, which comes after the block whatever happens."""
        process = self.process
        if process is None:
            raise RuntimeError("the server is not running")
        process.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            process.send_signal(signal.SIGCONT)

    def close(self) -> None:
        """Stop it and remove its directory (if it made it)."""
        self.stop()
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)
        if self._socket_directory is not None:
            shutil.rmtree(self._socket_directory, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """The URL of a ``redis-server`` running for the whole test session (see the module)."""
    with RedisServer() as server:
        yield server.url


_prefixes = itertools.count(1)


@pytest.fixture
def redis_prefix() -> str:
    """A key prefix of this test's own (``chatkernel-test-<pid>-<n>:``)."""
    return f"chatkernel-test-{os.getpid()}-{next(_prefixes)}:"
