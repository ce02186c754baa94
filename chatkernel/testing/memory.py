"""An in-memory channel and an in-process kernel harness, for tests.

``MemoryChannel`` is a complete channel with no network: tests inject inbound
messages with :meth:`MemoryChannel.receive` and read what the kernel sent from
:attr:`MemoryChannel.sent`. :class:`KernelHarness` runs a real kernel (SQLite
store, real queue, real agent) around it.
"""

from __future__ import annotations

import itertools
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from chatkernel.sdk.channel import Channel, ChannelLimits, Deliver
from chatkernel.sdk.receiving.transport import Transport
from chatkernel.core.config import KernelConfig, parse
from chatkernel.sdk.models import (
    InboundMessage,
    OutboundPayload,
    ProbeResult,
    Route,
    SendError,
    SendResult,
)
from chatkernel.hookspecs import hookimpl

if TYPE_CHECKING:
    from chatkernel.core.accounts import Account
    from chatkernel.core.health.probes import HealthProbes
    from chatkernel.core.inbound.pipeline import Receiver
    from chatkernel.core.store.base import ApprovedSender, LogEntry, PairingRequest


@dataclass(slots=True)
class Sent:
    """One payload the kernel sent through a MemoryChannel."""

    route: Route
    payload: OutboundPayload

    @property
    def text(self) -> str:
        return self.payload.text


class MemoryChannel(Channel):
    """A channel whose platform is a list."""

    name = "memory"
    limits = ChannelLimits(text_limit=4000, text_unit="chars",
                           media_kinds={".jpg": "photo", ".png": "photo", ".ogg": "voice"})

    def __init__(self, account, context=None) -> None:
        super().__init__(account, context)
        self.sent: list[Sent] = []
        self.indications: list[Route] = []
        self.fail_next: list[BaseException] = []  # raised by the next sends, in order
        self.send_delay = 0.0
        self._deliver: Deliver | None = None
        self._ids = itertools.count(1)
        self._running = anyio.Event()
        self._changed: anyio.Event | None = None  # made by a waiter, set by the next send

    def transport(self) -> "MemoryTransport":
        return MemoryTransport(self)

    def attach(self, deliver: Deliver) -> None:
        """Deliver without a running receive loop (in-process kernels); the account
        counts as running."""
        import time

        self._deliver = deliver
        self._running.set()
        self.account.runtime.loop_started(time.time())
        self.context.report_alive()

    async def receive(self, text: str = "", *, chat_id: str = "chat-1", sender_id: str = "user-1",
                      message_id: str | None = None, **fields: Any) -> str:
        """Inject an inbound message as the platform would; returns the kernel's outcome."""
        if not self._running.is_set():  # anyio's wait() yields even when it is set
            await self._running.wait()
        assert self._deliver is not None
        message = InboundMessage(channel=self.name, account=self.account.name, chat_id=chat_id,
                                 message_id=message_id or f"m{next(self._ids)}",
                                 sender_id=sender_id, text=text, **fields)
        return await self._deliver(message)

    async def send(self, route: Route, payload: OutboundPayload) -> SendResult:
        if self.send_delay:
            await anyio.sleep(self.send_delay)
        if self.fail_next:
            raise self.fail_next.pop(0)
        if not payload.is_media and not payload.text:
            raise SendError("empty text")
        self.sent.append(Sent(route, payload))
        if self._changed is not None:
            self._changed.set()
            self._changed = None
        return SendResult(message_id=str(len(self.sent)))

    async def indicate(self, route: Route) -> None:
        self.indications.append(route)

    async def probe(self) -> ProbeResult:
        return ProbeResult(ok=True, detail="memory", latency_ms=0.0)

    async def wait_for_sent(self, count: int, timeout: float = 5.0) -> list[Sent]:
        """Wait until at least ``count`` payloads were sent (bounded by ``timeout``)."""
        with anyio.fail_after(timeout):
            while len(self.sent) < count:
                if self._changed is None:
                    self._changed = anyio.Event()
                await self._changed.wait()
        return self.sent

    def texts(self, chat_id: str | None = None) -> list[str]:
        return [s.text for s in self.sent if chat_id is None or s.route.chat_id == chat_id]


class MemoryTransport(Transport):
    """The memory channel's "receive loop": it takes what :meth:`MemoryChannel.receive`
    injects, until cancelled."""

    channel: MemoryChannel

    async def run(self, deliver: Deliver) -> None:
        self.channel.attach(deliver)
        await anyio.sleep_forever()


