"""The Redis store's reads and takes of failed sends: what an operator lists, retries
and discards (chatkernel.core.outbound.failed). Each is one script: a take checks and
deletes in one atomic step, so two consoles retrying one entry take it once."""

from __future__ import annotations

from typing import Any

from chatkernel.core.store.base import OutboxEntry
from chatkernel.core.store.redis import lua
from chatkernel.core.store.redis.keys import _bound
from chatkernel.core.store.redis.outbox import RedisOutbox

__all__ = ["RedisFailedSends"]

#: The newest failures (``failed`` and ``unknown``) a list or count looks through.
SCAN_LIMIT = 5_000

#: ARGV: prefix, limit, scan limit. The newest `failed` entries' rows, with `u`.
FAILED_LIST = r"""
local limit = tonumber(ARGV[2])
local ids = {}
for _, id in ipairs(redis.call('ZREVRANGE', P .. 'o:failures', 0, tonumber(ARGV[3]) - 1)) do
  if #ids >= limit then
    break
  end
  if redis.call('HGET', P .. 'o:' .. id, 's') == 'failed' then
    ids[#ids + 1] = id
  end
end
return outbox_rows(ids, 'u')
"""

#: ARGV: prefix, since, scan limit. How many `failed` entries changed at or after since.
FAILED_COUNT = r"""
local since = tonumber(ARGV[2])
local count = 0
for _, id in ipairs(redis.call('ZREVRANGE', P .. 'o:failures', 0, tonumber(ARGV[3]) - 1)) do
  local row = redis.call('HMGET', P .. 'o:' .. id, 's', 'u')
  if row[1] == 'failed' and tonumber(row[2]) >= since then
    count = count + 1
  end
end
return count
"""

#: ARGV: prefix, ids... The rows of those still `failed`, each deleted with its indexes.
FAILED_TAKE = r"""
local taken = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local key = P .. 'o:' .. id
  local row = redis.call('HMGET', key, 's', 'a', 'r', 'pid')
  if row[1] == 'failed' then
    local rows = outbox_rows({id})
    for _, value in ipairs(rows) do
      taken[#taken + 1] = value
    end
    redis.call('ZREM', P .. 'o:reply:' .. row[3], id)
    if row[4] and redis.call('HGET', P .. 'o:platform:' .. row[2], row[4]) == id then
      redis.call('HDEL', P .. 'o:platform:' .. row[2], row[4])
    end
    redis.call('DEL', key)
    redis.call('ZREM', P .. 'o:finished', id)
    redis.call('ZREM', P .. 'o:changed', id)
    redis.call('ZREM', P .. 'o:failures', id)
  end
end
return taken
"""


class RedisFailedSends(RedisOutbox):
    """``failed`` outbox entries: listed newest first, counted, taken out once."""

    def _failed_script(self, name: str, what: str, args: list[Any]) -> Any:
        scripts = self._scripts
        if name not in scripts:  # registered on first use: the store's own stay as they are
            scripts[name] = self._redis.register_script(lua.PRELUDE + globals()[name])
        return self._script(name, what, args)

    async def outbox_failed(self, *, limit: int = 100) -> list[tuple[OutboxEntry, float]]:
        flat = await self._failed_script("FAILED_LIST", "outbox_failed",
                                         [int(limit), SCAN_LIMIT])
        entries = self._outbox_entries(flat, extra=1)
        return [(entry, float(flat[i * 12 + 11])) for i, entry in enumerate(entries)]

    async def outbox_failed_count(self, since: float) -> int:
        return int(await self._failed_script("FAILED_COUNT", "outbox_failed_count",
                                             [_bound(since), SCAN_LIMIT]))

    async def outbox_take_failed(self, entry_ids: list[int]) -> list[OutboxEntry]:
        self._writable("outbox_take_failed")
        if not entry_ids:
            return []
        flat = await self._failed_script("FAILED_TAKE", "outbox_take_failed",
                                         [int(entry_id) for entry_id in entry_ids])
        return self._outbox_entries(flat)
