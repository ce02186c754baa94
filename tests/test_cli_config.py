"""``chatkernel config init|path|show|get|set|unset|validate`` through click's CliRunner.

``chatkernel_home`` (from the kernel's test kit) points ``CHATKERNEL_HOME`` at
an empty temporary directory.
"""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys

import pytest
from click.testing import CliRunner

from chatkernel import Channel, hookimpl
from chatkernel.cli import cli
from chatkernel.core import config as cfg
from chatkernel.testing import turn_on_example


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def config_file(chatkernel_home):
    return chatkernel_home / "config.toml"


def ok(runner, *args, input=None):
    result = runner.invoke(cli, ["config", *args], input=input, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def fails(runner, *args):
    """Run a command expected to fail cleanly: exit 1, one message, no traceback."""
    result = runner.invoke(cli, ["config", *args])
    assert result.exit_code != 0, result.output
    # A clean click error, not an exception escaping the command.
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert result.stderr.startswith("Error: ")
    return result.stderr


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


# -- init and path -------------------------------------------------------------------------


def test_config_path(runner, config_file, tmp_path, monkeypatch):
    assert ok(runner, "path") == f"{config_file}\n"
    explicit = tmp_path / "elsewhere.toml"
    assert ok(runner, "--config", str(explicit), "path") == f"{explicit}\n"
    monkeypatch.setenv("CHATKERNEL_CONFIG", str(tmp_path / "env.toml"))
    assert ok(runner, "path") == f"{tmp_path / 'env.toml'}\n"


def test_config_init_writes_0600_and_refuses_to_overwrite(runner, config_file):
    assert ok(runner, "init").startswith(f"wrote {config_file}, with an example for each "
                                         "installed channel (")
    assert mode(config_file) == 0o600
    assert cfg.load(config_file).agent.kind == "echo"

    ok(runner, "set", "agent.kind", "command")
    before = config_file.read_bytes()
    error = fails(runner, "init")
    assert str(config_file) in error and "--force" in error
    assert config_file.read_bytes() == before

    ok(runner, "init", "--force")
    assert cfg.read_raw(config_file)["agent"] == {"kind": "echo"}  # the starter's again
    assert mode(config_file) == 0o600


#: Values shaped as each channel's secrets are, for the starter's ${ENV} references.
EXAMPLE_ENV = {"TELEGRAM_BOT_TOKEN": "123456:test-token", "SLACK_BOT_TOKEN": "xoxb-test",
               "SLACK_APP_TOKEN": "xapp-test"}


def test_config_init_writes_a_commented_starter_that_validates(runner, config_file):
    from chatkernel.core.plugins import collect_channels
    from chatkernel.core.plugins import get_plugin_manager

    ok(runner, "init")
    text = config_file.read_text()
    for name, channel in collect_channels(get_plugin_manager()).items():
        assert f"# -- {name} (" in text
        for line in channel.config_example.strip().splitlines():
            assert (line if name == "webchat" else f"# {line}") in text  # its own example
    assert "\n[channels.webchat.accounts.default]" in text  # the default channel: on
    assert "\n# [heartbeat]\n" in text and "48 paid turns a day" in text
    assert ok(runner, "validate") == f"ok: {config_file}, 1 channel account(s): " \
                                     "webchat:default\n"
    # The file is the person's now: set keeps its comments.
    ok(runner, "set", "agent.kind", "echo")
    assert "# -- webchat (built-in) " in config_file.read_text()


@pytest.mark.parametrize("channel", ["telegram", "slack", "whatsapp", "wechat"])
def test_an_uncommented_channel_example_validates(runner, config_file, monkeypatch, channel):
    pytest.importorskip(f"chatkernel_{channel}")
    ok(runner, "init")
    text = turn_on_example(config_file.read_text(), channel)
    config_file.write_text(text)
    names = sorted(set(re.findall(r"\$\{([A-Z_]+)\}", text)) - {"CHATKERNEL_CONTROL_TOKEN"})
    assert names  # its secrets are ${ENV} references...
    error = fails(runner, "validate")
    assert "is not set (referenced as ${" in error  # ...read where the gateway runs
    for name in names:
        monkeypatch.setenv(name, EXAMPLE_ENV.get(name, "test-secret-value"))
    accounts = ", ".join(sorted([f"{channel}:main", "webchat:default"]))
    assert ok(runner, "validate") == f"ok: {config_file}, 2 channel account(s): {accounts}\n"


def test_config_init_at_an_explicit_path_creates_directories(runner, tmp_path, chatkernel_home):
    target = tmp_path / "a" / "b" / "config.toml"
    ok(runner, "--config", str(target), "init")
    assert mode(target) == 0o600
    assert not (chatkernel_home / "config.toml").exists()


# -- set and get ---------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "text", "stored", "shown"), [
    ("agent.command", '["llm", "-m", "x"]', ["llm", "-m", "x"], '["llm", "-m", "x"]'),
    ("queue.debounce_ms", "250", 250, "250"),
    ("agent.timeout", "2.5", 2.5, "2.5"),
    ("health_monitor.enabled", "false", False, "false"),
    ("agent.kind", "command", "command", "command"),
    ("agent.model", "gpt-4o-mini", "gpt-4o-mini", "gpt-4o-mini"),
    ("gateway.listen", "0.0.0.0:9000", "0.0.0.0:9000", "0.0.0.0:9000"),
    ("agent.system_prompt", "Be brief.", "Be brief.", "Be brief."),
])
def test_config_set_then_get(runner, config_file, key, text, stored, shown):
    assert ok(runner, "set", key, text) == f"set {key} = {cfg.inline_value(stored)} in " \
        f"{config_file}\n"  # one line saying what it did
    assert cfg.get_key(cfg.read_raw(config_file), key) == stored
    assert type(cfg.get_key(cfg.read_raw(config_file), key)) is type(stored)
    assert ok(runner, "get", key) == f"{shown}\n"


