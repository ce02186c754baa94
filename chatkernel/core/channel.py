"""The Channel base class: what a channel plugin implements.

A channel holds only what differs per platform: parsing events into
:class:`InboundMessage`, its wire client, its limits and media-kind table, its
probe. Chunking, ordering, retries, rate limits, policy, dedupe, durability,
heartbeats and health are the kernel's.

One instance runs per configured account.
"""

from __future__ import annotations

import logging

import time
from dataclasses import dataclass, field
from pathlib import PurePath
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, Any, Awaitable, Callable, ClassVar, Literal, TypeVar

import anyio

from chatkernel.core.config import AccountConfig
from chatkernel.core.models import (
    Account,
    InboundMessage,
    MediaRef,
    OutboundPayload,
    ProbeResult,
    Route,
    SendResult,
)

if TYPE_CHECKING:
    from chatkernel.core.plugins import PluginManager

T = TypeVar("T")

log = logging.getLogger("chatkernel.channel")

#: The per-account state key under which :meth:`Channel.record_credentials` keeps
#: the time the credentials were issued.
CREDENTIALS_KEY = "credentials_at"

#: What a receive loop calls for every normalized message. It returns once the
#: message is durably journaled, so the loop may then advance its cursor.
Deliver = Callable[[InboundMessage], Awaitable[Any]]


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
    #: rate limits by scope: "account", "chat", "group".
    rates: dict[str, RateLimit] = field(default_factory=dict)
    retry_base_delay: float = 0.5

    def media_kind(self, path: str | PurePath) -> str:
        return self.media_kinds.get(PurePath(path).suffix.lower(), self.default_media_kind)


