"""``chatkernel status``, ``health`` and ``channels``: exit codes, output, redaction.

The CLI runs in-process (click's CliRunner); gateways run as real processes.
"""

from __future__ import annotations

import json
import os
import socket
from contextlib import contextmanager

import pytest
from click.testing import CliRunner

from chatkernel.cli import cli
from chatkernel.cli.status import EXIT_UNHEALTHY, EXIT_UNREACHABLE
from chatkernel.core.gateway_state import write_state
from chatkernel.testing.process import gateway_process

BOT_TOKEN = "987654321:SECRETsecretSECRETsecretSECRET_ab"
LITERAL_TOKEN = "555555555:LITERALliteralLITERALliteral_cd"
CONTROL_TOKEN = "ctl-SECRET-value-0123456789"
HOOK_URL = "https://hooks.example.invalid/abc-SECRET-path"
SECRET_ENV = {"CK_TEST_BOT_TOKEN": BOT_TOKEN, "CK_TEST_CONTROL": CONTROL_TOKEN,
              "CK_TEST_HOOK_URL": HOOK_URL}
SECRETS = (BOT_TOKEN, LITERAL_TOKEN, CONTROL_TOKEN, HOOK_URL, "SECRET")


@pytest.fixture(autouse=True)
def _restore_logging():
    """Commands run in-process configure the root logger as a process would: undo it."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("CHATKERNEL_HOME", str(home))
    for name, value in SECRET_ENV.items():
        monkeypatch.setenv(name, value)
    return home


@pytest.fixture
def hanging_port():
    """A port that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0), backlog=64)
    yield server.getsockname()[1]
    server.close()


def write_config(home, text):
    (home / "config.toml").write_text(text)


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def telegram_config(slow_port=None):
    accounts = f'''
[gateway]
control_token = "${{CK_TEST_CONTROL}}"

[channels.webchat.accounts.default]

[channels.telegram.accounts.down]
bot_token = "${{CK_TEST_BOT_TOKEN}}"
api_base = "http://127.0.0.1:1"
webhook_url = "${{CK_TEST_HOOK_URL}}"

[channels.telegram.accounts.retired]
enabled = false
bot_token = "{LITERAL_TOKEN}"
'''
    if slow_port is not None:
        accounts += f'''
[channels.telegram.accounts.slow]
bot_token = "${{CK_TEST_BOT_TOKEN}}"
api_base = "http://127.0.0.1:{slow_port}"
'''
    return accounts


@contextmanager
def gateway(home):
    with gateway_process(home, env=SECRET_ENV) as running:
        yield running


def assert_no_secrets(*texts):
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} leaked"


# -- no gateway ------------------------------------------------------------------------


def test_without_a_gateway_status_shows_the_local_state(home):
    result = invoke("status")
    assert result.exit_code == 0
    assert result.output.startswith("Gateway: not running — local state shown")
    assert "webchat  default  stopped" in result.output
    data = json.loads(invoke("status", "--json").output)
    assert data["source"] == "local" and data["gateway"]["reachable"] is False
    assert data["channels"]["webchat"]["accounts"]["default"]["state"] == "stopped"
    assert not (home / "state.db").exists()  # status never creates anything
    deep = invoke("status", "--deep")
    assert deep.exit_code == 1 and "--deep needs a running gateway" in deep.stderr


def test_health_exits_3_when_no_gateway_runs(home):
    result = invoke("health")
    assert result.exit_code == EXIT_UNREACHABLE == 3
    assert "unreachable: no gateway is running" in result.stderr
    result = invoke("health", "--json")
    assert result.exit_code == 3
    assert json.loads(result.output) == {"ok": False, "gateway": {
        "reachable": False, "error": "no gateway is running"}}


@pytest.mark.slow
def test_health_exits_3_when_the_gateway_does_not_answer_in_time(home, hanging_port):
    write_state(home, f"http://127.0.0.1:{hanging_port}", "tok")  # our pid: "alive"
    result = invoke("health", "--timeout", "200")
    assert result.exit_code == 3
    assert "did not answer" in result.stderr


def test_status_all_redacts_every_secret_without_a_gateway(home):
    write_config(home, telegram_config())
    for args in (("status", "--all"), ("status", "--all", "--json"), ("status", "--json"),
                 ("channels", "list", "--json")):
        result = invoke(*args)
        assert result.exit_code == 0, result.output
        assert_no_secrets(result.output, result.stderr)
    text = invoke("status", "--all").output
    assert "# chatkernel diagnosis (read-only; secrets redacted)" in text
    assert 'bot_token = "${CK_TEST_BOT_TOKEN}"' in text  # references say where, not what
    assert 'bot_token = "***"' in text  # the literal one
    assert "telegram  retired  disabled" in text
    assert "telegram 0.1.0 (chatkernel-telegram)" in text
    diagnosis = json.loads(invoke("status", "--all", "--json").output)
    assert diagnosis["config_problems"] == []
    assert diagnosis["snapshot"]["source"] == "local"