def test_config_set_keeps_other_keys_and_mode(runner, config_file):
    ok(runner, "init")
    ok(runner, "set", "queue.cap", "5")
    ok(runner, "set", "heartbeat.active_hours.start", "08:00")
    raw = cfg.read_raw(config_file)
    assert raw["queue"]["cap"] == 5
    assert raw["queue"]["mode"] == "collect"  # untouched
    assert raw["heartbeat"]["active_hours"] == {"start": "08:00"}
    assert mode(config_file) == 0o600


def test_config_set_creates_the_file_with_mode_0600(runner, config_file):
    assert not config_file.exists()
    ok(runner, "set", "agent.kind", "echo")
    assert mode(config_file) == 0o600


@pytest.mark.parametrize(("key", "expected"), [
    ("agent.kind", "echo"),
    ("queue.debounce_ms", "1000"),
    ("queue.mode", "collect"),
    ("queue.cap", "20"),
    ("gateway.listen", "127.0.0.1:8787"),
    ("heartbeat.every", "30m"),
    ("agent.command", "[]"),
])
def test_config_get_of_an_unset_key_prints_the_default(runner, config_file, key, expected):
    assert ok(runner, "get", key) == f"{expected}\n"
    assert not config_file.exists()  # reading never writes


def test_config_get_of_an_unknown_key_fails(runner, config_file):
    error = fails(runner, "get", "agent.kidn")
    assert str(config_file) in error and "agent.kidn" in error
    assert "unknown key (did you mean 'kind'?)" in error  # worded as `config set` words it
    error = fails(runner, "get", "queue.nope")
    assert error == f"Error: {config_file}: queue.nope: unknown key (check its spelling)\n"
    assert fails(runner, "set", "queue.nope", "1") == error
    # A known key with no default is not unknown.
    assert "not set, and it has no default" in fails(runner, "get", "gateway.control_token")


