"""Output helpers shared by the commands: redaction, JSON or text, ages."""

from __future__ import annotations

import json
from typing import Any

import click


def redactor(raw: dict[str, Any], info=None):
    """What hides the config's secrets, the gateway's token and the channels' token
    shapes in what a command prints."""
    from chatkernel.core.health.report import Redactor, config_secrets
    from chatkernel.core.plugins import collect_channels, get_plugin_manager

    collect_channels(get_plugin_manager())  # their secret patterns join the redaction
    return Redactor(config_secrets(raw, extra=[info.token] if info is not None else []))


def show(data: Any, text: str | None, redact, as_json: bool) -> None:
    """``data`` as JSON, or ``text``, redacted."""
    out = json.dumps(data, indent=2, ensure_ascii=False, default=str) if as_json else text
    click.echo(redact(out or ""))


def ago(ts: float) -> str:
    """``5m ago``."""
    import time

    seconds = max(0, int(time.time() - ts))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"
