"""Typing indicators, refreshed for every running turn by one task.

Platforms show "typing…" for a few seconds per request (Telegram 5 s), so a
running turn's indicator is refreshed every ``ChannelLimits.indicator_interval``.
One long-lived task serves every turn: a task per turn would cost more than
the indicator is worth on a busy gateway. Indicator failures are logged at
debug level and never affect the turn.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from chatkernel.sdk.channel import Channel
from chatkernel.sdk.models import Account, Route

log = logging.getLogger("chatkernel.indicators")

#: The most one indicator call may take before the next one is served.
CALL_TIMEOUT = 5.0


def has_indicator(account: Account) -> bool:
    """Whether the account's channel implements a typing indicator."""
    channel = account.channel
    return channel is not None and type(channel).indicate is not Channel.indicate


@dataclass(slots=True)
class _Entry:
    account: Account
    due: float


class Indicators:
    """Keeps the indicator of every running turn alive."""

    def __init__(self, route: Callable[[str], Awaitable[Route | None]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._route = route
        self._clock = clock
        self._active: dict[str, _Entry] = {}
        self._once: list[tuple[Account, Route]] = []
        self._wake = anyio.Event()

    def begin(self, account: Account, session_key: str) -> None:
        """A turn started: indicate now and keep refreshing until :meth:`end`."""
        if has_indicator(account):
            self._active[session_key] = _Entry(account, self._clock())
            self._wake.set()

    def end(self, session_key: str) -> None:
        self._active.pop(session_key, None)

    def once(self, account: Account, route: Route) -> None:
        """Indicate once (a message waits for its turn)."""
        if has_indicator(account):
            self._once.append((account, route))
            self._wake.set()

    async def run(self) -> None:
        """The refresher: runs until cancelled."""
        while True:
            # A fresh event before the work: a begin() during an await below wakes us.
            self._wake = anyio.Event()
            once, self._once = self._once, []
            for account, route in once:
                await self._indicate(account, route)
            now = self._clock()
            next_due = math.inf
            for key, entry in list(self._active.items()):
                if entry.due <= now:
                    interval = entry.account.channel.limits.indicator_interval  # type: ignore[union-attr]
                    entry.due = now + interval
                    route = await self._route(key)
                    if route is not None and key in self._active:
                        await self._indicate(entry.account, route)
                next_due = min(next_due, entry.due)
            with anyio.move_on_after(max(0.0, next_due - self._clock())):
                await self._wake.wait()

    @staticmethod
    async def _indicate(account: Account, route: Route) -> None:
        try:
            with anyio.fail_after(CALL_TIMEOUT):
                await account.channel.indicate(route)  # type: ignore[union-attr]
        except Exception as exc:  # TimeoutError included: a slow indicator is only noise
            log.debug("typing indicator failed on %s: %s", account.key, exc)
