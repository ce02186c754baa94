"""The retry policy for one outbound request (docs/outbound.md, "Retries"), and what a
sender does while its platform cannot be reached.

Retries happen per request, never per multi-step flow: a completed step (an
upload that returned its id) is never repeated. A request is retried only
when repeating it cannot duplicate a message: the platform said 429 (wait
``retry_after``), answered 502/503/504, or the connection failed before the
request was written. A timeout after the request may have reached the
platform is never retried blindly (``SendError.delivery_unknown``), unless the
platform dedupes the request by its key (``Capabilities.idempotent_sends``,
:func:`repeatable_with_key`).

A request refused before it was written (:func:`never_sent`: a refused
connection) is known not to have reached the platform, so its payload is not
failed after the policy's attempts: it waits for the platform (an
:class:`Outage`), up to the policy's ``unreachable_max_age``. So does a payload
whose platform answers that it is down (:func:`platform_down`: 502/503/504, a
429 without a usable ``Retry-After``) once ``attempts`` such answers came in a
row across the account's requests, with no other answer between: one of them
among answers that work is the payload's own error, retried within its
attempts; a run of them is an outage of the whole account.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from chatkernel.core.durations import format_interval, parse_interval
from chatkernel.sdk.models import SendError

if TYPE_CHECKING:
    from chatkernel.core.store.base import OutboxEntry
    from chatkernel.sdk.models import Account

log = logging.getLogger("chatkernel.retry")

T = TypeVar("T")

#: HTTP statuses a request is repeated after: the platform did not act on it.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: The statuses of a platform (or the proxy in front of it) that is not working.
DOWN_STATUSES = frozenset({502, 503, 504})
#: How long a payload the platform could not be reached for waits by default: a day.
UNREACHABLE_MAX_AGE = 24 * 3600.0
#: The shortest wait between two tries of an unreachable platform, whatever the policy
#: says (``base_delay_ms = 0`` must not make a refused connection a busy loop).
MIN_PROBE_DELAY = 0.01


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently to repeat a failed request.

    ``attempts`` counts the first try. The n-th retry waits
    ``base_delay * 2**(n-1)`` (at most ``max_delay``), ±``jitter`` of it, or the
    platform's ``retry_after`` when it gave one (never less).
    ``unreachable_max_age``: how long (seconds, from when it was queued) a
    payload whose requests were refused before they were sent waits for the
    platform before it is reported failed; 0 fails it after ``attempts`` like
    any other retryable error.
    """

    attempts: int = 3
    base_delay: float = 0.5
    max_delay: float = 30.0
    jitter: float = 0.1
    unreachable_max_age: float = UNREACHABLE_MAX_AGE

    def delay(self, retry: int, retry_after: float | None = None,
              rng: Callable[[], float] = random.random) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        if retry_after is not None and retry_after > 0:
            return float(retry_after)  # the platform said how long: exactly that
        # min() before the power would overflow: 2**1100 is no float.
        backoff = min(self.base_delay * 2 ** min(retry - 1, 64), self.max_delay)
        return max(0.0, backoff * (1 + self.jitter * (2 * rng() - 1)))

    @classmethod
    def from_config(cls, data: dict[str, Any] | None, *,
                    base_delay: float = 0.5) -> "RetryPolicy":
        """From a ``[channels.<name>.retry]`` table: ``attempts``, ``base_delay_ms``,
        ``max_delay_ms``, ``jitter`` (a fraction), ``unreachable_max_age`` (an
        interval such as ``"24h"``, ``"90m"``; ``"0"`` never waits). ValueError
        names a bad key."""
        data = dict(data or {})
        known = {"attempts", "base_delay_ms", "max_delay_ms", "jitter", "unreachable_max_age"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown retry setting(s) {', '.join(unknown)} "
                             f"(expected {', '.join(sorted(known))})")
        attempts = data.get("attempts", 3)
        if not isinstance(attempts, int) or attempts < 1:
            raise ValueError(f"retry.attempts must be a whole number of at least 1, "
                             f"not {attempts!r}")
        values = {}
        for key, default in (("base_delay_ms", base_delay * 1000), ("max_delay_ms", 30_000)):
            value = data.get(key, default)
            if not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"retry.{key} must be a number of milliseconds >= 0, "
                                 f"not {value!r}")
            values[key] = float(value) / 1000
        jitter = data.get("jitter", 0.1)
        if not isinstance(jitter, (int, float)) or not 0 <= jitter <= 1:
            raise ValueError(f"retry.jitter must be a fraction between 0 and 1, not {jitter!r}")
        max_age = UNREACHABLE_MAX_AGE
        if "unreachable_max_age" in data:
            try:
                max_age = parse_interval(data["unreachable_max_age"])
            except ValueError as exc:
                raise ValueError(f"retry.unreachable_max_age: {exc}") from None
        return cls(attempts, values["base_delay_ms"], values["max_delay_ms"], float(jitter),
                   max_age)


