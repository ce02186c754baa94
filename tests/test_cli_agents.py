"""``chatkernel agents list|which``, and the agent in ``sessions list``."""

from __future__ import annotations

import json

import anyio
import pytest
from click.testing import CliRunner

from chatkernel.cli import cli
from chatkernel.core.store.base import SessionRecord
from chatkernel.core.store.sqlite import SQLiteStore

CONFIG = """\
[agent]
kind = "echo"

[agents.work]
kind = "command"
command = ["llm", "-m", "gpt-4o-mini"]

[agents.family]
kind = "echo"

[[bindings]]
agent = "work"
channel = "slack"

[[bindings]]
agent = "family"
channel = "slack"
account = "home"

[[bindings]]
agent = "work"
channel = "telegram"
chat = "42"
"""


@pytest.fixture
def home(chatkernel_home):
    (chatkernel_home / "config.toml").write_text(CONFIG)
    return chatkernel_home


def save_sessions(home, *records):
    async def write():
        async with SQLiteStore.at(home / "state.db") as store:
            for record in records:
                await store.save_session(record)
    anyio.run(write)


def session(key: str, agent: str, last: float = 1.0) -> SessionRecord:
    channel, account, chat = key.split("#")[0].split(":")
    return SessionRecord(key=key, session_id=f"s-{chat}", channel=channel, account=account,
                         chat_id=chat, thread_id=None, created_at=1.0, last_active_at=last,
                         agent=agent)


def invoke(*args):
    result = CliRunner().invoke(cli, list(args))
    return result


def test_agents_list_shows_kind_workspace_bindings_and_sessions(home):
    save_sessions(home, session("slack:main:C1#work", "work"),
                  session("slack:main:C2#work", "work"),
                  session("telegram:main:7", "default"))
    result = invoke("agents", "list")
    assert result.exit_code == 0, result.output
    workspace = home / "workspace"
    assert result.output.splitlines() == [
        f"default  kind echo  workspace {workspace}  sessions 1",
        "  the chats no binding matches",
        f"family  kind echo  workspace {workspace / 'agents' / 'family'}  sessions 0",
        "  bindings[1] (channel=slack account=home)",
        f"work  kind command  workspace {workspace / 'agents' / 'work'}  sessions 2",
        "  bindings[0] (channel=slack)",
        "  bindings[2] (channel=telegram chat=42)",
    ]
    data = json.loads(invoke("agents", "list", "--json").output)
    assert [(a["name"], a["sessions"]) for a in data["agents"]] == [
        ("default", 1), ("family", 0), ("work", 2)]


@pytest.mark.parametrize(("args", "expected"), [
    (["--channel", "slack", "--account", "home", "--chat", "C1"],
     "family: bindings[1] (channel=slack account=home)"),
    (["--channel", "slack", "--account", "main", "--chat", "C1"],
     "work: bindings[0] (channel=slack)"),
    (["--channel", "telegram", "--account", "main", "--chat", "42"],
     "work: bindings[2] (channel=telegram chat=42)"),
    (["--channel", "telegram", "--account", "main", "--chat", "43", "--group"],
     "default: no binding matches: the default agent answers"),
])
def test_agents_which_names_the_agent_and_the_rule(home, args, expected):
    result = invoke("agents", "which", *args)
    assert (result.exit_code, result.output.strip()) == (0, expected)


def test_agents_which_without_a_default_says_nobody_answers(chatkernel_home):
    (chatkernel_home / "config.toml").write_text(
        '[agents.work]\nkind = "echo"\n\n[[bindings]]\nagent = "work"\nchannel = "slack"\n')
    result = invoke("agents", "which", "--channel", "telegram", "--account", "main",
                    "--chat", "1")
    assert result.exit_code == 1
    assert result.output.strip() == \
        "no agent: no binding matches and the config has no default agent"
    listed = invoke("agents", "list")
    assert listed.output.splitlines()[-1] == \
        "no default agent: the chats no binding matches go unanswered"


def test_sessions_list_shows_each_sessions_agent(home):
    save_sessions(home, session("slack:main:C1#work", "work", last=2.0),
                  session("telegram:main:7", "default", last=1.0))
    result = invoke("sessions", "list")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["KEY", "AGENT", "LAST", "ACTIVE", "SESSION"]
    assert [line.split()[:2] for line in lines[1:]] == [["slack:main:C1#work", "work"],
                                                        ["telegram:main:7", "default"]]
    data = json.loads(invoke("sessions", "list", "--json").output)
    assert [s["agent"] for s in data] == ["work", "default"]


def test_a_bad_binding_is_an_error_naming_the_rule(chatkernel_home):
    (chatkernel_home / "config.toml").write_text(
        CONFIG + '\n[[bindings]]\nagent = "wrk"\nchannel = "slack"\n')
    result = invoke("agents", "list")
    assert result.exit_code != 0
    assert "bindings[3].agent: no agent named 'wrk'" in result.output


def test_config_validate_names_the_accounts_no_agent_would_answer(chatkernel_home):
    (chatkernel_home / "config.toml").write_text(
        '[agents.work]\nkind = "echo"\n\n[[bindings]]\nagent = "work"\nchannel = "slack"\n')
    result = invoke("config", "validate")
    assert result.exit_code == 1  # the binding's channel is not one the gateway runs
    assert "bindings[0].channel: no channel 'slack' runs on this gateway" in result.output
    (chatkernel_home / "config.toml").write_text(
        '[agents.work]\nkind = "echo"\n\n[[bindings]]\nagent = "work"\nchat = "c1"\n')
    result = invoke("config", "validate")
    assert result.exit_code == 0, result.output
    assert result.stderr.strip() == ("note: no default agent: the chats no binding matches "
                                     "go unanswered in webchat:default")


def test_status_shows_each_recent_sessions_agent(home):
    import time

    now = time.time()
    save_sessions(home, session("slack:main:C1#work", "work", last=now),
                  session("telegram:main:7", "default", last=now - 60))
    result = invoke("status")
    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.output.splitlines()]
    assert any(line.startswith("slack:main:C1#work") and line.endswith("agent work")
               for line in lines), result.output
    assert any(line.startswith("telegram:main:7") and line.endswith("agent default")
               for line in lines), result.output


def test_heartbeat_status_without_a_gateway_lists_each_agents_heartbeat(chatkernel_home):
    (chatkernel_home / "config.toml").write_text(
        '[agent]\nkind = "echo"\n\n[agents.work]\nkind = "echo"\n\n'
        '[agents.work.heartbeat]\nevery = "2h"\n\n[agents.home]\nkind = "echo"\n')
    result = invoke("heartbeat", "status", "--json")
    assert result.exit_code == 0, result.output
    found = {h["id"]: (h["agent"], h["every"], h["off"])
             for h in json.loads(result.output)["heartbeats"]}
    assert found == {"main": ("default", "0", True), "agent:work": ("work", "2h", False)}
