"""The kernel: one object wiring config, plugins, store, sessions, queue and agent.

Use it as an async context manager. Each account's receive loop is given the kernel's
:attr:`Kernel.receiver`, which journals a message and hands it to the inbound pipeline;
the gateway (``chatkernel run``) runs those loops and the HTTP server on top, and the
test kit runs a kernel in-process without either.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from chatkernel.core import config as cfg
from chatkernel.core.turns.agents import Agent, collect_agents
from chatkernel.core.turns.bindings import Chat, check_binding_targets, unanswered
from chatkernel.core.turns.roster import Roster
from chatkernel.sdk.channel import Channel, compiled_secret_patterns
from chatkernel.sdk.clock import SYSTEM_CLOCK, ChannelClock
from chatkernel.sdk.context import ChannelContext
from chatkernel.core.accounts import build_accounts
from chatkernel.core.plugins import collect_channels
from chatkernel.core.runtime.cluster import Cluster
from chatkernel.core.runtime.control import Control
from chatkernel.core.runtime.parts import GatewayParts
from chatkernel.core.runtime.supervisor import Supervisors
from chatkernel.core.inbound.commands import CommandGateway, collect_commands
from chatkernel.core.inbound.access import Pairing
from chatkernel.core.outbound.deliveries import Deliveries
from chatkernel.core.outbound.delivery_statuses import DeliveryStatuses
from chatkernel.core.outbound.ratelimit import Pacing
from chatkernel.core.health.probes import HealthProbes
from chatkernel.core.heartbeat.ack import strip_stray_token
from chatkernel.core.heartbeat.clock import Clock as HeartbeatClock
from chatkernel.core.heartbeat.jobs import HeartbeatJobs
from chatkernel.core.heartbeat.runner import HeartbeatRunner
from chatkernel.core.heartbeat.scheduler import HeartbeatScheduler
from chatkernel.core.heartbeat.targets import Targets, check_target
from chatkernel.core.inbound.pipeline import Inbound, InvalidMessage, Receiver
from chatkernel.core.jobs.checks import check_jobs
from chatkernel.core.jobs.control import JobsControl
from chatkernel.core.jobs.runner import JobRunner
from chatkernel.core.jobs.scheduler import JobScheduler
from chatkernel.core.turns.indicators import Indicators
from chatkernel.core.logs import SecretFilter
from chatkernel.core.health.metrics import Metrics
from chatkernel.sdk.models import Account, Command, InboundMessage, Route, Session
from chatkernel.core.health.monitor import HealthMonitor
from chatkernel.core.outbound.order import OutputOrder
from chatkernel.core.outbound.replies import MediaScope, Replies, send_payload
from chatkernel.core.outbound.responder import Responder
from chatkernel.core.outbound.live import Live
from chatkernel.core.outbound.outbox import Outbox
from chatkernel.core.outbound.policy import SendPolicies
from chatkernel.core.plugins import PluginManager, get_plugin_manager
from chatkernel.core.health.presence import Presence, PresenceEntry
from chatkernel.core.inbound.queue import QueueSettings, SessionQueue
from chatkernel.core.inbound.sessions import Sessions
from chatkernel.core.store.base import Store
from chatkernel.core.telemetry import TelemetryUnavailable, tracer_for
from chatkernel.core.turns.turns import Turns
from chatkernel.core.wiring import Directory, Hosting, Running

if TYPE_CHECKING:
    from chatkernel.core.runtime.reload import ReloadReport

log = logging.getLogger("chatkernel.kernel")

WRITE_BEHIND_SECONDS = 1.0
UPKEEP_SECONDS = 3600.0

@dataclass(frozen=True, slots=True)
class Drained:
    """What :meth:`Kernel.drain` left: sessions with turns still running or queued
    (messages replayed on the next start), payloads still going out, and payloads
    waiting for a retry or their platform (sent on the next start). True when only
    waiting payloads are left."""

    turns: int = 0
    sends: int = 0
    waiting: int = 0

    def __bool__(self) -> bool:
        return not self.turns and not self.sends


class Kernel:
    """Everything that is the same on every platform, for one gateway process."""

    def __init__(self, config: cfg.KernelConfig | None = None, *,
                 pm: PluginManager | None = None, store: Store | None = None,
                 config_path: Path | None = None, recover: bool = True,
                 clock: Callable[[], float] = time.monotonic,
                 heartbeats: bool | None = None,
                 heartbeat_clock: HeartbeatClock | None = None,
                 channel_clock: ChannelClock | None = None,
                 queue_clock: HeartbeatClock | None = None,
                 gateway: GatewayParts | None = None,
                 pacing: Pacing | None = None) -> None:
        self.config = config or cfg.KernelConfig()
        self.config_path = config_path
        #: Replay unfinished messages and sends at start (the gateway does; a CLI
        #: command that only sends must not run the agent).
        self.recover = recover
        #: Run the heartbeat scheduler (default: as ``recover``; a CLI command's own
        #: kernel must not fire an overdue heartbeat).
        self.run_heartbeats = recover if heartbeats is None else heartbeats
        self.pm = pm or get_plugin_manager()
        self._store = store
        self.clock = clock
        self.metrics = Metrics()
        #: The secrets this kernel knows; no agent output carries one to a chat or the
        #: session log (see :func:`chatkernel.core.turns.agents.redact_turns`).
        self.secrets = SecretFilter(cfg.kernel_secrets(self.config))
        #: Each message's trace, with ``[telemetry]`` (core/telemetry.py); a restart
        #: applies a change of it, as a reload leaves it.
        try:
            self.tracer = tracer = tracer_for(self.config.telemetry, self.secrets.redact)
        except TelemetryUnavailable as exc:
            raise cfg.ConfigError(str(exc), path=config_path, key="telemetry") from None
        self.workspace = self.config.workspace()
        self.channel_types: dict[str, type[Channel]] = {}
        self.commands: dict[str, Command] = {}
        self.accounts: dict[str, Account] = {}
        #: The running agents by name, and the bindings choosing among them (at start).
        self.roster: Roster | None = None
        #: With no default agent: the accounts some of whose chats no agent answers.
        self.unanswered: list[str] = []
        # The kernel's side of the components' ports (chatkernel.core.wiring).
        running, directory = Running(self), Directory(self)
        #: Who and what a message or a send is for (core/wiring.py): the accounts, the
        #: agent answering a chat, a proactive send's target.
        self.directory = directory
        # The outbound subsystem, in dependency order; the store and the cluster exist
        # once the kernel started: they are read when used.
        #: What became of each payload: health, recent failures, waiting senders.
        self.deliveries = Deliveries(
            account=self.accounts.get, metrics=self.metrics, store=self._started_store,
            clustered=lambda: self.cluster is not None)
        #: Statuses channels report for messages already sent (core/outbound/delivery_statuses.py).
        self.delivery_statuses = DeliveryStatuses(
            store=self._started_store, metrics=self.metrics, deliveries=self.deliveries,
            tracer=tracer)
        self.outbox = Outbox(
            runtime=running, rules=running, accounts=self.accounts, config_path=config_path,
            send=functools.partial(send_payload, self.pm, self.metrics),
            deliveries=self.deliveries, delivery_statuses=self.delivery_statuses,
            metrics=self.metrics, wait_for_platforms=recover, pacing=pacing, tracer=tracer)
        #: Builds replies' payloads and queues them (a turn's Responder is given it).
        self.replies = Replies(pm=self.pm, metrics=self.metrics, store=self._started_store,
                                 submit=self.outbox.submit, strip_stray=strip_stray_token)
        #: Live replies: the agent's answer shown while it is written (core/outbound/live.py).
        # Its interval between updates keeps a preview under the platform's limits: it
        # counts in the rate limits' time (a test's ScaledClock speeds both up).
        self.live = Live(limiter=self.outbox.limits.limiter, store=self._started_store,
                         channel_config=running.channel_config,
                         task_group=self._started_task_group, sleep=self.outbox.pacing.sleep)
        self.send_policy = SendPolicies.from_config(self.config)
        #: Answers sent outside a turn wait for the turns of earlier messages.
        self.order = OutputOrder()
        self.indicators = Indicators(lambda key: self.sessions.route(key),
                                     self.outbox.pacing.clock, sleep=self.outbox.pacing.sleep,
                                     replying=self.outbox.lines.busy)
        # The inbound subsystem: the sessions, the queue and the heartbeats exist once
        # the kernel started, and a reload replaces the config and the commands.
        #: What slash commands may do (the stable surface of CommandContext.gateway).
        self.command_gateway = CommandGateway(
            commands=directory.commands, agent_kind=lambda: self.config.agent.kind,
            agent_table=lambda name: self.config.named_agents().get(name),
            started_at=running.started_at, accounts=self.accounts.values,
            sessions=self._started_sessions, queue_settings=self.queue_settings,
            queue=self._started_queue, heartbeats=self._started_heartbeats,
            jobs=self._started_jobs)
        self.inbound = Inbound(
            runtime=running, routing=directory, command_gateway=self.command_gateway,
            replies=self.replies, order=self.order, indicate=self.indicators.once,
            pm=self.pm, metrics=self.metrics, tracer=tracer)
        #: What receive loops get as ``deliver`` (see :class:`Receiver`).
        self.receiver = Receiver(self.inbound)
        self._heartbeat_clock = heartbeat_clock
        #: The clock every channel's context gets (None: the real one): the receive loops'
        #: waits and the channels' timers (chatkernel.sdk.clock).
        self.channel_clock = channel_clock
        #: The session queue's clock, for debounces (a test's ManualClock); None: the
        #: monotonic clock.
        self._queue_clock = queue_clock
        self._heartbeats: HeartbeatScheduler | None = None
        self._jobs: JobScheduler | None = None
        #: What ``chatkernel jobs`` and ``triggers`` ask (core/jobs/control.py).
        self.jobs_control = JobsControl(scheduler=self._started_jobs,
                                        config=lambda: self.config, store=self._started_store)
        self.started_at: float | None = None
        #: What the gateway process adds (its URL, its reloader), read through functions;
        #: empty for a kernel run in-process (see chatkernel.core.runtime.parts).
        self.gateway_parts = gateway or GatewayParts()
        #: The receive-loop supervisors of this process, by account key (the gateway's
        #: receive loops or the cluster add them).
        self.supervisors = Supervisors(receiver=self.receiver, metrics=self.metrics)
        #: This process's part among several sharing the store (None: the only one;
        #: see chatkernel.core.runtime.cluster), made at start when the store is shared.
        self.cluster: Cluster | None = None
        # Health, the monitor and control: the monitor probes through the health (built
        # right after it, hence the function), the health shows the monitor's settings.
        accounts = MappingProxyType(self.accounts)  # read, never written, by them
        #: Who is around; the health monitor; probes and snapshots.
        self.presence = Presence(own_presence_entry(self.config),
                                 ttl=self.config.presence.ttl_minutes * 60,
                                 max_entries=self.config.presence.max_entries)
        self.monitor = HealthMonitor(
            config=running.config, accounts=accounts,
            probe=lambda due: self.health.probe(due), supervisor=self.supervisors.get,
            metrics=self.metrics)
        self.health = HealthProbes(
            runtime=running, run=running, accounts=accounts, pm=self.pm,
            metrics=self.metrics, monitor=self.monitor, presence=self.presence)
        #: The owner's side of pairing (``chatkernel pairing``): codes expire in the
        #: channels' time, as they were given out.
        self.pairing = Pairing(store=self._started_store, accounts=accounts,
                               replies=self.replies, deliveries=self.deliveries,
                               clock=lambda: (self.channel_clock or SYSTEM_CLOCK).now())
        #: What the control API and the CLI's own-kernel commands do.
        self.control = Control(
            health=self.health, accounts=accounts, presence=self.presence,
            replies=self.replies, deliveries=self.deliveries,
            delivery_statuses=self.delivery_statuses, config_path=config_path,
            runtime=running, targets=directory, gateway=self.gateway_parts)
        self._tg: TaskGroup | None = None
        self._queue: SessionQueue | None = None
        self._turns: Turns | None = None
        self._channel_queue_settings: dict[str, QueueSettings] = {}
        self._sessions: Sessions | None = None
        self._stack: contextlib.AsyncExitStack | None = None

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> "Kernel":
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            await self._start(stack)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        stack, self._stack = self._stack, None
        if stack is None:
            return None
        try:
            return await stack.__aexit__(*exc_info)
        except BaseExceptionGroup as group:
            # The task group wraps an error raised in the `async with` body: hand the
            # caller its own exception back, not a group of one.
            if exc_info[1] is not None and list(group.exceptions) == [exc_info[1]]:
                return False
            raise

    async def _start(self, stack: contextlib.AsyncExitStack) -> None:
        try:
            self.workspace.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise cfg.ConfigError(
                f"cannot create the workspace {self.workspace}: {exc.strerror or exc}. Make "
                "its parent directory writable for this user, or set gateway.workspace to a "
                "writable directory", path=self.config_path, key="gateway.workspace") from None
        agent_types = self.check()
        if self.tracer.on:
            self.tracer.open()
            # Last on the way out: what the stop's sends made is in the batch sent.
            stack.push_async_callback(anyio.to_thread.run_sync, self.tracer.shutdown)
        if self.unanswered:  # said at each start (config validate says it too)
            log.warning("no default agent: the chats no binding matches go unanswered in %s "
                        "(add [agents.default], or bindings for them)",
                        ", ".join(self.unanswered))
        self.make_agent_workspaces(self.config)
        if self._store is None:
            from chatkernel.core.store import open_store

            self._store = open_store(self.config)
        store = self._store
        await store.open()
        stack.push_async_callback(store.close)
        # One kernel writes a store of one process's own, whatever home led to it.
        store.claim({"pid": os.getpid(), "home": str(cfg.home_dir()),
                     "role": "gateway" if self.recover else "chatkernel command"})
        if store.shared is not None:
            self.cluster = Cluster(
                store.shared, ttl=self.config.store.lease_seconds,
                instance_id=self.presence.own.instance_id,
                accounts=MappingProxyType(self.accounts), host=Hosting(self),
                inbound=self.inbound, outbox=self.outbox, receiver=self.receiver,
                supervisors=self.supervisors, heartbeats=self.run_heartbeats,
                gateway=self.gateway_parts)
            self.metrics.store_round_trips.set_function(
                lambda: getattr(store, "round_trips", 0))
        store.on_commit = self.health.store_committed  # a failed commit turns health red
        self._sessions = Sessions(store, cache_size=self.config.sessions.cache_size,
                                  in_use=self._session_in_use)
        self.roster = roster = Roster(types=agent_types, store=store,
                                      redact=self.secrets.redact)
        stack.push_async_callback(roster.aclose)
        try:
            roster.start(self.config)
        except cfg.ConfigError as exc:
            raise cfg.ConfigError(exc.message, path=self.config_path, key=exc.key) from None
        stack.push_async_callback(self._close_channels)

        stack.callback(self._close_queue)  # runs after the task group ended: no worker left
        self._tg = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(self._stop_turns)  # runs first on exit
        # A turn's or a heartbeat's Responder queues its replies through the Replies.
        responder = self._responder
        self._turns = turns = Turns(
            store=store, sessions=self._sessions, agents=roster,
            account_for=self.account_for, responder=responder,
            indicators=self.indicators, metrics=self.metrics, order=self.order,
            live=self.live.preview, tracer=self.tracer)

        def session_busy(key: str) -> bool:  # the queue is built next, told of heartbeats
            return self.queue.is_busy(key)

        self._heartbeats = heartbeats = HeartbeatScheduler(
            config=lambda: self.config, jobs=HeartbeatJobs(store),
            runner=HeartbeatRunner(store=store, agents=roster, indicators=self.indicators,
                                   session_busy=session_busy,
                                   responder=responder,
                                   metrics=self.metrics),
            targets=Targets(sessions=self._sessions, accounts=self.accounts, store=store,
                            remembered_chat=self.inbound.last_chat,
                            resolve_target=self.directory.resolve_target),
            session_busy=session_busy, pm=self.pm, metrics=self.metrics,
            workspace=lambda agent: self.config.agent_workspace(agent),
            clock=self._heartbeat_clock)
        # Scheduled jobs and triggers: on the heartbeats' clock (a test's ManualClock).
        self._jobs = jobs = JobScheduler(
            config=lambda: self.config, store=self._started_store,
            runner=JobRunner(store=self._started_store, agents=lambda: roster,
                             sessions=self._started_sessions,
                             resolve_target=self.directory.resolve_target, responder=responder),
            clock=self._heartbeat_clock, holder=self._holder,
            live_holders=self._live_holders)
        timing = {} if self._queue_clock is None else {
            "clock": self._queue_clock.now, "sleep_until": self._queue_clock.sleep_until}
        self._queue = SessionQueue(self._tg, turns.run, self.queue_settings,
                                   max_concurrent=self.config.queue.max_concurrent,
                                   on_drop=turns.dropped, steer=turns.steer,
                                   on_busy=heartbeats.lane_busy,
                                   on_idle=heartbeats.lane_idle,
                                   **timing)
        queue = self._queue
        self.metrics.queue_depth.set_function(queue.depth)  # computed when scraped
        self._tg.start_soon(self.indicators.run, name="typing indicators")
        self.inbound.start()  # its plugins are in now
        stack.push_async_callback(self.inbound.flush_last_chats)  # after the task group ends
        self._tg.start_soon(self._write_behind, name="write-behind")
        await self._seed_activity()
        self.started_at = time.time()
        if self.cluster is not None:
            # Each account recovers when this instance takes it over.
            if self.recover:
                stack.push_async_callback(self.cluster.release)  # before the tasks end
                await self.cluster.join(self._tg)
            # Every instance schedules the jobs: a slot's claim in the store runs it once.
            await jobs.start(self._tg, loop=self.run_heartbeats)
            return
        if self.recover:
            await self.outbox.recover()
            await self.replay_unfinished()
        await jobs.start(self._tg, loop=self.run_heartbeats)
        if self.run_heartbeats:
            await heartbeats.start(self._tg)

    def channel_context(self, account: Account, settings: Any) -> ChannelContext:
        """What an account's channel gets from the kernel, once, at construction: the
        store and the receive gate exist once the kernel started (and the gate only
        where several processes share the store), so they are reached when used."""
        def receive_gate() -> Callable[[], Any] | None:
            cluster = self.cluster
            return None if cluster is None else functools.partial(cluster.receive_gate,
                                                                  account.key)

        return ChannelContext(
            account, settings, store=lambda: self._store,
            delivery_reporter=lambda: functools.partial(self.delivery_statuses.report,
                                                        account),
            receive_gate=receive_gate, clock=self.channel_clock, markups=self.pm.markups)

    def make_agent_workspaces(self, config: cfg.KernelConfig) -> None:
        """Create each agent's workspace besides the gateway's (at start, on a reload);
        ConfigError names the agent's ``workspace`` key when one cannot be made."""
        for name in config.named_agents():
            workspace = config.agent_workspace(name)
            if workspace == self.workspace:  # made first thing at start
                continue
            try:
                workspace.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise cfg.ConfigError(
                    f"cannot create agent {name}'s workspace {workspace}: "
                    f"{exc.strerror or exc}", path=self.config_path,
                    key=config.agent_key(name, "workspace")) from None

    @property
    def agent(self) -> Agent | None:
        """The default agent (None before the start, or when the config has none)."""
        return None if self.roster is None else self.roster.get("default")

    async def _close_channels(self) -> None:
        async with contextlib.AsyncExitStack() as stack:  # each one, whatever others raise
            for account in self.accounts.values():
                if account.channel is not None:
                    stack.push_async_callback(account.channel.aclose)

    async def reload(self, new_config: cfg.KernelConfig, **options: Any) -> "ReloadReport":
        """Apply a new config while the kernel runs: what can change live does, the
        report names what needs a restart (see :mod:`chatkernel.core.runtime.reload`). Raises
        ConfigError, changing nothing, when ``new_config`` fails the start-up checks."""
        from chatkernel.core.runtime.reload import apply_config

        return await apply_config(self, new_config, **options)

    def use_config(self, config: cfg.KernelConfig) -> None:
        """Run on ``config`` from now on (a reload's config in effect): what the kernel
        made from the config it started with is made again."""
        self.config = config
        self.send_policy = SendPolicies.from_config(config)
        self._channel_queue_settings.clear()
        self.secrets.add(*cfg.kernel_secrets(config))

    def replace_agents(self, config: cfg.KernelConfig) -> list[Agent]:
        """Run on ``config``'s agents and bindings from now on (a reload, at once):
        changed agents rebuilt (ConfigError, changing nothing, if one cannot be made);
        returns the replaced instances no turn runs on, for :meth:`Roster.retire`."""
        if self.roster is None:
            raise RuntimeError("the kernel is not started")
        try:
            _, idle = self.roster.replace(config)
        except cfg.ConfigError as exc:  # an agent that cannot be made: nothing changed
            raise cfg.ConfigError(exc.message, path=self.config_path, key=exc.key) from None
        return idle

    def check(self) -> dict[str, Any]:
        """Build the channels' accounts and check every setting the kernel acts on,
        starting nothing (no store, no agent, no connection): what ``chatkernel config
        validate`` runs, and the first thing a start does. Raises ConfigError; returns
        the installed agent types by kind."""
        self.channel_types = collect_channels(self.pm)
        for channel_type in self.channel_types.values():  # token shapes no config holds
            self.secrets.add_patterns(*compiled_secret_patterns(channel_type))
        self.commands = collect_commands(self.pm)
        self.accounts.clear()
        self._build_accounts()
        for account in self.accounts.values():
            self.outbox.limits.prepare(account)  # rate limits and retry policy: errors now, not later
        check_target(self.config, self.accounts.values(), path=self.config_path)
        agent_types = collect_agents(self.pm)
        config = self.config
        for name, agent in config.named_agents().items():
            key = config.agent_key(name, "kind")
            if agent.kind not in agent_types:
                raise cfg.ConfigError(
                    f"no agent kind {agent.kind!r} (installed: "
                    f"{', '.join(sorted(agent_types))})", path=self.config_path, key=key)
            try:
                agent_types[agent.kind].check_config(agent)
            except cfg.ConfigError as exc:
                # A kind words its errors for [agent]: named, they are this agent's keys.
                where, message = exc.key, exc.message
                if where and where.startswith("agent.") and not key.startswith("agent."):
                    where = config.agent_key(name, where[len("agent."):])
                    message = message.replace(exc.key, where)
                raise cfg.ConfigError(message, path=self.config_path, key=where) from None
        configured = {(name, account) for name, section in config.channels.items()
                      if name != "defaults" and name in self.channel_types
                      for account in section.accounts}  # switched off ones too
        check_binding_targets(config, configured | {(a.channel_name, a.name)
                                                    for a in self.accounts.values()},
                              path=self.config_path)
        check_jobs(config, self.channel_types, configured | {(a.channel_name, a.name)
                                                             for a in self.accounts.values()},
                   path=self.config_path)
        self.unanswered = unanswered(config, self.accounts.values())
        for i, rule in enumerate(self.config.send_policy.rules):
            if rule.channel != "*" and rule.channel not in self.channel_types:
                raise cfg.unknown_channel(rule.channel, self.channel_types,
                                          path=self.config_path,
                                          key=f"send_policy.rules[{i}].channel")
        return agent_types

    def _build_accounts(self) -> None:
        # The config's channels, and the accounts plugins imply (the built-in web chat's).
        for channel_name, section in cfg.effective_channels(self.config, self.pm).items():
            if not section.enabled:
                continue
            channel_type = self.channel_types.get(channel_name)
            if channel_type is None:
                raise cfg.unknown_channel(channel_name, self.channel_types,
                                          path=self.config_path,
                                          left_out=self.pm.channel_left_out(channel_name))
            for account in build_accounts(channel_name, section, channel_type,
                                          config_path=self.config_path,
                                          workspace=self.workspace,
                                          context=self.channel_context):
                self.accounts[account.key] = account

    async def _seed_activity(self) -> None:
        """Last inbound and last send per account from the store, so a snapshot right
        after a restart still says when the account last did something."""
        try:
            activity = await self.store.account_activity()
        except Exception:  # informative only: never a reason not to start
            log.exception("could not read the accounts' last activity")
            return
        for account in self.accounts.values():
            seen = activity.get((account.channel_name, account.name), {})
            account.last_inbound_at = account.last_inbound_at or seen.get("last_inbound_at")
            account.last_sent_at = account.last_sent_at or seen.get("last_sent_at")

    async def replay_unfinished(self, account: Account | None = None) -> None:
        """Messages journaled before a crash but never finished go through again (of
        ``account`` only, when given: it was taken over from another instance, and its
        messages line up behind their chats' earlier ones rather than one by one)."""
        if account is not None:
            entries = await self.store.unfinished_inbound(
                account=(account.channel_name, account.name))
            for entry in entries:
                self.inbound.line_up(account, entry.seq, entry.message)
            if entries:
                log.info("%s: replaying %d unfinished inbound message(s)", account.key,
                         len(entries))
            return
        entries = await self.store.unfinished_inbound()
        for entry in entries:
            message = entry.message
            account = self.accounts.get(f"{message.channel}:{message.account}")
            if account is None:
                log.warning("journaled message %s for unknown account %s:%s left unprocessed",
                            message.message_id, message.channel, message.account)
                await self.store.set_journal_status(entry.seq, "rejected")
                continue
            await self.inbound.process(account, message, entry.seq)
        if entries:
            log.info("replayed %d unfinished inbound message(s)", len(entries))

    def account_busy(self, key: str) -> bool:
        """Whether an account (``channel:account``) has work in flight here: messages
        in the pipeline, a session lane with a turn queued or running, payloads to
        send, a heartbeat running (a reload waits for it before removing the account;
        an instance, before taking the account over again or handing it over)."""
        prefix = f"{key}:"
        return (any(k.startswith(prefix) for k in self.inbound.lines.keys())
                or any(k.startswith(prefix) and lane.busy for k, lane in self.queue.lanes.items())
                or any(k.startswith(prefix) for k in self.outbox.lines.keys())
                or any(job.running and job.running_in.startswith(prefix)
                       for job in self.heartbeats.jobs.values()))

    def _close_queue(self) -> None:
        if self._queue is not None:
            self._queue.close()

    async def _write_behind(self) -> None:
        """Coalesced writes of hot, low-value state (the last active chat), idle
        senders ended, and the hourly upkeep."""
        last_upkeep = time.monotonic()
        while True:
            await anyio.sleep(WRITE_BEHIND_SECONDS)
            self.outbox.reap_idle()
            self.inbound.lines.reap_idle()
            await self.inbound.flush_last_chats()
            if time.monotonic() - last_upkeep >= UPKEEP_SECONDS:
                last_upkeep = time.monotonic()
                try:
                    await self.upkeep()
                except Exception:
                    log.exception("store upkeep failed; trying again in an hour")

    async def upkeep(self, now: float | None = None) -> int:
        """Prune finished journal and outbox entries past ``store.journal_retention_days``;
        returns how many rows went."""
        retention = self.config.store.journal_retention_days * 86400
        cutoff = (now or time.time()) - retention
        pruned = await self.store.prune_journal(cutoff) + await self.store.prune_outbox(cutoff)
        await self.store.prune_pairing((self.channel_clock or SYSTEM_CLOCK).now())
        if pruned:
            log.info("pruned %d finished journal and outbox entries older than %g days",
                     pruned, self.config.store.journal_retention_days)
        return pruned

    def _stop_turns(self) -> None:
        """Cancel what still runs: the turns cut short leave their messages unfinished,
        for the next start to replay (Turns.stop)."""
        if self._turns is not None:
            self._turns.stop()
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    async def drain(self, timeout: float) -> "Drained":
        """Wait (bounded) for running and queued turns and their sends; what is left
        (true when nothing is left that is worth waiting for).

        A payload that waits for a retry or for its platform is not waited for: it is
        ``pending`` in the outbox, and sent on the next start."""
        with anyio.move_on_after(timeout):
            await self.inbound.wait_settled()
            while self._queue is not None and any(
                    lane.active for lane in self._queue.lanes.values()):
                await anyio.sleep(0.02)
            await self.outbox.wait_stoppable()
        turns = self.inbound.backlog() + (0 if self._queue is None else sum(
            1 for lane in self._queue.lanes.values() if lane.active))
        waiting = self.outbox.waiting()
        return Drained(turns=turns, sends=self.outbox.pending() - waiting, waiting=waiting)

    # -- accessors ---------------------------------------------------------------------
    # The parts that exist once the kernel started. The components built before then
    # are handed these methods themselves, bound (``Running.store`` of core/wiring.py
    # is ``self._started_store``), read on each use: one call per use.

    def _started_store(self) -> Store:
        if self._store is None:
            raise RuntimeError("the kernel is not started")
        return self._store

    def _started_sessions(self) -> Sessions:
        if self._sessions is None:
            raise RuntimeError("the kernel is not started")
        return self._sessions

    def _started_queue(self) -> SessionQueue:
        if self._queue is None:
            raise RuntimeError("the kernel is not started")
        return self._queue

    def _started_heartbeats(self) -> HeartbeatScheduler:
        if self._heartbeats is None:
            raise RuntimeError("the kernel is not started")
        return self._heartbeats

    def _started_jobs(self) -> JobScheduler:
        if self._jobs is None:
            raise RuntimeError("the kernel is not started")
        return self._jobs

    def _holder(self) -> str:
        """Who this process is in a job run's record: its lease holder where gateways
        share the store."""
        cluster = self.cluster
        return cluster.holder if cluster is not None else f"{self.presence.own.instance_id}" \
            f"/{os.getpid()}"

    async def _live_holders(self) -> set[str] | None:
        """The live gateway processes on a shared store (None: this one alone)."""
        cluster = self.cluster
        return None if cluster is None else set(await cluster.shared.instances())

    def _started_task_group(self) -> TaskGroup:
        if self._tg is None:
            raise RuntimeError("the kernel is not started")
        return self._tg

    store = property(_started_store, doc="The state store (once started).")
    sessions = property(_started_sessions, doc="The sessions (once started).")
    queue = property(_started_queue, doc="The session queue (once started).")
    heartbeats = property(_started_heartbeats,
                          doc="The heartbeat scheduler, built at start with what it uses.")
    jobs = property(_started_jobs, doc="The job scheduler (docs/jobs.md), once started.")
    task_group = property(_started_task_group, doc="The kernel's task group (once started).")

    def _session_in_use(self, key: str) -> bool:
        """Whether something holds a session's cached record now: a running turn, a
        busy lane, a sender with replies (see :mod:`chatkernel.core.inbound.sessions`)."""
        return ((self._turns is not None and self._turns.running(key))
                or (self._queue is not None and self._queue.is_busy(key))
                or self.outbox.lines.busy(key))

    def account_for(self, channel: str, account: str) -> Account:
        found = self.accounts.get(f"{channel}:{account}")
        if found is None:
            raise InvalidMessage(f"no running account {channel}:{account}")
        return found

    def agent_for(self, message: InboundMessage) -> str | None:
        """The name of the agent answering ``message``'s chat (None: no agent does)."""
        if self.roster is None:
            raise RuntimeError("the kernel is not started")
        return self.roster.match(Chat.of(message)).agent

    def chat_agent(self, route: Route) -> str:
        """The agent whose session a proactive send to ``route`` belongs to: the one its
        chat is bound to (``default`` when none is)."""
        if self.roster is None:
            raise RuntimeError("the kernel is not started")
        return self.roster.match(Chat(route.channel, route.account, route.chat_id,
                                      route.is_group, route.thread_id)).agent or "default"

    def _responder(self, account: Account, session_key: str, session_id: str, route: Route,
                   journal_seqs: list[int], *, agent: str = "default",
                   **options: Any) -> Responder:
        """The Responder of one turn of ``agent`` (its media judged by the agent's
        workspace, and its access level where its table sets one)."""
        return Responder(self.replies, account, session_key, session_id, route,
                         journal_seqs, scope=self.media_scope(account, agent), **options)

    def media_scope(self, account: Account, agent: str) -> MediaScope:
        """What ``agent``'s files sent from ``account`` are judged by: the agent's
        workspace, and its ``access_level`` where its table sets one (else the
        account's); the account's own when the config has no such agent."""
        # The roster's tables, not the config's: named_agents() builds a dict per call.
        roster = self.roster
        if roster is None or roster.get(agent) is None:
            return MediaScope.of(account)
        workspace = roster.workspace(agent) or account.workspace
        return MediaScope(workspace, roster.access_level(agent) or account.access_level)

    def queue_settings(self, session_key: str) -> QueueSettings:
        """Session override (``/queue``) > channel ``queue`` table > ``[queue]``."""
        channel_name = session_key.split(":", 1)[0]
        settings = self._channel_queue_settings.get(channel_name)
        if settings is None:  # cached until a reload replaces the config (use_config)
            q = self.config.queue
            settings = QueueSettings(q.mode, q.debounce_ms, q.cap, q.drop)
            section = self.config.channels.get(channel_name)
            if section is not None:
                settings = settings.merged(section.queue.overrides())
            self._channel_queue_settings[channel_name] = settings
        record = self.sessions.cached(session_key)
        if record is not None:
            settings = settings.merged(record.settings.get("queue"))
        return settings

    # -- the pipeline ---------------------------------------------------------------------

    async def deliver(self, message: InboundMessage) -> str:
        """Run an inbound message through the whole pipeline; returns the outcome
        (see :mod:`chatkernel.core.inbound.pipeline`)."""
        return await self.inbound.deliver(message)

    async def accept(self, message: InboundMessage) -> str:
        """What receive loops call: returns once the message is durably journaled
        (``accepted`` or ``duplicate``); the pipeline goes on behind, in order per chat."""
        return await self.inbound.accept(message)



def own_presence_entry(config: cfg.KernelConfig) -> PresenceEntry:
    """The gateway's own presence entry; its id is stable across restarts."""
    import hashlib
    import platform
    import socket

    from chatkernel import __version__

    host = socket.gethostname()
    instance_id = config.gateway.instance_id or "gateway-{}-{}".format(
        host, hashlib.sha256(str(cfg.home_dir()).encode()).hexdigest()[:8])
    return PresenceEntry(instance_id, kind="gateway", host=host, version=__version__,
                         platform=f"{platform.system()} {platform.machine()}".strip(),
                         mode="gateway", reason="self")