def test_status_all_reports_config_problems_instead_of_failing(home):
    write_config(home, '[queue]\nmode = "sometimes"\n')
    result = invoke("status", "--all")
    assert result.exit_code == 0
    assert "queue.mode" in result.output
    plain = invoke("status")
    assert plain.exit_code == 1 and "queue.mode" in plain.stderr


def test_channels_probe_without_a_gateway_probes_from_here(home):
    write_config(home, telegram_config())
    result = invoke("channels", "probe", "telegram")
    assert result.exit_code == EXIT_UNHEALTHY
    assert "(no gateway is running: probed from here)" in result.output
    assert "BAD telegram:down: FAILED: getMe: cannot connect" in result.output
    assert_no_secrets(result.output)
    missing = invoke("channels", "probe", "slack")
    assert missing.exit_code == 1 and "no running account matches 'slack'" in missing.stderr


# -- with a gateway --------------------------------------------------------------------


@pytest.mark.slow
def test_health_and_status_of_a_healthy_gateway(home):
    with gateway(home) as running:
        result = invoke("health")
        assert result.exit_code == 0, result.output
        assert result.output.startswith("ok — gateway " + running.url)
        snapshot = json.loads(invoke("health", "--json").output)
        assert snapshot["ok"] is True and snapshot["live"] is False
        assert set(snapshot) >= {"ok", "ts", "duration_ms", "channels", "sessions",
                                 "presence", "gateway"}
        live = json.loads(invoke("health", "--verbose", "--json").output)
        assert live["live"] is True
        assert live["channels"]["webchat"]["accounts"]["default"]["probe"]["ok"] is True
        status = invoke("status")
        assert status.exit_code == 0
        assert status.output.startswith(f"Gateway: running at {running.url}")
        data = json.loads(invoke("status", "--json").output)
        assert data["source"] == "gateway" and data["ok"] is True
        assert any(p["mode"] == "cli" for p in data["presence"])  # the CLI reported itself
        listed = json.loads(invoke("channels", "list", "--json").output)
        assert [a["key"] for a in listed["accounts"]] == ["webchat:default"]
        probe = invoke("channels", "probe", "webchat:default")
        assert probe.exit_code == 0 and "ok  webchat:default: ok: serving" in probe.output


@pytest.mark.slow
def test_health_exits_1_when_a_probe_fails_or_times_out(home, hanging_port):
    write_config(home, telegram_config(slow_port=hanging_port))
    with gateway(home):
        result = invoke("health", "--verbose", "--timeout", "300")
        assert result.exit_code == EXIT_UNHEALTHY == 1
        out = result.output
        assert out.startswith("UNHEALTHY")
        assert "BAD telegram:slow" in out and "TIMED OUT: no answer within 0.3 s" in out
        assert "BAD telegram:down" in out and "cannot connect to the Bot API" in out
        assert "ok  webchat:default" in out
        assert "telegram:retired: disabled" in out
        probe = invoke("channels", "probe", "telegram:slow", "--timeout", "200", "--json")
        assert probe.exit_code == 1
        assert json.loads(probe.output)["probes"]["telegram:slow"]["timed_out"] is True
        # nothing secret in anything the commands print, gateway or not
        for args in (("status", "--all"), ("status", "--all", "--json"), ("health", "--json"),
                     ("status", "--deep", "--timeout", "300"), ("channels", "list")):
            result = invoke(*args)
            assert_no_secrets(result.output, result.stderr)
    # the gateway's token file is gone once it stopped; status falls back to local state
    assert invoke("status").output.startswith("Gateway: not running")


def test_the_redactor_hides_config_secrets_env_values_and_token_shapes(home, monkeypatch):
    from chatkernel.core.health.report import Redactor, config_secrets
    from chatkernel.core.plugins import collect_channels, get_plugin_manager

    # The token shapes come from the installed channels, as every command that redacts
    # loads them first: without this the test passed only after another had loaded them.
    collect_channels(get_plugin_manager())

    monkeypatch.setenv("CK_TEST_QUOTED", 'pa"ss\\word-123')
    raw = {"gateway": {"control_token": "literal-control-secret"},
           "channels": {"x": {"accounts": {"a": {
               "webhook_url": "${CK_TEST_HOOK_URL}", "note": "${CK_TEST_QUOTED}",
               "app_secret": "${CK_TEST_CONTROL}"}}}}}
    redact = Redactor(config_secrets(raw, extra=["gateway-json-token-xyz"]))
    text = (f"url {HOOK_URL} / {CONTROL_TOKEN} / literal-control-secret / "
            f"{json.dumps(os.environ['CK_TEST_QUOTED'])} / gateway-json-token-xyz / "
            f"bot{LITERAL_TOKEN}/getMe")
    redacted = redact(text)
    assert_no_secrets(redacted)
    assert "pa" not in redacted and "gateway-json-token" not in redacted
    assert redacted.count("***") == 6


def test_probing_the_web_chat_without_a_gateway_is_not_a_failure(chatkernel_home):
    """With no gateway, the web chat (on by default) has nothing of its own to check."""
    result = CliRunner().invoke(cli, ["channels", "probe"])
    assert result.exit_code == 0, result.output
    assert "webchat:default" in result.stdout
    assert "nothing to check: the running gateway serves it" in result.stdout
