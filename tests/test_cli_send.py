"""`chatkernel send` and `chatkernel sessions`: through the running gateway, or directly."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request

import pytest

from chatkernel.testing.process import CHATKERNEL, gateway_process


def run(home, *args, timeout=60):
    env = {**os.environ, "CHATKERNEL_HOME": str(home)}
    env.pop("CHATKERNEL_CONFIG", None)
    return subprocess.run([CHATKERNEL, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def post(url, body, token=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers,
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


@pytest.mark.slow
def test_a_web_chat_send_with_no_gateway_is_refused(tmp_path):
    # The web chat's page is the gateway's: with none running, nobody would see it.
    home = tmp_path / "home"
    result = run(home, "send", "--channel", "webchat", "--to", "c1", "hello from the cli")
    assert result.returncode == 1
    assert result.stdout == ""
    assert ("webchat:default shows messages only on the gateway's page, and no gateway is "
            "running: nothing was sent") in result.stderr
    assert json.loads(run(home, "sessions", "list", "--json").stdout) == []


@pytest.mark.parametrize("args, message", [
    (["--channel", "telegram", "--to", "c1", "x"], "no running account of channel 'telegram'"),
    (["--channel", "webchat", "--account", "other", "--to", "c1", "x"],
     "no account 'other' in channel 'webchat'"),
    (["--channel", "webchat", "--to", "last", "x"], "has no last active chat yet"),
    (["--channel", "webchat", "--to", "c1", "--media", "/etc/passwd", "x"],
     "outside the workspace"),
    (["--channel", "webchat", "--to", "c1"], "nothing to send"),
])
@pytest.mark.slow
def test_send_errors_are_clear(tmp_path, args, message):
    result = run(tmp_path / "home", "send", *args)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_send_and_sessions_through_the_running_gateway(tmp_path):
    home = tmp_path / "home"
    with gateway_process(home) as gateway:
        state = json.loads((home / "gateway.json").read_text())
        assert oct((home / "gateway.json").stat().st_mode & 0o777) == "0o600"
        # the control API wants the token
        status, body = post(f"{gateway.url}/control/send",
                            {"channel": "webchat", "to": "c1", "text": "x"})
        assert status == 401 and "token" in body["error"]
        status, body = post(f"{gateway.url}/control/send",
                            {"channel": "webchat", "to": "c1", "text": "x"}, "wrong")
        assert status == 401

        # a conversation, so there is a session and a last active chat
        post(f"{gateway.url}/webchat/messages", {"chat_id": "c1", "user_id": "u1",
                                                 "text": "hi bot"})
        gateway.webchat_messages("c1", 2)

        result = run(home, "send", "--channel", "webchat", "--to", "last", "proactive hello")
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("sent to webchat:default → c1 (1 part(s))")
        messages = gateway.webchat_messages("c1", 3)
        assert [m["text"] for m in messages] == ["hi bot", "hi bot", "proactive hello"]

        result = run(home, "sessions", "list", "--json")
        sessions = json.loads(result.stdout)
        assert [s["key"] for s in sessions] == ["webchat:default:c1"]
        result = run(home, "sessions", "list", "--active-minutes", "5")
        assert "webchat:default:c1" in result.stdout

        result = run(home, "sessions", "send", "webchat:default:c1", "into the session")
        assert result.returncode == 0, result.stderr
        assert gateway.webchat_messages("c1", 4)[-1]["text"] == "into the session"

        result = run(home, "sessions", "history", "webchat:default:c1", "--json")
        entries = json.loads(result.stdout)
        roles = [(e["role"], e["text"]) for e in entries]
        assert roles[:2] == [("user", "hi bot"), ("assistant", "hi bot")]
        # the proactive sends are in it too: what the chat was sent, marked as sends
        assert [(e["role"], e["text"]) for e in entries
                if (e["meta"] or {}).get("kind") == "send"] == [
            ("assistant", "proactive hello"), ("assistant", "into the session")]

        # the per-session send policy: deny, and the agent's reply is not sent
        result = run(home, "sessions", "policy", "webchat:default:c1", "deny")
        assert result.returncode == 0 and "deny" in result.stdout
        post(f"{gateway.url}/webchat/messages", {"chat_id": "c1", "user_id": "u1",
                                                 "text": "are you there?"})
        blocked = 'not sent: chunk 1/1 "are you there?": blocked by the send policy'
        deadline = time.monotonic() + 30
        while blocked not in run(home, "sessions", "history", "webchat:default:c1").stdout:
            assert time.monotonic() < deadline, "the reply was never blocked"
        texts = [m["text"] for m in gateway.webchat_messages("c1", 5)]
        assert texts[-1] == "are you there?"  # the user's message, and no reply: blocked
        # ... and a send into it is refused, saying why, with nothing queued.
        result = run(home, "sessions", "send", "webchat:default:c1", "blocked?")
        assert result.returncode == 1
        assert ("not sent to webchat:default:c1: blocked by the send policy (this "
                "session's send setting)") in result.stderr
        assert state["pid"] == gateway.process.pid
        assert gateway.stop() == 0
    assert not (home / "gateway.json").exists()


@pytest.mark.slow
def test_sessions_history_of_an_unknown_session(tmp_path):
    result = run(tmp_path / "home", "sessions", "history", "nope:x:y")
    assert result.returncode != 0 and "no session 'nope:x:y'" in result.stderr