def format_delay(seconds: float) -> str:
    """``30s``, ``24h``, ``1h30m``; under a second, ``300ms``."""
    return format_interval(seconds) if seconds >= 1 else f"{seconds * 1000:.0f}ms"


def is_retryable(exc: BaseException) -> bool:
    """Whether repeating the request cannot duplicate what it did."""
    if isinstance(exc, SendError):
        return exc.retryable and not exc.delivery_unknown
    return False


def repeatable_with_key(exc: BaseException) -> bool:
    """:func:`is_retryable` for a channel whose platform dedupes sends by key
    (``Capabilities.idempotent_sends``): a request whose answer was lost
    (``delivery_unknown``) may be repeated as well, since the same key cannot make a
    second message."""
    if isinstance(exc, SendError):
        return exc.retryable or exc.delivery_unknown
    return False


def send_key(entry: "OutboxEntry") -> str:
    """The idempotency key of an entry's sends (``OutboundPayload.key``).

    Derived from what the store keeps of the entry, so it is the same on every
    attempt and after a restart: its channel, account and id (unique in a store:
    SQLite's AUTOINCREMENT never reuses one, Redis counts with INCR), and the exact
    time it was queued (both stores read it back bit for bit), so that a new
    database, whose ids start again at 1, makes no key the platform saw before.
    24 hex characters: safe in a URL path, within Discord's 25-character nonce.
    """
    seed = f"{entry.channel}\0{entry.account}\0{entry.id}\0{entry.created_at!r}"
    return hashlib.sha256(seed.encode()).hexdigest()[:24]


def idempotent(account: "Account | None") -> bool:
    """Whether the platform dedupes the account's sends by key (Capabilities.idempotent_sends)."""
    return account is not None and account.channel is not None \
        and account.channel.capabilities.idempotent_sends


def never_sent(exc: BaseException) -> bool:
    """Whether a failed request is known not to have reached the platform: the
    connection failed before the request was written (refused, no route).

    A channel says so with a retryable :class:`SendError` that carries neither an
    HTTP status nor a ``retry_after`` (SendError's contract: retryable means 429,
    502/503/504 or a connection failure before the request was written). An error
    with a ``not_sent`` attribute decides by it instead.
    """
    if not isinstance(exc, SendError):
        return False
    flag = getattr(exc, "not_sent", None)
    if flag is not None:
        return bool(flag)
    return (exc.retryable and not exc.delivery_unknown and exc.status is None
            and exc.retry_after is None)


def platform_down(exc: BaseException) -> bool:
    """Whether a failed request's answer says the platform is not working right now,
    rather than refusing this request: 502, 503 or 504 (a platform's own way of
    saying "unavailable" too), or any other repeatable answer without a usable
    ``retry_after`` (a 429 that does not say how long: not a throttled chat).

    One such answer may be a passing fault; a run of them is an outage
    (:meth:`Outage.unavailable`)."""
    if not isinstance(exc, SendError) or not is_retryable(exc) or never_sent(exc):
        return False
    if exc.status in DOWN_STATUSES:
        return True
    return not (exc.retry_after is not None and exc.retry_after > 0)


