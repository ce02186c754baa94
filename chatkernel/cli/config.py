"""``chatkernel config``: read and write the TOML config."""

from __future__ import annotations

import json

import click

from chatkernel.cli import cli
from chatkernel.cli.channels import channel_types
from chatkernel.cli.checks import (
    channel_problems,
    channel_types_for,
    check_channel_table,
    leaves,
)
from chatkernel.cli.options import config_option


@cli.group()
@config_option
def config() -> None:
    """Read and write the TOML config."""


@config.command("path")
@config_option(may_be_missing=True)  # where the file is, or would be
def config_path_cmd(config_file: str | None) -> None:
    """Print where the config file is."""
    from chatkernel.core.config import config_path

    click.echo(str(config_path(config_file)))


@config.command("init")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@config_option(may_be_missing=True)
def config_init(config_file: str | None, force: bool) -> None:
    """Write a commented starter config (mode 0600): the main settings, and an example
    for each installed channel (the web chat's on, the others commented out)."""
    from chatkernel.cli import _plugin_manager
    from chatkernel.core import config as cfg

    path = cfg.config_path(config_file)
    if path.exists() and not force:
        raise click.ClickException(f"{path} exists already (use --force to overwrite)")
    from chatkernel.core.plugins import collect_channels, implied_accounts

    pm = _plugin_manager()
    types = collect_channels(pm)
    channels = [(c["name"], c["source"], types[c["name"]].config_example)
                for c in channel_types()]
    # On in the file: the channels that would run on the starter's own settings.
    on = implied_accounts(pm, cfg.parse(cfg.starter_config().unwrap()))
    cfg.write_raw(path, cfg.starter_config(channels, on=on))
    click.echo(f"wrote {path}, with an example for each installed channel "
               f"({', '.join(sorted(types))})")


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def config_show(config_file: str | None, as_json: bool) -> None:
    """Print the config file, secrets redacted (${ENV} references are shown as written)."""
    from chatkernel.core import config as cfg

    path = cfg.config_path(config_file)
    data = cfg.redact(cfg.read_raw(path))
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        import tomli_w

        click.echo(tomli_w.dumps(data).rstrip("\n") or f"# {path} is empty or missing")


@config.command("get")
@click.argument("key")
@click.option("--json", "as_json", is_flag=True,
              help="Output JSON: key, value, source (file or default), note.")
@config_option
def config_get(config_file: str | None, key: str, as_json: bool) -> None:
    """Print one key's effective value: the file's, else its default (said on stderr),
    with what it does where the value alone does not say it. An account setting asked
    of a channel (channels.webchat.allow_from) prints every account's."""
    from chatkernel.cli import _plugin_manager
    from chatkernel.core import config as cfg
    from chatkernel.core.plugins import collect_channels

    path = cfg.config_path(config_file)
    models = {name: channel.account_model
              for name, channel in collect_channels(_plugin_manager()).items()}
    found = cfg.effective_values(cfg.read_raw(path), key, account_models=models, path=path)
    shown = [cfg.Effective(item.key, cfg.redact(item.value, item.key.rsplit(".", 1)[-1]),
                           item.source, item.note) for item in found]
    per_account = len(shown) != 1 or shown[0].key != key
    if as_json:
        data = ({"key": key, "per_account": [item.as_dict() for item in shown]}
                if per_account else shown[0].as_dict())
        click.echo(json.dumps(data, indent=2, default=str))
        return
    if not per_account:
        item = shown[0]
        click.echo(cfg.format_value(item.value))
        notes = ([f"the default (not set in {path})"] if item.source == "default" else []) \
            + ([item.note] if item.note else [])
        if notes:
            click.echo(f"# {'; '.join(notes)}", err=True)
        return
    click.echo(f"# {key.rsplit('.', 1)[-1]} is set per account:", err=True)
    for item in shown:
        notes = (["the default"] if item.source == "default" else []) \
            + ([item.note] if item.note else [])
        comment = f"  # {'; '.join(notes)}" if notes else ""
        click.echo(f"{item.key} = {cfg.inline_value(item.value)}{comment}")


