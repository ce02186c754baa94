"""The kernel's value types: what flows through hooks and between components.

Plain dataclasses with slots: they sit on the hot path of every message, and
validation happens at the edges (config, wire payloads), not here.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Literal

from chatkernel.sdk.calls import Calls

if TYPE_CHECKING:
    from chatkernel.sdk.channel import Channel
    from chatkernel.sdk.receiving.transport import Transport

AccessLevel = Literal["readonly", "standard", "full"]
ACCESS_LEVELS: tuple[str, ...] = ("readonly", "standard", "full")


@dataclass(slots=True)
class MediaRef:
    """A media file attached to an inbound message, once saved locally."""

    kind: str  # "image", "video", "audio", "voice", "document", ...
    path: Path | None = None
    mime: str | None = None
    filename: str | None = None
    size: int | None = None
    platform_id: str | None = None  # the platform's file id, before download
    note: str | None = None  # why it was not saved (too large, download failed...)


#: The most characters each text field of an :class:`InboundMessage` may hold. The
#: kernel refuses a message over any of them (``InvalidMessage`` naming the field)
#: before anything of it is recorded, whatever the channel; docs/hooks.md lists them.
INBOUND_FIELD_LIMITS: dict[str, int] = {
    "channel": 64,
    "account": 128,
    "chat_id": 256,
    # A channel may build its dedupe key from two platform ids (chat and message).
    "message_id": 520,
    "sender_id": 256,
    "sender_name": 256,
    "thread_id": 256,
    "text": 100_000,
}
#: The most other ids (``InboundMessage.sender_aliases``) one message may name its
#: sender by; each is capped as ``sender_id`` is.
MAX_SENDER_ALIASES = 16
#: The most media files one inbound message may carry.
MAX_INBOUND_MEDIA = 32
#: The most characters each text field of a :class:`MediaRef` may hold.
MEDIA_FIELD_LIMITS: dict[str, int] = {
    "kind": 32,
    "mime": 255,
    "filename": 255,
    "platform_id": 2048,
    "note": 1000,
}
#: The most bytes an inbound message's ``route_extra`` may take, as JSON.
MAX_ROUTE_EXTRA_BYTES = 16 * 1024


@dataclass(slots=True)
class InboundMessage:
    """One inbound chat message, normalized from a platform event."""

    channel: str
    account: str
    chat_id: str
    message_id: str  # the platform's id: the dedupe key within an account
    sender_id: str
    text: str = ""
    sender_name: str = ""
    thread_id: str | None = None
    is_group: bool = False
    mentions_bot: bool = False
    reply_to_bot: bool = False
    media: list[MediaRef] = field(default_factory=list)
    timestamp: float = field(default_factory=time.time)
    # Per-message credentials a reply must echo (WeChat's context_token...).
    route_extra: dict[str, Any] = field(default_factory=dict)
    #: Other ids the platform knows the same sender by (a WhatsApp user's phone beside
    #: their user id): the access policy admits the sender when any of them is listed
    #: or approved (docs/access.md).
    sender_aliases: tuple[str, ...] = ()


@dataclass(slots=True)
class Route:
    """Where a reply goes: refreshed on every inbound message, read at send time."""

    channel: str
    account: str
    chat_id: str
    thread_id: str | None = None
    reply_to: str | None = None
    is_group: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class OutboundPayload:
    """One unit of sending: a chunk of text or one media file."""

    text: str = ""
    media_path: Path | None = None
    media_kind: str | None = None  # from the channel's extension table
    caption: str = ""
    chunk_index: int = 1
    chunk_count: int = 1
    # "markdown" when text may carry the agent's Markdown, "plain" when it must not.
    format: Literal["markdown", "plain"] = "markdown"
    #: The payload's idempotency key, set by the outbox: the same on every attempt to
    #: send this payload, across the kernel's retries and restarts, and never the same
    #: for two payloads (24 lowercase hex characters: a URL path segment, a Discord
    #: nonce). A platform that dedupes requests by such a key (Matrix's ``txnId``)
    #: gets it with each send; see ``Channel.idempotent_sends``. None outside the
    #: outbox.
    key: str | None = None
    #: The platform id of the preview message this payload takes the place of (a live
    #: reply, chatkernel.sdk.live): the channel edits that message instead of sending a
    #: new one. None: a new message.
    replaces: str | None = None

    @property
    def is_media(self) -> bool:
        return self.media_path is not None


@dataclass(slots=True)
class SendResult:
    """What the platform answered to a successful send. ``extra["notice"]``: something
    the session's people should know about how it went (a live reply finished as a new
    message), noted in the session's log."""

    message_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class SendError(Exception):
    """A send that failed, with what the retry policy needs to know.

    ``retryable``: the request may be repeated (429, 502/503/504, a connection
    failure before the request was written). ``delivery_unknown``: the request
    may have reached the platform (a timeout after sending) and must not be
    repeated blindly. ``retry_after``: seconds the platform asked to wait.
    ``markup_rejected``: the platform could not parse the formatting; the
    kernel resends the same text as plain text (that is not a retry).
    ``moved_to``: the chat has a new id (a group became a supergroup); the
    kernel updates the session's route and sends there (not a retry either).
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
        delivery_unknown: bool = False,
        status: int | None = None,
        code: str | int | None = None,
        markup_rejected: bool = False,
        moved_to: str | None = None,
    ) -> None:
        super().__init__(message)
        self.markup_rejected = markup_rejected
        self.moved_to = moved_to
        self.retryable = retryable
        self.retry_after = retry_after
        self.delivery_unknown = delivery_unknown
        self.status = status
        self.code = code

    @classmethod
    def from_http(cls, status: int | None, description: str, *,
                  retry_after: float | None = None, code: str | int | None = None,
                  **flags: Any) -> "SendError":
        """The error for a platform's HTTP answer, classified by its status: 429 and
        502/503/504 may be retried (after ``retry_after``), any other status was a
        refusal, and no status (None: no answer came) means delivery unknown.
        ``flags`` add what only the platform can tell (``markup_rejected``...)."""
        kind = error_kind(status)
        values: dict[str, Any] = {"retryable": kind in ("rate_limited", "unavailable"),
                                  "delivery_unknown": kind == "no_answer",
                                  "retry_after": retry_after, "status": status, "code": code}
        values.update(flags)
        return cls(description, **values)


#: What a failed platform call means (``PlatformError.kind``, which explains each).
ErrorKind = Literal["not_sent", "no_answer", "rate_limited", "unavailable", "rejected"]

#: Statuses that mean the platform did not act on the request: safe to repeat.
UNAVAILABLE = frozenset({502, 503, 504})


def error_kind(status: int | None) -> ErrorKind:
    """What an HTTP answer's ``status`` means (None: no answer came)."""
    if status is None:
        return "no_answer"
    if status == 429:
        return "rate_limited"
    if status in UNAVAILABLE:
        return "unavailable"
    return "rejected"


