"""The config module: TOML on disk, pydantic models, ${ENV} references, redaction,
dotted keys. Every error a user can meet names the file, the key and what was
expected."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatkernel.core import config as cfg


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# -- locations -----------------------------------------------------------------------------


def test_config_path_precedence(chatkernel_home, monkeypatch, tmp_path):
    assert cfg.home_dir() == chatkernel_home
    assert cfg.config_path() == chatkernel_home / "config.toml"
    monkeypatch.setenv("CHATKERNEL_CONFIG", str(tmp_path / "env.toml"))
    assert cfg.config_path() == tmp_path / "env.toml"
    assert cfg.config_path(tmp_path / "explicit.toml") == tmp_path / "explicit.toml"


def test_home_defaults_to_dot_chatkernel(monkeypatch, tmp_path):
    monkeypatch.delenv("CHATKERNEL_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cfg.home_dir() == tmp_path / ".chatkernel"


# -- loading -------------------------------------------------------------------------------


def test_missing_file_gives_the_defaults(chatkernel_home):
    config = cfg.load()
    assert config.agent.kind == "echo"
    assert config.queue.debounce_ms == 1000
    assert config.queue.cap == 20
    assert config.queue.max_concurrent == 4
    assert config.gateway.listen == "127.0.0.1:8787"
    assert config.heartbeat.every == "30m"
    assert config.heartbeat.ack_max_chars == 300
    assert config.health_monitor.health_check_minutes == 5
    assert config.workspace() == chatkernel_home / "workspace"


def test_heartbeat_settings_accept_intervals_zones_and_an_agent_override(tmp_path):
    path = write(tmp_path / "config.toml", """