@config.command("set", options_metavar="[OPTIONS]")
@click.argument("pairs", nargs=-1, required=True, metavar="KEY VALUE [KEY VALUE]...")
@config_option
def config_set(config_file: str | None, pairs: tuple[str, ...]) -> None:
    """Set dotted keys. VALUE is read as TOML when it parses (numbers, booleans,
    lists), else as a string; a field that holds text (an id, a phone number) takes
    digits as text. Several KEY VALUE pairs are set together and validated together
    (an account's required keys), before anything is written."""
    from chatkernel.core import config as cfg

    if len(pairs) % 2:
        raise click.UsageError(f"expected KEY VALUE pairs, got {len(pairs)} word(s): "
                               f"{pairs[-1]!r} has no value")
    path = cfg.config_path(config_file)
    document = cfg.read_document(path)  # the person's comments and layout stay
    edits = list(zip(pairs[::2], pairs[1::2]))
    for key, _ in edits:
        cfg.split_key(key, path=path)
    # Only the channels the keys are under are checked, so only their plugins load.
    named = {key.split(".")[1] for key, _ in edits if key.startswith("channels.")} \
        - {"defaults"}
    pm, channels = channel_types_for(named) if named else (None, {})
    models = {name: channel.account_model for name, channel in channels.items()}
    try:
        heartbeat_before = cfg.parse(document.unwrap(), path=path,
                                     strict_env=False).config_heartbeat_wanted()
    except cfg.ConfigError:
        heartbeat_before = True  # the file is broken already: say nothing about it
    written = []
    for key, text in edits:
        value = cfg.as_typed(key, cfg.parse_value(
            text, text_field=cfg.takes_text(cfg.key_field(key, models))), models)
        cfg.set_key(document, key, value, path=path)
        written.append((key, value))
    raw = document.unwrap()
    try:
        # ${ENV} references need not resolve here: the variable may only exist where
        # the gateway runs.
        config = cfg.parse(raw, path=path, strict_env=False)
        for name in sorted(named):
            check_channel_table(config, raw, name, channels, path, [key for key, _ in edits],
                                pm)
    except cfg.ConfigError as exc:
        raise _with_guessed_keys(exc, edits, models) from None
    cfg.write_raw(path, document)
    shown = ", ".join(
        f"{key} = {cfg.inline_value(cfg.redact(value, key.rsplit('.', 1)[-1]))}"
        for key, value in written)
    click.echo(f"set {shown} in {path}")
    for key, value in (leaf for key, value in written for leaf in leaves(key, value)):
        if cfg.is_secret_field(key, cfg.key_field(key, models)) and isinstance(value, str) \
                and value and not cfg.holds_env_reference(value):
            name = cfg.env_name_for(key)
            click.echo(f"warning: {key} is a secret, now stored in plain text in {path}; "
                       f"a reference keeps it out of the file: chatkernel config set {key} "
                       f"'${{{name}}}' (and set {name} where the gateway runs)", err=True)
    if not heartbeat_before and config.config_heartbeat_wanted():
        every = config.heartbeat.every
        if config.agent.heartbeat is not None and "every" in \
                config.agent.heartbeat.model_fields_set:
            every = config.agent.heartbeat.every
        from chatkernel.core.durations import parse_interval

        if parse_interval(every) > 0:
            click.echo(f"note: this turns the config heartbeat on: an agent turn every "
                       f"{every}, each a paid turn with a paid model (heartbeat.every = "
                       f'"0" keeps manual wakes only; docs/heartbeats.md)', err=True)


def _with_guessed_keys(error, edits: list[tuple[str, str]], models):
    """``error`` with, when a key set is no key of its table but close to one, the
    command that sets the key it was likely meant to be."""
    import shlex

    from chatkernel.core import config as cfg

    guesses = {key: cfg.guessed_key(key, models) for key, _ in edits}
    if not any(guesses.values()) or "chatkernel config set" in error.message:
        return error  # (a command it suggests already names the keys guessed)
    meant = ", ".join(guess for guess in guesses.values() if guess)
    words = " ".join(f"{guesses[key] or key} {shlex.quote(text)}" for key, text in edits)
    return cfg.ConfigError(f"{error.message}\ndid you mean {meant}? chatkernel config set "
                           f"{words}", path=error.path, key=error.key)


@config.command("unset")
@click.argument("key")
@config_option
def config_unset(config_file: str | None, key: str) -> None:
    """Remove a dotted key (its default applies again)."""
    from chatkernel.core import config as cfg

    path = cfg.config_path(config_file)
    document = cfg.read_document(path)
    if not cfg.unset_key(document, key, path=path):
        raise cfg.ConfigError("not set in the file", path=path, key=key)
    cfg.write_raw(path, document)


@config.command("validate")
@config_option
def config_validate(config_file: str | None) -> None:
    """Check the config as `run` does, starting nothing: kernel sections, ${ENV}
    references, every channel account (built as the gateway builds it), the agent kind
    and the listen address's control token."""
    from chatkernel.cli import _plugin_manager
    from chatkernel.core import config as cfg
    from chatkernel.core.gateway.process import check_startup
    from chatkernel.core.plugins import collect_channels

    path = cfg.config_path(config_file)
    raw = cfg.read_raw(path)
    # Every problem at once: the unset variables, the kernel's sections, every account.
    errors, config = [], None
    try:
        cfg.resolve_env(raw, path=path)
    except cfg.EnvNotSet as exc:
        errors.append(exc)
    try:
        config = cfg.parse(raw, path=path, strict_env=False)
    except cfg.ConfigError as exc:
        errors.append(exc)
    errors.extend(channel_problems(raw, path, strict_env=False)[1])
    error = cfg.all_problems(errors, path=path)
    if error is not None:
        raise error
    pm = _plugin_manager()
    checked = check_startup(config, config_path=path, pm=pm)
    if checked.unanswered:
        click.echo(f"note: no default agent: the chats no binding matches go unanswered in "
                   f"{', '.join(checked.unanswered)}", err=True)
    where = str(path) if path.exists() else f"{path} (missing: defaults apply)"
    installed = collect_channels(pm)  # without its plugin, the implied web chat does not run
    accounts = sorted(f"{channel}:{account}" for channel, account, enabled, _ in
                      cfg.effective_accounts(config, pm) if enabled and channel in installed)
    click.echo(f"ok: {where}, {len(accounts)} channel account(s)"
               + (f": {', '.join(accounts)}" if accounts else ""))
