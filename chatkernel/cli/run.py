"""``chatkernel run`` and ``chatkernel reload``: the gateway itself, and its config
applied again."""

from __future__ import annotations

import json
import logging
import os
import sys

import click

from chatkernel.cli import cli
from chatkernel.cli.client import running_gateway
from chatkernel.cli.options import config_option


@cli.command()
@config_option
@click.option("--listen", metavar="HOST:PORT",
              help="Where the HTTP server listens (default gateway.listen, 127.0.0.1:8787; "
                   "port 0 picks a free one).")
@click.option("--log-json", is_flag=True, help="Log JSON lines instead of readable lines.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              help="Default gateway.log_level (info).")
def run(config_file: str | None, listen: str | None, log_json: bool,
        log_level: str | None) -> None:
    """Run the gateway: every configured account, the web chat, the agent.

    With no config at all it serves the built-in web chat on 127.0.0.1:8787,
    answered by the echo agent, with state in SQLite under $CHATKERNEL_HOME.
    """
    import anyio

    from chatkernel.cli import _plugin_manager
    from chatkernel.core import config as cfg
    from chatkernel.core import logs
    from chatkernel.core.gateway.process import run_gateway

    path = cfg.config_path(config_file)
    raw = cfg.read_raw(path)
    moved = _secrets_out_of_the_environment(raw)
    # Read here, not before: what the file holds never enters an environment block.
    from_file = cfg.load_env_file()
    config = cfg.parse(raw, path=path)
    if listen is not None:
        from pydantic import ValidationError

        try:
            config.gateway.listen = listen
        except ValidationError as exc:
            message = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise click.BadParameter(message, param_hint="--listen") from None
    settings = config.logging
    logs.configure("json" if log_json else config.gateway.log_format,
                   log_level or config.gateway.log_level,
                   secrets=cfg.secret_values(cfg.resolve_env(raw, strict=False)),
                   file=logs.LogFile(cfg.home_dir(), max_bytes=settings.max_bytes,
                                     backups=settings.backups,
                                     max_age_days=settings.max_age_days)
                   if settings.file else None)
    if moved:
        logging.getLogger("chatkernel.gateway").info(
            "kept out of the process's environment block (in memory only): %s",
            ", ".join(moved))
    if from_file:
        logging.getLogger("chatkernel.gateway").info(
            "read from %s: %s", cfg.env_file_path(), ", ".join(from_file))
    _plugin_manager()
    from chatkernel.core.gateway.homelock import HomeInUse

    if listen is not None:
        origin = "--listen on the command line"
    elif "listen" in (raw.get("gateway") or {}):
        origin = f"gateway.listen in {path}"
    else:
        origin = "the built-in default"
    try:
        anyio.run(lambda: run_gateway(config, config_path=path, listen_origin=origin))
    except HomeInUse as exc:
        raise click.ClickException(str(exc)) from None
    _write_modules(os.environ.get("CHATKERNEL_MODULES_AT_EXIT"))


def _write_modules(path: str | None) -> None:
    """``CHATKERNEL_MODULES_AT_EXIT=PATH``: once the gateway stopped, every module it
    imported, a name a line (how a test sees that running it imports no test kit)."""
    if path:
        with open(path, "w", encoding="utf-8") as file:
            file.write("".join(f"{name}\n" for name in sorted(sys.modules)))


def _secrets_out_of_the_environment(raw: dict) -> list[str]:
    """Start again without the secrets in the environment block, then make the process
    non-dumpable (chatkernel.core.gateway.secret_env); the names moved."""
    from chatkernel.cli import _OWN_PROCESS
    from chatkernel.core.gateway import secret_env

    try:
        moved = secret_env.take_over()
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    if not moved and _OWN_PROCESS:
        secret_env.exec_without_secrets(secret_env.secret_names(raw, os.environ))
    if _OWN_PROCESS:
        secret_env.make_non_dumpable()
    return moved


#: ``chatkernel reload`` exit codes: the config was refused; no gateway runs.
EXIT_RELOAD_REFUSED = 1
EXIT_NO_GATEWAY = 3


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@config_option
def reload(as_json: bool, config_file: str | None) -> None:
    """Apply the edited config file to the running gateway, without a restart.

    Allowlists, queue and heartbeat settings, added and removed accounts and new
    account credentials apply at once; the answer names every changed key that needs a
    restart. An invalid config is refused as a whole: the running one stays. The same
    happens on SIGHUP to `chatkernel run`. With --config, the gateway must be the one
    reading that file.
    """
    import urllib.error
    from pathlib import Path

    from chatkernel.core.gateway.control import call

    info = running_gateway()
    if info is None:
        error = click.ClickException("no gateway is running: nothing to reload (a start "
                                     "reads the config anyway: chatkernel run)")
        error.exit_code = EXIT_NO_GATEWAY
        raise error
    try:
        body = {"config": str(Path(config_file).resolve())} if config_file else {}
        status, answer = call(info, "/control/reload", body, timeout=60.0)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        error = click.ClickException(f"the gateway at {info.url} did not answer ({exc})")
        error.exit_code = EXIT_NO_GATEWAY
        raise error from None
    if as_json:
        click.echo(json.dumps(answer if status < 400 else {"refused": answer.get("error")},
                              indent=2))
        if status >= 400:
            sys.exit(EXIT_RELOAD_REFUSED)
        return
    if status >= 400:
        raise click.ClickException("reload refused: " + answer.get(
            "error", f"the gateway answered {status}"))
    for line in answer["lines"]:
        click.echo(line)
