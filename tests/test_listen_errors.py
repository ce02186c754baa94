"""A listen address in use: the error names where the address came from and a free one.

Each test holds a real socket on the port and runs ``chatkernel run`` as a process.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from chatkernel.testing.process import CHATKERNEL


@contextmanager
def occupied(port: int = 0) -> Iterator[int]:
    """A listening socket on 127.0.0.1:``port`` (0: any), held by this test; yields the
    port. A fixed port another program holds is waited for (up to 30 s), since a port
    that program may free at any moment would let the gateway start after all."""
    holder = socket.socket()
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                holder.bind(("127.0.0.1", port))
                holder.listen()
                break
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                if time.monotonic() > deadline:
                    break  # held for good by someone else: occupied all the same
                time.sleep(0.1)  # real time: another process frees the port
        yield holder.getsockname()[1] if port == 0 else port
    finally:
        holder.close()


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHATKERNEL_HOME": str(home)}
    env.pop("CHATKERNEL_CONFIG", None)
    return subprocess.run([CHATKERNEL, "run", *args], env=env, capture_output=True, text=True,
                          timeout=60)


def suggested_port(stderr: str) -> int:
    match = re.search(r"e\.g\. --listen 127\.0\.0\.1:(\d+)", stderr)
    assert match, stderr
    return int(match[1])


def assert_one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(error) == 1, result.stderr
    return error[0]


@pytest.mark.slow
def test_a_port_given_with_listen_is_named_as_coming_from_the_command_line(tmp_path):
    with occupied() as port:
        line = assert_one_line_error(run(tmp_path, "--listen", f"127.0.0.1:{port}"))
        assert f"cannot listen on 127.0.0.1:{port} (from --listen on the command line)" in line
        assert "Address already in use" in line
        free = suggested_port(line)
        assert free != port
        # What it suggests is free to bind.
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", free))


@pytest.mark.slow
def test_a_port_from_the_config_file_names_the_key_and_the_file(tmp_path):
    with occupied() as port:
        config = tmp_path / "config.toml"
        config.write_text(f'[gateway]\nlisten = "127.0.0.1:{port}"\n')
        line = assert_one_line_error(run(tmp_path))
        assert f"(from gateway.listen in {config})" in line
        assert suggested_port(line) != port


@pytest.mark.slow
def test_the_built_in_default_says_so(tmp_path):
    with occupied(8787):
        line = assert_one_line_error(run(tmp_path))
        assert "cannot listen on 127.0.0.1:8787 (from the built-in default)" in line
        assert suggested_port(line) != 8787
