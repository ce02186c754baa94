"""Health: probes with a timeout, the snapshot and its cache.

Probes go through the ``health_probe`` hook (the channel's own probe by
default: Telegram ``getMe``...). :meth:`Health.probe` runs them side by side,
each under its own timeout (``health.probe_timeout_ms``, 10 s), so a slow or
hung probe only ever costs its own result ("no answer within 10 s"), never
another account's. A probe that raises is a failed probe, not a crash; one
without a latency gets the time the kernel measured.

The **snapshot** (:class:`HealthSnapshot`) is what ``chatkernel health``,
``/healthz``, ``/status`` and the control API show: ``ok``, ``ts``,
``duration_ms``, every channel and account (state, last events, restarts in
the last hour, last error, credential age, probe result, what the monitor
thinks), the session summary and presence. A background refresher probes
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
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio
from pydantic import BaseModel, ConfigDict

from chatkernel import __version__
from chatkernel.core import config as cfg
from chatkernel.sdk.channel import CREDENTIALS_KEY
from chatkernel.core.outbound.deliveries import describe_payload
from chatkernel.sdk.models import (
    RECENT_FAILURES,
    Account,
    AccountRuntime,
    AccountState,
    ProbeResult,
)
from chatkernel.core.health.monitor import MonitorSettings, resolve_settings, settings_for
from chatkernel.core.plugins import await_maybe
from chatkernel.core.store.base import StoreError

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from chatkernel.core.gateway.cluster import Cluster
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


# -- the snapshot ---------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProbeInfo(_Model):
    ok: bool
    detail: str
    latency_ms: float | None
    at: float | None
    timed_out: bool = False
    restartable: bool = True
    #: It failed, and the platform has answered the receive loop since: not counted
    #: (a fresh probe is on its way).
    superseded: bool = False

    @classmethod
    def of(cls, result: ProbeResult | None, at: float | None, *,
           superseded: bool = False) -> "ProbeInfo | None":
        if result is None:
            return None
        return cls(ok=result.ok, detail=result.detail, latency_ms=result.latency_ms, at=at,
                   timed_out=bool(result.extra.get("timed_out")),
                   restartable=result.restartable, superseded=superseded)


class FailureInfo(_Model):
    """A payload that did not arrive (see chatkernel.core.outbound.deliveries.Failure)."""

    at: float
    session: str
    reply_id: str
    part: str
    message: str
    status: str
    why: str
    error: str


class StoreInfo(_Model):
    """Whether the state database commits: ``failing_since`` is None when it does."""

    ok: bool
    failing_since: float | None = None
    last_error: str | None = None
    last_error_at: float | None = None
    failures: int = 0
    #: A store several instances share: whether it answered the snapshot's ping, and
    #: how fast (None for a store of this process's own).
    reachable: bool | None = None
    round_trip_ms: float | None = None


class InstanceInfo(_Model):
    """One gateway process sharing the store (``chatkernel status`` lists them)."""

    holder: str
    instance: str | None = None
    host: str | None = None
    pid: int | None = None
    url: str | None = None
    started_at: float | None = None
    age_s: float | None = None
    owned: list[str] = []
    heartbeats: bool = False
    is_self: bool = False


class LeaseInfo(_Model):
    """Who holds a lease (an account's, or the heartbeats'), and for how much longer."""

    name: str
    holder: str
    token: int
    expires_in_s: float


class ClusterInfo(_Model):
    """The instances sharing the store and their leases, as the store has them."""

    holder: str
    lease_seconds: float
    instances: list[InstanceInfo] = []
    leases: list[LeaseInfo] = []


class MonitorInfo(_Model):
    enabled: bool
    check_seconds: float
    stale_seconds: float
    max_restarts_per_hour: int
    note: str = ""
    checked_at: float | None = None
    next_check_at: float | None = None


class AccountSnapshot(_Model):
    key: str
    channel: str
    account: str
    enabled: bool = True
    #: None when not judged (disabled, or read from local state with no gateway).
    ok: bool | None
    state: AccountState
    state_since: float | None = None
    detail: str = ""
    #: Judged by its probe rather than by silence (None: unknown without the gateway).
    quiet: bool | None = False
    loop_started_at: float | None = None
    last_inbound_at: float | None = None
    last_event_at: float | None = None
    last_sent_at: float | None = None
    restarts_last_hour: int = 0
    #: The latest error of any kind: the loop's, the receive problem, a failed send.
    last_error: str | None = None
    last_error_at: float | None = None
    #: What the receive loop reports being stuck on, since when (None: nothing).
    problem: str | None = None
    problem_since: float | None = None
    #: Since when sends fail for the whole account (None: they work), and the last error.
    send_failing_since: float | None = None
    last_send_error: str | None = None
    last_send_error_at: float | None = None
    #: The latest payloads that did not arrive, newest first.
    recent_failures: list[FailureInfo] = []
    #: Inbound messages that failed in the pipeline since the gateway started, the last
    #: one's reason and time.
    inbound_failures: int = 0
    last_inbound_failure: str | None = None
    last_inbound_failure_at: float | None = None
    #: When a call to the platform (a send, a probe, a poll) last worked, and since when
    #: one has been out unanswered with nothing working since (None: none hangs).
    last_call_ok_at: float | None = None
    hanging_since: float | None = None
    credentials_at: float | None = None
    credential_age_s: float | None = None
    probe: ProbeInfo | None = None
    monitor: MonitorInfo | None = None
    problems: list[str] = []


class ChannelSnapshot(_Model):
    ok: bool | None
    accounts: dict[str, AccountSnapshot]


class RecentSession(_Model):
    key: str
    last_active_at: float
    agent: str = "default"  # the agent the conversation is with


class SessionSummary(_Model):
    total: int = 0
    active_last_hour: int = 0
    active_last_day: int = 0
    running_turns: int | None = None
    queued_messages: int | None = None
    recent: list[RecentSession] = []


class GatewayInfo(_Model):
    reachable: bool
    pid: int | None = None
    url: str | None = None
    version: str = __version__
    instance_id: str | None = None
    started_at: float | None = None
    uptime_s: float | None = None


class HealthSnapshot(_Model):
    """Everything ``chatkernel health`` and ``status`` show; JSON through ``model_dump``."""

    ok: bool | None
    ts: float
    duration_ms: float
    live: bool = False
    source: Literal["gateway", "local"] = "gateway"
    gateway: GatewayInfo
    channels: dict[str, ChannelSnapshot]
    sessions: SessionSummary
    #: The state database's commits (None in ``status`` without a gateway).
    store: StoreInfo | None = None
    #: Several instances on one shared store (None: this one alone).
    cluster: ClusterInfo | None = None
    presence: list[dict[str, Any]] = []
    problems: list[str] = []

    def accounts(self) -> list[AccountSnapshot]:
        return [a for c in self.channels.values() for a in c.accounts.values()]


def account_problems(state: str, runtime: AccountRuntime, probe: ProbeResult | None,
                     now: float | None = None) -> list[str]:
    """Why an enabled account is not healthy (empty: healthy).

    Read from the runtime as it is now (``now``: the runtime's clock by default): a
    failed send or poll counts from the moment it happens, and stops counting when the
    next one works; a call out for more than a few seconds with nothing of the
    account answered since counts while it hangs (chatkernel.sdk.calls). A failed
    probe, and a poll that could not reach the platform, stop counting as soon as
    the platform answers again (``AccountRuntime.probe_superseded``,
    ``problem_superseded``), not at the next probe or poll.
    """
    problems = []
    if state == "failed":
        problems.append(f"receive loop failed: {runtime.detail or runtime.last_error or '?'}")
    elif state == "paused":
        problems.append(f"paused: {runtime.detail or 'no reason given'}")
    elif state == "stopped":
        problems.append("receive loop not running")
    said = state == "failed" and runtime.detail == runtime.problem  # (a refused token)
    if runtime.problem is not None and not said and not runtime.problem_superseded and (
            probe is None or probe.detail != runtime.problem):
        problems.append(f"receiving: {runtime.problem}")
    if runtime.send_failing_since is not None:
        problems.append(f"sends failing: {runtime.last_send_error or '?'}")
    moment = time.time() if now is None else now
    hang = runtime.calls.hanging(moment)
    if hang is not None:
        problems.append(f"platform hangs: {hang.describe(moment)}")
    if probe is not None and not probe.ok and not runtime.probe_superseded:
        problems.append(f"probe failed: {probe.detail or 'no detail'}")
    return problems


def store_problems(store: StoreInfo | None) -> list[str]:
    if store is None or store.ok:
        return []
    if store.reachable is False:
        return [f"shared store: unreachable: {store.last_error or '?'}"]
    return [f"state database: commits failing: {store.last_error or '?'}"]


def configured_accounts(config: cfg.KernelConfig) -> list[tuple[str, str, bool, dict]]:
    """``(channel, account, enabled, raw table)`` for every account the gateway would run
    (implied ones included, see :func:`chatkernel.core.config.effective_accounts`)."""
    return cfg.effective_accounts(config)


def _monitor_info(settings: MonitorSettings, runtime: AccountRuntime | None = None,
                  next_check_at: float | None = None) -> MonitorInfo:
    return MonitorInfo(enabled=settings.active, check_seconds=settings.check_seconds,
                       stale_seconds=settings.effective_stale_seconds,
                       max_restarts_per_hour=settings.max_restarts_per_hour,
                       note=runtime.monitor_note if runtime else "",
                       checked_at=runtime.monitor_checked_at if runtime else None,
                       next_check_at=next_check_at)


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
    return SessionSummary(
        total=len(records),
        active_last_hour=sum(1 for r in records if r.last_active_at >= now - 3600),
        active_last_day=sum(1 for r in records if r.last_active_at >= now - 86400),
        running_turns=running_turns, queued_messages=queued,
        recent=[RecentSession(key=r.key, last_active_at=r.last_active_at, agent=r.agent)
                for r in records[:RECENT_SESSIONS]])


def _finish(channels: dict[str, ChannelSnapshot], judged: bool,
            store: StoreInfo | None = None) -> tuple[bool | None, list[str]]:
    problems = store_problems(store)
    for channel in channels.values():
        enabled = [a for a in channel.accounts.values() if a.enabled]
        if judged:
            # None: owned by another instance, judged there.
            channel.ok = all(a.ok is not False for a in enabled)
        for account in enabled:
            problems += [f"{account.key}: {problem}" for problem in account.problems]
    if not judged:
        return None, problems
    return not problems, problems


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


class Health:
    """Probes, the cached probe results and the snapshot of one running kernel.

    Given what it reads by name: ``config``, ``store``, ``queue``, ``cluster`` (None:
    the only instance), ``task_group``, ``started_at`` and ``url`` (None: no HTTP server)
    are functions, for what exists once the kernel started, a reload replaces or the
    gateway adds later; ``accounts`` is the kernel's accounts by key (read, never
    written), ``monitor`` the health monitor whose settings a snapshot shows."""

    def __init__(self, *, config: Callable[[], cfg.KernelConfig],
                 accounts: Mapping[str, Account], pm: "PluginManager", metrics: "Metrics",
                 monitor: "HealthMonitor", presence: "Presence",
                 store: Callable[[], "Store"], queue: Callable[[], "SessionQueue"],
                 cluster: Callable[[], "Cluster | None"],
                 task_group: Callable[[], "TaskGroup"],
                 started_at: Callable[[], float | None], url: Callable[[], str | None],
                 clock: Callable[[], float] = time.time) -> None:
        self._config = config
        self._accounts = accounts
        self._pm = pm
        self._metrics = metrics
        self._monitor = monitor
        self._presence = presence
        self._store = store
        self._queue = queue
        self._cluster = cluster
        self._task_group = task_group
        self._started_at = started_at
        self._url = url
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
            monitor=_monitor_info(monitor.settings(account), runtime,
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
                    monitor=_monitor_info(resolve_settings(config, name,
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
                    monitor=_monitor_info(resolve_settings(config, name,
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
        ok, problems = _finish(channels, judged=True, store=store)  # after the store's reads
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
            problems=problems)

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
            monitor=_monitor_info(resolve_settings(config, name, _raw_monitor_override(raw))))
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
    _, problems = _finish(channels, judged=False)
    sessions = await session_summary(store, now) if store is not None else SessionSummary()
    return HealthSnapshot(ok=None, ts=now,
                          duration_ms=round((time.perf_counter() - started) * 1000, 1),
                          source="local", gateway=GatewayInfo(reachable=False),
                          channels=channels, sessions=sessions, cluster=cluster,
                          problems=problems)


def cluster_info(instances: dict[str, dict[str, Any]],
                 leases: dict[str, tuple[str, int, float]], now: float, *, holder: str,
                 lease_seconds: float) -> ClusterInfo:
    """The instances sharing a store and their leases, for a snapshot (``holder``: this
    process's, empty for a command that is no instance)."""
    found = []
    for name, item in sorted(instances.items()):
        started = item.get("started_at")
        found.append(InstanceInfo(
            holder=name, instance=item.get("instance"), host=item.get("host"),
            pid=item.get("pid"), url=item.get("url"), started_at=started,
            age_s=None if started is None else round(now - started, 1),
            owned=list(item.get("owned") or ()), heartbeats=bool(item.get("heartbeats")),
            is_self=name == holder))
    return ClusterInfo(holder=holder, lease_seconds=lease_seconds, instances=found,
                       leases=[LeaseInfo(name=name, holder=who, token=token,
                                         expires_in_s=round(left, 3))
                               for name, (who, token, left) in sorted(leases.items())])


__all__ = ["AccountSnapshot", "Health", "HealthSnapshot", "local_snapshot", "probe_account",
           "select_accounts", "settings_for"]
