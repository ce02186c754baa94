"""One payload on its way out of the outbox (chatkernel.core.outbound.outbox): its
requests under the retry policy, the rate-limit slot each holds until its answer is in,
its ``sending`` / ``pending`` marks, the wait for an unreachable platform, the markup
fallback and a moved chat. The :class:`~chatkernel.core.outbound.outbox.Outbox` makes a
:class:`Delivery` per payload it sends and acts on how it ends.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

import anyio

from chatkernel.core.outbound.retry import (
    Outage,
    RetryPolicy,
    format_delay,
    never_sent,
    platform_down,
)
from chatkernel.core.store.base import OutboxEntry
from chatkernel.core.store.shared import LeaseLost
from chatkernel.core.telemetry import error_attributes
from chatkernel.sdk.models import Account, OutboundPayload, Route, SendError, SendResult

if TYPE_CHECKING:
    from chatkernel.core.outbound.outbox import Outbox
    from chatkernel.core.outbound.ratelimit import RateLimiter

log = logging.getLogger("chatkernel.outbox")

#: How soon, then how seldom at most, a `sending` mark the store failed to commit
#: is tried again (doubling in between).
STORE_RETRY_FIRST = 0.05
STORE_RETRY_MAX = 5.0


class NotOurs(Exception):
    """The account's lease went to another instance: it sends this (core/runtime/cluster.py)."""


class RowLost(Exception):
    """A payload's row was rolled back with a failed commit: it must not be sent."""


