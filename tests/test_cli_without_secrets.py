"""The commands that read local state work in a shell without the channels' secrets, and
the secrets' home, ``$CHATKERNEL_HOME/.env``, is read by the CLI and by the gateway (and
its reloads) alike. Each command runs as a person runs it: a process, in an environment
that lacks every variable the config references."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from chatkernel.core import config as cfg
from chatkernel.core.store import open_store
from chatkernel.core.store.records import SessionRecord
from chatkernel.testing.process import CHATKERNEL, gateway_process

TOKEN = "123456:SECRETsecretSECRETsecret_fromthefile"
CONFIG = '''
[gateway]
control_token = "${CK_CONTROL_TOKEN}"

[agent]
kind = "echo"
env = { API_KEY = "${OPENAI_API_KEY}" }

[[bindings]]
agent = "default"
channel = "telegram"

[channels.telegram.accounts.main]
enabled = false
bot_token = "${TELEGRAM_BOT_TOKEN}"

[channels.slack.accounts.main]
enabled = false
bot_token = "${SLACK_BOT_TOKEN}"
app_token = "${SLACK_APP_TOKEN}"
'''
#: Each variable the config references, and a value of the shape its key takes.
VALUES = {"CK_CONTROL_TOKEN": "ctl-from-the-file", "OPENAI_API_KEY": "sk-from-the-file",
          "TELEGRAM_BOT_TOKEN": TOKEN, "SLACK_BOT_TOKEN": "xoxb-1-2-fromthefile",
          "SLACK_APP_TOKEN": "xapp-1-A1-2-fromthefile"}
REFERENCED = tuple(VALUES)


@pytest.fixture
def home(chatkernel_home):
    (chatkernel_home / "config.toml").write_text(CONFIG)
    return chatkernel_home


def shell(home: Path, **env: str) -> dict[str, str]:
    """A shell's environment: this one's without any variable the config references."""
    environ = {name: value for name, value in os.environ.items()
               if name not in REFERENCED and not name.startswith("CHATKERNEL_")}
    return {**environ, "CHATKERNEL_HOME": str(home), **env}


def chatkernel(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHATKERNEL, *args], env=shell(home, **env), capture_output=True,
                          text=True, timeout=60)


def write_env_file(home: Path, text: str, mode: int = 0o600) -> None:
    path = home / ".env"
    path.write_text(text)
    path.chmod(mode)


def seed_session(home: Path) -> str:
    """A session with one log entry in the home's state database."""
    config = cfg.parse({}, strict_env=False)

    async def seed():
        store = open_store(config)
        await store.open()
        try:
            await store.save_session(SessionRecord("telegram:main:42", "s1", "telegram", "main",
                                                   "42", None, 1.0, 2.0))
            await store.append_log("telegram:main:42", "s1", "user", "hello there")
        finally:
            await store.close()

    anyio.run(seed)  # in the fixture's CHATKERNEL_HOME
    return "telegram:main:42"


@pytest.mark.slow
def test_reading_local_state_needs_no_channel_secret(home):
    key = seed_session(home)
    for args, says in (
            (("sessions", "list"), key),
            (("sessions", "history", key), "hello there"),
            (("agents", "list"), "bindings[0] (channel=telegram)"),
            (("agents", "which", "--channel", "telegram", "--account", "main", "--chat", "42"),
             "default: bindings[0]"),
            (("heartbeat", "status"), "No gateway is running"),
    ):
        result = chatkernel(home, *args)
        assert result.returncode == 0, (args, result.stderr)
        assert says in result.stdout, (args, result.stdout)
        assert "is not set" not in result.stderr
    # What does talk to a platform still needs its secret, and says which.
    validate = chatkernel(home, "config", "validate")
    assert validate.returncode == 1
    assert "environment variable CK_CONTROL_TOKEN is not set" in validate.stderr


@pytest.mark.slow
def test_the_cli_reads_the_env_file_and_the_environment_wins(home):
    (home / "config.toml").write_text(CONFIG + '\n[agents.helper]\nworkspace = "${CK_WS}"\n')
    write_env_file(home, "# the secrets\n" + "".join(
        f"export {name}='{value}'\n" for name, value in VALUES.items())
        + 'CK_WS="/srv/from-the-file"   # not a secret\n')
    assert chatkernel(home, "config", "validate").returncode == 0  # every reference resolves
    listed = json.loads(chatkernel(home, "agents", "list", "--json").stdout)
    assert {row["name"]: row["workspace"] for row in listed["agents"]}["helper"] == \
        "/srv/from-the-file"
    listed = json.loads(chatkernel(home, "agents", "list", "--json",
                                   CK_WS="/srv/from-the-shell").stdout)
    assert {row["name"]: row["workspace"] for row in listed["agents"]}["helper"] == \
        "/srv/from-the-shell"


@pytest.mark.slow
def test_an_env_file_the_group_can_read_is_refused(home):
    write_env_file(home, f"TELEGRAM_BOT_TOKEN={TOKEN}\n", mode=0o644)
    path = home / ".env"
    for args in (("sessions", "list"), ("config", "validate"), ("run",)):
        result = chatkernel(home, *args)
        assert result.returncode == 1, (args, result.stderr)
        assert (f"{path}: refused: mode 0644 lets the group or others read it, and it holds "
                f"secrets; make it the owner's alone: chmod 600 {path}") in result.stderr
        assert "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_gateway_reads_the_env_file_and_a_reload_reads_it_again(home):
    # The control token comes from the real environment, the rest from the file.
    write_env_file(home, "".join(f"{name}={value}\n" for name, value in VALUES.items()
                                 if name != "CK_CONTROL_TOKEN"))
    with gateway_process(home, env={"CK_CONTROL_TOKEN": "ctl-from-the-environment"},
                         ) as gateway:
        assert f"read from {home / '.env'}: OPENAI_API_KEY, SLACK_APP_TOKEN" in \
            "".join(gateway.lines)
        if os.geteuid() == 0:  # root reads any process's environment block
            block = Path(f"/proc/{gateway.process.pid}/environ").read_bytes()
            assert b"fromthefile" not in block and b"from-the-file" not in block
            assert b"ctl-from-the-environment" not in block

        # Here the shell lacks every secret; the gateway has its own: no config problem.
        status = chatkernel(home, "status", "--all", "--json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["config_problems"] == []

        # An added account naming a variable the gateway lacks: whose environment, and how.
        (home / "config.toml").write_text(
            CONFIG + '\n[channels.telegram.accounts.second]\napi_base = "http://127.0.0.1:1"\n'
                     'bot_token = "${SECOND_BOT_TOKEN}"\n')
        refused = chatkernel(home, "reload")
        assert refused.returncode == 1
        assert ("channels.telegram.accounts.second.bot_token: environment variable "
                "SECOND_BOT_TOKEN is not set in the running gateway's environment "
                "(referenced as ${SECOND_BOT_TOKEN}): add it to "
                f"{home / '.env'}, which a reload reads again, or restart the gateway "
                "with it set") in refused.stderr
        # Set in the reload's shell, it is still not the gateway's...
        assert chatkernel(home, "reload", SECOND_BOT_TOKEN="x").returncode == 1
        # ...in the env file, it is.
        write_env_file(home, (home / ".env").read_text() + f"SECOND_BOT_TOKEN={TOKEN}\n")
        applied = chatkernel(home, "reload")
        assert applied.returncode == 0, applied.stderr
        assert "telegram:second" in applied.stdout
        assert gateway.stop() == 0
