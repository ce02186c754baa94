"""What the webhook echo benchmarks share (whatsapp_echo, slack_events_echo,
webchat_echo): an aiohttp app served on a free port of 127.0.0.1, percentiles, the
group-committed SQLite journal of their journaled floors and the line that sets
chatkernel beside them."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import statistics
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web


@contextlib.asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    """Serve ``app`` on a free port of 127.0.0.1; yields its base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def print_beside(results: dict[str, list[dict[str, Any]]], name: str, other: str) -> None:
    """``name``'s rate and CPU a message as ratios to ``other``'s, when both ran."""
    if name in results and other in results:
        rate, cpu = ({n: statistics.median(r[key] for r in results[n]) for n in (name, other)}
                     for key in ("rate", "cpu_us"))
        print(f"\n{name} / {other}: {rate[name] / rate[other]:.2f}× the rate, "
              f"{cpu[name] / cpu[other]:.2f}× the CPU a message")


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values``, which are sorted (nan for none)."""
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(q * len(values)))]


class GroupJournal:
    """The durable state of a journaled floor, hand-written: one SQLite database in WAL
    mode with ``synchronous = NORMAL`` (the kernel's default), where every write made in
    one turn of the event loop joins one transaction, committed once on the next turn.

    The least the kernel's guarantees cost (journaled before the 2xx, deduplicated, no
    double answer), without the kernel: its sessions, lanes, turns, session log, delivery
    statuses and indicators are not here. A floor :meth:`add`\ s each message, awaits
    :meth:`durable` before its 2xx, :meth:`claim`\ s each send before it goes out (as the
    kernel's outbox does, so a crash cannot send it twice) and marks it :meth:`sent`.
    ``schema``: the floor's tables beyond the journal and the outbox."""

    SCHEMA = """
    CREATE TABLE journal (id TEXT PRIMARY KEY, text TEXT, done INTEGER DEFAULT 0);
    CREATE TABLE outbox (id INTEGER PRIMARY KEY, message TEXT, sent INTEGER DEFAULT 0);
    """

    def __init__(self, path: Path, schema: str = "") -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.executescript(self.SCHEMA + schema)
        self.commits = 0
        self._next: asyncio.Future[None] | None = None

    def write(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """Run one statement in the transaction of this turn (opening it)."""
        if self._next is None:
            loop = asyncio.get_running_loop()
            self.db.execute("BEGIN")
            self._next = loop.create_future()
            loop.call_soon(self._commit)
        return self.db.execute(sql, params)

    def add(self, message_id: str, text: str) -> bool:
        """Journal a message; False when its id is there already (a redelivery)."""
        return bool(self.write("INSERT OR IGNORE INTO journal (id, text) VALUES (?, ?)",
                               (message_id, text)).rowcount)

    async def claim(self, message_id: str) -> int:
        """Claim the answer to a message, durably, before it is sent; its claim's id."""
        claim = self.write("INSERT INTO outbox (message) VALUES (?)", (message_id,)).lastrowid
        await self.durable()
        assert claim is not None
        return claim

    def sent(self, claim: int, message_id: str) -> None:
        """The claimed answer went out: the claim and its message are done."""
        self.write("UPDATE outbox SET sent = 1 WHERE id = ?", (claim,))
        self.write("UPDATE journal SET done = 1 WHERE id = ?", (message_id,))

    def durable(self) -> asyncio.Future[None]:
        """Done once every write made so far is committed (at once when none waits)."""
        if self._next is None:
            done = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        return self._next

    def journaled(self) -> int:
        """How many messages the journal holds."""
        return self.db.execute("SELECT COUNT(*) FROM journal").fetchone()[0]

    def _commit(self) -> None:
        pending, self._next = self._next, None
        assert pending is not None
        self.db.execute("COMMIT")
        self.commits += 1
        pending.set_result(None)

    def close(self) -> None:
        self.db.close()
