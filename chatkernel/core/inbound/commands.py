"""Slash commands, answered before the agent.

Plugins add commands through ``register_commands``. A message is a command
when it starts with ``/name`` (or ``!name`` on channels that take it, such as
Slack); ``/name@botname`` is accepted in groups. Unknown commands go to the
agent, which may have its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from chatkernel.sdk.models import Command, InboundMessage

if TYPE_CHECKING:
    from chatkernel.core.heartbeat.scheduler import HeartbeatScheduler
    from chatkernel.core.inbound.queue import QueueSettings, SessionQueue
    from chatkernel.core.inbound.sessions import Sessions
    from chatkernel.core.jobs.scheduler import JobScheduler
    from chatkernel.sdk.models import Account
    from chatkernel.core.store.base import SessionRecord


class CommandGateway:
    """What a slash command may do: the stable surface command plugins build on
    (docs/hooks.md, ``register_commands``). One per kernel, given what it reads by name.

    ``commands``, ``agent_kind``, ``started_at``, ``sessions``, ``queue`` and
    ``heartbeats`` are functions (``agent_table(name)``: an agent's config table, None
    when the config has no such agent): what they return exists once the kernel started, or a
    reload replaces it."""

    __slots__ = ("_commands", "_agent_kind", "_agent_table", "_started_at", "_accounts", "_sessions",
                 "_queue_settings", "_queue", "_heartbeats", "_reminders")

    def __init__(self, *, commands: Callable[[], dict[str, Command]],
                 agent_kind: Callable[[], str], started_at: Callable[[], float | None],
                 agent_table: Callable[[str], Any] = lambda name: None,
                 accounts: Callable[[], Iterable["Account"]],
                 sessions: Callable[[], "Sessions"],
                 queue_settings: Callable[[str], "QueueSettings"],
                 queue: Callable[[], "SessionQueue"],
                 heartbeats: Callable[[], "HeartbeatScheduler"],
                 jobs: Callable[[], "JobScheduler"] | None = None) -> None:
        self._commands = commands
        self._agent_kind = agent_kind
        self._agent_table = agent_table
        self._started_at = started_at
        self._accounts = accounts
        self._sessions = sessions
        self._queue_settings = queue_settings
        self._queue = queue
        self._heartbeats = SessionHeartbeats(heartbeats)
        self._reminders = ChatReminders(jobs)

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
    def heartbeats(self) -> "SessionHeartbeats":
        """A session's own heartbeat, as ``/heartbeat`` sets and reads it."""
        return self._heartbeats

    @property
    def reminders(self) -> "ChatReminders":
        """A chat's reminders, as ``/remind`` sets, lists and cancels them."""
        return self._reminders


class ChatReminders:
    """What a command may do with a chat's reminders (``/remind 20m check the oven``,
    docs/jobs.md): one-shot jobs delivered to the chat, at most
    :data:`~chatkernel.core.jobs.scheduler.MAX_REMINDERS` waiting per chat. A request that
    cannot be done raises an error whose message says why."""

    __slots__ = ("_scheduler",)

    def __init__(self, scheduler: Callable[[], "JobScheduler"] | None) -> None:
        self._scheduler = scheduler

    def _jobs(self) -> "JobScheduler":
        if self._scheduler is None:
            raise RuntimeError("this kernel runs no jobs")
        return self._scheduler()

    async def add(self, session_key: str, target: str, seconds: float, text: str
                  ) -> Mapping[str, Any]:
        """Remind the chat (``target``: ``channel:account:chat``) of ``text`` in
        ``seconds``; returns the reminder (``id``, ``at``, ``text``)."""
        return await self._jobs().add_reminder(session_key, target, seconds, text)

    def list(self, session_key: str) -> list[Mapping[str, Any]]:
        """The chat's waiting reminders, soonest first."""
        return self._jobs().reminders(session_key)

    async def cancel(self, session_key: str, reminder_id: str) -> bool:
        """Cancel one of the chat's reminders; False when it has none by that id."""
        return await self._jobs().cancel_reminder(session_key, reminder_id)

    def now(self) -> float:
        """The jobs' clock (a test's manual clock, else the wall clock)."""
        return self._jobs().clock.now()


class SessionHeartbeats:
    """What a command may do with a session's own heartbeat (``/heartbeat every 30m
    ...``, docs/heartbeats.md): read its status, set, pause, resume or clear it.

    A request that cannot be done (resuming a heartbeat the session does not have)
    raises an error whose message says why, for the command to answer with."""

    __slots__ = ("_scheduler",)

    def __init__(self, scheduler: Callable[[], "HeartbeatScheduler"]) -> None:
        self._scheduler = scheduler

    def status(self, session_key: str) -> Mapping[str, Any] | None:
        """The session's heartbeat as ``/heartbeat status`` shows it, read-only (None:
        the session has none): ``every`` (``30m``), ``every_seconds``, ``prompt``,
        ``paused``, ``running`` (a heartbeat turn runs now), ``waiting_for`` (due, it
        waits for the chat to be idle), ``next_in_seconds`` (None: not scheduled),
        ``last_run_at`` (on :meth:`now`'s clock) and ``last_outcome``."""
        scheduler = self._scheduler()
        job = scheduler.session_job(session_key)
        return None if job is None else MappingProxyType(scheduler.describe(job))

    async def set(self, session_key: str, every_seconds: float, prompt: str) -> None:
        """Give the session a heartbeat every ``every_seconds`` checking ``prompt``
        (replacing the one it had); its first run is one interval from now."""
        await self._scheduler().set_session(session_key, every_seconds, prompt)

    async def pause(self, session_key: str) -> None:
        """Stop the session's heartbeat from running until :meth:`resume`."""
        await self._scheduler().pause(session_key)

    async def resume(self, session_key: str) -> Mapping[str, Any]:
        """Run the paused heartbeat again, its next run one interval from now (a run
        missed while paused does not fire); returns its :meth:`status`."""
        scheduler = self._scheduler()
        return MappingProxyType(scheduler.describe(await scheduler.resume(session_key)))

    async def clear(self, session_key: str) -> bool:
        """Remove the session's heartbeat; False when it had none."""
        return await self._scheduler().clear(session_key)

    def reconsider(self) -> None:
        """Look at every heartbeat again now: after a session's settings changed (its
        time zone), quiet hours may have ended there."""
        self._scheduler().reconsider()

    def now(self) -> float:
        """The heartbeats' clock (a test's manual clock, else the wall clock)."""
        return self._scheduler().clock.now()


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
