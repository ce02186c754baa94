"""The starter file ``chatkernel config init`` writes."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from chatkernel.core.config.env import ENV_REFERENCE

STARTER_HEADER = """\
# chatkernel's configuration, written by `chatkernel config init`.
#
# Everything is optional: with this file as it is, `chatkernel run` serves the web chat
# at http://127.0.0.1:8787/, answered by the echo agent. A line starting with "# " is an
# example: remove the "# " to use it. Secrets are ${ENV_VAR} references, read from the
# gateway's environment when it starts (never written here). Check the file with
# `chatkernel config validate`; `chatkernel config get KEY` shows any key's effective
# value, defaults included.
#
# Who may talk to a bot is set per account (docs/access.md): `allow_from` lists who is
# let in, and `dm_policy` (default "pairing") gives anyone else a code you approve with
# `chatkernel pairing approve CHANNEL CODE`; "allowlist" admits the list alone, "open"
# everyone, "disabled" no private message. Groups: `group_policy` (default "allowlist":
# those listed as "chat:<id>"). The web chat's page admits everyone (dm_policy "open").

[gateway]
listen = "127.0.0.1:8787"             # HOST:PORT; port 0 picks a free one
# control_token = "${CHATKERNEL_CONTROL_TOKEN}"   # required to listen beyond this machine

[agent]
kind = "echo"                         # echo (repeats the message) | command | openai
# command = ["llm", "-m", "gpt-4o-mini"]          # kind = "command": one run per turn
# model = "gpt-4o-mini"                           # kind = "openai": any compatible API
# base_url = "http://127.0.0.1:11434/v1"
# api_key_env = "OPENAI_API_KEY"                  # the variable that holds its key

[queue]
mode = "collect"                      # collect | followup | interrupt | steer
debounce_ms = 1000
cap = 20
drop = "old"                          # old | new | summarize
max_concurrent = 4

# Heartbeats: a periodic agent turn, off until this table is here. Each run is an agent
# turn: with a paid model, every = "30m" is 48 paid turns a day (docs/heartbeats.md).
# [heartbeat]
# every = "30m"
# target = "last"                     # none | last | a channel name
"""


def starter_config(channels: list[tuple[str, str, str]] = (),
                   on: Collection[str] = ()) -> Any:
    """What ``chatkernel config init`` writes, as a tomlkit document (comments kept):
    the kernel's main settings, then an example for each installed channel
    (``(name, where it comes from, Channel.config_example)``). The channels of ``on``
    (those that run with no table of their own: a plugin implies their accounts) come
    first with their example on; every other is commented out."""
    import tomlkit

    parts = [STARTER_HEADER]
    for name, source, example in sorted(channels, key=lambda c: (c[0] not in on, c[0])):
        example = example.strip("\n")
        title = f"# -- {name} ({source}) "
        parts.append("\n" + title + "-" * max(3, 88 - len(title)) + "\n")
        if not example:
            parts.append(f"# No example: its documentation says what "
                         f"[channels.{name}.accounts.<name>] takes.\n")
            continue
        if name in on:
            parts.append("# On: these tables show its defaults; with this file's [gateway] "
                         "settings it runs\n# even without them.\n")
            parts.append(example + "\n")
            continue
        parts.append('# Off: to turn it on, remove the "# " before each line below.\n')
        names = list(dict.fromkeys(m[1] for m in ENV_REFERENCE.finditer(example) if m[1]))
        if names:
            parts.append(f"# It reads {', '.join(names)} from the gateway's environment.\n")
        parts.append("".join(f"# {line}\n" for line in example.splitlines()))
    return tomlkit.parse("".join(parts))
