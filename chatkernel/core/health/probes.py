"""Health: probes with a timeout, and the snapshot made and cached.

Probes go through the ``health_probe`` hook (the channel's own probe by
default: Telegram ``getMe``...). :meth:`HealthProbes.probe` runs them side by side,
each under its own timeout (``health.probe_timeout_ms``, 10 s), so a slow or
hung probe only ever costs its own result ("no answer within 10 s"), never
another account's. A probe that raises is a failed probe, not a crash; one
without a latency gets the time the kernel measured.

The **snapshot** (:class:`~chatkernel.core.health.snapshot.HealthSnapshot`, whose
schema is chatkernel.core.health.snapshot) is made here. A background refresher probes
every account every ``health.refresh_seconds`` (60 s); a snapshot uses those
cached probe results and reads everything else fresh when asked, unless a
live probe is requested. Everything but the probes is exact whenever it is
read: a failed send, a failed poll (``AccountRuntime.problem``), a failed commit
of the state database count from the moment they happen and stop when the next
one works; a failed probe stops counting once the platform answers the
receive loop again, and is probed again at once.

:func:`local_snapshot` builds the same shape from the config and the store
alone, for ``chatkernel status`` when no gateway runs.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio

from chatkernel.core import config as cfg
from chatkernel.sdk.channel import CREDENTIALS_KEY
from chatkernel.core.outbound.deliveries import describe_payload
from chatkernel.sdk.models import (
    RECENT_FAILURES,
    Account,
    ProbeResult,
)
from chatkernel.core.health.monitor import resolve_settings
from chatkernel.core.health.snapshot import (
    AccountSnapshot,
    ChannelSnapshot,
    ClusterInfo,
    FailureInfo,
    GatewayInfo,
    HealthSnapshot,
    ProbeInfo,
    RecentSession,
    SessionSummary,
    StoreInfo,
    account_problems,
    cluster_info,
    monitor_info,
    overall,
)
from chatkernel.core.plugins import await_maybe
from chatkernel.core.store.base import StoreError

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from chatkernel.core.runtime.cluster import Cluster
    from chatkernel.core.health.metrics import Metrics
    from chatkernel.core.health.monitor import HealthMonitor
    from chatkernel.core.health.presence import Presence
    from chatkernel.core.inbound.queue import SessionQueue
    from chatkernel.core.plugins import PluginManager
    from chatkernel.core.store.base import Store

log = logging.getLogger("chatkernel.health")

RECENT_SESSIONS = 5

T = TypeVar("T")


# -- probes ---------------------------------------------------------------------------------


async def probe_account(pm: "PluginManager", account: Account, timeout: float) -> ProbeResult:
    """Probe one account through ``health_probe``; never raises, never exceeds ``timeout``.

    A timeout gives ``ok=False`` with ``extra["timed_out"] = True``.
    """
    started = time.perf_counter()

    def elapsed() -> float:
        return round((time.perf_counter() - started) * 1000, 1)

    calls = account.runtime.calls
    call = calls.begin("a probe")  # a hung probe shows before its timeout (sdk/calls.py)
    ok: bool | None = None
    try:
        with anyio.fail_after(timeout):
            result = await await_maybe(pm.hook.health_probe(account=account))
        ok = isinstance(result, ProbeResult) and result.ok
    except TimeoutError:
        ok = False
        return ProbeResult(ok=False, detail=f"no answer within {timeout:g} s",
                           latency_ms=elapsed(), extra={"timed_out": True})
    except Exception as exc:
        ok = False
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return ProbeResult(ok=False, detail=f"the probe failed: {reason}", latency_ms=elapsed())
    finally:
        calls.end(call, ok)
    if result is None:
        return ProbeResult(ok=False, detail="no probe answered (the account is not running)",
                           latency_ms=elapsed())
    if not isinstance(result, ProbeResult):
        return ProbeResult(ok=False, detail=f"the probe returned {type(result).__name__}, "
                                            "not a ProbeResult", latency_ms=elapsed())
    if result.latency_ms is None:
        result.latency_ms = elapsed()
    problem = account.runtime.problem
    if problem is not None and result.ok and not account.runtime.problem_restartable:
        # The platform answers, but the receive loop cannot work (another instance
        # polls the token): a person has to act, not the monitor.
        return ProbeResult(ok=False, detail=problem, latency_ms=result.latency_ms,
                           extra=result.extra, restartable=False)
    return result


def select_accounts(accounts: Iterable[Account], target: str | None) -> list[Account]:
    """The accounts ``CHANNEL`` or ``CHANNEL:ACCOUNT`` names (all for None);
    LookupError says what exists when nothing matches."""
    accounts = sorted(accounts, key=lambda a: a.key)
    if not target:
        return accounts
    channel, _, name = target.partition(":")
    chosen = [a for a in accounts if a.channel_name == channel and (not name or a.name == name)]
    if not chosen:
        known = ", ".join(a.key for a in accounts) or "none"
        raise LookupError(f"no running account matches {target!r} (accounts: {known})")
    return chosen


def configured_accounts(config: cfg.KernelConfig) -> list[tuple[str, str, bool, dict]]:
    """``(channel, account, enabled, raw table)`` for every account the gateway would run
    (implied ones included, see :func:`chatkernel.core.config.effective_accounts`)."""
    return cfg.effective_accounts(config)


def _raw_monitor_override(raw: dict) -> cfg.HealthMonitorConfig | None:
    table = raw.get("health_monitor")
    if not isinstance(table, dict):
        return None
    try:
        return cfg.HealthMonitorConfig.model_validate(table)
    except Exception:
        return None  # reported by config validation, not here


async def session_summary(store: "Store", now: float, *, running_turns: int | None = None,
                          queued: int | None = None) -> SessionSummary:
    records = await store.list_sessions()
    pending = await store.pairing_requests(now=now)
    return SessionSummary(
        pairing_pending=len(pending), total=len(records),
        active_last_hour=sum(1 for r in records if r.last_active_at >= now - 3600),
        active_last_day=sum(1 for r in records if r.last_active_at >= now - 86400),
        running_turns=running_turns, queued_messages=queued,
        recent=[RecentSession(key=r.key, last_active_at=r.last_active_at, agent=r.agent)
                for r in records[:RECENT_SESSIONS]])


@dataclass(slots=True)
class StoreHealth:
    """Whether the state database's commits go through (told by ``Store.on_commit``)."""

    failing_since: float | None = None
    last_error: str | None = None
    last_error_at: float | None = None
    failures: int = 0

    def info(self) -> StoreInfo:
        return StoreInfo(ok=self.failing_since is None, failing_since=self.failing_since,
                         last_error=self.last_error, last_error_at=self.last_error_at,
                         failures=self.failures)


