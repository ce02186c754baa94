"""The Redis store: state several gateway processes share (``[store] backend = "redis"``).

Built on the official ``redis`` package's asyncio client (``pip install
'chatkernel[redis]'``), imported when the store is constructed, so the kernel runs
without it. The same :class:`~chatkernel.core.store.base.Store` as SQLite, plus
:class:`~chatkernel.core.store.shared.SharedState` (leases, fencing, the inbox
streams, instances) for processes that divide the accounts between them.

Durability. Every write is one command, a MULTI/EXEC or a Lua script, and is on
the server when its method returns: ``flush`` has nothing to wait for, and
``on_commit`` hears of every call (None, or the error when the server could not
be reached). What survives a crash of the Redis server is its persistence's
business: with ``appendonly yes`` Redis writes each command to its append-only
file before it answers, so a crash of Redis loses nothing acknowledged, and
``appendfsync`` decides what a power loss may lose (``everysec``: the last second;
``always``: nothing). Without AOF (RDB snapshots only), a Redis crash loses the
writes since the last snapshot; run it with AOF.

No command is retried by the client: a write whose answer was lost may have been
made, and made twice it would journal a message as its own redelivery or queue a
reply twice. A call that fails raises :class:`~chatkernel.core.store.base.StoreError`
naming the server (never its password); the next call connects again (a
connection the server closed is replaced before a command is sent on it).

Batches. The writes of a message's hot path (journal entries, outbox entries and
their marks, platform ids, log entries) that concurrent callers make in one turn of
the event loop go to the server together, as one call of the ``BATCH`` script, and
each caller waits for its own answer (:mod:`~chatkernel.core.store.redis.batch`); the
other methods are a request each.

Atomicity. Each operation that touches several keys (a journal entry with its
dedupe key, indexes and inbox entry; an outbox entry with its indexes and the
journal entries it finishes; a fenced write with its lease check) is one Lua
script, or one write of the batch script (:mod:`~chatkernel.core.store.redis.lua`),
so it is made whole or not at all, and other clients never see half of it. The
scripts build their keys from the prefix they are given: the store needs one Redis
server (or a primary), not a Redis Cluster. docs/scale-out.md ("Keys and round
trips") has the key layout and the round trips of each operation.

The store is :class:`RedisStore` (``store``), put together from one class per
concern: the calls to the server, their errors and the key layout's check
(``connection``), and the operations by key family (``journal``, ``outbox``,
``state``, ``access`` for pairing, and ``coordination`` for
:class:`~chatkernel.core.store.shared.SharedState`);
``keys`` builds key parts and script arguments.
"""

from __future__ import annotations

from chatkernel.core.store.redis.connection import SCHEMA_VERSION
from chatkernel.core.store.redis.store import DEFAULT_URL, RedisStore, safe_url

__all__ = ["DEFAULT_URL", "SCHEMA_VERSION", "RedisStore", "safe_url"]
