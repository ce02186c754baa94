"""The inbound delivery pipeline, the same skeleton for every channel.

deliver: validate → dedupe + journal → the channel's ``screen_inbound``, then
``inbound_accept`` → the chat's agent (its bindings) → slash command? →
the agent's session → route refresh → last active chat → busy hint → queue lane →
``inbound_delivered``.

Two entry points run it. :meth:`Inbound.deliver` goes through every step and
returns the outcome (tests and tools use it). :meth:`Inbound.accept` is what
receive loops get: it returns as soon as the message is durably journaled,
so a loop can advance its platform cursor and fetch more at once, while the
rest of the pipeline runs behind it, in order within every chat.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

import anyio

from chatkernel.core.inbound import access
from chatkernel.core.inbound.commands import CommandContext, parse_command
from chatkernel.core.lines import Lines
from chatkernel.sdk.models import (
    INBOUND_FIELD_LIMITS,
    MAX_INBOUND_MEDIA,
    MAX_SENDER_ALIASES,
    MAX_ROUTE_EXTRA_BYTES,
    MEDIA_FIELD_LIMITS,
    Account,
    InboundMessage,
    MediaRef,
    Verdict,
)
from chatkernel.core.plugins import await_maybe
from chatkernel.core.inbound.queue import QueuedMessage
from chatkernel.core.inbound.sessions import route_for
from chatkernel.core.store.base import StoreError
from chatkernel.core.telemetry import OFF, Span, Tracer
from chatkernel.sdk.codec import encode_json_bytes
from chatkernel.sdk.errors import Backlogged

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from chatkernel.core.runtime.cluster import Cluster
    from chatkernel.core.health.metrics import Metrics
    from chatkernel.core.inbound.commands import CommandGateway
    from chatkernel.core.inbound.queue import QueueSettings, SessionQueue
    from chatkernel.core.inbound.sessions import Sessions
    from chatkernel.core.outbound.order import OutputOrder
    from chatkernel.core.outbound.replies import Replies
    from chatkernel.core.plugins import PluginManager
    from chatkernel.core.store.base import Store
    from chatkernel.sdk.models import Command, Route

log = logging.getLogger("chatkernel.inbound")

#: Accepted messages still waiting for the rest of the pipeline, across all chats,
#: before :meth:`Inbound.accept` makes receive loops wait (backpressure).
ACCEPT_BACKLOG = 2000
#: How long a webhook's request waits for room in a full backlog before it is answered
#: 503 (Slack sends an event again after 3 s; a poll waits without end instead).
WEBHOOK_ROOM_SECONDS = 2.0
#: The ``Retry-After`` of that 503, in seconds.
BACKLOGGED_RETRY_AFTER = 5
#: How often a full backlog's refusals are logged, at most (one line counts them).
BACKLOGGED_LOG_SECONDS = 60.0
#: Journal seqs remembered per account as lined up (several instances, see line_up).
LINED_REMEMBERED = 100_000
#: How long an idle chat's line task waits for the next message before it ends.
LINE_LINGER_SECONDS = 2.0

BUSY_HINT = "⏳ still working on your previous message — I'll get to this one next."
#: What a chat is told when its message failed in the pipeline (a bug, a plugin's error).
FAILURE_NOTICE = "⚠️ Something went wrong handling your message; the operator has been told."
UNKNOWN_SENDER_REMINDER_SECONDS = 24 * 3600


class InvalidMessage(ValueError):
    """A channel produced a message the kernel cannot accept; names what is wrong."""


def validate(message: InboundMessage) -> None:
    """Reject malformed messages with a clear error before anything is recorded.

    Every field is checked for its type and capped at its size
    (:data:`~chatkernel.sdk.models.INBOUND_FIELD_LIMITS` and the media and
    ``route_extra`` limits next to it): what a channel hands over is the
    platform's, or a stranger's, and the kernel keeps it in memory and on disk.
    """
    if not isinstance(message, InboundMessage):
        raise InvalidMessage(f"expected an InboundMessage, got {type(message).__name__}")
    for name in ("channel", "account", "chat_id", "message_id", "sender_id"):
        value = getattr(message, name)
        if not isinstance(value, str) or not value:
            raise InvalidMessage(f"inbound message field {name!r} must be a non-empty string,"
                                 f" got {_shown(value)}")
        if len(value) > INBOUND_FIELD_LIMITS[name]:  # inline: every field of every message
            _check_length(name, value, INBOUND_FIELD_LIMITS[name])
    for name in ("text", "sender_name"):
        value = getattr(message, name)
        if not isinstance(value, str):
            raise InvalidMessage(f"inbound message field {name!r} must be a string, "
                                 f"got {type(value).__name__}")
        if len(value) > INBOUND_FIELD_LIMITS[name]:
            _check_length(name, value, INBOUND_FIELD_LIMITS[name])
    if message.thread_id is not None:
        if not isinstance(message.thread_id, str):
            raise InvalidMessage("inbound message field 'thread_id' must be a string or None")
        _check_length("thread_id", message.thread_id, INBOUND_FIELD_LIMITS["thread_id"])
    timestamp = message.timestamp
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)) \
            or not math.isfinite(timestamp):
        raise InvalidMessage(f"inbound message field 'timestamp' must be a finite number of "
                             f"seconds, got {_shown(timestamp)}")
    if message.media:
        _validate_media(message.media)
    if message.route_extra:
        _validate_route_extra(message.route_extra)
    if message.sender_aliases:
        _validate_aliases(message.sender_aliases)


def _validate_aliases(aliases: object) -> None:
    if not isinstance(aliases, tuple) or len(aliases) > MAX_SENDER_ALIASES:
        raise InvalidMessage(f"inbound message field 'sender_aliases' must be a tuple of at "
                             f"most {MAX_SENDER_ALIASES} ids, got {_shown(aliases)}")
    for alias in aliases:
        if not isinstance(alias, str) or not alias:
            raise InvalidMessage(f"inbound message field 'sender_aliases' holds "
                                 f"{_shown(alias)}, not a non-empty string")
        _check_length("sender_aliases", alias, INBOUND_FIELD_LIMITS["sender_id"])


def _validate_media(media: object) -> None:
    if not isinstance(media, list):
        raise InvalidMessage(f"inbound message field 'media' must be a list of MediaRef, "
                             f"got {type(media).__name__}")
    if len(media) > MAX_INBOUND_MEDIA:
        raise InvalidMessage(f"inbound message field 'media' holds {len(media):,} files; "
                             f"the most is {MAX_INBOUND_MEDIA}")
    for index, ref in enumerate(media):
        if not isinstance(ref, MediaRef):
            raise InvalidMessage(f"inbound message field 'media[{index}]' must be a MediaRef, "
                                 f"got {type(ref).__name__}")
        for name, limit in MEDIA_FIELD_LIMITS.items():
            value = getattr(ref, name)
            if value is None and name != "kind":
                continue
            if not isinstance(value, str):
                raise InvalidMessage(f"inbound message field 'media[{index}].{name}' must be "
                                     f"a string, got {type(value).__name__}")
            _check_length(f"media[{index}].{name}", value, limit)


def _validate_route_extra(extra: object) -> None:
    if not isinstance(extra, dict):
        raise InvalidMessage(f"inbound message field 'route_extra' must be a dict, "
                             f"got {type(extra).__name__}")
    try:
        size = len(encode_json_bytes(extra, what="'route_extra'"))
    except TypeError as exc:
        raise InvalidMessage(f"inbound message field {exc}") from None
    if size > MAX_ROUTE_EXTRA_BYTES:
        raise InvalidMessage(f"inbound message field 'route_extra' takes {size:,} bytes as "
                             f"JSON; the most is {MAX_ROUTE_EXTRA_BYTES:,}")


def _check_length(name: str, value: str, limit: int) -> None:
    if len(value) > limit:
        raise InvalidMessage(f"inbound message field {name!r} is {len(value):,} characters "
                             f"long; the most is {limit:,}")


def _shown(value: object, limit: int = 60) -> str:
    """A value's repr for an error message, cut short (it may be anything, of any size)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({type(value).__name__})"