class HealthRuntime(Protocol):
    """The running kernel's parts the probes and the snapshot read, on each call: each
    exists once the kernel started (RuntimeError before)."""

    def store(self) -> Store:
        """The opened store: credentials' ages, the session summary."""

    def queue(self) -> SessionQueue:
        """The session queue: running turns, queued messages."""

    def task_group(self) -> TaskGroup:
        """Where an account is probed again in the background."""

    def cluster(self) -> Cluster | None:
        """This process's part among several sharing the store (None: the only one)."""


class RunFacts(Protocol):
    """What a snapshot says of this run, read on each call."""

    def config(self) -> cfg.KernelConfig:
        """The config in effect (a reload replaces it): accounts, timeouts, monitor."""

    def started_at(self) -> float | None:
        """When the kernel started (None: not yet)."""

    def url(self) -> str | None:
        """The gateway's base URL (None: no HTTP server listens, or not yet)."""


class HealthProbes:
    """Probes, the cached probe results and the snapshot of one running kernel.

    Given what it reads by name: ``runtime`` (:class:`HealthRuntime`) and ``run``
    (:class:`RunFacts`) are its ports to the kernel; ``accounts`` is the kernel's
    accounts by key (read, never written), ``monitor`` the health monitor whose settings
    a snapshot shows."""

    def __init__(self, *, runtime: HealthRuntime, run: RunFacts,
                 accounts: Mapping[str, Account], pm: "PluginManager", metrics: "Metrics",
                 monitor: "HealthMonitor", presence: "Presence",
                 clock: Callable[[], float] = time.time) -> None:
        self._config = run.config
        self._accounts = accounts
        self._pm = pm
        self._metrics = metrics
        self._monitor = monitor
        self._presence = presence
        self._store = runtime.store
        self._queue = runtime.queue
        self._cluster = runtime.cluster
        self._task_group = runtime.task_group
        self._started_at = run.started_at
        self._url = run.url
        self.clock = clock
        #: When every account was last probed (by the refresher or a live snapshot).
        self.refreshed_at: float | None = None
        self._refreshing: anyio.Event | None = None
        #: The state database's commits.
        self.store = StoreHealth()
        self._reprobing: set[str] = set()

    def store_committed(self, error: Exception | None) -> None:
        """``Store.on_commit``: a commit went through (None) or failed."""
        store = self.store
        if error is None:
            if store.failing_since is not None:
                log.warning("state database: commits work again (they failed for %.0f s)",
                            self.clock() - store.failing_since)
                store.failing_since = None
            return
        now = self.clock()
        if store.failing_since is None:
            store.failing_since = now
            log.error("state database: a commit failed: %s", error)
        store.last_error, store.last_error_at = str(error), now
        store.failures += 1
        self._metrics.store_commit_failures.inc()

    @property
    def probe_timeout(self) -> float:
        return self._config().health.probe_timeout_ms / 1000

    @property
    def store_timeout(self) -> float:
        return self._config().health.store_timeout_ms / 1000

    async def probe(self, accounts: Iterable[Account] | None = None, *,
                    timeout: float | None = None) -> dict[str, ProbeResult]:
        """Probe accounts (all by default) side by side, each within ``timeout`` seconds;
        the results are also kept for the cached snapshot."""
        chosen = list(self._accounts.values()) if accounts is None else list(accounts)
        limit = self.probe_timeout if timeout is None else timeout
        results: dict[str, ProbeResult] = {}
        metrics = self._metrics

        async def one(account: Account) -> None:
            result = await probe_account(self._pm, account, limit)
            account.runtime.record_probe(result, self.clock())
            results[account.key] = result
            metrics.child(metrics.probe_ok, account.channel_name, account.name).set(
                1 if result.ok else 0)
            if not result.ok:
                metrics.child(metrics.probe_failures, account.channel_name, account.name).inc()

        async with anyio.create_task_group() as tg:
            for account in chosen:
                tg.start_soon(one, account, name=f"probe {account.key}")
        return {account.key: results[account.key] for account in chosen}

    async def refresh(self) -> None:
        """Probe every account for the cached snapshot; callers at the same time share
        one round of probes."""
        running = self._refreshing
        if running is not None:
            await running.wait()
            return
        self._refreshing = done = anyio.Event()
        try:
            await self.probe()
            self.refreshed_at = self.clock()
        finally:
            self._refreshing = None
            done.set()

    async def run_refresher(self, *,
                            sleep: Callable[[float], Awaitable[None]] = anyio.sleep) -> None:
        """Keep the cached probe results fresh, forever."""
        while True:
            try:
                await self.refresh()
            except Exception:
                log.exception("health: refreshing the probes failed")
            await sleep(self._config().health.refresh_seconds)

    def _probe_again(self, account: Account) -> None:
        """Probe one account in the background (once at a time), so a probe result the
        account has shown to be over is replaced soon."""
        if account.key in self._reprobing:
            return
        try:
            task_group = self._task_group()
        except RuntimeError:  # not started, or stopping
            return
        self._reprobing.add(account.key)

        async def probe() -> None:
            try:
                await self.probe([account])
            finally:
                self._reprobing.discard(account.key)

        task_group.start_soon(probe, name=f"probe again {account.key}")

    def account_snapshot(self, account: Account, now: float,
                         credentials_at: float | None = None) -> AccountSnapshot:
        runtime = account.runtime
        state = runtime.effective_state(now)
        probe = runtime.last_probe
        problems = account_problems(state, runtime, probe, now)
        superseded = runtime.probe_superseded
        if superseded:
            self._probe_again(account)
        last_error, last_error_at = runtime.latest_error()
        monitor = self._monitor
        return AccountSnapshot(
            key=account.key, channel=account.channel_name, account=account.name,
            ok=not problems, state=state, state_since=runtime.state_since,
            detail=runtime.detail,
            quiet=account.transport.quiet if account.transport is not None else False,
            loop_started_at=runtime.loop_started_at, last_inbound_at=account.last_inbound_at,
            last_event_at=max((t for t in (runtime.last_event_at, account.last_inbound_at)
                               if t is not None), default=None),
            last_sent_at=account.last_sent_at,
            restarts_last_hour=runtime.restarts_last_hour(now),
            last_error=last_error, last_error_at=last_error_at,
            problem=runtime.problem, problem_since=runtime.problem_since,
            send_failing_since=runtime.send_failing_since,
            last_send_error=runtime.last_send_error,
            last_send_error_at=runtime.last_send_error_at,
            recent_failures=[FailureInfo(**failure.as_dict())
                             for failure in reversed(runtime.recent_failures)],
            inbound_failures=runtime.inbound_failures,
            last_inbound_failure=runtime.last_inbound_failure,
            last_inbound_failure_at=runtime.last_inbound_failure_at,
            last_call_ok_at=runtime.calls.last_ok_at,
            hanging_since=hang.since if (hang := runtime.calls.hanging(now)) else None,
            credentials_at=credentials_at,
            credential_age_s=None if credentials_at is None else round(now - credentials_at, 1),
            probe=ProbeInfo.of(probe, runtime.last_probe_at, superseded=superseded),
            monitor=monitor_info(monitor.settings(account), runtime,
                                  monitor.next_check_at(account)),
            problems=problems)

    async def snapshot(self, *, live: bool = False, timeout: float | None = None,
                       sessions: bool = True) -> HealthSnapshot:
        """The snapshot; ``live`` probes every account now instead of using the cache.
        ``sessions=False`` skips the session summary (it reads every session row;
        ``/healthz``, polled often, does not need it)."""
        config, accounts, sharing = self._config(), self._accounts, self._cluster()
        started = time.perf_counter()
        if live:
            await self.probe(timeout=timeout)
            self.refreshed_at = self.clock()
        now = self.clock()
        store = self.store.info()
        reads = _StoreReads(store, self.store_timeout, now, shared=sharing is not None)
        cluster = (await self._cluster_info(sharing, reads)
                   if sharing is not None else None)
        holders = {lease.name: lease.holder for lease in cluster.leases} if cluster else {}
        channels: dict[str, ChannelSnapshot] = {}
        for name, account_name, enabled, raw in configured_accounts(config):
            account = accounts.get(f"{name}:{account_name}")
            if (account is not None and sharing is not None
                    and not sharing.owns(account.key)):
                holder = holders.get(f"account:{name}:{account_name}")
                if holder == sharing.holder:
                    # The store still names this instance, which gave the account up (its
                    # lease went unrenewed): nobody serves it until the lease runs out.
                    holder = None
                entry = AccountSnapshot(
                    key=account.key, channel=name, account=account_name, ok=None,
                    state="elsewhere",
                    detail=f"owned by {holder}" if holder else "owned by no instance now",
                    monitor=monitor_info(resolve_settings(config, name,
                                                           _raw_monitor_override(raw))))
                if not holder:
                    entry.ok, entry.problems = False, ["no instance owns this account"]
            elif account is not None:
                credentials_at = await reads(functools.partial(
                    _credentials_at, self._store(), name, account_name))
                entry = self.account_snapshot(account, now, credentials_at)
            else:
                entry = AccountSnapshot(
                    key=f"{name}:{account_name}", channel=name, account=account_name,
                    enabled=False, ok=None, state="stopped", detail="disabled in the config",
                    monitor=monitor_info(resolve_settings(config, name,
                                                           _raw_monitor_override(raw))))
            channels.setdefault(name, ChannelSnapshot(ok=None, accounts={})) \
                .accounts[account_name] = entry
        queue = self._queue()
        running = sum(1 for lane in queue.lanes.values() if lane.active)
        summary = SessionSummary(running_turns=running, queued_messages=queue.depth())
        if sessions:
            summary = await reads(functools.partial(
                session_summary, self._store(), now, queued=queue.depth(),
                running_turns=running)) or summary
        failed = (await reads(functools.partial(self._store().outbox_failed_count, now - 3600))
                  if sessions else None)
        ok, problems = overall(channels, judged=True, store=store)  # after the store's reads
        started_at = self._started_at()
        gateway = GatewayInfo(reachable=True, pid=os.getpid(), url=self._url(),
                              instance_id=self._presence.own.instance_id,
                              started_at=started_at,
                              uptime_s=None if started_at is None else round(now - started_at,
                                                                              1))
        return HealthSnapshot(
            ok=ok, ts=now, duration_ms=round((time.perf_counter() - started) * 1000, 1),
            live=live, gateway=gateway, channels=channels, sessions=summary, store=store,
            cluster=cluster, presence=[entry.as_dict() for entry in self._presence.entries()],
            problems=problems, failed_sends_last_hour=failed)

    async def _cluster_info(self, cluster: "Cluster", reads: "_StoreReads"
                            ) -> ClusterInfo | None:
        """The shared store's instances and leases; marks the snapshot's store
        unreachable (red) when it does not answer, or not in time."""
        store = reads.info

        async def ping_and_read() -> dict[str, Any]:
            store.round_trip_ms = round(await cluster.shared.ping() * 1000, 2)
            return await cluster.overview()

        overview = await reads(ping_and_read, errors=Exception)
        if overview is None:
            return ClusterInfo(holder=cluster.holder, lease_seconds=cluster.ttl)
        store.reachable = True
        return cluster_info(overview["instances"], overview["leases"], reads.now,
                            holder=cluster.holder, lease_seconds=cluster.ttl)


