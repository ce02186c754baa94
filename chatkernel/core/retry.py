"""The retry policy for one outbound request (docs/outbound.md, "Retries").

Retries happen per request, never per multi-step flow: a completed step (an
upload that returned its id) is never repeated. A request is retried only
when repeating it cannot duplicate a message: the platform said 429 (wait
``retry_after``), answered 502/503/504, or the connection failed before the
request was written. A timeout after the request may have reached the
platform is never retried blindly (``SendError.delivery_unknown``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio

from chatkernel.core.models import SendError

log = logging.getLogger("chatkernel.retry")

T = TypeVar("T")

#: HTTP statuses a request is repeated after: the platform did not act on it.
RETRY_STATUSES = frozenset({429, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently to repeat a failed request.

    ``attempts`` counts the first try. The n-th retry waits
    ``base_delay * 2**(n-1)`` (at most ``max_delay``), ±``jitter`` of it, or the
    platform's ``retry_after`` when it gave one (never less).
    """

    attempts: int = 3
    base_delay: float = 0.5
    max_delay: float = 30.0
    jitter: float = 0.1

    def delay(self, retry: int, retry_after: float | None = None,
              rng: Callable[[], float] = random.random) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        if retry_after is not None and retry_after > 0:
            return float(retry_after)  # the platform said how long: exactly that
        backoff = min(self.base_delay * 2 ** (retry - 1), self.max_delay)
        return max(0.0, backoff * (1 + self.jitter * (2 * rng() - 1)))

    @classmethod
    def from_config(cls, data: dict[str, Any] | None, *,
                    base_delay: float = 0.5) -> "RetryPolicy":
        """From a ``[channels.<name>.retry]`` table: ``attempts``, ``base_delay_ms``,
        ``max_delay_ms``, ``jitter`` (a fraction). ValueError names a bad key."""
        data = dict(data or {})
        known = {"attempts", "base_delay_ms", "max_delay_ms", "jitter"}
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
        return cls(attempts, values["base_delay_ms"], values["max_delay_ms"], float(jitter))


def is_retryable(exc: BaseException) -> bool:
    """Whether repeating the request cannot duplicate what it did."""
    if isinstance(exc, SendError):
        return exc.retryable and not exc.delivery_unknown
    return False


async def with_retries(request: Callable[[], Awaitable[T]], policy: RetryPolicy, *,
                       on_retry: Callable[[int, SendError, float], Any] | None = None,
                       sleep: Callable[[float], Awaitable[Any]] = anyio.sleep) -> T:
    """Run ``request`` under the policy; the last error is raised as it was.

    ``on_retry(retry_number, error, delay)`` is called before each wait (for
    metrics, and to penalize a rate limiter on a 429).
    """
    attempt = 1
    while True:
        try:
            return await request()
        except SendError as exc:
            if not is_retryable(exc) or attempt >= policy.attempts:
                raise
            delay = policy.delay(attempt, exc.retry_after)
            if on_retry is not None:
                on_retry(attempt, exc, delay)
            log.info("send failed (%s); retry %d/%d in %.2fs", exc, attempt,
                     policy.attempts - 1, delay)
            await sleep(delay)
            attempt += 1
