"""``chatkernel heartbeat status|wake``: from the local state, and through the running gateway."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request

import anyio
import pytest
from click.testing import CliRunner

from chatkernel.cli import cli
from chatkernel.core.store.base import HeartbeatState
from chatkernel.core.store.sqlite import SQLiteStore
from chatkernel.testing.process import CHATKERNEL, gateway_process


def run(home, *args, timeout=60):
    env = {**os.environ, "CHATKERNEL_HOME": str(home)}
    env.pop("CHATKERNEL_CONFIG", None)
    return subprocess.run([CHATKERNEL, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def post(url, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


@pytest.fixture
def runner():
    return CliRunner()


def invoke(runner, *args):
    return runner.invoke(cli, ["heartbeat", *args])


def save_states(home, *states):
    async def write():
        async with SQLiteStore.at(home / "state.db") as store:
            for state in states:
                await store.save_heartbeat(state)
    anyio.run(write)


def test_status_without_a_gateway_reads_the_local_state(runner, chatkernel_home):
    (chatkernel_home / "config.toml").write_text('[heartbeat]\nevery = "30m"\ntarget = "last"\n')
    now = time.time()
    save_states(chatkernel_home,
                HeartbeatState(id="main", anchor_at=now - 600, last_run_at=now - 600,
                               last_outcome="alert (sent)"),
                HeartbeatState(id="session:webchat:default:c1", session_key="webchat:default:c1",
                               settings={"every": "2m", "prompt": "check the build"},
                               anchor_at=now, paused=True, wake_texts=["deploy done"]))
    result = invoke(runner, "status", "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert (answer["via"], answer["scheduled"]) == ("local", False)
    main, session = answer["heartbeats"]
    assert (main["id"], main["every"], main["target"], main["last_outcome"]) == (
        "main", "30m", "last", "alert (sent)")
    assert 1100 <= main["next_in_seconds"] <= 1200  # due 20 minutes from the test's now
    assert (session["every"], session["prompt"], session["paused"], session["wake_texts"]) == (
        "2m", "check the build", True, ["deploy done"])
    text = invoke(runner, "status").stdout
    assert text.startswith("No gateway is running, so no heartbeat is scheduled.")
    assert re.search(r"^main  every 30m  target last  due in (19m\d*s|20m), if a gateway runs "
                     r"by then  ", text, re.M)
    assert "session:webchat:default:c1  every 2m  webchat:default:c1  paused" in text
    assert "next in" not in text  # nothing is next: no gateway runs


def test_status_of_a_configured_heartbeat_that_never_ran(runner, chatkernel_home):
    (chatkernel_home / "config.toml").write_text('[heartbeat]\nevery = "0"\n')
    text = invoke(runner, "status").stdout
    assert "main  every 0  target none  not timed (every = 0): wake only" in text
    (chatkernel_home / "config.toml").write_text("[heartbeat]\n")  # its defaults: every 30m
    assert "\nmain  every 30m  target none  first run one interval after a gateway starts\n" \
        in invoke(runner, "status").stdout


def test_status_with_no_gateway_and_no_heartbeat_table_says_nothing_is_scheduled(
        runner, chatkernel_home):
    result = invoke(runner, "status")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == ("No gateway is running, so no heartbeat is scheduled. As the config "
                        "and the state database stand:")
    assert lines[1].startswith("main  off: the config has no [heartbeat] table")
    assert "every 30m" not in result.stdout
    [main] = json.loads(invoke(runner, "status", "--json").stdout)["heartbeats"]
    assert (main["off"], main["every_seconds"], main["next_due_at"]) == (True, 0, None)


def test_an_overdue_heartbeat_runs_when_a_gateway_starts(runner, chatkernel_home):
    (chatkernel_home / "config.toml").write_text('[heartbeat]\nevery = "1h"\n')
    save_states(chatkernel_home, HeartbeatState(id="main", anchor_at=time.time() - 7200))
    assert "main  every 1h  target none  overdue: runs once as soon as a gateway starts" in \
        invoke(runner, "status").stdout


def test_wake_without_a_gateway_is_a_clear_error(runner, chatkernel_home):
    result = invoke(runner, "wake", "--text", "hello")
    assert result.exit_code == 1
    assert "no gateway is running" in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_wake_and_status_through_the_running_gateway(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[heartbeat]\nevery = "30m"\ntarget = "last"\n')
    with gateway_process(home) as gateway:
        post(f"{gateway.url}/webchat/messages", {"chat_id": "c1", "user_id": "u1",
                                                 "text": "hi bot"})
        gateway.webchat_messages("c1", 2)
        # the echo agent repeats the prompt: an alert, sent to the last active chat
        result = run(home, "heartbeat", "wake", "--text", "deploy 42 finished")
        assert result.returncode == 0, result.stderr
        assert "woke heartbeat main" in result.stdout
        messages = gateway.webchat_messages("c1", 3)
        assert messages[-1]["text"].endswith("Woken with a note: deploy 42 finished")
        result = run(home, "heartbeat", "status", "--json")
        answer = json.loads(result.stdout)
        assert (answer["via"], answer["scheduled"]) == ("gateway", True)
        [main] = answer["heartbeats"]
        assert main["last_outcome"] == "alert (sent)" and main["wake_texts"] == []
        result = run(home, "heartbeat", "wake", "--mode", "next")
        assert result.returncode != 0 and "needs --text" in result.stderr
        result = run(home, "heartbeat", "wake", "--session", "webchat:default:nope")
        assert result.returncode != 0 and "has no heartbeat" in result.stderr
        assert gateway.stop() == 0


@pytest.mark.slow
def test_after_a_wake_with_no_table_status_shows_the_run_and_where_its_log_is(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    with gateway_process(home) as gateway:
        result = run(home, "heartbeat", "wake", "--text", "check the disk")
        assert result.returncode == 0, result.stderr
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # each look is a CLI process: no sleep between
            [main] = json.loads(run(home, "heartbeat", "status", "--json").stdout)[
                "heartbeats"]
            if main["last_outcome"]:
                break
        assert (main["last_outcome"], main["log_session"]) == ("alert", "heartbeat:main")
        text = run(home, "heartbeat", "status").stdout
        line = next(line for line in text.splitlines() if line.startswith("main  off:"))
        assert re.search(r"  last run \d+s ago: alert  log: chatkernel sessions history "
                         r"heartbeat:main$", line), line
        result = run(home, "sessions", "history", "heartbeat:main")
        assert result.returncode == 0, result.stderr
        assert "Woken with a note: check the disk" in result.stdout
        assert gateway.stop() == 0
    # without the gateway, from the state database: the same
    assert "log: chatkernel sessions history heartbeat:main" in \
        run(home, "heartbeat", "status").stdout