class _StoreReads:
    """A snapshot's reads of the store, each within ``timeout`` seconds. One that fails
    or does not answer in time makes the snapshot's store red (``unreachable`` for a
    shared store) and the rest are skipped: a hung store costs a snapshot one timeout,
    not one per read, and the snapshot still answers."""

    def __init__(self, info: StoreInfo, timeout: float, now: float, *, shared: bool) -> None:
        self.info = info
        self.timeout = timeout
        self.now = now
        self.shared = shared
        self.down = False

    async def __call__(self, read: Callable[[], Awaitable[T]], *,
                       errors: type[Exception] | tuple[type[Exception], ...] = StoreError
                       ) -> T | None:
        if self.down:
            return None
        try:
            with anyio.fail_after(self.timeout):
                return await read()
        except TimeoutError:
            self._failed(f"no answer within {self.timeout:g} s")
        except errors as exc:
            self._failed(str(exc) or type(exc).__name__)
        return None

    def _failed(self, reason: str) -> None:
        info = self.info
        self.down = True
        info.ok = False
        if self.shared:
            info.reachable = False
        info.last_error, info.last_error_at = reason, self.now


async def _credentials_at(store: "Store", channel: str, account: str) -> float | None:
    try:
        value = await store.get_account_state(channel, account, CREDENTIALS_KEY)
    except StoreError:  # the store is down: the snapshot says so, and shows the rest
        return None
    return float(value) if isinstance(value, (int, float)) else None


