"""Outbound rate limits: pace sends so the platform never has to refuse one.

A channel declares its limits as ``RateLimit(count, per)`` by scope
(``ChannelLimits.rates``): ``"account"`` (the bot, the number, the app),
``"chat"`` (one conversation) and ``"group"`` (a group conversation, on top of
its chat limit). Each limit is read strictly: *at most ``count`` sends in any
rolling window of ``per`` seconds*. That is a sliding log of the last
``count`` sends, not a token bucket: a bucket of capacity N refilled at N/s
lets 2N through in the first second (a full bucket, then the refill), and
platforms that count sends over a rolling second answer the second N with
429s.

The platform counts a send when the request arrives, which the sender cannot
see: somewhere between the moment the request left and the moment its answer
came back. So the outbound sender *holds* each send's slot (``hold=True``)
from the moment the request leaves until its answer has arrived
(:meth:`RateLimiter.release`), and the slot counts for ``per`` seconds after
that. Then the limit holds whatever each trip takes: of any ``count + 1``
sends the platform counted within ``per`` seconds, the one that left last
left before it arrived, so before the window ended, and every other one had
arrived after the window began, so answered after it, less than ``per``
before the last one left: all ``count`` of them still held their slots then,
and the limiter would not have let it go. (docs/outbound.md, "Rate limits",
has the argument at length.) The price is one round trip per slot: at most
``count`` sends per ``per`` plus a round trip.

A send acquired without ``hold`` counts from the moment it was acquired, as
if it arrived there at once; ``margin`` seconds (0 by default) widen every
window, for callers that count that way.

One :class:`RateLimiter` serves one account. The outbound sender calls
:meth:`RateLimiter.acquire` (or :meth:`RateLimiter.try_acquire`) with
``hold=True`` before every request and :meth:`RateLimiter.release` after it,
:meth:`RateLimiter.penalize` when the platform still answers 429 with a
``retry_after``, and :meth:`RateLimiter.restore` at start, with the sends the
outbox recorded before a restart.
"""

from __future__ import annotations

import heapq
import math
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from chatkernel.sdk.channel import ChannelLimits, RateLimit

__all__ = ["DEFAULT_MARGIN", "REAL_TIME", "SCOPES", "Pacing", "RateLimiter", "SlidingWindow",
           "parse_margin", "parse_rate"]

#: The scopes a limit can apply to.
SCOPES = ("account", "chat", "group")
#: Seconds added to every window by default: none. A held send counts until its
#: answer arrived, which covers its trip whatever it took (see the module's
#: docstring); a margin only widens windows, at a cost in throughput.
DEFAULT_MARGIN = 0.0

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[Any]]


@dataclass(frozen=True)
class Pacing:
    """The time a kernel's rate limits are counted in: ``clock`` (monotonic seconds)
    and ``sleep`` (waits that many seconds of that clock). Real time by default
    (:data:`REAL_TIME`); a test gives the kernel and its fake platform one faster clock
    (chatkernel.testing.clock.ScaledClock), so both enforce the platform's real
    windows in a fraction of the time."""

    clock: Clock = time.monotonic
    sleep: Sleep = anyio.sleep


#: Rate limits counted in real time.
REAL_TIME = Pacing()


