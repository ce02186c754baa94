"""``chatkernel login``: a plugin's login flow, its credentials stored in the config."""

from __future__ import annotations

from typing import Any

import click

from chatkernel.cli import cli
from chatkernel.cli.checks import validate_channels
from chatkernel.cli.client import running_gateway
from chatkernel.cli.local import with_store
from chatkernel.cli.options import config_option


def _logins() -> dict[str, Any]:
    """Login flows by channel name, from every plugin's ``register_logins``."""
    from chatkernel.cli import _plugin_manager
    from chatkernel.core.plugins import collect_registered
    from chatkernel.sdk.login import Login

    logins = collect_registered(_plugin_manager().hook.register_logins, "login")
    for name, login in logins.items():
        if not isinstance(login, Login):
            raise TypeError(f"login {name!r} is not a chatkernel.sdk.login.Login: {login!r}")
    return logins


@cli.command()
@click.argument("channel")
@click.option("--account", default="main", show_default=True,
              help="The account under channels.CHANNEL.accounts to log in.")
@click.option("--api-base", metavar="URL", help="The platform's API host, when not the default.")
@config_option
def login(channel: str, account: str, api_base: str | None, config_file: str | None) -> None:
    """Log a channel account in (WeChat: scan a QR code) and store its credentials.

    The credentials go into the config file (mode 0600) under
    channels.CHANNEL.accounts.ACCOUNT, replacing earlier ones; secrets are never
    printed. A running gateway uses them after a restart.
    """
    import time

    import anyio

    from chatkernel.core import config as cfg
    from chatkernel.sdk.channel import CREDENTIALS_KEY
    from chatkernel.sdk.login import LoginFailed, LoginRequest

    logins = _logins()
    flow = logins.get(channel)
    if flow is None:
        known = ", ".join(sorted(logins)) or "none installed"
        raise click.ClickException(f"channel {channel!r} has no login flow (channels with "
                                   f"one: {known})")
    path = cfg.config_path(config_file)
    document = cfg.read_document(path)  # the person's comments and layout stay
    key = f"channels.{channel}.accounts.{account}"
    try:
        current = cfg.get_key(document.unwrap(), key, path=path)
    except KeyError:
        current = {}
    request = LoginRequest(channel=channel, account=account, api_base=api_base,
                           current=dict(current) if isinstance(current, dict) else {},
                           echo=click.echo)
    try:
        result = anyio.run(flow.run, request)
    except LoginFailed as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        raise click.ClickException("login interrupted: nothing was stored") from None
    for name, value in result.config.items():
        if value is not None:
            cfg.set_key(document, f"{key}.{name}", value, path=path)
    raw = document.unwrap()
    cfg.parse(raw, path=path, strict_env=False)
    validate_channels(raw, path, strict_env=False)
    cfg.write_raw(path, document)  # mode 0600 from the first byte

    async def stamp(store):
        await store.set_account_state(channel, account, CREDENTIALS_KEY, time.time())

    with_store(config_file, stamp)
    stored = ", ".join(sorted(result.secret_keys)) or "credentials"
    click.echo(f"logged in{': ' + result.detail if result.detail else ''}")
    click.echo(f"{stored} stored under {key} in {path} (mode 0600)")
    if running_gateway() is not None:
        click.echo("a gateway is running: restart it to use the new credentials")
