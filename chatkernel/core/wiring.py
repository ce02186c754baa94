"""The kernel's side of its components' ports.

A component the :class:`~chatkernel.core.kernel.Kernel` builds states what it calls of
the kernel as a small ``Protocol`` beside it, its port (the inbound pipeline's
``InboundRuntime`` and ``InboundRouting``, the outbox's ``OutboxRuntime`` and
``SendRules``, ...); the classes here implement those ports for one kernel. Each is a
view by concern, and a component sees only the calls its port names.

What the kernel already has as a method is handed on bound, as an attribute: a call
through the port is the call to the kernel's method, with no wrapper on the way (the
pipeline makes some per message). What a reload replaces, or the kernel makes at start,
is read on each call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from chatkernel.sdk.models import Route, Session

if TYPE_CHECKING:
    from chatkernel.core import config as cfg
    from chatkernel.core.kernel import Kernel
    from chatkernel.core.outbound.policy import SendPolicies
    from chatkernel.core.runtime.cluster import Cluster
    from chatkernel.sdk.models import Account, Command


class Running:
    """What exists once the kernel started, or a reload replaces: ``store()``,
    ``sessions()``, ``queue()``, ``task_group()`` and ``heartbeats()`` (RuntimeError
    before the start), ``cluster()``, ``started_at()``, the gateway's ``url()``,
    ``config()``, ``send_policy()`` and ``channel_config(name)``. The runtime ports of
    the pipeline, the outbox, the health and the control API."""

    __slots__ = ("_kernel", "store", "sessions", "queue", "task_group", "heartbeats")

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self.store = kernel._started_store
        self.sessions = kernel._started_sessions
        self.queue = kernel._started_queue
        self.task_group = kernel._started_task_group
        self.heartbeats = kernel._started_heartbeats

    def cluster(self) -> Cluster | None:
        return self._kernel.cluster

    def started_at(self) -> float | None:
        return self._kernel.started_at

    def url(self) -> str | None:
        return self._kernel.gateway_parts.url

    def config(self) -> cfg.KernelConfig:
        return self._kernel.config

    def send_policy(self) -> SendPolicies:
        return self._kernel.send_policy

    def channel_config(self, name: str) -> Any:
        return self._kernel.config.channels.get(name)


class Directory:
    """Who and what a message or a send is for: ``account_for``, ``account``,
    ``agent_for``, ``commands()`` and ``queue_settings`` (the pipeline's routing),
    ``chat_agent``, ``resolve_target`` and ``session_target`` (the send targets of the
    control API, heartbeats and jobs), ``pick_account``."""

    __slots__ = ("_kernel", "account_for", "account", "agent_for", "queue_settings",
                 "chat_agent")

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self.account_for = kernel.account_for
        self.account = kernel.accounts.get  # the kernel keeps the one dict: cleared, refilled
        self.agent_for = kernel.agent_for
        self.queue_settings = kernel.queue_settings
        self.chat_agent = kernel.chat_agent

    def commands(self) -> Mapping[str, Command]:
        return self._kernel.commands

    def pick_account(self, channel: str, account: str | None = None) -> Account:
        """The account to send from: named, or the channel's only one. LookupError says why."""
        mine = sorted(a.name for a in self._kernel.accounts.values() if a.channel_name == channel)
        if not mine:
            known = ", ".join(sorted({a.channel_name for a in self._kernel.accounts.values()})) or "none"
            raise LookupError(f"no running account of channel {channel!r} (channels: {known})")
        if account is None:
            if len(mine) > 1:
                raise LookupError(f"channel {channel!r} has several accounts "
                                  f"({', '.join(mine)}): name one with --account")
            account = mine[0]
        found = self._kernel.accounts.get(f"{channel}:{account}")
        if found is None:
            raise LookupError(f"no account {account!r} in channel {channel!r} "
                              f"(accounts: {', '.join(mine)})")
        return found

    async def resolve_target(self, channel: str, account: str | None, to: str, *,
                             thread: str | None = None) -> tuple[Account, Route, str]:
        """A proactive send's (account, route, session key). ``to`` is a chat id or
        ``last`` (the account's last active chat). LookupError says what is missing."""
        if not to:
            raise LookupError("no target: give a chat id or 'last'")
        found = self.pick_account(channel, account)
        if to == "last":
            last = self._kernel.inbound.last_chat(found) or await self._kernel.store.get_account_state(
                found.channel_name, found.name, "last_chat")
            if not last:
                raise LookupError(f"{found.key} has no last active chat yet")
            chat_id, thread, is_group = last["chat_id"], last.get("thread_id"), \
                bool(last.get("is_group"))
        else:
            chat_id, is_group = to, False
        # The chat's session with the agent it is bound to: the send is part of it.
        agent = self._kernel.chat_agent(Route(found.channel_name, found.name, chat_id,
                                      thread_id=thread, is_group=is_group))
        key = Session.make_key(found.channel_name, found.name, chat_id, thread, agent)
        known = await self._kernel.sessions.route(key)
        route = known or Route(found.channel_name, found.name, chat_id, thread_id=thread,
                               is_group=is_group)
        return found, route, key

    async def session_target(self, key: str) -> tuple[Account, Route, str]:
        """Where ``sessions send KEY`` goes: the session's account and current route."""
        record = await self._kernel.sessions.get(key)
        if record is None:
            raise LookupError(f"no session {key!r} (chatkernel sessions list shows them)")
        found = self.pick_account(record.channel, record.account)
        route = await self._kernel.sessions.route(key)
        if route is None:
            route = Route(record.channel, record.account, record.chat_id,
                          thread_id=record.thread_id)
        return found, route, key


class Hosting:
    """What the cluster asks of the kernel it runs in: ``account_busy``,
    ``replay_unfinished``, ``sessions()``, ``heartbeats()`` and ``store_committed``
    (the health's report of the store's writes)."""

    __slots__ = ("account_busy", "replay_unfinished", "sessions", "heartbeats",
                 "store_committed")

    def __init__(self, kernel: Kernel) -> None:
        self.account_busy = kernel.account_busy
        self.replay_unfinished = kernel.replay_unfinished
        self.sessions = kernel._started_sessions
        self.heartbeats = kernel._started_heartbeats
        self.store_committed = kernel.health.store_committed
