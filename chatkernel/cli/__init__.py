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


# The commands by module, each imported when its command runs (or --help lists it) and
# registering itself on the group: listing plugins imports none of the others.
cli.lazy = {
    "agents": "agents", "backup": "backup", "restore": "backup", "channels": "channels",
    "config": "config", "console": "console", "deliveries": "deliveries",
    "doctor": "doctor", "health": "status", "heartbeat": "heartbeat", "jobs": "jobs",
    "login": "login", "logs": "logs", "pairing": "pairing", "plugins": "plugins",
    "reload": "run", "run": "run", "security": "security", "send": "send",
    "service": "service", "sessions": "sessions", "status": "status",
    "triggers": "triggers",
}

__all__ = ["cli", "config_option", "main"]
