"""The health snapshot: its schema, and how an account's state is judged from it.

The **snapshot** (:class:`HealthSnapshot`) is what ``chatkernel health``,
``/healthz``, ``/status`` and the control API show: ``ok``, ``ts``,
``duration_ms``, every channel and account (state, last events, restarts in
the last hour, last error, credential age, probe result, what the monitor
thinks), the session summary and presence. :mod:`chatkernel.core.health.probes`
makes it; what is judged here is pure: the problems of an account as its runtime
says now (:func:`account_problems`), of the store, and the snapshot's ``ok``.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from chatkernel import __version__
from chatkernel.core.health.monitor import MonitorSettings
from chatkernel.sdk.models import AccountRuntime, AccountState, ProbeResult


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
    #: What the channel's probe found besides its answer, for ``chatkernel doctor``
    #: (``extra["findings"]``: ``{"check", "status", "message", "fix"}`` each).
    findings: list[dict[str, str]] = []

    @classmethod
    def of(cls, result: ProbeResult | None, at: float | None, *,
           superseded: bool = False) -> "ProbeInfo | None":
        if result is None:
            return None
        found = result.extra.get("findings")
        return cls(ok=result.ok, detail=result.detail, latency_ms=result.latency_ms, at=at,
                   timed_out=bool(result.extra.get("timed_out")),
                   restartable=result.restartable, superseded=superseded,
                   findings=[{key: str(value) for key, value in item.items()}
                             for item in found if isinstance(item, dict)]
                   if isinstance(found, list) else [])


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
    #: Strangers' pairing requests waiting for the owner (docs/access.md).
    pairing_pending: int = 0


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
    #: Sends that ended ``failed`` in the last hour, from the store (so a restart keeps
    #: them); None when not counted (``/healthz``, a store that did not answer).
    failed_sends_last_hour: int | None = None

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


def monitor_info(settings: MonitorSettings, runtime: AccountRuntime | None = None,
                 next_check_at: float | None = None) -> MonitorInfo:
    return MonitorInfo(enabled=settings.active, check_seconds=settings.check_seconds,
                       stale_seconds=settings.effective_stale_seconds,
                       max_restarts_per_hour=settings.max_restarts_per_hour,
                       note=runtime.monitor_note if runtime else "",
                       checked_at=runtime.monitor_checked_at if runtime else None,
                       next_check_at=next_check_at)


def overall(channels: dict[str, ChannelSnapshot], judged: bool,
            store: StoreInfo | None = None) -> tuple[bool | None, list[str]]:
    """The snapshot's ``ok`` and problems: each enabled account's and the store's (``ok``
    None when not ``judged``: no gateway runs here); sets each channel's ``ok``."""
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
