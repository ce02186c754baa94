"""``chatkernel security audit``: each check finds its problem in a config (and home) built
to have it and nothing in the starter config; ``--fix`` tightens file modes only; the
output never holds a secret's value; ``status`` counts the critical findings."""

from __future__ import annotations

import json
import os
import stat
from typing import Literal

import pytest
from click.testing import CliRunner

from chatkernel import Channel, hookimpl
from chatkernel.cli import cli
from chatkernel.core import config as cfg
from chatkernel.core.health.audit import audit, critical, fix_modes
from chatkernel.core.plugins import get_plugin_manager

#: Values that must never be printed: each is a secret somewhere in the configs below.
TOKEN = "tok-SECRET-0123456789abcdef"
CONTROL = "ctl-SECRET-9876543210fedcba"
SIGNING = "sig-SECRET-55aa55aa55aa"
ENV_TOKEN = "env-SECRET-abababababab"
SECRETS = (TOKEN, CONTROL, SIGNING, ENV_TOKEN)


class HookAccount(cfg.AccountConfig):
    """A channel that receives webhooks in one of its modes, with the two policy keys an
    account may have (declared here, so the test runs with or without them in the kernel)."""

    bot_token: str = ""
    mode: Literal["poll", "hook"] = "poll"
    signing_secret: str | None = None
    dm_policy: str | None = None
    group_policy: str | None = None

    def webhook_secrets(self) -> tuple[str, ...]:
        return ("signing_secret",) if self.mode == "hook" else ()


class HookChannel(Channel):
    name = "cktesthook"
    account_model = HookAccount


class HookPlugin:
    @hookimpl
    def register_channels(self, register):
        register(HookChannel)


@pytest.fixture(autouse=True)
def _setup(chatkernel_home, monkeypatch):
    """The test channel in the CLI's plugin manager, a known umask, the secret variable."""
    old = os.umask(0o022)
    monkeypatch.setenv("CK_AUDIT_TOKEN", ENV_TOKEN)
    pm = get_plugin_manager()
    pm.register(HookPlugin(), name="test-audit-channel")
    yield
    pm.unregister(name="test-audit-channel")
    os.umask(old)


@pytest.fixture
def home(chatkernel_home):
    return chatkernel_home


def write(home, text: str, mode: int = 0o600):
    path = home / "config.toml"
    path.write_text(text)
    path.chmod(mode)
    return path


def run_audit(home, text: str | None = None, mode: int = 0o600):
    if text is not None:
        write(home, text, mode)
    path = home / "config.toml"
    raw = cfg.read_raw(path)
    config = cfg.parse(raw, path=path, strict_env=False)
    findings = audit(path, home, raw, config)
    for finding in findings:
        for secret in SECRETS:
            assert secret not in finding.message and secret not in finding.fix
    return findings


def found(findings, check: str | None = None) -> list[tuple[str, str]]:
    return [(f.check, f.severity) for f in findings if check is None or f.check == check]


def ours(findings, check: str) -> list[tuple[str, str]]:
    """The findings of ``check`` about the test channel's accounts (the web chat's
    account, which a config that names no other web chat account implies, left out)."""
    return [(f.check, f.severity) for f in findings
            if f.check == check and "channels.cktesthook." in f.message]


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


# -- the starter config ------------------------------------------------------------------------


def test_the_starter_config_has_no_critical_or_warning(home):
    assert invoke("config", "init").exit_code == 0
    findings = run_audit(home)
    assert [f for f in findings if f.severity != "info"] == []
    # The web chat's "*" is fine on loopback: said, as an info.
    assert found(findings) == [("allow-everyone", "info")]
    result = invoke("security", "audit", "--json")
    assert result.exit_code == 0
    assert json.loads(result.output)["ok"] is True


# -- secrets in plain text ------------------------------------------------------------------------


def test_a_literal_secret_is_named_by_its_key_never_shown(home):
    findings = run_audit(home, f"""
[gateway]
control_token = "{CONTROL}"
[agent]
env = {{ OPENAI_API_KEY = "{TOKEN}" }}
[channels.cktesthook.accounts.main]
bot_token = "{TOKEN}"
[channels.cktesthook.accounts.other]
bot_token = "${{CK_AUDIT_TOKEN}}"
""")
    literal = [f for f in findings if f.check == "secret-literal"]
    assert [(f.severity, f.message.split()[0]) for f in literal] == [
        ("warn", "gateway.control_token"), ("warn", "agent.env.OPENAI_API_KEY"),
        ("warn", "channels.cktesthook.accounts.main.bot_token")]
    assert 'gateway.control_token = "${CHATKERNEL_CONTROL_TOKEN}"' in literal[0].fix
    assert '"OPENAI_API_KEY" to agent.pass_env' in literal[1].fix
    assert "CKTESTHOOK_BOT_TOKEN" in literal[2].fix


