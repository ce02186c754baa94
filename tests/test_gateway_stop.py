"""Stopping the gateway: what is left is named for what it is, and not waited for in vain."""

from __future__ import annotations

import os
import socket
import subprocess

import anyio
import pytest

from chatkernel.core.store.sqlite import SQLiteStore
from chatkernel.testing.process import CHATKERNEL, gateway_process

pytest.importorskip("chatkernel_telegram")


@pytest.mark.slow
def test_a_send_waiting_for_its_platform_is_left_to_the_outbox_not_called_a_turn(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    with socket.socket() as closed:  # bound, never listening: every connection is refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        (home / "config.toml").write_text(f"""
[channels.telegram.accounts.main]
bot_token = "123456:ABCdefGhIJKlmnoPQRstuVWXyz0123456789"
api_base = "http://127.0.0.1:{port}"
allow_from = ["*"]
""")
        env = {**os.environ, "CHATKERNEL_HOME": str(home)}
        env.pop("CHATKERNEL_CONFIG", None)
        with gateway_process(home) as gateway:
            result = subprocess.run([CHATKERNEL, "send", "--channel", "telegram", "--to", "42",
                                     "--no-wait", "hello"], env=env, capture_output=True,
                                    text=True, timeout=60)
            assert result.returncode == 0, result.stderr
            # The send found the platform unreachable: it waits, `pending`.
            while not any("the platform cannot be reached" in line for line in gateway.lines):
                line = gateway.process.stderr.readline()
                assert line, "".join(gateway.lines)
                gateway.lines.append(line)
            assert gateway.stop() == 0
            log = "".join(gateway.lines) + gateway.process.stderr.read()
    assert ("1 outbox payload(s) wait for a retry or for their platform: they stay queued in "
            "the state database and are sent on the next start") in log
    assert "turn" not in log.split("draining in-flight turns", 1)[1]
    assert "still being sent" not in log

    async def unfinished():
        async with SQLiteStore.at(home / "state.db") as store:
            return await store.outbox_unfinished()
    [entry] = anyio.run(unfinished)
    assert (entry.status, entry.payload.text) == ("pending", "hello")
