"""The store interface: everything the kernel keeps between restarts.

The kernel's own backends are chosen by name (``[store] backend``, see
:mod:`chatkernel.core.store`): ``sqlite`` (default, one process) and ``redis``
(several gateway processes). Methods are async so a networked backend fits; the
SQLite backend runs its short statements inline.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from chatkernel.sdk.errors import ConfigError, StoreError
from chatkernel.sdk.models import InboundMessage, Route
from chatkernel.core.store.jobs import JobDefinition, JobPosition, JobRun, JobStore
from chatkernel.core.store.records import (
    JOURNAL_STATUSES,
    OUTBOX_STATUSES,
    ApprovedSender,
    HeartbeatState,
    JournalEntry,
    LogEntry,
    LogRow,
    OutboxEntry,
    PairingRequest,
    RecentSend,
    SessionRecord,
    TranscriptEntry,
)

if TYPE_CHECKING:
    from chatkernel.core.store.shared import SharedState

__all__ = ["JOURNAL_STATUSES", "OUTBOX_STATUSES", "ApprovedSender", "HeartbeatState",
           "JobDefinition", "JobPosition", "JobRun", "JournalEntry", "LogEntry", "LogRow",
           "OutboxEntry", "PairingRequest", "RecentSend", "SessionRecord", "Store", "StoreError",
           "StoreUnavailable", "TranscriptEntry"]


class StoreUnavailable(StoreError, ConfigError):
    """The state store cannot be opened or created, said in words a person acts on:
    which file or server, why, what to do. A :class:`ConfigError` too, so the command
    line says it in one line instead of a traceback."""


class Store(JobStore, abc.ABC):
    """Durable state. Every method is safe to call concurrently from one event loop.
    (Jobs' and triggers' methods: :class:`~chatkernel.core.store.jobs.JobStore`.)"""

    name: str = "?"
    #: Told of every commit: ``None`` when it succeeded, the error when it failed (the
    #: kernel's health listens). A store whose writes are durable as they return (no
    #: commits of its own) reports a write that failed, if it can.
    on_commit: Callable[[Exception | None], None] | None = None

    @property
    def shared(self) -> SharedState | None:
        """What several gateway processes coordinate through (leases, fencing, the
        inbox streams, instances), or None for a store one process has to itself
        (SQLite). See :mod:`chatkernel.core.store.shared`."""
        return None

    def claim(self, holder: dict[str, Any]) -> None:
        """Take the store for this process alone, until it is closed; ``holder`` (``pid``,
        ``home``, ``role``) is what a second claimant is told. Raises
        :class:`StoreUnavailable` naming the holder when another process has it. A store
        several gateways share (``shared``) needs no claim: the default does nothing."""

    async def open(self) -> None:
        """Connect / create the schema (idempotent)."""

    async def close(self) -> None:
        """Flush and release resources."""

    async def flush(self) -> None:
        """Wait until every write made so far is durable.

        ``journal_inbound`` and ``set_cursor`` are durable when they return; other
        writes may be committed a moment later, but always in the order made.
        """

    def after_commit(self, callback: Callable[[Exception | None], None]) -> None:
        """Call ``callback(None)`` once every write made so far is durable, or
        ``callback(error)`` if committing them failed. A store whose writes are
        durable when they return (this default) calls it at once."""
        callback(None)

    # -- inbound journal (dedupe + durability) ------------------------------------

    @abc.abstractmethod
    async def journal_inbound(self, message: InboundMessage) -> int | None:
        """Durably record an inbound message before its cursor advances.

        Returns the journal ``seq``, or ``None`` if the same platform message
        (channel, account, message_id) was journaled before: a redelivery.
        """

    async def journal_inbound_many(self, messages: list[InboundMessage]) -> list[int | None]:
        """:meth:`journal_inbound` for a batch (a long poll's updates), in order.

        Backends override it to record the batch in one durable write.
        """
        return [await self.journal_inbound(message) for message in messages]

    async def journal_inbound_shared(self, messages: list[InboundMessage]) -> list[int | None]:
        """:meth:`journal_inbound_many` for a batch that arrives beside others (a webhook
        request among concurrent ones): it may share one durable write with them.

        Returns, like it, once the batch is durable. Backends with a group commit
        override it to join the next one instead of committing at once.
        """
        return await self.journal_inbound_many(messages)

    @abc.abstractmethod
    async def set_journal_status(self, seq: int, status: str, *,
                                 message: InboundMessage | None = None) -> None:
        """Finish a journaled message: ``done`` or ``rejected``. ``message``: what the
        entry keeps instead of the message journaled (a refused stranger's, without its
        text: the entry stays for the dedupe alone)."""

    @abc.abstractmethod
    async def prune_journal(self, older_than: float) -> int:
        """Delete finished (done, rejected) entries received before ``older_than``
        (a Unix time); returns how many. Their dedupe keys go with them."""

    @abc.abstractmethod
    async def unfinished_inbound(self, *, account: tuple[str, str] | None = None
                                 ) -> list[JournalEntry]:
        """Entries still ``received``: replayed after a crash, in seq order.

        ``account=(channel, account)``: that account's only (a process taking
        over one account replays what it left)."""

    # -- outbox ---------------------------------------------------------------------------

    @abc.abstractmethod
    async def outbox_add(self, entries: list[OutboxEntry], *,
                         finish_journal: list[int] = ()) -> list[int]:
        """Queue payloads (their ``id`` and ``created_at`` are set) and, in the same
        transaction, mark the journal entries ``finish_journal`` done: once a reply is
        queued, a restart sends it rather than running the turn again (which would
        answer twice)."""

    @abc.abstractmethod
    async def outbox_mark(self, entry_id: int, status: str, error: str | None = None, *,
                          durable: bool = False) -> None:
        """Move an entry on. ``durable=True`` returns only once it is committed:
        ``sending`` must be, before the request goes out."""

    async def outbox_sent_as(self, entry_id: int, platform_id: str) -> None:
        """Remember the platform's id of a sent entry (``SendResult.message_id``), so a
        status the platform reports later finds it (:meth:`outbox_by_platform_id`).
        Written for channels with ``Capabilities.delivery_statuses`` only. A backend that
        cannot keep it does nothing (this default): late statuses then find nothing."""

    async def outbox_by_platform_id(self, channel: str, account: str,
                                    platform_id: str) -> OutboxEntry | None:
        """The entry the platform knows as ``platform_id`` (see :meth:`outbox_sent_as`),
        or None."""
        return None

    @abc.abstractmethod
    async def outbox_reply(self, reply_id: str) -> list[OutboxEntry]:
        """The entries of one reply, in order (what happened to a send)."""

    @abc.abstractmethod
    async def prune_outbox(self, older_than: float) -> int:
        """Delete finished (sent, failed, unknown) entries created before ``older_than``."""

    @abc.abstractmethod
    async def outbox_unfinished(self, *, account: tuple[str, str] | None = None
                                ) -> list[OutboxEntry]:
        """``pending`` and ``sending`` entries, oldest first (``account=(channel,
        account)``: that account's only)."""

    async def outbox_recent_sends(self, since: float, *,
                                  queued_since: float) -> list[RecentSend]:
        """Entries whose status is not ``pending`` and changed at or after ``since``,
        queued at or after ``queued_since`` (Unix times), oldest change first: the
        sends the rate limiters count again after a restart. A backend that cannot
        tell returns ``[]`` (the default)."""
        return []

    # -- platform cursors --------------------------------------------------------------

    @abc.abstractmethod
    async def get_cursor(self, channel: str, account: str) -> str | None: ...

    @abc.abstractmethod
    async def set_cursor(self, channel: str, account: str, cursor: str) -> None:
        """Remember a receive loop's platform cursor. Need not be durable at once:
        a cursor lost in a crash only makes the platform send again what the
        journal already holds, and dedupe drops that."""

    # -- sessions and routes -----------------------------------------------------------

    @abc.abstractmethod
    async def get_session(self, key: str) -> SessionRecord | None: ...

    @abc.abstractmethod
    async def save_session(self, record: SessionRecord) -> None:
        """Insert or replace the session row."""

    @abc.abstractmethod
    async def list_sessions(self, active_since: float | None = None) -> list[SessionRecord]:
        """Sessions, most recently active first (only those active since, if given)."""

    @abc.abstractmethod
    async def set_route(self, session_key: str, route: Route) -> None: ...

    @abc.abstractmethod
    async def get_route(self, session_key: str) -> Route | None: ...

    async def account_activity(self) -> dict[tuple[str, str], dict[str, float]]:
        """``(channel, account) -> {"last_inbound_at", "last_sent_at"}`` (Unix times; a
        key is missing when nothing is known), from the journal and the outbox: what
        ``chatkernel status`` shows when no gateway runs. A backend that cannot tell
        returns ``{}`` (the default)."""
        return {}

    async def outbox_failures(self, limit: int = 10) -> list[tuple[OutboxEntry, float]]:
        """The newest ``limit`` entries that ended ``failed`` or ``unknown``, newest first,
        each with when it did: what ``chatkernel status`` lists when no gateway runs. A
        backend that cannot tell returns ``[]`` (the default)."""
        return []

    # -- failed sends: what an operator lists, retries and discards ----------------------

    async def outbox_failed(self, *, limit: int = 100) -> list[tuple[OutboxEntry, float]]:
        """The newest ``limit`` entries that ended ``failed``, newest first, each with when
        it did (chatkernel.core.outbound.failed). A backend that cannot tell returns
        ``[]`` (the default)."""
        return []

    async def outbox_failed_count(self, since: float) -> int:
        """How many entries ended ``failed`` at or after ``since`` (a Unix time)."""
        return 0

    async def outbox_take_failed(self, entry_ids: list[int]) -> list[OutboxEntry]:
        """Delete those of the entries that are still ``failed``, in one atomic step, and
        return them: of two callers taking one entry, one gets it (a retry queues it
        again once, never twice). Entries that are not ``failed`` (any more) are left."""
        return []

    # -- per-account state (last active chat, context tokens, ...) ----------------------

    @abc.abstractmethod
    async def get_account_state(self, channel: str, account: str, key: str) -> Any:
        """A JSON value, or None."""

    @abc.abstractmethod
    async def set_account_state(self, channel: str, account: str, key: str,
                                value: Any) -> None: ...

    # -- session logs ---------------------------------------------------------------------

    @abc.abstractmethod
    async def append_log(self, session_key: str, session_id: str, role: str, text: str,
                         meta: dict[str, Any] | None = None) -> int:
        """Append to a session's log; returns the entry's seq."""

    async def append_logs(self, session_key: str, session_id: str,
                          entries: Sequence[LogRow]) -> list[int]:
        """Append several ``(role, text, meta)`` entries in order; returns their seqs.

        Backends that can write them in one statement override this.
        """
        return [await self.append_log(session_key, session_id, role, text, meta)
                for role, text, meta in entries]

    @abc.abstractmethod
    async def read_log(self, session_key: str, *, session_id: str | None = None,
                       limit: int | None = None, roles: tuple[str, ...] | None = None,
                       before_seq: int | None = None) -> list[LogEntry]:
        """The newest ``limit`` entries (with seq < ``before_seq``, of ``roles``), oldest first."""

    # -- transcripts (a channel whose platform is the gateway: the web chat) -----------------

    @abc.abstractmethod
    async def transcript_add(self, channel: str, account: str, chat_id: str, role: str,
                             text: str, media: list[dict[str, Any]] | None = None, *,
                             client_id: str | None = None) -> TranscriptEntry | None:
        """Append a message to a chat's transcript; returns it, or None when ``client_id``
        is in the chat's transcript already (a retry: :meth:`transcript_find` has it).
        Committed with the writes around it: a user's message and its journal entry
        are durable together."""

    @abc.abstractmethod
    async def transcript_read(self, channel: str, account: str, chat_id: str, *,
                              after: int = 0, limit: int | None = None
                              ) -> list[TranscriptEntry]:
        """The newest ``limit`` entries with an id above ``after``, oldest first."""

    @abc.abstractmethod
    async def transcript_find(self, channel: str, account: str, chat_id: str,
                              client_id: str) -> TranscriptEntry | None:
        """The entry the sender's ``client_id`` made, if any."""

    # -- heartbeats -----------------------------------------------------------------------

    @abc.abstractmethod
    async def get_heartbeat(self, heartbeat_id: str) -> HeartbeatState | None:
        """One heartbeat's scheduler state, or None."""

    @abc.abstractmethod
    async def save_heartbeat(self, state: HeartbeatState) -> None:
        """Insert or replace a heartbeat's state."""

    @abc.abstractmethod
    async def delete_heartbeat(self, heartbeat_id: str) -> bool:
        """Forget a heartbeat (``/heartbeat clear``); False when there was none."""

    @abc.abstractmethod
    async def list_heartbeats(self) -> list[HeartbeatState]:
        """Every heartbeat's state, by id."""

    # -- access: pairing requests and approved senders (docs/access.md) ----------------------

    @abc.abstractmethod
    async def pairing_request(self, request: PairingRequest, *, resend_after: float,
                              max_pending: int) -> tuple[str, PairingRequest | None]:
        """A stranger asks, at ``request.created_at`` (now), with a fresh code: first the
        account's expired requests go, then, in one step, the answer is one of
        :data:`~chatkernel.core.store.records.PAIRING_OUTCOMES` and the sender's pending
        request:

        - ``("new", request)``: they had none and the account has fewer than
          ``max_pending``: ``request`` is kept, its code is to be sent;
        - ``("resend", pending)``: theirs was last sent ``resend_after`` seconds ago or
          more: its ``last_sent_at`` is now, it is to be sent again;
        - ``("quiet", pending)``: theirs was sent lately: nothing changes;
        - ``("full", None)``: ``max_pending`` others are pending: nothing is kept;
        - ``("taken", None)``: a pending request of the channel has that code: nothing
          is kept (draw another)."""

    @abc.abstractmethod
    async def pairing_requests(self, channel: str | None = None, *,
                               now: float) -> list[PairingRequest]:
        """The requests pending at ``now`` (of ``channel``, or all), oldest first.
        Writes nothing (``chatkernel status`` reads them from a read-only store)."""

    @abc.abstractmethod
    async def pairing_resolve(self, channel: str, code: str, *, approve: bool, now: float,
                              account: str | None = None) -> PairingRequest | None:
        """Take the request of ``channel`` with ``code`` (on ``account``, if given) out
        of the pending ones; ``approve``: its sender is approved on its account at
        ``now``, in the same write. None when no such request is pending at ``now``
        (a wrong code, another account's, or one that expired)."""

    @abc.abstractmethod
    async def approved_senders(self, channel: str | None = None) -> list[ApprovedSender]:
        """The senders approved by pairing (on ``channel``, or all), by account."""

    @abc.abstractmethod
    async def is_approved(self, channel: str, account: str, senders: Sequence[str]) -> bool:
        """Whether any of ``senders`` (a sender's id and its aliases) is approved on the
        account: asked for each message from a sender ``allow_from`` does not name."""

    @abc.abstractmethod
    async def revoke_sender(self, channel: str, account: str, sender: str) -> bool:
        """Withdraw a sender's approval; False when they had none."""

    @abc.abstractmethod
    async def prune_pairing(self, now: float) -> int:
        """Delete the requests expired at ``now``; returns how many."""
