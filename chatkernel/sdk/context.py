"""What the kernel gives one account's channel: its state, media, health and reports.

A channel gets one :class:`ChannelContext` at construction (``Channel(account,
context)``) and uses nothing else of the kernel: its cursor and per-account
state live in the kernel's store, inbound files under the workspace, the
account's health in its runtime, and a platform's later delivery reports go to
the outbox. The kernel builds the context before the store is open (``chatkernel
config validate`` makes channels without a store), so what exists only once the
kernel runs is reached through functions the kernel gives at assembly, never set
into the channel later.

A context made without a kernel (``ChannelContext(account)``, as a plugin's unit
test does) works on its own: the health calls change the account's runtime,
the rest raise :class:`RuntimeError` naming what needs a running kernel.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from chatkernel.sdk.clock import SYSTEM_CLOCK, ChannelClock
from chatkernel.sdk.media import save_inbound_media
from chatkernel.sdk.models import Account, InboundMessage, MediaRef

__all__ = ["CREDENTIALS_KEY", "ChannelContext", "DeliveryReporter"]

#: The per-account state key under which :meth:`ChannelContext.record_credentials`
#: keeps the time the credentials were issued.
CREDENTIALS_KEY = "credentials_at"

#: ``reporter(platform_message_id, status, reason=..., code=...) -> found``.
DeliveryReporter = Callable[..., Awaitable[bool]]


class ChannelContext:
    """The kernel's services for one account's channel (see the module docstring).

    ``store``, ``delivery_reporter`` and ``receive_gate`` are functions the kernel
    gives: they answer with what exists when they are called (the store once the
    kernel started; the receive gate only where several gateway processes share the
    store). ``clock``: the time the receive loop and the channel's timers run on
    (:mod:`chatkernel.sdk.clock`; the real clock unless a test gives its own).
    ``markups``: the renderers the kernel's plugin manager collected, by name.
    """

    def __init__(self, account: Account, settings: Any = None, *,
                 store: Callable[[], Any] = lambda: None,
                 delivery_reporter: Callable[[], DeliveryReporter | None] = lambda: None,
                 receive_gate: Callable[[], Callable[[], Awaitable[None]] | None]
                 = lambda: None, clock: ChannelClock | None = None,
                 markups: Mapping[str, type] | None = None) -> None:
        #: The account served (its validated config is ``account.config``).
        self.account = account
        #: The channel-wide ``[channels.<name>]`` table (a ChannelConfig), if any.
        self.settings = settings
        self._store = store
        self._delivery_reporter = delivery_reporter
        self._receive_gate = receive_gate
        #: The time the receive loop waits on and the channel's own timers read
        #: (``clock.now()``, ``await clock.sleep(seconds)``): see :mod:`chatkernel.sdk.clock`.
        self.clock: ChannelClock = SYSTEM_CLOCK if clock is None else clock
        #: The Markdown renderers this account's kernel knows by name (its plugins'
        #: ``register_markups``), which a channel's named ``markup`` is looked up in.
        self.markups: Mapping[str, type] = {} if markups is None else markups

    # -- the store ---------------------------------------------------------------------

    @property
    def store(self) -> Any:
        """The kernel's store (None before the kernel starts). Channels keep their own
        data through the methods below; the web chat's transcript is the one table a
        channel reads directly."""
        return self._store()

    def _open_store(self, what: str) -> Any:
        store = self._store()
        if store is None:
            raise RuntimeError(f"{self.account.key}: {what} needs the kernel's store, which "
                               "exists once the kernel has started")
        return store

    @property
    def shares_store(self) -> bool:
        """Whether several gateway processes share the store (Redis): a request may
        reach any of them, and another may write what this one reads."""
        return getattr(self._store(), "shared", None) is not None

    async def load_cursor(self) -> str | None:
        """The platform cursor saved for this account (an offset, a sync buffer)."""
        store = self._open_store("the cursor")
        return await store.get_cursor(self.account.channel_name, self.account.name)

    async def save_cursor(self, cursor: str) -> None:
        """Persist the platform cursor: call it only after ``deliver`` returned for
        every message before it, so a crash never skips an accepted message."""
        store = self._open_store("the cursor")
        await store.set_cursor(self.account.channel_name, self.account.name, cursor)

    async def get_state(self, key: str) -> Any:
        """A value this account keeps across restarts (a session token, a context
        token per user), or None."""
        store = self._open_store("account state")
        return await store.get_account_state(self.account.channel_name, self.account.name, key)

    async def set_state(self, key: str, value: Any) -> None:
        """Keep ``value`` (JSON) under ``key`` for this account."""
        store = self._open_store("account state")
        await store.set_account_state(self.account.channel_name, self.account.name, key, value)

    async def record_credentials(self, issued_at: float | None = None) -> None:
        """Remember when this account's credentials were issued or renewed (a QR
        login, a refreshed token): ``chatkernel status`` shows their age."""
        await self.set_state(CREDENTIALS_KEY, time.time() if issued_at is None else issued_at)

    async def credentials_issued_at(self) -> float | None:
        """When the credentials were last issued or renewed (:meth:`record_credentials`,
        ``chatkernel login``), or None if never recorded."""
        value = await self.get_state(CREDENTIALS_KEY)
        return None if value is None else float(value)

    async def journal_rejected(self, record: InboundMessage) -> None:
        """Journal an event the channel could not read, as ``rejected``: the record
        shows it came, and a redelivery of it is a duplicate. Nothing without a store."""
        store = self._store()
        if store is None:
            return
        seq = await store.journal_inbound(record)
        if seq is not None:  # None: a redelivery, recorded already
            await store.set_journal_status(seq, "rejected")

    # -- media -------------------------------------------------------------------------

    @property
    def max_inbound_bytes(self) -> int:
        """The account's cap on one inbound file, in bytes (``max_inbound_media_mb``)."""
        return int(getattr(self.account.config, "max_inbound_media_mb", 20) * 1024 * 1024)

    async def save_media(self, chunks: Any, *, kind: str, filename: str | None = None,
                         mime: str | None = None, platform_id: str | None = None,
                         declared_size: int | None = None) -> MediaRef:
        """Save an inbound file under the workspace, within the account's size cap;
        see :func:`chatkernel.sdk.media.save_inbound_media`."""
        account = self.account
        return await save_inbound_media(
            account.workspace, account.channel_name, account.name, chunks, kind=kind,
            filename=filename, mime=mime, platform_id=platform_id,
            max_bytes=self.max_inbound_bytes, declared_size=declared_size)

    # -- health ------------------------------------------------------------------------

    def report_alive(self) -> None:
        """The receive loop just heard from its platform: a long poll answered (even
        with nothing), a websocket frame, the webhook registered.

        It marks the account ``running`` and restarts its silence clock; the health
        monitor restarts an account (not quiet) whose platform stays silent for
        ``stale_event_threshold_minutes``. Cheap: call it on every answered poll.
        The kit's transports call it; a channel's own loop does.
        """
        runtime = self.account.runtime
        now = time.time()
        runtime.last_event_at = now
        if runtime.state == "starting":
            runtime.set_state("running", now)
        elif failed_on_refusal(runtime):  # the platform took the identity again
            runtime.clear_problem()
            runtime.set_state("running", now)

    def report_problem(self, reason: str, *, restartable: bool = True) -> None:
        """The account cannot receive right now, and why ("another instance polls this
        token"): its health turns red with ``reason`` until :meth:`clear_problem`.
        ``restartable=False``: restarting the loop cannot fix it, so the health
        monitor leaves it alone (a person must act)."""
        self.account.runtime.set_problem(reason, time.time(), restartable)

    def clear_problem(self) -> None:
        """The problem reported before is over (a call worked again); an account
        ``failed`` on refused credentials is starting again."""
        runtime = self.account.runtime
        if runtime.problem is None:
            return
        refused = failed_on_refusal(runtime)
        runtime.clear_problem()
        if refused:
            runtime.set_state("starting", time.time())

    def pause(self, reason: str) -> None:
        """Pause the account until a person acts (a session that expired and needs a
        new login): its health turns red with ``reason``, the health monitor leaves it
        alone, and when the receive loop returns it is not restarted until the account
        is resumed."""
        self.account.runtime.set_state("paused", time.time(), reason)

    # -- reports -----------------------------------------------------------------------

    async def report_delivery_status(self, platform_message_id: str, status: str, *,
                                     reason: str | None = None,
                                     code: str | int | None = None) -> bool:
        """What became of a message this account sent, as the platform reports it later:
        ``sent``, ``delivered``, ``read`` or ``failed`` (with the platform's ``reason``
        and error ``code``), for the id its send returned (``SendResult.message_id``).

        Needs ``Capabilities(delivery_statuses=True)``. Every status is counted in the
        metrics; a ``failed`` one is a delivery failure of the payload it belongs to:
        marked in the outbox, noted in its session's log, counted and logged. Returns
        whether the message was found.
        """
        reporter = self._delivery_reporter()
        if reporter is None:
            raise RuntimeError(f"{self.account.key}: delivery statuses are reported once "
                               "the kernel has started the channel")
        return await reporter(platform_message_id, status, reason=reason, code=code)

    async def receive_gate(self) -> None:
        """Wait while this process cannot be sure it still owns the account (several
        gateway processes sharing the store); returns at once otherwise. The kit's
        receive loops await it before each poll."""
        gate = self._receive_gate()
        if gate is not None:
            await gate()


def failed_on_refusal(runtime: Any) -> bool:
    """Whether the account is ``failed`` because its identity was refused while the
    loop runs (not because the loop crashed)."""
    return runtime.state == "failed" and runtime.problem is not None \
        and runtime.detail == runtime.problem