def envelope(message: InboundMessage) -> str:
    """``[channel: telegram | user: 42 | thread: 7]``: the line the agent reads first."""
    parts = [f"channel: {message.channel}", f"user: {message.sender_id}"]
    if message.sender_name:
        parts[-1] += f" ({message.sender_name})"
    if message.is_group:
        parts.append(f"group: {message.chat_id}")
    if message.thread_id:
        parts.append(f"thread: {message.thread_id}")
    return "[" + " | ".join(parts) + "]"


def media_note(media: MediaRef) -> str:
    """``[image saved: <path>]``: how the agent learns of an inbound file."""
    if media.path is not None:
        return f"[{media.kind} saved: {media.path}]"
    name = f" {media.filename}" if media.filename else ""
    return f"[{media.kind}{name} received, {media.note or 'not saved'}]"


def text_with_media_notes(message: InboundMessage) -> str:
    notes = [media_note(media) for media in message.media]
    return "\n".join(filter(None, [message.text, *notes]))


class Receiver:
    """What a receive loop gets as ``deliver`` from the kernel.

    Call it with one message (:meth:`Inbound.accept`); a loop that gets
    messages in batches may use :meth:`many` (:meth:`Inbound.accept_many`),
    or :func:`chatkernel.sdk.channel.deliver_many`, which works with any
    ``deliver``. Both return once the messages are durably journaled.
    """

    __slots__ = ("_inbound",)

    def __init__(self, inbound: "Inbound") -> None:
        self._inbound = inbound

    async def __call__(self, message: InboundMessage) -> str:
        return await self._inbound.accept(message)

    async def many(self, messages: list[InboundMessage]) -> list[str]:
        return await self._inbound.accept_many(messages)

    async def many_shared(self, messages: list[InboundMessage]) -> list[str]:
        """:meth:`many` for a batch that arrives beside others (a webhook request):
        requests that come together share one durable write."""
        return await self._inbound.accept_many(messages, shared=True)

    async def room(self, channel: str, account: str) -> None:
        """Wait, as a webhook's request does, for room in a full backlog: at most
        :data:`WEBHOOK_ROOM_SECONDS`, then :class:`~chatkernel.sdk.errors.Backlogged`.
        For a request that writes something of its own before it delivers (the web
        chat's transcript entry), so a refusal comes before anything is written."""
        await self._inbound.wait_for_room(channel, account)