def get(runner, *args):
    result = runner.invoke(cli, ["config", "get", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_config_get_says_a_default_is_a_default(runner, config_file):
    result = get(runner, "queue.mode")
    assert result.stdout == "collect\n"  # the value alone, for scripts
    assert result.stderr == f"# the default (not set in {config_file})\n"
    config_file.write_text('[queue]\nmode = "followup"\n')
    result = get(runner, "queue.mode")
    assert (result.stdout, result.stderr) == ("followup\n", "")
    assert json.loads(get(runner, "queue.cap", "--json").stdout) == {
        "key": "queue.cap", "value": 20, "source": "default", "note": ""}
    assert json.loads(get(runner, "queue.mode", "--json").stdout)["source"] == "file"


def test_config_get_of_the_web_chat_allowlist_says_it_admits_everyone(runner, config_file):
    result = get(runner, "channels.webchat.allow_from")  # an account setting, asked of the channel
    assert result.stdout == ('channels.webchat.accounts.default.allow_from = ["*"]  # the '
                             'default; "*" admits every sender who reaches the account\n')
    assert "set per account" in result.stderr
    result = get(runner, "channels.webchat.accounts.default.allow_from")
    assert result.stdout == '["*"]\n'
    assert '"*" admits every sender' in result.stderr and "the default" in result.stderr
    assert json.loads(get(runner, "channels.webchat.allow_from", "--json").stdout) == {
        "key": "channels.webchat.allow_from",
        "per_account": [{"key": "channels.webchat.accounts.default.allow_from",
                         "value": ["*"], "source": "default",
                         "note": '"*" admits every sender who reaches the account'}]}
    # Only a channel setting in the file: the default account, and its defaults, stay.
    config_file.write_text("[channels.webchat]\ntext_limit = 1000\n")
    assert get(runner, "channels.webchat.accounts.default.history_limit").stdout == "500\n"
    config_file.write_text('[channels.webchat.accounts.default]\nallow_from = ["u1"]\n')
    data = json.loads(get(runner, "channels.webchat.allow_from", "--json").stdout)
    assert data["per_account"] == [{"key": "channels.webchat.accounts.default.allow_from",
                                    "value": ["u1"], "source": "file",
                                    "note": "admits only these 1 sender(s)"}]


def test_config_get_of_an_account_default(runner, config_file, monkeypatch):
    pytest.importorskip("chatkernel_telegram")
    config_file.write_text('[channels.telegram.accounts.main]\n'
                           'bot_token = "${TELEGRAM_BOT_TOKEN}"\n')
    assert get(runner, "channels.telegram.accounts.main.poll_timeout").stdout == "30\n"
    result = get(runner, "channels.telegram.allow_from")
    assert result.stdout == ("channels.telegram.accounts.main.allow_from = []  # the default; "
                             "an empty allowlist admits nobody\n")
    assert get(runner, "channels.telegram.accounts.main.bot_token").stdout == \
        "${TELEGRAM_BOT_TOKEN}\n"  # as written: a reference hides nothing
    error = fails(runner, "get", "channels.telegram.accounts.main.webhook_url")
    assert "no default" in error


def test_config_get_of_a_heartbeat_key_says_it_is_off_without_a_table(runner, config_file):
    result = get(runner, "heartbeat.every")
    assert result.stdout == "30m\n"
    assert "the config heartbeat is off: the config has no [heartbeat] table" in result.stderr
    config_file.write_text("[heartbeat]\n")
    result = get(runner, "heartbeat.every")
    assert result.stdout == "30m\n" and "off" not in result.stderr


def test_config_get_of_a_table(runner, config_file):
    ok(runner, "init")
    out = ok(runner, "get", "queue")
    assert 'mode = "collect"' in out and "debounce_ms = 1000" in out


def test_config_get_redacts_a_secret(runner, config_file):
    cfg.write_raw(config_file, {"gateway": {"control_token": "s3cret"}})
    assert ok(runner, "get", "gateway.control_token") == "***\n"


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("queue.mode", "bogus", "'collect', 'followup', 'interrupt' or 'steer' (got 'bogus')"),
    ("queue.cap", "0", "greater than or equal to 1 (got 0)"),
    ("gateway.listen", "nonsense", "expected HOST:PORT"),
    ("agent.kidn", "x", "unknown key (did you mean 'kind'?)"),
    ("queue.debounce_ms", "soon", "valid integer"),
    ("agent.kind.sub", "x", "agent.kind is a value, not a table"),
])
def test_config_set_invalid_value_fails_and_leaves_the_file(runner, config_file, key, value,
                                                            expected):
    ok(runner, "init")
    ok(runner, "set", "queue.cap", "7")
    before = config_file.read_bytes()
    error = fails(runner, "set", key, value)
    assert str(config_file) in error
    assert key.rsplit(".", 1)[0] in error  # the dotted key (or its table)
    assert expected in error
    assert config_file.read_bytes() == before
    assert mode(config_file) == 0o600
    assert sorted(p.name for p in config_file.parent.iterdir()) == ["config.toml"]


def test_config_set_invalid_value_names_the_full_dotted_key(runner, config_file):
    error = fails(runner, "set", "queue.mode", "bogus")
    assert error.startswith(f"Error: {config_file}: queue.mode: ")
    assert not config_file.exists()


def test_config_set_accepts_an_env_reference_that_is_not_set_here(runner, config_file,
                                                                  monkeypatch):
    # The variable may only exist where the gateway runs.
    monkeypatch.delenv("CK_TEST_TOKEN", raising=False)
    ok(runner, "set", "gateway.control_token", "${CK_TEST_TOKEN}")
    assert cfg.read_raw(config_file)["gateway"]["control_token"] == "${CK_TEST_TOKEN}"
    assert ok(runner, "get", "gateway.control_token") == "${CK_TEST_TOKEN}\n"


# -- errors reading the file ---------------------------------------------------------------


@pytest.mark.parametrize("args", [["show"], ["get", "agent.kind"], ["set", "agent.kind", "x"],
                                  ["validate"], ["unset", "agent.kind"]])
def test_bad_toml_names_the_file(runner, config_file, args):
    config_file.write_text("[agent\nkind = 'echo'\n")
    error = fails(runner, *args)
    assert f"{config_file}: not valid TOML" in error
    assert config_file.read_text() == "[agent\nkind = 'echo'\n"


# -- show ----------------------------------------------------------------------------------


def test_config_show_redacts_secrets_but_keeps_env_references(runner, config_file):
    config_file.write_text(
        '[channels.telegram.accounts.main]\nbot_token = "123:abc"\nallow_from = ["42"]\n'
        '[channels.telegram.accounts.env]\nbot_token = "${TELEGRAM_BOT_TOKEN}"\n')
    out = ok(runner, "show")
    assert "123:abc" not in out
    assert 'bot_token = "***"' in out
    assert 'bot_token = "${TELEGRAM_BOT_TOKEN}"' in out
    as_json = json.loads(ok(runner, "show", "--json"))
    accounts = as_json["channels"]["telegram"]["accounts"]
    assert accounts["main"] == {"bot_token": "***", "allow_from": ["42"]}
    assert accounts["env"] == {"bot_token": "${TELEGRAM_BOT_TOKEN}"}


