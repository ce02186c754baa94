"""What several gateway processes sharing one store coordinate through.

A store that several processes use at once (Redis) implements
:class:`SharedState` besides :class:`~chatkernel.core.store.base.Store`, and
returns itself from ``Store.shared``; a store one process has to itself
(SQLite) returns None there.

Leases. A lease is a named lock with a time to live: one process holds it,
renews it before it runs out, and loses it to another process when it does
not. Each time a *new* holder takes a lease its **fencing token** grows (it
never goes back, across expiry and release), so a process that stalled past
its lease and wakes up holds a token lower than the current one.

Fencing. ``fence(channel, account, token)`` makes the store's writes that act
on an account's platform state — ``set_cursor``, ``outbox_add`` and the
``sending`` / ``sent`` / ``pending`` marks of ``outbox_mark`` — check,
atomically with the write, that the lease :func:`account_lease` of that account
is still held with that token; if it is not they raise :class:`LeaseLost` and
write nothing. A process that lost its account therefore cannot move its cursor
back or send for it. (Marks that send nothing, ``failed`` and ``unknown``, are
not fenced: a stale process may still record a failure it saw.)

Inbox. Every message the journal takes (not a redelivery) is also appended,
in the same atomic step, to a stream per account (``inbox:<channel>:<account>``,
trimmed to about :data:`INBOX_LENGTH` entries). Any process may journal; the
account's owner reads the stream with :meth:`SharedState.read_inbox` and runs
what it finds. After :meth:`SharedState.hand_sends_to_owners`, a payload queued
for an account the store is not fenced for goes to the stream too (its owner
sends it).

Instances. Each gateway process registers itself with a time to live and
renews it; :meth:`SharedState.instances` lists the live ones (for status).
"""

from __future__ import annotations

import abc
from typing import Any

from chatkernel.core.store.records import JournalEntry, OutboxEntry
from chatkernel.sdk.errors import LeaseLost, StoreError

__all__ = ["INBOX_LENGTH", "LeaseLost", "SharedState", "account_lease"]

#: About how many entries an account's inbox stream keeps (approximate trimming).
INBOX_LENGTH = 10_000


def account_lease(channel: str, account: str) -> str:
    """The name of the lease that fences an account's writes: ``account:<channel>:<account>``."""
    return f"account:{channel}:{account}"


class SharedState(abc.ABC):
    """Leases with fencing tokens, per-account inbox streams and live instances."""

    # -- leases -----------------------------------------------------------------------

    @abc.abstractmethod
    async def acquire_lease(self, name: str, holder: str, ttl: float) -> int | None:
        """Take the lease ``name`` for ``ttl`` seconds, or keep it (its time to live
        starts again) when ``holder`` has it already; returns its fencing token. A
        lease that is free or has expired is taken with a token higher than any
        before it. None when another holder has it. One round trip."""

    @abc.abstractmethod
    async def renew_lease(self, name: str, holder: str, token: int, ttl: float) -> bool:
        """Give the lease ``ttl`` seconds more if ``holder`` still holds it with
        ``token``; False (and nothing changed) otherwise."""

    @abc.abstractmethod
    async def release_lease(self, name: str, holder: str, token: int) -> None:
        """Free the lease if ``holder`` still holds it with ``token`` (else nothing)."""

    @abc.abstractmethod
    async def leases(self) -> dict[str, tuple[str, int, float]]:
        """The held leases: ``name -> (holder, token, seconds left)``."""

    @abc.abstractmethod
    def hand_sends_to_owners(self) -> None:
        """From now on, ``outbox_add`` of an account this store is not fenced for also
        appends each entry, in the same atomic step, to the account's inbox stream: the
        process that owns the account sends it (a gateway that owns only some of the
        accounts, a ``chatkernel send`` that owns none)."""

    @abc.abstractmethod
    def fence(self, channel: str, account: str, token: int | None) -> None:
        """From now on this store's fenced writes for the account (``set_cursor``,
        ``outbox_add``, ``outbox_mark`` to ``sending``, ``sent`` or ``pending``) check
        that the lease :func:`account_lease` is held with ``token``, and raise
        :class:`LeaseLost` writing nothing when it is not. ``None`` stops fencing
        the account (its writes are made unchecked, as by default)."""

    # -- inbox streams -------------------------------------------------------------------

    @abc.abstractmethod
    async def inbox_position(self, channel: str, account: str) -> str:
        """The id of the last entry of the account's inbox stream (``"0-0"`` when empty):
        reading after it gets only what is journaled from now on."""

    @abc.abstractmethod
    async def read_inbox(self, positions: dict[tuple[str, str], str], timeout: float
                         ) -> list[tuple[tuple[str, str], str, JournalEntry | OutboxEntry]]:
        """The entries after ``positions[(channel, account)]`` of those accounts'
        streams, as ``((channel, account), entry id, item)`` in each stream's order,
        where an item is a journaled message or a payload queued elsewhere;
        waits up to ``timeout`` seconds for one to come, then returns ``[]``. Blocks
        on a connection of its own: the store's other calls go on meanwhile."""

    # -- instances -----------------------------------------------------------------------

    @abc.abstractmethod
    async def register_instance(self, instance_id: str, info: dict[str, Any],
                                ttl: float) -> None:
        """Say this process is alive for ``ttl`` seconds, with ``info`` (JSON values);
        call again to renew it."""

    @abc.abstractmethod
    async def unregister_instance(self, instance_id: str) -> None:
        """This process is going away: it is no longer listed (and counts no more when
        the others share the accounts out)."""

    @abc.abstractmethod
    async def instances(self) -> dict[str, dict[str, Any]]:
        """The live instances: ``instance_id -> info``."""

    @abc.abstractmethod
    async def ping(self) -> float:
        """The round trip to the shared store, in seconds; raises
        :class:`~chatkernel.core.store.base.StoreError` when it cannot be reached."""
