"""The Channel base class: what a channel plugin implements, and the kit it builds on.

A channel holds only what differs per platform: parsing events into
:class:`InboundMessage`, its wire calls, its limits and media-kind table, its
probe. Everything else is the kernel's: chunking, ordering, retries, rate
limits, policy, dedupe, durability, heartbeats, health — and the transports
every platform shares (chatkernel.sdk.http_client, receiving, webhooks,
sockets), which this class puts a few lines away:

- a long-polling channel implements :meth:`Channel.poll` (and
  :meth:`Channel.normalize`) and runs :meth:`Channel.poll_forever`;
- a webhook channel returns a verifier from :meth:`Channel.webhook_verifier`
  and runs :meth:`Channel.serve_webhook`;
- a socket channel runs :meth:`Channel.supervise_socket` with its session.

One instance runs per configured account. Plugins import all of this from
:mod:`chatkernel.channels`.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

import anyio

from chatkernel.sdk.accounts import AccountConfig
from chatkernel.sdk.models import (
    Account,
    InboundMessage,
    MediaRef,
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
    from aiohttp import web

    from chatkernel.sdk.markup import MarkdownRenderer
    from chatkernel.sdk.sockets import SocketLink
    from chatkernel.sdk.webhooks import Verifier

log = logging.getLogger("chatkernel.channel")

#: The per-account state key under which :meth:`Channel.record_credentials` keeps
#: the time the credentials were issued.
CREDENTIALS_KEY = "credentials_at"


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
    """What a channel declares about its platform."""

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


class Channel:
    """Base class of every channel type.

    Subclasses set :attr:`name`, :attr:`account_model` and :attr:`limits`, and
    implement :meth:`run` (usually one line: :meth:`poll_forever`,
    :meth:`serve_webhook` or :meth:`supervise_socket`), :meth:`send` and
    :meth:`probe`; :meth:`indicate` (typing) is optional. The receive side's
    platform pieces are :meth:`identify`, :meth:`normalize`, :meth:`poll` and
    :meth:`receive_trouble`.
    """

    #: The channel type's name: the key under ``[channels.<name>]``.
    name: ClassVar[str]
    #: The pydantic model of one account's config.
    account_model: ClassVar[type[AccountConfig]] = AccountConfig
    limits: ClassVar[ChannelLimits] = ChannelLimits()
    #: Channels that legitimately wait a long time for their platform (a web page)
    #: are judged by their probe, not by silence (see :meth:`is_quiet`).
    quiet_by_nature: ClassVar[bool] = False
    #: Characters that start a slash command (Slack also takes "!").
    command_prefixes: ClassVar[str] = "/"
    #: Whether a message that arrives while a turn runs gets the kernel's "still
    #: working on your previous message" hint. False where every bot message spends
    #: a quota the answers need (WeChat's ten messages per user message).
    busy_hint: ClassVar[bool] = True
    #: Seconds between refreshes of the typing indicator while a turn runs.
    indicator_interval: ClassVar[float] = 4.0
    #: The renderer of the agent's Markdown into the platform's markup (a
    #: :class:`chatkernel.channels.MarkdownRenderer` subclass, or the name of
    #: one), or None to send text as it is.
    markup: ClassVar[type["MarkdownRenderer"] | str | None] = None
    #: Regular expressions of secrets that can show up where no config holds
    #: them (a token inside a URL): every log line is redacted with them.
    secret_patterns: ClassVar[tuple[str, ...]] = ()
    #: Receive-loop backoff after a failed call: first delay and cap, in seconds.
    receive_backoff: ClassVar[tuple[float, float]] = (1.0, 30.0)
    #: The platform reports each sent message's fate later (WhatsApp's statuses): the
    #: outbox then keeps the platform's id of every send (``SendResult.message_id``),
    #: for :meth:`report_delivery_status`.
    delivery_statuses: ClassVar[bool] = False
    #: The platform dedupes sends by the key :meth:`send` passes on from
    #: ``payload.key`` (Matrix's ``txnId``, Discord's ``nonce``): a repeated request
    #: with the same key creates no second message. The kernel then repeats a send
    #: whose answer was lost (under the retry policy) and resends one left ``sending``
    #: by a crash, instead of reporting them "delivery unknown". Only if repeating the
    #: whole of :meth:`send` can never make a second message (an upload repeated first
    #: leaves an unused copy; a second message is a bug). A channel whose platform dedupes
    #: only on some accounts (a server version) may set it per instance in ``__init__``.
    idempotent_sends: ClassVar[bool] = False
    #: The platform's error codes (``SendError.code``: Slack's ``error``, Graph's
    #: ``code``, iLink's ``ret``) that are about one recipient, not the account: the
    #: chat does not exist, the bot is not in it, the user's quota is spent. A send
    #: refused with one, or a later ``failed`` delivery status carrying one, is that
    #: send's failure and never turns the account's health red (HTTP 400 and 403
    #: answers are a recipient's already). See chatkernel.core.outbound.deliveries.
    recipient_error_codes: ClassVar[frozenset[str | int]] = frozenset()
    #: Webhook requests: the largest body taken (413 beyond) and the content types.
    webhook_max_bytes: ClassVar[int] = 1024 * 1024
    webhook_content_types: ClassVar[tuple[str, ...]] = ("application/json",)
    #: A TOML example of this channel's config, for the starter file ``chatkernel config
    #: init`` writes: its ``[channels.<name>...]`` tables with the keys a first account
    #: needs, secrets as ``${ENV_VAR}`` references, explanations as comments at the ends
    #: of lines. The starter has it commented out line by line (the web chat's is on), so
    #: removing the ``# `` of each line must give a config that validates once its
    #: variables are set. Empty: the starter names the channel only.
    config_example: ClassVar[str] = ""
    #: The channel-wide keys of ``[channels.<name>]`` this channel reads from
    #: ``settings`` besides the kernel's own (``enabled``, ``accounts``, ``queue``,
    #: ``retry``, ``rate_limits``, ``heartbeat``, ``health_monitor``): any other key
    #: there is a config error, not a setting silently ignored.
    settings_keys: ClassVar[frozenset[str]] = frozenset()
    #: The account settings that together name one account on the platform (a bot
    #: token and the API it belongs to): two enabled accounts with the same values
    #: are one platform account configured twice, which would receive every message
    #: twice or fight over it, so the config is refused (:func:`chatkernel.core.accounts.build_accounts`).
    account_identity: ClassVar[tuple[str, ...]] = ()

    def __init__(self, account: Account, settings: Any = None) -> None:
        #: The account this instance serves (its validated config is ``account.config``).
        self.account = account
        #: The channel-wide ``[channels.<name>]`` table (a ChannelConfig), if any.
        self.settings = settings
        #: The kernel's store, set when the kernel starts (for cursors and state).
        self.store: Any = None
        #: The bot's own user id on the platform, once :meth:`identify` learnt it:
        #: messages it sent itself are never delivered.
        self.self_id: str | None = None
        #: The receiver a running webhook receive loop hands requests to.
        self.webhook_deliver: Deliver | None = None
        #: Set by the kernel when it starts: where :meth:`report_delivery_status` goes.
        self.delivery_reporter: Callable[..., Awaitable[bool]] | None = None
        #: Set by the kernel where several instances share the store: the kit's receive
        #: loops await it before each poll, and it waits while this instance cannot be
        #: sure it still owns the account (core/gateway/cluster.py).
        self.receive_gate: Callable[[], Awaitable[None]] | None = None

    @property
    def config(self) -> Any:
        return self.account.config

    @property
    def shares_store(self) -> bool:
        """Whether several gateway processes share this kernel's store (Redis): a request
        may reach any of them, and another may write what this one reads."""
        return getattr(self.store, "shared", None) is not None

    @classmethod
    def compiled_secret_patterns(cls) -> list[re.Pattern[str]]:
        """:attr:`secret_patterns`, compiled."""
        return [re.compile(p) if isinstance(p, str) else p for p in cls.secret_patterns]

    # -- what a channel implements -------------------------------------------------------

    async def run(self, deliver: Deliver) -> None:
        """The receive loop, until cancelled: usually ``await self.poll_forever(deliver)``,
        ``await self.serve_webhook(deliver)`` or ``await self.supervise_socket(...)``."""
        raise NotImplementedError(f"channel {self.name!r} has no receive loop")

    async def send(self, route: Route, payload: OutboundPayload) -> SendResult:
        """Send one payload; raise :class:`chatkernel.SendError` on failure
        (``PlatformError.send_error()`` builds it from a failed call).

        ``route.reply_to`` is set only on the first payload of a reply that
        should quote its message, and ``payload.media_kind`` is already the kind
        that fits the platform's size caps: both are the kernel's decisions.
        ``payload.key`` is the same on every attempt to send this payload: pass it
        to a platform that dedupes by it, and declare :attr:`idempotent_sends`.
        """
        raise NotImplementedError(f"channel {self.name!r} cannot send")

    async def probe(self) -> ProbeResult:
        """Check the platform is reachable and the credentials work. The kernel
        times it and bounds it; a problem the receive loop reported turns it red."""
        return ProbeResult(ok=True, detail="no probe for this channel")

    async def indicate(self, route: Route) -> None:
        """Show a typing/processing indicator, where the platform has one."""

    async def identify(self) -> None:
        """Learn who the bot is before receiving (set :attr:`self_id`); the loops call
        it until it succeeds, raising :class:`PlatformError` meanwhile."""

    async def normalize(self, event: Any) -> InboundMessage | None:
        """One platform event as a message (None: not a message, ignored).

        Raising for a malformed event is fine: it is logged and skipped."""
        raise NotImplementedError(f"channel {self.name!r} cannot read events")

    def screen_inbound(self, message: InboundMessage) -> Verdict | None:
        """The channel's own say on one of its messages, before the kernel's policy
        (the ``inbound_accept`` hook): ``Verdict.deny(reason)`` leaves it unanswered
        (journaled as rejected, so a redelivery is still a duplicate); None, or an
        allowing verdict, lets the policy decide. Cheap and local: no platform call."""
        return None

    def event_chat(self, event: Any) -> Hashable:
        """The chat an event belongs to (events of one chat are read in order)."""
        return None

    def event_has_media(self, event: Any) -> bool:
        """Whether reading the event downloads a file (such batches are read a chat
        beside the other)."""
        return False

    def describe_event(self, event: Any) -> str:
        """The event in a few words, for a log line about it."""
        return f"an event of type {type(event).__name__}"

    def event_id(self, event: Any) -> str | None:
        """The event's own id on its platform (Telegram's ``update_id``), if it has one:
        an event the channel cannot read is journaled as rejected under it."""
        return None

    async def poll(self, cursor: str | None) -> Polled:
        """One long poll from ``cursor``: the events and the next cursor. Raise
        :class:`PlatformError` when it fails."""
        raise NotImplementedError(f"channel {self.name!r} does not poll")

    async def start_polling(self) -> None:
        """Called once before the first poll (Telegram removes a leftover webhook)."""

    def receive_trouble(self, error: Exception) -> Trouble:
        """What a failed receive call means: a passing failure (the default), or a
        problem a person must fix. The default knows rejected credentials (401,
        403) and the platform's own ``retry_after``."""
        from chatkernel.sdk.http_client import PlatformError

        if isinstance(error, PlatformError):
            if error.kind == "rate_limited":
                return Trouble(wait=error.retry_after)
            if error.status in (401, 403):
                return Trouble(problem=f"the platform refused the account's credentials "
                                       f"(HTTP {error.status})", wait=60.0,
                               restartable=False, refused=True)
        return Trouble()

    def refused_advice(self, error: Exception) -> str:
        """What a person does when the platform refused this account's identity (a
        :class:`Trouble` with ``refused``): where to get new credentials and which
        config key takes them. It follows the problem in the account's state
        ("...: get a new token from @BotFather and set it in ..."); never put a
        secret in it."""
        return f"set working credentials in {self.config_key()} and restart the gateway"

    def refusal(self, error: Exception) -> str | None:
        """The words for ``error`` when it is a refused identity (the problem, then
        :meth:`refused_advice`), else None: for a probe to say what the loop says."""
        from chatkernel.sdk.receiving import refusal

        trouble = self.receive_trouble(error)
        return refusal(self, trouble, error) if trouble.refused else None

    def config_key(self, name: str = "") -> str:
        """The dotted config key of this account (``channels.telegram.accounts.main``),
        or of one of its keys (``config_key("bot_token")``)."""
        key = f"channels.{self.name}.accounts.{self.account.name}"
        return f"{key}.{name}" if name else key

    # -- the kit's receive loops ---------------------------------------------------------

    async def poll_forever(self, deliver: Deliver) -> None:
        """The long-polling receive loop (see chatkernel.sdk.receiving.poll_forever)."""
        from chatkernel.sdk.receiving import poll_forever

        await poll_forever(self, deliver)

    async def serve_webhook(self, deliver: Deliver) -> None:
        """The webhook receive loop: identify, :meth:`register_webhook`, then take the
        platform's requests until cancelled."""
        from chatkernel.sdk.webhooks import serve_webhook

        await serve_webhook(self, deliver)

    async def supervise_socket(self, deliver: Deliver,
                               session: Callable[["SocketLink"], Awaitable[None]], *,
                               silent_after: float = 120.0) -> None:
        """The socket receive loop: ``session(link)`` run again and again, with
        liveness from real traffic (see chatkernel.sdk.sockets)."""
        from chatkernel.sdk.sockets import supervise_socket

        await supervise_socket(self, deliver, session, silent_after=silent_after)

    async def serve_elsewhere(self, deliver: Deliver) -> None:
        """With several gateway instances sharing the store, what runs on those that do
        not own this account, until cancelled (the owner runs :meth:`run`).

        The default takes the account's webhook requests, if it has a webhook: the
        bot is identified (its own id, to ignore its own messages) and each request is
        journaled for the owner to answer. A channel that takes other requests over
        HTTP (the web chat) overrides it; one that only polls or holds a socket needs
        nothing here."""
        from chatkernel.sdk.webhooks import accept_webhooks_elsewhere

        if self.webhook_verifier() is None:
            await anyio.sleep_forever()
        await accept_webhooks_elsewhere(self, deliver)

    async def deliver_events(self, deliver: Deliver, events: list[Any]) -> int:
        """Normalize events that arrived (in platform order) and journal them; returns
        how many messages they held. For loops the kit does not run."""
        from chatkernel.sdk.receiving import receive_events

        return await receive_events(self, deliver, events)

    # -- webhooks --------------------------------------------------------------------------

    @property
    def webhook_path(self) -> str:
        """Where the platform posts: ``/<channel>/<account>/webhook``."""
        return f"/{self.name}/{self.account.name}/webhook"

    def webhook_verifier(self) -> "Verifier | None":
        """The verifier of this account's webhook requests (a secret header, an HMAC),
        or None when the account does not take webhooks."""
        return None

    async def register_webhook(self) -> None:
        """Tell the platform where to post (Telegram's setWebhook), when it is told by
        a call rather than in its console."""

    def webhook_answer(self, payload: Any) -> "web.StreamResponse | None":
        """An answer the platform expects at once, instead of delivering (Slack's
        ``url_verification`` challenge); None for ordinary events."""
        return None

    def webhook_events(self, payload: Any) -> list[Any]:
        """The events in one verified request's JSON (default: the payload itself).
        Raise :class:`chatkernel.channels.WebhookRejected` for a malformed one."""
        return [payload]

    def webhook_ok(self) -> "web.StreamResponse":
        """The answer once the request's messages are journaled."""
        from aiohttp import web

        return web.json_response({"ok": True})

    def http_routes(self) -> list[tuple[str, str, Any]]:
        """``(method, path, aiohttp handler)`` to mount on the gateway's HTTP server:
        the webhook's when :meth:`webhook_verifier` gives one. Override to add
        pages; paths include the account name when there can be several."""
        verifier = self.webhook_verifier()
        if verifier is None:
            return []
        from chatkernel.sdk.webhooks import webhook_routes

        return webhook_routes(self, verifier)

    # -- health ---------------------------------------------------------------------------

    def is_quiet(self) -> bool:
        """Whether this account may legitimately go a long time without hearing from
        its platform (a webhook waits for the platform to call; a web page waits
        for a person). The health monitor judges a quiet account by its probe,
        and any other by how long its platform has been silent. The default: a
        webhook account, or :attr:`quiet_by_nature`."""
        return self.quiet_by_nature or self.webhook_verifier() is not None

    def report_alive(self) -> None:
        """Tell the kernel the receive loop just heard from its platform: a long poll
        answered (even with nothing), a websocket frame, the webhook registered.

        It marks the account ``running`` and restarts its silence clock; the health
        monitor restarts an account (not quiet) whose platform stays silent for
        ``stale_event_threshold_minutes``. Cheap: call it on every answered poll.
        """
        runtime = self.account.runtime
        now = time.time()
        runtime.last_event_at = now
        if runtime.state == "starting":
            runtime.set_state("running", now)
        elif _failed_on_refusal(runtime):  # the platform took the identity again
            runtime.clear_problem()
            runtime.set_state("running", now)

    def report_problem(self, reason: str, *, restartable: bool = True) -> None:
        """The account cannot receive right now, and why ("another instance polls this
        token"): its health turns red with ``reason`` until :meth:`clear_problem`.
        ``restartable=False``: restarting the loop cannot fix it, so the health
        monitor leaves it alone (a person must act). The kit's loops call both."""
        self.account.runtime.set_problem(reason, time.time(), restartable)

    def clear_problem(self) -> None:
        """The problem reported before is over (a call worked again); an account
        ``failed`` on refused credentials is starting again."""
        runtime = self.account.runtime
        if runtime.problem is None:
            return
        refused = _failed_on_refusal(runtime)
        runtime.clear_problem()
        if refused:
            runtime.set_state("starting", time.time())

    def pause(self, reason: str) -> None:
        """Pause the account until a person acts (a session that expired and needs
        a new login): its health turns red with ``reason``, the health monitor
        leaves it alone, and when :meth:`run` returns the supervisor does not
        restart it until the account is resumed."""
        self.account.runtime.set_state("paused", time.time(), reason)

    async def report_delivery_status(self, platform_message_id: str, status: str, *,
                                     reason: str | None = None,
                                     code: str | int | None = None) -> bool:
        """What became of a message this account sent, as the platform reports it later:
        ``sent``, ``delivered``, ``read`` or ``failed`` (with the platform's ``reason``
        and error ``code``), for the id its send returned (``SendResult.message_id``).

        Needs :attr:`delivery_statuses`. Every status is counted in the metrics; a
        ``failed`` one is a delivery failure of the payload it belongs to: marked in
        the outbox, noted in its session's log, counted and logged (see
        chatkernel.core.outbound.delivery_statuses). Returns whether the message was found.
        """
        if self.delivery_reporter is None:
            raise RuntimeError(f"{self.account.key}: delivery statuses are reported once "
                               "the kernel has started the channel")
        return await self.delivery_reporter(platform_message_id, status, reason=reason,
                                            code=code)

    async def record_credentials(self, issued_at: float | None = None) -> None:
        """Remember when this account's credentials were issued or renewed (a QR
        login, a refreshed token): ``chatkernel status`` shows their age."""
        await self.store.set_account_state(self.name, self.account.name, CREDENTIALS_KEY,
                                           time.time() if issued_at is None else issued_at)

    # -- text, state, media ----------------------------------------------------------------

    def render_text(self, payload: OutboundPayload) -> tuple[str, str | None]:
        """The text to put on the wire and the name of the markup it is in (None: plain).

        Markdown payloads are converted with the channel's :attr:`markup`; plain
        ones (error notes, command answers, a resend after the platform refused
        the markup) go as they are.
        """
        if payload.format == "markdown" and self.markup:
            from chatkernel.sdk.markup import render, renderer_for

            renderer = renderer_for(self.markup)
            return render(payload.text, renderer), renderer.name
        return payload.text, None

    async def load_cursor(self) -> str | None:
        """The platform cursor saved for this account (an offset, a sync buffer)."""
        return await self.store.get_cursor(self.name, self.account.name)

    async def save_cursor(self, cursor: str) -> None:
        """Persist the platform cursor: call it only after ``deliver`` returned for
        every message before it, so a crash never skips an accepted message."""
        await self.store.set_cursor(self.name, self.account.name, cursor)

    async def save_media(self, chunks: Any, *, kind: str, filename: str | None = None,
                         mime: str | None = None, platform_id: str | None = None,
                         declared_size: int | None = None) -> MediaRef:
        """Save an inbound file under the workspace, within the account's size cap
        (``max_inbound_media_mb``); see :func:`chatkernel.sdk.media.save_inbound_media`."""
        from chatkernel.sdk.media import save_inbound_media

        cap_mb = getattr(self.config, "max_inbound_media_mb", 20)
        return await save_inbound_media(
            self.account.workspace, self.name, self.account.name, chunks, kind=kind,
            filename=filename, mime=mime, platform_id=platform_id,
            max_bytes=int(cap_mb * 1024 * 1024), declared_size=declared_size)

    @property
    def max_inbound_bytes(self) -> int:
        """The account's cap on one inbound file, in bytes."""
        return int(getattr(self.config, "max_inbound_media_mb", 20) * 1024 * 1024)

    async def aclose(self) -> None:
        """Release clients and connections."""


def _failed_on_refusal(runtime: Any) -> bool:
    """Whether the account is ``failed`` because its identity was refused while the
    loop runs (receiving.mark_refused), not because the loop crashed."""
    return runtime.state == "failed" and runtime.problem is not None \
        and runtime.detail == runtime.problem