[heartbeat]
every = 0
target = "last"
[heartbeat.active_hours]
start = "22:00"
end = "24:00"
timezone = "America/New_York"
[agent.heartbeat]
every = "1h30m"
prompt = "Anything on fire?"
""")
    config = cfg.load(path)
    assert config.heartbeat.interval() == 0
    assert config.heartbeat.active_hours.timezone == "America/New_York"
    assert config.agent.heartbeat.interval() == 5400
    assert config.agent.heartbeat.model_fields_set == {"every", "prompt"}
    for zone in ("local", "user", "UTC", "Asia/Kolkata"):
        assert cfg.ActiveHours(timezone=zone).timezone == zone


def test_starter_config_is_valid_and_round_trips(tmp_path):
    path = tmp_path / "config.toml"
    examples = [("mychat", "chatkernel-mychat", '[channels.mychat.accounts.main]\n'
                 'token = "${MYCHAT_TOKEN}"   # the bot\'s\n'),
                ("bare", "chatkernel-bare", "")]
    cfg.write_raw(path, cfg.starter_config(examples))
    assert cfg.read_raw(path) == cfg.starter_config(examples)
    assert cfg.load(path).queue.mode == "collect"
    text = path.read_text()
    assert "# -- mychat (chatkernel-mychat) ---" in text
    assert "# It reads MYCHAT_TOKEN from the gateway's environment.\n" \
           "# [channels.mychat.accounts.main]\n# token = \"${MYCHAT_TOKEN}\"   # the bot's\n" \
        in text
    assert "[channels.bare.accounts.<name>]" in text  # no example: named, nothing to uncomment
    assert "channels" not in cfg.read_raw(path)  # every other channel commented out


def test_starter_config_turns_on_the_channels_that_run_without_a_table(tmp_path):
    examples = [("alpha", "chatkernel-alpha", "[channels.alpha.accounts.main]\n"),
                ("kiosk", "kiosk-plugin", "[channels.kiosk.accounts.lobby]\n"
                                          'allow_from = ["*"]\n')]
    path = tmp_path / "config.toml"
    cfg.write_raw(path, cfg.starter_config(examples, on={"kiosk"}))
    text = path.read_text()
    assert text.index("# -- kiosk (kiosk-plugin)") < text.index("# -- alpha (chatkernel-alpha)")
    assert cfg.read_raw(path)["channels"] == {"kiosk": {"accounts": {"lobby": {
        "allow_from": ["*"]}}}}
    assert "# [channels.alpha.accounts.main]\n" in text


def test_bad_toml_names_the_file(tmp_path):
    path = write(tmp_path / "config.toml", "[agent\nkind = 'echo'\n")
    with pytest.raises(cfg.ConfigError) as info:
        cfg.load(path)
    assert info.value.path == path
    assert str(info.value).startswith(f"{path}: not valid TOML")


def test_unreadable_path_names_the_file(tmp_path):
    with pytest.raises(cfg.ConfigError, match="cannot be read") as info:
        cfg.read_raw(tmp_path)  # a directory
    assert info.value.path == tmp_path


@pytest.mark.parametrize(("text", "key", "expected"), [
    ('[queue]\nmode = "bogus"\n', "queue.mode",
     "Input should be 'collect', 'followup', 'interrupt' or 'steer' (got 'bogus')"),
    ("[queue]\ncap = 0\n", "queue.cap", "greater than or equal to 1 (got 0)"),
    ('[gateway]\nlisten = "nonsense"\n', "gateway.listen", "expected HOST:PORT"),
    ('[agent]\nkidn = "echo"\n', "agent.kidn", "unknown key (did you mean 'kind'?)"),
    ('[agent]\nzzz = "echo"\n', "agent.zzz", "unknown key (check its spelling)"),
    ("[heartbeat.active_hours]\nstart = '25:00'\n", "heartbeat.active_hours.start",
     "expected a time of day HH:MM"),
    ("[queue]\ndebounce_ms = 'soon'\n", "queue.debounce_ms", "valid integer"),
    ("[heartbeat]\nevery = '30'\n", "heartbeat.every", "'30' needs a unit"),
    ("[heartbeat]\nevery = 15\n", "heartbeat.every", "needs a unit"),
    ("[heartbeat]\nevery = 'often'\n", "heartbeat.every", "not an interval"),
    ("[heartbeat]\ndirect_policy = 'maybe'\n", "heartbeat.direct_policy", "'allow' or 'block'"),
    ("[heartbeat.active_hours]\nstart = '24:00'\n", "heartbeat.active_hours.start",
     "24:00 is allowed as an end only"),
    ("[heartbeat.active_hours]\ntimezone = 'Mars/Olympus'\n",
     "heartbeat.active_hours.timezone", "unknown time zone 'Mars/Olympus'"),
    ("[agent.heartbeat]\nevry = '1h'\n", "agent.heartbeat.evry",
     "unknown key (did you mean 'every'?)"),
    ("[heartbeat.active_hours]\nstrat = '08:00'\n", "heartbeat.active_hours.strat",
     "unknown key (did you mean 'start'?)"),
    ("[[send_policy.rules]]\naction = 'deny'\nchanel = 'x'\n", "send_policy.rules[0].chanel",
     "unknown key (did you mean 'channel'?)"),
    ("[channels.defaults.health_monitor]\nenable = false\n",
     "channels.defaults.health_monitor.enable", "unknown key (did you mean 'enabled'?)"),
    ("[heartbeats]\nevery = '1h'\n", "heartbeats", "unknown key (did you mean 'heartbeat'?)"),
    ("bogus_section = 1\n", "bogus_section", "unknown key (check its spelling)"),
    # A channel's queue table is read by the same model as [queue]: nothing the session
    # queue would trip over at the first busy message gets through.
    ("[channels.webchat.queue]\ndebounce_ms = 'abc'\n", "channels.webchat.queue.debounce_ms",
     "unable to parse string as an integer (got 'abc')"),
    ("[channels.webchat.queue]\nmode = 'folowup'\n", "channels.webchat.queue.mode",
     "(got 'folowup') (did you mean 'followup'?)"),
    ("[queue]\nmode = 'stear'\n", "queue.mode", "(did you mean 'steer'?)"),
    ("[channels.webchat.queue]\ndebonce_ms = 5\n", "channels.webchat.queue.debonce_ms",
     "unknown key (did you mean 'debounce_ms'?)"),
    ("[channels.webchat.queue]\nmax_concurrent = 2\n",
     "channels.webchat.queue.max_concurrent", "unknown key"),
    ("[store]\nbackend = 'mongo'\n", "store.backend",
     "not an installed store backend (installed: redis, sqlite) (got 'mongo')"),
    ("[store]\nbackend = 'sqlit'\n", "store.backend", "(did you mean 'sqlite'?)"),
    ("[channels.webchat.retry]\nattempts = 'x'\n", "channels.webchat.retry",
     "retry.attempts must be a whole number"),
    ("[channels.webchat.rate_limits]\nchat = 'fast'\n", "channels.webchat.rate_limits",
     "'fast'"),
    ("[channels.defaults.queue]\nmode = 'steer'\n", "channels",
     "[channels.defaults] takes heartbeat only, not queue"),
])
def test_invalid_values_name_file_key_and_expectation(tmp_path, text, key, expected):
    path = write(tmp_path / "config.toml", text)
    with pytest.raises(cfg.ConfigError) as info:
        cfg.load(path)
    assert info.value.path == path
    assert info.value.key == key
    assert str(info.value).startswith(f"{path}: {key}: ")
    assert expected in str(info.value)


def test_several_problems_are_reported_together(tmp_path):
    path = write(tmp_path / "config.toml", '[queue]\nmode = "x"\ncap = 0\n')
    with pytest.raises(cfg.ConfigError) as info:
        cfg.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: 2 problems:")
    assert "  queue.mode: " in message and "  queue.cap: " in message


def test_channel_account_validation_names_the_account_key(tmp_path):
    with pytest.raises(cfg.ConfigError) as info:
        cfg.validate_account(cfg.AccountConfig, {"access_level": "root"}, channel="telegram",
                             account="main", path=tmp_path / "c.toml")
    assert info.value.key == "channels.telegram.accounts.main.access_level"
    assert "'readonly', 'standard' or 'full'" in str(info.value)


def test_account_allow_from_ids_become_strings():
    account = cfg.AccountConfig(allow_from=[42, "alice"])
    assert account.allow_from == ["42", "alice"]
    assert cfg.AccountConfig().allow_from == []  # the allowlist is on by default


# -- ${ENV} references ---------------------------------------------------------------------


def test_env_references_resolve_at_load_time(tmp_path, monkeypatch):
    path = write(tmp_path / "config.toml",
                 '[agent]\nmodel = "${CK_TEST_MODEL}"\n'
                 'command = ["llm", "-m", "${CK_TEST_MODEL}"]\n'
                 '[gateway]\ncontrol_token = "tok-${CK_TEST_SUFFIX}"\n')
    monkeypatch.setenv("CK_TEST_MODEL", "gpt-x")
    monkeypatch.setenv("CK_TEST_SUFFIX", "42")
    config = cfg.load(path)
    assert config.agent.model == "gpt-x"
    assert config.agent.command == ["llm", "-m", "gpt-x"]
    assert config.gateway.control_token == "tok-42"
    # Resolved when loaded, not when written: the file keeps the reference.
    assert cfg.read_raw(path)["agent"]["model"] == "${CK_TEST_MODEL}"
    monkeypatch.setenv("CK_TEST_MODEL", "other")
    assert cfg.load(path).agent.model == "other"


def test_missing_env_variable_names_the_key_and_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("CK_TEST_UNSET", raising=False)
    path = write(tmp_path / "config.toml",
                 '[channels.telegram.accounts.main]\nbot_token = "${CK_TEST_UNSET}"\n')
    with pytest.raises(cfg.ConfigError) as info:
        cfg.load(path)
    assert info.value.path == path
    assert info.value.key == "channels.telegram.accounts.main.bot_token"
    assert "environment variable CK_TEST_UNSET is not set" in str(info.value)
    assert "${CK_TEST_UNSET}" in str(info.value)


def test_missing_env_variable_in_a_list_names_the_index(tmp_path):
    with pytest.raises(cfg.ConfigError) as info:
        cfg.parse({"agent": {"command": ["llm", "${CK_NOPE}"]}}, environ={})
    assert info.value.key == "agent.command[1]"


def test_dollar_dollar_is_a_literal_dollar():
    environ = {"CK_X": "value"}
    assert cfg.resolve_env("pa$$word", environ=environ) == "pa$word"
    assert cfg.resolve_env("$${CK_X}", environ=environ) == "${CK_X}"
    assert cfg.resolve_env("$$$${CK_X}", environ=environ) == "$${CK_X}"
    assert cfg.resolve_env("$$${CK_X}", environ=environ) == "$value"
    assert cfg.resolve_env("cost: $5", environ=environ) == "cost: $5"  # a lone $ stays
    config = cfg.parse({"agent": {"system_prompt": "Prices in $$, not ${CK_X}"}},
                       environ=environ)
    assert config.agent.system_prompt == "Prices in $, not value"


def test_non_strict_resolution_keeps_unset_references():
    assert cfg.resolve_env({"a": ["${CK_NOPE}", 1]}, environ={}, strict=False) == {
        "a": ["${CK_NOPE}", 1]}


_NAMES = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True)
_PLAIN = st.text(alphabet=st.characters(blacklist_characters="$"), max_size=10)


@pytest.mark.slow
@settings(max_examples=200, derandomize=True, database=None)
@given(parts=st.lists(st.one_of(_PLAIN.map(lambda s: ("text", s)),
                                _NAMES.map(lambda n: ("ref", n)),
                                st.just(("dollar", "$$"))), max_size=6),
       value=_PLAIN)
def test_env_resolution_property(parts, value):
    """Each ${NAME} becomes its value and each $$ a single $, nothing else changes."""
    written = "".join(f"${{{p}}}" if kind == "ref" else p for kind, p in parts)
    expected = "".join(value if kind == "ref" else "$" if kind == "dollar" else p
                       for kind, p in parts)
    environ = {name: value for kind, name in parts if kind == "ref"}
    assert cfg.resolve_env(written, environ=environ) == expected


# -- secrets -------------------------------------------------------------------------------


def test_redact_hides_secrets_and_keeps_env_references():
    data = {
        "gateway": {"control_token": "s3cret", "listen": "127.0.0.1:1"},
        "agent": {"api_key_env": "OPENAI_API_KEY", "api_key": "sk-123"},
        "channels": {"telegram": {"accounts": {
            "main": {"bot_token": "123:abc", "allow_from": ["42"]},
            "env": {"bot_token": "${TELEGRAM_BOT_TOKEN}"},
            "mixed": {"bot_token": "prefix-${TELEGRAM_BOT_TOKEN}"},
            "empty": {"bot_token": ""},
        }}},
        "wechat": {"aes_key": "k", "app_secret": "x", "password": "p", "keys": ["a"]},
    }
    redacted = cfg.redact(data)
    accounts = redacted["channels"]["telegram"]["accounts"]
    assert accounts["main"] == {"bot_token": cfg.REDACTED, "allow_from": ["42"]}
    assert accounts["env"]["bot_token"] == "${TELEGRAM_BOT_TOKEN}"
    assert accounts["mixed"]["bot_token"] == cfg.REDACTED  # part of it is a literal
    assert accounts["empty"]["bot_token"] == ""
    assert redacted["gateway"] == {"control_token": cfg.REDACTED, "listen": "127.0.0.1:1"}
    assert redacted["agent"] == {"api_key_env": "OPENAI_API_KEY", "api_key": cfg.REDACTED}
    assert redacted["wechat"] == {"aes_key": "***", "app_secret": "***", "password": "***",
                                  "keys": ["a"]}
    assert data["gateway"]["control_token"] == "s3cret"  # a copy: the input is untouched


# -- writing -------------------------------------------------------------------------------


def test_write_raw_is_mode_0600_and_atomic(tmp_path):
    path = tmp_path / "deeper" / "config.toml"
    cfg.write_raw(path, {"agent": {"kind": "echo"}})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)
    cfg.write_raw(path, {"agent": {"kind": "command"}})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # rewritten, not edited in place
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.toml"]  # no temp left


def test_write_raw_failure_leaves_the_old_file_and_no_temp(tmp_path):
    path = tmp_path / "config.toml"
    cfg.write_raw(path, {"agent": {"kind": "echo"}})
    with pytest.raises(TypeError):
        cfg.write_raw(path, {"agent": {"kind": object()}})
    assert cfg.read_raw(path) == {"agent": {"kind": "echo"}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


# -- dotted keys and values ----------------------------------------------------------------


def test_dotted_keys():
    data: dict = {}
    cfg.set_key(data, "channels.telegram.accounts.main.allow_from", ["42"])
    assert data == {"channels": {"telegram": {"accounts": {"main": {"allow_from": ["42"]}}}}}
    assert cfg.get_key(data, "channels.telegram.accounts.main.allow_from") == ["42"]
    with pytest.raises(KeyError):
        cfg.get_key(data, "channels.slack")
    with pytest.raises(cfg.ConfigError, match="channels.telegram.accounts.main.allow_from "
                                              "is a value, not a table"):
        cfg.set_key(data, "channels.telegram.accounts.main.allow_from.x", 1)
    assert cfg.unset_key(data, "channels.telegram.accounts.main.allow_from") is True
    assert cfg.unset_key(data, "channels.telegram.accounts.main.allow_from") is False
    assert cfg.unset_key(data, "nosuch.table.key") is False


@pytest.mark.parametrize("key", ["", "agent.", ".kind", "agent..kind"])
def test_malformed_dotted_keys_are_errors(key):
    with pytest.raises(cfg.ConfigError, match="not a dotted key"):
        cfg.split_key(key)


@pytest.mark.parametrize(("text", "value"), [
    ('["llm", "-m", "x"]', ["llm", "-m", "x"]),
    ("1000", 1000),
    ("-3", -3),
    ("2.5", 2.5),
    ("true", True),
    ("false", False),
    ('"quoted"', "quoted"),
    ("{ a = 1 }", {"a": 1}),
    ("bogus", "bogus"),
    ("127.0.0.1:8787", "127.0.0.1:8787"),
    ("gpt-4o-mini", "gpt-4o-mini"),
    ("${TELEGRAM_BOT_TOKEN}", "${TELEGRAM_BOT_TOKEN}"),
    ("hello world", "hello world"),
])
def test_parse_value_reads_toml_else_a_string(text, value):
    assert cfg.parse_value(text) == value
    assert type(cfg.parse_value(text)) is type(value)


@pytest.mark.parametrize(("value", "text"), [
    ("echo", "echo"),
    (1000, "1000"),
    (2.5, "2.5"),
    (True, "true"),
    ([], "[]"),
    (["llm", "-m", "x"], '["llm", "-m", "x"]'),
    ([1, [2, 3]], "[1, [2, 3]]"),
])
def test_format_value_shows_toml_with_inline_arrays(value, text):
    assert cfg.format_value(value) == text


def test_format_value_round_trips_through_parse_value():
    for value in (["llm", "-m", "x"], 7, 0.25, False, ["a b", 'quote"d']):
        assert cfg.parse_value(cfg.format_value(value)) == value


def test_gateway_public_hosts_are_host_names():
    config = cfg.parse({"gateway": {"public_hosts": ["Chat.Example.com.", "gw.lan"]}})
    assert config.gateway.public_hosts == ["chat.example.com", "gw.lan"]
    for bad in ("https://chat.example.com", "chat.example.com:443", "chat.example.com/x", ""):
        with pytest.raises(cfg.ConfigError, match=r"gateway\.public_hosts: expected host names"):
            cfg.parse({"gateway": {"public_hosts": [bad]}})


def test_an_invalid_secret_is_named_by_its_key_never_echoed():
    from chatkernel.core import config as cfg

    secret = "not-a-number-but-a-secret-token-0001"
    with pytest.raises(cfg.ConfigError) as info:
        cfg.parse({"gateway": {"control_token": ["a", secret]}})
    assert "gateway.control_token" in str(info.value)
    assert secret not in str(info.value) and "not shown: it is a secret" in str(info.value)
    with pytest.raises(cfg.ConfigError) as info:
        cfg.parse({"queue": {"debounce_ms": "soon"}})
    assert "'soon'" in str(info.value)  # other values are shown, to point at the fix


def test_an_unknown_channel_suggests_a_close_name_never_a_package_from_a_typo():
    error = str(cfg.unknown_channel("telegarm", {"webchat": None}))
    assert "no installed plugin provides a channel named 'telegarm'" in error
    assert "did you mean 'telegram'?" in error
    assert "pip" not in error  # chatkernel-telegarm could be anybody's package
    error = str(cfg.unknown_channel("slakc", {"slack": None}))
    assert "did you mean 'slack'?" in error and "pip" not in error
    assert "did you mean" not in str(cfg.unknown_channel("xyzzy", {"webchat": None}))


@pytest.mark.parametrize("name", ["slack", "telegram", "whatsapp", "wechat"])
def test_an_uninstalled_first_party_channel_names_its_exact_distribution(name):
    error = str(cfg.unknown_channel(name, {"webchat": None}))
    assert error.endswith(f": pip install chatkernel-{name} provides it")
