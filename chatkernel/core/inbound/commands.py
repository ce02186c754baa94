"""Slash commands, answered before the agent.

Plugins add commands through ``register_commands``. A message is a command
when it starts with ``/name`` (or ``!name`` on channels that take it, such as
Slack); ``/name@botname`` is accepted in groups. Unknown commands go to the
agent, which may have its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chatkernel.sdk.models import Command, InboundMessage

if TYPE_CHECKING:
    from chatkernel.core.kernel import Kernel
    from chatkernel.sdk.models import Account
    from chatkernel.core.store.base import SessionRecord


@dataclass(slots=True)
class CommandContext:
    """What a command handler gets."""

    kernel: "Kernel"
    message: InboundMessage
    account: "Account"
    session: "SessionRecord"
    name: str  # the name as typed (an alias, maybe)
    args: str


def collect_commands(pm: Any) -> dict[str, Command]:
    """Commands by name and alias, from every plugin's ``register_commands``."""
    table: dict[str, Command] = {}

    def register(command: Command) -> None:
        if not isinstance(command, Command) or not command.name:
            raise TypeError(f"register_commands expects a chatkernel.Command: {command!r}")
        for name in (command.name, *command.aliases):
            table.setdefault(name.lower().lstrip("/"), command)  # newest plugin wins

    pm.hook.register_commands(register=register)
    return table


def parse_command(text: str, prefixes: str = "/") -> tuple[str, str] | None:
    """``"/queue collect cap:5"`` → ``("queue", "collect cap:5")``; None if not a command."""
    stripped = text.lstrip()
    if not stripped or stripped[0] not in prefixes:
        return None
    head, _, args = stripped[1:].partition(" ")
    if "\n" in head:
        head, _, rest = head.partition("\n")
        args = f"{rest} {args}".strip()
    name = head.split("@", 1)[0].lower()
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        return None
    return name, args.strip()