class MemoryPlugin:
    """Registers :class:`MemoryChannel` (register it on a plugin manager)."""

    @staticmethod
    @hookimpl
    def register_channels(register):
        register(MemoryChannel)


class KernelHarness:
    """A real kernel around a MemoryChannel account ``memory:main``.

    ``async with KernelHarness(tmp_path) as h: await h.channel.receive("hi")``.
    """

    def __init__(self, home: Path, *, config: dict[str, Any] | None = None,
                 plugins: list[tuple[str, object]] | None = None,
                 heartbeat_clock: Any = None, channel_clock: Any = None,
                 queue_clock: Any = None, pacing: Any = None) -> None:
        self.home = home
        # As `run` reads a file: a bad value is a ConfigError naming its key.
        self.config = parse(self.config_data(config), strict_env=False)
        self.plugins = [("chatkernel.testing.memory", MemoryPlugin), *(plugins or [])]
        #: The heartbeat scheduler's clock (e.g. a chatkernel.testing.clock.ManualClock).
        self.heartbeat_clock = heartbeat_clock
        #: The channels' clock: their receive loops' waits (backoff, a refused token's
        #: slow retries, a socket's silence) and their own timers (e.g. a ManualClock).
        self.channel_clock = channel_clock
        #: The session queue's clock, for debounces (a ManualClock: they wait for it).
        self.queue_clock = queue_clock
        #: The time the rate limits count in (e.g. a ScaledClock's ``pacing``); None: real.
        self.pacing = pacing
        #: The kernel itself, for the kernel's own tests: its internals change without
        #: notice, so a plugin's tests use the verbs below (tests/test_plugin_privacy.py).
        self.kernel: Any = None
        self._stack: AsyncExitStack | None = None

    def config_data(self, config: dict[str, Any] | None = None) -> dict[str, Any]:
        """The config file's tables this harness runs ``config`` with (its home's
        workspace and state, the ``memory:main`` account admitting everyone, no debounce,
        no web chat), each of ``config``'s tables merged over its own: what a test
        reloads the kernel with (``cfg.parse(h.config_data({...}))``)."""
        data: dict[str, Any] = {
            "gateway": {"workspace": str(self.home / "workspace")},
            "store": {"path": str(self.home / "state.db")},
            "queue": {"debounce_ms": 0},
            # The web chat is a gateway's page: a kernel with no HTTP server leaves it off
            # (a test's own [channels.webchat] table turns it on).
            "channels": {"memory": {"accounts": {"main": {"allow_from": ["*"]}}},
                         "webchat": {"enabled": False}},
        }
        for section, values in (config or {}).items():
            if isinstance(values, dict) and isinstance(data.get(section), dict):
                data[section] = {**data[section], **values}
            else:
                data[section] = values
        return data

    async def __aenter__(self) -> "KernelHarness":
        from chatkernel.core.kernel import Kernel
        from chatkernel.core.plugins import PluginManager

        pm = PluginManager()
        pm.load(only=[], disabled=[], strict=True)
        for name, plugin in self.plugins:
            pm.register(plugin, name=name)
        pm.check_pending()
        self._stack = AsyncExitStack()
        self.kernel = await self._stack.enter_async_context(
            Kernel(self.config, pm=pm, heartbeat_clock=self.heartbeat_clock,
                   channel_clock=self.channel_clock, queue_clock=self.queue_clock,
                   pacing=self.pacing))
        for account in self.kernel.accounts.values():
            if isinstance(account.channel, MemoryChannel):
                account.channel.attach(self.kernel.deliver)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        if self._stack is not None:
            await self._stack.__aexit__(*exc_info)

    def account_channel(self, name: str = "main") -> MemoryChannel:
        channel = self.kernel.accounts[f"memory:{name}"].channel
        assert isinstance(channel, MemoryChannel)
        return channel

    @property
    def channel(self) -> MemoryChannel:
        return self.account_channel("main")

    # -- what a test drives (the stable surface: the kernel's internals change) -----------

    def account(self, channel: str, name: str = "main") -> "Account":
        """The account ``channel:name`` as the kernel runs it: its ``channel`` (the
        plugin's object), ``transport`` (its receive loop), ``runtime`` (the state
        ``chatkernel status`` and health show) and ``key``."""
        return self.kernel.accounts[f"{channel}:{name}"]

    @property
    def receiver(self) -> "Receiver":
        """What a gateway hands a receive loop as ``deliver``: ``await
        transport.run(h.receiver)`` runs a loop of the test's own making."""
        return self.kernel.receiver

    async def receive_loop(self, channel: str, name: str = "main") -> None:
        """Run the account's receive loop (``transport.run(receiver)``), as the
        gateway's supervisor does, until cancelled:
        ``tg.start_soon(h.receive_loop, "telegram")``."""
        await self.account(channel, name).transport.run(self.kernel.receiver)

    @property
    def workspace(self) -> Path:
        """The agent's workspace folder (``[gateway] workspace``): where a reply's
        ``MEDIA:`` paths are read from, and inbound files are kept."""
        return self.kernel.workspace

    async def send_text(self, channel: str, chat_id: str, text: str, *,
                        account: str | None = None, is_group: bool = False,
                        fmt: str = "markdown") -> str | None:
        """Queue a proactive text to ``chat_id`` as ``chatkernel send`` does: from the
        account named (or the channel's only one), in the chat's session and on its
        last known route; ``is_group`` for a chat the kernel has not seen yet that is a
        group (its rate limits). ``fmt``: ``markdown`` or ``plain``. Returns the reply
        id (None: nothing to send); :meth:`outbox_idle` waits until it was sent."""
        found, route, key = await self.kernel.directory.resolve_target(channel, account, chat_id)
        if is_group and not route.is_group:
            route = Route(route.channel, route.account, route.chat_id,
                          thread_id=route.thread_id, reply_to=route.reply_to,
                          is_group=True, extra=route.extra)
        return await self.kernel.replies.send_text(found, route, text, session_key=key,
                                                       fmt=fmt)

    async def outbox_idle(self) -> None:
        """Wait until every queued payload was sent or failed for good (unbounded: wrap
        it in ``anyio.fail_after``). Unlike :meth:`settle`, turns may still run."""
        await self.kernel.outbox.wait_idle()

    async def pairing_approve(self, channel: str, code: str, *,
                              account: str | None = None) -> "PairingRequest":
        """Approve a stranger's pairing request, as ``chatkernel pairing approve`` does:
        the sender is admitted at once and told so in their chat (queued: see
        :meth:`outbox_idle`). A wrong or expired code raises ``LookupError``."""
        request, _ = await self.kernel.pairing.approve(channel, code, account=account)
        return request

    async def pairing_deny(self, channel: str, code: str, *,
                           account: str | None = None) -> "PairingRequest":
        """Drop a pairing request, as ``chatkernel pairing deny`` does (``LookupError``
        for a wrong or expired code)."""
        return await self.kernel.pairing.deny(channel, code, account=account)

    async def pairing_revoke(self, channel: str, sender: str, *,
                             account: str | None = None) -> str:
        """Withdraw a sender's approval, as ``chatkernel pairing revoke`` does; returns
        the account (``LookupError`` when they were not approved)."""
        return await self.kernel.pairing.revoke(channel, sender, account=account)

    # -- what a test reads -----------------------------------------------------------------

    async def pairing_requests(self, channel: str | None = None) -> "list[PairingRequest]":
        """The strangers' pairing requests pending now (of ``channel``, or all), oldest
        first, as ``chatkernel pairing list`` shows them: each has ``code``, ``channel``,
        ``account``, ``sender``, ``name``, ``chat`` and its times (on the channels' clock:
        ``channel_clock``)."""
        return await self.kernel.pairing.requests(channel)

    async def approved_senders(self, channel: str | None = None) -> "list[ApprovedSender]":
        """The senders approved by pairing (``channel``, ``account``, ``sender``,
        ``approved_at``), as ``chatkernel pairing allowed`` shows them."""
        return await self.kernel.pairing.allowed(channel)

    async def session_log(self, session_key: str, *, roles: tuple[str, ...] | None = None,
                          limit: int | None = None) -> "list[LogEntry]":
        """The session's log, oldest first, as ``chatkernel sessions show`` reads it
        (``roles=("notification",)``: only the notes the kernel wrote there, such as a
        failed send's); each entry has ``role``, ``text`` and ``meta``."""
        return await self.kernel.store.read_log(session_key, roles=roles, limit=limit)

    async def session_keys(self) -> list[str]:
        """Every session's key, the most recently active first."""
        return [session.key for session in await self.kernel.store.list_sessions()]

    async def session_route(self, session_key: str) -> Route | None:
        """Where the session's replies go now (a migrated chat's new id, its thread),
        or None for a session with no route yet."""
        return await self.kernel.sessions.route(session_key)

    async def sent_status(self, channel: str, platform_id: str, *,
                          account: str = "main") -> str | None:
        """The status of the outbox entry the platform knows as ``platform_id`` (the
        message id its send returned), for a channel whose platform reports delivery
        statuses (``Capabilities(delivery_statuses=True)``): ``sent``, ``failed``...;
        None when no entry has that id."""
        entry = await self.kernel.store.outbox_by_platform_id(channel, account, platform_id)
        return None if entry is None else entry.status

    async def outbox_statuses(self) -> list[str]:
        """Every outbox entry's status (``pending``, ``sending``, ``sent``, ``failed``,
        ``unknown``), in the order they were queued, once the store has committed."""
        store = self.kernel.store
        await store.flush()
        path = getattr(store, "path", None)
        if path is None or getattr(store, "memory", False):
            raise RuntimeError("outbox_statuses reads a SQLite store's file")
        import sqlite3

        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            return [status for (status,) in
                    conn.execute("SELECT status FROM outbox ORDER BY id").fetchall()]

    def metric(self, name: str, **labels: str) -> float | None:
        """A Prometheus sample of the kernel's registry, as ``/metrics`` shows it
        (``metric("chatkernel_send_retries_total", channel="telegram", account="main")``);
        None when nothing was counted under those labels."""
        self.kernel.metrics.sync()  # the hot path's tallies, as a scrape adds them
        return self.kernel.metrics.registry.get_sample_value(name, labels)

    def send_wait(self, account_key: str, chat_id: str, *, is_group: bool = False) -> float:
        """Seconds a send to ``chat_id`` would wait for the account's rate limits now."""
        account = self.kernel.accounts[account_key]
        return self.kernel.outbox.limits.limiter(account).delay(chat_id, is_group=is_group)

    @property
    def health(self) -> "HealthProbes":
        """The kernel's probes and health snapshots: ``await h.health.probe()`` (every
        account's :class:`~chatkernel.ProbeResult` by key, or of the accounts given),
        ``await h.health.snapshot()`` (what ``chatkernel health --json`` shows),
        ``h.health.account_snapshot(account, time.time())`` (one account's, no probe)."""
        return self.kernel.health

    def owns(self, account_key: str) -> bool:
        """Whether this kernel runs the account now: always when it is alone on its
        store; with a store it shares (Redis), while it holds the account's lease."""
        cluster = self.kernel.cluster
        return cluster is None or cluster.owns(account_key)

    async def settle(self, timeout: float = 5.0) -> None:
        """Wait until every lane is idle, every queued payload was sent and what
        that wrote is committed (bounded)."""
        with anyio.fail_after(timeout):
            while True:
                await self.kernel.inbound.wait_settled()  # accepted, not yet queued
                await anyio.sleep(0)
                if any(lane.active for lane in self.kernel.queue.lanes.values()):
                    await anyio.sleep(0.005)
                    continue
                await self.kernel.outbox.wait_idle()
                await anyio.sleep(0)
                if not any(lane.active for lane in self.kernel.queue.lanes.values()) \
                        and not self.kernel.outbox.pending() \
                        and not self.kernel.inbound.backlog():
                    await self.kernel.store.flush()
                    return

    async def jobs_settled(self, timeout: float = 5.0) -> None:
        """Wait until the job scheduler has acted on its clock (the heartbeats' clock:
        every due slot claimed, no job or trigger run going on) and everything queued was
        sent (docs/jobs.md)."""
        scheduler = self.kernel.jobs
        with anyio.fail_after(timeout):
            while True:
                await anyio.sleep(0)
                if scheduler.quiescent():
                    await self.settle(timeout)
                    if scheduler.quiescent():
                        return
                else:
                    await anyio.sleep(0.002)

    async def heartbeats_settled(self, timeout: float = 5.0) -> None:
        """Wait until the heartbeat scheduler has acted on its clock (nothing due is
        left undecided, no heartbeat turn runs) and everything queued was sent."""
        scheduler = self.kernel.heartbeats
        with anyio.fail_after(timeout):
            while True:
                await anyio.sleep(0)
                if scheduler.quiescent():
                    await self.settle(timeout)
                    if scheduler.quiescent():
                        return
                else:
                    await anyio.sleep(0.002)
