"""The records a store keeps and hands back: journal and outbox entries, sessions,
log lines, transcript entries, heartbeat state, pairing requests and approved senders.

Plain values, apart from the :class:`~chatkernel.core.store.base.Store` interface, so
that :mod:`chatkernel.core.store.shared` names them without importing the interface
(which names it in turn).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from chatkernel.sdk.models import InboundMessage, OutboundPayload, Route

__all__ = ["JOURNAL_STATUSES", "OUTBOX_STATUSES", "PAIRING_OUTCOMES", "ApprovedSender",
           "HeartbeatState", "JournalEntry", "LogEntry", "LogRow", "OutboxEntry",
           "PairingRequest", "RecentSend", "SessionRecord", "TranscriptEntry"]


#: A journal entry is ``received`` until its turn finishes (``done``) or it is refused.
JOURNAL_STATUSES: tuple[str, ...] = ("received", "done", "rejected")
#: An outbox entry's statuses (see :class:`OutboxEntry`).
OUTBOX_STATUSES: tuple[str, ...] = ("pending", "sending", "sent", "failed", "unknown")

#: A session-log entry to append: ``(role, text, meta)``.
LogRow = tuple[str, str, "dict[str, Any] | None"]


@dataclass(slots=True)
class JournalEntry:
    """An inbound message as journaled: ``seq`` orders entries, ``status`` tracks it."""

    seq: int
    message: InboundMessage
    status: str  # "received" (unfinished) | "done" | "rejected"
    received_at: float


@dataclass(slots=True)
class SessionRecord:
    """A session row. ``session_id`` changes on ``/new``; ``key`` never does."""

    key: str
    session_id: str
    channel: str
    account: str
    chat_id: str
    thread_id: str | None
    created_at: float
    last_active_at: float
    settings: dict[str, Any] = field(default_factory=dict)  # /queue overrides, ...
    #: The agent the conversation is with (part of the key unless it is ``default``).
    agent: str = "default"


@dataclass(slots=True)
class LogEntry:
    """One line of a session's log."""

    seq: int
    session_key: str
    session_id: str
    role: str  # "user" | "assistant" | "system" | "notification"
    text: str
    ts: float
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class OutboxEntry:
    """One payload waiting to be sent, being sent, or done.

    ``status``: ``pending`` (not sent yet: sent after a restart), ``sending``
    (the request may be out: after a crash it becomes ``unknown``, never
    resent), ``sent``, ``failed`` or ``unknown``. ``reply_id`` groups the
    chunks of one reply.
    """

    id: int
    reply_id: str
    session_key: str
    session_id: str
    channel: str
    account: str
    route: Route  # where it was addressed when queued (the session's route wins)
    payload: OutboundPayload
    status: str
    error: str | None
    created_at: float
    #: The span of the trace that queued it (core/telemetry.py): in memory, never stored.
    trace: Any = field(default=None, compare=False, repr=False)


class RecentSend(NamedTuple):
    """An outbox entry that was attempted: where it went, and when its status last
    changed (a Unix time; for ``sent``, once its answer was in)."""

    channel: str
    account: str
    route: Route
    status: str
    at: float


@dataclass(slots=True)
class TranscriptEntry:
    """One message a chat shows, for a channel whose platform is the gateway itself (the
    web chat): what the person typed (``role`` ``user``) or was sent (``bot``).

    ``id`` grows with every entry, across restarts: a page that saw entry N asks for
    those after N. ``client_id`` is the sender's own id of a message, so a retry of it
    is known (``Store.transcript_add``).
    """

    id: int
    role: str  # "user" | "bot"
    text: str
    media: list[dict[str, Any]]
    ts: float
    client_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "role": self.role, "text": self.text, "media": self.media,
                "ts": self.ts}


@dataclass(slots=True)
class HeartbeatState:
    """What the heartbeat scheduler keeps of one heartbeat between restarts.

    ``id`` is ``main`` for the config heartbeat and ``session:<key>`` for a
    session heartbeat (``/heartbeat every ...``), whose own settings
    (``every``, ``prompt``) are in ``settings``. ``anchor_at`` is when the
    current interval began (the last fire, the creation, a resume): the next
    run is due at ``anchor_at + every``. ``task_runs`` maps each HEARTBEAT.md
    task to its last completed run; ``wake_texts`` wait for the next run
    (``chatkernel heartbeat wake --mode next``). Times are Unix times.
    """

    id: str
    session_key: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    paused: bool = False
    anchor_at: float | None = None
    last_run_at: float | None = None
    last_outcome: str | None = None
    task_runs: dict[str, float] = field(default_factory=dict)
    wake_texts: list[str] = field(default_factory=list)


#: What :meth:`~chatkernel.core.store.base.Store.pairing_request` answers (see there).
PAIRING_OUTCOMES: tuple[str, ...] = ("new", "resend", "quiet", "full", "taken")


@dataclass(slots=True)
class PairingRequest:
    """A stranger's pending request to talk to an account (docs/access.md): the code the
    owner approves it by, who asked, where (``chat``: the private chat the code went to),
    and when. Times are Unix times; ``last_sent_at`` is when the code was last sent."""

    code: str
    channel: str
    account: str
    sender: str
    name: str
    chat: str
    created_at: float
    expires_at: float
    last_sent_at: float


@dataclass(slots=True)
class ApprovedSender:
    """A sender the owner let in by pairing, on one account (``approved_at``: a Unix time)."""

    channel: str
    account: str
    sender: str
    approved_at: float
