"""Transports: how an account receives, each an object that owns its loop.

A channel picks its transport in :meth:`Channel.transport` — long polling
(:class:`Polling`), a webhook (:class:`~chatkernel.sdk.receiving.webhooks.Webhook`) or
a socket (:class:`~chatkernel.sdk.receiving.sockets.Socket`) — and subclasses it with the
platform's few pieces (``poll``, the webhook's verifier, the socket session).
The kernel runs ``transport.run(deliver)`` under its supervisor, mounts
``transport.http_routes()`` on the gateway's server, and asks
``transport.quiet`` how to judge the account's silence.

What every loop does the same way is here, on :class:`Transport`: events read
in platform order and journaled in one write (:meth:`Transport.receive`),
failed calls classified by the channel (:meth:`Channel.receive_trouble`),
reported and retried with backoff (:meth:`Transport.failed`), refused
identities turned ``failed`` and retried slowly, and the account's health kept.
Every wait of a loop is on the account's clock (:attr:`Transport.clock`, the
context's: real time in a gateway, a clock the test moves in a test).
A channel with a loop of its own (the web chat's page) subclasses
:class:`Transport` directly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from chatkernel.sdk.clock import SYSTEM_CLOCK, ChannelClock
from chatkernel.sdk.errors import LeaseLost, StoreError
from chatkernel.sdk.http_client import PlatformError
from chatkernel.sdk.models import InboundMessage
from chatkernel.sdk.receiving import (
    UNREACHABLE_KINDS,
    Backoff,
    Polled,
    Trouble,
    deliver_many,
    event_trait,
    normalize_batch,
    refusal_words,
    refused_delay,
)

if TYPE_CHECKING:
    from chatkernel.sdk.channel import Channel, Deliver

__all__ = ["Polling", "Transport"]

log = logging.getLogger("chatkernel.channel")

#: How long past its own wait (``Polling.poll_wait``) a long poll may go unanswered
#: before the platform counts as hung.
POLL_MARGIN_SECONDS = 5.0
#: A batch the store could not commit is tried again after this long, doubling to the
#: cap (as the outbox waits for the store to take its marks).
STORE_RETRY_FIRST_SECONDS = 0.05
STORE_RETRY_MAX_SECONDS = 5.0
#: ``PlatformError.code`` of a long poll abandoned that way.
POLL_HUNG = "poll_hung"


class Transport:
    """How one account receives: the loop, its HTTP routes, and what its events are.

    Subclasses implement :meth:`run`; the event methods tell the kit how to keep
    each chat's events in order and how to name an event in a log line.
    """

    #: Judged by its probe, not by silence: an account that may legitimately go a
    #: long time without hearing from its platform (a webhook waits for the platform
    #: to call; a web page for a person). Others are restarted when their platform
    #: stays silent for ``stale_event_threshold_minutes``.
    quiet: ClassVar[bool] = False
    #: Backoff after a failed call: first delay and cap, in seconds.
    backoff: ClassVar[tuple[float, float]] = (1.0, 30.0)
    #: A batch the store cannot commit (a full disk) is tried again in place until it
    #: can (:meth:`receive`). False where the platform sends it again by itself once
    #: refused (a webhook's request answered 5xx).
    store_waits_in_place: ClassVar[bool] = True

    def __init__(self, channel: "Channel") -> None:
        #: The channel whose account this transport receives for.
        self.channel = channel
        #: The kernel's services for the account (``channel.context``).
        self.context = channel.context

    @property
    def clock(self) -> ChannelClock:
        """The clock the loop's waits run on: the context's (``context.clock``)."""
        return getattr(self.context, "clock", None) or SYSTEM_CLOCK

    # -- what a transport implements ---------------------------------------------------

    async def run(self, deliver: "Deliver") -> None:
        """The receive loop, until cancelled."""
        raise NotImplementedError(f"{type(self).__name__} has no receive loop")

    async def serve_elsewhere(self, deliver: "Deliver") -> None:
        """With several gateway processes sharing the store, what runs on those that
        do not own this account, until cancelled (the owner runs :meth:`run`): by
        default nothing (a poll or a socket is the owner's alone)."""
        await anyio.sleep_forever()

    def http_routes(self) -> list[tuple[str, str, Any]]:
        """``(method, path, aiohttp handler)`` to mount on the gateway's HTTP server;
        paths include the account name where there can be several accounts."""
        return []

    # -- the platform's events ---------------------------------------------------------

    def event_chat(self, event: Any) -> Hashable:
        """The chat an event belongs to (events of one chat are read in order)."""
        return None

    def event_has_media(self, event: Any) -> bool:
        """Whether reading the event downloads a file (such batches are read a chat
        beside the other, so one big file does not hold up the others)."""
        return False

    def describe_event(self, event: Any) -> str:
        """The event in a few words, for a log line about it."""
        return f"an event of type {type(event).__name__}"

    def event_id(self, event: Any) -> str | None:
        """The event's own id on its platform (Telegram's ``update_id``), if it has one:
        an event the channel cannot read is journaled as rejected under it."""
        return None

    # -- the kit's steps, for every loop -----------------------------------------------

    async def receive(self, deliver: "Deliver", events: list[Any]) -> int:
        """Normalize ``events`` (in platform order) with the channel and journal the
        messages; returns how many there were, once they are durable.

        An event the channel cannot read is journaled as ``rejected`` under its
        platform id (:meth:`event_id`), so the record shows it came and a
        redelivery of it is known; it never reaches the agent, never holds the loop.
        """
        channel = self.channel
        unreadable: list[tuple[Any, str]] = []
        messages = await normalize_batch(
            events, channel.normalize, chat_of=self.event_chat,
            downloads=self.event_has_media, describe=self.describe_event,
            account=channel.account.key, self_id=channel.self_id, unreadable=unreadable)
        if self.store_waits_in_place:
            await self._journal_when_possible(deliver, messages)
        else:
            await deliver_many(deliver, messages)
        for event, reason in unreadable:
            await self._journal_rejected(event, reason)
        return len(messages)

    async def _journal_when_possible(self, deliver: "Deliver",
                                     messages: list[InboundMessage]) -> None:
        """Journal ``messages``, waiting in place while the store cannot commit (a full
        disk): the loop neither dies nor moves on, so nothing is acknowledged before it
        is recorded and the platform's order is kept. (What a failed commit journaled
        of the batch is deduplicated when it is delivered again.)"""
        wait: float | None = None
        key = self.channel.account.key
        while True:
            try:
                await deliver_many(deliver, messages)
            except LeaseLost:
                raise  # another instance owns the account now
            except StoreError as exc:
                if wait is None:
                    log.warning("%s: the state database cannot commit (%s): receiving waits "
                                "here, in order, until it can", key, exc)
                    wait = STORE_RETRY_FIRST_SECONDS
                else:
                    wait = min(wait * 2, STORE_RETRY_MAX_SECONDS)
                await self.clock.sleep(wait)
                continue
            if wait is not None:
                log.info("%s: the state database commits again; receiving goes on", key)
            return

    async def _journal_rejected(self, event: Any, reason: str) -> None:
        event_id = event_trait(self.event_id, event)
        if event_id is None:
            return
        chat = event_trait(self.event_chat, event)
        account = self.channel.account
        await self.context.journal_rejected(InboundMessage(
            channel=account.channel_name, account=account.name,
            chat_id=str(chat)[:256] if chat is not None else "?",
            message_id=f"unreadable:{event_id}"[:520], sender_id="?",
            text=f"{event_trait(self.describe_event, event)} could not be read: {reason}"[:2000]))

    async def failed(self, exc: Exception, backoff: Backoff, failures: int, what: str) -> None:
        """Report a failed receive call (the ``failures``-th in a row) and wait before
        the next try. A failure the channel classifies as a problem is reported at
        once; a passing one only from its second time in a row (one lost poll is not
        news); a refused identity turns the account ``failed``."""
        channel, runtime = self.channel, self.channel.account.runtime
        trouble = channel.receive_trouble(exc)
        if trouble.refused:
            await self._refused(exc, trouble, failures)
            return
        delay = trouble.wait if trouble.wait is not None else backoff.next()
        reason = trouble.problem if trouble.problem is not None else f"{what} failed: {exc}"
        if trouble.problem is not None or failures >= 2:
            if runtime.problem != reason:
                log.error("%s: %s; retrying in %.0fs", channel.account.key, reason, delay)
            self.context.report_problem(reason, restartable=trouble.restartable)
            # The platform could not be reached: any call of the account that works later
            # ends the problem for health, before this loop's next call clears it.
            runtime.problem_unreachable = (
                trouble.problem is None and isinstance(exc, PlatformError)
                and exc.kind in UNREACHABLE_KINDS)
        else:
            log.warning("%s: %s; retrying in %.0fs", channel.account.key, reason, delay)
        runtime.error(reason, time.time())
        await self.clock.sleep(delay)

    async def _refused(self, exc: Exception, trouble: Trouble, failures: int) -> None:
        reason = refusal_words(self.channel, trouble)
        delay = refused_delay(trouble, failures)
        account = self.channel.account
        runtime = account.runtime
        if runtime.state != "failed" or runtime.detail != reason:
            log.error("%s: %s; trying again in %.0fs", account.key, reason, delay)
        else:
            log.info("%s: still refused; trying again in %.0fs", account.key, delay)
        mark_refused(self.channel, reason)
        await self.clock.sleep(delay)

    async def until_done(self, call: Callable[[], Awaitable[Any]], what: str) -> None:
        """``await call()`` until it succeeds, each failure reported and waited out (a
        rejected token or an outage waits here, rather than in the supervisor's
        restarts)."""
        backoff = Backoff(*self.backoff)
        failures = 0
        while True:
            try:
                await call()
            except PlatformError as exc:
                failures += 1
                await self.failed(exc, backoff, failures, what)
                continue
            self.channel.account.runtime.calls.succeeded()
            if failures:
                self.context.clear_problem()  # e.g. a refused token that works again
            return

    async def identify(self) -> None:
        """``channel.identify()``, retried until it succeeds."""
        await self.until_done(self.channel.identify, "identify")


def mark_refused(channel: "Channel", reason: str) -> None:
    """The account is ``failed`` on a refused identity until a call works again."""
    runtime, now = channel.account.runtime, time.time()
    channel.context.report_problem(reason, restartable=False)
    runtime.set_state("failed", now, reason)
    runtime.error(reason, now)


class Polling(Transport):
    """Long polling: the platform answers a request with the events since a cursor.

    Subclasses implement :meth:`poll` (and may :meth:`prepare`). :meth:`run`
    identifies the bot (with backoff), then polls from the saved cursor forever:
    every answered poll, even an empty one, is the platform's sign of life; its
    events are journaled, and only then is the cursor saved (a crash before that
    gets the batch again, and dedupe drops what was already in). A failed poll is
    classified by :meth:`Channel.receive_trouble` and retried.
    """

    async def poll(self, cursor: str | None) -> Polled:
        """One long poll from ``cursor``: the events and the next cursor. Raise
        :class:`PlatformError` when it fails."""
        raise NotImplementedError(f"{type(self).__name__} does not poll")

    @property
    def poll_wait(self) -> float | None:
        """Seconds the platform may hold one poll before it answers (the long poll's
        own timeout): the channel's ``config.poll_timeout`` by default (the template's
        and Telegram's setting); None: the loop sets no deadline of its own.

        A poll still unanswered :data:`POLL_MARGIN_SECONDS` after that is a hung
        platform: it is abandoned, counted as a failed call at once (the account's
        health says so) and made again, rather than waiting out the client's own
        timeout (``poll_timeout + 15`` s and more) while nothing is received."""
        config = getattr(self.channel, "config", None)
        wait = getattr(config, "poll_timeout", None)
        return float(wait) if isinstance(wait, (int, float)) else None

    async def _poll_within(self, cursor: str | None) -> Polled:
        """:meth:`poll`, abandoned once it is :data:`POLL_MARGIN_SECONDS` past
        :attr:`poll_wait` (on the loop's clock)."""
        wait = self.poll_wait
        if wait is None:
            return await self.poll(cursor)
        limit = wait + POLL_MARGIN_SECONDS
        polled: list[Polled] = []
        failed: list[Exception] = []
        async with anyio.create_task_group() as tg:
            async def deadline() -> None:
                await self.clock.sleep(limit)
                tg.cancel_scope.cancel()

            tg.start_soon(deadline)
            try:
                polled.append(await self.poll(cursor))
            except Exception as exc:  # raised as it is below, not in an exception group
                failed.append(exc)
            tg.cancel_scope.cancel()
        if failed:
            raise failed[0]
        if not polled:
            raise PlatformError(f"the long poll got no answer within {limit:g}s (the "
                                f"platform holds one {wait:g}s); abandoned and made again",
                                kind="no_answer", code=POLL_HUNG)
        return polled[0]

    async def prepare(self) -> None:
        """Called once before the first poll (Telegram removes a leftover webhook)."""

    async def run(self, deliver: "Deliver") -> None:
        context = self.context
        await self.identify()
        await self.until_done(self.prepare, "preparing to poll")
        cursor = await context.load_cursor()
        backoff = Backoff(*self.backoff)
        failures = 0
        calls = self.channel.account.runtime.calls
        while True:
            await context.receive_gate()
            try:
                polled = await self._poll_within(cursor)
            except PlatformError as exc:
                failures += 1
                if exc.code == POLL_HUNG:
                    # The platform took the poll and hangs: no passing failure, and the
                    # next one would take as long to tell. Reported at once.
                    failures = max(failures, 2)
                await self.failed(exc, backoff, failures, "poll")
                continue
            calls.succeeded()  # an answered call (sdk/calls.py)
            if failures:
                failures = 0
                backoff.reset()
            context.clear_problem()
            context.report_alive()
            try:
                if polled.events:
                    await self.receive(deliver, polled.events)
                if polled.cursor is not None and polled.cursor != cursor:
                    await context.save_cursor(polled.cursor)
                    cursor = polled.cursor
            except LeaseLost:
                raise  # another instance owns the account now: this loop ends
            except StoreError as exc:
                # Not journaled, so not acknowledged: the cursor stays, the platform keeps
                # the batch, and the next poll asks for it again once the store is back.
                failures += 1
                await self.failed(exc, backoff, failures, "journaling")
                continue
