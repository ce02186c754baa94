"""What `config set` and `config validate` say: a typo's suggestion names the key it
guessed, every problem of a file is reported at once, and digits given for a key that
holds text are that text."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from chatkernel.cli import cli
from chatkernel.core import config as cfg


@pytest.fixture
def config_file(chatkernel_home):
    return chatkernel_home / "config.toml"


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


TYPO = "channels.telegram.accounts.main.allow_fron"
MEANT = "channels.telegram.accounts.main.allow_from"


def test_a_typo_suggests_the_command_with_the_key_it_guessed(config_file):
    config_file.write_text('[channels.telegram.accounts.main]\nbot_token = "1:abc"\n')
    result = invoke("config", "set", TYPO, "x")
    assert result.exit_code == 1
    assert f"did you mean {MEANT}? chatkernel config set {MEANT} x" in result.stderr
    assert f"config set {TYPO}" not in result.stderr
    assert "allow_fron" not in config_file.read_text()  # nothing written
    kernel = invoke("config", "set", "queue.mdoe", "steer")
    assert "did you mean queue.mode? chatkernel config set queue.mode steer" in kernel.stderr


def test_a_typo_in_a_new_account_suggests_its_keys_together_spelt_right(config_file):
    result = invoke("config", "set", TYPO, "x")
    assert result.exit_code == 1
    assert (f"an account's required keys go in together, in one call: chatkernel config set "
            f"{MEANT} VALUE channels.telegram.accounts.main.bot_token VALUE") in result.stderr
    assert f"config set {TYPO}" not in result.stderr


def test_digits_for_a_key_that_holds_text_are_its_text_in_a_table_too(config_file):
    result = invoke("config", "set", "channels.whatsapp.accounts.main",
                    '{phone_number_id = 106540352242922, access_token = "a", '
                    'app_secret = "b", verify_token = "c"}')
    assert result.exit_code == 0, result.output
    account = cfg.read_raw(config_file)["channels"]["whatsapp"]["accounts"]["main"]
    assert account["phone_number_id"] == "106540352242922"
    result = invoke("config", "set", "channels.whatsapp.accounts.main.phone_number_id",
                    "106540352242923")
    assert result.exit_code == 0, result.output
    account = cfg.read_raw(config_file)["channels"]["whatsapp"]["accounts"]["main"]
    assert account["phone_number_id"] == "106540352242923"


def test_validate_reports_every_problem_at_once(config_file, monkeypatch):
    monkeypatch.delenv("CK_UNSET_TOKEN", raising=False)
    config_file.write_text('''
[queue]
mode = "sometimes"

[channels.telegram.accounts.main]
bot_token = "1:abc"
allow_fron = ["x"]

[channels.slack.accounts.main]
bot_token = "${CK_UNSET_TOKEN}"

[channels.whatsapp.accounts.main]
phone_number_id = "106540352242922"
''')
    result = invoke("config", "validate")
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert lines[0] == f"Error: {config_file}: 7 problems:"
    assert lines[1:] == [
        "  channels.slack.accounts.main.bot_token: environment variable CK_UNSET_TOKEN is "
        "not set (referenced as ${CK_UNSET_TOKEN})",
        "  queue.mode: Input should be 'collect', 'followup', 'interrupt' or 'steer' (got "
        "'sometimes')",
        "  channels.telegram.accounts.main.allow_fron: unknown key (did you mean "
        "'allow_from'?)",
        "  channels.slack.accounts.main: app_token is required in socket mode: an app-level "
        "token (xapp-…) with the connections:write scope",
        "  channels.whatsapp.accounts.main.access_token: Field required",
        "  channels.whatsapp.accounts.main.app_secret: Field required",
        "  channels.whatsapp.accounts.main.verify_token: Field required",
    ]
