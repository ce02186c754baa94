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
each caller waits for its own answer (:mod:`chatkernel.core.store.redis_batch`); the
other methods are a request each.

Atomicity. Each operation that touches several keys (a journal entry with its
dedupe key, indexes and inbox entry; an outbox entry with its indexes and the
journal entries it finishes; a fenced write with its lease check) is one Lua
script, or one write of the batch script (:mod:`chatkernel.core.store.redis_lua`),
so it is made whole or not at all, and other clients never see half of it. The
scripts build their keys from the prefix they are given: the store needs one Redis
server (or a primary), not a Redis Cluster. docs/scale-out.md ("Keys and round
trips") has the key layout and the round trips of each operation.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.parse
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from chatkernel.sdk.errors import ConfigError
from chatkernel.sdk.models import InboundMessage, Route
from chatkernel.core.store import redis_lua as lua
from chatkernel.core.store.redis_batch import PendingWrite, WriteBatches
from chatkernel.core.store.base import (
    JOURNAL_STATUSES,
    OUTBOX_STATUSES,
    HeartbeatState,
    JournalEntry,
    LogEntry,
    LogRow,
    OutboxEntry,
    RecentSend,
    SessionRecord,
    Store,
    StoreError,
    StoreUnavailable,
    TranscriptEntry,
)
from chatkernel.sdk.codec import (
    decode_json,
    decode_message,
    decode_payload,
    decode_route,
    encode_json,
    encode_message,
    encode_payload,
    encode_route,
)
from chatkernel.core.store.shared import INBOX_LENGTH, LeaseLost, SharedState, account_lease

if TYPE_CHECKING:
    from chatkernel.core.config import KernelConfig

__all__ = ["DEFAULT_URL", "SCHEMA_VERSION", "RedisStore", "safe_url"]

T = TypeVar("T")

DEFAULT_URL = "redis://127.0.0.1:6379/0"
#: The layout of the keys (docs/scale-out.md); a server holding a higher one is refused.
SCHEMA_VERSION = 1
#: Connections to the server at most; more calls at once wait for one.
MAX_CONNECTIONS = 32
#: Entries a prune script deletes at once: other clients' commands run between batches.
PRUNE_BATCH = 1000

_INSTALL = "pip install 'chatkernel[redis]'"
#: The outbox marks a fenced account's lease must allow: those that send, or would
#: have a payload sent (``pending`` over a new owner's ``unknown`` would send it twice).
FENCED_MARKS = frozenset({"sending", "sent", "pending"})


def safe_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and logs)."""
    try:
        parts = urllib.parse.urlsplit(url)
        password = parts.password
    except ValueError:
        return "<an unparsable URL>"
    if password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _part(text: str) -> str:
    """A key part that is not the last one: ``%`` and ``:`` escaped, so parts never run
    into each other (a channel name has neither, and keeps its own text)."""
    if ":" in text or "%" in text:
        return text.replace("%", "%25").replace(":", "%3A")
    return text


def _acct(channel: str, account: str) -> str:
    """The key part of an account: ``<channel>:<account>``."""
    return f"{_part(channel)}:{account}"


def _num(value: float) -> str:
    """A number as exact text for a script (``repr`` keeps every digit of a float)."""
    return repr(float(value))


def _bound(value: float) -> str:
    if value == float("inf"):
        return "+inf"
    if value == float("-inf"):
        return "-inf"
    return _num(value)


#: The batch ops whose first field is their fence set (see _send_batch).
_FENCED_OPS = frozenset({"a", "m"})


#: The batch's writes as one JSON array of strings (redis_lua.BATCH decodes it with the
#: server's ``cjson``: one C call on each side instead of a field at a time). Text is
#: kept as it is (``ensure_ascii`` off, lone surrogates passed through as the
#: connection's ``surrogatepass`` encodes them), so the server stores the bytes it
#: stored before.
_encode_writes = json.JSONEncoder(ensure_ascii=False, check_circular=False,
                                  separators=(",", ":")).encode


def _inbox_item(fields: dict[str, str]) -> JournalEntry | OutboxEntry:
    """An inbox stream's entry: a journaled message, or a payload queued elsewhere."""
    if "o" in fields:
        return OutboxEntry(
            id=int(fields["o"]), reply_id=fields["r"], session_key=fields["k"],
            session_id=fields["i"], channel=fields["c"], account=fields["n"],
            route=decode_route(fields["ro"]), payload=decode_payload(fields["p"]),
            status=fields["s"], error=None, created_at=float(fields["t"]))
    return JournalEntry(seq=int(fields["seq"]), message=decode_message(fields["m"]),
                        status="received", received_at=float(fields["t"]))