# -- who may talk to the agent ---------------------------------------------------------------


COMMAND_AGENT = '[agent]\nkind = "command"\ncommand = ["cat"]\n'


@pytest.mark.parametrize(("text", "expected"), [
    # "*", dm_policy or group_policy open: critical when a command agent answers...
    (COMMAND_AGENT + '[channels.cktesthook.accounts.main]\nallow_from = ["*"]\n', "critical"),
    (COMMAND_AGENT + '[channels.cktesthook.accounts.main]\ndm_policy = "open"\n', "critical"),
    (COMMAND_AGENT + '[channels.cktesthook.accounts.main]\ngroup_policy = "open"\n',
     "critical"),
    # ...or an agent with access level full, set on it or on the account...
    ('[agent]\naccess_level = "full"\n[channels.cktesthook.accounts.main]\n'
     'allow_from = ["*"]\n', "critical"),
    ('[channels.cktesthook.accounts.main]\nallow_from = ["*"]\naccess_level = "full"\n',
     "critical"),
    # ...or a command agent a binding gives some of its chats.
    ('[agents.default]\n[agents.shell]\nkind = "command"\ncommand = ["cat"]\n'
     '[[bindings]]\nagent = "shell"\nchannel = "cktesthook"\nchat = "42"\n'
     '[channels.cktesthook.accounts.main]\nallow_from = ["*"]\n', "critical"),
    # A warning where the agent cannot act on the machine.
    ('[channels.cktesthook.accounts.main]\nallow_from = ["*"]\n', "warn"),
    ('[agents.default]\n[agents.shell]\nkind = "command"\ncommand = ["cat"]\n'
     '[[bindings]]\nagent = "shell"\naccount = "other"\n'
     '[channels.cktesthook.accounts.main]\nallow_from = ["*"]\n'
     '[channels.cktesthook.accounts.other]\nallow_from = ["1"]\n', "warn"),
    # Bindings catching every chat of the account leave the command agent out of it.
    ('[agent]\nkind = "command"\ncommand = ["cat"]\n[agents.chat]\n'
     '[[bindings]]\nagent = "chat"\nchannel = "cktesthook"\n'
     '[channels.cktesthook.accounts.main]\nallow_from = ["*"]\n', "warn"),
])
def test_an_account_admitting_everyone(home, text, expected):
    findings = run_audit(home, text)
    assert ours(findings, "allow-everyone") == [("allow-everyone", expected)]
    assert "channels.cktesthook.accounts.main" in findings[0].message


@pytest.mark.parametrize("text", [
    COMMAND_AGENT + '[channels.cktesthook.accounts.main]\nallow_from = ["1", "2"]\n',
    COMMAND_AGENT + '[channels.cktesthook.accounts.main]\nallow_from = ["*"]\n'
                    'enabled = false\n',
    COMMAND_AGENT + '[channels.cktesthook.accounts.main]\ngroup_policy = "allowlist"\n'
                    'dm_policy = "pairing"\n',
])
def test_an_account_admitting_some_is_no_finding(home, text):
    assert ours(run_audit(home, text), "allow-everyone") == []


# -- the listen address ------------------------------------------------------------------------


def test_listening_beyond_loopback_without_a_control_token(home):
    findings = run_audit(home, '[gateway]\nlisten = "0.0.0.0:8787"\n')
    assert found(findings, "listen-public-no-token") == [("listen-public-no-token",
                                                          "critical")]


def test_listening_beyond_loopback_with_the_web_chat_open(home):
    text = ('[gateway]\nlisten = "0.0.0.0:8787"\ncontrol_token = "${CK_AUDIT_TOKEN}"\n'
            '[channels.webchat.accounts.default]\n')
    findings = run_audit(home, text)
    assert found(findings) == [("listen-public-page-open", "critical")]
    assert "channels.webchat.accounts.default" in findings[0].message
    closed = text + 'allow_from = ["alice"]\n'
    assert found(run_audit(home, closed)) == []
    local = text.replace("0.0.0.0", "127.0.0.1")
    assert found(run_audit(home, local)) == [("allow-everyone", "info")]


# -- webhooks ------------------------------------------------------------------------------


def test_a_webhook_account_without_its_signing_key(home):
    findings = run_audit(home, '[channels.cktesthook.accounts.main]\nmode = "hook"\n')
    assert found(critical(findings)) == [("webhook-unsigned", "critical")]
    assert "channels.cktesthook.accounts.main" in findings[0].message
    assert "signing_secret" in findings[0].message
    signed = f'[channels.cktesthook.accounts.main]\nmode = "hook"\nsigning_secret = "{SIGNING}"\n'
    assert found(run_audit(home, signed), "webhook-unsigned") == []
    polling = '[channels.cktesthook.accounts.main]\nmode = "poll"\n'
    assert found(run_audit(home, polling), "webhook-unsigned") == []


