"""How :class:`~chatkernel.core.store.sqlite.SQLiteStore` writes: one connection, group
commit, coalesced status marks, a failed commit tried again, WAL checkpoints.

Group commit. A write runs at once inside an open transaction whose commit
is scheduled for the next turn of the event loop (and, while inbound messages
arrive together, no sooner than ``COMMIT_INTERVAL`` after the previous one), so
every write made by every task meanwhile shares one commit, and writes are
committed in the order they were made. "Together" means the last commit carried
several journal entries: a lone message (one webhook request at a time) is never
held back, since waiting for company that is not coming only adds the interval
to every request's answer. The writes a caller's durability rests on —
``journal_inbound`` (a receive loop advances its platform cursor after it) and
``set_cursor`` — return only after their commit; the others return at once and
are committed with it (``await store.flush()`` waits for everything written so
far). Because commits keep order, a message's journal entry is always durable
before anything written about it later. The store therefore needs the asyncio
event loop, which is what the kernel runs on; ``bench/pipeline.py`` measures
the pipeline with it.

Coalesced marks. The status marks every message gets — the outbox entry's
``sending`` and ``sent``, the journal entry's ``done`` — are kept in memory
and written at the commit that would have carried them, as one ``UPDATE ...
WHERE id IN (...)`` per status: an update per row cost as much again as the
row's insert. They are still committed in the same transaction as the writes
made before them (``done`` with its reply's outbox rows), a durable mark
(``sending``) still returns only once committed, and every read or delete of
those tables, and any other status for the same row, writes or drops them
first. A mark for a row that does not exist is not an error then: it changes
nothing.

A failed commit (a full disk) loses nothing the gateway has acted on. The
store keeps the statements of the open transaction; when its COMMIT fails
(SQLite then rolls the whole transaction back), it writes them again into a
new transaction and tries the commit again, :data:`RETRY_FIRST` later, then
doubling up to :data:`RETRY_MAX`, until it goes through: the writes keep their
order and their ids, and whoever waits for them (a durable ``sending`` mark, a
``flush``) waits on. Only the journal entries of the failed transaction are
dropped and raised to their callers: a message not journaled is not
acknowledged, so its platform sends it again (see ``journal_inbound``).
``on_commit`` is told of every failed attempt and of the commit that went
through, so health is red exactly while commits fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from chatkernel.core.store.base import StoreError

__all__ = ["CHECKPOINT_INTERVAL", "COMMIT_INTERVAL", "GroupCommit", "RETRY_FIRST",
           "RETRY_MAX"]

log = logging.getLogger("chatkernel.store")

#: The shortest time between two commits while messages arrive together (the last
#: commit carried several journal entries): under load more writes share a commit; a
#: lone message and an idle store still commit on the next loop turn.
COMMIT_INTERVAL: float = 0.002
#: Seconds between WAL checkpoints. SQLite's automatic checkpoint would run inside a
#: commit, on the event loop, fsync included (stalls of 10+ ms under load); the store
#: turns it off and checkpoints from a thread of its own instead, at most this often.
CHECKPOINT_INTERVAL: float = 1.0
#: The most ids one coalesced mark statement takes (see "Coalesced marks").
MARKS_PER_STATEMENT = 64
#: How soon, then how seldom at most, a failed commit is tried again (doubling).
RETRY_FIRST: float = 0.1
RETRY_MAX: float = 2.0


def _chunks(marks: set[int]) -> Iterator[tuple[int, ...]]:
    """The marked ids, sorted, in chunks of at most MARKS_PER_STATEMENT, each padded
    to a power of two by repeating its last id (``IN`` ignores the repeats): a
    handful of statement texts, so the connection's statement cache keeps them all
    prepared."""
    ids = sorted(marks)
    for start in range(0, len(ids), MARKS_PER_STATEMENT):
        chunk = ids[start:start + MARKS_PER_STATEMENT]
        size = 1 << (len(chunk) - 1).bit_length()
        yield (*chunk, *[chunk[-1]] * (size - len(chunk)))


def _placeholders(count: int) -> str:
    return ", ".join("?" * count)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _clean(params: Sequence[Any]) -> tuple[Any, ...]:
    """Parameters with lone surrogates replaced by U+FFFD: SQLite stores only valid UTF-8."""
    return tuple(_SURROGATE.sub("\ufffd", p) if isinstance(p, str) else p for p in params)


class GroupCommit:
    """The connection and its writes, mixed into ``SQLiteStore`` (whose ``__init__``
    sets the state below): every write goes through :meth:`_write` into the open
    transaction, whose commit is scheduled (see the module's docstring)."""

    path: Path
    memory: bool
    read_only: bool
    busy_timeout: float
    on_commit: Callable[[Exception | None], None] | None
    commits: int
    _conn: sqlite3.Connection | None
    _writer: sqlite3.Cursor | None
    _commit_scheduled: bool
    _commit_loop: asyncio.AbstractEventLoop | None
    _commit_handle: asyncio.Handle | None
    _commit_waiters: list[asyncio.Future[None]]
    _journal_waiters: list[asyncio.Future[None]]
    _commit_callbacks: list[Callable[[Exception | None], None]]
    _last_commit: float
    _last_shared: bool
    _journaled: int
    _committed_now: bool
    _sending_marks: set[int]
    _sent_marks: set[int]
    _done_marks: set[int]
    _redo: list[tuple[str, Sequence[Any]]]
    _commit_failures: int
    _failing_since: float | None
    _checkpointer: sqlite3.Connection | None
    _checkpointing: asyncio.Future[None] | None
    _last_checkpoint: float
    #: The journal's INSERT (journal.py): a failed commit drops its statements.
    _JOURNAL_INSERT: ClassVar[str]

    @property
    def _db(self) -> sqlite3.Connection:
        conn = self._conn
        if conn is None:
            raise self._not_open()
        return conn

    def _not_open(self) -> StoreError:
        return StoreError(f"{self.path}: the store is not open (await store.open() first)")

    def _run(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """Execute one statement (autocommit: a write is committed when this returns)."""
        db = self._db
        try:
            return db.execute(sql, params)
        except UnicodeEncodeError:  # a lone surrogate: store U+FFFD rather than fail
            return db.execute(sql, _clean(params))

    def _write(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """Execute a write in the shared transaction and make sure its commit is scheduled.

        Every write goes through one cursor (a new one per statement cost a good
        part of a small insert): read its ``lastrowid`` / ``rowcount`` at once.
        """
        cursor = self._writer
        if cursor is None:  # made on the first write after open; close() drops it
            cursor = self._writer = self._db.cursor()
        db = self._conn  # open: it has a writer
        if not db.in_transaction:  # type: ignore[union-attr]
            db.execute("BEGIN")  # type: ignore[union-attr]
        try:
            try:
                cursor.execute(sql, params)
            except UnicodeEncodeError:  # a lone surrogate: store U+FFFD rather than fail
                params = _clean(params)
                cursor.execute(sql, params)
        except sqlite3.Error as exc:
            # This statement failed (its caller is told). SQLite may have rolled back
            # the whole transaction with it (a full disk): write the others again.
            if not db.in_transaction and self._redo:  # type: ignore[union-attr]
                self._rewrite(self._redo, StoreError(f"{self.path}: {exc}"))
            raise
        self._redo.append((sql, params))
        if not self._commit_scheduled:
            self._schedule_commit()
        return cursor

    def _schedule_commit(self) -> None:
        """Schedule the commit of the open transaction (callers check it is not yet)."""
        loop = self._commit_loop = asyncio.get_running_loop()
        self._commit_scheduled = True
        # Idle or one message at a time: commit on the next loop turn. Messages
        # arriving together (the last commit carried several journal entries): at
        # most one commit per COMMIT_INTERVAL, so more writes share each (a commit
        # costs more than several inserts). PostgreSQL's commit_delay waits only
        # with commit_siblings active for the same reason. (The gateway's own
        # writes, its marks and outbox rows, follow the messages: they are no sign
        # of company to come.)
        delay = self._last_commit + COMMIT_INTERVAL - loop.time()
        if delay > 0 and self._last_shared:
            self._commit_handle = loop.call_later(delay, self._commit)
        else:
            self._commit_handle = loop.call_soon(self._commit)

    def _mark(self, marks: set[int], row_id: int) -> None:
        """Coalesce a ``sending`` / ``sent`` / ``done`` mark into the next commit."""
        if self._conn is None:  # a closed store refuses now, not at the commit
            raise self._not_open()
        marks.add(row_id)
        if not self._commit_scheduled:
            self._schedule_commit()

    def _write_marks(self) -> None:
        """Write the coalesced marks in the open transaction (before a commit or a read)."""
        sending, sent, done = self._sending_marks, self._sent_marks, self._done_marks
        if not sending and not sent and not done:
            return
        self._sending_marks, self._sent_marks, self._done_marks = set(), set(), set()
        db = self._db
        if not db.in_transaction:
            db.execute("BEGIN")
        now = time.time()
        redo = self._redo
        try:
            for status, marked in (("sending", sending), ("sent", sent)):
                for ids in _chunks(marked):
                    sql = (f"UPDATE outbox SET status = '{status}', error = NULL,"
                           f" updated_at = ? WHERE id IN ({_placeholders(len(ids))})")
                    db.execute(sql, (now, *ids))
                    redo.append((sql, (now, *ids)))
            for seqs in _chunks(done):
                sql = ("UPDATE inbound_journal SET status = 'done'"
                       f" WHERE seq IN ({_placeholders(len(seqs))})")
                db.execute(sql, seqs)
                redo.append((sql, seqs))
        except sqlite3.Error as exc:
            # Kept for the next commit (writing a mark twice changes nothing); the
            # transaction's other writes are made again if SQLite rolled them back.
            self._sending_marks |= sending
            self._sent_marks |= sent
            self._done_marks |= done
            if not db.in_transaction and self._redo:
                self._rewrite(self._redo, StoreError(f"{self.path}: {exc}"))
            raise StoreError(f"{self.path}: writing status marks failed: {exc}") from exc

    async def _committed(self) -> None:
        """Wait for the commit of this loop turn's writes (scheduled once per turn)."""
        if self._commit_scheduled:
            await self._commit_waiter()

    def _commit_waiter(self) -> asyncio.Future[None]:
        """A future of the caller's own, done at the scheduled commit (callers check that
        one is). (The hot paths await it inline rather than through _committed: a
        coroutine less a wait.)"""
        waiter = self._commit_loop.create_future()  # type: ignore[union-attr]
        self._commit_waiters.append(waiter)
        return waiter

    def _journal_waiter(self) -> asyncio.Future[None]:
        """A waiter for the commit of journal entries (callers check that one is
        scheduled): a failed commit drops them, and raises to this waiter rather than
        trying them again (see journal_inbound)."""
        waiter = self._commit_loop.create_future()  # type: ignore[union-attr]
        self._journal_waiters.append(waiter)
        return waiter

    def after_commit(self, callback: Callable[[Exception | None], None]) -> None:
        if self._commit_scheduled:
            self._commit_callbacks.append(callback)
        else:  # nothing waits for a commit: what was written is committed
            callback(None)

    async def flush(self) -> None:
        """Wait until everything written so far is committed."""
        if self._commit_scheduled:
            await self._commit_waiter()

    async def checkpoint(self) -> None:
        """Checkpoint the WAL now, in a thread (the store also does it by itself)."""
        if self._checkpointing is None:
            self._start_checkpoint(asyncio.get_running_loop())
        if self._checkpointing is not None:
            await asyncio.shield(self._checkpointing)

    def _start_checkpoint(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.memory or self.read_only or self._conn is None:
            return
        self._last_checkpoint = loop.time()
        future = self._checkpointing = loop.run_in_executor(None, self._checkpoint_now)
        future.add_done_callback(self._checkpoint_done)

    def _checkpoint_now(self) -> None:
        """In a worker thread: copy the WAL into the database (PASSIVE: never waits
        for readers or writers, so the event loop's writes go on meanwhile)."""
        conn = self._checkpointer
        if conn is None:
            conn = self._checkpointer = sqlite3.connect(
                self.path, timeout=self.busy_timeout, isolation_level=None,
                check_same_thread=False)
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _checkpoint_done(self, future: asyncio.Future[None]) -> None:
        self._checkpointing = None
        if not future.cancelled() and future.exception() is not None:
            # Not fatal: the WAL keeps everything; the next checkpoint tries again.
            log.warning("%s: WAL checkpoint failed: %s", self.path, future.exception())

    def _commit(self, *, final: bool = False) -> StoreError | None:
        """Commit the open transaction and wake its waiters; returns the error, if any.

        A failed commit is tried again later with the same writes, save its journal
        entries (see the module's docstring); ``final`` (closing): it is not, and
        what it carried is lost, which is logged.
        """
        scheduled, self._commit_scheduled = self._commit_scheduled, False
        handle, self._commit_handle = self._commit_handle, None
        if handle is not None:
            handle.cancel()  # a commit now makes the one scheduled needless
        journal_waiters, self._journal_waiters = self._journal_waiters, []
        loop = asyncio.get_running_loop()  # always called on the loop: a callback or a method
        if scheduled:
            self._last_commit = loop.time()
        if self._journaled:  # a commit of the gateway's own writes alone tells nothing
            self._last_shared, self._journaled = self._journaled > 1, 0
        conn = self._conn
        error = None
        try:
            if conn is not None:
                self._write_marks()
            if conn is not None and conn.in_transaction:
                conn.execute("COMMIT")
                self.commits += 1
        except (sqlite3.Error, StoreError) as exc:
            with contextlib.suppress(sqlite3.Error):
                if conn.in_transaction:  # type: ignore[union-attr]
                    conn.execute("ROLLBACK")  # type: ignore[union-attr]
            reason = exc.__cause__ if isinstance(exc, StoreError) else exc
            error = StoreError(f"{self.path}: commit failed: {reason}")
        redo, self._redo = self._redo, []
        if error is not None:
            self._commit_failures += 1
            if self._failing_since is None:
                self._failing_since = loop.time()
            # The journal entries are refused (their callers are told, their platforms
            # send them again); everything else is written again and kept waiting.
            kept = [statement for statement in redo if statement[0] is not self._JOURNAL_INSERT]
            if final:
                if kept:
                    log.error("%s: closed with %d write(s) not committed (%s): they are "
                              "lost", self.path, len(kept), error)
            elif kept and self._rewrite(kept, error):
                if self._commit_failures == 1:
                    log.warning("%s; its %d write(s) are kept and the commit is tried again "
                                "until it goes through", error, len(kept))
                self._retry_commit(loop)
        elif self._failing_since is not None:
            log.info("%s: committed after %d failed attempt(s) over %.1f s; nothing was "
                     "lost", self.path, self._commit_failures, loop.time() - self._failing_since)
            self._commit_failures, self._failing_since = 0, None
        for waiter in journal_waiters:
            if not waiter.done():
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(error)
        if self.on_commit is not None and (scheduled or error is not None):
            try:
                self.on_commit(error)
            except Exception:
                log.exception("%s: the commit observer failed", self.path)
        if error is not None and self._commit_scheduled:
            return error  # its other waiters wait for the commit tried again
        waiters, self._commit_waiters = self._commit_waiters, []
        callbacks, self._commit_callbacks = self._commit_callbacks, []
        for callback in callbacks:
            try:
                callback(error)
            except Exception:  # one caller's bug must not keep the others waiting
                log.exception("%s: a commit callback failed", self.path)
        for waiter in waiters:
            if not waiter.done():  # a cancelled waiter's future is done already
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(error)
        if error is None and scheduled and self._checkpointing is None and \
                self._last_commit - self._last_checkpoint >= CHECKPOINT_INTERVAL:
            self._start_checkpoint(loop)
        return error

    def _rewrite(self, statements: list[tuple[str, Sequence[Any]]], error: StoreError) -> bool:
        """Write ``statements`` again in a new transaction, after SQLite rolled theirs
        back; they keep their effects and ids (the database is as before them). False
        if they could not be: they are lost then, which is logged."""
        db = self._db
        try:
            if not db.in_transaction:
                db.execute("BEGIN")
            for sql, params in statements:
                db.execute(sql, params)
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                if db.in_transaction:
                    db.execute("ROLLBACK")
            self._redo = []
            log.error("%s: %d write(s) could not be made again after %s (%s): they are "
                      "lost", self.path, len(statements), error, exc)
            return False
        self._redo = list(statements)
        return True

    def _retry_commit(self, loop: asyncio.AbstractEventLoop) -> None:
        """Schedule the next attempt of a failed commit, with backoff."""
        delay = min(RETRY_FIRST * 2 ** (self._commit_failures - 1), RETRY_MAX)
        self._commit_scheduled, self._commit_loop = True, loop
        self._commit_handle = loop.call_later(delay, self._commit)
