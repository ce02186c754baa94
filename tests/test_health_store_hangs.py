"""Health while the shared store hangs: a real redis-server stopped with SIGSTOP keeps
every connection open and answers nothing. ``/healthz``, ``/status`` and ``chatkernel
health`` still answer, within a few seconds and red, and turn green after SIGCONT."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from chatkernel.cli.status import EXIT_UNHEALTHY
from chatkernel.testing.process import CHATKERNEL, gateway_process
from chatkernel.testing.redis import RedisServer

#: How long an answer may take while the store hangs: the snapshot's store reads wait
#: ``health.store_timeout_ms`` (1 s) once, then the rest are skipped.
PROMPT = 4.0


def get(url: str, timeout: float = 30.0) -> tuple[int, str, float]:
    """``(status, body, seconds)`` of a GET."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            status, body = response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read().decode()
    return status, body, time.monotonic() - started


def health_command(home) -> tuple[int, str, float]:
    started = time.monotonic()
    result = subprocess.run([CHATKERNEL, "health", "--timeout", "5000"], capture_output=True,
                            text=True, timeout=60, check=False,
                            env={**os.environ, "CHATKERNEL_HOME": str(home)})
    return result.returncode, result.stdout + result.stderr, time.monotonic() - started


def wait_for_healthz(url: str, status: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while get(url)[0] != status:
        if time.monotonic() > deadline:
            pytest.fail(f"/healthz did not answer {status} within {timeout:g} s")
        time.sleep(0.2)  # real time: a gateway process, asked over HTTP while Redis hangs


@pytest.mark.slow
def test_health_answers_in_time_and_red_while_redis_hangs(tmp_path):
    with RedisServer(tmp_path / "redis") as redis:
        home = tmp_path / "home"
        home.mkdir()
        (home / "config.toml").write_text(
            f'[store]\nbackend = "redis"\nurl = "{redis.url}"\nprefix = "hangs:"\n\n'
            "[channels.webchat.accounts.default]\n")
        with gateway_process(home) as gateway:
            healthz = f"{gateway.url}/healthz"
            wait_for_healthz(healthz, 200)
            with redis.paused():
                for _ in range(2):  # the first request, and a later one
                    status, body, took = get(healthz)
                    assert status == 503 and took < PROMPT, (status, took)
                    reasons = json.loads(body)["reasons"]
                    assert any("shared store: unreachable" in reason for reason in reasons)
                status, page, took = get(f"{gateway.url}/status")
                assert status == 200 and took < PROMPT, (status, took)
                assert 'data-ok="false"' in page and "unreachable" in page
                code, output, took = health_command(home)
                assert code == EXIT_UNHEALTHY, output  # unhealthy, not "unreachable" (3)
                assert "shared store: unreachable" in output.lower()
            wait_for_healthz(healthz, 200)  # SIGCONT: green again
            # The pause outlasted the account's lease (3 s): until the gateway takes it
            # again, within a renewal round, `chatkernel health` rightly says no instance
            # owns the account. Green once it does.
            deadline = time.monotonic() + 30
            code, output, _ = health_command(home)
            while code != 0 and time.monotonic() < deadline:
                time.sleep(0.2)  # real time: a gateway process retaking a Redis lease
                code, output, _ = health_command(home)
            assert code == 0, output
