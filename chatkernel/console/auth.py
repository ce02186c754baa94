"""Who may use the console's API: the gateway's control token, and a brake on guessing it.

Every ``/api/`` request carries ``Authorization: Bearer <token>``, compared in constant
time. A client address that sends wrong tokens is slowed down: after
:data:`FREE_FAILURES` wrong ones, each further request from it is refused (429, with
``Retry-After``) for a time that doubles with each wrong token, up to
:data:`MAX_LOCK_SECONDS`, the right token included (or guessing would go on meanwhile).
A right token clears the address's count; a request with no token at all
counts for nothing. What is remembered is bounded: the
:data:`MAX_CLIENTS` addresses seen last.

The live stream cannot send a header (a browser's ``EventSource`` has no way to), so
it opens with a *ticket*: a random string the page gets with its token from
``POST /api/events/ticket``, good for one connection within :data:`TICKET_SECONDS`.
The token itself never travels in a URL, where logs and histories keep it.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Gate", "Verdict"]

FREE_FAILURES = 5
FIRST_LOCK_SECONDS = 1.0
MAX_LOCK_SECONDS = 60.0
#: A quiet address's failures are forgotten after this long.
FORGET_SECONDS = 600.0
MAX_CLIENTS = 4_096
TICKET_SECONDS = 60.0
MAX_TICKETS = 256


@dataclass(slots=True)
class _Client:
    failures: int = 0
    locked_until: float = 0.0
    last: float = 0.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """``ok``; else the HTTP status (401 or 429) and, for 429, the seconds to wait."""

    ok: bool
    status: int = 200
    retry_after: float = 0.0


class Gate:
    """The token check of the console's API (see the module docstring)."""

    def __init__(self, token: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._expected = f"Bearer {token}".encode()
        self._clock = clock
        self._clients: OrderedDict[str, _Client] = OrderedDict()
        self._tickets: OrderedDict[str, float] = OrderedDict()

    def check(self, authorization: str | None, client: str | None) -> Verdict:
        """Whether a request's ``Authorization`` header holds the token."""
        now = self._clock()
        address = client or "?"
        known = self._clients.get(address)
        if known is not None and now - known.last > FORGET_SECONDS:
            del self._clients[address]
            known = None
        if known is not None and known.locked_until > now:
            return Verdict(False, 429, known.locked_until - now)
        given = (authorization or "").encode()
        if secrets.compare_digest(given, self._expected):
            if known is not None:
                del self._clients[address]
            return Verdict(True)
        if not given:
            return Verdict(False, 401)  # no token at all: no guess to slow down
        if known is None:
            known = self._clients[address] = _Client()
            while len(self._clients) > MAX_CLIENTS:
                self._clients.popitem(last=False)
        self._clients.move_to_end(address)
        known.failures += 1
        known.last = now
        over = known.failures - FREE_FAILURES
        if over > 0:
            known.locked_until = now + min(MAX_LOCK_SECONDS, FIRST_LOCK_SECONDS * 2 ** (over - 1))
        return Verdict(False, 401)

    def ticket(self) -> str:
        """A ticket for one live stream (see the module docstring)."""
        now = self._clock()
        self._expire(now)
        ticket = secrets.token_urlsafe(24)
        self._tickets[ticket] = now + TICKET_SECONDS
        while len(self._tickets) > MAX_TICKETS:
            self._tickets.popitem(last=False)
        return ticket

    def use_ticket(self, ticket: str | None) -> bool:
        """Whether ``ticket`` is a live one; it is used up either way."""
        now = self._clock()
        self._expire(now)
        if not ticket:
            return False
        # Looked up by a digest compare of each: the dict lookup would time the string.
        for known in list(self._tickets):
            if secrets.compare_digest(known.encode(), ticket.encode()):
                del self._tickets[known]
                return True
        return False

    def _expire(self, now: float) -> None:
        while self._tickets and next(iter(self._tickets.values())) <= now:
            self._tickets.popitem(last=False)
