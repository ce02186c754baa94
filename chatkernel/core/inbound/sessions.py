"""Sessions and reply routes, cached in memory in front of the store.

The caches are bounded: at most ``cache_size`` sessions (and as many routes)
stay in memory, the least recently used beyond that are dropped, and the store,
which has everything, answers for them when they are next needed. So memory
follows the configuration (``[sessions] cache_size``), not the number of chats
ever seen. A session still in use (a turn running, messages queued, replies
being sent: the kernel's ``in_use``) is never dropped, because those hold its
record and read its settings (the send policy, ``/queue``) from the cache.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable

from chatkernel.sdk.models import InboundMessage, Route, Session
from chatkernel.core.store.base import SessionRecord, Store


TOUCH_PERSIST_SECONDS = 30.0
#: Sessions (and routes) kept in memory when the config says nothing.
DEFAULT_CACHE_SIZE = 10_000


def new_session_id() -> str:
    return uuid.uuid4().hex[:16]


def route_for(message: InboundMessage) -> Route:
    """The reply route an inbound message implies (with its per-message credentials)."""
    return Route(
        channel=message.channel,
        account=message.account,
        chat_id=message.chat_id,
        thread_id=message.thread_id,
        reply_to=message.message_id if message.is_group else None,
        is_group=message.is_group,
        extra=dict(message.route_extra),
    )


def routes_to(route: Route, message: InboundMessage) -> bool:
    """Whether ``route`` is the one :func:`route_for` makes of ``message`` (checked
    without making it: a chat's route rarely changes, and this runs per message)."""
    return (route.chat_id == message.chat_id and route.thread_id == message.thread_id
            and route.is_group == message.is_group
            and route.reply_to == (message.message_id if message.is_group else None)
            and route.extra == message.route_extra
            and route.channel == message.channel and route.account == message.account)


class Sessions:
    """Resolves sessions by {channel, account, chat, thread} and keeps their routes fresh."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.time, *,
                 cache_size: int = DEFAULT_CACHE_SIZE,
                 in_use: Callable[[str], bool] = lambda key: False) -> None:
        if cache_size < 1:
            raise ValueError(f"cache_size must be at least 1, got {cache_size}")
        self._store = store
        self._clock = clock
        self.cache_size = cache_size
        self._in_use = in_use
        # Least recently used first.
        self._records: OrderedDict[str, SessionRecord] = OrderedDict()
        self._routes: OrderedDict[str, Route] = OrderedDict()
        self._persisted: dict[str, float] = {}  # last_active_at as last written, per record

    def __len__(self) -> int:
        """Sessions in memory."""
        return len(self._records)

    @property
    def cached_routes(self) -> int:
        """Routes in memory."""
        return len(self._routes)

    async def resolve(self, message: InboundMessage, agent: str = "default") -> SessionRecord:
        """The session of a message with ``agent``, created on first contact (a chat
        bound to another agent is another session: history stays with its agent)."""
        key = Session.make_key(message.channel, message.account, message.chat_id,
                               message.thread_id, agent)
        record = await self.get(key)
        if record is None:
            now = self._clock()
            record = SessionRecord(key=key, session_id=new_session_id(), channel=message.channel,
                                   account=message.account, chat_id=message.chat_id,
                                   thread_id=message.thread_id, created_at=now,
                                   last_active_at=now, agent=agent)
            cached = await self._remember(record)  # cached before its first await
            if cached is not record:  # another task made the session meanwhile: theirs
                return cached
            await self._store.save_session(record)
        return record

    async def open(self, key: str, route: Route, agent: str = "default") -> SessionRecord:
        """The session of ``key`` (``agent``'s), created for a proactive send to ``route``
        when there is none yet (so it is listed, and its log holds what became of it)."""
        record = await self.get(key)
        if record is None:
            now = self._clock()
            record = SessionRecord(key=key, session_id=new_session_id(), channel=route.channel,
                                   account=route.account, chat_id=route.chat_id,
                                   thread_id=route.thread_id, created_at=now,
                                   last_active_at=now, agent=agent)
            self._records[key] = record
            await self._store.save_session(record)
        if await self.route(key) is None:
            await self.set_route(key, route)
        return record

    def cached(self, key: str) -> SessionRecord | None:
        """The session if it is in memory (no store access: for hot paths)."""
        return self._records.get(key)

    async def get(self, key: str) -> SessionRecord | None:
        record = self._records.get(key)
        if record is not None:
            self._records.move_to_end(key)
            return record
        record = await self._store.get_session(key)
        return None if record is None else await self._remember(record)

    def forget(self, prefix: str) -> int:
        """Drop the cached records and routes whose key starts with ``prefix`` (another
        instance may have changed them: core/runtime/cluster.py); returns how many records."""
        keys = [key for key in self._records if key.startswith(prefix)]
        for key in keys:
            del self._records[key]
            self._persisted.pop(key, None)
        for key in [key for key in self._routes if key.startswith(prefix)]:
            del self._routes[key]
        return len(keys)

    async def _remember(self, record: SessionRecord) -> SessionRecord:
        """Cache a record just read or saved (the one already cached, if another task
        cached it meanwhile), then drop the least recently used beyond the cap."""
        known = self._records.get(record.key)
        if known is not None:
            return known
        self._records[record.key] = record
        self._persisted[record.key] = record.last_active_at
        if len(self._records) > self.cache_size:
            await self._evict()
        return record

    async def _evict(self) -> None:
        """Drop least recently used records down to the cap, except those in use. A
        record whose activity the store has not heard of for ``TOUCH_PERSIST_SECONDS``
        is written as it goes (what :meth:`touch` would have written)."""
        unsaved: list[SessionRecord] = []
        for _ in range(len(self._records)):
            if len(self._records) <= self.cache_size:
                break
            key, record = next(iter(self._records.items()))
            if self._in_use(key):
                self._records.move_to_end(key)
                continue
            del self._records[key]
            persisted = self._persisted.pop(key, record.last_active_at)
            if record.last_active_at - persisted >= TOUCH_PERSIST_SECONDS:
                unsaved.append(record)
        for record in unsaved:
            await self._store.save_session(record)

    async def touch(self, record: SessionRecord) -> None:
        """Mark user activity (heartbeat-only turns do not call this).

        The time is persisted at most every ``TOUCH_PERSIST_SECONDS``: activity
        is reported in minutes, and a write per message would cost more than it says.
        """
        now = self._clock()
        persisted = record.last_active_at
        record.last_active_at = now
        if now - self._persisted.get(record.key, persisted) >= TOUCH_PERSIST_SECONDS:
            if record.key in self._records:
                self._persisted[record.key] = now
            await self._store.save_session(record)

    async def reset(self, record: SessionRecord) -> str:
        """``/new``: a fresh session id (and so a fresh agent history) under the same key."""
        record.session_id = new_session_id()
        record.created_at = self._clock()
        await self._store.save_session(record)
        return record.session_id

    async def update_settings(self, record: SessionRecord, **changes: object) -> None:
        for name, value in changes.items():
            if value is None:
                record.settings.pop(name, None)
            else:
                record.settings[name] = value
        await self._store.save_session(record)

    async def refresh_route(self, key: str, message: InboundMessage) -> Route:
        """Refresh the reply route from this message; written only when it changed."""
        current = self._routes.get(key)
        if current is not None and routes_to(current, message):
            self._routes.move_to_end(key)
            return current
        route = route_for(message)
        self._remember_route(key, route)
        await self._store.set_route(key, route)
        return route

    async def route(self, key: str) -> Route | None:
        """The current route, read at send time so a reply never goes somewhere stale."""
        route = self._routes.get(key)
        if route is not None:
            self._routes.move_to_end(key)
            return route
        route = await self._store.get_route(key)
        if route is not None:
            self._remember_route(key, route)
        return route

    async def set_route(self, key: str, route: Route) -> None:
        """Replace a route (e.g. a group migrated to a supergroup)."""
        self._remember_route(key, route)
        await self._store.set_route(key, route)

    def _remember_route(self, key: str, route: Route) -> None:
        # Routes are values (replaced, never changed in place): any can go, the store
        # gives the same one back.
        self._routes[key] = route
        self._routes.move_to_end(key)
        while len(self._routes) > self.cache_size:
            self._routes.popitem(last=False)
