"""Who may talk to an account's bot: the DM and group policies, and pairing.

Every message goes through :func:`decide` (the built-in ``inbound_accept``), which
reads the account's config alone: ``allow_from`` is the static list under every
policy (``"*"`` in it: anyone; ``chat:<id>``: a group), ``dm_policy`` says what
becomes of a private message from anyone else, ``group_policy`` which groups are
answered, ``require_mention`` and ``group_allow_from`` who in them triggers the bot.
A private message from a sender the list does not name is refused as a *stranger*
(``Verdict.stranger``); the pipeline then asks the store whether the owner approved
them (:func:`approved`) and, under ``dm_policy = "pairing"``, offers them a code
(:func:`offer_code`). The owner's side is :class:`Pairing` (``chatkernel pairing``).
docs/access.md tells both sides.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from chatkernel.core.inbound.sessions import route_for
from chatkernel.sdk.models import Account, InboundMessage, Route, Verdict

if TYPE_CHECKING:
    from chatkernel.core.outbound.deliveries import Deliveries
    from chatkernel.core.outbound.replies import Replies
    from chatkernel.core.store.base import ApprovedSender, PairingRequest, Store

__all__ = ["CODE_ALPHABET", "CODE_LENGTH", "CODE_TTL_SECONDS", "MAX_PENDING", "Pairing",
           "PairingError", "RESEND_SECONDS", "approved", "decide", "dm_policy_of", "forgotten",
           "new_code", "offer_code"]

log = logging.getLogger("chatkernel.access")

#: A pairing code's characters: no 0/O, 1/I, which a person reads one for the other.
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
#: How long a code stays valid.
CODE_TTL_SECONDS = 3600.0
#: A stranger who writes again gets their pending code again at most this often.
RESEND_SECONDS = 60.0
#: Pending requests per account at most: a further stranger gets nothing, and nothing of
#: them is kept, until one is approved, denied or expires.
MAX_PENDING = 3

#: What a sender is told once the owner approved them.
APPROVED_TEXT = "You're in: the owner approved you. Send your message again."


def new_code() -> str:
    """A fresh pairing code: :data:`CODE_LENGTH` characters of :data:`CODE_ALPHABET`."""
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def _listed(allowed: Collection[str], message: InboundMessage) -> bool:
    """Whether ``allowed`` names the sender by their id or one of its aliases."""
    if message.sender_id in allowed:
        return True
    return any(alias in allowed for alias in message.sender_aliases)


def decide(config: Any, message: InboundMessage) -> Verdict:
    """The account's access policy for ``message``, from its config alone.

    A group: refused outright unless admitted (``group_policy = "open"``, or
    ``allow_from`` holds ``"*"``, ``chat:<id>`` or the sender); then it must mention the
    bot or reply to it (``require_mention``), then its sender must be on
    ``group_allow_from`` when that is set. A private message: admitted when
    ``dm_policy = "open"`` or ``allow_from`` names the sender; otherwise a stranger,
    whom ``"disabled"`` refuses outright, ``"allowlist"`` tells their id (once a day),
    and ``"pairing"`` offers a code; the pipeline admits them after all if the owner
    approved them (:func:`approved`)."""
    allowed = getattr(config, "allow_from", None) or ()
    if message.is_group:
        policy = getattr(config, "group_policy", "allowlist")
        if policy == "disabled":
            return Verdict.deny("groups are off (group_policy = \"disabled\")",
                                stranger="refused")
        if policy != "open" and "*" not in allowed and \
                f"chat:{message.chat_id}" not in allowed and not _listed(allowed, message):
            return Verdict.deny("group not admitted (no chat:<id> in allow_from)",
                                stranger="refused")
        if getattr(config, "require_mention", True) and not (
                message.mentions_bot or message.reply_to_bot):
            return Verdict.deny("group message without a mention of the bot")
        narrowed = getattr(config, "group_allow_from", None)
        if narrowed and "*" not in narrowed and not _listed(narrowed, message):
            return Verdict.deny("sender not on group_allow_from", stranger="refused")
        return Verdict.allow()
    policy = dm_policy_of(config)
    if policy == "disabled":
        return Verdict.deny("private messages are off (dm_policy = \"disabled\")",
                            stranger="refused")
    if policy == "open" or "*" in allowed or _listed(allowed, message):
        return Verdict.allow()
    if policy == "allowlist":
        return Verdict.deny(
            "sender not on the allowlist", stranger="approvable",
            reply=(f"You are not allowed to use this bot. Your id is {message.sender_id}; "
                   f"the owner can add it to channels.{message.channel}.accounts."
                   f"{message.account}.allow_from."))
    return Verdict.deny("sender not paired", stranger="pair")


def dm_policy_of(config: Any) -> str:
    """An account's ``dm_policy`` as it applies. Unset (the web chat's default): open,
    the page admitting everyone who reaches it, unless ``allow_from`` lists who (without
    ``"*"``): then exactly those, as before there were policies."""
    policy = getattr(config, "dm_policy", "pairing")
    if policy is None:
        return "open" if "*" in (getattr(config, "allow_from", None) or ()) else "allowlist"
    return policy


async def approved(store: Store, message: InboundMessage) -> bool:
    """Whether the owner approved the sender (or one of their aliases) by pairing."""
    senders = (message.sender_id, *message.sender_aliases)
    return await store.is_approved(message.channel, message.account, senders)


def forgotten(message: InboundMessage) -> InboundMessage:
    """``message`` as a refused stranger's journal entry keeps it: ids and times for the
    dedupe, none of what they wrote."""
    return dataclasses.replace(message, text="", media=[], route_extra={})


def now_of(account: Account) -> float:
    """The account's time: its channel's clock (a test's ManualClock), else the wall's."""
    context = getattr(account.channel, "context", None)
    return time.time() if context is None else context.clock.now()


def code_text(channel: str, code: str) -> str:
    """What a stranger is told: their code, how long it lasts, what the owner runs."""
    return (f"This bot talks only to people its owner let in. Your pairing code is "
            f"{code} (valid for an hour). Ask the owner to run:\n"
            f"chatkernel pairing approve {channel} {code}")


async def offer_code(store: Store, replies: Replies, account: Account,
                     message: InboundMessage) -> str:
    """Under ``dm_policy = "pairing"``: record the stranger's request and send them its
    code, or their pending one again (at most once a :data:`RESEND_SECONDS`), or
    nothing (:data:`MAX_PENDING` others are pending). Returns the store's outcome."""
    from chatkernel.core.store.base import PairingRequest

    now = now_of(account)
    while True:
        request = PairingRequest(
            code=new_code(), channel=message.channel, account=message.account,
            sender=message.sender_id, name=message.sender_name, chat=message.chat_id,
            created_at=now, expires_at=now + CODE_TTL_SECONDS, last_sent_at=now)
        outcome, pending = await store.pairing_request(
            request, resend_after=RESEND_SECONDS, max_pending=MAX_PENDING)
        if outcome != "taken":  # one in 10**12 draws: another request has that code
            break
    if pending is None or outcome == "quiet":
        if outcome == "full":
            log.info("%s: message from %s refused without a reply: %d pairing requests are "
                     "pending already (chatkernel pairing list)", account.key,
                     message.sender_id, MAX_PENDING)
        return outcome
    if outcome == "new":
        who = f"{pending.sender} ({pending.name})" if pending.name else pending.sender
        log.warning("%s: pairing request from %s in chat %s: code %s; approve it with "
                    "`chatkernel pairing approve %s %s`", account.key, who, pending.chat,
                    pending.code, pending.channel, pending.code)
    await replies.send_text(account, route_for(message),
                                code_text(message.channel, pending.code), fmt="plain")
    return outcome


class PairingError(LookupError):
    """A pairing command that cannot be done (a wrong or expired code, an unknown
    account or sender), said so a person can act on it."""


class Pairing:
    """The owner's side of pairing: pending requests, approving, denying, the approved
    senders and revoking them; for ``chatkernel pairing`` through the control API, or a
    CLI kernel of its own.

    ``store`` is a function (it exists once the kernel started); ``accounts`` the
    kernel's by key (read only); ``replies`` queues the approval's notice, which
    ``deliveries`` waits for; ``clock`` is the time codes expire in (the channels')."""

    def __init__(self, *, store: Callable[[], Store], accounts: Mapping[str, Account],
                 replies: Replies, deliveries: Deliveries,
                 clock: Callable[[], float]) -> None:
        self._store = store
        self._accounts = accounts
        self._replies = replies
        self._deliveries = deliveries
        self._clock = clock

    async def requests(self, channel: str | None = None) -> list[PairingRequest]:
        """The requests pending now, oldest first."""
        return await self._store().pairing_requests(channel, now=self._clock())

    async def approve(self, channel: str, code: str, *, account: str | None = None,
                      wait: float = 0) -> tuple[PairingRequest, str]:
        """Admit the sender of request ``code`` on ``channel`` and tell them so in their
        chat; returns the request and what became of the notice (``sent``, ``failed``...,
        ``queued`` when not waited for: ``wait`` seconds at most)."""
        request = await self._resolve(channel, code, account, approve=True)
        log.info("%s:%s: %s approved by pairing (code %s)", request.channel, request.account,
                 request.sender, request.code)
        found = self._accounts.get(f"{request.channel}:{request.account}")
        if found is None:
            return request, "not sent: the account is not running"
        route = Route(request.channel, request.account, request.chat)
        reply_id = await self._replies.send_text(found, route, APPROVED_TEXT, fmt="plain")
        if reply_id is None or not wait:
            return request, "queued"
        statuses = {entry.status for entry in await self._deliveries.wait(reply_id, wait)}
        if statuses == {"sent"}:
            return request, "sent"
        return request, "failed" if "failed" in statuses else "not confirmed yet"

    async def deny(self, channel: str, code: str, *,
                   account: str | None = None) -> PairingRequest:
        """Drop request ``code`` on ``channel``: its sender stays out, and may ask again."""
        request = await self._resolve(channel, code, account, approve=False)
        log.info("%s:%s: pairing request of %s denied (code %s)", request.channel,
                 request.account, request.sender, request.code)
        return request

    async def _resolve(self, channel: str, code: str, account: str | None, *,
                       approve: bool) -> PairingRequest:
        code = code.strip().upper()
        request = await self._store().pairing_resolve(channel, code, approve=approve,
                                                      now=self._clock(), account=account)
        if request is None:
            where = channel if account is None else f"{channel}:{account}"
            raise PairingError(f"no pending pairing request with code {code} on {where}: the "
                               f"code is wrong or expired (codes last an hour; `chatkernel "
                               f"pairing list` shows those pending)")
        return request

    async def allowed(self, channel: str | None = None) -> list[ApprovedSender]:
        """The senders approved by pairing."""
        return await self._store().approved_senders(channel)

    async def revoke(self, channel: str, sender: str, *, account: str | None = None) -> str:
        """Withdraw ``sender``'s approval on ``channel`` (on ``account``, or the one
        account they are approved on); returns that account. Their next message is a
        stranger's again, on every gateway sharing the store."""
        store = self._store()
        if account is None:
            accounts = sorted({a.account for a in await store.approved_senders(channel)
                               if a.sender == sender})
            if len(accounts) > 1:
                raise PairingError(f"{sender} is approved on several {channel} accounts "
                                   f"({', '.join(accounts)}): name one with --account")
            account = accounts[0] if accounts else None
        if account is None or not await store.revoke_sender(channel, account, sender):
            where = channel if account is None else f"{channel}:{account}"
            raise PairingError(f"{sender} is not approved on {where} (`chatkernel pairing "
                               f"allowed` lists who is)")
        log.info("%s:%s: approval of %s revoked", channel, account, sender)
        return account


def request_dict(request: PairingRequest) -> dict[str, Any]:
    """A request as ``chatkernel pairing list --json`` shows it (times in ISO 8601, UTC)."""
    return {"code": request.code, "channel": request.channel, "account": request.account,
            "sender": request.sender, "name": request.name or None, "chat": request.chat,
            "created_at": iso(request.created_at), "expires_at": iso(request.expires_at)}


def approved_dict(entry: ApprovedSender) -> dict[str, Any]:
    """An approved sender as ``chatkernel pairing allowed --json`` shows it."""
    return {"channel": entry.channel, "account": entry.account, "sender": entry.sender,
            "approved_at": iso(entry.approved_at)}


def iso(ts: float) -> str:
    """A Unix time in ISO 8601, UTC, to the second."""
    import datetime

    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc) \
        .isoformat(timespec="seconds").replace("+00:00", "Z")