@pytest.mark.parametrize(("package", "table"), [
    ("chatkernel_slack", '[channels.slack.accounts.main]\nbot_token = "${CK_AUDIT_TOKEN}"\n'
                         'mode = "events"\n'),
    ("chatkernel_whatsapp", '[channels.whatsapp.accounts.main]\naccess_token = "${CK_AUDIT_TOKEN}"'
                            '\nphone_number_id = "123"\nverify_token = "${CK_AUDIT_TOKEN}"\n'
                            'app_secret = ""\n'),
])
def test_the_first_party_webhook_channels_declare_their_keys(home, package, table):
    pytest.importorskip(package)
    assert found(run_audit(home, table), "webhook-unsigned") == [("webhook-unsigned",
                                                                  "critical")]


# -- the command agent's environment -----------------------------------------------------------


SECRET_ACCOUNT = '[channels.cktesthook.accounts.main]\nbot_token = "${CK_AUDIT_TOKEN}"\n'


@pytest.mark.parametrize(("agent", "expected"), [
    ('pass_env = ["CK_AUDIT_TOKEN"]', "pass_env passes CK_AUDIT_TOKEN"),
    ('pass_env = ["CHATKERNEL_CONTROL_TOKEN"]', "pass_env passes CHATKERNEL_CONTROL_TOKEN"),
    ('env = { BOT = "${CK_AUDIT_TOKEN}" }', "env.BOT references ${CK_AUDIT_TOKEN}"),
    (f'env = {{ BOT = "{CONTROL}" }}', "env.BOT is a copy of a secret of the config"),
])
def test_a_command_agent_given_the_gateway_s_secrets(home, agent, expected):
    text = (f'[gateway]\ncontrol_token = "{CONTROL}"\n' + COMMAND_AGENT + agent + "\n"
            + SECRET_ACCOUNT)
    findings = [f for f in run_audit(home, text) if f.check == "command-agent-env"]
    assert [(f.severity, expected in f.message) for f in findings] == [("critical", True)]


@pytest.mark.parametrize("text", [
    COMMAND_AGENT + 'pass_env = ["MODEL_DIR", "OPENAI_API_KEY"]\n' + SECRET_ACCOUNT,
    '[agent]\nkind = "echo"\npass_env = ["CK_AUDIT_TOKEN"]\n' + SECRET_ACCOUNT,
])
def test_a_command_agent_with_its_own_variables_is_no_finding(home, text):
    assert found(run_audit(home, text), "command-agent-env") == []


# -- file modes, and --fix ---------------------------------------------------------------------


def test_files_others_can_read(home):
    (home / "state.db").write_bytes(b"")
    (home / "state.db-wal").write_bytes(b"")
    (home / ".env").write_text(f"CK_AUDIT_TOKEN={ENV_TOKEN}\n")
    (home / "gateway.json").write_text("{}")
    for name, mode in (("state.db", 0o644), ("state.db-wal", 0o640), (".env", 0o640),
                       ("gateway.json", 0o604)):
        (home / name).chmod(mode)
    home.chmod(0o775)
    findings = run_audit(home, "[agent]\n", mode=0o644)
    modes = {f.path.name: f.severity for f in findings if f.check == "file-mode"}
    assert modes == {"config.toml": "warn", "state.db": "warn", "state.db-wal": "warn",
                     ".env": "critical", "gateway.json": "critical"}
    assert found(findings, "home-mode") == [("home-mode", "critical")]
    # A config file holding a secret, or one others may write, is critical.
    findings = run_audit(home, f'[gateway]\ncontrol_token = "{CONTROL}"\n', mode=0o640)
    assert {f.path.name: f.severity for f in findings
            if f.check == "file-mode"}["config.toml"] == "critical"
    findings = run_audit(home, "[agent]\n", mode=0o620)
    assert {f.path.name: f.severity for f in findings
            if f.check == "file-mode"}["config.toml"] == "critical"