def test_config_show_of_a_missing_file(runner, config_file):
    assert ok(runner, "show") == f"# {config_file} is empty or missing\n"


# -- unset ---------------------------------------------------------------------------------


def test_config_unset(runner, config_file):
    ok(runner, "set", "queue.debounce_ms", "250")
    ok(runner, "unset", "queue.debounce_ms")
    assert "debounce_ms" not in cfg.read_raw(config_file).get("queue", {})
    assert ok(runner, "get", "queue.debounce_ms") == "1000\n"  # the default again
    assert mode(config_file) == 0o600
    error = fails(runner, "unset", "queue.debounce_ms")
    assert str(config_file) in error and "queue.debounce_ms" in error and "not set" in error


# -- a hand-written file keeps its comments and layout ----------------------------------------

HAND_WRITTEN = """\
# My gateway. Written by hand: keep these notes.

[gateway]
listen = "127.0.0.1:8787"  # loopback only

# The agent answers every chat.
[agent]
kind = "command"
command = ["llm", "-m", "x"]  # the model I use
timeout = 60.5

[queue]
mode = "collect"
debounce_ms = 1000  # one second
cap = 20
"""


def test_config_set_and_unset_keep_comments_layout_and_types(runner, config_file):
    config_file.write_text(HAND_WRITTEN)
    ok(runner, "set", "queue.debounce_ms", "250")
    ok(runner, "set", "agent.env.LANG", "C.UTF-8")  # a table the file does not have yet
    ok(runner, "set", "heartbeat.active_hours.start", "08:00")  # two levels deep, new
    ok(runner, "unset", "queue.cap")
    text = config_file.read_text()
    for line in ("# My gateway. Written by hand: keep these notes.",
                 'listen = "127.0.0.1:8787"  # loopback only',
                 "# The agent answers every chat.",
                 'command = ["llm", "-m", "x"]  # the model I use',
                 "debounce_ms = 250  # one second"):
        assert line in text, text
    assert "cap = 20" not in text
    # The sections stay where the person put them, new ones come after.
    order = [text.index(marker) for marker in ("[gateway]", "[agent]", "[queue]")]
    assert order == sorted(order), text
    raw = cfg.read_raw(config_file)
    assert list(raw["agent"]) == ["kind", "command", "timeout", "env"]
    assert raw["queue"] == {"mode": "collect", "debounce_ms": 250}
    assert raw["agent"]["timeout"] == 60.5 and raw["agent"]["env"] == {"LANG": "C.UTF-8"}
    assert raw["heartbeat"] == {"active_hours": {"start": "08:00"}}
    assert mode(config_file) == 0o600
    # Values keep their types, whether set or untouched.
    ok(runner, "set", "agent.history_limit", "12")
    ok(runner, "set", "health_monitor.enabled", "false")
    ok(runner, "set", "agent.pass_env", '["HOME", "PATH"]')
    raw = cfg.read_raw(config_file)
    assert raw["agent"]["history_limit"] == 12 and type(raw["agent"]["history_limit"]) is int
    assert raw["health_monitor"]["enabled"] is False
    assert raw["agent"]["pass_env"] == ["HOME", "PATH"]
    assert cfg.load(config_file).agent.timeout == 60.5


def test_config_set_that_fails_validation_leaves_a_hand_written_file(runner, config_file):
    config_file.write_text(HAND_WRITTEN)
    fails(runner, "set", "queue.mode", "sideways")
    assert config_file.read_text() == HAND_WRITTEN


# -- validate ------------------------------------------------------------------------------


def test_config_validate_ok(runner, config_file):
    out = ok(runner, "validate")
    assert out == (f"ok: {config_file} (missing: defaults apply), 1 channel account(s): "
                   "webchat:default\n")
    ok(runner, "init")
    assert ok(runner, "validate") == (f"ok: {config_file}, 1 channel account(s): "
                                      "webchat:default\n")


def test_a_channel_key_nothing_reads_is_refused_not_ignored(runner, config_file):
    """A channel-wide key that neither the kernel nor the channel reads is an error (an
    account's setting there says where it goes); what the channel reads is taken."""
    config_file.write_text('[channels.webchat]\nallow_from = ["alice"]\n')
    error = fails(runner, "validate")
    assert "channels.webchat.allow_from: allow_from is a setting of each account" in error
    assert "[channels.webchat.accounts.<name>]" in error
    config_file.write_text('[channels.webchat]\ntext_limt = 100\n')
    assert "no setting 'text_limt' (did you mean 'text_limit'?)" in fails(runner, "validate")
    config_file.write_text('[channels.webchat]\ntext_limit = 100\n'
                           '[channels.webchat.queue]\nmode = "followup"\n')
    assert ok(runner, "validate").startswith("ok: ")


def test_config_validate_refuses_a_public_listen_without_a_control_token(runner, config_file):
    """`run` refuses it (gateway.check_listen): validate must not call it ok."""
    config_file.write_text('[gateway]\nlisten = "0.0.0.0:8799"\n')
    error = fails(runner, "validate")
    assert f"{config_file}: gateway.control_token: " in error
    assert "beyond this machine" in error
    ok(runner, "set", "gateway.control_token", "a-long-random-secret")
    assert ok(runner, "validate").startswith("ok: ")


