"""The channel kit's receiving side: what every receive loop does the same way.

A receive loop turns platform events into messages and hands them to the
kernel's receiver. Whatever the transport (a long poll, a webhook request, a
socket frame), the same steps follow, written once here:

- the batch is read in platform order (:func:`normalize_batch`): an event the
  channel cannot read is logged and skipped, never allowed to stop the loop
  (it would come back forever); the bot's own messages are dropped;
- the messages are journaled through the receiver in one durable write
  (:func:`deliver_many`) before the platform's cursor moves;
- failures are classified (:class:`Trouble`): a passing one is retried with
  backoff, one a person must fix (credentials rejected, another instance polls
  the account) is reported as the account's problem, and the account's health
  says so until a call succeeds again. A refused identity (a rejected token, an
  expired session) turns the account ``failed``, with what to do in the channel's
  words (``Channel.refused_advice``), and is tried again only slowly: every
  :data:`REFUSED_RETRY_SECONDS` at first, doubling to :data:`REFUSED_RETRY_MAX_SECONDS`
  (a new token comes with a restart of the gateway, which tries at once).

:func:`poll_forever` is the long-polling loop on top of these; webhooks
(chatkernel.sdk.webhooks) and sockets (chatkernel.sdk.sockets) use the same
pieces.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from chatkernel.sdk.http_client import PlatformError
from chatkernel.sdk.models import InboundMessage
from chatkernel.sdk.errors import LeaseLost, StoreError

if TYPE_CHECKING:
    from chatkernel.sdk.channel import Channel, Deliver

T = TypeVar("T")

log = logging.getLogger("chatkernel.channel")

#: A refused identity is tried again after this long at first (or the channel's
#: ``Trouble.wait``, when longer), doubling up to the cap: a platform that took a
#: token back may give it back, but asking every second would only hammer it.
#: Failures that say the platform could not be reached, rather than refused the call.
UNREACHABLE_KINDS = frozenset({"not_sent", "no_answer", "unavailable"})
REFUSED_RETRY_SECONDS = 60.0
REFUSED_RETRY_MAX_SECONDS = 900.0


@dataclass(frozen=True, slots=True)
class Trouble:
    """What a failed receive call means for the loop (see ``Channel.receive_trouble``).

    ``problem``: words for the account's health ("token rejected"); None for a
    passing failure, which is reported only once it repeats. ``wait``: seconds
    before the next try (None: the loop's backoff). ``restartable``: False when
    restarting the loop cannot fix it, so the health monitor leaves the account
    alone and its health stays red until the call works again.
    """

    problem: str | None = None
    wait: float | None = None
    restartable: bool = True
    #: The platform refused the account's identity (its token, its session): the
    #: account turns ``failed`` with ``problem`` and the channel's
    #: :meth:`~chatkernel.channels.Channel.refused_advice`, not restartable, retried slowly.
    refused: bool = False


@dataclass(slots=True)
class Polled:
    """One long poll's answer: the events, and the cursor to save once they are journaled
    (None: the cursor does not move)."""

    events: list[Any]
    cursor: str | None = None


class Backoff:
    """Exponential backoff: ``first`` seconds, doubling up to ``cap``; :meth:`reset` on success."""

    __slots__ = ("first", "cap", "_next")

    def __init__(self, first: float = 1.0, cap: float = 30.0) -> None:
        self.first, self.cap = first, cap
        self._next = first

    def next(self) -> float:
        delay, self._next = self._next, min(self._next * 2, self.cap)
        return delay

    def reset(self) -> None:
        self._next = self.first


# -- batches ------------------------------------------------------------------------------


async def per_chat(items: Iterable[T], chat_of: Callable[[T], Hashable],
                   handle: Callable[[T], Awaitable[Any]]) -> None:
    """``await handle(item)`` for every item: different chats concurrently, each
    chat's items in their order. Returns when all are handled."""
    groups: dict[Hashable, list[T]] = {}
    for item in items:
        groups.setdefault(chat_of(item), []).append(item)
    if len(groups) <= 1:
        for group in groups.values():
            for item in group:
                await handle(item)
        return

    async def run(group: list[T]) -> None:
        for item in group:
            await handle(item)

    async with anyio.create_task_group() as tg:
        for group in groups.values():
            tg.start_soon(run, group)


async def normalize_batch(events: list[T], normalize: Callable[[T], Awaitable[InboundMessage | None]],
                          *, chat_of: Callable[[T], Hashable], downloads: Callable[[T], bool],
                          describe: Callable[[T], str] = repr, account: str = "",
                          self_id: str | None = None,
                          unreadable: list[tuple[T, str]] | None = None) -> list[InboundMessage]:
    """A batch of platform events as messages, in platform order.

    ``normalize`` turns one event into a message (None: not a message, skipped).
    An event it cannot read (any ``Exception``: a malformed event is the
    platform's data, not the loop's fault) is logged with ``describe(event)``
    and skipped (and added to ``unreadable`` with the reason, when given).
    Messages sent by ``self_id`` (the bot itself) are dropped.
    When some event ``downloads`` a file, the batch is read one chat beside the
    other (each chat in order), so one big file does not hold up the others; a
    batch without files is read in one go, without a single wait.
    """
    found: dict[int, InboundMessage] = {}

    async def read(item: tuple[int, T]) -> None:
        index, event = item
        try:
            message = await normalize(event)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            reason = f"{type(exc).__name__}: {exc}"
            # describe() reads the same malformed event: it must not fail the batch.
            log.error("%s: %s skipped, it is not a message this channel can read: %s",
                      account, _safe(describe, event) or "an event", reason)
            if unreadable is not None:
                unreadable.append((event, reason))
            return
        if message is not None and (self_id is None or message.sender_id != self_id):
            found[index] = message

    items = list(enumerate(events))
    if any(_safe(downloads, event) for event in events):
        await per_chat(items, lambda item: _safe(chat_of, item[1]), read)
    else:
        for item in items:
            await read(item)
    return [found[index] for index in sorted(found)]


def _safe(function: Callable[[T], Any], event: T) -> Any:
    """``function(event)``, or None for an event too malformed to answer."""
    try:
        return function(event)
    except Exception:  # noqa: BLE001 - normalize reports the event; grouping must not fail
        return None


async def deliver_many(deliver: "Deliver", messages: list[InboundMessage]) -> None:
    """Hand a batch of messages (in platform order) to ``deliver``; returns once all
    are journaled, so the loop may then save its cursor.

    With the kernel's receiver the batch is one durable write; any other
    ``deliver`` (a test's) gets the messages one chat beside the other, each
    chat's in order.
    """
    if not messages:
        return
    many = getattr(deliver, "many", None)
    if many is not None:
        await many(messages)
    else:
        await per_chat(messages, lambda message: (message.account, message.chat_id), deliver)


async def receive_events(channel: "Channel", deliver: "Deliver", events: list[Any]) -> int:
    """Normalize ``events`` with the channel and journal the messages; returns how many.

    An event the channel cannot read is journaled as ``rejected`` under its platform
    id (``Channel.event_id``), so the record shows it came and was refused, and a
    redelivery of it is known; it never reaches the agent, and never holds the loop.
    """
    unreadable: list[tuple[Any, str]] = []
    messages = await normalize_batch(
        events, channel.normalize, chat_of=channel.event_chat,
        downloads=channel.event_has_media, describe=channel.describe_event,
        account=channel.account.key, self_id=channel.self_id, unreadable=unreadable)
    await deliver_many(deliver, messages)
    for event, reason in unreadable:
        await _journal_rejected(channel, event, reason)
    return len(messages)


async def _journal_rejected(channel: "Channel", event: Any, reason: str) -> None:
    event_id = _safe(channel.event_id, event)
    if event_id is None or channel.store is None:
        return
    chat = _safe(channel.event_chat, event)
    record = InboundMessage(
        channel=channel.name, account=channel.account.name,
        chat_id=str(chat)[:256] if chat is not None else "?",
        message_id=f"unreadable:{event_id}"[:520], sender_id="?",
        text=f"{_safe(channel.describe_event, event)} could not be read: {reason}"[:2000])
    seq = await channel.store.journal_inbound(record)
    if seq is not None:  # None: a redelivery, recorded already
        await channel.store.set_journal_status(seq, "rejected")


# -- failures -----------------------------------------------------------------------------


async def receive_failed(channel: "Channel", exc: Exception, backoff: Backoff,
                         failures: int, what: str) -> None:
    """Report a failed receive call and wait before the next try.

    A failure the channel classifies as a problem is reported at once; a passing
    one only from its second time in a row (one lost poll is not news).
    """
    trouble = channel.receive_trouble(exc)
    if trouble.refused:
        await _refused(channel, exc, trouble, failures)
        return
    delay = trouble.wait if trouble.wait is not None else backoff.next()
    if trouble.problem is not None:
        reason = trouble.problem
    else:
        reason = f"{what} failed: {exc}"
    if trouble.problem is not None or failures >= 2:
        if channel.account.runtime.problem != reason:
            log.error("%s: %s; retrying in %.0fs", channel.account.key, reason, delay)
        channel.report_problem(reason, restartable=trouble.restartable)
        # The platform could not be reached: any call of the account that works later
        # ends the problem for health, before this loop's next call clears it.
        channel.account.runtime.problem_unreachable = (
            trouble.problem is None and isinstance(exc, PlatformError)
            and exc.kind in UNREACHABLE_KINDS)
    else:
        log.warning("%s: %s; retrying in %.0fs", channel.account.key, reason, delay)
    channel.account.runtime.error(reason, time.time())
    await anyio.sleep(delay)


def refusal(channel: "Channel", trouble: Trouble, exc: Exception) -> str:
    """The words for a refused identity: what was refused, then what to do."""
    what = trouble.problem or "the platform refused the account's credentials"
    advice = channel.refused_advice(exc)
    return f"{what}: {advice}" if advice else what


def refused_delay(trouble: Trouble, failures: int) -> float:
    """How long to wait before the ``failures``-th refused try is followed by another."""
    first = max(trouble.wait or 0.0, REFUSED_RETRY_SECONDS)
    return min(first * 2 ** max(0, failures - 1), max(first, REFUSED_RETRY_MAX_SECONDS))


def mark_refused(channel: "Channel", reason: str) -> None:
    """The account is ``failed`` on a refused identity until a call works again."""
    runtime, now = channel.account.runtime, time.time()
    channel.report_problem(reason, restartable=False)
    runtime.set_state("failed", now, reason)
    runtime.error(reason, now)


async def _refused(channel: "Channel", exc: Exception, trouble: Trouble, failures: int) -> None:
    reason = refusal(channel, trouble, exc)
    delay = refused_delay(trouble, failures)
    runtime = channel.account.runtime
    if runtime.state != "failed" or runtime.detail != reason:
        log.error("%s: %s; trying again in %.0fs", channel.account.key, reason, delay)
    else:
        log.info("%s: still refused; trying again in %.0fs", channel.account.key, delay)
    mark_refused(channel, reason)
    await anyio.sleep(delay)


async def until_done(channel: "Channel", call: Callable[[], Awaitable[Any]], what: str) -> None:
    """``await call()`` until it succeeds, each failure reported and waited out (a
    rejected token or an outage waits here, rather than in the supervisor's restarts)."""
    backoff = Backoff(*channel.receive_backoff)
    failures = 0
    while True:
        try:
            await call()
        except PlatformError as exc:
            failures += 1
            await receive_failed(channel, exc, backoff, failures, what)
            continue
        channel.account.runtime.calls.succeeded()
        if failures:
            channel.clear_problem()  # e.g. a refused token that works again
        return


async def identify(channel: "Channel") -> None:
    """``channel.identify()``, retried until it succeeds."""
    await until_done(channel, channel.identify, "identify")


async def poll_forever(channel: "Channel", deliver: "Deliver") -> None:
    """The long-polling receive loop, until cancelled.

    Identify (with backoff), then poll from the saved cursor forever: every
    answered poll, even an empty one, is the platform's sign of life; its events
    are journaled, and only then is the cursor saved (a crash before that gets
    the batch again, and dedupe drops what was already in). A failed poll is
    classified by ``channel.receive_trouble`` and retried.
    """
    await identify(channel)
    await until_done(channel, channel.start_polling, "preparing to poll")
    cursor = await channel.load_cursor()
    backoff = Backoff(*channel.receive_backoff)
    failures = 0
    while True:
        if channel.receive_gate is not None:
            await channel.receive_gate()
        try:
            polled = await channel.poll(cursor)
        except PlatformError as exc:
            failures += 1
            await receive_failed(channel, exc, backoff, failures, "poll")
            continue
        channel.account.runtime.calls.succeeded()  # an answered call (sdk/calls.py)
        if failures:
            failures = 0
            backoff.reset()
        channel.clear_problem()
        channel.report_alive()
        try:
            if polled.events:
                await receive_events(channel, deliver, polled.events)
            if polled.cursor is not None and polled.cursor != cursor:
                await channel.save_cursor(polled.cursor)
                cursor = polled.cursor
        except LeaseLost:
            raise  # another instance owns the account now: this loop ends
        except StoreError as exc:
            # Not journaled, so not acknowledged: the cursor stays, the platform keeps
            # the batch, and the next poll asks for it again once the store is back.
            failures += 1
            await receive_failed(channel, exc, backoff, failures, "journaling")
            continue