def test_fix_tightens_the_modes_says_so_and_a_second_run_finds_nothing(home):
    write(home, '[channels.webchat]\nenabled = false\n'
                '[channels.cktesthook.accounts.main]\nbot_token = "${CK_AUDIT_TOKEN}"\n'
                'allow_from = ["1"]\n', 0o644)
    (home / "state.db").write_bytes(b"")
    (home / "state.db").chmod(0o666)
    home.chmod(0o777)
    result = invoke("security", "audit")
    assert result.exit_code == 1  # the home and the state database are writable by others
    result = invoke("security", "audit", "--fix")
    assert result.exit_code == 0
    lines = [line for line in result.output.splitlines() if line.startswith("fixed ")]
    assert sorted(lines) == sorted([f"fixed {home / 'config.toml'}: mode 0644 -> 0600",
                                    f"fixed {home / 'state.db'}: mode 0666 -> 0600",
                                    f"fixed {home}: mode 0777 -> 0700"])
    assert result.output.rstrip().endswith("no findings")
    assert stat.S_IMODE((home / "config.toml").stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    again = invoke("security", "audit", "--fix")
    assert again.exit_code == 0
    assert again.output == "no file mode to tighten\nno findings\n"


def test_fix_changes_nothing_but_modes(home):
    text = COMMAND_AGENT + '[channels.cktesthook.accounts.main]\nallow_from = ["*"]\n'
    path = write(home, text, 0o644)
    findings = run_audit(home)
    changes = fix_modes(findings)
    assert [(c.path, c.old, c.new) for c in changes] == [(path, 0o644, 0o600)]
    assert path.read_text() == text
    assert found(critical(run_audit(home))) == [("allow-everyone", "critical")]


def test_a_config_that_does_not_validate_still_has_its_files_and_secrets_checked(home):
    write(home, f'[gateway]\nlisten = "nowhere"\ncontrol_token = "{CONTROL}"\n', 0o644)
    result = CliRunner().invoke(cli, ["security", "audit", "--json"])
    assert "the accounts and agents are not checked" in result.stderr
    assert result.exit_code == 1
    findings = json.loads(result.stdout)["findings"]
    assert [(item["check"], item["severity"]) for item in findings] == [
        ("file-mode", "critical"), ("secret-literal", "warn")]
    assert CONTROL not in result.output


# -- the command's output ------------------------------------------------------------------------


EVERYTHING = f"""
[gateway]
listen = "0.0.0.0:8787"
control_token = "{CONTROL}"
[agent]
kind = "command"
command = ["cat"]
pass_env = ["CK_AUDIT_TOKEN"]
env = {{ COPY = "{TOKEN}" }}
[channels.webchat.accounts.default]
[channels.cktesthook.accounts.main]
bot_token = "{TOKEN}"
allow_from = ["*"]
mode = "hook"
[channels.cktesthook.accounts.other]
bot_token = "${{CK_AUDIT_TOKEN}}"
mode = "hook"
signing_secret = "{SIGNING}"
"""


def test_json_shape_exit_codes_and_no_secret_in_any_output(home):
    write(home, EVERYTHING, 0o644)
    (home / ".env").write_text(f"CK_AUDIT_TOKEN={ENV_TOKEN}\n")
    (home / ".env").chmod(0o644)
    result = invoke("security", "audit", "--json")
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert set(data) == {"ok", "findings"} and data["ok"] is False
    assert all(set(item) == {"check", "severity", "message", "fix"}
               for item in data["findings"])
    assert {item["check"] for item in data["findings"]} == {
        "secret-literal", "file-mode", "listen-public-page-open", "allow-everyone",
        "webhook-unsigned", "command-agent-env"}
    severities = [item["severity"] for item in data["findings"]]
    assert severities == sorted(severities, key=["critical", "warn", "info"].index)
    text = invoke("security", "audit")
    assert text.exit_code == 1
    assert text.output.startswith("CRITICAL")
    assert "critical, " in text.output.splitlines()[-1]
    fixed = invoke("security", "audit", "--fix", "--json")
    assert [item["path"] for item in json.loads(fixed.output)["fixed"]] == [
        str(home / "config.toml"), str(home / ".env")]
    status = invoke("status")
    for output in (result.output, text.output, fixed.output, status.output):
        for secret in SECRETS:
            assert secret not in output


def test_exit_0_with_warnings_only(home):
    write(home, '[channels.cktesthook.accounts.main]\nallow_from = ["*"]\n')
    result = invoke("security", "audit")
    assert result.exit_code == 0
    assert result.output.splitlines()[-1] == "0 critical, 1 warn, 1 info"


def test_status_mentions_the_critical_findings(home):
    write(home, COMMAND_AGENT + '[channels.cktesthook.accounts.main]\nallow_from = ["*"]\n',
          0o644)
    result = invoke("status")
    assert result.exit_code == 0
    assert "Security: 1 critical finding(s): run chatkernel security audit" in result.output
    assert json.loads(invoke("status", "--json").output)["security"]["critical"] == 1
    write(home, '[channels.cktesthook.accounts.main]\nallow_from = ["1"]\n')
    assert "Security:" not in invoke("status").output