class Channel:
    """Base class of every channel type.

    Subclasses set :attr:`name`, :attr:`account_model` and :attr:`limits`, and
    implement :meth:`run`, :meth:`send` and :meth:`probe`; :meth:`indicate`
    (typing) is optional.
    """

    #: The channel type's name: the key under ``[channels.<name>]``.
    name: ClassVar[str]
    #: The pydantic model of one account's config.
    account_model: ClassVar[type[AccountConfig]] = AccountConfig
    limits: ClassVar[ChannelLimits] = ChannelLimits()
    #: Webhook-driven channels are judged by their probe, not by silence
    #: (see :meth:`is_quiet` for channels whose quietness depends on the account).
    quiet_by_nature: ClassVar[bool] = False
    #: Characters that start a slash command (Slack also takes "!").
    command_prefixes: ClassVar[str] = "/"
    #: Seconds between refreshes of the typing indicator while a turn runs.
    indicator_interval: ClassVar[float] = 4.0
    #: The platform's markup for the agent's Markdown ("telegram_html",
    #: "slack_mrkdwn", "whatsapp"), or None to send text as it is.
    markup: ClassVar[str | None] = None

    def __init__(self, account: Account, settings: Any = None) -> None:
        #: The account this instance serves (its validated config is ``account.config``).
        self.account = account
        #: The channel-wide ``[channels.<name>]`` table (a ChannelConfig), if any.
        self.settings = settings
        #: The kernel's store, set when the kernel starts (for cursors and state).
        self.store: Any = None

    @property
    def config(self) -> Any:
        return self.account.config

    async def run(self, deliver: Deliver) -> None:
        """The receive loop: long poll, websocket or webhook wait, until cancelled."""
        raise NotImplementedError(f"channel {self.name!r} has no receive loop")

    async def send(self, route: Route, payload: OutboundPayload) -> SendResult:
        """Send one payload; raise :class:`chatkernel.SendError` on failure."""
        raise NotImplementedError(f"channel {self.name!r} cannot send")

    async def probe(self) -> ProbeResult:
        """Check the platform is reachable and the credentials work."""
        return ProbeResult(ok=True, detail="no probe for this channel")

    async def indicate(self, route: Route) -> None:
        """Show a typing/processing indicator, where the platform has one."""

    # -- health ---------------------------------------------------------------------

    def is_quiet(self) -> bool:
        """Whether this account may legitimately go a long time without hearing from
        its platform (a webhook waits for the platform to call; a web page waits
        for a person). The health monitor judges a quiet account by its probe, and
        any other account by how long its platform has been silent. Override it
        when it depends on the account (Telegram: webhook mode is quiet, polling
        is not); the default is :attr:`quiet_by_nature`."""
        return self.quiet_by_nature

    def report_alive(self) -> None:
        """Tell the kernel the receive loop just heard from its platform: a long poll
        answered (even with nothing), a websocket ping, the webhook registered.

        It marks the account ``running`` and restarts its silence clock; the health
        monitor restarts an account (not quiet) whose platform stays silent for
        ``stale_event_threshold_minutes``. Cheap: call it on every answered poll.
        """
        runtime = self.account.runtime
        now = time.time()
        runtime.last_event_at = now
        if runtime.state == "starting":
            runtime.set_state("running", now)

    def pause(self, reason: str) -> None:
        """Pause the account until a person acts (a session that expired and needs
        a new login): its health turns red with ``reason``, the health monitor
        leaves it alone, and when :meth:`run` returns the supervisor does not
        restart it until :meth:`chatkernel.core.kernel.Kernel.resume_account`."""
        self.account.runtime.set_state("paused", time.time(), reason)

    async def record_credentials(self, issued_at: float | None = None) -> None:
        """Remember when this account's credentials were issued or renewed (a QR
        login, a refreshed token): ``chatkernel status`` shows their age."""
        await self.store.set_account_state(self.name, self.account.name, CREDENTIALS_KEY,
                                           time.time() if issued_at is None else issued_at)

    def render_text(self, payload: OutboundPayload) -> tuple[str, str | None]:
        """The text to put on the wire and the markup it is in (None: plain).

        Markdown payloads are converted to the channel's :attr:`markup`; plain
        ones (error notes, command answers, a resend after the platform refused
        the markup) go as they are.
        """
        if payload.format == "markdown" and self.markup:
            from chatkernel.core.markup import render

            return render(payload.text, self.markup), self.markup
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
        (``max_inbound_media_mb``); see :func:`chatkernel.core.media.save_inbound_media`."""
        from chatkernel.core.media import save_inbound_media

        cap_mb = getattr(self.config, "max_inbound_media_mb", 20)
        return await save_inbound_media(
            self.account.workspace, self.name, self.account.name, chunks, kind=kind,
            filename=filename, mime=mime, platform_id=platform_id,
            max_bytes=int(cap_mb * 1024 * 1024), declared_size=declared_size)

    def http_routes(self) -> list[tuple[str, str, Any]]:
        """``(method, path, aiohttp handler)`` to mount on the gateway's HTTP server
        (webhooks, web pages). Paths should include the account name when a
        channel can have several accounts."""
        return []

    async def aclose(self) -> None:
        """Release clients and connections."""


async def per_chat(items: Iterable[T], chat_of: Callable[[T], Hashable],
                   handle: Callable[[T], Awaitable[Any]]) -> None:
    """``await handle(item)`` for every item: different chats concurrently, each
    chat's items in their order. Returns when all are handled.

    For receive loops that get updates in batches (long polling): delivering a
    batch's chats side by side lets their journal writes share one commit, while
    the order within every chat is kept. Save the cursor after this returns.
    """
    groups: dict[Hashable, list[T]] = {}
    for item in items:
        groups.setdefault(chat_of(item), []).append(item)
    if len(groups) <= 1:
        for group in groups.values():
            for item in group:
                await handle(item)
        return

    async def run(group: list[T]) -> None:
        for item in group:
            await handle(item)

    async with anyio.create_task_group() as tg:
        for group in groups.values():
            tg.start_soon(run, group)


async def normalize_batch(events: list[T], normalize: Callable[[T], Awaitable[InboundMessage | None]],
                          *, chat_of: Callable[[T], Hashable], downloads: Callable[[T], bool],
                          describe: Callable[[T], str] = repr,
                          account: str = "") -> list[InboundMessage]:
    """A receive loop's batch of platform events as messages, in platform order.

    ``normalize`` turns one event into a message (None: not a message, skipped).
    An event it cannot read (``KeyError``, ``TypeError``, ``ValueError``) is
    logged with ``describe(event)`` and skipped: a malformed event must not stop
    the loop, or it would come back forever. When some event ``downloads`` a
    file, the batch is read one chat beside the other (each chat in order), so
    one big file does not hold up the other chats; a batch without files is read
    in one go, without a single wait.
    """
    found: dict[int, InboundMessage] = {}

    async def read(item: tuple[int, T]) -> None:
        index, event = item
        try:
            message = await normalize(event)
        except (KeyError, TypeError, ValueError) as exc:
            log.error("%s: %s skipped, it is not a message this channel can read: %s: %s",
                      account, describe(event), type(exc).__name__, exc)
            return
        if message is not None:
            found[index] = message

    items = list(enumerate(events))
    if any(downloads(event) for event in events):
        await per_chat(items, lambda item: chat_of(item[1]), read)
    else:
        for item in items:
            await read(item)
    return [found[index] for index in sorted(found)]


async def deliver_many(deliver: Deliver, messages: list[InboundMessage]) -> None:
    """Hand a batch of messages (in platform order) to ``deliver``; returns once all
    are journaled, so the loop may then save its cursor.

    With the kernel's receiver the batch is one durable write; any other
    ``deliver`` (a test's) gets the messages one chat beside the other, each
    chat's in order.
    """
    many = getattr(deliver, "many", None)
    if many is not None:
        await many(messages)
    else:
        await per_chat(messages, lambda message: (message.account, message.chat_id), deliver)


def collect_channels(pm: "PluginManager") -> dict[str, type[Channel]]:
    """Channel types by name, from every plugin's ``register_channels``."""
    from chatkernel.core.plugins import collect_registered

    return collect_registered(pm.hook.register_channels, "channel", Channel)
