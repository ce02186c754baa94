"""The SQLite store: the default backend, for one gateway process.

One connection, used on the event loop thread with the stdlib ``sqlite3``
module: every statement is short (an indexed insert, update or lookup), and
measured, running it inline is faster than a hop to a worker thread. Each
method runs its statement without awaiting, so it is atomic with respect to
the other coroutines of the loop.

Durability. The database runs in WAL mode with ``synchronous = NORMAL``: once
``journal_inbound`` returns, the message survives a crash of the process (an exception, ``kill
-9``, the OOM killer), because the commit is in the operating system's
hands. A power loss or kernel panic may lose the last transactions committed
before it (WAL with ``NORMAL`` does not fsync on each commit); the database
itself stays consistent. Pass ``synchronous="FULL"`` to :class:`SQLiteStore`
to fsync every commit, at a large cost in throughput.

Dedupe. A journal row is the dedupe key of its platform message, so dedupe
holds as long as rows are kept: :meth:`SQLiteStore.prune_journal` deletes
finished rows older than a cutoff, and the retention window
(:data:`JOURNAL_RETENTION`, 7 days by default) is how long a redelivery is
still recognized.

The store is :class:`SQLiteStore` (``store``), put together from one class per
concern: the database file and its lock (``file``), the schema and its migrations
(``schema``), the connection's writes and their group commit (``commit``), and the
queries by table family (``journal``, ``outbox``, ``state``, ``access``).
"""

from __future__ import annotations

from chatkernel.core.store.base import JOURNAL_STATUSES, StoreError, StoreUnavailable
from chatkernel.core.store.sqlite.journal import JOURNAL_RETENTION
from chatkernel.core.store.sqlite.schema import MIGRATIONS
from chatkernel.core.store.sqlite.store import SQLiteStore

__all__ = [
    "JOURNAL_RETENTION",
    "JOURNAL_STATUSES",
    "MIGRATIONS",
    "SQLiteStore",
    "StoreError",
    "StoreUnavailable",
]
