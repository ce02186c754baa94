"""The gateway's secrets stay out of what the command agent can read through /proc: a real
``chatkernel run`` whose agent dumps ``/proc/$PPID/environ`` (base64, past the redactor)
and its own environment (chatkernel.core.gateway.secret_env)."""

from __future__ import annotations

import base64
import json
import os
import pwd
import secrets
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from chatkernel.core.gateway.secret_env import is_secret_name, secret_names
from chatkernel.testing.process import CHATKERNEL, chatkernel_for, gateway_process

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads /proc and uses prctl")

NOBODY = 65534
#: The agent: what it can read of its parent's environment block, and its own environment.
AGENT_SCRIPT = ("printf 'P:%s\\n' "
                "\"$({ tr '\\0' '\\n' < /proc/$PPID/environ; } 2>&1 | base64 -w0)\"; "
                "printf 'A:%s\\n' \"$(env | base64 -w0)\"")
SHELL_ADDS = {"PWD", "OLDPWD", "SHLVL", "_"}


def as_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


@pytest.fixture
def home():
    """A home the gateway can own as nobody (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="chatkernel-secret-env-"))
    path.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def decoded(reply: str, tag: str) -> str:
    line = next(line for line in reply.splitlines() if line.startswith(f"{tag}:"))
    return base64.b64decode(line[len(tag) + 1:]).decode(errors="replace")


@pytest.mark.slow
def test_the_agent_reads_no_secret_of_the_gateway_and_the_gateway_keeps_them(home):
    values = {name: f"{name.lower()}-{secrets.token_hex(8)}" for name in (
        "CHATKERNEL_CONTROL_TOKEN", "CK_UPSTREAM", "OPENAI_API_KEY", "SOME_SERVICE_TOKEN",
        "AGENT_PASSWORD")}
    env = {**values, "PLAIN_SETTING": "plain-value"}
    (home / "config.toml").write_text(
        '[gateway]\ncontrol_token = "${CHATKERNEL_CONTROL_TOKEN}"\n'
        '[agent]\nkind = "command"\n'
        f"command = {json.dumps(['sh', '-c', AGENT_SCRIPT])}\n"
        'pass_env = ["AGENT_PASSWORD"]\nenv = { UPSTREAM = "${CK_UPSTREAM}" }\n')
    root = os.geteuid() == 0
    # As nobody, from a copy nobody can reach when the checkout is in a private folder.
    command = chatkernel_for(pwd.getpwuid(NOBODY)) if root else CHATKERNEL
    with gateway_process(home, env=env, preexec_fn=as_nobody if root else None,
                         command=command) as gateway:
        pid = gateway.process.pid
        request = urllib.request.Request(
            f"{gateway.url}/webchat/messages", method="POST",
            data=json.dumps({"chat_id": "c", "user_id": "u", "text": "dump"}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 202
        messages = gateway.webchat_messages("c", 2, timeout=20)
        reply = messages[-1]["text"]

        # The parent's environment block, as the agent (the gateway's user) reads it:
        # closed to it (non-dumpable).
        seen = decoded(reply, "P")
        assert "Permission denied" in seen, seen
        assert not any(value in seen for value in values.values())
        if root:
            # Root reads it all the same: there is no secret in it, the rest is.
            block = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
            names = {item.partition("=")[0] for item in block if item}
            assert not any(value in "\0".join(block) for value in values.values()), names
            assert {"PATH", "PLAIN_SETTING", "CHATKERNEL_HOME"} <= names
            # Non-dumpable: the kernel makes its /proc files root's, not its user's.
            assert Path(f"/proc/{pid}/environ").stat().st_uid == 0

        # The agent's own environment is what the config gives it, nothing more.
        agent_env = dict(line.split("=", 1) for line in decoded(reply, "A").splitlines()
                         if "=" in line)
        assert agent_env["UPSTREAM"] == values["CK_UPSTREAM"]  # ${ENV} in agent.env
        assert agent_env["AGENT_PASSWORD"] == values["AGENT_PASSWORD"]  # agent.pass_env
        allowed = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
                   "UPSTREAM", "AGENT_PASSWORD", "CHATKERNEL_SESSION",
                   "CHATKERNEL_SESSION_ID", "CHATKERNEL_HEARTBEAT"} | SHELL_ADDS
        assert set(agent_env) - allowed == {n for n in agent_env if n.startswith("LC_")}

        # The gateway still has its secrets: the control token from ${ENV} opens the API.
        for token, status in ((values["CHATKERNEL_CONTROL_TOKEN"], 200), ("wrong", 401)):
            control = urllib.request.Request(
                f"{gateway.url}/control/status", method="POST", data=b"{}",
                headers={"Content-Type": "application/json",
                         "Authorization": f"Bearer {token}"})
            try:
                with urllib.request.urlopen(control, timeout=5) as response:
                    got = response.status
            except urllib.error.HTTPError as exc:
                got = exc.code
            assert got == status
        assert gateway.stop() == 0
    log = "".join(gateway.lines)
    assert not any(value in log for value in values.values())


def test_which_variables_count_as_secrets():
    environ = {"PATH": "/bin", "HOME": "/root", "LANG": "C", "TELEGRAM_BOT_TOKEN": "t",
               "OPENAI_API_KEY": "k", "DB_PASSWORD": "p", "APP_SECRET": "s", "UPSTREAM": "u",
               "CHATKERNEL_CONTROL_TOKEN": "c", "MY_LLM_KEY": "m", "PLAIN": "x",
               "CHATKERNEL_HOME": "/h"}
    raw = {"agent": {"env": {"UP": "${UPSTREAM}"}}}
    assert secret_names(raw, environ) == sorted([
        "TELEGRAM_BOT_TOKEN", "OPENAI_API_KEY", "DB_PASSWORD", "APP_SECRET", "UPSTREAM",
        "CHATKERNEL_CONTROL_TOKEN", "MY_LLM_KEY"])
    assert not any(is_secret_name(name) for name in ("PATH", "HOME", "KEYBOARD", "PLAIN"))