async def local_snapshot(config: cfg.KernelConfig, store: "Store | None", *,
                         now: float | None = None) -> HealthSnapshot:
    """What the config and the state database say when no gateway runs: every account
    ``stopped``, not judged (``ok`` None), with its last activity and credential age."""
    started = time.perf_counter()
    now = time.time() if now is None else now
    activity = await store.account_activity() if store is not None else {}
    failures: dict[tuple[str, str], list[FailureInfo]] = {}
    for entry, at in await store.outbox_failures(RECENT_FAILURES) if store is not None else []:
        payload = entry.payload
        failures.setdefault((entry.channel, entry.account), []).append(FailureInfo(
            at=at, session=entry.session_key, reply_id=entry.reply_id,
            part=f"{payload.chunk_index}/{payload.chunk_count}",
            message=describe_payload(payload), status=entry.status, why="",
            error=entry.error or "?"))
    channels: dict[str, ChannelSnapshot] = {}
    for name, account_name, enabled, raw in configured_accounts(config):
        seen = activity.get((name, account_name), {})
        credentials_at = await _credentials_at(store, name, account_name) if store else None
        entry = AccountSnapshot(
            key=f"{name}:{account_name}", channel=name, account=account_name, enabled=enabled,
            ok=None, state="stopped", quiet=None,
            detail="" if enabled else "disabled in the config",
            last_inbound_at=seen.get("last_inbound_at"), last_sent_at=seen.get("last_sent_at"),
            recent_failures=failures.get((name, account_name), []),
            credentials_at=credentials_at,
            credential_age_s=None if credentials_at is None else round(now - credentials_at, 1),
            monitor=monitor_info(resolve_settings(config, name, _raw_monitor_override(raw))))
        channels.setdefault(name, ChannelSnapshot(ok=None, accounts={})) \
            .accounts[account_name] = entry
    cluster = None
    shared = store.shared if store is not None else None
    if shared is not None:  # no gateway here, maybe elsewhere: who owns what
        cluster = cluster_info(await shared.instances(), await shared.leases(), now,
                               holder="", lease_seconds=config.store.lease_seconds)
        owners = {lease.name: lease.holder for lease in cluster.leases}
        for channel in channels.values():
            for entry in channel.accounts.values():
                holder = owners.get(f"account:{entry.key}")
                if holder and entry.enabled:
                    entry.state, entry.detail = "elsewhere", f"owned by {holder}"
    _, problems = overall(channels, judged=False)
    sessions = await session_summary(store, now) if store is not None else SessionSummary()
    return HealthSnapshot(ok=None, ts=now,
                          duration_ms=round((time.perf_counter() - started) * 1000, 1),
                          source="local", gateway=GatewayInfo(reachable=False),
                          channels=channels, sessions=sessions, cluster=cluster,
                          problems=problems)


__all__ = ["HealthProbes", "StoreHealth", "local_snapshot", "probe_account", "select_accounts"]