class InboundRuntime(Protocol):
    """What the pipeline reads of a running kernel, on each call: each exists once the
    kernel started (RuntimeError before)."""

    def store(self) -> Store:
        """The opened store: the journal, account state."""

    def sessions(self) -> Sessions:
        """The sessions: a message's session, its route."""

    def queue(self) -> SessionQueue:
        """The session queue a message's turn waits in."""

    def task_group(self) -> TaskGroup:
        """Where the per-chat lines run."""

    def cluster(self) -> Cluster | None:
        """This process's part among several sharing the store (None: the only one)."""


class InboundRouting(Protocol):
    """Where a message goes: the running accounts, the bindings, the commands and the
    queue settings in effect (a reload replaces them)."""

    def account_for(self, channel: str, account: str) -> Account:
        """A message's running account; :class:`InvalidMessage` when none runs."""

    def account(self, key: str) -> Account | None:
        """The running account ``channel:account`` (None: none runs)."""

    def agent_for(self, message: InboundMessage) -> str | None:
        """The agent answering the message's chat (None: no agent does)."""

    def commands(self) -> Mapping[str, Command]:
        """The slash commands by name."""

    def queue_settings(self, session_key: str) -> QueueSettings:
        """A session's queue settings (its ``/queue`` override, its channel's, the
        config's)."""


