"""The outbox: every payload is recorded before it is sent and marked after.

A reply's payloads are queued in the store (``pending``) and sent, in order,
by the session's sender. Just before a request goes out (after any wait for
a rate-limit slot), its entry is marked ``sending`` and that mark is
committed; after, ``sent`` or ``failed``. So after a crash:

- ``pending`` entries were never attempted: they are sent on restart;
- ``sending`` entries may or may not have reached the platform: they are
  reported in the session log as "delivery unknown", never resent (a
  duplicate is a bug like a loss).

The usual reply goes out at once: its session's sender is idle and its
rate-limit slot is free. Then its first payload is stored ``sending`` from the
start (one write instead of an insert and an update), and the sender, woken
by that row's commit (``Store.after_commit``), takes the slot and sends it.
If the slot is no longer free by then (a burst of replies queued at once),
the payload goes back to ``pending`` and waits for its slot like any other.
Otherwise the payload is stored ``pending`` and waits its turn.

Each request runs under the channel's retry policy and the account's rate
limiter; the send policy is checked on every payload, whatever its origin.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import time
import uuid
from typing import TYPE_CHECKING


from chatkernel.core.lines import Lines
from chatkernel.core.models import Account, OutboundPayload, Route, SendError, SendResult
from chatkernel.core.outbound import upload_failed
from chatkernel.core.retry import RetryPolicy, with_retries
from chatkernel.core.store.base import OutboxEntry

if TYPE_CHECKING:
    from chatkernel.core.kernel import Kernel
    from chatkernel.core.ratelimit import RateLimiter

log = logging.getLogger("chatkernel.outbox")

EARLIER_CHUNK_FAILED = "not sent: an earlier part of this reply failed"
#: How long an idle session's sender waits for the next reply before it ends.
SENDER_LINGER_SECONDS = 2.0


class Outbox:
    """Queues payloads durably and runs one ordered sender per session."""

    def __init__(self, kernel: "Kernel") -> None:
        self._kernel = kernel
        # One ordered sender per session (see chatkernel.core.lines).
        self.lines: Lines[OutboxEntry] = Lines(
            "sender", self._send, task_group=lambda: kernel.task_group,
            linger=SENDER_LINGER_SECONDS, after=self._sent)
        self._failed_replies: set[str] = set()
        # Sessions whose reply was claimed and is not in its line yet, and the
        # claimed entries not sent yet (see _claim).
        self._claiming: set[str] = set()
        self._claimed: set[int] = set()
        # Claimed entries whose commit is over, before their sender takes them: None,
        # or the error that lost them.
        self._claim_commits: dict[int, Exception | None] = {}
        self._limiters: dict[str, RateLimiter] = {}
        self._policies: dict[str, RetryPolicy] = {}
        # Reply ids: unique across restarts without a uuid per reply.
        self._run_id = uuid.uuid4().hex[:8]
        self._reply_numbers = itertools.count(1)

    # -- queueing ----------------------------------------------------------------

    async def submit(self, account: Account, session_key: str, session_id: str, route: Route,
                     payloads: list[OutboundPayload], *,
                     finish_journal: list[int] | tuple[int, ...] = ()) -> str:
        """Queue a reply's payloads for the session; returns the reply id.

        The payloads are numbered in place (``chunk_index``/``chunk_count``).

        ``finish_journal``: journal entries this reply answers, marked in the
        same transaction (see :meth:`Store.outbox_add`).
        """
        reply_id = f"{self._run_id}-{next(self._reply_numbers)}"
        count = len(payloads)
        for index, payload in enumerate(payloads, start=1):  # freshly built: ours to number
            payload.chunk_index, payload.chunk_count = index, count
        entries = [
            OutboxEntry(id=0, reply_id=reply_id, session_key=session_key, session_id=session_id,
                        channel=account.channel_name, account=account.name, route=route,
                        payload=payload, status="pending", error=None, created_at=0.0)
            for payload in payloads]
        claimed = bool(entries) and self._claim(account, session_key, route)
        if claimed:
            entries[0].status = "sending"
            self._claiming.add(session_key)
        try:
            await self._kernel.store.outbox_add(entries, finish_journal=finish_journal)
        finally:
            if claimed:
                self._claiming.discard(session_key)
        if claimed:
            # Its sender has nothing before it: wake it once the row is committed
            # (rather than now, to wait for that commit), see _send.
            first = entries[0]
            self._claimed.add(first.id)
            self.lines.put(session_key, first, wake=False)
            self._enqueue(entries[1:])
            self._kernel.store.after_commit(functools.partial(self._claim_committed, first))
        else:
            self._enqueue(entries)
        return reply_id

    def _claim_committed(self, entry: OutboxEntry, error: Exception | None) -> None:
        if entry.id in self._claimed:  # not taken by its sender yet
            self._claim_commits[entry.id] = error
        self.lines.wake(entry.session_key)

    def _claim(self, account: Account, session_key: str, route: Route) -> bool:
        """Whether a reply's first payload may be stored ``sending`` and go out at
        once: the session's sender has nothing before it, the send policy allows
        it, and its rate-limit slot is free now (the sender takes it, see _send)."""
        kernel = self._kernel
        if (session_key in self._claiming or self.lines.busy(session_key)
                or account.channel is None
                or kernel.accounts.get(account.key) is not account
                or not kernel.send_policy.check(route, kernel.sessions.cached(session_key))):
            return False
        return self._limiter(account).is_free(route.chat_id, is_group=route.is_group)

    def _enqueue(self, entries: list[OutboxEntry]) -> None:
        for entry in entries:
            self.lines.put(entry.session_key, entry)

    def _sent(self, entry: OutboxEntry) -> None:
        if entry.payload.chunk_index >= entry.payload.chunk_count:
            self._failed_replies.discard(entry.reply_id)  # the reply is over

    def pending(self) -> int:
        """Payloads queued or being sent."""
        return len(self.lines)

    async def wait_idle(self) -> None:
        """Return once every queued payload was sent or failed."""
        await self.lines.wait_empty()

    async def recover(self) -> None:
        """After a start: send what was never attempted, report what was in flight."""
        store = self._kernel.store
        for entry in await store.outbox_unfinished():
            if entry.status == "sending":
                await store.outbox_mark(entry.id, "unknown", "in flight when the gateway stopped")
                self._failed_replies.add(entry.reply_id)
                await self._notify(entry, f"delivery unknown: {self._part(entry)} was being "
                                          "sent when the gateway stopped; it is not resent")
            elif entry.reply_id in self._failed_replies:
                await store.outbox_mark(entry.id, "failed", EARLIER_CHUNK_FAILED)
            else:
                self._enqueue([entry])

    # -- sending ---------------------------------------------------------------------

    def reap_idle(self, now: float | None = None) -> int:
        """End the senders that lingered with nothing to send (see :class:`Lines`)."""
        return self.lines.reap_idle(now)

    async def _send(self, entry: OutboxEntry) -> None:
        kernel = self._kernel
        store = kernel.store
        claimed = entry.id in self._claimed  # see submit
        self._claimed.discard(entry.id)
        settled = entry.id in self._claim_commits
        commit_error = self._claim_commits.pop(entry.id, None)
        if entry.reply_id in self._failed_replies:
            await store.outbox_mark(entry.id, "failed", EARLIER_CHUNK_FAILED)
            return
        account = kernel.accounts.get(f"{entry.channel}:{entry.account}")
        if account is None or account.channel is None:
            await self._fail(entry, None, SendError(f"account {entry.channel}:{entry.account} "
                                                    "is not running"))
            return
        route = await kernel.sessions.route(entry.session_key) or entry.route
        verdict = kernel.send_policy.check(route, kernel.sessions.cached(entry.session_key))
        if not verdict:
            log.info("%s: not sent to %s: %s", account.key, route.chat_id, verdict.reason)
            await store.outbox_mark(entry.id, "failed", verdict.reason)
            self._failed_replies.add(entry.reply_id)
            return
        limiter = self._limiter(account)
        policy = self._policy(account)
        # Claimed at submit (stored `sending`): take the slot right before the request,
        # once the row is committed; a slot taken meanwhile sends it back to `pending`.
        marked = claimed
        if claimed:
            if not settled:  # woken before its commit (a busy or new sender)
                await store.flush()
            elif commit_error is not None:
                raise commit_error  # its row was never written: nothing to send
            if not limiter.try_acquire(route.chat_id, is_group=route.is_group):
                await store.outbox_mark(entry.id, "pending")  # nothing went out
                marked = claimed = False

        async def attempt() -> SendResult:
            nonlocal route, marked, claimed
            if claimed:
                claimed = False
            else:
                await limiter.acquire(route.chat_id, is_group=route.is_group)
            if not marked:
                # After the rate-limit wait, not before: a crash while a payload
                # waits for its slot must leave it `pending` (resent), not `unknown`.
                await store.outbox_mark(entry.id, "sending", durable=True)
                marked = True
            try:
                return await self._attempt(account, route, entry.payload)
            except SendError as exc:
                if not exc.moved_to or exc.moved_to == route.chat_id:
                    raise
                # The chat moved (a group became a supergroup): follow it, and
                # remember it for every later send to this session.
                log.info("%s: chat %s moved to %s", account.key, route.chat_id, exc.moved_to)
                route = dataclasses.replace(route, chat_id=exc.moved_to)
                if kernel.sessions.cached(entry.session_key) is not None:
                    await kernel.sessions.set_route(entry.session_key, route)
                await limiter.acquire(route.chat_id, is_group=route.is_group)
                return await self._attempt(account, route, entry.payload)

        def on_retry(retry: int, error: SendError, delay: float) -> None:
            metrics = kernel.metrics
            metrics.child(metrics.retries, account.channel_name, account.name).inc()
            if error.status == 429 or error.retry_after:
                # The platform throttled us: hold this chat back for as long as it asked.
                metrics.child(metrics.throttled, account.channel_name, account.name).inc()
                limiter.penalize(delay, route.chat_id)

        try:
            result = await with_retries(attempt, policy, on_retry=on_retry)
        except Exception as exc:
            await self._fail(entry, account, exc)
            return
        await store.outbox_mark(entry.id, "sent")
        account.last_sent_at = time.time()
        if account.channel.delivery_statuses and result is not None and result.message_id:
            # The platform reports this message's fate later (core/delivery.py).
            await store.outbox_sent_as(entry.id, result.message_id)

    async def _attempt(self, account: Account, route: Route,
                       payload: OutboundPayload) -> SendResult:
        outbound = self._kernel.outbound
        try:
            return await outbound.send_payload(account, route, payload)
        except SendError as exc:
            if not exc.markup_rejected or payload.format == "plain":
                raise
            # The platform refused the markup: the same text as plain text (not a retry).
            from chatkernel.core.markup import to_plain

            log.info("%s: markup rejected (%s); resending as plain text", account.key, exc)
            plain = dataclasses.replace(payload, text=to_plain(payload.text), format="plain")
            return await outbound.send_payload(account, route, plain)

    async def _fail(self, entry: OutboxEntry, account: Account | None,
                    exc: BaseException) -> None:
        store = self._kernel.store
        unknown = isinstance(exc, SendError) and exc.delivery_unknown
        reason = str(exc) or type(exc).__name__
        await store.outbox_mark(entry.id, "unknown" if unknown else "failed", reason)
        self._failed_replies.add(entry.reply_id)
        detail = f"{self._part(entry)}: {reason}"
        later = entry.payload.chunk_count - entry.payload.chunk_index
        if later:
            detail += f" ({later} later part(s) not sent)"
        if unknown:
            detail = f"delivery unknown: {detail}"
        log.warning("%s: delivery failed in %s: %s", entry.channel + ":" + entry.account,
                    entry.session_key, detail)
        if account is not None:
            metrics = self._kernel.metrics
            metrics.child(metrics.send_failures, account.channel_name, account.name).inc()
        await self._notify(entry, f"delivery failed: {detail}")
        if account is not None and entry.payload.is_media and not unknown:
            # The chat learns a file did not arrive (a text: this cannot loop).
            name = entry.payload.media_path.name  # type: ignore[union-attr]
            await self.submit(account, entry.session_key, entry.session_id, entry.route,
                              [OutboundPayload(text=upload_failed(name, reason),
                                               format="plain")])

    async def _notify(self, entry: OutboxEntry, text: str) -> None:
        """A notification in the session log: recording it never sends anything."""
        await self._kernel.store.append_log(entry.session_key, entry.session_id, "notification",
                                            text, {"kind": "delivery", "outbox_id": entry.id})

    @staticmethod
    def _part(entry: OutboxEntry) -> str:
        return f"chunk {entry.payload.chunk_index}/{entry.payload.chunk_count}"

    def prepare(self, account: Account) -> None:
        """Build the account's rate limiter and retry policy from the channel's
        declared limits and the ``rate_limits`` / ``retry`` config overrides."""
        from chatkernel.core.config import ConfigError
        from chatkernel.core.ratelimit import RateLimiter

        section = self._kernel.config.channels.get(account.channel_name)
        limits = account.channel.limits  # type: ignore[union-attr]
        prefix = f"channels.{account.channel_name}"
        try:
            self._limiters[account.key] = RateLimiter.from_limits(
                limits.rates, getattr(section, "rate_limits", None))
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc), path=self._kernel.config_path,
                              key=f"{prefix}.rate_limits") from None
        try:
            self._policies[account.key] = RetryPolicy.from_config(
                getattr(section, "retry", None), base_delay=limits.retry_base_delay)
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc), path=self._kernel.config_path,
                              key=f"{prefix}.retry") from None

    def _limiter(self, account: Account) -> "RateLimiter":
        if account.key not in self._limiters:
            self.prepare(account)
        return self._limiters[account.key]

    def _policy(self, account: Account) -> RetryPolicy:
        if account.key not in self._policies:
            self.prepare(account)
        return self._policies[account.key]