def test_config_validate_builds_the_accounts_as_run_does(runner, config_file):
    """The Telegram channel's constructor refuses webhook mode without webhook_url;
    the account model alone accepts it."""
    pytest.importorskip("chatkernel_telegram")
    config_file.write_text('[channels.telegram.accounts.main]\n'
                           'bot_token = "123456789:AAbbCCddEEffGGhhIIjjKKllMMnnOOppQQ"\n'
                           'mode = "webhook"\n')
    error = fails(runner, "validate")
    assert "channels.telegram.accounts.main.webhook_url: webhook mode needs webhook_url" \
        in error
    assert "AAbbCC" not in error
    ok(runner, "set", "channels.telegram.accounts.main.webhook_url",
       "https://chat.example.com/telegram")
    assert ok(runner, "validate") == (f"ok: {config_file}, 2 channel account(s): "
                                      "telegram:main, webchat:default\n")


def test_config_validate_refuses_a_malformed_bot_token_without_showing_it(runner, config_file):
    pytest.importorskip("chatkernel_telegram")
    config_file.write_text('[channels.telegram.accounts.main]\n'
                           'bot_token = "AAbbCCdd-pasted-without-its-id"\n')
    error = fails(runner, "validate")
    assert "channels.telegram.accounts.main.bot_token: expected the token BotFather gave" \
        in error
    assert "AAbbCCdd" not in error  # a malformed secret is still a secret
    config_file.write_text('[channels.telegram.accounts.main]\n'
                           'bot_token = "${CK_TEST_TELEGRAM_TOKEN}"\n')
    ok(runner, "set", "channels.telegram.accounts.main.allow_from", '["42"]')


def test_config_validate_checks_the_agent_kind(runner, config_file):
    config_file.write_text('[agent]\nkind = "nosuch"\n')
    error = fails(runner, "validate")
    assert f"{config_file}: agent.kind: no agent kind 'nosuch'" in error


def test_config_validate_unknown_channel_names_it_and_the_missing_plugin(runner, config_file):
    config_file.write_text("[channels.nosuch.accounts.main]\nallow_from = ['1']\n")
    error = fails(runner, "validate")
    assert f"{config_file}: channels.nosuch: " in error
    assert "no installed plugin provides a channel named 'nosuch'" in error
    assert "pip" not in error  # never a package named after whatever was typed


def test_config_validate_a_misspelt_channel_suggests_the_name(runner, config_file):
    config_file.write_text("[channels.webchta.accounts.main]\nallow_from = ['1']\n")
    error = fails(runner, "validate")
    assert f"{config_file}: channels.webchta: " in error
    assert "did you mean 'webchat'?" in error and "pip" not in error


def test_config_set_an_unknown_account_key_suggests_the_known_one(runner, config_file):
    error = fails(runner, "set", "channels.webchat.accounts.main.alow_from", "['*']")
    assert "channels.webchat.accounts.main.alow_from: unknown key (did you mean " \
        "'allow_from'?)" in error


def test_config_validate_missing_env_variable(runner, config_file, monkeypatch):
    monkeypatch.delenv("CK_TEST_TOKEN", raising=False)
    config_file.write_text('[gateway]\ncontrol_token = "${CK_TEST_TOKEN}"\n')
    error = fails(runner, "validate")
    assert f"{config_file}: gateway.control_token: " in error
    assert "CK_TEST_TOKEN is not set" in error
    monkeypatch.setenv("CK_TEST_TOKEN", "x")
    ok(runner, "validate")


def test_config_validate_checks_accounts_with_the_channels_model(runner, config_file,
                                                                 monkeypatch):
    """Accounts are validated by the account model of the plugin that provides them."""
    from chatkernel.core.plugins import get_plugin_manager

    class ProbeAccount(cfg.AccountConfig):
        bot_token: str

    class ProbeChannel(Channel):
        name = "cktestchan"
        account_model = ProbeAccount

    class Plugin:
        @hookimpl
        def register_channels(self, register):
            register(ProbeChannel)

    pm = get_plugin_manager()  # the manager the CLI uses (reset after the test)
    pm.register(Plugin(), name="test-cli-channel")
    monkeypatch.setenv("CK_TEST_TOKEN", "123:abc")
    config_file.write_text(
        '[channels.cktestchan.accounts.main]\nbot_token = "${CK_TEST_TOKEN}"\n'
        '[channels.cktestchan.accounts.other]\nbot_token = "x"\nallow_from = [42]\n')
    assert ok(runner, "validate") == (f"ok: {config_file}, 3 channel account(s): "
                                      "cktestchan:main, cktestchan:other, webchat:default\n")

    config_file.write_text('[channels.cktestchan.accounts.main]\nbot_tokn = "x"\n')
    error = fails(runner, "validate")
    assert f"{config_file}: 2 problems:" in error
    assert "channels.cktestchan.accounts.main.bot_token: Field required" in error
    assert "channels.cktestchan.accounts.main.bot_tokn: unknown key" in error

    # set validates channel accounts too, and writes nothing when they are wrong.
    before = config_file.read_bytes()
    error = fails(runner, "set", "channels.cktestchan.accounts.main.access_level", "root")
    assert config_file.read_bytes() == before
    pm.unregister(name="test-cli-channel")


