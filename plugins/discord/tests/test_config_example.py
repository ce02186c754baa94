"""The channel's ``config_example``, what ``chatkernel config init`` writes for it
(commented out), passes the kernel's own validation once turned on: keep it in step
with the account model as you change it."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from chatkernel.testing import CHATKERNEL, turn_on_example
from chatkernel_discord.channel import DiscordChannel

NAME = "discord"


def chatkernel(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``chatkernel ARGS`` with only this plugin loaded (``CHATKERNEL_HOME`` is the
    test's own, from the kit's ``chatkernel_home`` fixture)."""
    return subprocess.run([CHATKERNEL, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "CHATKERNEL_LOAD_PLUGINS": NAME, **(env or {})})


@pytest.mark.slow
def test_the_config_example_turned_on_validates(chatkernel_home):
    assert chatkernel("config", "init").returncode == 0
    config = chatkernel_home / "config.toml"
    text = turn_on_example(config.read_text(), NAME)
    for line in DiscordChannel.config_example.strip().splitlines():
        assert line in text  # the example, as the starter file writes it
    config.write_text(text)
    names = set(re.findall(r"\$\{([A-Z0-9_]+)\}", DiscordChannel.config_example))
    assert names  # its secrets are ${ENV} references, read where the gateway runs...
    unset = chatkernel("config", "validate")
    assert unset.returncode == 1 and "is not set (referenced as ${" in unset.stderr
    valid = chatkernel("config", "validate", env=dict.fromkeys(names, "test-value"))
    assert valid.returncode == 0, valid.stderr  # ...and with them set, it is valid
    assert f"2 channel account(s): {NAME}:main, webchat:default" in valid.stdout
