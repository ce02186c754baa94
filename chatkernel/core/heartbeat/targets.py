"""Where a heartbeat runs and answers, resolved at each tick: its own session (a
session heartbeat), the last active chat (``target = "last"``), a channel's chat
(``target`` with ``to``), or a session of its own whose replies go nowhere."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chatkernel.core.config import HeartbeatConfig
from chatkernel.core.store.base import HeartbeatState
from chatkernel.sdk.models import Account, Route, Session

if TYPE_CHECKING:
    from chatkernel.core.kernel import Kernel

#: Where a heartbeat with no destination runs (its replies go nowhere).
NO_TARGET_SESSION = "heartbeat:main"


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


async def resolve_destination(kernel: "Kernel", state: HeartbeatState,
                              settings: HeartbeatConfig) -> Destination:
    """Where the heartbeat of ``state`` runs and answers now."""
    if state.session_key is not None:
        key = state.session_key
        record = await kernel.sessions.get(key)
        if record is None:
            return Destination(NO_TARGET_SESSION, "heartbeat",
                               problem=f"session {key} is gone")
        zone = record.settings.get("timezone")
        account = kernel.accounts.get(f"{record.channel}:{record.account}")
        route = await kernel.sessions.route(key)
        if account is None or route is None:
            return Destination(key, record.session_id, user_zone=zone,
                               problem=f"account {record.channel}:{record.account} "
                                       "is not running")
        return Destination(key, record.session_id, account, route, zone)
    if settings.target == "none":
        return Destination(NO_TARGET_SESSION, "heartbeat", problem="target is none")
    try:
        if settings.target == "last":
            account, chat = await last_chat(kernel, settings.account)
            key = Session.make_key(account.channel_name, account.name, chat["chat_id"],
                                   chat.get("thread_id"))
            route = await kernel.sessions.route(key) or Route(
                account.channel_name, account.name, chat["chat_id"],
                thread_id=chat.get("thread_id"), is_group=bool(chat.get("is_group")))
        else:
            name = settings.account
            if name and ":" in name:
                name = name.split(":", 1)[1]
            account, route, key = await kernel.resolve_target(
                settings.target, name, settings.to or "last")
    except LookupError as exc:
        return Destination(NO_TARGET_SESSION, "heartbeat", problem=str(exc))
    record = await kernel.sessions.get(key)
    return Destination(key, record.session_id if record else "heartbeat", account, route,
                       record.settings.get("timezone") if record else None)


async def last_chat(kernel: "Kernel", wanted: str | None) -> tuple[Account, dict[str, Any]]:
    """The most recently active of the accounts' last chats (``account`` narrows it:
    ``name`` or ``channel:name``)."""
    best: tuple[float, Account, dict[str, Any]] | None = None
    for account in kernel.accounts.values():
        if wanted and wanted not in (account.name, account.key):
            continue
        chat = kernel.inbound.last_chat(account) or await kernel.store.get_account_state(
            account.channel_name, account.name, "last_chat")
        if not chat:
            continue
        key = Session.make_key(account.channel_name, account.name, chat["chat_id"],
                               chat.get("thread_id"))
        record = await kernel.sessions.get(key)
        active = record.last_active_at if record is not None else 0.0
        if best is None or active > best[0]:
            best = (active, account, chat)
    if best is None:
        which = f" of account {wanted!r}" if wanted else ""
        raise LookupError(f"no last active chat{which} yet")
    return best[1], best[2]
