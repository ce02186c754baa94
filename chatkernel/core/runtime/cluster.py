"""Several gateway processes on one shared store: which process runs which account.

With a store that has :attr:`~chatkernel.core.store.base.Store.shared` state (Redis),
any number of ``chatkernel run`` processes share the work. Each account is *owned* by
one of them at a time, through a lease in the store named ``account:<channel>:<account>``
with a time to live (``store.lease_seconds``), renewed every quarter of it
(:data:`RENEWALS_PER_LEASE`) while the owner lives. The owner runs everything of the account that must happen once and in order:

- its receive loop (so exactly one process polls a bot account),
- the turns of its sessions, in order per chat,
- its sends, under its rate limits (one sender per account: N processes never send N
  times the platform's limit).

Every process accepts webhook requests for every account: it journals the message and
answers 200. The store appends each journaled message to the account's *inbox* stream,
and the owner reads the stream and runs what it finds; a reply or a proactive send queued
on a process that does not own the account goes the same way. So where a message was
accepted does not matter.

Taking a lease over is a restart of that one account: the new owner reads the inbox's
position, replays the account's unfinished journal entries, reports the sends that were
in flight as ``delivery unknown`` and sends what was never attempted, then reads the
inbox from that position (entries seen both ways are run once).

An instance takes no more than its fair share of the accounts (an equal part over the
live instances, rounded up) and hands the rest over, one at a time, once each has
nothing in flight; a stopping instance drains, then gives its leases back.

The lease's token *fences* a former owner (paused, partitioned, slow to notice it lost
the lease): the store refuses its cursor and outbox writes for the account
(:class:`~chatkernel.core.store.shared.LeaseLost`), so it cannot advance the cursor nor
mark a payload ``sending``, and nothing leaves it. The config heartbeat and session
heartbeats run on the process holding the ``heartbeats`` lease only.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from chatkernel.core.store.base import JournalEntry, OutboxEntry, StoreError
from chatkernel.core.store.shared import account_lease

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from chatkernel.core.runtime.supervisor import Supervisors
    from chatkernel.core.heartbeat.scheduler import HeartbeatScheduler
    from chatkernel.core.inbound.pipeline import Inbound, Receiver
    from chatkernel.core.inbound.sessions import Sessions
    from chatkernel.core.outbound.outbox import Outbox
    from chatkernel.core.runtime.parts import GatewayParts
    from chatkernel.core.store.shared import SharedState
    from chatkernel.sdk.models import Account

log = logging.getLogger("chatkernel.cluster")

HEARTBEATS_LEASE = "heartbeats"
#: Seconds a read of the inboxes blocks before it looks at the accounts owned again.
INBOX_BLOCK_SECONDS = 1.0
#: Seconds an account being handed over may take to settle before it is kept.
SHED_SECONDS = 10.0
#: Rounds of renewal (and of looking for free leases) per time to live. A dead owner's
#: account is taken within the lease plus one round (3 s + 0.75 s at the defaults); a
#: live owner stalled (a GC pause, a slow disk, SIGSTOP) for less than the lease minus
#: one round (2.25 s) keeps it.
RENEWALS_PER_LEASE = 4


def lease_name(account: "Account") -> str:
    """The lease that makes an instance the owner of ``account``."""
    return account_lease(account.channel_name, account.name)


class _Tenure:
    """One spell of owning one account."""

    __slots__ = ("token", "renewed_at", "scope", "ended")

    def __init__(self, token: int, now: float) -> None:
        self.token = token
        self.renewed_at = now
        self.scope = anyio.CancelScope()  # the account's receive loop
        self.ended = anyio.Event()


class ClusterHost(Protocol):
    """What the cluster asks of the kernel it runs in."""

    def account_busy(self, key: str) -> bool:
        """Whether an account has work in flight here (it is handed over only when not)."""

    async def replay_unfinished(self, account: Account) -> None:
        """Line up an account's unfinished journal entries (it was just taken over)."""

    def sessions(self) -> Sessions:
        """The sessions (their cache of an account taken over is dropped)."""

    def heartbeats(self) -> HeartbeatScheduler:
        """The heartbeat scheduler, started while this instance holds their lease."""

    def store_committed(self, error: Exception | None) -> None:
        """Report a write to the store: it went through (None) or failed (health)."""


