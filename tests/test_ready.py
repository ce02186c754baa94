"""Waiting for a gateway, as a script does: ``chatkernel run`` logs a ready line once it
listens and its accounts started, and ``chatkernel health --wait`` waits for a gateway
that is starting (real processes, real ports on 127.0.0.1)."""

from __future__ import annotations

import os
import queue
import re
import socket
import subprocess
import threading
import time

import pytest

from chatkernel.testing.process import CHATKERNEL


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    return home


def environ(home) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATKERNEL_")}
    return {**env, "CHATKERNEL_HOME": str(home)}


def chatkernel(home, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([CHATKERNEL, *args], env=environ(home), capture_output=True,
                          text=True, timeout=timeout)


def start_gateway(home) -> subprocess.Popen:
    return subprocess.Popen([CHATKERNEL, "run", "--listen", "127.0.0.1:0"], env=environ(home),
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_run_logs_ready_once_it_listens_and_its_accounts_started(home):
    gateway = start_gateway(home)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in gateway.stderr],
                     daemon=True).start()
    try:
        seen = []
        deadline = time.monotonic() + 30
        while not seen or "chatkernel ready on" not in seen[-1]:
            try:
                seen.append(lines.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                raise AssertionError("no ready line in 30 s:\n" + "".join(seen)) from None
        ready = seen[-1]
        assert re.search(r"INFO +chatkernel\.gateway: chatkernel ready on "
                         r"http://127\.0\.0\.1:\d+ \(1 account\(s\) started\)$", ready), ready
        assert any("listening on" in line for line in seen[:-1])
        # Once it says so, the control API answers and the web chat's loop runs.
        health = chatkernel(home, "health")
        assert health.returncode == 0, health.stdout + health.stderr
        assert "ok  webchat:default: running" in health.stdout
    finally:
        stop(gateway)


@pytest.mark.slow
def test_health_wait_waits_for_a_gateway_that_is_starting(home):
    waiting = subprocess.Popen([CHATKERNEL, "health", "--wait", "60"], env=environ(home),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # real time: a process of its own gets to its first poll, and finds no gateway yet
    time.sleep(0.5)
    assert waiting.poll() is None  # still waiting
    gateway = start_gateway(home)
    try:
        out, err = waiting.communicate(timeout=90)
        assert waiting.returncode == 0, out + err
        assert out.startswith("ok — gateway http://127.0.0.1:")
        assert f"(pid {gateway.pid}," in out
    finally:
        waiting.kill()
        stop(gateway)


@pytest.mark.slow
def test_health_wait_with_no_gateway_gives_up_with_exit_status_3(home):
    started = time.monotonic()
    result = chatkernel(home, "health", "--wait", "1")
    assert time.monotonic() - started >= 1
    assert result.returncode == 3
    assert result.stderr.strip() == ("unreachable: no gateway answered within 1 s (last: no "
                                     "gateway is running)")


@pytest.mark.slow
def test_health_wait_for_an_account_that_cannot_reach_its_platform_exits_1(home):
    (home / "config.toml").write_text(
        "[channels.telegram.accounts.main]\n"
        'bot_token = "123456:ABCdefGHIjklMNOpqrSTUvwxYZ012345678"\n'
        f'api_base = "http://127.0.0.1:{closed_port()}"\nallow_from = ["*"]\n')
    gateway = start_gateway(home)
    try:
        result = chatkernel(home, "health", "--wait", "5")
        assert result.returncode == 1, result.stdout + result.stderr
        assert result.stdout.startswith("UNHEALTHY")
        assert "BAD telegram:main" in result.stdout
    finally:
        stop(gateway)