class RedisStore(Store, SharedState):
    """The store on a Redis server (see the module's docstring).

    ``RedisStore(config)`` uses ``[store] url`` (default ``redis://127.0.0.1:6379/0``)
    and ``[store] prefix`` (default ``chatkernel:``: every key starts with it);
    ``RedisStore.at(url, prefix=...)`` takes them directly. ``read_only=True`` writes
    nothing, creates nothing, and refuses to open a prefix that holds no state yet.
    ``async with store:`` opens and closes it.
    """

    name = "redis"

    def __init__(self, config: KernelConfig | None = None, *, url: str | None = None,
                 prefix: str | None = None, read_only: bool = False,
                 socket_timeout: float = 10.0, connect_timeout: float = 5.0) -> None:
        try:
            import redis.asyncio as aioredis
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff
        except ImportError:
            raise ConfigError(f"the redis store backend needs the redis package: {_INSTALL}",
                              key="store.backend") from None
        if url is None:
            url = (config.store.url if config is not None else None) or DEFAULT_URL
        if prefix is None:
            prefix = config.store.prefix if config is not None else "chatkernel:"
        if not prefix:
            raise ValueError("the key prefix must not be empty")
        self.url = url
        self.prefix = prefix
        self.read_only = read_only
        self.safe_url = safe_url(url)
        self._password = urllib.parse.urlsplit(url).password if "@" in url else None
        options: dict[str, Any] = dict(
            decode_responses=True,
            # Lone surrogates (a platform's broken emoji escape) are kept, not refused.
            encoding_errors="surrogatepass",
            retry=Retry(NoBackoff(), 0),  # never: see "No command is retried"
            socket_connect_timeout=connect_timeout,
            health_check_interval=0,
        )
        try:
            # A bounded pool that waits for a free connection: a burst of turns and
            # sends queues for it rather than failing ("Too many connections").
            self._redis = aioredis.Redis(connection_pool=aioredis.BlockingConnectionPool
                                         .from_url(url, max_connections=MAX_CONNECTIONS,
                                                   timeout=socket_timeout,
                                                   socket_timeout=socket_timeout,
                                                   **options))
            # XREAD BLOCK waits on connections of its own, with no socket timeout (the
            # block is the timeout), so it never holds up the other calls.
            self._blocking = aioredis.Redis.from_url(url, socket_timeout=None, **options)
        except ValueError as exc:
            raise ConfigError(f"not a Redis URL ({self._scrub(str(exc))}); expected "
                              "redis://[:password@]host[:port][/db], rediss://... or "
                              "unix:///path", key="store.url") from None
        self._open = False
        # account -> (lease name, token) of the accounts this store's writes are fenced for.
        self._fences: dict[tuple[str, str], tuple[str, str]] = {}
        self._mark_fences: list[str] = []  # the same, flat, as OUTBOX_MARK takes them
        self._to_owners = False  # see hand_sends_to_owners
        #: Requests sent to the server so far (a command, a script or a transaction each).
        self.round_trips = 0
        register = self._redis.register_script
        self._scripts = {name: register(lua.PRELUDE + getattr(lua, name)) for name in (
            "OPEN", "BATCH", "JOURNAL_UNFINISHED", "JOURNAL_PRUNE", "OUTBOX_BY_PLATFORM_ID",
            "OUTBOX_ROWS", "OUTBOX_FAILURES", "OUTBOX_RECENT", "OUTBOX_PRUNE", "CURSOR_FENCED",
            "SESSIONS", "LOG_READ", "TRANSCRIPT_ADD", "LEASE_ACQUIRE", "LEASE_RENEW",
            "LEASES", "INSTANCES")}
        # The hot path's writes, batched per loop turn (see redis_batch).
        self._batches = WriteBatches(self._send_batch, name=f"redis at {self.safe_url}")

    @classmethod
    def at(cls, url: str, **options: Any) -> RedisStore:
        """A store on the server at ``url``, without a config."""
        return cls(url=url, **options)

    def __repr__(self) -> str:
        state = "open" if self._open else "closed"
        return f"<RedisStore {self.safe_url} prefix={self.prefix!r} {state}>"

    async def __aenter__(self) -> RedisStore:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def shared(self) -> SharedState:
        return self

    # -- calls ------------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        return text.replace(self._password, "***") if self._password else text

    def _error(self, exc: Exception, what: str) -> StoreError:
        detail = self._scrub(str(exc)) or type(exc).__name__
        return StoreError(f"redis at {self.safe_url}: {what} failed: {detail}")

    def _report(self, error: Exception | None) -> None:
        if self.on_commit is not None:
            try:
                self.on_commit(error)
            except Exception:  # the observer's bug must not fail the write
                import logging

                logging.getLogger("chatkernel.store").exception("the commit observer failed")

    def _lease_lost(self, what: str, lease: str | None) -> LeaseLost:
        return LeaseLost(f"{what} refused: this process no longer holds the lease {lease} "
                         "with the token it was fenced with", lease=lease)

    def _failure(self, exc: Exception, what: str) -> StoreError:
        """The error a caller gets for a failed request: :class:`LeaseLost` for a refused
        fenced write, else a StoreError (told to ``on_commit`` too)."""
        from redis.exceptions import ResponseError

        if isinstance(exc, ResponseError) and str(exc).startswith("LEASE_LOST"):
            # Redis appends " script: <sha>, on @user_script:<line>." to the error.
            return self._lease_lost(what, str(exc).partition(" ")[2].split(" script: ")[0]
                                    or None)
        error = self._error(exc, what)
        self._report(error)
        return error

    async def _call(self, what: str, call: Awaitable[T]) -> T:
        """Await one command, script or transaction: a failure becomes a StoreError
        (told to ``on_commit`` too), a refused fenced write :class:`LeaseLost`."""
        from redis.exceptions import RedisError

        self.round_trips += 1
        try:
            result = await call
        except (RedisError, OSError) as exc:
            await self._connection_failed(exc)
            raise self._failure(exc, what) from None
        self._report(None)
        return result

    async def _connection_failed(self, exc: Exception) -> None:
        """After a broken connection, the idle ones are closed too: they are most likely
        broken as well (a restarted server), and redis-py finds that out only by failing
        a command on each, so they connect again on their next use instead."""
        from redis.exceptions import ConnectionError as RedisConnectionError

        if isinstance(exc, (RedisConnectionError, OSError)):
            with contextlib.suppress(Exception):
                await self._redis.connection_pool.disconnect(inuse_connections=False)

    def _batched(self, op: str, what: str, args: list[Any], *,
                 fences: list[str] | None = None) -> Awaitable[Any]:
        """A write that goes with the next batch (see redis_batch): the op's answer."""
        return self._batches.submit(op, what, args, fences=fences)

    async def _send_batch(self, batch: list[PendingWrite], *, again: bool = False) -> None:
        """Send a batch of writes as one BATCH script call and settle each write's future.

        Each write keeps the fences it was made with: the batch carries each distinct
        set of them once (in the common case, one), and a fenced op names its set.
        """
        from redis.exceptions import NoScriptError, RedisError

        sets: dict[int, int] = {}  # id of a fence list -> its index in the batch
        fence_args: list[Any] = []
        parts: list[str] = []
        for write in batch:
            fields = write.args
            if write.op in _FENCED_OPS:
                index = 0
                if write.fences:
                    index = sets.get(id(write.fences), 0)
                    if not index:
                        index = sets[id(write.fences)] = len(sets) + 1
                        fence_args += (len(write.fences) // 3, *write.fences)
                fields = [index, *fields]
            parts += (write.op, str(len(fields)))
            parts += map(str, fields)
        now = _num(time.time())
        self.round_trips += 1
        try:
            answers = await self._redis.evalsha(self._scripts["BATCH"].sha, 0, self.prefix,
                                                now, INBOX_LENGTH, _encode_writes(parts), len(sets),
                                                *fence_args)
        except NoScriptError:
            # Not run at all (a restarted server lost its scripts): sending the batch
            # again after loading them is no retry of a write.
            if not again and await self._load_scripts(batch):
                await self._send_batch(batch, again=True)
                return
            answers = None
            failure: Exception = NoScriptError("the server lost the store's scripts")
        except (RedisError, OSError) as exc:
            await self._connection_failed(exc)
            answers, failure = None, exc
        if answers is None:
            # Whether the server made any of them is unknown: every caller is told.
            for write in batch:
                write.fail(self._error(failure, write.what))
            self._report(self._error(failure, "a write batch"))
            return
        error = None
        for write, answer in zip(batch, answers):
            if isinstance(answer, str):  # no op answers text but these
                kind, _, detail = answer.partition(" ")
                if kind == "LEASE_LOST":
                    write.fail(self._lease_lost(write.what, detail))
                    continue
                error = StoreError(f"redis at {self.safe_url}: {write.what} failed: "
                                   f"{self._scrub(detail)}")
                write.fail(error)
            elif write.op == "a":
                write.resolve((answer, float(now)))  # outbox_add wants its created_at
            else:
                write.resolve(answer)
        self._report(error)

    async def _load_scripts(self, batch: list[PendingWrite]) -> bool:
        """Load the scripts again; False (each write failed) when that fails."""
        from redis.exceptions import RedisError

        pipe = self._redis.pipeline(transaction=False)
        for script in self._scripts.values():
            pipe.script_load(script.script)
        self.round_trips += 1
        try:
            await pipe.execute()
        except (RedisError, OSError) as exc:
            await self._connection_failed(exc)
            for write in batch:
                write.fail(self._failure(exc, write.what))
            return False
        return True

    def _script(self, name: str, what: str, args: Sequence[Any]) -> Awaitable[Any]:
        self._check_open()
        return self._call(what, self._scripts[name](args=[self.prefix, *args]))

    def _check_open(self) -> None:
        if not self._open:
            raise StoreError(f"redis at {self.safe_url}: the store is not open "
                             "(await store.open() first)")

    def _writable(self, what: str) -> None:
        self._check_open()
        if self.read_only:
            raise StoreError(f"redis at {self.safe_url}: {what}: the store is open read-only")

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and check the key layout (writing its version, unless read-only).
        Idempotent."""
        if self._open:
            return
        from redis.exceptions import RedisError

        # One round trip: every script loaded (a call then never meets NOSCRIPT, which
        # costs two more), then the layout checked.
        pipe = self._redis.pipeline(transaction=False)
        for script in self._scripts.values():
            pipe.script_load(script.script)
        pipe.evalsha(self._scripts["OPEN"].sha, 0, self.prefix, SCHEMA_VERSION,
                     "1" if self.read_only else "0")
        try:
            *_, stored = await pipe.execute()
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(
                f"cannot reach the Redis server at {self.safe_url}: "
                f"{self._scrub(str(exc)) or type(exc).__name__}. Check that it runs and "
                "that [store] url points at it.") from None
        if stored is None:
            raise StoreError(f"redis at {self.safe_url}: no state under the prefix "
                             f"{self.prefix!r} yet")
        if int(stored) > SCHEMA_VERSION:
            raise StoreUnavailable(
                f"redis at {self.safe_url}: the keys under {self.prefix!r} have layout "
                f"version {stored}, but this chatkernel knows versions up to "
                f"{SCHEMA_VERSION}: they were written by a newer chatkernel. Upgrade "
                "chatkernel, or set [store] prefix to another prefix.")
        self._open = True

    async def close(self) -> None:
        """Send the writes still queued, then close the connections. Idempotent."""
        self._open = False
        await self._batches.drain()
        await self._redis.aclose()
        await self._blocking.aclose()

    async def flush(self) -> None:
        """Wait until the writes queued so far have been answered (each caller of a write
        waits for its own anyway)."""
        await self._batches.drain()

    # -- inbound journal ---------------------------------------------------------------------

    async def journal_inbound(self, message: InboundMessage) -> int | None:
        (seq,) = await self.journal_inbound_many([message])
        return seq

    async def journal_inbound_many(self, messages: list[InboundMessage]) -> list[int | None]:
        self._writable("journal_inbound")
        if not messages:
            return []
        args: list[Any] = [len(messages)]
        for message in messages:
            args += (_acct(message.channel, message.account), message.message_id,
                     encode_json([message.channel, message.account]), encode_message(message))
        seqs = await self._batched("j", "journal_inbound", args)
        return [int(seq) or None for seq in seqs]

    async def set_journal_status(self, seq: int, status: str) -> None:
        """Advance a journaled message; KeyError for a seq not in the journal."""
        if status not in JOURNAL_STATUSES:
            raise ValueError(f"journal status must be one of {', '.join(JOURNAL_STATUSES)}, "
                             f"not {status!r}")
        self._writable("set_journal_status")
        if not await self._batched("js", "set_journal_status", [int(seq), status]):
            raise KeyError(f"no journal entry with seq {seq}")

    async def unfinished_inbound(self, *, account: tuple[str, str] | None = None
                                 ) -> list[JournalEntry]:
        suffix = "" if account is None else ":" + _acct(*account)
        flat = await self._script("JOURNAL_UNFINISHED", "unfinished_inbound", [suffix])
        return [JournalEntry(seq=int(flat[i]), message=decode_message(flat[i + 1]),
                             status=flat[i + 2], received_at=float(flat[i + 3]))
                for i in range(0, len(flat), 4)]

    async def prune_journal(self, older_than: float, *, batch: int = PRUNE_BATCH) -> int:
        """Delete ``done`` and ``rejected`` entries received before ``older_than``, with
        their dedupe keys, ``batch`` at a time; returns how many."""
        self._writable("prune_journal")
        total = 0
        while True:
            count = await self._script("JOURNAL_PRUNE", "prune_journal",
                                       [_bound(older_than), batch])
            total += count
            if count < batch:
                return total

    # -- outbox -------------------------------------------------------------------------------

    async def outbox_add(self, entries: list[OutboxEntry], *,
                         finish_journal: list[int] | tuple[int, ...] = ()) -> list[int]:
        self._writable("outbox_add")
        if not entries and not finish_journal:
            return []
        args: list[Any] = [len(entries), len(finish_journal)]
        for entry in entries:
            if entry.status not in OUTBOX_STATUSES:
                raise ValueError(f"outbox status must be one of {', '.join(OUTBOX_STATUSES)}, "
                                 f"not {entry.status!r}")
            # An account this store is not fenced for is another process's to send (see
            # hand_sends_to_owners): its owner reads it from the inbox.
            to_inbox = self._to_owners and (entry.channel, entry.account) not in self._fences
            args += (_acct(entry.channel, entry.account), entry.reply_id, entry.session_key,
                     entry.session_id, entry.channel, entry.account, encode_route(entry.route),
                     encode_payload(entry.payload), entry.status, encode_json(entry.error),
                     "1" if to_inbox else "0")
        args += (int(seq) for seq in finish_journal)
        # Each entry's account is checked against the store's fences (see fence).
        answer, now = await self._batched("a", "outbox_add", args, fences=self._mark_fences)
        ids = [int(entry_id) for entry_id in answer]
        for entry, entry_id in zip(entries, ids):
            entry.id = entry_id
            entry.created_at = now
        return ids

    async def outbox_mark(self, entry_id: int, status: str, error: str | None = None, *,
                          durable: bool = False) -> None:
        """Move an entry on (on the server when this returns, ``durable`` or not); a
        ``sending`` or ``sent`` mark of a fenced account checks its lease."""
        if status not in OUTBOX_STATUSES:
            raise ValueError(f"outbox status must be one of {', '.join(OUTBOX_STATUSES)}, "
                             f"not {status!r}")
        self._writable("outbox_mark")
        found = await self._batched("m", "outbox_mark", [int(entry_id), status,
                                                         encode_json(error)],
                                    fences=self._mark_fences if status in FENCED_MARKS else None)
        # As in SQLite: a coalesced mark (sending / sent, no error) of a missing row
        # changes nothing; any other status of one is an error.
        if not found and (status not in ("sending", "sent") or error is not None):
            raise KeyError(f"no outbox entry with id {entry_id}")

    async def outbox_sent_as(self, entry_id: int, platform_id: str) -> None:
        self._writable("outbox_sent_as")
        await self._batched("s", "outbox_sent_as", [int(entry_id), platform_id])

    async def outbox_by_platform_id(self, channel: str, account: str,
                                    platform_id: str) -> OutboxEntry | None:
        rows = await self._script("OUTBOX_BY_PLATFORM_ID", "outbox_by_platform_id",
                                  [_acct(channel, account), platform_id])
        entries = self._outbox_entries(rows)
        return entries[0] if entries else None

    @staticmethod
    def _outbox_entries(flat: list[Any], extra: int = 0) -> list[OutboxEntry]:
        width = 11 + extra
        return [OutboxEntry(id=int(flat[i]), reply_id=flat[i + 1], session_key=flat[i + 2],
                            session_id=flat[i + 3], channel=flat[i + 4], account=flat[i + 5],
                            route=decode_route(flat[i + 6]), payload=decode_payload(flat[i + 7]),
                            status=flat[i + 8], error=decode_json(flat[i + 9]),
                            created_at=float(flat[i + 10]))
                for i in range(0, len(flat), width)]

    async def outbox_reply(self, reply_id: str) -> list[OutboxEntry]:
        return self._outbox_entries(await self._script("OUTBOX_ROWS", "outbox_reply",
                                                       ["o:reply:" + reply_id]))

    async def outbox_unfinished(self, *, account: tuple[str, str] | None = None
                                ) -> list[OutboxEntry]:
        key = "o:unfinished" if account is None else "o:unfinished:" + _acct(*account)
        return self._outbox_entries(await self._script("OUTBOX_ROWS", "outbox_unfinished",
                                                       [key]))

    async def prune_outbox(self, older_than: float, *, batch: int = PRUNE_BATCH) -> int:
        self._writable("prune_outbox")
        total = 0
        while True:
            count = await self._script("OUTBOX_PRUNE", "prune_outbox",
                                       [_bound(older_than), batch])
            total += count
            if count < batch:
                return total

    async def outbox_recent_sends(self, since: float, *,
                                  queued_since: float) -> list[RecentSend]:
        flat = await self._script("OUTBOX_RECENT", "outbox_recent_sends",
                                  [_bound(since), _bound(queued_since)])
        return [RecentSend(flat[i], flat[i + 1], decode_route(flat[i + 2]), flat[i + 3],
                           float(flat[i + 4]))
                for i in range(0, len(flat), 5)]

    async def outbox_failures(self, limit: int = 10) -> list[tuple[OutboxEntry, float]]:
        flat = await self._script("OUTBOX_FAILURES", "outbox_failures", [int(limit)])
        entries = self._outbox_entries(flat, extra=1)
        return [(entry, float(flat[i * 12 + 11])) for i, entry in enumerate(entries)]

    async def account_activity(self) -> dict[tuple[str, str], dict[str, float]]:
        self._check_open()
        pipe = self._redis.pipeline(transaction=True)
        for key in ("accounts", "activity:in", "activity:sent"):
            pipe.hgetall(self.prefix + key)
        accounts, inbound, sent = await self._call("account_activity", pipe.execute())
        activity: dict[tuple[str, str], dict[str, float]] = {}
        for acct, who in accounts.items():
            channel, account = decode_json(who)
            times = {}
            if acct in inbound:
                times["last_inbound_at"] = float(inbound[acct])
            if acct in sent:
                times["last_sent_at"] = float(sent[acct])
            activity[channel, account] = times
        return activity

    # -- platform cursors ---------------------------------------------------------------------

    async def get_cursor(self, channel: str, account: str) -> str | None:
        self._check_open()
        return await self._call("get_cursor", self._redis.hget(self.prefix + "cursors",
                                                               _acct(channel, account)))

    async def set_cursor(self, channel: str, account: str, cursor: str) -> None:
        self._writable("set_cursor")
        fence = self._fences.get((channel, account))
        if fence is None:
            await self._call("set_cursor", self._redis.hset(
                self.prefix + "cursors", _acct(channel, account), cursor))
        else:
            await self._script("CURSOR_FENCED", "set_cursor",
                               [_acct(channel, account), cursor, *fence])

    # -- sessions and routes ------------------------------------------------------------------

    @staticmethod
    def _session(text: str) -> SessionRecord:
        data = decode_json(text)
        return SessionRecord(key=data["key"], session_id=data["session_id"],
                             channel=data["channel"], account=data["account"],
                             chat_id=data["chat_id"], thread_id=data.get("thread_id"),
                             created_at=data["created_at"],
                             last_active_at=data["last_active_at"],
                             settings=data.get("settings") or {},
                             agent=data.get("agent") or "default")

    async def get_session(self, key: str) -> SessionRecord | None:
        self._check_open()
        text = await self._call("get_session", self._redis.hget(self.prefix + "sessions", key))
        return None if text is None else self._session(text)

    async def save_session(self, record: SessionRecord) -> None:
        self._writable("save_session")
        settings = encode_json(record.settings or {}, what="SessionRecord.settings")
        text = encode_json({
            "key": record.key, "session_id": record.session_id, "channel": record.channel,
            "account": record.account, "chat_id": record.chat_id,
            "thread_id": record.thread_id, "created_at": float(record.created_at),
            "last_active_at": float(record.last_active_at), "agent": record.agent,
            "settings": None,
        }, what="SessionRecord")
        # The settings' text spliced in rather than encoded twice.
        text = text[:-len('null}')] + settings + "}"
        pipe = self._redis.pipeline(transaction=True)
        pipe.hset(self.prefix + "sessions", record.key, text)
        pipe.zadd(self.prefix + "sessions:active", {record.key: float(record.last_active_at)})
        await self._call("save_session", pipe.execute())

    async def list_sessions(self, active_since: float | None = None) -> list[SessionRecord]:
        rows = await self._script("SESSIONS", "list_sessions", [
            "-inf" if active_since is None else _bound(active_since)])
        records = [self._session(text) for text in rows if text is not None]
        records.sort(key=lambda record: (-record.last_active_at, record.key))
        return records

    async def set_route(self, session_key: str, route: Route) -> None:
        self._writable("set_route")
        await self._call("set_route", self._redis.hset(self.prefix + "routes", session_key,
                                                       encode_route(route)))

    async def get_route(self, session_key: str) -> Route | None:
        self._check_open()
        text = await self._call("get_route", self._redis.hget(self.prefix + "routes",
                                                              session_key))
        return None if text is None else decode_route(text)

    # -- per-account state ---------------------------------------------------------------------

    async def get_account_state(self, channel: str, account: str, key: str) -> Any:
        self._check_open()
        text = await self._call("get_account_state", self._redis.hget(
            f"{self.prefix}state:{_acct(channel, account)}", key))
        return None if text is None else decode_json(text)

    async def set_account_state(self, channel: str, account: str, key: str,
                                value: Any) -> None:
        """Store a JSON value; ``None`` deletes the key (reading it gives None either way)."""
        self._writable("set_account_state")
        name = f"{self.prefix}state:{_acct(channel, account)}"
        if value is None:
            await self._call("set_account_state", self._redis.hdel(name, key))
            return
        text = encode_json(value, what=f"account state {key!r}")
        await self._call("set_account_state", self._redis.hset(name, key, text))

    # -- session logs ---------------------------------------------------------------------------

    async def append_log(self, session_key: str, session_id: str, role: str, text: str,
                         meta: dict[str, Any] | None = None) -> int:
        (seq,) = await self.append_logs(session_key, session_id, [(role, text, meta)])
        return seq

    async def append_logs(self, session_key: str, session_id: str,
                          entries: Sequence[LogRow]) -> list[int]:
        self._writable("append_log")
        if not entries:
            return []
        now = time.time()
        sid = encode_json(session_id)
        args: list[Any] = [session_key, len(entries)]
        for role, text, meta in entries:
            args += (sid, encode_json(role),
                     encode_json([text, now, meta or None], what="log meta"))
        last = int(await self._batched("l", "append_log", args))
        return list(range(last - len(entries) + 1, last + 1))

    async def read_log(self, session_key: str, *, session_id: str | None = None,
                       limit: int | None = None, roles: tuple[str, ...] | None = None,
                       before_seq: int | None = None) -> list[LogEntry]:
        """The newest ``limit`` matching entries, oldest first.

        ``limit=None``: all of them; ``roles=()``: none. Filters (``session_id``,
        ``roles``, ``before_seq``) apply before the limit.
        """
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, not {limit}")
        if isinstance(roles, str):
            roles = (roles,)
        if limit == 0 or (roles is not None and not roles):
            return []
        role_args = [encode_json(role) for role in roles or ()]
        rows = await self._script("LOG_READ", "read_log", [
            session_key, "+inf" if before_seq is None else f"({int(before_seq)}",
            -1 if limit is None else limit,
            "" if session_id is None else encode_json(session_id), len(role_args),
            *role_args])
        entries = []
        for row in reversed(rows):
            sid, role, seq, body = row.split("\n", 3)
            text, ts, meta = decode_json(body)
            entries.append(LogEntry(seq=int(seq), session_key=session_key,
                                    session_id=decode_json(sid), role=decode_json(role),
                                    text=text, ts=ts, meta=meta or {}))
        return entries

    # -- transcripts ---------------------------------------------------------------------------

    @staticmethod
    def _chat(channel: str, account: str, chat_id: str) -> str:
        return f"{_part(channel)}:{_part(account)}:{chat_id}"

    @staticmethod
    def _transcript_entry(row: str) -> TranscriptEntry:
        entry_id, body = row.split("\n", 1)
        role, text, media, ts, client_id = decode_json(body)
        return TranscriptEntry(id=int(entry_id), role=role, text=text, media=media or [],
                               ts=ts, client_id=client_id)

    async def transcript_add(self, channel: str, account: str, chat_id: str, role: str,
                             text: str, media: list[dict[str, Any]] | None = None, *,
                             client_id: str | None = None) -> TranscriptEntry | None:
        self._writable("transcript_add")
        body = encode_json([role, text, media or None, time.time(), client_id],
                           what="transcript media")
        row = await self._script("TRANSCRIPT_ADD", "transcript_add", [
            self._chat(channel, account, chat_id), client_id or "", body])
        return None if row is None else self._transcript_entry(row)

    async def transcript_read(self, channel: str, account: str, chat_id: str, *,
                              after: int = 0, limit: int | None = None
                              ) -> list[TranscriptEntry]:
        self._check_open()
        key = f"{self.prefix}t:{self._chat(channel, account, chat_id)}"
        if limit is None:
            call = self._redis.zrevrangebyscore(key, "+inf", f"({int(after)}")
        else:
            call = self._redis.zrevrangebyscore(key, "+inf", f"({int(after)}", start=0,
                                                num=int(limit))
        rows = await self._call("transcript_read", call)
        return [self._transcript_entry(row) for row in reversed(rows)]

    async def transcript_find(self, channel: str, account: str, chat_id: str,
                              client_id: str) -> TranscriptEntry | None:
        self._check_open()
        row = await self._call("transcript_find", self._redis.hget(
            f"{self.prefix}t:client:{self._chat(channel, account, chat_id)}", client_id))
        return None if row is None else self._transcript_entry(row)

    # -- heartbeats ------------------------------------------------------------------------------

    @staticmethod
    def _heartbeat(text: str) -> HeartbeatState:
        data = decode_json(text)
        return HeartbeatState(id=data["id"], session_key=data.get("session_key"),
                              settings=data.get("settings") or {},
                              paused=bool(data.get("paused")), anchor_at=data.get("anchor_at"),
                              last_run_at=data.get("last_run_at"),
                              last_outcome=data.get("last_outcome"),
                              task_runs=data.get("task_runs") or {},
                              wake_texts=data.get("wake_texts") or [])

    async def get_heartbeat(self, heartbeat_id: str) -> HeartbeatState | None:
        self._check_open()
        text = await self._call("get_heartbeat", self._redis.hget(self.prefix + "heartbeats",
                                                                  heartbeat_id))
        return None if text is None else self._heartbeat(text)

    async def save_heartbeat(self, state: HeartbeatState) -> None:
        self._writable("save_heartbeat")
        text = encode_json({
            "id": state.id, "session_key": state.session_key,
            "settings": state.settings or {}, "paused": bool(state.paused),
            "anchor_at": state.anchor_at, "last_run_at": state.last_run_at,
            "last_outcome": state.last_outcome, "task_runs": state.task_runs or {},
            "wake_texts": list(state.wake_texts),
        }, what="HeartbeatState")
        await self._call("save_heartbeat", self._redis.hset(self.prefix + "heartbeats",
                                                            state.id, text))

    async def delete_heartbeat(self, heartbeat_id: str) -> bool:
        self._writable("delete_heartbeat")
        return bool(await self._call("delete_heartbeat", self._redis.hdel(
            self.prefix + "heartbeats", heartbeat_id)))

    async def list_heartbeats(self) -> list[HeartbeatState]:
        self._check_open()
        rows = await self._call("list_heartbeats",
                                self._redis.hgetall(self.prefix + "heartbeats"))
        return [self._heartbeat(rows[key]) for key in sorted(rows)]

    # -- SharedState: leases and fencing ---------------------------------------------------------

    @staticmethod
    def _ms(ttl: float) -> int:
        if not ttl > 0:
            raise ValueError(f"a lease's ttl must be > 0 seconds, not {ttl!r}")
        return max(1, round(ttl * 1000))

    async def acquire_lease(self, name: str, holder: str, ttl: float) -> int | None:
        self._writable("acquire_lease")
        token = await self._script("LEASE_ACQUIRE", f"acquire_lease {name!r}",
                                   [name, holder, self._ms(ttl)])
        return None if token is None else int(token)

    async def renew_lease(self, name: str, holder: str, token: int, ttl: float) -> bool:
        self._writable("renew_lease")
        return bool(await self._script("LEASE_RENEW", f"renew_lease {name!r}",
                                       [name, holder, int(token), self._ms(ttl)]))

    async def release_lease(self, name: str, holder: str, token: int) -> None:
        self._writable("release_lease")
        await self._script("LEASE_RENEW", f"release_lease {name!r}",
                           [name, holder, int(token), ""])

    async def leases(self) -> dict[str, tuple[str, int, float]]:
        flat = await self._script("LEASES", "leases", ["0" if self.read_only else "1"])
        # PTTL -1 (no expiry) cannot happen for a lease; read it as no time left.
        return {flat[i]: (flat[i + 1], int(flat[i + 2]), max(int(flat[i + 3]), 0) / 1000)
                for i in range(0, len(flat), 4)}

    def hand_sends_to_owners(self) -> None:
        self._to_owners = True

    def fence(self, channel: str, account: str, token: int | None) -> None:
        if token is None:
            self._fences.pop((channel, account), None)
        else:
            self._fences[channel, account] = (account_lease(channel, account), str(int(token)))
        self._mark_fences = [part for (fenced_channel, fenced_account), fence
                             in self._fences.items()
                             for part in (_acct(fenced_channel, fenced_account), *fence)]

    # -- SharedState: inbox streams -----------------------------------------------------------

    def _inbox(self, channel: str, account: str) -> str:
        return f"{self.prefix}inbox:{_acct(channel, account)}"

    async def inbox_position(self, channel: str, account: str) -> str:
        self._check_open()
        last = await self._call("inbox_position", self._redis.xrevrange(
            self._inbox(channel, account), count=1))
        return last[0][0] if last else "0-0"

    async def read_inbox(self, positions: dict[tuple[str, str], str], timeout: float
                         ) -> list[tuple[tuple[str, str], str, JournalEntry | OutboxEntry]]:
        self._check_open()
        if not positions:
            return []
        streams = {self._inbox(*account): position for account, position in positions.items()}
        accounts = {self._inbox(*account): account for account in positions}
        block = max(1, round(timeout * 1000)) if timeout > 0 else None
        answer = await self._call("read_inbox", self._blocking.xread(streams, block=block))
        found: list[tuple[tuple[str, str], str, JournalEntry | OutboxEntry]] = []
        for stream, items in answer or ():  # each stream in its order
            account = accounts[stream]
            for entry_id, fields in items:
                found.append((account, entry_id, _inbox_item(fields)))
        return found

    # -- SharedState: instances -------------------------------------------------------------------

    async def register_instance(self, instance_id: str, info: dict[str, Any],
                                ttl: float) -> None:
        self._writable("register_instance")
        text = encode_json(info, what="instance info")
        pipe = self._redis.pipeline(transaction=True)
        pipe.set(f"{self.prefix}instance:{instance_id}", text, px=self._ms(ttl))
        pipe.sadd(self.prefix + "instances", instance_id)
        await self._call("register_instance", pipe.execute())

    async def unregister_instance(self, instance_id: str) -> None:
        self._writable("unregister_instance")
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(f"{self.prefix}instance:{instance_id}")
        pipe.srem(self.prefix + "instances", instance_id)
        await self._call("unregister_instance", pipe.execute())

    async def instances(self) -> dict[str, dict[str, Any]]:
        flat = await self._script("INSTANCES", "instances", ["0" if self.read_only else "1"])
        return {flat[i]: decode_json(flat[i + 1]) for i in range(0, len(flat), 2)}

    async def ping(self) -> float:
        self._check_open()
        start = time.perf_counter()
        await self._call("ping", self._redis.ping())
        return time.perf_counter() - start