def _limit_problem(count: Any, per: Any) -> str | None:
    """What is wrong with a (count, per) pair, or None when it is a usable limit."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        return f"count must be a whole number >= 1, got {count!r}"
    if isinstance(per, bool) or not isinstance(per, (int, float)) or not (
            per > 0 and math.isfinite(per)):
        return f"per must be a number of seconds > 0, got {per!r}"
    return None


def _check_margin(margin: Any) -> float:
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not (
            margin >= 0 and math.isfinite(margin)):
        raise ValueError(f"rate limit 'margin': {margin!r} is not a number of seconds >= 0")
    return float(margin)


def _check_limit(limit: RateLimit, scope: str = "rate") -> RateLimit:
    problem = _limit_problem(limit.count, limit.per)
    if problem:
        raise ValueError(f"rate limit {scope!r}: {problem}")
    return limit


class SlidingWindow:
    """The sends that still count against one limit.

    A send counts while it is held (:meth:`take` until :meth:`release`: the
    request is out and its answer not back) and for ``span`` seconds after it
    ended (``span`` is ``per + margin``); :meth:`record` counts one that ended
    at once. A new send at ``now`` is allowed when fewer than ``count`` sends
    still count. The ends are kept in the order they happened, and only the
    last ``count`` of them can matter, so the log is a deque of at most
    ``count`` times, plus the number held. Windows are half-open: a send
    exactly ``span`` seconds after an end is allowed.
    """

    __slots__ = ("limit", "span", "_times", "held")

    def __init__(self, limit: RateLimit, margin: float = 0.0) -> None:
        self.limit = _check_limit(limit)
        #: The window actually enforced: ``per`` plus the safety margin.
        self.span = limit.per + _check_margin(margin)
        self._times: deque[float] = deque(maxlen=limit.count)
        #: Sends taken and not released yet: they count until they are.
        self.held = 0

    def delay(self, now: float) -> float:
        """Seconds until a send is allowed: 0 when a slot is free at ``now``, inf when
        every slot is held (only a :meth:`release` can free one)."""
        times = self._times
        # How many of the ended sends must leave the window first (the oldest ones).
        excess = self.held + len(times) - self.limit.count
        if excess < 0:
            return 0.0
        if excess >= len(times):
            return math.inf
        wait = times[excess] + self.span - now
        return wait if wait > 0 else 0.0

    def record(self, now: float) -> None:
        """Count a send that ended at ``now`` (the deque forgets what no longer matters).

        The ends are appended as they happen, so the deque stays in time order;
        one that is pushed out was in the window no longer (fewer than ``count``
        sends count when one is allowed)."""
        self._times.append(now)

    def take(self) -> None:
        """Count a send that is going out now, until :meth:`release`."""
        self.held += 1

    def release(self, now: float, reached: bool = True) -> None:
        """End a send taken with :meth:`take`: its answer arrived at ``now``. With
        ``reached=False`` (the request never left: a refused connection) it
        stops counting at once."""
        if self.held:
            self.held -= 1
            if reached:
                self._times.append(now)

    def restore(self, ends: Iterable[float]) -> None:
        """Count sends that ended at ``ends`` (times on this window's clock, in any order)."""
        merged = sorted([*self._times, *ends])
        self._times = deque(merged[-self.limit.count:], maxlen=self.limit.count)

    def idle_at(self) -> float:
        """When this window stops mattering: ``span`` after its newest end (-inf if
        empty; inf while a send is held)."""
        if self.held:
            return math.inf
        return self._times[-1] + self.span if self._times else -math.inf

    def __len__(self) -> int:
        """The sends it remembers: the held ones and the last ``count`` ends."""
        return len(self._times) + self.held

    def __repr__(self) -> str:
        return (f"SlidingWindow({self.limit.count}/{self.span}s, {len(self._times)} recent, "
                f"{self.held} held)")


class _ChatState:
    """One chat's windows, its 429 block, and the lock that keeps its senders in line."""

    __slots__ = ("window", "group", "blocked_until", "lock", "users", "scheduled")

    def __init__(self, window: SlidingWindow | None) -> None:
        self.window = window
        self.group: SlidingWindow | None = None  # created on the first group send
        self.blocked_until = -math.inf
        # Serializes this chat's senders while they wait for the chat's own slot,
        # so that wait never involves the account-wide lock. Made on first need:
        # a send that finds every slot free never takes it.
        self.lock: anyio.Lock | None = None
        self.users = 0  # acquires in flight: a state in use is never pruned
        self.scheduled = False  # whether it has its (one) entry in the prune heap

    def holding(self) -> bool:
        """Whether a send to this chat is held (its state must stay until released)."""
        return bool((self.window is not None and self.window.held)
                    or (self.group is not None and self.group.held))

    def idle_at(self) -> float:
        idle = self.blocked_until
        if self.window is not None:
            idle = max(idle, self.window.idle_at())
        if self.group is not None:
            idle = max(idle, self.group.idle_at())
        return idle


class RateLimiter:
    """Paces one account's sends against its account, chat and group limits.

    ``rates`` maps a scope (``"account"``, ``"chat"``, ``"group"``) to its
    :class:`RateLimit`; a missing scope is unlimited. ``margin`` seconds are
    added to every window (see :data:`DEFAULT_MARGIN`). ``clock`` (default
    :func:`time.monotonic`) and ``sleep`` (default :func:`anyio.sleep`) are
    injectable so tests can run on virtual time.

    Waiting for one chat's window never holds up other chats: a sender first
    waits for its chat (and group) slot holding only that chat's lock, then
    queues for the account slot. The account queue is first come, first
    served, so no chat starves. Per-chat state is dropped once its windows
    and any 429 block have expired and nothing to it is held, so memory
    follows the chats sent to in the last ``per`` seconds (the longest one),
    not every chat ever seen.
    """

    def __init__(self, rates: Mapping[str, RateLimit] | None = None, *,
                 margin: float = DEFAULT_MARGIN, clock: Clock = time.monotonic,
                 sleep: Sleep = anyio.sleep) -> None:
        rates = dict(rates or {})
        for scope, limit in rates.items():
            if scope not in SCOPES:
                raise ValueError(f"unknown rate limit scope {scope!r} "
                                 f"(expected one of {', '.join(SCOPES)})")
            _check_limit(limit, scope)
        #: The limits in force, by scope.
        self.rates: dict[str, RateLimit] = rates
        #: Seconds added to every window.
        self.margin = _check_margin(margin)
        self._clock = clock
        self._sleep = sleep
        self._account = (SlidingWindow(rates["account"], margin) if "account" in rates
                         else None)
        self._chat_limit = rates.get("chat")
        self._group_limit = rates.get("group")
        # No limit in any scope (a channel without platform limits, like the web chat):
        # a send needs no per-chat state unless a 429 block (penalize) gave it one.
        self._unlimited = not rates
        self._account_blocked_until = -math.inf
        # Held only by the sender at the head of the account queue; anyio's Lock
        # hands over to its waiters in arrival order, which makes the queue FIFO.
        self._account_lock = anyio.Lock(fast_acquire=True)
        self._chats: dict[str, _ChatState] = {}
        # (time a chat's state may become idle, chat_id): a min-heap with one
        # entry per idle state, so pruning only looks at states that may have
        # expired, and the heap is never larger than the chats tracked.
        self._expiries: list[tuple[float, str]] = []
        # Set by the next release, for senders that found every slot held.
        self._released: anyio.Event | None = None

    @classmethod
    def from_limits(cls, rates: Mapping[str, RateLimit] | ChannelLimits,
                    overrides: Mapping[str, Any] | None = None, *,
                    margin: float = DEFAULT_MARGIN, clock: Clock = time.monotonic,
                    sleep: Sleep = anyio.sleep) -> "RateLimiter":
        """A limiter for a channel's declared ``rates`` with the config's ``overrides``.

        ``overrides`` maps a scope to a rate in either form a TOML file can
        hold: ``{"count": 20, "per": 1.0}`` or a string ``"20/s"``, ``"20/min"``,
        ``"1/6s"`` (see :func:`parse_rate`); ``"off"`` removes the scope's limit.
        The key ``margin`` (seconds, or a string such as ``"50ms"``) replaces
        the ``margin`` argument. Raises ValueError naming the scope and the
        value when one is invalid.
        """
        merged = dict(rates.rates if isinstance(rates, ChannelLimits) else rates)
        for scope, value in (overrides or {}).items():
            if scope == "margin":
                margin = parse_margin(value)
                continue
            if scope not in SCOPES:
                raise ValueError(f"rate limit {scope!r}: unknown scope "
                                 f"(expected one of {', '.join(SCOPES)}), value {value!r}")
            limit = parse_rate(value, scope=scope)
            if limit is None:
                merged.pop(scope, None)
            else:
                merged[scope] = limit
        return cls(merged, margin=margin, clock=clock, sleep=sleep)

    @property
    def longest_window(self) -> float:
        """The longest window in force, margin included (0 without limits): how far
        back a send can still matter."""
        if not self.rates:
            return 0.0
        return max(limit.per for limit in self.rates.values()) + self.margin

    # -- sending -------------------------------------------------------------------------

    async def acquire(self, chat_id: str, *, is_group: bool = False,
                      hold: bool = False) -> float:
        """Wait until a send to ``chat_id`` is allowed, and count it; returns the seconds waited.

        The send is allowed when the account window, the chat's window and,
        for a group chat, the group window all have a free slot, and no 429
        block (:meth:`penalize`) is in force. It is counted in all of them at
        once, right after the last check. Call it immediately before the send.
        ``hold=True``: the send counts until :meth:`release` (call it once the
        answer arrived, with the same ``chat_id`` and ``is_group``), then for a
        window after that; otherwise it counts for a window from now.
        """
        start = self._clock()
        if self.try_acquire(chat_id, is_group=is_group, hold=hold):
            # The common case: nobody queued and every slot free. Nothing to wait
            # for, so no lock either.
            return 0.0
        state = self._chats[chat_id]
        state.users += 1
        if state.lock is None:
            state.lock = anyio.Lock(fast_acquire=True)
        try:
            async with state.lock:
                while True:
                    # The chat's own slot first, without the account lock: a slow
                    # chat waits here while other chats keep sending.
                    while (wait := self._chat_delay(state, is_group, self._clock())) > 0:
                        await self._pause(wait)
                    async with self._account_lock:
                        while True:
                            now = self._clock()
                            if self._chat_delay(state, is_group, now) > 0:
                                # A 429 blocked this chat while it queued: give up
                                # the head of the queue rather than stall it.
                                break
                            wait = self._account_delay(now)
                            if wait <= 0:
                                # No await between the checks above and these
                                # records: no other sender can take the slot.
                                self._record(state, is_group, now, hold)
                                return now - start
                            await self._pause(wait)
        finally:
            state.users -= 1
            if state.users == 0:
                self._schedule(chat_id, state)
            self.prune()

    def try_acquire(self, chat_id: str, *, is_group: bool = False, hold: bool = False) -> bool:
        """Count a send to ``chat_id`` if it is allowed right now, without waiting.

        True when nobody is queued for the chat or the account and every slot
        is free (the send is counted, as :meth:`acquire` does, ``hold``
        included); False, with nothing counted, when :meth:`acquire` would
        have to wait.
        """
        now = self._clock()
        if self._unlimited and chat_id not in self._chats and \
                self._account_blocked_until <= now and not self._account_lock.locked():
            return True  # nothing to count and nothing blocked
        state = self._state(chat_id, is_group)
        if self._free(state, is_group, now):
            # No await between the checks and the records: nobody can take the slot.
            self._record(state, is_group, now, hold)
            self._schedule(chat_id, state)
            self.prune()
            return True
        if not state.users:
            self._schedule(chat_id, state)  # a state made here is pruned in its time
        return False

    def release(self, chat_id: str, *, is_group: bool = False, reached: bool = True) -> None:
        """End a send acquired with ``hold=True``: its answer (or its failure) is in.

        It goes on counting for a window from now, unless ``reached=False``
        says the request never left (the connection was refused before it was
        written): then it stops counting at once. Pass the ``chat_id`` and
        ``is_group`` it was acquired with.
        """
        if self._unlimited:
            return  # nothing was counted
        now = self._clock()
        if self._account is not None:
            self._account.release(now, reached)
        state = self._chats.get(chat_id)
        if state is not None:
            if state.window is not None:
                state.window.release(now, reached)
            if is_group and state.group is not None:
                state.group.release(now, reached)
            if not state.users and not state.scheduled:
                self._schedule(chat_id, state)
        released = self._released
        if released is not None:
            self._released = None
            released.set()

    def is_free(self, chat_id: str, *, is_group: bool = False) -> bool:
        """Whether :meth:`try_acquire` would succeed right now (nothing is recorded)."""
        state = self._chats.get(chat_id)
        now = self._clock()
        if state is None:
            return not self._account_lock.locked() and self._account_delay(now) <= 0
        return self._free(state, is_group, now)

    def penalize(self, seconds: float, chat_id: str | None = None) -> None:
        """Block sends for ``seconds`` after the platform answered 429 with ``retry_after``.

        Blocks ``chat_id``, or the whole account when it is None, until now +
        ``seconds``; a longer block already in force is kept. ``seconds`` <= 0
        blocks nothing. The refused send stays counted in the windows: a
        platform that refused it may still have counted it.
        """
        if not math.isfinite(seconds):
            raise ValueError(f"penalize: seconds must be a finite number, got {seconds!r}")
        if seconds <= 0:
            return
        until = self._clock() + seconds
        if chat_id is None:
            self._account_blocked_until = max(self._account_blocked_until, until)
            return
        state = self._chats.get(chat_id)
        if state is None:
            state = self._chats[chat_id] = _ChatState(
                SlidingWindow(self._chat_limit, self.margin) if self._chat_limit else None)
        state.blocked_until = max(state.blocked_until, until)
        if state.users == 0:
            self._schedule(chat_id, state)

    def restore(self, sends: Iterable[tuple[float, str, bool]]) -> None:
        """Count sends made before this limiter existed (by the gateway before a restart).

        ``sends`` are ``(seconds_ago, chat_id, is_group)``: how long ago each
        one ended (its answer arrived), to which chat. Those that can still
        matter count as if this limiter had seen them, so a restart paces as the
        running gateway would have.
        """
        now = self._clock()
        horizon = self.longest_window
        account: list[float] = []
        chats: dict[str, tuple[list[float], list[float]]] = {}
        for ago, chat_id, is_group in sends:
            if self._unlimited or ago >= horizon:
                continue
            end = now - max(ago, 0.0)
            account.append(end)
            ends, group_ends = chats.setdefault(chat_id, ([], []))
            ends.append(end)
            if is_group:
                group_ends.append(end)
        if self._account is not None and account:
            self._account.restore(account)
        for chat_id, (ends, group_ends) in chats.items():
            if self._chat_limit is None and not (group_ends and self._group_limit):
                continue  # nothing per chat to count
            state = self._state(chat_id, bool(group_ends))
            if state.window is not None:
                state.window.restore(ends)
            if state.group is not None and group_ends:
                state.group.restore(group_ends)
            if not state.users:
                self._schedule(chat_id, state)

    def delay(self, chat_id: str, *, is_group: bool = False) -> float:
        """Seconds a send to ``chat_id`` would wait now if nobody else were queued
        (inf while every slot it needs is held by a send in flight)."""
        now = self._clock()
        account = self._account_delay(now)
        state = self._chats.get(chat_id)
        if state is None:
            return account
        return max(account, self._chat_delay(state, is_group, now))

    # -- memory --------------------------------------------------------------------------

    def prune(self) -> int:
        """Forget the chats whose windows and 429 blocks have all expired; returns how many.

        Called after every acquire. Cheap: it only looks at heap entries whose
        time has come, and a chat still active is looked at about once per
        window, not once per send.
        """
        now = self._clock()
        dropped = 0
        expiries, chats = self._expiries, self._chats
        while expiries and expiries[0][0] <= now:
            _, chat_id = heapq.heappop(expiries)
            state = chats[chat_id]  # only a pop here removes a state: it is there
            if state.users or state.holding():
                # The last acquire to finish, or the last release, schedules it again.
                state.scheduled = False
                continue
            idle = state.idle_at()
            if idle <= now:
                del chats[chat_id]
                dropped += 1
            else:  # used again since it was scheduled: look again when that has expired
                heapq.heappush(expiries, (idle, chat_id))
        return dropped

    @property
    def tracked_chats(self) -> int:
        """How many chats have state right now (the memory the limiter holds)."""
        return len(self._chats)

    # -- internals -----------------------------------------------------------------------

    def _state(self, chat_id: str, is_group: bool) -> _ChatState:
        state = self._chats.get(chat_id)
        if state is None:
            state = self._chats[chat_id] = _ChatState(
                SlidingWindow(self._chat_limit, self.margin) if self._chat_limit else None)
        if is_group and state.group is None and self._group_limit is not None:
            state.group = SlidingWindow(self._group_limit, self.margin)
        return state

    def _free(self, state: _ChatState, is_group: bool, now: float) -> bool:
        """Nobody queued for the chat or the account, and every slot free at ``now``."""
        return (not state.users and not self._account_lock.locked()
                and self._chat_delay(state, is_group, now) <= 0
                and self._account_delay(now) <= 0)

    def _schedule(self, chat_id: str, state: _ChatState) -> None:
        """Give an idle state its entry in the prune heap, unless it has one (a state
        with a send held gets it when the send is released)."""
        if not state.scheduled and not state.holding():
            state.scheduled = True
            heapq.heappush(self._expiries, (state.idle_at(), chat_id))

    def _record(self, state: _ChatState, is_group: bool, now: float, hold: bool) -> None:
        group = state.group if is_group else None
        for window in (self._account, state.window, group):
            if window is not None:
                if hold:
                    window.take()
                else:
                    window.record(now)

    async def _pause(self, wait: float) -> None:
        """Wait ``wait`` seconds; an infinite wait lasts until the next release."""
        if wait < math.inf:
            await self._sleep(wait)
            return
        released = self._released
        if released is None:
            released = self._released = anyio.Event()
        await released.wait()

    def _account_delay(self, now: float) -> float:
        wait = self._account_blocked_until - now
        if self._account is not None:
            wait = max(wait, self._account.delay(now))
        return wait if wait > 0 else 0.0

    @staticmethod
    def _chat_delay(state: _ChatState, is_group: bool, now: float) -> float:
        wait = state.blocked_until - now
        if state.window is not None:
            wait = max(wait, state.window.delay(now))
        if is_group and state.group is not None:
            wait = max(wait, state.group.delay(now))
        return wait if wait > 0 else 0.0

    def __repr__(self) -> str:
        rates = ", ".join(f"{scope}={limit.count}/{limit.per}s"
                          for scope, limit in self.rates.items())
        return (f"RateLimiter({rates or 'unlimited'}, margin {self.margin}s, "
                f"{len(self._chats)} chats tracked)")


# -- parsing rates from config ------------------------------------------------------------

_UNITS = {
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hour": 3600.0, "hours": 3600.0,
}
# "30/s", "20/min", "1/6s", "20 / 1.5 min": a count, a slash, an optional number, a unit.
_RATE = re.compile(r"\s*(\d+)\s*/\s*(\d+(?:\.\d*)?|\.\d+)?\s*([a-z]+)\s*")
_OFF = {"off", "none", "unlimited"}


def parse_rate(value: Any, *, scope: str = "rate") -> RateLimit | None:
    """A :class:`RateLimit` from a config value; None for ``"off"`` (no limit).

    Accepts a RateLimit, a table ``{count = 20, per = 1.0}``, or a string
    ``"N/s"``, ``"N/min"``, ``"N/h"`` or ``"N/<number><unit>"`` such as
    ``"1/6s"`` or ``"20/2min"``. Raises ValueError naming ``scope`` and the value.
    """
    expected = ("expected a rate such as \"30/s\", \"20/min\", \"1/6s\" or "
                "{count = 30, per = 1.0}, or \"off\"")
    if isinstance(value, RateLimit):
        return _check_limit(value, scope)
    if isinstance(value, Mapping):
        unknown = set(value) - {"count", "per"}
        if unknown or "count" not in value or "per" not in value:
            raise ValueError(f"rate limit {scope!r}: {dict(value)!r} is not a rate; {expected}")
        problem = _limit_problem(value["count"], value["per"])
        if problem:
            raise ValueError(f"rate limit {scope!r}: {dict(value)!r} is not a rate "
                             f"({problem}); {expected}")
        return RateLimit(value["count"], value["per"])
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _OFF:
            return None
        match = _RATE.fullmatch(text)
        if match and match[3] in _UNITS:
            count = int(match[1])
            per = float(match[2]) * _UNITS[match[3]] if match[2] else _UNITS[match[3]]
            if count >= 1 and per > 0 and math.isfinite(per):
                return RateLimit(count, per)
    raise ValueError(f"rate limit {scope!r}: {value!r} is not a rate; {expected}")


_MARGIN = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s)?\s*")


def parse_margin(value: Any) -> float:
    """The ``margin`` of a config: seconds as a number, or a string ``"20ms"`` / ``"0.02s"``.

    Raises ValueError naming ``margin`` and the value.
    """
    if isinstance(value, str):
        match = _MARGIN.fullmatch(value.lower())
        if match:
            return float(match[1]) / (1000.0 if match[2] == "ms" else 1.0)
    elif (not isinstance(value, bool) and isinstance(value, (int, float))
          and value >= 0 and math.isfinite(value)):
        return float(value)
    raise ValueError(f"rate limit 'margin': {value!r} is not a number of seconds >= 0 "
                     "(expected e.g. 0.02 or \"20ms\")")
