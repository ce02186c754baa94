"""The SQLite store's reads and takes of failed sends: what an operator lists, retries
and discards (chatkernel.core.outbound.failed)."""

from __future__ import annotations

from chatkernel.core.store.base import OutboxEntry
from chatkernel.core.store.sqlite.outbox import SQLiteOutbox

__all__ = ["SQLiteFailedSends"]

#: How far back (seconds before ``since``) a count of failures looks at queued entries:
#: a payload may wait for its platform up to a day before it fails.
QUEUED_BEFORE_FAILING = 86_400.0


class SQLiteFailedSends(SQLiteOutbox):
    """``failed`` outbox entries: listed newest first, counted, taken out once."""

    async def outbox_failed(self, *, limit: int = 100) -> list[tuple[OutboxEntry, float]]:
        self._write_marks()
        rows = self._run(f"SELECT {self._OUTBOX_COLUMNS}, updated_at FROM outbox"
                         " WHERE status = 'failed' ORDER BY id DESC LIMIT ?",
                         (limit,)).fetchall()
        entries = self._outbox_entries([row[:-1] for row in rows])
        return [(entry, row[-1]) for entry, row in zip(entries, rows)]

    async def outbox_failed_count(self, since: float) -> int:
        self._write_marks()
        # Ids grow with creation: a failure since `since` was queued at most a day
        # before it, so the older rows are skipped by id, not read.
        first = self._first_outbox_id(since - QUEUED_BEFORE_FAILING)
        (count,) = self._run("SELECT COUNT(*) FROM outbox WHERE id >= ? AND status = 'failed'"
                             " AND updated_at >= ?", (first, since)).fetchone()
        return count

    async def outbox_take_failed(self, entry_ids: list[int]) -> list[OutboxEntry]:
        self._write_marks()
        taken: list[OutboxEntry] = []
        for entry_id in entry_ids:  # no await in between: one transaction
            rows = self._run(f"SELECT {self._OUTBOX_COLUMNS} FROM outbox"
                             " WHERE id = ? AND status = 'failed'", (entry_id,)).fetchall()
            if rows:
                self._write("DELETE FROM outbox WHERE id = ?", (entry_id,))
                taken += self._outbox_entries(rows)
        await self._committed()
        return taken
