"""The outbox: every payload is recorded before it is sent and marked after.

A reply's payloads are queued in the store (``pending``) and sent, in order,
by the session's sender. Just before a request goes out (after any wait for
a rate-limit slot), its entry is marked ``sending`` and that mark is
committed; after, ``sent`` or ``failed``. While a payload waits between
requests (a retry's backoff, a 429's ``retry_after``, the platform being
unreachable) it is ``pending`` again: nothing of it is out. So after a crash:

- ``pending`` entries were not out: they are sent on restart;
- ``sending`` entries may or may not have reached the platform: they are
  reported in the session log as "delivery unknown", never resent (a
  duplicate is a bug like a loss), unless their channel's sends are
  idempotent (``Capabilities.idempotent_sends``: the platform dedupes them by
  ``OutboundPayload.key``, :func:`send_key`), which are sent again.

The usual reply goes out at once: its session's sender is idle and its
rate-limit slot is free. Then its first payload is stored ``sending`` from the
start (one write instead of an insert and an update), and the sender, woken
by that row's commit (``Store.after_commit``), takes the slot and sends it.
If the slot is no longer free by then (a burst of replies queued at once),
the payload goes back to ``pending`` and waits for its slot like any other.
Otherwise the payload is stored ``pending`` and waits its turn.

Each request runs under the channel's retry policy and holds a slot of the
account's rate limiter until its answer is in; the send policy is checked on
every payload, whatever its origin. A request refused before it was sent
(the platform cannot be reached), or a run of answers saying the platform is
down (5xx), does not fail its payload: the account's senders wait for the
platform together (:class:`~chatkernel.core.outbound.retry.Outage`), each chat's payloads
in order, up to the policy's ``unreachable_max_age``. A request whose answer was lost
is "delivery unknown", except on a channel with idempotent sends, which repeats it
under the retry policy with the same key. A ``sending`` mark the store cannot commit
(a full disk) is tried again in place, holding the session's line, until it can:
nothing goes out unrecorded and nothing is reported failed that is sent later.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from chatkernel.core.outbound.deliveries import describe_payload
from chatkernel.core.outbound.delivery import Delivery, NotOurs, RowLost
from chatkernel.core.outbound.limits import SendLimits
from chatkernel.core.lines import Lines
from chatkernel.sdk.models import Account, OutboundPayload, Route, SendError, SendResult
from chatkernel.core.outbound.replies import upload_failed
from chatkernel.core.outbound.retry import (
    is_retryable,
    idempotent,
    repeatable_with_key,
    send_key,
    with_retries,
)
from chatkernel.core.store.base import OutboxEntry
from chatkernel.core.store.shared import LeaseLost
from chatkernel.core.telemetry import OFF, Tracer, send_attributes

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from chatkernel.core.runtime.cluster import Cluster
    from chatkernel.core.health.metrics import Metrics
    from chatkernel.core.inbound.sessions import Sessions
    from chatkernel.core.outbound.deliveries import Deliveries
    from chatkernel.core.outbound.delivery_statuses import DeliveryStatuses
    from chatkernel.core.outbound.policy import SendPolicies
    from chatkernel.core.outbound.ratelimit import Pacing
    from chatkernel.core.store.base import Store

#: send(account, route, payload): one request to the platform (raises SendError).
SendPayload = Callable[[Account, Route, OutboundPayload], Awaitable[SendResult]]

log = logging.getLogger("chatkernel.outbox")

EARLIER_CHUNK_FAILED = "not sent: an earlier part of this reply failed"
#: How long an idle session's sender waits for the next reply before it ends.
SENDER_LINGER_SECONDS = 2.0
#: How far back (before the longest rate-limit window and the longest a payload may
#: wait for its platform) the outbox looks for sends made before a restart.
RESTORE_SLACK = 3600.0
#: Outbox ids remembered per account as queued here (several instances, see adopt).
KNOWN_REMEMBERED = 100_000


class OutboxRuntime(Protocol):
    """What the outbox reads of a running kernel, on each call: each exists once the
    kernel started (RuntimeError before)."""

    def store(self) -> Store:
        """The opened store, where every payload is recorded."""

    def sessions(self) -> Sessions:
        """The sessions: a payload follows its session's current route."""

    def task_group(self) -> TaskGroup:
        """Where the senders run."""

    def cluster(self) -> Cluster | None:
        """This process's part among several sharing the store (None: the only one)."""


class SendRules(Protocol):
    """The config's rules for sending, in effect now (a reload replaces them)."""

    def send_policy(self) -> SendPolicies:
        """The send policies (each session's agent's), checked on every payload."""

    def channel_config(self, name: str) -> Any:
        """A channel's config section (its ``rate_limits`` and ``retry`` overrides), or
        None."""


