"""The ``chatkernel`` command line: the group, and a module per command or command group.

Only click is imported at start-up, so ``--help`` always works and stays fast;
each command imports what it needs when it runs.
"""

from __future__ import annotations

import click

from chatkernel import __version__
from chatkernel.cli.options import KernelGroup, config_option


#: The commands that still run when the home's env file is refused: they report it.
DIAGNOSING = frozenset({"security", "doctor"})


@click.group(cls=KernelGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="chatkernel")
@config_option
@click.pass_context
def cli(ctx: click.Context) -> None:
    """chatkernel: a gateway between chat platforms and a bot or AI agent.

    Channels are plugins: `pip install chatkernel-telegram` enables Telegram.
    """
    # Every command reads the secrets' home, $CHATKERNEL_HOME/.env, as the gateway does;
    # `run` reads it itself, once its secrets are out of its environment block, and
    # `plugins` reads neither config nor secrets (its start-up is benchmarked: it
    # imports no config).
    if ctx.invoked_subcommand not in ("run", "plugins"):
        from chatkernel.core.config import ConfigError, load_env_file

        try:
            load_env_file()
        except ConfigError:
            # The commands that diagnose the home report a refused file themselves
            # (its mode, its lines) instead of refusing to look.
            if ctx.invoked_subcommand not in DIAGNOSING:
                raise


#: Set when chatkernel runs as its own program (not as a library, in a test's
#: process): only then may ``run`` execute itself again (chatkernel.core.gateway.secret_env).
_OWN_PROCESS = False


def main() -> None:
    global _OWN_PROCESS
    _OWN_PROCESS = True
    cli(prog_name="chatkernel")


def _plugin_manager():
    """The process's plugin manager, each plugin that failed to load named on stderr.
    Commands import it from here when they run (so a test can hand them its own)."""
    from chatkernel.core.plugins import get_plugin_manager

    pm = get_plugin_manager()
    for name, reason in sorted(pm.load_errors.items()):
        click.echo(f"warning: plugin {name!r} failed to load: {reason}", err=True)
    return pm


# The commands, each registering itself on the group. (After the group: they import it.)
from chatkernel.cli import (  # noqa: E402, F401
    agents,
    backup,
    channels,
    config,
    console,
    deliveries,
    doctor,
    heartbeat,
    jobs,
    login,
    logs,
    pairing,
    plugins,
    run,
    security,
    send,
    service,
    sessions,
    status,
    triggers,
)
from chatkernel.cli.run import EXIT_NO_GATEWAY, EXIT_RELOAD_REFUSED  # noqa: E402
from chatkernel.cli.send import SEND_EXIT_CODES  # noqa: E402
from chatkernel.cli.status import EXIT_UNHEALTHY, EXIT_UNREACHABLE  # noqa: E402

__all__ = ["EXIT_NO_GATEWAY", "EXIT_RELOAD_REFUSED", "EXIT_UNHEALTHY", "EXIT_UNREACHABLE",
           "SEND_EXIT_CODES", "cli", "config_option", "main"]
