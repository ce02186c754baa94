"""Typing indicators, refreshed for every running turn by one task.

Platforms show "typing…" for a few seconds per request (Telegram 5 s), so a
running turn's indicator is refreshed every ``ChannelLimits.indicator_interval``.
One long-lived task serves every turn: a task per turn would cost more than
the indicator is worth on a busy gateway. What comes due next is kept in a heap, so
a wake-up costs what is due then, not a look at every chat with a turn, a waiting
message or a read mark pending (hundreds on a busy WhatsApp number). Indicator failures are logged at
debug level and never affect the turn.

Indicator calls count in the platform's rate windows like sends do: a channel declares
their limits in ``ChannelLimits.indicator_rates`` (Slack's assistant.threads.setStatus
has its own), and an account's calls are paced by a :class:`RateLimiter` of those
limits, held from the request until its answer like a send's slot. An indicator never
waits for a slot: one that finds its window full, or (on such a channel) one for a turn
whose reply is already on its way (the user sees the reply coming, and on some platforms
the reply ends the indicator anyway), is skipped and tried again a little later, while
the turn runs.

A channel may hold a turn's first indicator back (``ChannelLimits.indicator_delay``): a
turn that replies sooner shows none, as its reply would end the indicator at once. Only
turns that run longer show it, and a burst of quick turns in a chat costs no call at all.
The indicator of a message waiting for its turn (:meth:`Indicators.once`) is held back
the same way, made once however many messages of the session wait, and not made at all
once the session's turn has started (the turn shows its own).

Where the indicator also marks the messages read (WhatsApp: one request for the read
receipt and typing), the channel mixes in ``ReadReceipts`` (sdk/channel.py): a turn that
replied before its indicator was due leaves a read mark due ``read_mark_delay`` after
its reply (not before its indicator would have been), which the session's next turns
within it take over. A burst of quick turns in a chat makes one call, marking the newest
message read (and with it every earlier one), without a typing indicator that the reply
would have ended at once; its first reply is marked read within the delay however long
the burst goes on.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any
from dataclasses import dataclass

import anyio

from chatkernel.core.outbound.ratelimit import RateLimiter, Sleep
from chatkernel.sdk.channel import Channel, RateLimit
from chatkernel.sdk.models import Account, Route
from chatkernel.sdk.channel import ReadReceipts

log = logging.getLogger("chatkernel.indicators")

#: The most one indicator call may take before the next one is served.
CALL_TIMEOUT = 5.0
#: The longest a skipped indicator of a running turn waits before it is tried again.
RETRY_SECONDS = 1.0


def has_indicator(account: Account) -> bool:
    """Whether the account's channel implements a typing indicator."""
    channel = account.channel
    return channel is not None and type(channel).indicate is not Channel.indicate


def marks_read(account: Account) -> bool:
    """Whether the account's channel marks messages read apart from its indicator."""
    return isinstance(account.channel, ReadReceipts)


@dataclass(slots=True)
class _Entry:
    account: Account
    due: float
    #: An indicator call was made for the turn (its messages are marked read).
    shown: bool = False
    #: When the read mark the session's earlier quick turns left was due (None: none
    #: was pending): this turn's, if it is quick too, is due no later.
    read_due: float | None = None


@dataclass(slots=True)
class _Waiting:
    account: Account
    route: Route
    due: float


@dataclass(slots=True)
class _Unread:
    account: Account
    due: float