class Delivery:
    """One payload on its way out: its requests, their rate-limit slots, its marks.

    ``marked``: the entry is ``sending`` (committed), which it is only right
    before and during a request; while it waits (for a slot, a retry, the
    platform) it is ``pending``. ``slot``: the ``(chat_id, is_group)`` of the
    rate-limit slot taken for the next request, held until its answer is in.
    ``outage``: the account's, when the payload may wait for an unreachable
    platform (None: a refused request counts as an attempt like any other).
    """

    __slots__ = ("outbox", "entry", "account", "route", "limiter", "policy", "outage",
                 "marked", "slot", "probe")

    def __init__(self, outbox: "Outbox", entry: OutboxEntry, account: Account, route: Route,
                 limiter: "RateLimiter", policy: RetryPolicy, outage: Outage | None) -> None:
        self.outbox = outbox
        self.entry = entry
        self.account = account
        self.route = route
        self.limiter = limiter
        self.policy = policy
        self.outage = outage
        self.marked = False
        self.slot: tuple[str, bool] | None = None
        self.probe = False  # this payload is the outage's probe

    async def attempt(self) -> SendResult:
        """One attempt of the retry policy (the markup fallback and a moved chat are
        part of it: neither is a retry)."""
        outage = self.outage
        if outage is not None and outage.since is not None:
            await self._wait_for_platform(outage)
        payload, moved = self.entry.payload, False
        try:
            while True:
                if self.slot is None or not self.marked:  # (a claimed one has both)
                    await self._ready()
                try:
                    return await self._request(payload)
                except SendError as exc:
                    if exc.markup_rejected and payload.format != "plain":
                        # The platform refused the markup: the same text as plain text.
                        from chatkernel.sdk.markup import to_plain

                        log.info("%s: markup rejected (%s); resending as plain text",
                                 self.account.key, exc)
                        payload = dataclasses.replace(payload, text=to_plain(payload.text),
                                                      format="plain")
                        continue
                    if exc.moved_to and exc.moved_to != self.route.chat_id and not moved:
                        await self._follow(exc.moved_to)
                        moved = True
                        continue
                    raise
        finally:
            if self.probe:  # it ended without a verdict on the platform (cancelled)
                self.probe = False
                outage.abandon()  # type: ignore[union-attr]

    async def _request(self, payload: OutboundPayload) -> SendResult:
        """One request in the slot :meth:`_ready` took, released once it is over."""
        chat_id, is_group = self.slot  # type: ignore[misc]
        self.slot = None
        outage = self.outage
        reached = True
        try:
            result = await self.outbox._send_payload(self.account, self.route, payload)
        except SendError as exc:
            reached = not never_sent(exc)
            if outage is not None:
                if not reached:
                    outage.refused(exc, self.entry.id, probe=self.probe)
                elif platform_down(exc):
                    outage.unavailable(exc, self.entry.id, probe=self.probe)
                else:
                    outage.reached()  # an answer: the platform is there
                self.probe = False
            raise
        finally:
            self.limiter.release(chat_id, is_group=is_group, reached=reached)
        if outage is not None and outage.since is not None:
            outage.reached()
            self.probe = False
        return result

    async def _ready(self) -> None:
        """Take the slot for the next request and make sure the entry is ``sending``,
        committed, before it leaves: only now, after any wait for the slot, so a crash
        while it waits leaves it ``pending`` (sent after the restart)."""
        store = self.outbox._store()
        chat_id, is_group = self.route.chat_id, self.route.is_group
        wait: float | None = None
        while True:
            if self.slot is None:
                if not self.limiter.try_acquire(chat_id, is_group=is_group, hold=True):
                    await self._unmark()  # it waits: nothing is out
                    with self.outbox._tracer.during("rate limit wait", parent=self.entry.trace):
                        await self.limiter.acquire(chat_id, is_group=is_group, hold=True)
                self.slot = (chat_id, is_group)
            if self.marked:
                break
            try:
                await store.outbox_mark(self.entry.id, "sending", durable=True)
            except LeaseLost:
                self._release_slot()
                raise NotOurs() from None
            except Exception as exc:
                # Not committed (a full disk): nothing may leave unrecorded. Wait for
                # the store, holding this session's line so its order is kept.
                self._release_slot()
                if wait is None:
                    await self._check_row(exc)
                    self.outbox._store_failing(exc)
                    wait = STORE_RETRY_FIRST
                else:
                    wait = min(wait * 2, STORE_RETRY_MAX)
                await anyio.sleep(wait)
                continue
            except BaseException:
                self._release_slot()
                raise
            self.marked = True
            self.outbox._resting.discard(self.entry.session_key)  # it goes out now
            if wait is not None:
                self.outbox._store_works()
            break

    async def _check_row(self, error: Exception) -> None:
        """After a failed commit: the entry's row must still be there (its insert may
        have been in that commit, rolled back with the journal entries it answers,
        which are then replayed on the next start)."""
        rows = await self.outbox._store().outbox_reply(self.entry.reply_id)
        if not any(row.id == self.entry.id for row in rows):
            raise RowLost(f"{self.outbox._part(self.entry)}: its outbox entry was lost with a "
                           f"failed commit ({error}); the messages it answers are replayed "
                           "on the next start")

    def _release_slot(self) -> None:
        if self.slot is not None:
            chat_id, is_group = self.slot
            self.slot = None
            self.limiter.release(chat_id, is_group=is_group, reached=False)

    async def _unmark(self) -> None:
        if self.marked:
            self.marked = False
            await self.outbox._store().outbox_mark(self.entry.id, "pending")

    async def _wait_for_platform(self, outage: Outage) -> None:
        """The platform cannot be reached: wait with the account's other senders (see
        Outage) until it can, or this payload is the one to try, or it is too old."""
        self._release_slot()
        await self._unmark()
        self.outbox._resting.add(self.entry.session_key)
        if self.entry.trace is not None:
            self.entry.trace.event("platform wait", {"chatkernel.reason": "outage"})
        left = self.entry.created_at + self.policy.unreachable_max_age - time.time()
        self.probe = await outage.turn(self.entry.id, time.monotonic() + left)
        if not self.probe and outage.active:
            raise self._too_old(outage.last_error)

    def holds(self, error: SendError) -> bool:
        """Whether a failed request waits for the platform rather than counting an
        attempt: it was refused before it was sent, or the platform answered that it
        is down while the account's outage lasts (see Outage)."""
        if never_sent(error):
            return True
        return self.outage is not None and self.outage.active and platform_down(error)

    async def hold(self, error: SendError) -> None:
        """A request refused before it was sent, or answered "down" during an outage
        (the retry policy's ``hold``): the payload waits for the platform, ``pending``,
        unless it is too old by now."""
        metrics = self.outbox._metrics
        metrics.child(metrics.retries, self.account.channel_name, self.account.name).inc()
        if self.entry.trace is not None:
            self.entry.trace.event("platform wait", error_attributes(error))
        await self._unmark()
        self.outbox._resting.add(self.entry.session_key)
        if time.time() - self.entry.created_at >= self.policy.unreachable_max_age:
            raise self._too_old(error) from None

    def _too_old(self, error: SendError | None) -> SendError:
        age = format_delay(self.policy.unreachable_max_age)
        detail = f" ({error})" if error is not None else ""
        what = ("was unavailable" if error is not None and not never_sent(error)
                else "could not be reached")
        return SendError(f"not sent: the platform {what} for {age} after it was "
                         f"queued{detail}")

    def on_retry(self, retry: int, error: SendError, delay: float) -> Any:
        metrics = self.outbox._metrics
        account = self.account
        metrics.child(metrics.retries, account.channel_name, account.name).inc()
        if self.entry.trace is not None:
            self.entry.trace.event("retry", {"chatkernel.retry": retry, **error_attributes(
                error), "chatkernel.retry.delay_s": round(delay, 3)})
        if error.status == 429 or error.retry_after:
            # The platform throttled us: hold this chat back for as long as it asked.
            metrics.child(metrics.throttled, account.channel_name, account.name).inc()
            self.limiter.penalize(delay, self.route.chat_id)
        self.outbox._resting.add(self.entry.session_key)  # until its next request
        if self.marked and not error.delivery_unknown:
            # The platform refused it: nothing is out while it waits. (A lost answer,
            # repeated under its key, may be out: it stays `sending`, sent again after
            # a restart.)
            return self._unmark()
        return None

    async def _follow(self, chat_id: str) -> None:
        """The chat moved (a group became a supergroup): follow it, and remember it
        for every later send to this session."""
        sessions = self.outbox._sessions()
        log.info("%s: chat %s moved to %s", self.account.key, self.route.chat_id, chat_id)
        self.route = dataclasses.replace(self.route, chat_id=chat_id)
        if sessions.cached(self.entry.session_key) is not None:
            await sessions.set_route(self.entry.session_key, self.route)
