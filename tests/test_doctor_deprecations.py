"""Deprecated config keys: loading takes each as its replacement (or drops it) with one
warning, ``chatkernel doctor`` reports each with the command that fixes it, and a channel
declares its own account keys on its account model. The kernel's table is empty today
(no key was renamed or dropped): the tests add entries."""

from __future__ import annotations

import json
import logging

import pytest
from click.testing import CliRunner

from chatkernel.channels import AccountConfig, Deprecated
from chatkernel.cli import cli
from chatkernel.core import config as cfg
from chatkernel.core.config import deprecations
from chatkernel.core.config.deprecations import find
from chatkernel.webchat.channel import WebChatAccount

RENAMED = {"gateway.listen_on": Deprecated("chatkernel 0.9", replacement="gateway.listen")}


@pytest.fixture
def kernel_table(monkeypatch):
    """The kernel's table with a renamed key and a dropped one."""
    table = {**RENAMED, "agents.*.temper": Deprecated(
        "chatkernel 0.9", replacement="agents.*.system_prompt"),
        "sessions.keep_forever": Deprecated("chatkernel 0.8", reason="sessions are kept "
                                            "until reset")}
    monkeypatch.setattr(deprecations, "DEPRECATED", table)
    monkeypatch.setattr("chatkernel.core.config.validation.DEPRECATED", table)
    return table


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "chatkernel.config" and r.levelno == logging.WARNING]


def test_loading_takes_a_deprecated_key_as_its_replacement_with_one_warning(
        kernel_table, tmp_path, caplog):
    path = tmp_path / "config.toml"
    raw = {"gateway": {"listen_on": "127.0.0.1:9911"},
           "agents": {"work": {"kind": "echo", "temper": "be brief"}},
           "sessions": {"keep_forever": True}}
    for _ in range(3):  # a process reads its config more than once
        config = cfg.parse(raw, path=path)
    assert config.gateway.listen == "127.0.0.1:9911"
    assert config.agents["work"].system_prompt == "be brief"
    assert raw["gateway"] == {"listen_on": "127.0.0.1:9911"}  # the caller's dict untouched
    said = warnings_of(caplog)
    assert len(said) == 3, said
    assert any("gateway.listen_on is deprecated since chatkernel 0.9: gateway.listen "
               "replaces it" in line for line in said)
    assert any("sessions.keep_forever" in line and "ignored: sessions are kept until "
               "reset" in line for line in said)
    assert all(str(path) in line for line in said)


def test_the_replacement_wins_when_both_are_set(kernel_table, tmp_path):
    raw = {"gateway": {"listen_on": "127.0.0.1:9911", "listen": "127.0.0.1:9922"}}
    assert cfg.parse(raw, path=tmp_path / "c.toml").gateway.listen == "127.0.0.1:9922"
    [found] = find(raw, kernel_table)
    assert found.shadowed and "its value is ignored" in found.message
    assert found.fix(None) == "chatkernel config unset gateway.listen_on"


def test_an_unknown_key_is_still_an_error(kernel_table, tmp_path):
    with pytest.raises(cfg.ConfigError, match="listen_at"):
        cfg.parse({"gateway": {"listen_at": "127.0.0.1:9911"}}, path=tmp_path / "c.toml")
    kernel_table.clear()  # no entry for it: the old key is unknown as any other
    with pytest.raises(cfg.ConfigError, match="listen_on"):
        cfg.parse({"gateway": {"listen_on": "127.0.0.1:9911"}}, path=tmp_path / "c.toml")


def test_a_channel_declares_its_account_keys_on_its_model(monkeypatch, tmp_path, caplog):
    class Account(AccountConfig):
        bot_token: str
        deprecated_keys = {"token": Deprecated("chatkernel-x 1.2", replacement="bot_token")}

    class Later(Account):
        deprecated_keys = {"polling": Deprecated("chatkernel-x 1.3", reason="gone")}

    assert set(deprecations.account_deprecations(Later)) == {"token", "polling"}
    settings = cfg.validate_account(Later, {"token": "t0k", "polling": True}, channel="x",
                                    account="main", path=tmp_path / "c.toml")
    assert settings.bot_token == "t0k"
    said = warnings_of(caplog)
    assert any("channels.x.accounts.main.token is deprecated since chatkernel-x 1.2: "
               "channels.x.accounts.main.bot_token replaces it" in line for line in said)
    assert any("channels.x.accounts.main.polling" in line for line in said)
    with pytest.raises(cfg.ConfigError, match="tokn"):
        cfg.validate_account(Later, {"tokn": "t0k"}, channel="x", account="main")


def doctor(*args: str) -> dict[str, dict]:
    result = CliRunner().invoke(cli, ["doctor", "--json", "--offline", *args])
    answer = json.loads(result.output)
    return {check["id"]: check for check in answer["checks"]}


def test_doctor_reports_each_deprecated_key_with_its_fix(kernel_table, chatkernel_home,
                                                        monkeypatch):
    monkeypatch.setattr(WebChatAccount, "deprecated_keys",
                        {"history": Deprecated("chatkernel 0.9", replacement="history_limit")},
                        raising=False)
    path = chatkernel_home / "config.toml"
    path.write_text('[gateway]\nlisten_on = "127.0.0.1:0"\n\n'
                    '[channels.webchat.accounts.default]\nhistory = 50\n')
    path.chmod(0o600)
    checks = doctor()
    listen = checks["config.deprecated.gateway.listen_on"]
    assert listen["status"] == "warn" and "gateway.listen replaces it" in listen["message"]
    assert listen["fix"] == ("chatkernel config set gateway.listen 127.0.0.1:0 && "
                             "chatkernel config unset gateway.listen_on")
    history = checks["config.deprecated.channels.webchat.accounts.default.history"]
    assert history["status"] == "warn"
    assert history["fix"].startswith("chatkernel config set channels.webchat.accounts."
                                     "default.history_limit 50 && ")
    assert checks["config.valid"]["status"] == "ok"
    assert checks["config.start"]["status"] == "ok"  # the account built, as a start would

    # The fix it names works: run it, and the warnings are gone.
    for command in (listen["fix"], history["fix"]):
        for words in command.split(" && "):
            done = CliRunner().invoke(cli, words.split()[1:])
            assert done.exit_code == 0, done.output
    checks = doctor()
    assert not [key for key in checks if key.startswith("config.deprecated.")]
    assert "listen_on" not in path.read_text() and "history_limit = 50" in path.read_text()


def test_a_secret_s_value_is_never_put_in_the_fix(monkeypatch):
    table = {"old_token": Deprecated("1.0", replacement="bot_token")}
    [found] = find({"old_token": "xoxb-secret-value"}, table, prefix="channels.x.accounts.a")
    assert "xoxb-secret-value" not in found.fix(None)
    assert found.fix(None).startswith("rename channels.x.accounts.a.old_token to "
                                      "channels.x.accounts.a.bot_token")
    [reference] = find({"old_token": "${X_TOKEN}"}, table)
    assert reference.fix(None) == ("chatkernel config set bot_token '${X_TOKEN}' && "
                                   "chatkernel config unset old_token")
