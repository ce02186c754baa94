"""The Channel base class: the platform contract a channel plugin implements.

A channel holds only what differs per platform: its identity and limits,
:meth:`Channel.normalize` (a platform event as an :class:`InboundMessage`),
:meth:`Channel.send`, :meth:`Channel.probe`, an optional typing indicator, the
account config model, its markup and secret patterns. How an account receives
is a transport object the channel picks in :meth:`Channel.transport`: long
polling, a webhook or a socket (the package chatkernel.sdk.receiving),
each owning its loop. What the kernel gives an account — its cursor and state,
inbound media, health reports, delivery reports, the receive gate — arrives
once, at construction, as one :class:`ChannelContext`. What only some
platforms do is declared in :class:`Capabilities`.

Everything else is the kernel's: chunking, ordering, retries, rate limits,
policy, dedupe, durability, heartbeats, health.

One instance runs per configured account. Plugins import all of this from
:mod:`chatkernel.channels`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

from chatkernel.sdk.accounts import AccountConfig
from chatkernel.sdk.context import CREDENTIALS_KEY, ChannelContext  # noqa: F401 - API
from chatkernel.sdk.models import (
    Account,
    InboundMessage,
    OutboundPayload,
    ProbeResult,
    Route,
    SendResult,
    Verdict,
)
from chatkernel.sdk.receiving import (  # noqa: F401 - part of this module's API
    Polled,
    Trouble,
    deliver_many,
    normalize_batch,
    per_chat,
)

if TYPE_CHECKING:
    from chatkernel.sdk.markup import MarkdownRenderer
    from chatkernel.sdk.receiving.transport import Transport

log = logging.getLogger("chatkernel.channel")


@runtime_checkable
class Deliver(Protocol):
    """What a receive loop calls for every normalized message (the kernel's receiver).

    It returns once the message is durably journaled (``"accepted"``, or
    ``"duplicate"`` for one the journal already has), so the loop may then
    advance its platform cursor. The kernel's receiver also has
    ``many(messages)``, one durable write for a batch: use
    :func:`deliver_many`, which takes either.
    """

    async def __call__(self, message: InboundMessage) -> str: ...


class BatchDeliver(Deliver, Protocol):
    """A :class:`Deliver` that journals a batch in one write (the kernel's receiver)."""

    async def many(self, messages: list[InboundMessage]) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``count`` sends in any rolling window of ``per`` seconds."""

    count: int
    per: float


@dataclass(frozen=True, slots=True)
class ChannelLimits:
    """What a channel declares about its platform's sizes and pace."""

    text_limit: int = 4000
    text_unit: Literal["chars", "utf16"] = "chars"
    caption_limit: int = 1024
    #: lower-case extension (".jpg") -> media kind ("photo"); others get default_media_kind.
    media_kinds: dict[str, str] = field(default_factory=dict)
    default_media_kind: str = "document"
    #: media kind -> the largest file the platform takes as that kind, in bytes. A
    #: file over its kind's cap goes as ``default_media_kind`` (a photo over
    #: Telegram's 10 MB is sent as a document, whole); one over the default
    #: kind's cap is refused before any request, with the reason.
    media_max_bytes: dict[str, int] = field(default_factory=dict)
    #: rate limits by scope: "account", "chat", "group".
    rates: dict[str, RateLimit] = field(default_factory=dict)
    retry_base_delay: float = 0.5
    #: Seconds between refreshes of the typing indicator while a turn runs.
    indicator_interval: float = 4.0
    #: Rate limits of the typing indicator's calls by scope ("account", "chat",
    #: "group"), where the platform counts them (Slack's assistant.threads.setStatus has
    #: its own limit). The kernel makes an indicator call only when its window has a
    #: free slot, and skips it while the reply is already on its way: an indicator
    #: never waits and never delays a send. Empty: the platform does not limit them.
    indicator_rates: dict[str, RateLimit] = field(default_factory=dict)
    #: Seconds a turn runs before its first indicator call. A turn that replies sooner
    #: shows none: an indicator that its own reply would end at once changes nothing the
    #: user sees, and costs a call (Slack's working status costs two: set and clear).
    #: 0: at once. A channel whose indicator also marks the messages read mixes in
    #: :class:`ReadReceipts`: the turns that reply sooner mark
    #: them read at that time instead, one call for all of a session's within it.
    indicator_delay: float = 0.0
    #: Seconds after a quick turn's reply before its messages are marked read, on a
    #: channel that mixes in :class:`ReadReceipts`: the reply already shows the message
    #: was seen, and the chat's next quick turns within the delay share the one call
    #: (never before ``indicator_delay``; 0: at it).
    read_mark_delay: float = 0.0

    def media_kind(self, path: str | PurePath, size: int | None = None) -> str:
        """The kind a file is sent as: by extension, then by the kind's size cap."""
        kind = self.media_kinds.get(PurePath(path).suffix.lower(), self.default_media_kind)
        cap = self.media_max_bytes.get(kind)
        if size is not None and cap is not None and size > cap:
            return self.default_media_kind
        return kind

    def media_refusal(self, size: int) -> str | None:
        """Why a file of ``size`` bytes cannot be sent at all (None: it can)."""
        cap = self.media_max_bytes.get(self.default_media_kind)
        if cap is not None and size > cap:
            return f"larger than the platform's {cap / 1024 / 1024:g} MB limit for files"
        return None


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a platform does that not every platform does, as its channel declares it.

    The defaults are the common case; a channel declares only where its platform
    differs (``capabilities = Capabilities(delivery_statuses=True)``).
    """

    #: Characters that start a slash command (Slack also takes "!").
    command_prefixes: str = "/"
    #: Whether a message that arrives while a turn runs gets the kernel's "still
    #: working on your previous message" hint. False where every bot message spends
    #: a quota the answers need (WeChat's ten messages per user message).
    busy_hint: bool = True
    #: The platform reports each sent message's fate later (WhatsApp's statuses): the
    #: outbox then keeps the platform's id of every send (``SendResult.message_id``),
    #: for :meth:`ChannelContext.report_delivery_status`.
    delivery_statuses: bool = False
    #: The platform dedupes sends by the key :meth:`Channel.send` passes on from
    #: ``payload.key`` (Matrix's ``txnId``, Discord's ``nonce``): a repeated request
    #: with the same key creates no second message. The kernel then repeats a send
    #: whose answer was lost (under the retry policy) and resends one left ``sending``
    #: by a crash, instead of reporting them "delivery unknown". Only if repeating the
    #: whole of :meth:`Channel.send` can never make a second message (an upload
    #: repeated first leaves an unused copy; a second message is a bug). A channel
    #: whose platform dedupes only on some accounts (a server version) sets its
    #: instance's ``capabilities`` in ``__init__`` (``dataclasses.replace``).
    idempotent_sends: bool = False
    #: The platform's error codes (``SendError.code``: Slack's ``error``, Graph's
    #: ``code``, iLink's ``ret``) that are about one recipient, not the account: the
    #: chat does not exist, the bot is not in it, the user's quota is spent. A send
    #: refused with one, or a later ``failed`` delivery status carrying one, is that
    #: send's failure and never turns the account's health red (HTTP 400 and 403
    #: answers are a recipient's already).
    recipient_error_codes: frozenset[str | int] = frozenset()


class Channel:
    """Base class of every channel type: the platform contract.

    Subclasses set :attr:`name`, :attr:`account_model` and :attr:`limits`, and
    implement :meth:`send`, :meth:`probe`, :meth:`normalize` and
    :meth:`transport` (how the account receives: a :class:`~chatkernel.channels.Polling`,
    :class:`~chatkernel.channels.Webhook` or :class:`~chatkernel.channels.Socket`
    subclass); :meth:`identify`, :meth:`indicate`, :meth:`screen_inbound` and
    :meth:`receive_trouble` are optional.
    """

    #: The channel type's name: the key under ``[channels.<name>]``.
    name: ClassVar[str]
    #: The pydantic model of one account's config (an :class:`AccountConfig`).
    account_model: ClassVar[type[AccountConfig]] = AccountConfig
    limits: ClassVar[ChannelLimits] = ChannelLimits()
    capabilities: Capabilities = Capabilities()
    #: The renderer of the agent's Markdown into the platform's markup (a
    #: :class:`chatkernel.channels.MarkdownRenderer` subclass, or the name a plugin
    #: registered one under with the ``register_markups`` hook: an instance has the
    #: renderer of that name in its kernel), or None to send text as it is.
    markup: type["MarkdownRenderer"] | str | None = None
    #: Regular expressions of secrets that can show up where no config holds
    #: them (a token inside a URL): every log line is redacted with them.
    secret_patterns: ClassVar[tuple[str, ...]] = ()
    #: A TOML example of this channel's config, for the starter file ``chatkernel config
    #: init`` writes: its ``[channels.<name>...]`` tables with the keys a first account
    #: needs, secrets as ``${ENV_VAR}`` references, explanations as comments at the ends
    #: of lines. The starter has it commented out line by line (the web chat's is on), so
    #: removing the ``# `` of each line must give a config that validates once its
    #: variables are set. Empty: the starter names the channel only.
    config_example: ClassVar[str] = ""
    #: The channel-wide keys of ``[channels.<name>]`` this channel reads from
    #: ``context.settings`` besides the kernel's own (``enabled``, ``accounts``,
    #: ``queue``, ``retry``, ``rate_limits``, ``heartbeat``, ``health_monitor``): any
    #: other key there is a config error, not a setting silently ignored.
    settings_keys: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, account: Account, context: ChannelContext | None = None) -> None:
        if context is None:  # made by hand, as a plugin's unit test does
            context = ChannelContext(account)
        if isinstance(self.markup, str) and self.markup in context.markups:
            # A named markup is this kernel's renderer of that name, never another's.
            self.markup = context.markups[self.markup]
        #: The account this instance serves (its validated config is ``account.config``).
        self.account = account
        #: What the kernel gives the account: its state, media, health, reports.
        self.context = context
        #: The bot's own user id on the platform, once :meth:`identify` learnt it:
        #: messages it sent itself are never delivered.
        self.self_id: str | None = None

    @property
    def config(self) -> Any:
        """The account's validated config (``account.config``)."""
        return self.account.config

    # -- what a channel implements -------------------------------------------------------

    def transport(self) -> "Transport":
        """How this account receives: a transport made for this instance (the kernel
        asks once, when it builds the account). The default receives nothing."""
        from chatkernel.sdk.receiving.transport import Transport

        return Transport(self)

    async def identify(self) -> None:
        """Learn who the bot is before receiving (set :attr:`self_id`); the transports
        call it until it succeeds, raising :class:`PlatformError` meanwhile."""

    async def normalize(self, event: Any) -> InboundMessage | None:
        """One platform event as a message (None: not a message, ignored).

        Raising for a malformed event is fine: it is logged and skipped. Make no
        network call here beyond the event's own files."""
        raise NotImplementedError(f"channel {self.name!r} cannot read events")

    async def send(self, route: Route, payload: OutboundPayload) -> SendResult:
        """Send one payload; raise :class:`chatkernel.SendError` on failure
        (``PlatformError.send_error()`` builds it from a failed call).

        ``route.reply_to`` is set only on the first payload of a reply that
        should quote its message, and ``payload.media_kind`` is already the kind
        that fits the platform's size caps: both are the kernel's decisions.
        ``payload.key`` is the same on every attempt to send this payload: pass it
        to a platform that dedupes by it, and declare
        ``Capabilities(idempotent_sends=True)``. :func:`chatkernel.channels.render_payload`
        gives the text in the channel's :attr:`markup`.
        """
        raise NotImplementedError(f"channel {self.name!r} cannot send")

    async def probe(self) -> ProbeResult:
        """Check the platform is reachable and the credentials work. The kernel
        times it and bounds it; a problem the receive loop reported turns it red."""
        return ProbeResult(ok=True, detail="no probe for this channel")

    async def indicate(self, route: Route) -> None:
        """Show a typing/processing indicator, where the platform has one."""

    def screen_inbound(self, message: InboundMessage) -> Verdict | None:
        """The channel's own say on one of its messages, before the kernel's policy
        (the ``inbound_accept`` hook): ``Verdict.deny(reason)`` leaves it unanswered
        (journaled as rejected, so a redelivery is still a duplicate); None, or an
        allowing verdict, lets the policy decide. Cheap and local: no platform call."""
        return None

    def receive_trouble(self, error: Exception) -> Trouble:
        """What a failed receive call means: a passing failure (the default), or a
        problem a person must fix, with what to do (``Trouble.advice``). The
        default knows rejected credentials (401, 403) and the platform's own
        ``retry_after``."""
        from chatkernel.sdk.http_client import PlatformError

        if isinstance(error, PlatformError):
            if error.kind == "rate_limited":
                return Trouble(wait=error.retry_after)
            if error.status in (401, 403):
                return Trouble(problem=f"the platform refused the account's credentials "
                                       f"(HTTP {error.status})", wait=60.0,
                               restartable=False, refused=True)
        return Trouble()

    async def aclose(self) -> None:
        """Release clients and connections."""


class ReadReceipts:
    """The capability of marking a chat's messages read apart from the typing indicator,
    mixed into a :class:`Channel` whose ``indicate`` marks them read as well (WhatsApp:
    one request for the read receipt and typing).

    The kernel detects it with ``isinstance`` (chatkernel.core.turns.indicators): a turn
    that replied before its indicator was due (:attr:`ChannelLimits.indicator_delay`)
    shows no typing, which its reply would have ended at once, and its messages are
    marked read with :meth:`mark_read` when the indicator would have been made; the
    session's next quick turns within that time share the one call.
    """

    async def mark_read(self, route: Route) -> None:
        """Mark the chat's messages read, up to its latest, without a typing indicator.
        A failure is logged at debug level and never affects a turn."""
        raise NotImplementedError


def compiled_secret_patterns(channel_type: type[Channel]) -> list[re.Pattern[str]]:
    """A channel type's :attr:`~Channel.secret_patterns`, compiled."""
    return [re.compile(p) if isinstance(p, str) else p for p in channel_type.secret_patterns]