@dataclass(slots=True)
class ProbeResult:
    """The answer of one health probe.

    ``detail`` says what was found in words a person acts on ("@mybot",
    "token rejected"). ``restartable`` is False when restarting the receive
    loop cannot fix what failed (credentials rejected, another instance owns
    the account): the health monitor then leaves the account alone and its
    health stays red until a person acts.
    """

    ok: bool
    detail: str = ""
    latency_ms: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    restartable: bool = True


#: How an access refusal treats a sender the account does not know (``Verdict.stranger``).
Stranger = Literal["", "refused", "approvable", "pair"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """A decision of a policy hook: allowed or not, and why.

    ``stranger`` marks a refusal of a sender the account's access policy does not know
    (docs/access.md), whose message's text the kernel does not keep: ``"refused"``
    outright; ``"approvable"``: admitted after all if the owner approved them by
    pairing, else sent ``reply``; ``"pair"``: the same, else offered a pairing code.
    Empty for any other decision."""

    allowed: bool
    reason: str = ""
    reply: str | None = None  # a short text for the sender, when denied
    stranger: Stranger = ""

    @classmethod
    def allow(cls, reason: str = "") -> "Verdict":
        return cls(True, reason) if reason else _ALLOWED  # frozen: one instance will do

    @classmethod
    def deny(cls, reason: str, reply: str | None = None, *,
             stranger: Stranger = "") -> "Verdict":
        return cls(False, reason, reply, stranger)

    def __bool__(self) -> bool:
        return self.allowed


_ALLOWED = Verdict(True)

# "elsewhere": another gateway instance sharing the store owns it (core/runtime/cluster.py).
AccountState = Literal["starting", "running", "stopped", "failed", "paused", "elsewhere"]
ACCOUNT_STATES: tuple[str, ...] = ("starting", "running", "stopped", "failed", "paused",
                                   "elsewhere")

#: A loop that neither failed nor reported in counts as running after this many seconds
#: (for channels that never call ``Channel.report_alive``).
SETTLE_SECONDS = 10.0
#: The window of "restarts in the last hour".
RESTART_WINDOW_SECONDS = 3600.0
#: How many undelivered payloads an account remembers for ``status``.
RECENT_FAILURES = 10


@dataclass(slots=True)
class AccountRuntime:
    """What the kernel knows about one account's receive loop while it runs.

    The supervisor writes the state (``starting`` when it starts the loop,
    ``failed`` when the loop crashed, ``stopped`` when it is not running), the
    channel reports signs of life (:meth:`Channel.report_alive`) and pauses
    (:meth:`Channel.pause`), the health monitor notes what it decided. Times
    are Unix times. The snapshot reads all of it.
    """

    state: AccountState = "stopped"
    state_since: float | None = None
    #: Why it is paused or failed, in words.
    detail: str = ""
    #: When the current receive loop started.
    loop_started_at: float | None = None
    #: The platform's last sign of life: a message, an answered long poll.
    last_event_at: float | None = None
    last_error: str | None = None
    last_error_at: float | None = None
    #: (time, reason) of each restart, crash or monitor, oldest first.
    restarts: deque[tuple[float, str]] = field(default_factory=lambda: deque(maxlen=512))
    last_probe: ProbeResult | None = None
    last_probe_at: float | None = None
    #: The health monitor's last verdict on this account, and when.
    monitor_note: str = ""
    monitor_checked_at: float | None = None
    #: A problem the receive loop reported (``Channel.report_problem``): "another
    #: instance polls this token", "cannot reach the platform"; None once it is over.
    problem: str | None = None
    problem_since: float | None = None
    #: False when restarting the loop cannot fix it (a person must act).
    problem_restartable: bool = True
    #: When the problem was last reported, and whether it is that the platform could
    #: not be reached (then a later successful call of the account ends it).
    problem_at: float | None = None
    problem_unreachable: bool = False
    #: Since when sends fail for the whole account (no answer from the platform, a
    #: 5xx, rejected credentials); None once the platform answers a send again.
    send_failing_since: float | None = None
    last_send_error: str | None = None
    last_send_error_at: float | None = None
    #: The latest payloads that did not arrive (chatkernel.core.outbound.deliveries.Failure),
    #: oldest first.
    recent_failures: deque[Any] = field(default_factory=lambda: deque(maxlen=RECENT_FAILURES))
    #: The account's calls to its platform: those out, the last success
    #: (chatkernel.sdk.calls).
    calls: Calls = field(default_factory=Calls)
    #: Inbound messages whose processing failed in the pipeline, the last one's reason
    #: and time (chatkernel.core.inbound.pipeline).
    inbound_failures: int = 0
    last_inbound_failure: str | None = None
    last_inbound_failure_at: float | None = None

    def set_state(self, state: AccountState, now: float, detail: str = "") -> None:
        if state != self.state:
            self.state_since = now
        self.state = state
        self.detail = detail

    def loop_started(self, now: float) -> None:
        """The supervisor starts a receive loop."""
        self.loop_started_at = now
        self.set_state("starting", now)

    def effective_state(self, now: float) -> AccountState:
        """The state, with a loop that has been starting for a while counted as running."""
        if self.state == "starting" and self.loop_started_at is not None and \
                now - self.loop_started_at >= SETTLE_SECONDS:
            return "running"
        return self.state

    def error(self, message: str, now: float) -> None:
        self.last_error, self.last_error_at = message, now

    def record_restart(self, now: float, reason: str) -> None:
        self.restarts.append((now, reason))

    def restarts_since(self, since: float) -> int:
        return sum(1 for at, _ in self.restarts if at >= since)

    def restarts_last_hour(self, now: float) -> int:
        return self.restarts_since(now - RESTART_WINDOW_SECONDS)

    @property
    def last_restart_at(self) -> float | None:
        return self.restarts[-1][0] if self.restarts else None

    def record_probe(self, result: ProbeResult, now: float) -> None:
        self.last_probe, self.last_probe_at = result, now

    @property
    def probe_superseded(self) -> bool:
        """The last probe failed, and the platform has answered the receive loop since,
        or (a failure a restart can fix) any call of the account has worked since: what
        the probe found is over (the next probe will say so too)."""
        probe, at = self.last_probe, self.last_probe_at
        if probe is None or probe.ok or at is None:
            return False
        if self.last_event_at is not None and self.last_event_at > at:
            return True
        return probe.restartable and self.calls.supersedes(at)

    @property
    def problem_superseded(self) -> bool:
        """The receive loop's problem is that the platform could not be reached, and a
        call of the account has worked since it was last reported: it is over (the
        loop's next call will clear it)."""
        return (self.problem is not None and self.problem_unreachable
                and self.problem_restartable and self.calls.supersedes(self.problem_at))

    def set_problem(self, reason: str, now: float, restartable: bool = True, *,
                    unreachable: bool = False) -> None:
        """The receive loop is stuck on ``reason`` (kept since it first began).
        ``unreachable``: the platform could not be reached (a later successful call
        of the account ends it, see :attr:`problem_superseded`)."""
        if self.problem is None:
            self.problem_since = now
        self.problem, self.problem_restartable = reason, restartable
        self.problem_at, self.problem_unreachable = now, unreachable

    def clear_problem(self) -> None:
        self.problem, self.problem_since, self.problem_restartable = None, None, True
        self.problem_at, self.problem_unreachable = None, False

    def send_failed(self, reason: str, now: float) -> None:
        """A send failed for the whole account (see chatkernel.core.outbound.deliveries)."""
        if self.send_failing_since is None:
            self.send_failing_since = now
        self.last_send_error, self.last_send_error_at = reason, now

    def send_ok(self) -> None:
        """The platform answered a send: sends work again."""
        if self.send_failing_since is not None:
            self.send_failing_since = None

    def record_failure(self, failure: Any) -> None:
        self.recent_failures.append(failure)

    def inbound_failed(self, reason: str, now: float) -> None:
        """An inbound message failed in the pipeline, for ``reason``."""
        self.inbound_failures += 1
        self.last_inbound_failure, self.last_inbound_failure_at = reason, now

    def latest_error(self) -> tuple[str | None, float | None]:
        """The most recent of the loop's error, the receive problem and the send error,
        with its time: what ``last_error`` shows."""
        found = [(at, error) for error, at in (
            (self.last_error, self.last_error_at), (self.problem, self.problem_since),
            (self.last_send_error, self.last_send_error_at)) if error and at is not None]
        if not found:
            return self.last_error, self.last_error_at
        at, error = max(found, key=lambda item: item[0])
        return error, at


@dataclass(slots=True)
class Account:
    """One configured account of a channel (a bot token, a workspace app...)."""

    channel_name: str
    name: str
    config: Any  # the channel's validated account model
    access_level: AccessLevel = "standard"
    workspace: Path = field(default_factory=Path.cwd)
    channel: "Channel | None" = None  # the running channel instance
    #: How the account receives (``channel.transport()``, asked once per channel).
    transport: "Transport | None" = None
    last_inbound_at: float | None = None
    last_sent_at: float | None = None
    #: The receive loop's runtime state (see :class:`AccountRuntime`).
    runtime: AccountRuntime = field(default_factory=AccountRuntime)
    #: ``channel:name``, the account's id everywhere (made once: hot paths read it).
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.key = f"{self.channel_name}:{self.name}"

    def config_key(self, name: str = "") -> str:
        """The dotted config key of this account (``channels.telegram.accounts.main``),
        or of one of its settings (``config_key("bot_token")``), for error messages."""
        key = f"channels.{self.channel_name}.accounts.{self.name}"
        return f"{key}.{name}" if name else key


@dataclass(slots=True)
class Session:
    """A conversation: one per {channel, account, chat, thread}."""

    key: str
    channel: str
    account: str
    chat_id: str
    thread_id: str | None = None
    access_level: AccessLevel = "standard"
    created_at: float = field(default_factory=time.time)

    @staticmethod
    def make_key(channel: str, account: str, chat_id: str, thread_id: str | None,
                 agent: str | None = None) -> str:
        """``channel:account:chat[:thread]``, then ``#agent`` for any agent but
        ``default``: a session is one agent's conversation with one chat, and a key
        written before there were several agents stays the default agent's."""
        base = f"{channel}:{account}:{chat_id}"
        key = f"{base}:{thread_id}" if thread_id else base
        return f"{key}#{agent}" if agent and agent != "default" else key


CommandHandler = Callable[..., "Awaitable[str | None] | str | None"]


@dataclass(frozen=True, slots=True)
class Command:
    """A slash command answered before the agent.

    ``handler(ctx)`` receives a command context (the message, the session,
    the arguments, the kernel) and returns the reply text, or ``None`` for no
    reply; it may be async.
    """

    name: str
    handler: CommandHandler
    help: str = ""
    aliases: tuple[str, ...] = ()
    direct_only: bool = False