class Indicators:
    """Keeps the indicator of every running turn alive."""

    def __init__(self, route: Callable[[str], Awaitable[Route | None]],
                 clock: Callable[[], float] = time.monotonic, *,
                 replying: Callable[[str], bool] = lambda session_key: False,
                 sleep: Sleep = anyio.sleep) -> None:
        """``route(session_key)``: where a session's indicator goes; ``replying(
        session_key)``: whether a reply of the session is queued or being sent;
        ``clock`` and ``sleep``: the time the refreshes and the indicator's rate limits
        are counted in (see chatkernel.core.outbound.ratelimit.Pacing)."""
        self._route = route
        self._clock = clock
        self._sleep = sleep
        self._replying = replying
        # account key -> (the limits it was built from, the limiter of its calls)
        self._limiters: dict[str, tuple[dict[str, RateLimit], RateLimiter]] = {}
        self._active: dict[str, _Entry] = {}
        # session key (or, without one, the route) -> the indicator of a waiting message
        self._waiting: dict[object, _Waiting] = {}
        # session key -> the read mark its quick turns left (channels with mark_read)
        self._unread: dict[str, _Unread] = {}
        # (due, tie-breaker, item, key) for each of the above, earliest first. An item
        # replaced or removed from its table (or given a new due) leaves its row behind,
        # skipped when it comes up (see _current).
        self._due: list[tuple[float, int, _Entry | _Waiting | _Unread, object]] = []
        self._order = itertools.count()
        # Something came due sooner than the refresher's rest ends (or while it was at
        # work): it looks again before it rests.
        self._nudged = False
        # The refresher's rest, cancelled to wake it (None: it is at work, not resting).
        self._rest_scope: anyio.CancelScope | None = None
        # When the resting refresher wakes by itself (None: it is at work, not resting):
        # what is due by then needs no wake-up.
        self._resting_until: float | None = None

    def _schedule(self, item: _Entry | _Waiting | _Unread, key: object) -> None:
        """Put ``item`` (in its table under ``key``) in line for its due time."""
        heapq.heappush(self._due, (item.due, next(self._order), item, key))

    def _current(self, due: float, item: _Entry | _Waiting | _Unread, key: object) -> bool:
        """Whether a row of the heap still stands for its item: the item is in its table
        and due when the row says."""
        if isinstance(item, _Entry):
            table: dict[Any, Any] = self._active
        elif isinstance(item, _Waiting):
            table = self._waiting
        else:
            table = self._unread
        return table.get(key) is item and item.due == due

    def _nudge(self, due: float) -> None:
        """Wake the refresher for something due at ``due``, unless it wakes by then."""
        if self._resting_until is None or due < self._resting_until:
            self._nudged = True
            if self._rest_scope is not None:
                self._rest_scope.cancel()

    def begin(self, account: Account, session_key: str) -> None:
        """A turn started: indicate now (or after the channel's ``indicator_delay``) and
        keep refreshing until :meth:`end`."""
        if has_indicator(account):
            delay = account.channel.limits.indicator_delay  # type: ignore[union-attr]
            due = self._clock() + delay
            # The turn shows its own, not later than its waiting message's or its read
            # mark's would have been.
            unread = self._unread.pop(session_key, None)
            for held in (self._waiting.pop(session_key, None), unread):
                if held is not None:
                    due = min(due, held.due)
            entry = self._active[session_key] = _Entry(
                account, due, read_due=unread.due if unread is not None else None)
            self._schedule(entry, session_key)
            self._nudge(due)

    def end(self, session_key: str) -> None:
        """The turn ended. One that showed no indicator yet leaves its read mark, where the
        channel makes one, due ``read_mark_delay`` after its reply (not before its
        indicator would have been), or when the session's pending one was."""
        entry = self._active.pop(session_key, None)
        if entry is not None and not entry.shown and marks_read(entry.account):
            if entry.read_due is not None:
                due = entry.read_due
            else:
                delay = entry.account.channel.limits.read_mark_delay  # type: ignore
                due = max(entry.due, self._clock() + delay)
            unread = self._unread[session_key] = _Unread(entry.account, due)
            self._schedule(unread, session_key)
            self._nudge(due)

    def once(self, account: Account, route: Route, session_key: str | None = None) -> None:
        """Indicate once (a message waits for its turn), after the channel's
        ``indicator_delay``. Calls for one session (``session_key``, else the route)
        before it is made are one call; the session's turn starting (:meth:`begin`)
        takes its place."""
        if has_indicator(account):
            key = session_key if session_key is not None else \
                (account.key, route.chat_id, route.thread_id)
            if key not in self._waiting and key not in self._active:
                delay = account.channel.limits.indicator_delay  # type: ignore[union-attr]
                due = self._clock() + delay
                waiting = self._waiting[key] = _Waiting(account, route, due)
                self._schedule(waiting, key)
                self._nudge(due)

    async def run(self) -> None:
        """The refresher: runs until cancelled."""
        due = self._due
        while True:
            # Cleared before the work: a begin() during an await below makes us look again.
            self._nudged = False
            now = self._clock()
            while due and due[0][0] <= now:
                when, _, item, key = heapq.heappop(due)
                if self._current(when, item, key):
                    await self._serve(item, key, now)
            self._resting_until = due[0][0] if due else math.inf
            try:
                await self._rest(self._resting_until - self._clock())
            finally:
                self._resting_until = None

    async def _serve(self, item: _Entry | _Waiting | _Unread, key: Any, now: float) -> None:
        """What came due: a waiting message's indicator, a read mark, a running turn's
        refresh."""
        if isinstance(item, _Waiting):
            del self._waiting[key]
            if not (isinstance(key, str) and self._skipped(item.account, key)):
                await self._indicate(item.account, item.route)
        elif isinstance(item, _Unread):
            del self._unread[key]
            route = await self._route(key)
            if route is None:
                return
            wait = await self._indicate(item.account, route, read=True)
            if wait > 0 and key not in self._active and key not in self._unread:
                item.due = now + min(wait, RETRY_SECONDS)  # its window is full
                self._unread[key] = item
                self._schedule(item, key)
        else:
            item.due = await self._refresh(key, item, now)
            if self._active.get(key) is item:  # the turn goes on
                self._schedule(item, key)

    async def _rest(self, delay: float) -> None:
        """Until a begin() or once() wakes the refresher, or ``delay`` seconds of its
        clock have passed. One sleep in a cancel scope that a wake-up cancels: a turn's
        read mark or indicator costs the refresher no task and no cancellation of its
        own (a wake-up is needed only when something comes due before the rest ends)."""
        if self._nudged:
            return
        with anyio.CancelScope() as scope:
            self._rest_scope = scope
            try:
                if math.isinf(delay):
                    await anyio.sleep_forever()
                else:
                    await self._sleep(max(0.0, delay))
            finally:
                self._rest_scope = None

    async def _refresh(self, key: str, entry: _Entry, now: float) -> float:
        """Indicate for a running turn (unless skipped); returns when to next."""
        limits = entry.account.channel.limits  # type: ignore[union-attr]
        if self._skipped(entry.account, key):
            return now + min(RETRY_SECONDS, limits.indicator_interval)
        route = await self._route(key)
        if route is None or key not in self._active:
            return now + limits.indicator_interval
        # The first call of a turn whose reply is already on its way only marks the
        # messages read, where the channel can: the reply would end the typing at once.
        read = not entry.shown and marks_read(entry.account) and self._replying(key)
        wait = await self._indicate(entry.account, route, read=read)
        if wait > 0:  # its window is full: as soon as a slot frees
            return now + min(wait, RETRY_SECONDS, limits.indicator_interval)
        entry.shown = True
        return now + limits.indicator_interval

    def _skipped(self, account: Account, session_key: str) -> bool:
        """Whether the session's indicator is skipped now: its reply is on its way. Only
        where the calls are limited: elsewhere the call may carry more than the
        indicator (WhatsApp's marks the message read), and costs no one a slot."""
        return self.limiter(account) is not None and self._replying(session_key)

    def limiter(self, account: Account) -> RateLimiter | None:
        """The limiter of the account's indicator calls (None: the platform sets none)."""
        rates = account.channel.limits.indicator_rates  # type: ignore[union-attr]
        if not rates:
            return None
        known = self._limiters.get(account.key)
        if known is None or known[0] is not rates:  # first use, or a new channel object
            known = self._limiters[account.key] = (rates, RateLimiter(
                rates, clock=self._clock, sleep=self._sleep))
        return known[1]

    async def _indicate(self, account: Account, route: Route, *, read: bool = False) -> float:
        """Make the indicator call (``read``: the read mark alone) if its window has room;
        returns 0, or the seconds until it would have (the call was skipped)."""
        limiter = self.limiter(account)
        chat, group = route.chat_id, route.is_group
        if limiter is not None and not limiter.try_acquire(chat, is_group=group, hold=True):
            return max(limiter.delay(chat, is_group=group), 0.01)
        try:
            with anyio.fail_after(CALL_TIMEOUT):
                channel = account.channel
                await (channel.mark_read if read else channel.indicate)(  # type: ignore
                    route)
        except Exception as exc:  # TimeoutError included: a slow indicator is only noise
            log.debug("%s failed on %s: %s", "read mark" if read else "typing indicator",
                      account.key, exc)
            retry_after = getattr(exc, "retry_after", None)
            if limiter is not None and retry_after:
                limiter.penalize(float(retry_after))
        finally:
            if limiter is not None:
                limiter.release(chat, is_group=group)
        return 0.0
