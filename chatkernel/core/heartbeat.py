"""Heartbeats: periodic agent turns (SPEC §6). Visibility resolution lives here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

VISIBILITY_KEYS = ("show_ok", "show_alerts", "use_indicator")


def plugin_visibility_defaults(pm: Any, channel: str, account: str) -> dict[str, bool]:
    """Merge every plugin's ``heartbeat_visibility`` answer.

    pluggy returns results newest plugin first and the built-in (trylast)
    last; merging them in reverse lets a later-registered plugin win.
    """
    merged: dict[str, bool] = {}
    for result in reversed(pm.hook.heartbeat_visibility(channel=channel, account=account)):
        if result:
            merged.update({k: bool(v) for k, v in result.items() if k in VISIBILITY_KEYS})
    return merged


def resolve_visibility(plugin_defaults: Mapping[str, bool],
                       *layers: Mapping[str, Any] | None) -> dict[str, bool]:
    """Apply config layers over the plugin defaults, most specific layer first.

    ``layers`` are e.g. the account's, the channel's and ``channels.defaults``
    heartbeat settings; a key left unset (None) falls through to the next.
    """
    resolved = dict(plugin_defaults)
    for key in VISIBILITY_KEYS:
        for layer in layers:
            value = None if layer is None else layer.get(key)
            if value is not None:
                resolved[key] = bool(value)
                break
    return resolved