# -- set and validate check every table the gateway reads ------------------------------------


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("channels.webchat.queue.debounce_ms", "abc", "unable to parse string as an integer"),
    ("channels.webchat.queue.mode", "folowup", "(did you mean 'followup'?)"),
    ("channels.webchat.queue.nope", "1", "channels.webchat.queue.nope: unknown key"),
    ("store.backend", "mongo",
     "store.backend: not an installed store backend (installed: redis, sqlite)"),
    ("channels.webchat.retry.attempts", "0", "retry.attempts must be a whole number"),
    ("channels.webchat.rate_limits.chat", "fast", "channels.webchat.rate_limits: "),
    # The channel's own checks (its constructor's), as `run` makes them.
    ("channels.webchat.text_limit", "0", "expected a whole number of at least 1"),
    ("channels.webchat.text_limt", "100", "(did you mean 'text_limit'?)"),
])
def test_set_and_validate_refuse_what_the_gateway_would_trip_over(runner, config_file, key,
                                                                  value, expected):
    """What `set` writes, `validate` calls ok and `run` then crashes on or refuses: a
    queue table's debounce as text, a mode typo, a store backend nobody installed."""
    assert expected in fails(runner, "set", key, value)
    assert not config_file.exists()  # nothing written
    table, name = key.rsplit(".", 1)  # the same, written by hand
    config_file.write_text(f"[{table}]\n{name} = {cfg.inline_value(cfg.parse_value(value))}\n")
    assert expected in fails(runner, "validate")


def test_set_takes_several_keys_at_once_and_says_how_when_they_must_be(runner, config_file):
    """An account's required keys arrive together: one by one, each step is refused."""
    pytest.importorskip("chatkernel_slack")
    table = "channels.slack.accounts.main"
    error = fails(runner, "set", f"{table}.bot_token", "${SLACK_BOT_TOKEN}")
    assert "app_token is required in socket mode" in error
    assert (f"in one call: chatkernel config set {table}.bot_token VALUE "
            f"{table}.app_token VALUE") in error
    error = fails(runner, "set", f"{table}.app_token", "${SLACK_APP_TOKEN}")
    assert f"{table}.bot_token: Field required" in error
    assert f"chatkernel config set {table}.app_token VALUE {table}.bot_token VALUE" in error
    assert not config_file.exists()
    out = ok(runner, "set", f"{table}.bot_token", "${SLACK_BOT_TOKEN}",
             f"{table}.app_token", "${SLACK_APP_TOKEN}")
    assert out == (f'set {table}.bot_token = "${{SLACK_BOT_TOKEN}}", {table}.app_token = '
                   f'"${{SLACK_APP_TOKEN}}" in {config_file}\n')
    assert cfg.read_raw(config_file)["channels"]["slack"]["accounts"]["main"] == {
        "bot_token": "${SLACK_BOT_TOKEN}", "app_token": "${SLACK_APP_TOKEN}"}
    result = runner.invoke(cli, ["config", "set", "queue.cap", "3", "queue.mode"])
    assert result.exit_code == 2 and "expected KEY VALUE pairs" in result.stderr
    assert cfg.read_raw(config_file).get("queue") is None  # an odd call writes nothing


def test_digits_for_a_text_field_are_that_text(runner, config_file):
    """Ids and phone numbers are digits: the model's field type says they are text."""
    pytest.importorskip("chatkernel_whatsapp")
    table = "channels.whatsapp.accounts.main"
    ok(runner, "set", f"{table}.phone_number_id", "106540352242922",
       f"{table}.access_token", "${WA_TOKEN}", f"{table}.app_secret", "${WA_SECRET}",
       f"{table}.verify_token", "${WA_VERIFY}")
    ok(runner, "set", "agent.model", "0042", "queue.cap", "7")
    raw = cfg.read_raw(config_file)
    assert raw["channels"]["whatsapp"]["accounts"]["main"]["phone_number_id"] == \
        "106540352242922"
    assert raw["agent"]["model"] == "0042"  # as written, zeros and all
    assert raw["queue"]["cap"] == 7  # a number where the field is one


