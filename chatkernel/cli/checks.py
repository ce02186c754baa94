"""The config checks commands share: the channels' tables checked with the installed
plugins' account models, as the gateway checks them."""

from __future__ import annotations

from typing import Any

import click


def validate_channels(raw: dict[str, Any], path, *, strict_env: bool) -> int:
    """Validate ``[channels.*]`` with the installed channel plugins' account models; the
    accounts checked. A ConfigError names every problem found."""
    from chatkernel.core import config as cfg

    count, errors = channel_problems(raw, path, strict_env=strict_env)
    error = cfg.all_problems(errors, path=path)
    if error is not None:
        raise error
    return count


def channel_problems(raw: dict[str, Any], path, *, strict_env: bool):
    """``(accounts checked, errors)``: every channel's accounts checked with their
    plugin's model, none of them left out for an earlier one's error."""
    from chatkernel.cli import _plugin_manager
    from chatkernel.core import config as cfg
    from chatkernel.core.plugins import collect_channels

    tables = raw.get("channels") or {}
    if not tables:
        return 0, []
    pm = _plugin_manager()
    channels = collect_channels(pm)
    count, errors = 0, []
    for name, table in tables.items():
        if name == "defaults":
            continue
        if name not in channels:
            errors.append(cfg.unknown_channel(name, channels, path=path,
                                              left_out=pm.channel_left_out(name)))
            continue
        for account, data in (table.get("accounts") or {}).items():
            try:
                resolved = cfg.resolve_env(data, key=f"channels.{name}.accounts.{account}",
                                           path=path, strict=strict_env)
                cfg.validate_account(channels[name].account_model, resolved, channel=name,
                                     account=account, path=path)
                count += 1
            except cfg.ConfigError as exc:
                errors.append(exc)
    return count, errors


def leaves(key: str, value: Any):
    """``(dotted key, value)`` of every value in ``value``, a table or a value."""
    if isinstance(value, dict):
        for name, item in value.items():
            yield from leaves(f"{key}.{name}", item)
    else:
        yield key, value


def channel_types_for(names: set[str]) -> tuple[Any, dict[str, Any]]:
    """The plugin manager that loads the channels ``names``, and its channel types by
    name: the plugin whose entry point is named after the channel (this project's are)
    loads alone, a built-in channel's built-in plugin alone; any other channel, or
    CHATKERNEL_LOAD_PLUGINS set, loads them all."""
    import os
    from importlib.metadata import entry_points

    from chatkernel.cli import _plugin_manager
    from chatkernel.core.plugins import (
        BUILTIN_CHANNELS,
        BUILTIN_PLUGINS,
        GROUP,
        PluginManager,
        collect_channels,
    )

    entry_names = {ep.name for ep in entry_points(group=GROUP)}
    if os.environ.get("CHATKERNEL_LOAD_PLUGINS") is None and \
            names <= entry_names | set(BUILTIN_CHANNELS):
        wanted = {BUILTIN_CHANNELS[name] for name in names if name in BUILTIN_CHANNELS}
        pm = PluginManager().load(
            only=sorted(names - set(BUILTIN_CHANNELS)), builtins=bool(wanted),
            disabled=[name for name in BUILTIN_PLUGINS if name not in wanted]
            + [name for name in os.environ.get("CHATKERNEL_DISABLE_PLUGINS", "").split(",")
               if name.strip()])
        found = collect_channels(pm)
        if names <= set(found):
            for name, reason in sorted(pm.load_errors.items()):
                click.echo(f"warning: plugin {name!r} failed to load: {reason}", err=True)
            return pm, found
    pm = _plugin_manager()
    return pm, collect_channels(pm)


def check_channel_table(config, raw: dict[str, Any], name: str, channels: dict[str, Any],
                        path, keys: list[str], pm) -> None:
    """``config set``'s check of one channel's tables, the gateway's own (its keys, its
    accounts built as `run` builds them). An account refused for a key it lacks says
    how to give an account's keys in one call."""
    from chatkernel.core import config as cfg
    from chatkernel.core.accounts import build_accounts

    if name not in channels:
        raise cfg.unknown_channel(name, channels, path=path)
    section = cfg.effective_channels(config, pm).get(name)
    if section is None or not section.enabled:
        return
    try:
        build_accounts(name, section, channels[name], config_path=path)
    except cfg.ConfigError as exc:
        raise _with_together_hint(exc, raw, name, channels[name].account_model, keys) \
            from None


def _with_together_hint(error, raw: dict[str, Any], channel: str, model,
                        keys: list[str]):
    """``error`` with, when it refused an account this call edits for keys the account
    lacks, the one command that sets them all at once."""
    import re

    from chatkernel.core import config as cfg

    prefix = f"channels.{channel}.accounts."
    tables = dict.fromkeys(".".join(key.split(".")[:4]) for key in keys
                           if key.startswith(prefix) and key.count(".") >= 4)
    where = error.key or ""
    table = next((t for t in tables if where == t or where.startswith(t + ".")
                  or (not where and f"{t}." in error.message)), None)
    if table is None:
        return error
    written = (((raw.get("channels") or {}).get(channel) or {}).get("accounts") or {}) \
        .get(table.rsplit(".", 1)[-1]) or {}
    # Required by the model, or by the channel's own check ("app_token is required").
    wanted = [name for name, field in model.model_fields.items() if name not in written
              and (field.is_required()
                   or re.search(rf"\b{name}\b[^;.:]*\brequired", error.message))]
    if not wanted:
        return error
    # A key that is no key of the account is given as the one it was likely meant to be.
    given = [cfg.guessed_key(key, {channel: model}) or key for key in keys
             if key.startswith(table + ".")]
    words = " ".join(f"{key} VALUE" for key in given + [f"{table}.{name}" for name in wanted])
    message = error.message.rstrip(".")
    joint = "\n" if "\n" in message else "; "
    return cfg.ConfigError(f"{message}{joint}an account's required keys go in together, in "
                           f"one call: chatkernel config set {words}", path=error.path,
                           key=error.key)
