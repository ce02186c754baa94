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
  words (``Trouble.advice``), and is tried again only slowly: every
  :data:`REFUSED_RETRY_SECONDS` at first, doubling to :data:`REFUSED_RETRY_MAX_SECONDS`
  (a new token comes with a restart of the gateway, which tries at once).

The transports in this package (``transport``: the base and polling; ``webhooks``;
``sockets``) are the loops built on these pieces; this module imports none of them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from chatkernel.sdk.models import InboundMessage

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
    #: account turns ``failed`` with ``problem`` and ``advice``, not restartable, and
    #: is retried slowly.
    refused: bool = False
    #: For a refused identity: what a person does, in the platform's words (where to
    #: get new credentials and which config key takes them: "get a new token from
    #: @BotFather and set it in ..."). It follows ``problem`` in the account's state;
    #: never put a secret in it. None: the kit's generic advice.
    advice: str | None = None


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
                      account, event_trait(describe, event) or "an event", reason)
            if unreadable is not None:
                unreadable.append((event, reason))
            return
        if message is not None and (self_id is None or message.sender_id != self_id):
            found[index] = message

    items = list(enumerate(events))
    if any(event_trait(downloads, event) for event in events):
        await per_chat(items, lambda item: event_trait(chat_of, item[1]), read)
    else:
        for item in items:
            await read(item)
    return [found[index] for index in sorted(found)]


def event_trait(function: Callable[[T], Any], event: T) -> Any:
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


class SharedCommit:
    """``deliver`` for a loop whose batches arrive side by side (a webhook server's
    concurrent requests): with the kernel's receiver each batch joins the store's
    group commit, so requests that come together share one durable write, and each
    still returns only once its own messages are durable. Any other ``deliver`` is
    used as it is."""

    __slots__ = ("deliver", "many")

    def __init__(self, deliver: "Deliver") -> None:
        self.deliver = deliver
        many = getattr(deliver, "many_shared", None) or getattr(deliver, "many", None)
        if many is not None:
            self.many = many

    async def __call__(self, message: InboundMessage) -> str:
        return await self.deliver(message)


# -- failures -----------------------------------------------------------------------------


def refused_delay(trouble: Trouble, failures: int) -> float:
    """How long to wait before the ``failures``-th refused try is followed by another."""
    first = max(trouble.wait or 0.0, REFUSED_RETRY_SECONDS)
    return min(first * 2 ** max(0, failures - 1), max(first, REFUSED_RETRY_MAX_SECONDS))


def refusal_words(channel: "Channel", trouble: Trouble) -> str:
    """The words for a refused identity: what was refused, then what to do (the
    trouble's ``advice``, else the channel's)."""
    what = trouble.problem or "the platform refused the account's credentials"
    advice = trouble.advice
    if advice is None:
        advice = default_advice(channel)
    return f"{what}: {advice}" if advice else what


def refusal(channel: "Channel", error: Exception) -> str | None:
    """The words for ``error`` when the channel calls it a refused identity (the
    problem, then what to do), else None: for a probe to say what the loop says."""
    trouble = channel.receive_trouble(error)
    return refusal_words(channel, trouble) if trouble.refused else None


def default_advice(channel: "Channel") -> str:
    """What to do about refused credentials, when the channel says nothing more."""
    return f"set working credentials in {channel.account.config_key()} and restart the gateway"