def test_set_warns_of_a_plain_secret_and_of_heartbeats_it_turns_on(runner, config_file):
    result = runner.invoke(cli, ["config", "set", "gateway.control_token", "hunter2-secret"],
                           catch_exceptions=False)
    assert result.exit_code == 0
    assert result.stdout == f'set gateway.control_token = "***" in {config_file}\n'
    assert "hunter2" not in result.output
    assert result.stderr == (
        f"warning: gateway.control_token is a secret, now stored in plain text in "
        f"{config_file}; a reference keeps it out of the file: chatkernel config set "
        "gateway.control_token '${CHATKERNEL_CONTROL_TOKEN}' (and set "
        "CHATKERNEL_CONTROL_TOKEN where the gateway runs)\n")
    result = runner.invoke(cli, ["config", "set", "gateway.control_token",
                                 "${CHATKERNEL_CONTROL_TOKEN}"], catch_exceptions=False)
    assert result.stderr == ""  # a reference is what it should be

    result = runner.invoke(cli, ["config", "set", "heartbeat.every", "2h"],
                           catch_exceptions=False)
    assert result.stdout == f'set heartbeat.every = "2h" in {config_file}\n'
    assert result.stderr.startswith("note: this turns the config heartbeat on: an agent "
                                    "turn every 2h, each a paid turn with a paid model")
    result = runner.invoke(cli, ["config", "set", "heartbeat.every", "1h"],
                           catch_exceptions=False)
    assert result.stderr == ""  # it was on already


