"""``--config PATH`` is taken in the same places by every command that reads the config:
before the command's group, after it, and after the command itself."""

from __future__ import annotations

import inspect

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


#: Arguments each command that reads the config needs to get as far as reading it.
ARGS = {
    "chatkernel send": ["--channel", "webchat", "--to", "x", "hi"],
    "chatkernel sessions history": ["k"],
    "chatkernel sessions send": ["k", "hi"],
    "chatkernel sessions policy": ["k", "deny"],
    "chatkernel login": ["telegram"],
    "chatkernel config get": ["queue.cap"],
    "chatkernel config set": ["queue.cap", "5"],
    "chatkernel config unset": ["queue.cap"],
    "chatkernel agents which": ["--channel", "webchat", "--account", "default", "--chat", "x"],
    "chatkernel pairing approve": ["telegram", "ABCD2345"],
    "chatkernel pairing deny": ["telegram", "ABCD2345"],
    "chatkernel pairing revoke": ["telegram", "42"],
    "chatkernel jobs add": ["j", "--every", "1h", "--prompt", "p"],
    "chatkernel jobs show": ["j"],
    "chatkernel jobs remove": ["j"],
    "chatkernel jobs run": ["j"],
    "chatkernel jobs history": ["j"],
    "chatkernel triggers test": ["t"],
    "chatkernel deliveries retry": ["1"],
    "chatkernel deliveries discard": ["1"],
    "chatkernel restore": ["backup.tar.gz"],
}
#: Commands a missing file is no error for: init writes it, path names where it goes.
MAY_BE_MISSING = {"chatkernel config init", "chatkernel config path"}


def reading_commands():
    for path, command in commands(cli):
        takes = command.callback is not None and \
            "config_file" in inspect.signature(command.callback).parameters
        if not isinstance(command, click.Group) and takes and path not in MAY_BE_MISSING:
            yield path


@pytest.mark.parametrize("path", sorted(set(reading_commands()) - {"chatkernel run"}))
@pytest.mark.parametrize("named_by", ["option", "environment"])
def test_a_named_config_file_that_does_not_exist_is_an_error(chatkernel_home, tmp_path,
                                                            monkeypatch, path, named_by):
    """A typo in a service file's --config must not run a gateway on the defaults."""
    missing = tmp_path / "typo.toml"
    args = path.split()[1:] + ARGS.get(path, [])
    if named_by == "option":
        args += ["--config", str(missing)]
    else:
        monkeypatch.setenv("CHATKERNEL_CONFIG", str(missing))
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    name = "--config" if named_by == "option" else "CHATKERNEL_CONFIG"
    assert result.stderr == (f"Error: {missing}: no such config file (named by {name}); "
                             f"`chatkernel config init --config {missing}` writes a starter\n")
    assert not missing.exists()


def test_run_with_a_named_config_file_that_does_not_exist_starts_nothing(chatkernel_home,
                                                                        tmp_path):
    """A real process: were the file not checked, it would serve the web chat alone."""
    import os
    import subprocess
    import sys

    missing = tmp_path / "typo.toml"
    result = subprocess.run([sys.executable, "-m", "chatkernel.cli", "run", "--listen",
                             "127.0.0.1:0", "--config", str(missing)], capture_output=True,
                            text=True, timeout=60, env={**os.environ,
                                                        "CHATKERNEL_HOME": str(chatkernel_home)})
    assert result.returncode == 1
    assert result.stderr.strip().endswith(f"{missing}: no such config file (named by "
                                          f"--config); `chatkernel config init --config "
                                          f"{missing}` writes a starter")
    assert "listening" not in result.stderr


def test_config_init_and_path_take_a_file_that_is_not_there_yet(chatkernel_home, tmp_path):
    new = tmp_path / "new.toml"
    runner = CliRunner()
    assert runner.invoke(cli, ["config", "path", "--config", str(new)]).stdout == f"{new}\n"
    result = runner.invoke(cli, ["config", "init", "--config", str(new)])
    assert result.exit_code == 0 and new.exists()
