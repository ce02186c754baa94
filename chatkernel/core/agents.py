"""Agents: what answers a session's turns. Agents are plugins too.

An agent turn is an async stream of :class:`AgentEvent`: text blocks (sent
only when ``final``), tool activity and thinking (never sent), errors and
system notes (sent with a clear prefix after flushing pending text).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from chatkernel.core.config import AgentConfig
    from chatkernel.core.models import MediaRef
    from chatkernel.core.store.base import Store

EventKind = Literal["text", "tool", "thinking", "error", "system"]


@dataclass(slots=True)
class AgentEvent:
    """One event of an agent turn."""

    kind: EventKind
    text: str = ""
    final: bool = True  # for "text": a complete block that may be sent

    @classmethod
    def reply(cls, text: str) -> "AgentEvent":
        return cls("text", text, True)

    @classmethod
    def error(cls, text: str) -> "AgentEvent":
        return cls("error", text)


@dataclass(slots=True)
class TurnRequest:
    """What a turn gives the agent."""

    session_key: str
    session_id: str  # changes on /new: history belongs to it
    text: str  # the clean text (merged, for a collected turn)
    envelope: str  # "[channel: telegram | user: 42 | thread: 7]"
    media: list["MediaRef"] = field(default_factory=list)
    heartbeat: bool = False
    #: seq of this turn's first session-log entry: the history is what came before.
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

    def turn(self, request: TurnRequest) -> AsyncIterator[AgentEvent]:
        """Run one turn, yielding events. Cancelling the iteration aborts the turn."""
        raise NotImplementedError

    async def steer(self, session_key: str, text: str) -> bool:
        """Hand text to the running turn of a session; False if it cannot."""
        return False

    async def aclose(self) -> None:
        """Release clients and child processes."""