def outage_reason(error: SendError | None) -> str:
    """What an outage is, in words, from its last error."""
    if error is not None and not never_sent(error):
        return "the platform is unavailable"
    return "the platform cannot be reached"


async def with_retries(request: Callable[[], Awaitable[T]], policy: RetryPolicy, *,
                       on_retry: Callable[[int, SendError, float], Any] | None = None,
                       hold: Callable[[SendError], Awaitable[Any]] | None = None,
                       holds: Callable[[SendError], bool] = never_sent,
                       retryable: Callable[[BaseException], bool] = is_retryable,
                       sleep: Callable[[float], Awaitable[Any]] = anyio.sleep) -> T:
    """Run ``request`` under the policy; the last error is raised as it was.

    ``on_retry(retry_number, error, delay)`` is called before each wait (for
    metrics, to penalize a rate limiter on a 429, to note that nothing is in
    flight); it may return an awaitable, which is awaited. ``hold(error)``, if
    given, takes over every error ``holds`` recognizes (by default those of
    :func:`never_sent`): it is awaited instead of counting an attempt (it waits,
    or raises to give up), and the request is made again with its attempts
    afresh (what failed before the wait says nothing about after it).
    ``retryable(error)`` says whether an error may be repeated within the attempts
    (:func:`is_retryable`; :func:`repeatable_with_key` for idempotent sends).
    """
    attempt = 1
    while True:
        try:
            return await request()
        except SendError as exc:
            if hold is not None and holds(exc):
                await hold(exc)
                attempt = 1
                continue
            if not retryable(exc) or attempt >= policy.attempts:
                raise
            delay = policy.delay(attempt, exc.retry_after)
            if on_retry is not None:
                result = on_retry(attempt, exc, delay)
                if inspect.isawaitable(result):
                    await result
            log.info("send failed (%s); retry %d/%d in %.2fs", exc, attempt,
                     policy.attempts - 1, delay)
            await sleep(delay)
            attempt += 1


