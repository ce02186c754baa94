"""The Redis store: :class:`RedisStore` and its state; what it does is in the classes it
is made of (see :mod:`chatkernel.core.store.redis`)."""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING, Any

import chatkernel.core.store.redis.lua as lua
from chatkernel.core.store.base import Store
from chatkernel.core.store.redis.access import RedisAccess
from chatkernel.core.store.redis.batch import WriteBatches
from chatkernel.core.store.redis.coordination import RedisCoordination
from chatkernel.core.store.redis.jobs import RedisJobs
from chatkernel.core.store.redis.failed import RedisFailedSends
from chatkernel.core.store.redis.journal import RedisJournal
from chatkernel.core.store.redis.outbox import RedisOutbox
from chatkernel.core.store.redis.state import RedisState
from chatkernel.core.store.shared import SharedState
from chatkernel.sdk.errors import ConfigError

if TYPE_CHECKING:
    from chatkernel.core.config import KernelConfig

__all__ = ["DEFAULT_URL", "MAX_CONNECTIONS", "RedisStore", "safe_url"]

DEFAULT_URL = "redis://127.0.0.1:6379/0"
#: Connections to the server at most; more calls at once wait for one.
MAX_CONNECTIONS = 32

_INSTALL = "pip install 'chatkernel[redis]'"


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


class RedisStore(RedisJournal, RedisFailedSends, RedisOutbox, RedisState, RedisAccess,
                 RedisJobs, RedisCoordination, Store, SharedState):
    """The store on a Redis server (see :mod:`chatkernel.core.store.redis`).

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
            "LEASES", "INSTANCES", "PAIRING_REQUEST", "PAIRING_LIST", "PAIRING_RESOLVE",
            "PAIRING_PRUNE")}
        # The hot path's writes, batched per loop turn (see batch.py).
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
