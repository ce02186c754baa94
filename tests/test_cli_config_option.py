"""``--config PATH`` is taken in the same places by every command that reads the config:
before the command's group, after it, and after the command itself."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from chatkernel.cli import cli

#: Commands that read no config file, so have no --config of their own.
NO_CONFIG = {"chatkernel plugins"}


def commands(group: click.Group, prefix: str = "chatkernel"):
    for name, command in group.commands.items():
        path = f"{prefix} {name}"
        yield path, command
        if isinstance(command, click.Group):
            yield from commands(command, path)


@pytest.fixture
def bad_config(tmp_path):
    """A config file elsewhere than the home, that any command reading it refuses."""
    path = tmp_path / "elsewhere.toml"
    path.write_text('[queue]\nmode = "bogus"\n')
    return path


def test_every_command_and_group_takes_config():
    assert "--config" in {opt for p in cli.params for opt in p.opts}
    missing = [path for path, command in commands(cli) if path not in NO_CONFIG
               and "--config" not in {opt for p in command.params for opt in p.opts}]
    assert missing == []


@pytest.mark.parametrize("command", [
    ["config", "validate"],
    ["heartbeat", "status"],
    ["sessions", "list"],
    ["config", "get", "queue.cap"],
    ["status"],
    ["channels", "list"],
])
@pytest.mark.parametrize("where", ["root", "group", "command"])
def test_config_is_read_wherever_it_is_given(chatkernel_home, bad_config, command, where):
    option = ["--config", str(bad_config)]
    if where == "root":
        args = option + command
    elif where == "group" and len(command) > 1:
        args = command[:1] + option + command[1:]
    else:
        args = command + option
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert "No such option" not in result.output
    assert f"{bad_config}: queue.mode: " in result.output


def test_the_option_nearest_the_command_wins(chatkernel_home, tmp_path, bad_config):
    good = tmp_path / "good.toml"
    good.write_text('[heartbeat]\nevery = "2h"\n')
    runner = CliRunner()
    result = runner.invoke(cli, ["heartbeat", "--config", str(bad_config), "status",
                                 "--config", str(good)])
    assert result.exit_code == 0, result.output
    assert "every 2h" in result.stdout
    result = runner.invoke(cli, ["--config", str(good), "config", "path"])
    assert result.stdout == f"{good}\n"


def test_the_environment_still_names_the_file(chatkernel_home, bad_config, monkeypatch):
    monkeypatch.setenv("CHATKERNEL_CONFIG", str(bad_config))
    result = CliRunner().invoke(cli, ["sessions", "list"])
    assert result.exit_code == 1 and f"{bad_config}: queue.mode: " in result.output
