"""The Redis store's calls to the server: each a command, script, transaction or batch,
its failure a :class:`~chatkernel.core.store.base.StoreError` naming the server (never
its password); and opening (the key layout checked), flushing and closing."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from chatkernel.core.store.base import StoreError, StoreUnavailable
from chatkernel.core.store.redis.batch import PendingWrite, WriteBatches
from chatkernel.core.store.redis.keys import _num
from chatkernel.core.store.shared import INBOX_LENGTH, LeaseLost

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.commands.core import AsyncScript

__all__ = ["SCHEMA_VERSION", "RedisConnection"]

T = TypeVar("T")

#: The layout of the keys (docs/scale-out.md); a server holding a higher one is refused.
SCHEMA_VERSION = 1

#: The batch ops whose first field is their fence set (see _send_batch).
_FENCED_OPS = frozenset({"a", "m"})


#: The batch's writes as one JSON array of strings (lua.BATCH decodes it with the
#: server's ``cjson``: one C call on each side instead of a field at a time). Text is
#: kept as it is (``ensure_ascii`` off, lone surrogates passed through as the
#: connection's ``surrogatepass`` encodes them), so the server stores the bytes it
#: stored before.
_encode_writes = json.JSONEncoder(ensure_ascii=False, check_circular=False,
                                  separators=(",", ":")).encode


class RedisConnection:
    """The calls of ``RedisStore`` (whose ``__init__`` sets the state below): a request
    each, or a write that goes with the next batch."""

    safe_url: str
    prefix: str
    read_only: bool
    round_trips: int
    on_commit: Callable[[Exception | None], None] | None
    _password: str | None
    _redis: aioredis.Redis
    _blocking: aioredis.Redis
    _open: bool
    _fences: dict[tuple[str, str], tuple[str, str]]
    _mark_fences: list[str]
    _to_owners: bool
    _scripts: dict[str, AsyncScript]
    _batches: WriteBatches

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
        """A write that goes with the next batch (see batch.py): the op's answer."""
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
