"""The starter config file in tests: one channel's example turned on.

``chatkernel config init`` writes each installed channel's ``config_example`` commented
out. A plugin's test turns its own on and checks that ``chatkernel config validate``
takes it, as a person editing the file would::

    text = turn_on_example((home / "config.toml").read_text(), "mychat")
"""

from __future__ import annotations


def turn_on_example(text: str, channel: str) -> str:
    """``text`` (a starter file) with ``channel``'s example turned on: the ``"# "`` taken
    off each line of its block, from its first ``# [channels.<channel>.`` table to the
    blank line after it. Everything else is left as it is."""
    lines, inside = [], False
    for line in text.splitlines():
        inside = inside and bool(line.strip())
        if line.startswith(f"# [channels.{channel}."):
            inside = True
        lines.append(line.removeprefix("# ") if inside else line)
    return "\n".join(lines) + "\n"