class Outage:
    """One account's platform while it is down, and who tries it next.

    A request refused before it was written did not reach the platform, and
    neither will the account's other requests for now: that begins an outage at
    once (:meth:`refused`). So does a run of answers saying the platform is down
    (:func:`platform_down`): the policy's ``attempts`` of them in a row across
    the account's requests, with no other answer between (:meth:`unavailable`),
    so that no payload uses up its attempts while nothing of the account gets
    through. While the outage lasts the account's senders wait here
    (:meth:`turn`) instead of each retrying on its own: one of them at a time
    sends its payload as the probe, after a backoff that doubles from the
    policy's ``base_delay`` up to its ``max_delay`` (or the platform's
    ``retry_after``, if longer); the first request that gets an answer other
    than "down" ends the outage, and everyone goes on (the rate limiter paces
    them). The outage is logged once when it begins and once when it ends, with
    counts, never per payload or per attempt.
    """

    def __init__(self, name: str, policy: RetryPolicy, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep_until: Callable[[float], Awaitable[None]] | None = None,
                 on_change: Callable[[SendError | None], None] | None = None) -> None:
        self.name = name
        self.policy = policy
        self._clock = clock
        #: Returns once ``clock`` reads the deadline given (a test's manual clock's);
        #: None: the deadline is that many seconds of real time away.
        self._sleep_until = sleep_until
        #: Told when the outage begins (with its first refusal) and ends (None): the
        #: account's health shows it meanwhile.
        self._on_change = on_change
        #: When it began (on ``clock``), or None while the platform is reachable.
        self.since: float | None = None
        self._tries = 0  # probes refused in this outage
        self._next_try = -math.inf
        self._probing = False
        self._changed: anyio.Event | None = None
        self._held: set[Any] = set()  # payloads that waited in this outage
        self._refused = 0
        self._down_in_a_row = 0  # platform_down answers since the last other answer
        #: The last refusal (what a payload that gives up waiting reports).
        self.last_error: SendError | None = None

    @property
    def active(self) -> bool:
        """Whether the platform is known to be unreachable right now."""
        return self.since is not None

    @property
    def tries(self) -> int:
        """The tries of the platform this outage counts so far: the refusal that began
        it, then each probe refused (0 while the platform is reachable)."""
        return self._tries if self.since is not None else 0

    def refused(self, error: SendError, key: Any, *, probe: bool) -> None:
        """A request for payload ``key`` was refused before it was sent.

        Begins the outage (logged) or, for the probe, schedules the next one
        after a longer backoff; a refusal of a request that left before the
        outage began changes nothing else."""
        self._fault(error, key, probe=probe, begins=True)

    def unavailable(self, error: SendError, key: Any, *, probe: bool) -> None:
        """A request for payload ``key`` was answered that the platform is down
        (:func:`platform_down`).

        The policy's ``attempts``-th such answer in a row begins the outage
        (logged); during one it is what :meth:`refused` is."""
        self._down_in_a_row += 1
        self._fault(error, key, probe=probe, begins=self._down_in_a_row >= self.threshold)

    @property
    def threshold(self) -> int:
        """How many "down" answers in a row begin an outage."""
        return max(1, self.policy.attempts)

    def _fault(self, error: SendError, key: Any, *, probe: bool, begins: bool) -> None:
        if self.since is None and not begins:
            return  # one "down" answer among others: the payload's own retries
        self._refused += 1
        self._held.add(key)
        self.last_error = error
        now = self._clock()
        wait = error.retry_after if error.retry_after is not None else 0.0
        if self.since is None:
            self.since = now
            self._tries = 1
            self._next_try = now + max(self.policy.delay(1), wait, MIN_PROBE_DELAY)
            log.warning("%s: %s (%s); its sends wait, in order, and are tried again with a "
                        "backoff of up to %s", self.name, outage_reason(error), error,
                        format_delay(self.policy.max_delay))
            if self._on_change is not None:
                self._on_change(error)
        elif probe:
            self._tries += 1
            self._next_try = now + max(self.policy.delay(self._tries), wait, MIN_PROBE_DELAY)
        if probe:
            self._probing = False
            self._changed_now()

    def reached(self) -> None:
        """A request got an answer other than "down": the platform works (ends the
        outage, logged)."""
        self._down_in_a_row = 0
        if self.since is None:
            return
        took = self._clock() - self.since
        log.info("%s: the platform is reachable again after %.1fs (%d request(s) refused, "
                 "%d payload(s) waited); their sends go on, in order",
                 self.name, took, self._refused, len(self._held))
        self.since = None
        self._probing = False
        self._held.clear()
        self._refused = 0
        self._changed_now()
        if self._on_change is not None:
            self._on_change(None)

    def abandon(self) -> None:
        """The probe ended without an answer either way (cancelled): another may try."""
        if self._probing:
            self._probing = False
            self._changed_now()

    async def turn(self, key: Any, deadline: float = math.inf) -> bool:
        """Wait until payload ``key`` may be tried; True when it is the outage's probe.

        Returns False at once when the platform is reachable, False when the outage
        ends meanwhile, and False when ``deadline`` (on ``clock``) comes first,
        with the outage still :attr:`active`.
        """
        while self.since is not None:
            self._held.add(key)
            now = self._clock()
            if now >= deadline:
                return False
            if not self._probing and now >= self._next_try:
                self._probing = True
                return True
            changed = self._changed
            if changed is None:
                changed = self._changed = anyio.Event()
            until = deadline if self._probing else min(self._next_try, deadline)
            await self._wait(changed, until, now)
        return False

    async def _wait(self, changed: anyio.Event, until: float, now: float) -> None:
        """Wait until ``changed`` is set or ``clock`` reads ``until``."""
        if self._sleep_until is None:
            with anyio.move_on_after(until - now):
                await changed.wait()
            return
        sleep_until = self._sleep_until
        async with anyio.create_task_group() as tg:
            async def timer() -> None:
                await sleep_until(until)
                tg.cancel_scope.cancel()

            tg.start_soon(timer)
            await changed.wait()
            tg.cancel_scope.cancel()

    def _changed_now(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()