class Cluster:
    """This process's part among the gateways sharing one store.

    The kernel joins at its start (:meth:`join`: leases kept, inboxes read, accounts
    recovered as they are taken), the gateway then runs the receive loops
    (:meth:`run_receive_loops`) and, when it stops, :meth:`stop_receiving` and
    :meth:`release`. The kernel asks :meth:`owns` where it would otherwise act as the
    only process (claiming a send, processing a message at once).

    Given by name what it acts on: the kernel's accounts by key (read only), ``host``
    (:class:`ClusterHost`), its port to the kernel, the inbound pipeline and the outbox
    (to line up and adopt what the inboxes bring), the receiver and supervisors of the
    loops it runs, whether this process runs heartbeats, and the gateway's parts (its
    URL: None until its server listens).
    """

    def __init__(self, shared: "SharedState", *, ttl: float, instance_id: str,
                 accounts: Mapping[str, "Account"], host: ClusterHost,
                 inbound: "Inbound", outbox: "Outbox",
                 receiver: "Receiver", supervisors: "Supervisors", heartbeats: bool,
                 gateway: "GatewayParts", clock: Callable[[], float] = time.monotonic) -> None:
        self.shared = shared
        self._accounts = accounts  # the kernel's, by key: read, never written
        self._account_busy = host.account_busy
        self._inbound = inbound
        self._outbox = outbox
        self._sessions = host.sessions
        self._replay_unfinished = host.replay_unfinished
        self._receiver = receiver
        self._supervisors = supervisors
        # None: this process runs no heartbeats
        self._heartbeat_scheduler = host.heartbeats if heartbeats else None
        self._store_committed = host.store_committed
        self._gateway = gateway
        self.ttl = ttl
        #: Shown in status; several processes may share it (the same config).
        self.instance_id = instance_id
        #: Unique to this process and this start: who holds a lease.
        self.holder = f"{instance_id}/{os.getpid()}/{uuid.uuid4().hex[:6]}"
        self.clock = clock
        self.started_at = time.time()
        shared.hand_sends_to_owners()  # a send queued here for another's account
        self._owned: dict[str, _Tenure] = {}
        self._positions: dict[tuple[str, str], str] = {}
        self._heartbeats: _Tenure | None = None
        self._loops: TaskGroup | None = None
        self._reading: anyio.CancelScope | None = None
        self._receiving = True
        self._receive_loops = False  # see run_receive_loops
        self._released = False
        self._keeping: anyio.CancelScope | None = None
        self._shedding = False  # an account is being handed over (one at a time)
        # What runs for the accounts another instance owns (Transport.serve_elsewhere).
        self._elsewhere: dict[str, _Tenure] = {}
        # Accounts given up whose fence still holds the old token: their work left
        # here must write nothing that counts until it has settled (see _tend).
        self._fenced_off: set[str] = set()
        self._store_down_since: float | None = None
        self._renewed = anyio.Event()  # set after every round of renewals
        # Accounts being taken over here (fenced, recovering, not yet owned): set once
        # the take is over either way.
        self._taking: dict[str, anyio.Event] = {}

    # -- what the kernel asks ----------------------------------------------------------

    def owns(self, account_key: str) -> bool:
        """Whether this process owns the account now."""
        return account_key in self._owned

    def owned(self) -> list[str]:
        """The account keys this process owns, sorted."""
        return sorted(self._owned)

    async def settled(self, account_key: str) -> None:
        """Return once the account is not being taken over by this process. A take
        fences the account first and owns it only once it recovered: a payload queued
        here in between would be neither sent here nor handed to an owner's inbox."""
        taking = self._taking.get(account_key)
        if taking is not None:
            await taking.wait()

    async def overview(self) -> dict[str, Any]:
        """Every live instance (holder -> info) and every lease (name -> holder, token,
        seconds left), read from the store."""
        return {"instances": await self.shared.instances(),
                "leases": await self.shared.leases()}

    # -- what a reload asks (the gateway's ReceiveLoops, for several instances) -------

    def start(self, account: "Account") -> None:
        """A reload added the account, or rebuilt its channel: run its receive loop if
        this instance owns it, else take its requests for the owner. (A new account
        is taken over like any other, once its lease is free.)"""
        tenure = self._owned.get(account.key)
        if tenure is not None:
            fresh = self._owned[account.key] = _Tenure(tenure.token, tenure.renewed_at)
            if self._receive_loops:
                self._start_account(account, fresh)
        else:
            self._start_elsewhere(account)

    def stop(self, key: str) -> anyio.Event | None:
        """A reload removes the account or rebuilds its channel: stop what runs for it
        here; the event is set once it ended (None: nothing ran). Its lease is kept
        until the account is gone (then given back) or started again."""
        self._supervisors.discard(key)
        elsewhere = self._elsewhere.pop(key, None)
        if elsewhere is not None:
            elsewhere.scope.cancel()
        tenure = self._owned.get(key)
        if tenure is not None:
            tenure.scope.cancel()
            return tenure.ended
        return elsewhere.ended if elsewhere is not None else None

    # -- the loops ---------------------------------------------------------------------

    async def join(self, task_group: "TaskGroup") -> None:
        """Register this instance and take the leases it can (the accounts it takes are
        recovered before this returns), then keep them and read their inboxes in
        ``task_group`` (the kernel's) until :meth:`release`.

        The accounts' receive loops run once :meth:`run_receive_loops` is called (the
        gateway does; a kernel in a test drives its channels itself). The gateway's
        stop is in two steps: :meth:`stop_receiving` (no receive loop, no inbox, no
        takeover; the leases are still renewed while the turns and sends drain), then
        :meth:`release`, which gives the leases back so another instance takes over at
        once (a killed instance's leases run out instead)."""
        self._loops = task_group
        try:
            await self._keep_round()
        except Exception as exc:  # the store is down: the loop below retries
            self._store_failing(exc)
        task_group.start_soon(self._keep_leases, name="cluster leases")
        task_group.start_soon(self._read_inboxes, name="cluster inboxes")

    def run_receive_loops(self) -> None:
        """From now on run the receive loop of each account this instance owns, and
        take the requests of the others for their owners (Transport.serve_elsewhere)."""
        self._receive_loops = True
        for key, tenure in list(self._owned.items()):
            account = self._accounts.get(key)
            if account is not None:
                self._start_account(account, tenure)
        for account in self._accounts.values():
            if account.key not in self._owned:
                self._start_elsewhere(account)

    def stop_receiving(self) -> None:
        """Stop the receive loops and the inbox reads, take nothing more over; keep
        renewing the leases held (the turns and sends under way drain meanwhile)."""
        self._receiving = False
        self._positions.clear()
        for tenure in self._owned.values():
            tenure.scope.cancel()
        for elsewhere in self._elsewhere.values():
            elsewhere.scope.cancel()
        if self._reading is not None:
            self._reading.cancel()
        if self._heartbeats is not None:
            self._heartbeats.scope.cancel()

    async def release(self) -> None:
        """Give every lease back and stop keeping them (at most once)."""
        if self._released:
            return
        self._released = True
        self.stop_receiving()
        if self._keeping is not None:
            self._keeping.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(2):
            try:
                await self._release_all()
            except Exception as exc:  # they run out by themselves
                log.warning("could not give the leases back (%s); they expire in %g s",
                            exc, self.ttl)

    async def _keep_leases(self) -> None:
        every = self.ttl / RENEWALS_PER_LEASE
        with anyio.CancelScope() as self._keeping:
            while True:
                await anyio.sleep(every)
                try:
                    await self._keep_round()
                except Exception as exc:  # tried again in a quarter of the lease
                    self._store_failing(exc)
                    self._expire_unrenewed()
                else:
                    self._store_works()
                self._tended()

    async def _keep_round(self) -> None:
        """Renew what is held, give up what is not, take what is free (up to a fair
        share), hand over what is beyond it."""
        await self._register()
        await self._release_removed()
        share = await self._fair_share()
        for account in list(self._accounts.values()):
            await self._tend(account, share)
        await self._tend_heartbeats()

    async def _release_removed(self) -> None:
        """Give back the leases of accounts a reload removed, once their work settled."""
        for key in [key for key in self._owned if key not in self._accounts]:
            if self._account_busy(key):
                continue
            tenure = self._owned.pop(key)
            channel, _, name = key.partition(":")
            await self.shared.release_lease(account_lease(channel, name), self.holder,
                                            tenure.token)
            log.info("%s: removed from the config; its lease is given back", key)

    def _tended(self) -> None:
        renewed, self._renewed = self._renewed, anyio.Event()
        renewed.set()

    def _fresh(self, tenure: _Tenure) -> bool:
        # Two thirds of the time to live: a lease renewed that recently is surely ours.
        return self.clock() - tenure.renewed_at < self.ttl * 2 / 3

    async def owning(self, account_key: str) -> bool:
        """Wait until this instance surely owns the account (its lease renewed lately),
        and say so; False once it does not own it. An instance that was paused past its
        lease (SIGSTOP, a long GC, a frozen VM) learns which it is before it acts."""
        while True:
            tenure = self._owned.get(account_key)
            if tenure is None:
                return False
            if self._fresh(tenure):
                return True
            await self._renewed.wait()

    async def receive_gate(self, account_key: str) -> None:
        """What the account's receive loop awaits before each poll: it waits while this
        instance cannot be sure it still owns the account (ChannelContext.receive_gate)."""
        if not await self.owning(account_key):
            await anyio.sleep_forever()  # given up: its loop is being cancelled

    async def _register(self) -> None:
        info = {"instance": self.instance_id, "host": socket.gethostname(),
                "pid": os.getpid(), "url": self._gateway.url, "started_at": self.started_at,
                "owned": self.owned(), "heartbeats": self._heartbeats is not None}
        await self.shared.register_instance(self.holder, info, self.ttl)

    async def _fair_share(self) -> int:
        """How many accounts this instance should own: an equal part of them over the
        live instances, rounded up (a new instance takes its part as others shed)."""
        live = max(1, len(await self.shared.instances()))
        return max(1, math.ceil(len(self._accounts) / live))

    async def _tend(self, account: "Account", share: int) -> None:
        name = lease_name(account)
        tenure = self._owned.get(account.key)
        if tenure is not None:
            if await self.shared.renew_lease(name, self.holder, tenure.token, self.ttl):
                tenure.renewed_at = self.clock()
            else:
                self._lose(account, "its lease went to another instance")
                return
            if (len(self._owned) > share and not self._shedding and self._receiving
                    and not self._account_busy(account.key)):
                assert self._loops is not None
                self._shedding = True
                self._loops.start_soon(self._shed, account, tenure,
                                       name=f"hand over {account.key}")
            return
        if len(self._owned) >= share:
            return
        if self._account_busy(account.key):
            return  # the work of an earlier tenure is still settling: not yet
        if account.key in self._fenced_off:
            # Settled: unfenced again, so a send queued here reaches the owner's inbox.
            self._fenced_off.discard(account.key)
            self.shared.fence(account.channel_name, account.name, None)
        if not self._receiving:
            return
        token = await self.shared.acquire_lease(name, self.holder, self.ttl)
        if token is not None:
            await self._take(account, token)

    async def _take(self, account: "Account", token: int) -> None:
        taking = self._taking[account.key] = anyio.Event()
        try:
            await self._take_over(account, token)
        finally:
            del self._taking[account.key]
            taking.set()

    async def _take_over(self, account: "Account", token: int) -> None:
        self.shared.fence(account.channel_name, account.name, token)
        where = (account.channel_name, account.name)
        # The position first: what is journaled from now on is read from the inbox,
        # what was before is replayed below (both: run once, see Inbound.line_up).
        position = await self.shared.inbox_position(*where)
        tenure = _Tenure(token, self.clock())
        self._inbound.forget_lined(account)
        self._outbox.forget_known(account)
        self._sessions().forget(f"{account.key}:")  # another instance may have changed them
        await self._stop_elsewhere(account)
        await self._outbox.recover(account)
        await self._replay_unfinished(account)
        # Owned from here on: what this instance journals now is lined up behind the
        # replayed messages (before, it came by the inbox, read from `position`).
        self._owned[account.key] = tenure
        self._positions[where] = position
        log.info("%s: this instance owns it now (lease token %d)", account.key, token)
        if self._receive_loops:
            self._start_account(account, tenure)

    def _start_account(self, account: "Account", tenure: _Tenure) -> None:
        assert self._loops is not None
        self._loops.start_soon(self._run_account, account, tenure,
                               name=f"receive {account.key}")

    async def _run_account(self, account: "Account", tenure: _Tenure) -> None:
        supervisor = self._supervisors.add(account)
        try:
            with tenure.scope:
                await supervisor.run()
        finally:
            self._supervisors.discard(account.key, supervisor)
            tenure.ended.set()

    async def _shed(self, account: "Account", tenure: _Tenure) -> None:
        """Hand an account over to a less busy instance: stop its receive loop, let its
        work here settle, give the lease back (the next owner replays what is left)."""
        try:
            tenure.scope.cancel()
            # Not read meanwhile: what comes is the next owner's (or, kept, read from
            # here again: see _restart).
            stopped_at = self._positions.pop((account.channel_name, account.name), None)
            with anyio.move_on_after(SHED_SECONDS):
                await tenure.ended.wait()
                while self._account_busy(account.key):
                    await anyio.sleep(0.05)
                if self._owned.get(account.key) is tenure:
                    del self._owned[account.key]
                    await self.shared.release_lease(lease_name(account), self.holder,
                                                    tenure.token)
                    self.shared.fence(account.channel_name, account.name, None)
                    self._start_elsewhere(account)
                    log.info("%s: handed over (this instance owns more than its share)",
                             account.key)
                return
            # Still busy: keep it, and receive again.
            if self._owned.get(account.key) is tenure and self._receiving:
                await self._restart(account, tenure, stopped_at)
        finally:
            self._shedding = False

    async def _restart(self, account: "Account", tenure: _Tenure,
                       stopped_at: str | None) -> None:
        """Own again an account whose hand-over did not settle in time: its receive loop
        runs again, and its inbox is read on from ``stopped_at``, where the hand-over
        stopped reading it, not from its end. What came meanwhile is this instance's
        to run: a message is in the unfinished journal as well (replayed first; seen
        both ways, it runs once), but a payload another instance queued for the
        account is in the inbox only."""
        where = (account.channel_name, account.name)
        if stopped_at is None:
            stopped_at = await self.shared.inbox_position(*where)
        await self._replay_unfinished(account)
        self._positions[where] = stopped_at  # (as in _take: behind the replayed ones)
        fresh = self._owned[account.key] = _Tenure(tenure.token, tenure.renewed_at)
        if self._receive_loops:
            self._start_account(account, fresh)

    def _start_elsewhere(self, account: "Account") -> None:
        """Run the account's :meth:`Transport.serve_elsewhere` (its webhook, the web chat's
        page) while another instance owns it."""
        if account.channel is None or not self._receiving or not self._receive_loops \
                or self._loops is None or account.key in self._elsewhere:
            return
        tenure = self._elsewhere[account.key] = _Tenure(0, self.clock())
        self._loops.start_soon(self._serve_elsewhere, account, tenure,
                               name=f"elsewhere {account.key}")

    async def _serve_elsewhere(self, account: "Account", tenure: _Tenure) -> None:
        assert account.transport is not None
        try:
            with tenure.scope:
                await account.transport.serve_elsewhere(self._receiver)
        except Exception:
            log.exception("%s: taking its requests for the owner failed", account.key)
        finally:
            tenure.ended.set()

    async def _stop_elsewhere(self, account: "Account") -> None:
        tenure = self._elsewhere.pop(account.key, None)
        if tenure is not None:
            tenure.scope.cancel()
            await tenure.ended.wait()

    def _lose(self, account: "Account", why: str) -> None:
        """Stop acting as the account's owner. Its fence stays at the old token, so
        whatever of its work is still under way here can write nothing that counts."""
        tenure = self._owned.pop(account.key, None)
        self._positions.pop((account.channel_name, account.name), None)
        if tenure is None:
            return
        self._fenced_off.add(account.key)
        tenure.scope.cancel()
        self._start_elsewhere(account)
        log.warning("%s: no longer owned by this instance: %s", account.key, why)

    def _expire_unrenewed(self) -> None:
        """Leases not renewed for a whole time to live may be another's by now."""
        now = self.clock()
        for key, tenure in list(self._owned.items()):
            if now - tenure.renewed_at >= self.ttl:
                account = self._accounts.get(key)
                if account is None:  # removed by a reload meanwhile
                    self._owned.pop(key)
                    continue
                self._lose(account, "its lease could not be renewed "
                           f"for {self.ttl:g} s (the store is unreachable)")
        if self._heartbeats is not None and now - self._heartbeats.renewed_at >= self.ttl:
            self._stop_heartbeats()

    async def _tend_heartbeats(self) -> None:
        if self._heartbeat_scheduler is None:
            return
        tenure = self._heartbeats
        if tenure is None and not self._receiving:
            return
        if tenure is not None:
            if await self.shared.renew_lease(HEARTBEATS_LEASE, self.holder, tenure.token,
                                             self.ttl):
                tenure.renewed_at = self.clock()
            else:
                self._stop_heartbeats()
            return
        token = await self.shared.acquire_lease(HEARTBEATS_LEASE, self.holder, self.ttl)
        if token is None:
            return
        tenure = self._heartbeats = _Tenure(token, self.clock())
        assert self._loops is not None
        self._loops.start_soon(self._run_heartbeats, tenure, name="cluster heartbeats")

    async def _run_heartbeats(self, tenure: _Tenure) -> None:
        assert self._heartbeat_scheduler is not None
        scheduler = self._heartbeat_scheduler()
        log.info("this instance runs the heartbeats now")
        try:
            with tenure.scope:
                async with anyio.create_task_group() as group:
                    try:
                        await scheduler.start(group)
                    except StoreError as exc:
                        # Their state could not be read (the store is back a moment
                        # ago): no reason to end the gateway. The lease is given up,
                        # and taken again at a next round.
                        log.warning("the heartbeats could not start: %s; trying again", exc)
                        group.cancel_scope.cancel()
                        await self._give_up_heartbeats(tenure)
                        return
                    await anyio.sleep_forever()
        finally:
            scheduler.stopped()
            tenure.ended.set()

    async def _give_up_heartbeats(self, tenure: _Tenure) -> None:
        if self._heartbeats is tenure:
            self._heartbeats = None
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.ttl):
            try:
                await self.shared.release_lease(HEARTBEATS_LEASE, self.holder, tenure.token)
            except StoreError:
                pass  # it runs out by itself

    def _stop_heartbeats(self) -> None:
        tenure, self._heartbeats = self._heartbeats, None
        if tenure is not None:
            tenure.scope.cancel()
            log.warning("the heartbeats' lease went to another instance")

    async def _release_all(self) -> None:
        for key in list(self._owned):
            tenure = self._owned.pop(key)
            tenure.scope.cancel()
            channel, _, name = key.partition(":")
            await self.shared.release_lease(account_lease(channel, name), self.holder,
                                            tenure.token)
        if self._heartbeats is not None:
            tenure, self._heartbeats = self._heartbeats, None
            tenure.scope.cancel()
            await self.shared.release_lease(HEARTBEATS_LEASE, self.holder, tenure.token)
        await self.shared.unregister_instance(self.holder)

    # -- the inboxes -------------------------------------------------------------------

    async def _read_inboxes(self) -> None:
        with anyio.CancelScope() as self._reading:
            while self._receiving:
                if not self._positions:
                    await anyio.sleep(INBOX_BLOCK_SECONDS / 4)
                    continue
                try:
                    items = await self.shared.read_inbox(dict(self._positions),
                                                         INBOX_BLOCK_SECONDS)
                except Exception as exc:
                    self._store_failing(exc)
                    await anyio.sleep(1.0)
                    continue
                # Read before a pause, maybe: acted on only by a sure owner.
                for where in {where for where, _, _ in items}:
                    await self.owning(f"{where[0]}:{where[1]}")
                self._dispatch(items)

    def _dispatch(self, items: list[tuple[tuple[str, str], str, Any]]) -> None:
        """Hand what the inboxes brought to the pipeline (messages) or the senders
        (payloads queued on another instance)."""
        for where, entry_id, item in items:
            if where not in self._positions:
                continue  # lost meanwhile: the next owner reads it
            self._positions[where] = entry_id
            account = self._accounts.get(f"{where[0]}:{where[1]}")
            if account is None:
                continue
            if isinstance(item, JournalEntry):
                self._inbound.line_up(account, item.seq, item.message)
            elif isinstance(item, OutboxEntry):
                self._outbox.adopt(item)

    # -- the store's reachability ------------------------------------------------------

    def _store_failing(self, exc: Exception) -> None:
        if self._store_down_since is None:
            self._store_down_since = time.time()
            log.warning("the shared store cannot be reached (%s): leases are not renewed; "
                        "accounts not renewed within %g s are given up, and retried", exc,
                        self.ttl)
            self._store_committed(exc)

    def _store_works(self) -> None:
        if self._store_down_since is not None:
            log.info("the shared store answers again after %.1f s",
                     time.time() - self._store_down_since)
            self._store_down_since = None
            self._store_committed(None)