def test_set_of_a_whole_account_warns_of_each_plain_secret_in_it(runner, config_file):
    pytest.importorskip("chatkernel_slack")
    table = '{ bot_token = "xoxb-plain-1", app_token = "${SLACK_APP_TOKEN}" }'
    result = runner.invoke(cli, ["config", "set", "channels.slack.accounts.main", table],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "xoxb-plain" not in result.output
    assert result.stdout.startswith('set channels.slack.accounts.main = { bot_token = "***", ')
    assert "warning: channels.slack.accounts.main.bot_token is a secret" in result.stderr
    assert "app_token is a secret" not in result.stderr  # a reference


def test_a_secret_the_channel_marks_is_one_whatever_its_name():
    """A channel marks a secret field with Field(repr=False)."""
    from pydantic import Field

    class Account(cfg.AccountConfig):
        pairing_code: str = Field("", repr=False)
        label: str = ""

    models = {"x": Account}
    field = cfg.key_field("channels.x.accounts.main.pairing_code", models)
    assert cfg.is_secret_field("channels.x.accounts.main.pairing_code", field)
    assert not cfg.is_secret_field("channels.x.accounts.main.label",
                                   cfg.key_field("channels.x.accounts.main.label", models))
    assert cfg.env_name_for("channels.x.accounts.main.pairing_code") == "X_PAIRING_CODE"
    assert cfg.env_name_for("channels.x.accounts.work.pairing_code") == "X_WORK_PAIRING_CODE"


@pytest.mark.slow
def test_set_of_a_channel_key_loads_only_that_channel_s_plugin(chatkernel_home):
    """`config set` checks one channel's tables with that channel's plugin, and a
    kernel key with no plugin at all (importing every channel made a set slow)."""
    pytest.importorskip("chatkernel_telegram")
    pytest.importorskip("chatkernel_slack")
    script = ("import sys\nfrom chatkernel.cli import cli\n"
              "try:\n    cli(sys.argv[1:], prog_name='chatkernel')\n"
              "except SystemExit as exit:\n    assert not exit.code, exit.code\n"
              "print(' '.join(sorted(name for name in sys.modules if name.startswith("
              "('chatkernel_', 'chatkernel.sdk.channel', 'chatkernel.builtin.agents')))))\n")

    def loaded(*args):
        result = subprocess.run([sys.executable, "-c", script, "config", "set", *args],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()[-1].split()

    modules = loaded("channels.telegram.accounts.main.bot_token", "${TELEGRAM_BOT_TOKEN}")
    assert "chatkernel_telegram.channel" in modules
    assert not [name for name in modules if name.startswith(("chatkernel_slack",
                                                             "chatkernel_whatsapp",
                                                             "chatkernel_wechat"))]
    assert "chatkernel.builtin.agents" not in modules  # no built-in but the one needed
    assert loaded("queue.cap", "5") == []  # a kernel key: no plugin, no channel code


def test_set_keeps_a_comment_above_the_header_it_belongs_to(runner, config_file):
    config_file.write_text('[agent]\nkind = "echo"\n\n# rule 1\n[[send_policy.rules]]\n'
                           'action = "deny"\nchannel = "webchat"\n\n[queue]\ncap = 5\n\n'
                           '# the web chat, for the team\n[channels.webchat]\n'
                           'text_limit = 100\n\n# the page at /\n'
                           '[channels.webchat.accounts.default]\nallow_from = ["*"]\n')
    ok(runner, "set", "send_policy.default", "deny")
    ok(runner, "set", "queue.mode", "steer")
    ok(runner, "set", "channels.webchat.enabled", "true")
    assert config_file.read_text() == (
        '[agent]\nkind = "echo"\n\n[send_policy]\ndefault = "deny"\n\n# rule 1\n'
        '[[send_policy.rules]]\naction = "deny"\nchannel = "webchat"\n\n[queue]\ncap = 5\n'
        'mode = "steer"\n\n# the web chat, for the team\n[channels.webchat]\n'
        'text_limit = 100\nenabled = true\n\n# the page at /\n'
        '[channels.webchat.accounts.default]\nallow_from = ["*"]\n')
    assert cfg.load(config_file).send_policy.default == "deny"


# -- validate refuses what cannot work ---------------------------------------------------------


def test_validate_refuses_the_command_agent_without_a_command(runner, config_file):
    config_file.write_text('[agent]\nkind = "command"\n')
    error = fails(runner, "validate")
    assert f"{config_file}: agent.command: kind = \"command\" runs agent.command, which is " \
           "not set" in error
    config_file.write_text('[agent]\nkind = "command"\ncommand = ["cat"]\n')
    assert ok(runner, "validate").startswith("ok: ")


def test_validate_refuses_two_accounts_that_are_one(runner, config_file, monkeypatch):
    """Two Telegram accounts with one token are one bot configured twice; the values
    are secrets, so the error names the keys only."""
    pytest.importorskip("chatkernel_telegram")
    token = "123456789:AAbbCCddEEffGGhhIIjjKKllMMnnOOppQQ"
    monkeypatch.setenv("CK_TEST_SAME_TOKEN", token)
    config_file.write_text(f'[channels.telegram.accounts.main]\nbot_token = "{token}"\n'
                           '[channels.telegram.accounts.other]\n'
                           'bot_token = "${CK_TEST_SAME_TOKEN}"\n')
    error = fails(runner, "validate")
    assert (f"{config_file}: channels.telegram.accounts.other: the same api_base and "
            "bot_token as account 'main'") in error
    assert "AAbbCC" not in error
    # The same token on another API (a second dev server) is another bot.
    ok(runner, "set", "channels.telegram.accounts.other.api_base", "http://127.0.0.1:9")
    assert ok(runner, "validate").startswith("ok: ")


def test_validate_refuses_a_send_policy_rule_for_a_channel_nobody_provides(runner,
                                                                           config_file):
    config_file.write_text('[[send_policy.rules]]\naction = "deny"\nchannel = "webchta"\n')
    error = fails(runner, "validate")
    assert f"{config_file}: send_policy.rules[0].channel: no installed plugin provides a " \
           "channel named 'webchta'" in error
    assert "(did you mean 'webchat'?)" in error
    config_file.write_text('[[send_policy.rules]]\naction = "deny"\nchannel = "webchat"\n')
    assert ok(runner, "validate").startswith("ok: ")


# -- a home that cannot be written: one line, no traceback -------------------------------------

#: A directory that even root cannot create anything in (sysfs refuses mkdir).
UNWRITABLE = "/sys/chatkernel-test-home"


def unwritable_home(monkeypatch):
    import os

    if not os.path.isdir("/sys/kernel"):
        pytest.skip("needs Linux's /sys, where nobody can create a directory")
    monkeypatch.setenv("CHATKERNEL_HOME", UNWRITABLE)
    return UNWRITABLE


def test_init_and_set_in_a_home_that_cannot_be_written(runner, monkeypatch):
    home = unwritable_home(monkeypatch)
    for args in (["init"], ["set", "queue.cap", "5"]):
        error = fails(runner, *args)
        assert error.startswith(f"Error: {home}/config.toml: cannot be written: ")
        assert "(/sys cannot be written by this user)" in error
        assert error.count("\n") == 1


def test_a_home_that_is_a_file(runner, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.write_text("not a directory")
    monkeypatch.setenv("CHATKERNEL_HOME", str(home))
    assert fails(runner, "init") == (f"Error: {home}/config.toml: cannot be written: {home} "
                                     "is a file, not a directory\n")
    assert fails(runner, "set", "queue.cap", "5") == (
        f"Error: {home}/config.toml: cannot be read: {home} is a file, not a directory\n")


@pytest.mark.slow
@pytest.mark.parametrize("home_kind", ["file", "unwritable"])
def test_run_in_a_home_it_cannot_create_says_so_in_one_line(tmp_path, monkeypatch, home_kind):
    """A real `chatkernel run`, whose config is elsewhere: the home is only needed for
    its lock and state."""
    import os

    if home_kind == "file":
        home = tmp_path / "home"
        home.write_text("not a directory")
        reason = f"{home} is a file, not a directory"
    else:
        home = unwritable_home(monkeypatch)
        reason = "(/sys cannot be written by this user)"
    config = tmp_path / "config.toml"
    config.write_text('[gateway]\nlisten = "127.0.0.1:0"\n')
    result = subprocess.run([sys.executable, "-m", "chatkernel.cli", "run", "--config",
                             str(config)], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "CHATKERNEL_HOME": str(home)})
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: the home {home} cannot be created: ") and reason in last
    assert "Traceback" not in result.stderr


def test_sessions_history_refuses_a_negative_limit(runner, chatkernel_home):
    result = runner.invoke(cli, ["sessions", "history", "webchat:default:x", "--limit", "-3"])
    assert result.exit_code == 2
    assert "Invalid value for '--limit': -3 is not in the range x>=1" in result.stderr
    assert not isinstance(result.exception, ValueError)