class Inbound:
    """Runs the delivery pipeline for one kernel, given what it uses by name.

    ``runtime`` (:class:`InboundRuntime`) and ``routing`` (:class:`InboundRouting`) are
    its ports to the kernel; ``indicate(account, route, session_key)`` shows a waiting
    message's typing indicator (:meth:`Indicators.once`); ``command_gateway`` is what a
    command handler gets (:class:`CommandContext`); ``replies`` queues its replies,
    ``order`` holds them behind earlier messages' turns."""

    def __init__(self, *, runtime: InboundRuntime, routing: InboundRouting,
                 command_gateway: CommandGateway, replies: Replies, order: OutputOrder,
                 indicate: Callable[[Account, Route, str], None], pm: PluginManager,
                 metrics: Metrics, tracer: Tracer = OFF) -> None:
        # The ports' calls, bound once: a call per message costs what a function did.
        self._store = runtime.store
        self._sessions = runtime.sessions
        self._queue = runtime.queue
        self._cluster = runtime.cluster
        self._queue_settings = routing.queue_settings
        self._account_for = routing.account_for
        self._account = routing.account
        self._agent_for = routing.agent_for
        self._commands = routing.commands
        self._command_gateway = command_gateway
        self._replies = replies
        self._order = order
        self._indicate = indicate
        self._pm = pm
        self._metrics = metrics
        #: Each message's trace (core/telemetry.py); ``_tracing`` is read per message.
        self._tracer = tracer
        self._tracing = tracer.on
        self._observed = True  # anyone implementing inbound_delivered? (asked on start)
        self._last_chat: dict[str, dict] = {}
        self._last_chat_dirty: set[str] = set()
        # accept(): a line per chat of journaled messages (see chatkernel.core.lines),
        # each with the span of its trace it is at (None: tracing off, or replayed).
        self.lines: Lines[tuple[Account, InboundMessage, int, Span | None]] = Lines(
            "inbound", self._process_accepted, task_group=runtime.task_group,
            linger=LINE_LINGER_SECONDS, after=self._taken)
        self._room = anyio.Event()  # set whenever the backlog is below ACCEPT_BACKLOG
        self._room.set()
        self._refused = 0  # webhook batches refused for a full backlog since the last line
        self._refused_logged = -math.inf
        # With several instances: the journal seqs lined up per account (see line_up).
        self._lined: dict[str, dict[int, None]] = {}
        # With several instances: the messages deliver() is journaling, by (channel,
        # account, message id) -> what the inbox brought of it meanwhile (see deliver).
        self._journaling: dict[tuple[str, str, str],
                               tuple[Account, int, InboundMessage] | None] = {}

    def start(self) -> None:
        """At the kernel's start, once its plugins are in: whether any implements
        ``inbound_delivered`` (asked once, not per message)."""
        self._observed = bool(self._pm.hook.inbound_delivered.get_hookimpls())

    async def accept(self, message: InboundMessage) -> str:
        """Journal a message durably and return; the pipeline goes on behind.

        Returns ``accepted`` or ``duplicate``. Messages of one chat go through
        the rest of the pipeline one at a time, in the order they were
        accepted; different chats side by side. A crash before a message is
        processed loses nothing: it is still unfinished in the journal and is
        replayed on the next start. Waits while :data:`ACCEPT_BACKLOG`
        messages are already waiting.
        """
        await self._wait_for_room(None)
        started = time.time_ns() if self._tracing else 0
        accepted = await self._journal(message)
        trace = self._received(message, accepted[1] if accepted else None, started) \
            if self._tracing else None
        if accepted is None:
            return "duplicate"
        account, seq = accepted
        self._line_up_if_owned(account, seq, message, trace)
        return "accepted"

    async def accept_many(self, messages: list[InboundMessage], *,
                          shared: bool = False) -> list[str]:
        """:meth:`accept` for a batch (a long poll's updates): one durable write for
        all of them, then each goes on in order within its chat. ``shared``: the batch
        arrived beside others (concurrent webhook requests) and joins the store's
        group commit with them (``Store.journal_inbound_shared``).

        Returns an outcome per message: ``accepted``, ``duplicate``, or
        ``invalid`` for a message the kernel cannot take (logged with the
        reason; the rest of the batch is not held back by it). A ``shared`` batch
        waits at most :data:`WEBHOOK_ROOM_SECONDS` for room in a full backlog, then
        raises :class:`~chatkernel.sdk.errors.Backlogged` with nothing journaled.
        """
        if messages:
            await self._wait_for_room(WEBHOOK_ROOM_SECONDS if shared else None,
                                      (messages[0].channel, messages[0].account))
        outcomes: list[str] = []
        valid: list[tuple[int, Account, InboundMessage]] = []
        for index, message in enumerate(messages):
            try:
                validate(message)
                account = self._account_for(message.channel, message.account)
            except InvalidMessage as exc:
                log.error("inbound message %r not accepted: %s",
                          getattr(message, "message_id", None), exc)
                outcomes.append("invalid")
                continue
            valid.append((index, account, message))
            outcomes.append("accepted")
        store = self._store()
        journal = store.journal_inbound_shared if shared else store.journal_inbound_many
        started = time.time_ns() if self._tracing else 0
        seqs = await journal([m for _, _, m in valid])
        for (index, account, message), seq in zip(valid, seqs):
            trace = self._received(message, seq, started) if self._tracing else None
            if self._counted(account, message, seq) is None:
                outcomes[index] = "duplicate"
            else:
                self._line_up_if_owned(account, seq, message, trace)
        return outcomes

    def _received(self, message: InboundMessage, seq: int | None, started: int) -> Span:
        """A journaled message's trace begins (tracing on): its ``receive`` span, from
        ``started`` (``time.time_ns()``) to now, with the journal write's below it; a
        batch's messages, journaled in one write, each get the write in their trace."""
        tracer = self._tracer
        attributes = {
            "messaging.system": message.channel, "messaging.operation.type": "receive",
            "messaging.operation.name": "receive",
            "messaging.destination.name": f"{message.channel}:{message.account}",
            "messaging.message.id": message.message_id,
            "messaging.message.conversation_id": message.chat_id,
            "messaging.message.body.size": len(message.text.encode()),
            "chatkernel.media.count": len(message.media)}
        if tracer.capture_content:
            attributes["chatkernel.message.text"] = message.text
        span = tracer.inbound(f"receive {message.channel}", attributes, started)
        journal = tracer.start("journal", parent=span, start_ns=started, attributes={
            "db.system.name": self._store().name, "db.operation.name": "journal_inbound"})
        journal.set("chatkernel.journal.seq", seq)
        journal.set("chatkernel.duplicate", seq is None)
        journal.end()
        span.set("chatkernel.outcome", "duplicate" if seq is None else "accepted")
        span.end()
        return span

    async def wait_for_room(self, channel: str, account: str) -> None:
        """A webhook's wait for room (see :meth:`Receiver.room`)."""
        await self._wait_for_room(WEBHOOK_ROOM_SECONDS, (channel, account))

    async def _wait_for_room(self, within: float | None,
                             where: tuple[str, str] | None = None) -> None:
        """Wait while :data:`ACCEPT_BACKLOG` accepted messages are waiting: without end
        (``within`` None: a receive loop fetches nothing more meanwhile), or ``within``
        seconds, then :class:`Backlogged` (a webhook's request, which its platform
        sends again; ``where`` is its channel and account, for the count)."""
        if len(self.lines) < ACCEPT_BACKLOG:
            return
        with anyio.move_on_after(within):
            while len(self.lines) >= ACCEPT_BACKLOG:
                await self._room.wait()
            return
        if where is not None:
            self._metrics.backlogged.labels(*where).inc()
        self._refused += 1
        now = time.monotonic()
        if now - self._refused_logged >= BACKLOGGED_LOG_SECONDS:
            log.warning("%d accepted messages are waiting for the pipeline: %d webhook "
                        "request(s) answered 503 for their platform to send again",
                        len(self.lines), self._refused)
            self._refused, self._refused_logged = 0, now
        raise Backlogged(f"the gateway has {ACCEPT_BACKLOG} messages waiting: send it again",
                         retry_after=BACKLOGGED_RETRY_AFTER)

    def _line_up_if_owned(self, account: Account, seq: int, message: InboundMessage,
                          trace: Span | None = None) -> None:
        """After journaling: the pipeline goes on here, unless several instances share
        the store. Then the account's owner reads every message from the account's
        inbox, even those it journaled itself: in journal order, whichever instance
        took them (core/runtime/cluster.py)."""
        if self._cluster() is None:
            self.line_up(account, seq, message, trace)

    def line_up(self, account: Account, seq: int, message: InboundMessage,
                trace: Span | None = None) -> None:
        """Queue a journaled message behind its chat's earlier ones (``trace``: the span
        of its trace it is at, see core/telemetry.py).

        With several instances, a message may come both from the account's unfinished
        journal and its inbox when an instance takes it over: it is lined up once."""
        if self._cluster() is not None:
            held = (message.channel, message.account, message.message_id)
            if held in self._journaling:
                self._journaling[held] = (account, seq, message)  # deliver() decides
                return
            if not self._mark_lined(account, seq):
                return
        self.lines.put(_chat_key(message), (account, message, seq, trace))
        if len(self.lines) == ACCEPT_BACKLOG:
            self._room = anyio.Event()

    def _mark_lined(self, account: Account, seq: int) -> bool:
        """Remember ``seq`` as lined up; False when it was already."""
        lined = self._lined.setdefault(account.key, {})
        if seq in lined:
            return False
        lined[seq] = None
        if len(lined) > LINED_REMEMBERED:
            del lined[next(iter(lined))]
        return True

    def forget_lined(self, account: Account) -> None:
        """A new tenure of ``account`` (core/runtime/cluster.py): what the last one lined up is
        done or left unfinished, and is replayed."""
        self._lined.pop(account.key, None)

    async def _process_accepted(self, item: tuple[Account, InboundMessage, int, Span | None]
                                ) -> None:
        account, message, seq, trace = item
        try:
            if self._tracing:
                await self._traced(account, message, seq, trace)
            else:
                await self.process(account, message, seq)
        except Exception as exc:
            # Left unfinished in the journal: the next start replays it.
            log.exception("%s: message %s failed in the pipeline", account.key,
                          message.message_id)
            await self._failed(account, message, exc)

    async def _failed(self, account: Account, message: InboundMessage,
                      exc: Exception) -> None:
        """A message whose processing raised is never silent: counted, kept for
        ``status`` (the account's count and last reason), and its chat is told once.
        A notice that cannot be sent is logged, not tried again."""
        text = str(exc).strip()
        reason = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        self._metrics.inbound_failures.labels(message.channel, message.account).inc()
        account.runtime.inbound_failed(reason, time.time())
        try:
            await self._replies.send_text(account, route_for(message), FAILURE_NOTICE,
                                              fmt="plain")
        except Exception:
            log.exception("%s: the failure notice for message %s was not sent", account.key,
                          message.message_id)

    async def _traced(self, account: Account, message: InboundMessage, seq: int | None,
                      trace: Span | None) -> str:
        """:meth:`process` in its ``process`` span (tracing on): a child of ``trace``, the
        message's ``receive`` span; a replayed message's is a trace's root."""
        tracer = self._tracer
        span = tracer.start(f"process {message.channel}", kind="consumer", parent=trace,
                            root=trace is None, attributes={
                                "messaging.system": message.channel,
                                "messaging.operation.type": "process",
                                "messaging.operation.name": "process",
                                "messaging.message.id": message.message_id,
                                "chatkernel.replayed": trace is None})
        try:
            with tracer.use(span):
                outcome = await self.process(account, message, seq)
        except BaseException as exc:
            span.fail(exc)
            raise
        else:
            span.set("chatkernel.outcome", outcome)
        finally:
            span.end()
        return outcome

    def _taken(self, item: tuple[Account, InboundMessage, int, Span | None]) -> None:
        if len(self.lines) == ACCEPT_BACKLOG - 1:
            self._room.set()

    def backlog(self) -> int:
        """Accepted messages not yet through the pipeline."""
        return len(self.lines)

    async def wait_settled(self) -> None:
        """Return once every accepted message went through the pipeline."""
        await self.lines.wait_empty()

    async def deliver(self, message: InboundMessage) -> str:
        """Deliver one normalized message; returns the outcome (for logs and tests):

        ``duplicate``, ``rejected``, ``unanswered`` (no agent answers the chat),
        ``command``, or the queue's answer
        (``started``, ``queued``, ``steered``, ``interrupted``, ``refused``).
        """
        cluster = self._cluster()
        started = time.time_ns() if self._tracing else 0
        if cluster is None:
            accepted = await self._journal(message)
        else:
            # The owner reads every journaled message from the inbox, and the inbox may
            # bring this one before its journal write has answered here: held meanwhile,
            # it is run here, or lined up when this call did not journal it after all.
            in_flight = (message.channel, message.account, message.message_id)
            self._journaling[in_flight] = None
            accepted = None
            try:
                accepted = await self._journal(message)
            finally:
                held = self._journaling.pop(in_flight, None)
                if held is not None and (accepted is None or accepted[1] != held[1]):
                    self.line_up(*held)
        if accepted is None:
            return "duplicate"
        account, seq = accepted
        if cluster is not None:
            if not cluster.owns(account.key):
                return "accepted"  # its owner runs it, from its inbox (core/runtime/cluster.py)
            if not self._mark_lined(account, seq):
                return "accepted"  # lined up already (a takeover's replay brought it)
        if not self._tracing:
            return await self.process(account, message, seq)
        return await self._traced(account, message, seq,
                                  self._received(message, seq, started))

    async def _journal(self, message: InboundMessage) -> tuple[Account, int] | None:
        """Validate, dedupe and journal (durably); None for a duplicate."""
        validate(message)
        account = self._account_for(message.channel, message.account)
        seq = await self._store().journal_inbound(message)
        return self._counted(account, message, seq)

    def _counted(self, account: Account, message: InboundMessage,
                 seq: int | None) -> tuple[Account, int] | None:
        """Count a journaled message, or a duplicate (``seq`` None: returns None)."""
        metrics = self._metrics
        if seq is None:
            metrics.child(metrics.duplicates, message.channel, message.account).inc()
            log.debug("duplicate %s message %s ignored", account.key, message.message_id)
            return None
        metrics.count(metrics.messages_in, message.channel, message.account)
        account.last_inbound_at = time.time()
        return account, seq

    async def process(self, account: Account, message: InboundMessage, seq: int | None) -> str:
        """Everything after the journal; also how unfinished entries are replayed."""
        store = self._store()
        channel = account.channel
        verdict = channel.screen_inbound(message) if channel is not None else None
        if verdict is None or verdict:  # the channel may only refuse; the policy decides
            verdict = await await_maybe(self._pm.call("inbound_accept", message=message,
                                                       account=account))
        if verdict is not None and not verdict and not (
                verdict.stranger in ("approvable", "pair")
                and await access.approved(store, message)):
            await self._reject(account, message, verdict, seq)
            return "rejected"

        agent = self._agent_for(message)
        if agent is None:
            await self._unanswered(account, message, seq)
            return "unanswered"
        sessions, queue = self._sessions(), self._queue()
        record = await sessions.resolve(message, agent)
        route = await sessions.refresh_route(record.key, message)
        self._remember_last_chat(account, message)

        parsed = parse_command(message.text, account.channel.capabilities.command_prefixes
                               if account.channel else "/")
        if parsed is not None:
            command = self._commands().get(parsed[0])
            if command is not None:
                await self._run_command(command, account, message, record, parsed, route,
                                        seq)
                if seq is not None:
                    await store.set_journal_status(seq, "done")
                return "command"

        await sessions.touch(record)
        if queue.is_busy(record.key):
            lane = queue.lane(record.key)
            # Only while a turn runs: a message that joins a turn not yet started
            # (a burst from one poll, a debounce) is not "waiting for the previous one".
            # It speaks for the running turn, so it goes out now (chatkernel.core.outbound.order).
            if lane.running and not lane.busy_hint_sent and \
                    self._queue_settings(record.key).mode != "interrupt" and \
                    (account.channel is None or account.channel.capabilities.busy_hint):
                lane.busy_hint_sent = True
                await self._replies.send_text(account, route, BUSY_HINT, fmt="plain",
                                                  session_key=record.key,
                                                  session_id=record.session_id)
        if queue.is_busy(record.key) and not queue.lane(record.key).running:
            # Waiting out a debounce: no turn shows the indicator yet, so show it now.
            # (An idle lane starts its turn at once, and a turn indicates itself.)
            self._indicate(account, route, record.key)
        # The journal entry stays "received" until its turn finishes: a mark in
        # between would cost a write and change nothing a restart does.
        if seq is not None:
            self._order.opened(record.key, seq)  # answers sent after this one wait for it
        outcome = await queue.enqueue(record.key, QueuedMessage(
            message, seq, self._tracer.current() if self._tracing else None))
        if outcome == "steered" and seq is not None:  # the running turn answers it
            await self._order.closed(record.key, [seq])
        if self._observed:
            for result in self._pm.hook.inbound_delivered(message=message, session=record):
                await await_maybe(result)
        return outcome

    async def _reject(self, account: Account, message: InboundMessage, verdict: Verdict,
                      seq: int | None) -> None:
        store = self._store()
        self._metrics.rejected.labels(message.channel, message.account).inc()
        log.info("%s: message from %s refused: %s (to let them in: add %s to "
                 "channels.%s.accounts.%s.allow_from, then chatkernel reload)", account.key,
                 message.sender_id, verdict.reason, message.sender_id, account.channel_name,
                 account.name, extra={"channel": account.channel_name, "account": account.key})
        if seq is not None:
            # A stranger's words are not kept: their entry stays for the dedupe alone.
            await store.set_journal_status(
                seq, "rejected", message=access.forgotten(message) if verdict.stranger else None)
        if verdict.stranger == "pair":  # dm_policy "pairing": a code instead of their id
            await access.offer_code(store, self._replies, account, message)
            return
        if not verdict.reply:
            return
        # One reply per sender and day, so a stranger cannot make the bot spam.
        key = f"refusal_sent:{message.sender_id}"
        last = await store.get_account_state(account.channel_name, account.name, key)
        now = time.time()
        if isinstance(last, (int, float)) and now - last < UNKNOWN_SENDER_REMINDER_SECONDS:
            return
        await store.set_account_state(account.channel_name, account.name, key, now)
        await self._replies.send_text(account, route_for(message), verdict.reply,
                                          fmt="plain")

    async def _unanswered(self, account: Account, message: InboundMessage,
                          seq: int | None) -> None:
        """A chat no binding gives an agent, on a config with no default agent: said in
        the log (which rule would answer it is ``chatkernel agents which``)."""
        self._metrics.dropped.labels("no agent").inc()
        log.warning("%s: message %s in chat %s not answered: no binding matches it and the "
                    "config has no default agent", account.key, message.message_id,
                    message.chat_id)
        if seq is not None:
            await self._store().set_journal_status(seq, "rejected")

    def _remember_last_chat(self, account: Account, message: InboundMessage) -> None:
        """The target of ``last``: kept in memory, written when it changed.

        Busy accounts change it with nearly every message, so the write is
        coalesced: :meth:`flush_last_chats` runs every second and at shutdown.
        """
        current = self._last_chat.get(account.key)
        if current is not None and current["chat_id"] == message.chat_id and \
                current["thread_id"] == message.thread_id:
            return
        self._last_chat[account.key] = {
            "chat_id": message.chat_id, "thread_id": message.thread_id,
            "is_group": message.is_group, "sender_id": message.sender_id}
        self._last_chat_dirty.add(account.key)

    def last_chat(self, account: Account) -> dict | None:
        """The last active chat of an account this run (None: ask the store)."""
        return self._last_chat.get(account.key)

    async def flush_last_chats(self) -> None:
        """Write the accounts' last active chats that changed. One the store cannot take
        now (it is unreachable) is written at the next flush; the error is logged."""
        dirty, self._last_chat_dirty = self._last_chat_dirty, set()
        for key in sorted(dirty):
            account = self._account(key)
            if account is None:
                continue
            try:
                await self._store().set_account_state(
                    account.channel_name, account.name, "last_chat", self._last_chat[key])
            except StoreError as exc:
                self._last_chat_dirty.add(key)
                # Health reports the store; this is tried again in a second.
                log.debug("%s: its last active chat is not saved yet: %s", key, exc)

    async def _run_command(self, command, account, message, record, parsed, route,
                           seq: int | None) -> None:
        name, args = parsed
        direct_only = command.direct_only or getattr(account.config, "direct_only_commands",
                                                     False)
        if direct_only and message.is_group:
            reply: str | None = f"/{name} works in direct chats only."
        else:
            context = CommandContext(self._command_gateway, message, account, record,
                                     name, args)
            try:
                reply = await await_maybe(command.handler(context))
            except Exception as exc:
                log.exception("command /%s failed", name)
                reply = f"⚠️ /{name} failed: {exc}"
        if reply:
            # It runs now, in arrival order, but its answer waits for the turns of the
            # messages before it (chatkernel.core.outbound.order).
            async def answer() -> None:
                await self._replies.send_text(account, route, reply,
                                                  session_key=record.key,
                                                  session_id=record.session_id, fmt="plain")

            await self._order.send(record.key, seq, answer)


def _chat_key(message: InboundMessage) -> str:
    # Per chat, not per session: the order a person wrote in holds across threads.
    return f"{message.channel}:{message.account}:{message.chat_id}"
