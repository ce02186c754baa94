"""Rate-limit buckets a platform announces in its answers' headers, learnt as they come.

The kernel paces an account's sends with the limits its channel declares
(``ChannelLimits.rates``). Some platforms do not publish fixed figures: they say in
every answer how much of a bucket is left and when it refills (Discord's
``X-RateLimit-Bucket``, ``-Limit``, ``-Remaining``, ``-Reset-After``), a bucket being
one route (or a group of routes sharing one) *per major parameter* (the channel, the
guild), and they ask clients never to send on an exhausted bucket. Every request of the
account counts, not only sends: typing, edits, a DM channel opened. :class:`RouteBuckets`
keeps those buckets for one account, on the account's clock:

- :meth:`RouteBuckets.acquire` waits until the route's bucket (for that major parameter)
  has a request left and the account's global limit (``global_limit``, Discord's 50 a
  second) a free slot, and takes it; the returned :class:`BucketSlot` is given the
  answer (:meth:`BucketSlot.learn`), or released without one (:meth:`BucketSlot.release`);
- a route's first answer names its bucket, so routes sharing a bucket share its count
  from then on; a bucket's count only goes down within its window (answers can arrive in
  any order, the lowest ``Remaining`` is the true one) and refills when ``Reset-After``
  has passed;
- a 429 blocks what it names for its ``retry_after``: the bucket, or every request of
  the account when the platform says the limit was its global one.

It sits with the receive loops because the platforms that announce buckets this way are
those with a gateway whose loop calls the same API (Discord's ``GET /gateway/bot``), and
every call of the account, sent or received, counts in one global window.

The buckets are the platform's own count, so they hold across processes: whichever
gateway process sends for the account next reads what is left from the next answer.
The global window counts each request from the moment it leaves until its answer
arrived, and for ``per`` seconds after that (the kernel's rate limiter's argument, in
docs/outbound.md): a request the platform counted is always still in it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import anyio

from chatkernel.sdk.clock import SYSTEM_CLOCK, ChannelClock

__all__ = ["BucketSlot", "RouteBuckets"]

#: Buckets kept before the expired ones are forgotten (one per route and channel).
MAX_BUCKETS = 10_000


@dataclass(slots=True)
class _Bucket:
    limit: int
    remaining: int
    #: When the window ends, on the clock's monotonic time (None: not known yet).
    reset_at: float | None


class BucketSlot:
    """One request's place in its bucket and in the global window: give it the answer's
    headers (:meth:`learn`), or :meth:`release` it when no answer came."""

    __slots__ = ("_buckets", "route", "major", "_open")

    def __init__(self, buckets: "RouteBuckets", route: str, major: str) -> None:
        self._buckets = buckets
        self.route = route
        self.major = major
        self._open = True

    def learn(self, headers: Mapping[str, str], status: int, *,
              retry_after: float | None = None, is_global: bool = False) -> None:
        """The answer came: learn the bucket from its headers; a 429 blocks the bucket
        (or, ``is_global``, the whole account) for ``retry_after`` seconds (default: the
        headers' ``Retry-After`` or ``Reset-After``)."""
        if self._open:
            self._open = False
            self._buckets._learn(self, headers, status, retry_after, is_global)

    def release(self, *, reached: bool = True) -> None:
        """No answer came. ``reached=False``: the request never left (a refused
        connection), so it does not count in the global window either."""
        if self._open:
            self._open = False
            self._buckets._end(reached)


class RouteBuckets:
    """One account's rate-limit buckets, learnt from the platform's headers (see the
    module docstring). ``global_limit``: ``(count, per)``, at most ``count`` requests of
    the account in any ``per`` seconds (None: no global limit). Waits are on ``clock``
    (``context.clock``). The header names are Discord's, which are common; a subclass
    may name its platform's."""

    bucket_header = "X-RateLimit-Bucket"
    limit_header = "X-RateLimit-Limit"
    remaining_header = "X-RateLimit-Remaining"
    reset_after_header = "X-RateLimit-Reset-After"
    global_header = "X-RateLimit-Global"

    def __init__(self, clock: ChannelClock | None = None, *,
                 global_limit: tuple[int, float] | None = None) -> None:
        self.clock = clock or SYSTEM_CLOCK
        self.global_limit = global_limit
        #: route -> the bucket id the platform named for it.
        self.hashes: dict[str, str] = {}
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self._global_ends: deque[float] = deque()
        self._global_held = 0
        self._global_blocked_until = -math.inf
        self._changed = anyio.Event()
        #: Requests that found their bucket or the global window empty and waited.
        self.waits = 0

    # -- taking a slot ----------------------------------------------------------------------

    async def acquire(self, route: str, major: str = "") -> BucketSlot:
        """Wait until ``route`` (for ``major``: the channel or guild in its path) may be
        requested, and take its slot. ``route`` names the route without its parameters
        (``"POST /channels/{channel_id}/messages"``)."""
        waited = False
        while True:
            wait = self.delay(route, major)
            if wait <= 0:
                break
            waited = True
            changed = self._changed
            if math.isinf(wait):
                await changed.wait()  # every slot held: the next answer frees one
            else:
                # The clock's sleep, or an answer that changes what is known, whichever
                # comes first (a 429 can lengthen the wait, an answer shorten it).
                async with anyio.create_task_group() as tg:
                    async def sleep() -> None:
                        await self.clock.sleep(wait)
                        tg.cancel_scope.cancel()

                    async def woken() -> None:
                        await changed.wait()
                        tg.cancel_scope.cancel()

                    tg.start_soon(sleep)
                    tg.start_soon(woken)
        if waited:
            self.waits += 1
        bucket = self._bucket(route, major)
        if bucket is not None:
            bucket.remaining -= 1
        self._global_held += 1
        return BucketSlot(self, route, major)

    def delay(self, route: str, major: str = "") -> float:
        """Seconds until ``route`` may be requested for ``major`` (0: now; inf: every
        global slot is held by a request still waiting for its answer)."""
        now = self.clock.monotonic()
        wait = max(0.0, self._global_blocked_until - now, self._global_delay(now))
        bucket = self._bucket(route, major)
        if bucket is not None:
            if bucket.reset_at is not None and now >= bucket.reset_at:
                bucket.remaining, bucket.reset_at = bucket.limit, None  # a new window
            if bucket.remaining <= 0:
                wait = max(wait, math.inf if bucket.reset_at is None
                           else bucket.reset_at - now)
        return wait

    def _bucket(self, route: str, major: str) -> _Bucket | None:
        return self._buckets.get((self.hashes.get(route, route), major))

    def _global_delay(self, now: float) -> float:
        if self.global_limit is None:
            return 0.0
        count, per = self.global_limit
        ends = self._global_ends
        while ends and ends[0] <= now - per:
            ends.popleft()
        excess = self._global_held + len(ends) - count
        if excess < 0:
            return 0.0
        if excess >= len(ends):
            return math.inf
        return max(0.0, ends[excess] + per - now)

    # -- what an answer says ----------------------------------------------------------------

    def _end(self, reached: bool) -> None:
        self._global_held = max(0, self._global_held - 1)
        if reached and self.global_limit is not None:
            self._global_ends.append(self.clock.monotonic())
        self._wake()

    def _learn(self, slot: BucketSlot, headers: Mapping[str, str], status: int,
               retry_after: float | None, is_global: bool) -> None:
        self._end(True)
        now = self.clock.monotonic()
        name = headers.get(self.bucket_header)
        if name:
            self.hashes[slot.route] = name
        key = (self.hashes.get(slot.route, slot.route), slot.major)
        limit = _number(headers.get(self.limit_header))
        remaining = _number(headers.get(self.remaining_header))
        reset_after = _number(headers.get(self.reset_after_header))
        bucket = self._buckets.get(key)
        if limit is not None and remaining is not None and reset_after is not None:
            reset_at = now + reset_after
            if bucket is None:
                bucket = self._buckets[key] = _Bucket(int(limit), int(remaining), reset_at)
            else:
                bucket.limit = int(limit)
                # Within one window the lowest count is the true one (answers come in any
                # order); a window that ended locally starts again from what this says.
                bucket.remaining = min(bucket.remaining, int(remaining))
                bucket.reset_at = reset_at if bucket.reset_at is None \
                    else max(bucket.reset_at, reset_at)
        if status == 429:
            wait = retry_after if retry_after is not None else \
                _number(headers.get("Retry-After")) or reset_after or 1.0
            if is_global or (headers.get(self.global_header) or "").lower() == "true":
                self._global_blocked_until = max(self._global_blocked_until, now + wait)
            else:
                if bucket is None:
                    bucket = self._buckets[key] = _Bucket(1, 0, now + wait)
                bucket.remaining = 0
                bucket.reset_at = max(bucket.reset_at or now, now + wait)
        if len(self._buckets) > MAX_BUCKETS:
            self._forget(now)
        self._wake()

    def _forget(self, now: float) -> None:
        for key in [k for k, b in self._buckets.items()
                    if b.reset_at is not None and b.reset_at <= now]:
            del self._buckets[key]

    def _wake(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None
