"""Where a heartbeat runs and answers, resolved at each tick: its own session (a
session heartbeat), the last active chat (``target = "last"``), a channel's chat
(``target`` with ``to``), or a session of its own whose replies go nowhere; and
:func:`check_target`, the start-up check that ``heartbeat.target`` can be reached."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chatkernel.core.config import ConfigError, HeartbeatConfig
from chatkernel.core.heartbeat.settings import merged_settings
from chatkernel.core.store.base import HeartbeatState, Store
from chatkernel.sdk.models import Account, Route, Session

if TYPE_CHECKING:
    from chatkernel.core.config import KernelConfig
    from chatkernel.core.inbound.sessions import Sessions

#: resolve_target(channel, account, to): a proactive send's (account, route, session key).
ResolveTarget = Callable[[str, "str | None", str], Awaitable[tuple[Account, Route, str]]]

#: Where the config heartbeat runs with no destination (its replies go nowhere).
NO_TARGET_SESSION = "heartbeat:main"


def no_target_session(heartbeat_id: str) -> str:
    """Where a config heartbeat with no destination runs: ``heartbeat:main``, another
    agent's ``heartbeat:agent:<name>``."""
    return f"heartbeat:{heartbeat_id}"


@dataclass(slots=True)
class Destination:
    """Where a heartbeat runs and answers: a session, and its account and route
    (both None when there is nowhere to send)."""

    session_key: str
    session_id: str
    account: Account | None = None
    route: Route | None = None
    user_zone: str | None = None  # the session's /heartbeat tz
    problem: str = ""  # why there is no destination
    agent: str = "default"  # whose turn it is


class Targets:
    """Resolves where each heartbeat runs and answers, at each tick."""

    def __init__(self, *, sessions: Sessions, accounts: Mapping[str, Account], store: Store,
                 remembered_chat: Callable[[Account], dict[str, Any] | None],
                 resolve_target: ResolveTarget) -> None:
        """``sessions``: the session records and their routes; ``accounts``: the running
        accounts by key (read live: a reload adds and removes some); ``store``: an
        account's last active chat as last saved; ``remembered_chat(account)``: its last
        active chat this run, not saved yet (None: ask the store);
        ``resolve_target(channel, account, to)``: a proactive send's account, route and
        session key (LookupError says what is missing)."""
        self._sessions = sessions
        self._accounts = accounts
        self._store = store
        self._remembered_chat = remembered_chat
        self._resolve_target = resolve_target

    async def resolve(self, state: HeartbeatState, settings: HeartbeatConfig,
                      agent: str = "default") -> Destination:
        """Where the heartbeat of ``state`` runs and answers now; a config heartbeat
        runs on ``agent``, in its session with the target chat."""
        sessions = self._sessions
        nowhere = no_target_session(state.id)
        if state.session_key is not None:
            key = state.session_key
            record = await sessions.get(key)
            if record is None:
                return Destination(NO_TARGET_SESSION, "heartbeat",
                                   problem=f"session {key} is gone")  # no agent to run
            zone = record.settings.get("timezone")
            account = self._accounts.get(f"{record.channel}:{record.account}")
            route = await sessions.route(key)
            if account is None or route is None:
                return Destination(key, record.session_id, user_zone=zone,
                                   problem=f"account {record.channel}:{record.account} "
                                           "is not running", agent=record.agent)
            return Destination(key, record.session_id, account, route, zone,
                               agent=record.agent)
        if settings.target == "none":
            return Destination(nowhere, "heartbeat", problem="target is none", agent=agent)
        try:
            if settings.target == "last":
                account, chat = await self.last_chat(settings.account)
                key = Session.make_key(account.channel_name, account.name, chat["chat_id"],
                                       chat.get("thread_id"), agent)
                route = await sessions.route(key) or Route(
                    account.channel_name, account.name, chat["chat_id"],
                    thread_id=chat.get("thread_id"), is_group=bool(chat.get("is_group")))
            else:
                name = settings.account
                if name and ":" in name:
                    name = name.split(":", 1)[1]
                account, route, _ = await self._resolve_target(
                    settings.target, name, settings.to or "last")
                key = Session.make_key(route.channel, route.account, route.chat_id,
                                       route.thread_id, agent)  # this agent's session
        except LookupError as exc:
            return Destination(nowhere, "heartbeat", problem=str(exc), agent=agent)
        record = await sessions.get(key)
        return Destination(key, record.session_id if record else "heartbeat", account, route,
                           record.settings.get("timezone") if record else None, agent=agent)

    async def last_chat(self, wanted: str | None) -> tuple[Account, dict[str, Any]]:
        """The most recently active of the accounts' last chats (``wanted`` narrows it:
        ``name`` or ``channel:name``)."""
        best: tuple[float, Account, dict[str, Any]] | None = None
        for account in self._accounts.values():
            if wanted and wanted not in (account.name, account.key):
                continue
            chat = self._remembered_chat(account) or await self._store.get_account_state(
                account.channel_name, account.name, "last_chat")
            if not chat:
                continue
            key = Session.make_key(account.channel_name, account.name, chat["chat_id"],
                                   chat.get("thread_id"))
            record = await self._sessions.get(key)
            active = record.last_active_at if record is not None else 0.0
            if best is None or active > best[0]:
                best = (active, account, chat)
        if best is None:
            which = f" of account {wanted!r}" if wanted else ""
            raise LookupError(f"no last active chat{which} yet")
        return best[1], best[2]


def check_target(config: "KernelConfig", accounts: Iterable[Account], *,
                 path: Path | None = None) -> None:
    """Each config heartbeat's ``target`` names none, last, or a channel of ``accounts``,
    and its ``account`` one of them: ``[heartbeat]`` with ``[agent.heartbeat]``, and each
    agent's ``heartbeat`` table. ConfigError (``path``: the config file) says which is
    wrong, naming the key that set it."""
    accounts = list(accounts)
    for agent in ["default", *config.agent_heartbeats()]:
        settings = merged_settings(config, agent=agent)
        table = config.named_agents().get(agent)
        own = set(table.heartbeat.model_fields_set) if table and table.heartbeat else set()

        def key(name: str) -> str:
            return config.agent_key(agent, f"heartbeat.{name}") if name in own \
                else f"heartbeat.{name}"

        _check_one(settings, accounts, path=path, key=key)


def _check_one(settings: HeartbeatConfig, accounts: list[Account], *, path: Path | None,
               key: Callable[[str], str]) -> None:
    target = settings.target
    channels = {account.channel_name for account in accounts}
    if target not in ("none", "last") and target not in channels:
        known = ", ".join(sorted(channels)) or "none"
        raise ConfigError(f"no running channel {target!r} to send heartbeats to "
                          f"(expected none, last or one of: {known})",
                          path=path, key=key("target"))
    wanted = settings.account
    if wanted:
        candidates = [a for a in accounts if wanted in (a.name, a.key)
                      and target in ("none", "last", a.channel_name)]
        if not candidates:
            known = ", ".join(sorted(a.key for a in accounts)) or "none"
            raise ConfigError(f"no running account {wanted!r} to send heartbeats from "
                              f"(accounts: {known})", path=path, key=key("account"))
