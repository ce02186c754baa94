"""Agents: what answers a session's turns. Agents are plugins too.

An agent turn is an async stream of :class:`AgentEvent`: text blocks (sent
only when ``final``), tool activity and thinking (never sent), errors and
system notes (sent with a clear prefix after flushing pending text).

This module is the interface and what every agent's output passes; the built-in
kinds (``echo``, ``command``, ``openai``) are in :mod:`chatkernel.builtin.agents`
and register through the ``register_agents`` hook like any plugin's.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from chatkernel.core.config import AgentConfig
    from chatkernel.sdk.models import MediaRef
    from chatkernel.core.store.base import Store

EventKind = Literal["text", "tool", "thinking", "error", "system", "usage"]


@dataclass(slots=True)
class AgentEvent:
    """One event of an agent turn."""

    kind: EventKind
    text: str = ""
    final: bool = True  # for "text": a complete block that may be sent
    #: For "usage": what the model reported (``model``, ``input_tokens``, ``output_tokens``).
    meta: dict[str, Any] | None = None

    @classmethod
    def reply(cls, text: str) -> "AgentEvent":
        return cls("text", text, True)

    @classmethod
    def error(cls, text: str) -> "AgentEvent":
        return cls("error", text)

    @classmethod
    def usage(cls, *, model: str | None = None, input_tokens: int | None = None,
              output_tokens: int | None = None) -> "AgentEvent":
        """What a model call of the turn used, as the model reported it: never sent,
        it goes into the turn's trace (``gen_ai.usage.*``, core/telemetry.py)."""
        meta = {"model": model, "input_tokens": input_tokens, "output_tokens": output_tokens}
        return cls("usage", meta={k: v for k, v in meta.items() if v is not None})


@dataclass(slots=True)
class TurnRequest:
    """What a turn gives the agent."""

    session_key: str
    session_id: str  # changes on /new: history belongs to it
    text: str  # the clean text (merged, for a collected turn)
    envelope: str  # "[channel: telegram | user: 42 | thread: 7]"
    media: list["MediaRef"] = field(default_factory=list)
    heartbeat: bool = False
    #: Where the history ends: entries with a smaller seq. None: the whole log, which
    #: is the history before this turn (a message turn's own entries are logged with
    #: its reply); a heartbeat turn, logged as it starts, sets its entry's seq.
    log_seq: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt(self) -> str:
        """The envelope line, then the text: what a text agent reads."""
        return f"{self.envelope}\n{self.text}" if self.envelope else self.text


class Agent:
    """Base class of agent kinds; subclasses set :attr:`name` and implement :meth:`turn`."""

    name: ClassVar[str]
    #: Whether :meth:`steer` can hand a message to a running turn.
    supports_steer: ClassVar[bool] = False

    def __init__(self, config: "AgentConfig", store: "Store") -> None:
        self.config = config
        self.store = store

    @classmethod
    def check_config(cls, config: "AgentConfig") -> None:
        """Refuse an ``[agent]`` table this kind cannot run with (a ConfigError naming
        the key), before anything starts: ``config validate``, a start, a reload."""

    def turn(self, request: TurnRequest) -> AsyncIterator[AgentEvent]:
        """Run one turn, yielding events. Cancelling the iteration aborts the turn."""
        raise NotImplementedError

    async def steer(self, session_key: str, text: str) -> bool:
        """Hand text to the running turn of a session; False if it cannot."""
        return False

    async def aclose(self) -> None:
        """Release clients and child processes."""


# -- registry ------------------------------------------------------------------------------


def collect_agents(pm: Any) -> dict[str, type[Agent]]:
    """Agent kinds by name, from every plugin's ``register_agents``.

    Each registered item must be an :class:`Agent` subclass with a non-empty
    string ``name``. pluggy calls the newest plugin first, so the first
    registration of a name wins: a plugin can replace a built-in kind.
    """
    from chatkernel.core.plugins import collect_registered

    return collect_registered(pm.hook.register_agents, "agent", Agent)


def describe_media(media: list["MediaRef"]) -> str:
    """``"received 1 image: cat.jpg"``; mixed kinds: ``"received 2 files: a.jpg (image), …"``."""

    def label(ref: "MediaRef") -> str:
        if ref.filename:
            return ref.filename
        if ref.path is not None:
            return ref.path.name
        return ref.platform_id or ref.kind

    kinds = {ref.kind for ref in media}
    count = len(media)
    if len(kinds) == 1:
        kind = next(iter(kinds)) or "file"
        noun = kind if count == 1 else ("audio files" if kind == "audio" else f"{kind}s")
        if kind == "audio" and count == 1:
            noun = "audio file"
        names = ", ".join(label(ref) for ref in media)
    else:
        noun = "files"
        names = ", ".join(f"{label(ref)} ({ref.kind})" for ref in media)
    return f"received {count} {noun}: {names}"


# -- what every agent's output passes ------------------------------------------------------


def redact_turns(agent: Agent, redact: Callable[[str], str]) -> None:
    """Make the text of every event of ``agent``'s turns pass ``redact``.

    The kernel does this to its agent with the secrets it knows
    (:func:`chatkernel.core.config.kernel_secrets`): whatever an agent prints,
    its replies, error notes and heartbeat answers reach neither a chat nor
    the session log with a secret in them.
    """
    turn = agent.turn

    async def redacted(request: TurnRequest) -> AsyncIterator[AgentEvent]:
        events = turn(request)
        try:
            async for event in events:
                if event.text:
                    event.text = redact(event.text)
                yield event
        finally:
            await events.aclose()

    agent.turn = redacted  # type: ignore[method-assign]


# -- the command agent's environment ---------------------------------------------------

#: What the command agent's program gets of the gateway's environment without being
#: asked (with every ``LC_*``): enough to run a program, nothing that may be a secret.
SAFE_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
            # what programs need on Windows
            "SYSTEMROOT", "COMSPEC", "PATHEXT", "TEMP", "TMP")


def agent_environment(config: "AgentConfig", environ: dict[str, str] | None = None
                      ) -> dict[str, str]:
    """The command agent's environment: :data:`SAFE_ENV` and ``LC_*`` from the gateway's,
    the names in ``agent.pass_env``, then ``agent.env``'s values (resolved already)."""
    env = os.environ if environ is None else environ
    chosen = {name: value for name, value in env.items()
              if name in SAFE_ENV or name.startswith("LC_")}
    chosen.update((name, env[name]) for name in config.pass_env if name in env)
    chosen.update(config.env)
    return chosen
