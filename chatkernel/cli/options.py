"""What every command shares: the group class that turns the kernel's errors into one
line, and ``--config``."""

from __future__ import annotations

from typing import Any

import click


class KernelGroup(click.Group):
    """Turns the kernel's user-facing errors into one clear line, never a traceback.

    ``lazy``: command name -> the module of :mod:`chatkernel.cli` that defines it,
    imported when the command is asked for (a command's module registers it on the
    group), so ``chatkernel plugins`` imports none of the other commands."""

    lazy: dict[str, str] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            import importlib

            importlib.import_module(f"chatkernel.cli.{self.lazy[cmd_name]}")
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        from chatkernel.sdk.errors import ConfigError

        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None


#: Where the ``--config`` given nearest the command is kept (``Context.meta`` is shared
#: by a command's context and its groups').
_CONFIG_FILE = "chatkernel.config_file"


def _remember_config(ctx: click.Context, param: click.Parameter, value: str | None
                     ) -> str | None:
    if value is not None:
        ctx.meta[_CONFIG_FILE] = value
    return ctx.meta.get(_CONFIG_FILE)


def config_option(command=None, *, may_be_missing: bool = False):
    """``--config PATH``, accepted alike by ``chatkernel``, by a group and by each of its
    commands: ``chatkernel --config X config validate``, ``chatkernel config --config X
    validate`` and ``chatkernel config validate --config X`` are one command. The one
    given nearest the command wins; a function with a ``config_file`` parameter gets it.

    A file named so (or by ``CHATKERNEL_CONFIG``) must exist, unless the command
    ``may_be_missing`` (``config init`` writes it): a typo in a service file would
    otherwise run a gateway on the defaults, without its channels."""
    import functools
    import inspect

    if command is None:
        return functools.partial(config_option, may_be_missing=may_be_missing)
    takes_it = "config_file" in inspect.signature(command).parameters
    if takes_it and not may_be_missing:
        inner = command

        @functools.wraps(inner)
        def command(*args: Any, **kwargs: Any) -> Any:
            _require_named_file(kwargs.get("config_file"))
            return inner(*args, **kwargs)
    return click.option("--config", "config_file", metavar="PATH", envvar="CHATKERNEL_CONFIG",
                        expose_value=takes_it, callback=_remember_config,
                        help="The config file (default $CHATKERNEL_CONFIG, else "
                             "$CHATKERNEL_HOME/config.toml).")(command)


def _require_named_file(config_file: str | None) -> None:
    """Refuse a config file named explicitly that does not exist (one line, no start)."""
    import os
    from pathlib import Path

    if not config_file:
        return
    path = Path(config_file).expanduser()
    if path.exists():
        return
    named = "CHATKERNEL_CONFIG" if os.environ.get("CHATKERNEL_CONFIG") == config_file \
        else "--config"
    raise click.ClickException(f"{path}: no such config file (named by {named}); "
                               f"`chatkernel config init --config {path}` writes a starter")