class Outbox:
    """Queues payloads durably and runs one ordered sender per session.

    Its collaborators, by name:

    - ``runtime`` (:class:`OutboxRuntime`) and ``rules`` (:class:`SendRules`): its ports
      to the kernel;
    - ``accounts``: the running accounts by key (read, never written); a payload of an
      account no longer there is not sent;
    - ``config_path``: names the config file in errors (for
      :class:`~chatkernel.core.outbound.limits.SendLimits`);
    - ``send``: one request to the platform (:data:`SendPayload`);
    - ``deliveries``: told each payload's final status; ``delivery_statuses``: told
      the platform's id of a payload whose fate the platform reports later;
    - ``metrics``: failures, retries and throttling counted;
    - ``wait_for_platforms``: a payload waits for an unreachable platform (a gateway
      lives on to send it); False: it fails at once (a CLI command's own kernel);
    - ``pacing``: the time the rate limits are counted in (real time by default);
    - ``tracer``: each send a span of the trace that queued it (core/telemetry.py).
    """

    def __init__(self, *, runtime: OutboxRuntime, rules: SendRules,
                 accounts: Mapping[str, Account], config_path: Path | None,
                 send: SendPayload, deliveries: "Deliveries",
                 delivery_statuses: "DeliveryStatuses", metrics: "Metrics",
                 wait_for_platforms: bool, pacing: "Pacing | None" = None,
                 tracer: Tracer = OFF) -> None:
        from chatkernel.core.outbound.ratelimit import REAL_TIME

        # The ports' calls, bound once: a call per payload costs what a function did.
        self._store = runtime.store
        #: The time the accounts' rate limiters count in.
        self.pacing = pacing or REAL_TIME
        self._sessions = runtime.sessions
        self._cluster = runtime.cluster
        self._account = accounts.get
        self._send_policy = rules.send_policy
        self._send_payload = send
        self._deliveries = deliveries
        self._delivery_statuses = delivery_statuses
        self._metrics = metrics
        self._wait_for_platforms = wait_for_platforms
        self._tracer = tracer
        self._tracing = tracer.on
        # One ordered sender per session (see chatkernel.core.lines).
        self.lines: Lines[OutboxEntry] = Lines(
            "sender", self._traced_send if tracer.on else self._send,
            task_group=runtime.task_group,
            linger=SENDER_LINGER_SECONDS, after=self._sent)
        self._failed_replies: set[str] = set()
        # Sessions whose reply was claimed and is not in its line yet, and the
        # claimed entries not sent yet (see _claim).
        self._claiming: set[str] = set()
        self._claimed: set[int] = set()
        # Claimed entries whose commit is over, before their sender takes them: None,
        # or the error that lost them.
        self._claim_commits: dict[int, Exception | None] = {}
        #: Each account's rate limiter, retry policy and outage.
        self.limits = SendLimits(channel_config=rules.channel_config, config_path=config_path,
                                 pacing=self.pacing)
        # Since when `sending` marks fail to commit (monotonic), and how many waited.
        self._store_down_since: float | None = None
        self._store_waited = 0
        # Reply ids: unique across restarts without a uuid per reply.
        self._run_id = uuid.uuid4().hex[:8]
        self._reply_numbers = itertools.count(1)
        # With several instances: the entries of each account this one queued, so one
        # the account's inbox brings again is not sent twice (see adopt).
        self._known: dict[str, dict[int, None]] = {}
        # Sessions whose sender waits, its payload `pending`, for a retry or for the
        # platform to be reachable again: a stopping gateway need not wait for them.
        self._resting: set[str] = set()

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
        if self._tracing:  # sent in the trace of the turn (or the message) queueing them
            trace = self._tracer.current()
            for entry in entries:
                entry.trace = trace
        cluster = self._cluster()
        if cluster is not None and not cluster.owns(account.key):
            await cluster.settled(account.key)  # being taken here: owned, or not, after
        if cluster is not None and not cluster.owns(account.key):
            # Another instance owns the account: it sends these, read from the
            # account's inbox (core/runtime/cluster.py).
            await self._store().outbox_add(entries, finish_journal=finish_journal)
            return reply_id
        claimed = bool(entries) and self._claim(account, session_key, route)
        if claimed:
            entries[0].status = "sending"
            self._claiming.add(session_key)
        try:
            await self._store().outbox_add(entries, finish_journal=finish_journal)
        finally:
            if claimed:
                self._claiming.discard(session_key)
        if claimed:
            # Its sender has nothing before it: wake it once the row is committed
            # (rather than now, to wait for that commit), see _send.
            first = entries[0]
            self._claimed.add(first.id)
            self._remember(first)
            self.lines.put(session_key, first, wake=False)
            self._enqueue(entries[1:])
            self._store().after_commit(functools.partial(self._claim_committed, first))
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
        it, its platform is not known to be unreachable and its rate-limit slot is
        free now (the sender takes it, see _send)."""
        if (session_key in self._claiming or self.lines.busy(session_key)
                or account.channel is None
                or self._account(account.key) is not account
                or not self._send_policy().check(route, self._sessions().cached(session_key))):
            return False
        limiter = self.limits.limiter(account)
        return (self.limits.outages[account.key].since is None
                and limiter.is_free(route.chat_id, is_group=route.is_group))

    def _enqueue(self, entries: list[OutboxEntry]) -> None:
        for entry in entries:
            self._remember(entry)
            self.lines.put(entry.session_key, entry)

    def _remember(self, entry: OutboxEntry) -> None:
        if self._cluster() is None:
            return
        known = self._known.setdefault(f"{entry.channel}:{entry.account}", {})
        known[entry.id] = None
        if len(known) > KNOWN_REMEMBERED:
            del known[next(iter(known))]

    def adopt(self, entry: OutboxEntry) -> None:
        """Send an entry another instance queued for an account this one owns (read
        from the account's inbox), unless it is queued here already."""
        if entry.id in self._known.get(f"{entry.channel}:{entry.account}", ()):
            return
        if entry.status == "pending":
            self._enqueue([entry])

    def forget_known(self, account: Account) -> None:
        """A new tenure of ``account``: its unfinished entries are read again."""
        self._known.pop(account.key, None)

    def _sent(self, entry: OutboxEntry) -> None:
        self._resting.discard(entry.session_key)
        if entry.payload.chunk_index >= entry.payload.chunk_count:
            self._failed_replies.discard(entry.reply_id)  # the reply is over

    def pending(self) -> int:
        """Payloads queued or being sent."""
        return len(self.lines)

    async def wait_idle(self) -> None:
        """Return once every queued payload was sent or failed."""
        await self.lines.wait_empty()

    def waiting(self) -> int:
        """Payloads whose sender waits for a retry or for its platform (``pending``, so
        sent on the next start if the gateway stops now), and those queued behind them."""
        return sum(self.lines.count(key) for key in self.lines.keys() if key in self._resting)

    async def wait_stoppable(self) -> None:
        """Return once every payload was sent or failed, or waits for a retry or its
        platform (:meth:`waiting`): what a stopping gateway waits for. A payload in
        flight is waited for, so it does not become "delivery unknown"."""
        while any(key not in self._resting for key in self.lines.keys()):
            await anyio.sleep(0.02)

    async def recover(self, account: Account | None = None) -> None:
        """After a start: restore the rate-limit windows, send what was never attempted,
        report what was in flight (or send it again, where the platform dedupes sends
        by key). ``account``: of that account only (this instance took it over from
        another, core/runtime/cluster.py)."""
        store = self._store()
        await self.restore_windows(account)
        deliveries = self._deliveries
        resent = unknown = skipped = again = 0
        only = None if account is None else (account.channel_name, account.name)
        for entry in await (store.outbox_unfinished() if only is None
                            else store.outbox_unfinished(account=only)):
            if (entry.status == "sending" and entry.reply_id not in self._failed_replies
                    and idempotent(self._account(f"{entry.channel}:{entry.account}"))):
                # The platform dedupes by the entry's key: sending it again cannot make
                # a second message, and finds out what became of the first request.
                await store.outbox_mark(entry.id, "pending")
                entry.status = "pending"
                self._enqueue([entry])
                again += 1
            elif entry.status == "sending":
                await store.outbox_mark(entry.id, "unknown", "in flight when the gateway stopped")
                self._failed_replies.add(entry.reply_id)
                await self._notify(entry, f"delivery unknown: {self._part(entry)} was being "
                                          "sent when the gateway stopped; it is not resent")
                # Named, as a failure at run time is: the log is where an operator looks
                # for the reply a kill between its `sending` mark and its request lost.
                key = f"{entry.channel}:{entry.account}"
                log.warning("%s: delivery unknown in %s: %s was being sent when the gateway "
                            "stopped; it is not resent (chatkernel status lists the failed "
                            "deliveries)", key, entry.session_key, self._part(entry),
                            extra={"channel": entry.channel, "account": key})
                deliveries.settled(entry, "unknown", "in flight when the gateway stopped",
                                   why="stopped")
                unknown += 1
            elif entry.reply_id in self._failed_replies:
                await store.outbox_mark(entry.id, "failed", EARLIER_CHUNK_FAILED)
                deliveries.settled(entry, "failed", EARLIER_CHUNK_FAILED, why="earlier part")
                skipped += 1
            else:
                self._enqueue([entry])
                resent += 1
        if resent or unknown or skipped:
            log.info("outbox: recovered %d unsent payload(s), sending them now; %d were in "
                     "flight when the gateway stopped (delivery unknown, not resent); %d "
                     "not sent after an earlier part of their reply", resent, unknown,
                     skipped)
        if again:
            log.info("outbox: %d payload(s) in flight when the gateway stopped are sent "
                     "again under their keys (their platforms dedupe sends)", again)

    async def restore_windows(self, account: Account | None = None) -> int:
        """Count the sends recorded before a restart in the rate limiters, so the sends
        after it keep the limits as the running gateway would have; returns how many
        sends were read.

        A send counts until a window after its outbox entry last changed (``sent``
        is marked once its answer is in); one still ``sending`` counts from now.
        Only entries queued since the longest a payload may wait for its platform
        (``unreachable_max_age``, or :data:`RESTORE_SLACK` if longer) are read.
        """
        limiters = self.limits.limiters
        longest = max((limiter.longest_window for limiter in limiters.values()), default=0.0)
        if longest <= 0:
            return 0
        now = time.time()
        wait = max((policy.unreachable_max_age for policy in self.limits.policies.values()),
                   default=0.0)
        sends = await self._store().outbox_recent_sends(
            now - longest, queued_since=now - longest - max(wait, RESTORE_SLACK))
        by_account: dict[str, list[tuple[float, str, bool]]] = defaultdict(list)
        for send in sends:
            ago = 0.0 if send.status == "sending" else now - send.at
            by_account[f"{send.channel}:{send.account}"].append(
                (ago, send.route.chat_id, send.route.is_group))
        for key, restored in by_account.items():
            if account is not None and key != account.key:
                continue
            limiter = limiters.get(key)
            if limiter is not None:
                limiter.restore(restored)
        return len(sends)

    # -- sending ---------------------------------------------------------------------

    def reap_idle(self, now: float | None = None) -> int:
        """End the senders that lingered with nothing to send (see :class:`Lines`)."""
        return self.lines.reap_idle(now)

    async def _traced_send(self, entry: OutboxEntry) -> None:
        tracer = self._tracer  # the send is a span, its entry's while it lasts
        with tracer.during(f"send {entry.channel}", kind="producer", parent=entry.trace,
                           attributes=send_attributes(entry, tracer.capture_content),
                           current=True) as entry.trace:
            await self._send(entry)

    async def _send(self, entry: OutboxEntry) -> None:
        store = self._store()
        sessions = self._sessions()
        deliveries = self._deliveries
        claimed = entry.id in self._claimed  # see submit
        self._claimed.discard(entry.id)
        settled = entry.id in self._claim_commits
        commit_error = self._claim_commits.pop(entry.id, None)
        if entry.reply_id in self._failed_replies:
            await store.outbox_mark(entry.id, "failed", EARLIER_CHUNK_FAILED)
            deliveries.settled(entry, "failed", EARLIER_CHUNK_FAILED, why="earlier part")
            return
        account = self._account(f"{entry.channel}:{entry.account}")
        if account is None or account.channel is None:
            await self._fail(entry, None, SendError(f"account {entry.channel}:{entry.account} "
                                                    "is not running"))
            return
        route = await sessions.route(entry.session_key) or entry.route
        # The session decides (its own setting, its agent's policy): read it if a restart
        # left it out of memory.
        session = sessions.cached(entry.session_key) or await sessions.get(entry.session_key)
        verdict = self._send_policy().check(route, session)
        if not verdict:
            log.info("%s: not sent to %s: %s", account.key, route.chat_id, verdict.reason)
            await store.outbox_mark(entry.id, "failed", verdict.reason)
            self._failed_replies.add(entry.reply_id)
            await self._notify(entry, f"not sent: {self._part(entry)}: {verdict.reason}")
            deliveries.settled(entry, "failed", verdict.reason, why="policy",
                                      account=account)
            return
        entry.payload.key = send_key(entry)
        limits = self.limits
        limiter = limits.limiter(account)
        policy = limits.policy(account)
        outage = limits.outages[account.key]
        # Waiting for the platform only where this process will live on to send (a
        # CLI command's own kernel reports a failure instead).
        holds = self._wait_for_platforms and policy.unreachable_max_age > 0
        delivery = Delivery(self, entry, account, route, limiter, policy,
                             outage if holds else None)
        if claimed:
            # Stored `sending` at submit: take the slot right before the request, once
            # the row is committed; a slot taken meanwhile sends it back to `pending`.
            if not settled:  # woken before its commit (a busy or new sender)
                await store.flush()
            elif commit_error is not None:
                deliveries.settled(entry, "failed", str(commit_error), why="store",
                                          account=account)
                raise commit_error  # its row was never written: nothing to send
            delivery.marked = True
            if not outage.active and limiter.try_acquire(
                    route.chat_id, is_group=route.is_group, hold=True):
                delivery.slot = (route.chat_id, route.is_group)
        try:
            result = await with_retries(delivery.attempt, policy, on_retry=delivery.on_retry,
                                        hold=delivery.hold if holds else None,
                                        holds=delivery.holds,
                                        retryable=repeatable_with_key if idempotent(account)
                                        else is_retryable)
        except RowLost as lost:
            log.warning("%s: not sent in %s: %s", account.key, entry.session_key, lost)
            deliveries.settled(entry, "failed", str(lost), why="store", account=account)
            return
        except NotOurs:
            log.info("%s: outbox entry %d left to the account's new owner", account.key,
                     entry.id)
            return
        except Exception as exc:
            await self._fail(entry, account, exc)
            return
        try:
            await store.outbox_mark(entry.id, "sent")
        except LeaseLost:
            # Sent, but the account's new owner has it as in flight: delivery unknown.
            log.warning("%s: outbox entry %d was sent as this instance lost the account; "
                        "its new owner reports it as delivery unknown", account.key, entry.id)
            return
        account.last_sent_at = time.time()
        deliveries.settled(entry, "sent", account=account)
        if entry.trace is not None and result is not None:
            entry.trace.set("messaging.message.id", result.message_id)
        if result is not None and result.extra.get("notice"):
            await self._notify(entry, str(result.extra["notice"]))
        if account.channel.capabilities.delivery_statuses and result is not None and result.message_id:
            # The platform reports this message's fate later (core/outbound/delivery_statuses.py).
            self._delivery_statuses.sent_as(entry, result.message_id)
            await store.outbox_sent_as(entry.id, result.message_id)

    def _store_failing(self, error: Exception) -> None:
        """A `sending` mark could not be committed: logged once until one is again."""
        self._store_waited += 1
        if self._store_down_since is None:
            self._store_down_since = time.monotonic()
            log.warning("the state database cannot commit (%s): sends wait, in order, until "
                        "it can; nothing goes out unrecorded", error)

    def _store_works(self) -> None:
        if self._store_down_since is not None:
            log.info("the state database commits again after %.1fs; %d payload(s) waited "
                     "and go out now, in order", time.monotonic() - self._store_down_since,
                     self._store_waited)
            self._store_down_since = None
            self._store_waited = 0

    async def _fail(self, entry: OutboxEntry, account: Account | None,
                    exc: BaseException) -> None:
        store = self._store()
        unknown = isinstance(exc, SendError) and exc.delivery_unknown
        reason = str(exc) or type(exc).__name__
        await store.outbox_mark(entry.id, "unknown" if unknown else "failed", reason)
        self._failed_replies.add(entry.reply_id)
        self._deliveries.settled(entry, "unknown" if unknown else "failed", reason,
                                 why="platform" if account else "not running",
                                 exc=exc, account=account)
        detail = f"{self._part(entry)}: {reason}"
        later = entry.payload.chunk_count - entry.payload.chunk_index
        if later:
            detail += f" ({later} later part(s) not sent)"
        if unknown:
            detail = f"delivery unknown: {detail}"
        key = f"{entry.channel}:{entry.account}"
        log.warning("%s: delivery failed in %s: %s (chatkernel status lists the failed "
                    "deliveries; chatkernel channels probe %s checks the account)", key,
                    entry.session_key, detail, key,
                    extra={"channel": entry.channel, "account": key})
        if account is not None:
            metrics = self._metrics
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
        await self._store().append_log(entry.session_key, entry.session_id, "notification",
                                       text, {"kind": "delivery", "outbox_id": entry.id,
                                              "reply_id": entry.reply_id})

    @staticmethod
    def _part(entry: OutboxEntry) -> str:
        """``chunk 1/2 "Hello the…"``: which part of which message."""
        payload = entry.payload
        return f"chunk {payload.chunk_index}/{payload.chunk_count} {describe_payload(payload)}"
