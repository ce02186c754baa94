"""Slash commands, answered before the agent.

Plugins add commands through ``register_commands``. A message is a command
when it starts with ``/name`` (or ``!name`` on channels that take it, such as
Slack); ``/name@botname`` is accepted in groups. Unknown commands go to the
agent, which may have its own.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chatkernel.sdk.models import Command, InboundMessage

if TYPE_CHECKING:
    from chatkernel.core.heartbeat.scheduler import HeartbeatScheduler
    from chatkernel.core.inbound.queue import QueueSettings, SessionQueue
    from chatkernel.core.inbound.sessions import Sessions
    from chatkernel.sdk.models import Account
    from chatkernel.core.store.base import SessionRecord


class CommandGateway:
    """What a slash command may do: the stable surface command plugins build on
    (docs/hooks.md, ``register_commands``). One per kernel, given what it reads by name.

    ``commands``, ``agent_kind``, ``started_at``, ``sessions``, ``queue`` and
    ``heartbeats`` are functions (``agent_table(name)``: an agent's config table, None
    when the config has no such agent): what they return exists once the kernel started, or a
    reload replaces it. ``legacy_kernel`` returns the whole kernel, for the deprecated
    :attr:`CommandContext.kernel` alone."""

    __slots__ = ("_commands", "_agent_kind", "_agent_table", "_started_at", "_accounts", "_sessions",
                 "_queue_settings", "_queue", "_heartbeats", "_legacy_kernel")

    def __init__(self, *, commands: Callable[[], dict[str, Command]],
                 agent_kind: Callable[[], str], started_at: Callable[[], float | None],
                 agent_table: Callable[[str], Any] = lambda name: None,
                 accounts: Callable[[], Iterable["Account"]],
                 sessions: Callable[[], "Sessions"],
                 queue_settings: Callable[[str], "QueueSettings"],
                 queue: Callable[[], "SessionQueue"],
                 heartbeats: Callable[[], "HeartbeatScheduler"],
                 legacy_kernel: Callable[[], Any]) -> None:
        self._commands = commands
        self._agent_kind = agent_kind
        self._agent_table = agent_table
        self._started_at = started_at
        self._accounts = accounts
        self._sessions = sessions
        self._queue_settings = queue_settings
        self._queue = queue
        self._heartbeats = heartbeats
        self._legacy_kernel = legacy_kernel

    # -- the gateway --------------------------------------------------------------------

    def commands(self) -> dict[str, Command]:
        """Every command by name and alias (an alias maps to its command)."""
        return dict(self._commands())

    @property
    def agent_kind(self) -> str:
        """The configured agent's kind (``echo``, ``command``, ``openai``...)."""
        return self._agent_kind()

    def session_agent(self, session: "SessionRecord") -> tuple[str, str | None]:
        """The name and kind of the agent ``session`` is with (kind None: the config has
        that agent no more)."""
        table = self._agent_table(session.agent)
        return session.agent, None if table is None else table.kind

    def access_level(self, session: "SessionRecord", account: "Account") -> str:
        """The access level ``session``'s replies are judged by: its agent's
        ``access_level`` where the agent's table sets one, else the account's."""
        table = self._agent_table(session.agent)
        return getattr(table, "access_level", None) or account.access_level

    @property
    def started_at(self) -> float | None:
        """When the kernel started (``time.time()``), None before."""
        return self._started_at()

    def accounts(self) -> list["Account"]:
        """Every configured account, with its runtime state (``account.runtime``)."""
        return list(self._accounts())

    # -- sessions and their queue --------------------------------------------------------

    async def reset_session(self, session: "SessionRecord") -> None:
        """A fresh session under the same key: the agent forgets the conversation."""
        await self._sessions().reset(session)

    async def update_session(self, session: "SessionRecord", **settings: object) -> None:
        """Set (None: remove) the session's own settings (``queue``, ``timezone``)."""
        await self._sessions().update_settings(session, **settings)

    def queue_settings(self, session_key: str) -> "QueueSettings":
        """The queue settings in force for a session (its own over the config's)."""
        return self._queue_settings(session_key)

    def queue_state(self, session_key: str) -> tuple[bool, int]:
        """Whether a turn runs for the session, and how many messages wait behind it."""
        queue = self._queue()
        return queue.is_busy(session_key), len(queue.lane(session_key).pending)

    # -- heartbeats ------------------------------------------------------------------------

    @property
    def heartbeats(self) -> "HeartbeatScheduler":
        """The heartbeat scheduler: a session's own heartbeat (``session_job``,
        ``describe``, ``set_session``, ``pause``, ``resume``, ``clear``,
        ``reconsider``, ``clock.now()``)."""
        return self._heartbeats()


@dataclass(slots=True)
class CommandContext:
    """What a command handler gets: the message and where it came from, and
    ``gateway``, what a command may do (:class:`CommandGateway`)."""

    gateway: CommandGateway
    message: InboundMessage
    account: "Account"
    session: "SessionRecord"
    name: str  # the name as typed (an alias, maybe)
    args: str

    @property
    def kernel(self) -> Any:
        """Deprecated: the whole kernel, which changes without notice."""
        warnings.warn("CommandContext.kernel is deprecated: use ctx.gateway, what a command "
                      "may do (docs/hooks.md, register_commands)", DeprecationWarning,
                      stacklevel=2)
        return self.gateway._legacy_kernel()


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
