"""``$CHATKERNEL_HOME/.env``: the strict parser, its formatter, the file's mode, and how
its variables meet the real environment (chatkernel.core.config.envfile)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatkernel.core import config as cfg
from chatkernel.core.config.envfile import apply_env_file


def write(path, text, mode=0o600):
    path.write_text(text)
    path.chmod(mode)
    return path


def test_lines_comments_export_and_quotes():
    text = ("# the bot's token\n"
            "\n"
            "TELEGRAM_BOT_TOKEN=123456:ABC-def_ghi\n"
            "export SLACK_BOT_TOKEN=\"xoxb-1 2\\n3\\\"4\\\\5\\$6\"   # after a value\n"
            "  RAW='$HOME and \\n as written'\n"
            "EMPTY=\n"
            "SPACED = b64+/=#x\r\n"
            "   # indented comment\n")
    assert cfg.parse_env(text) == {
        "TELEGRAM_BOT_TOKEN": "123456:ABC-def_ghi",
        "SLACK_BOT_TOKEN": 'xoxb-1 2\n3"4\\5$6',
        "RAW": "$HOME and \\n as written",
        "EMPTY": "",
        "SPACED": "b64+/=#x",
    }


@pytest.mark.parametrize("line, says", [
    ("just words", "line 2: expected KEY=value"),
    ("1ABC=x", "line 2: expected KEY=value"),
    ("A=two words", "line 2 (A): a value with blanks"),
    ('A="open', "line 2 (A): a double quote is not closed"),
    ("A='open", "line 2 (A): a single quote is not closed"),
    ('A="bad \\q"', "line 2 (A): unknown escape"),
    ("A=$OTHER", "line 2 (A): a value with blanks, quotes, $"),
    ("CHATKERNEL_HOME=/elsewhere", "line 2: CHATKERNEL_HOME cannot be set in the env file"),
])
def test_a_line_that_is_not_key_value_is_an_error_naming_it(tmp_path, line, says):
    path = tmp_path / ".env"
    with pytest.raises(cfg.ConfigError) as caught:
        cfg.parse_env(f"OK=1\n{line}\n", path=path)
    assert str(caught.value).startswith(f"{path}: {says}")


_FIRST = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"
names = st.builds(str.__add__, st.sampled_from(_FIRST),
                  st.text(_FIRST + "0123456789", max_size=20)).filter(
    lambda name: name not in {"CHATKERNEL_HOME", "CHATKERNEL_CONFIG", "CHATKERNEL_SECRETS_FD"})
values = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))


@given(st.dictionaries(names, values, max_size=8))
def test_whatever_the_formatter_writes_reads_back(variables):
    text = "".join(f"{cfg.format_env(name, value)}\n" for name, value in variables.items())
    assert cfg.parse_env(text) == variables


def test_a_file_the_group_or_others_can_read_is_refused(tmp_path):
    path = write(tmp_path / ".env", "TOKEN=x\n", mode=0o644)
    with pytest.raises(cfg.ConfigError) as caught:
        cfg.read_env_file(path)
    assert str(caught.value) == (f"{path}: refused: mode 0644 lets the group or others read "
                                 f"it, and it holds secrets; make it the owner's alone: "
                                 f"chmod 600 {path}")
    path.chmod(0o640)
    with pytest.raises(cfg.ConfigError, match="mode 0640"):
        cfg.read_env_file(path)
    path.chmod(0o600)
    assert cfg.read_env_file(path) == {"TOKEN": "x"}
    assert cfg.read_env_file(tmp_path / "none") == {}  # no file: no variables


def test_the_real_environment_wins_and_a_second_read_follows_the_file(tmp_path):
    path = write(tmp_path / ".env", "FROM_FILE=1\nBOTH=file\nGONE=soon\n")
    environ = {"BOTH": "real", "OTHER": "kept"}
    taken: dict[str, str] = {}
    assert apply_env_file(environ, taken, path) == ["FROM_FILE", "GONE"]
    assert environ == {"BOTH": "real", "OTHER": "kept", "FROM_FILE": "1", "GONE": "soon"}
    # Read again (a reload): the file's own change, lose a variable, add one; the real
    # environment's still win.
    write(path, "FROM_FILE=2\nBOTH=file2\nNEW=3\n")
    assert apply_env_file(environ, taken, path) == ["FROM_FILE", "NEW"]
    assert environ == {"BOTH": "real", "OTHER": "kept", "FROM_FILE": "2", "NEW": "3"}


def test_every_command_reads_the_homes_env_file(chatkernel_home, monkeypatch):
    monkeypatch.delenv("CK_ENV_FILE_TEST", raising=False)
    write(chatkernel_home / ".env", "CK_ENV_FILE_TEST=from-the-file\n")
    try:
        assert cfg.load_env_file() == ["CK_ENV_FILE_TEST"]
        assert os.environ["CK_ENV_FILE_TEST"] == "from-the-file"
    finally:
        (chatkernel_home / ".env").unlink()
        cfg.load_env_file()  # what the file set goes with it
    assert "CK_ENV_FILE_TEST" not in os.environ
