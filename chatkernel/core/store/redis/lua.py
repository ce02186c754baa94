"""The Lua scripts of the Redis store (:mod:`chatkernel.core.store.redis`).

Each script runs atomically on the server, so a change that spans several
keys (a journal entry, its dedupe key, its indexes and its inbox entry) is
made whole or not at all, in one round trip. ``ARGV[1]`` is always the key
prefix; keys are built inside the scripts, which is why the store needs one
Redis server (or a primary), not a Redis Cluster.

The hot path's writes are functions of one script, :data:`BATCH`, which makes a
batch of them (:mod:`chatkernel.core.store.redis.batch`) in one call, each write
checked and made by itself.

Numbers come in as the text Python wrote (``repr`` of a float): scripts store
that text, never ``tostring`` of a Lua number (14 digits only), so times read
back exactly.
"""

from __future__ import annotations

#: Functions every script may use.
PRELUDE = r"""
local P = ARGV[1]

-- Fencing: fail the script, having written nothing, unless the lease `name` is
-- held with `token`.
local function check_fence(name, token)
  local held = redis.call('HGET', P .. 'lease:' .. name, 'token')
  if held ~= token then
    error({err = 'LEASE_LOST ' .. name})
  end
end

local OUTBOX_FIELDS = {'r', 'k', 'i', 'c', 'n', 'ro', 'p', 's', 'e', 't'}

-- Rows of outbox entries, flat: id then OUTBOX_FIELDS (then `extra`, if given),
-- for the ids that still exist.
local function outbox_rows(ids, extra)
  local out = {}
  for _, id in ipairs(ids) do
    local row
    if extra then
      row = redis.call('HMGET', P .. 'o:' .. id, 'r', 'k', 'i', 'c', 'n', 'ro', 'p', 's', 'e',
                       't', extra)
    else
      row = redis.call('HMGET', P .. 'o:' .. id, 'r', 'k', 'i', 'c', 'n', 'ro', 'p', 's', 'e',
                       't')
    end
    if row[1] then
      out[#out + 1] = id
      for _, value in ipairs(row) do
        out[#out + 1] = value
      end
    end
  end
  return out
end

"""

#: ARGV: prefix, schema version, read_only ("1"/"0"). Returns the stored schema version
#: (false when there is none and read_only).
OPEN = r"""
if ARGV[3] == '0' then
  redis.call('HSETNX', P .. 'meta', 'schema', ARGV[2])
end
return redis.call('HGET', P .. 'meta', 'schema')
"""

#: ARGV: prefix, the unfinished index's key suffix ('' or ':' .. acct). Returns flat
#: seq, message, status, received_at.
JOURNAL_UNFINISHED = r"""
local out = {}
for _, seq in ipairs(redis.call('ZRANGE', P .. 'j:unfinished' .. ARGV[2], 0, -1)) do
  local row = redis.call('HMGET', P .. 'j:' .. seq, 'm', 's', 't')
  if row[1] then
    out[#out + 1] = seq
    out[#out + 1] = row[1]
    out[#out + 1] = row[2]
    out[#out + 1] = row[3]
  end
end
return out
"""

#: ARGV: prefix, older_than (exclusive), batch. Returns how many were deleted.
JOURNAL_PRUNE = r"""
local seqs = redis.call('ZRANGEBYSCORE', P .. 'j:finished', '-inf', '(' .. ARGV[2],
                        'LIMIT', 0, tonumber(ARGV[3]))
for _, seq in ipairs(seqs) do
  local key = P .. 'j:' .. seq
  local row = redis.call('HMGET', key, 'a', 'id')
  if row[1] then
    local dedupe = P .. 'j:dedupe:' .. row[1]
    if redis.call('HGET', dedupe, row[2]) == seq then
      redis.call('HDEL', dedupe, row[2])
    end
    redis.call('DEL', key)
  end
  redis.call('ZREM', P .. 'j:finished', seq)
end
return #seqs
"""

#: ARGV: prefix, acct, sender, request id (`<channel part>:<code>`), request JSON,
#: created_at (now), expires_at, resend_after, max_pending. The account's expired
#: requests go first. Returns {outcome, request JSON, last sent at} (see
#: Store.pairing_request; `full` and `taken` with no request).
PAIRING_REQUEST = r"""
local index, sender, rid, now = P .. 'pairing:of:' .. ARGV[2], ARGV[3], ARGV[4], ARGV[6]
local flat = redis.call('HGETALL', index)
for i = 1, #flat, 2 do
  local key = P .. 'pairing:req:' .. flat[i + 1]
  local expires = redis.call('HGET', key, 'e')
  if not expires or tonumber(expires) <= tonumber(now) then
    redis.call('HDEL', index, flat[i])
    redis.call('DEL', key)
    redis.call('ZREM', P .. 'pairing:all', flat[i + 1])
  end
end
local mine = redis.call('HGET', index, sender)
if mine then
  local key = P .. 'pairing:req:' .. mine
  local row = redis.call('HMGET', key, 'j', 'l')
  if tonumber(now) - tonumber(row[2]) < tonumber(ARGV[8]) then
    return {'quiet', row[1], row[2]}
  end
  redis.call('HSET', key, 'l', now)
  return {'resend', row[1], now}
end
if redis.call('HLEN', index) >= tonumber(ARGV[9]) then
  return {'full'}
end
local key = P .. 'pairing:req:' .. rid
if redis.call('EXISTS', key) == 1 then
  return {'taken'}
end
redis.call('HSET', key, 'a', ARGV[2], 's', sender, 'j', ARGV[5], 'e', ARGV[7], 'l', now)
redis.call('HSET', index, sender, rid)
redis.call('ZADD', P .. 'pairing:all', now, rid)
return {'new', ARGV[5], now}
"""

#: ARGV: prefix, request id prefix (`<channel part>:`, '' for all), now. Flat request
#: JSON, last sent at of the requests pending at `now`, oldest first. Writes nothing.
PAIRING_LIST = r"""
local out = {}
for _, rid in ipairs(redis.call('ZRANGE', P .. 'pairing:all', 0, -1)) do
  if ARGV[2] == '' or string.sub(rid, 1, #ARGV[2]) == ARGV[2] then
    local row = redis.call('HMGET', P .. 'pairing:req:' .. rid, 'j', 'l', 'e')
    if row[1] and tonumber(row[3]) > tonumber(ARGV[3]) then
      out[#out + 1] = row[1]
      out[#out + 1] = row[2]
    end
  end
end
return out
"""

#: ARGV: prefix, request id, acct ('' for any), '1' to approve, now. Takes the request
#: out; when approving, its sender is approved on its account at `now`. Returns
#: {request JSON, last sent at}, or {} when no such request is pending at `now`.
PAIRING_RESOLVE = r"""
local rid, now = ARGV[2], ARGV[5]
local key = P .. 'pairing:req:' .. rid
local row = redis.call('HMGET', key, 'a', 's', 'j', 'l', 'e')
if not row[1] or (ARGV[3] ~= '' and row[1] ~= ARGV[3]) then
  return {}
end
local index = P .. 'pairing:of:' .. row[1]
if redis.call('HGET', index, row[2]) == rid then
  redis.call('HDEL', index, row[2])
end
redis.call('DEL', key)
redis.call('ZREM', P .. 'pairing:all', rid)
if tonumber(row[5]) <= tonumber(now) then
  return {}
end
if ARGV[4] == '1' then
  redis.call('HSET', P .. 'approved:' .. row[1], row[2], now)
  redis.call('SADD', P .. 'approved', row[1])
end
return {row[3], row[4]}
"""

#: ARGV: prefix, now. Deletes the requests expired at `now`; returns how many.
PAIRING_PRUNE = r"""
local count = 0
for _, rid in ipairs(redis.call('ZRANGE', P .. 'pairing:all', 0, -1)) do
  local key = P .. 'pairing:req:' .. rid
  local row = redis.call('HMGET', key, 'a', 's', 'e')
  if not row[3] or tonumber(row[3]) <= tonumber(ARGV[2]) then
    if row[1] and redis.call('HGET', P .. 'pairing:of:' .. row[1], row[2]) == rid then
      redis.call('HDEL', P .. 'pairing:of:' .. row[1], row[2])
    end
    redis.call('DEL', key)
    redis.call('ZREM', P .. 'pairing:all', rid)
    count = count + 1
  end
end
return count
"""

#: ARGV: prefix, acct, platform id. Returns the entry's row (see outbox_rows).
OUTBOX_BY_PLATFORM_ID = r"""
local id = redis.call('HGET', P .. 'o:platform:' .. ARGV[2], ARGV[3])
if not id then
  return {}
end
return outbox_rows({id})
"""

#: ARGV: prefix, the key (after the prefix) of a sorted set of ids. Its entries' rows.
OUTBOX_ROWS = r"""
return outbox_rows(redis.call('ZRANGE', P .. ARGV[2], 0, -1))
"""

#: ARGV: prefix, limit. The newest failed / unknown entries' rows, with `u`.
OUTBOX_FAILURES = r"""
local limit = tonumber(ARGV[2])
if limit <= 0 then
  return {}
end
return outbox_rows(redis.call('ZREVRANGE', P .. 'o:failures', 0, limit - 1), 'u')
"""

#: ARGV: prefix, since, queued_since. Flat channel, account, route, status, updated_at.
OUTBOX_RECENT = r"""
local queued_since = tonumber(ARGV[3])
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'o:changed', ARGV[2], '+inf')) do
  local row = redis.call('HMGET', P .. 'o:' .. id, 'c', 'n', 'ro', 's', 't', 'u')
  if row[1] and tonumber(row[5]) >= queued_since then
    out[#out + 1] = row[1]
    out[#out + 1] = row[2]
    out[#out + 1] = row[3]
    out[#out + 1] = row[4]
    out[#out + 1] = row[6]
  end
end
return out
"""

#: ARGV: prefix, older_than (exclusive), batch. Returns how many were deleted.
OUTBOX_PRUNE = r"""
local ids = redis.call('ZRANGEBYSCORE', P .. 'o:finished', '-inf', '(' .. ARGV[2],
                       'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(ids) do
  local key = P .. 'o:' .. id
  local row = redis.call('HMGET', key, 'a', 'r', 'pid')
  if row[1] then
    redis.call('ZREM', P .. 'o:reply:' .. row[2], id)
    if row[3] and redis.call('HGET', P .. 'o:platform:' .. row[1], row[3]) == id then
      redis.call('HDEL', P .. 'o:platform:' .. row[1], row[3])
    end
    redis.call('DEL', key)
  end
  redis.call('ZREM', P .. 'o:finished', id)
  redis.call('ZREM', P .. 'o:changed', id)
  redis.call('ZREM', P .. 'o:failures', id)
end
return #ids
"""

#: ARGV: prefix, acct, cursor, lease name, token. A fenced set_cursor.
CURSOR_FENCED = r"""
check_fence(ARGV[4], ARGV[5])
redis.call('HSET', P .. 'cursors', ARGV[2], ARGV[3])
return 0
"""

#: ARGV: prefix, active_since ('-inf' for all). The session rows, most recent first.
SESSIONS = r"""
local keys = redis.call('ZREVRANGEBYSCORE', P .. 'sessions:active', '+inf', ARGV[2])
local out = {}
for start = 1, #keys, 1000 do  -- unpack() has a limit on how many values it spreads
  local rows = redis.call('HMGET', P .. 'sessions',
                          unpack(keys, start, math.min(start + 999, #keys)))
  for _, row in ipairs(rows) do
    out[#out + 1] = row
  end
end
return out
"""

#: ARGV: prefix, session key, max score ('+inf' or '(' .. before_seq), limit (-1: all),
#: session id (JSON, '' for any), role count, roles (JSON). The newest matching entries,
#: newest first. Entries are `session_id \n role \n seq \n body` (JSON text has no raw
#: newline), so the filters compare text without decoding JSON.
LOG_READ = r"""
local key, top, limit, session_id = P .. 'log:' .. ARGV[2], ARGV[3], tonumber(ARGV[4]),
                                    ARGV[5]
local role_count = tonumber(ARGV[6])
if session_id == '' and role_count == 0 then
  if limit < 0 then
    return redis.call('ZREVRANGEBYSCORE', key, top, '-inf')
  end
  return redis.call('ZREVRANGEBYSCORE', key, top, '-inf', 'LIMIT', 0, limit)
end
local roles = {}
for i = 1, role_count do
  roles[ARGV[6 + i]] = true
end
local out = {}
while true do
  local page = redis.call('ZREVRANGEBYSCORE', key, top, '-inf', 'WITHSCORES', 'LIMIT', 0, 256)
  if #page == 0 then
    return out
  end
  for i = 1, #page, 2 do
    local entry = page[i]
    local a = string.find(entry, '\n', 1, true)
    local b = string.find(entry, '\n', a + 1, true)
    if (session_id == '' or string.sub(entry, 1, a - 1) == session_id)
        and (role_count == 0 or roles[string.sub(entry, a + 1, b - 1)]) then
      out[#out + 1] = entry
      if limit >= 0 and #out >= limit then
        return out
      end
    end
    top = '(' .. page[i + 1]
  end
end
"""

#: ARGV: prefix, chat key, client id ('' for none), body (JSON). Returns the new entry
#: (`id \n body`), or false when the client id is in the chat's transcript already.
TRANSCRIPT_ADD = r"""
local client_key = P .. 't:client:' .. ARGV[2]
if ARGV[3] ~= '' and redis.call('HEXISTS', client_key, ARGV[3]) == 1 then
  return false
end
local id = redis.call('INCR', P .. 't:seq')
local entry = id .. '\n' .. ARGV[4]
redis.call('ZADD', P .. 't:' .. ARGV[2], id, entry)
if ARGV[3] ~= '' then
  redis.call('HSET', client_key, ARGV[3], entry)
end
return entry
"""

#: ARGV: prefix, name, holder, ttl in ms. Returns the token, or false when another holds it.
LEASE_ACQUIRE = r"""
local key = P .. 'lease:' .. ARGV[2]
local held = redis.call('HMGET', key, 'holder', 'token')
if held[1] == ARGV[3] then
  redis.call('PEXPIRE', key, ARGV[4])
  return tonumber(held[2])
end
if held[1] then
  return false
end
local token = redis.call('INCR', P .. 'lease-token:' .. ARGV[2])
redis.call('HSET', key, 'holder', ARGV[3], 'token', token)
redis.call('PEXPIRE', key, ARGV[4])
redis.call('SADD', P .. 'leases', ARGV[2])
return token
"""

#: ARGV: prefix, name, holder, token, ttl in ms ('' to release). Returns 1 when it was ours.
LEASE_RENEW = r"""
local key = P .. 'lease:' .. ARGV[2]
local held = redis.call('HMGET', key, 'holder', 'token')
if held[1] ~= ARGV[3] or held[2] ~= ARGV[4] then
  return 0
end
if ARGV[5] == '' then
  redis.call('DEL', key)
  redis.call('SREM', P .. 'leases', ARGV[2])
else
  redis.call('PEXPIRE', key, ARGV[5])
end
return 1
"""

#: ARGV: prefix, whether to forget expired names ('1'; not when read-only). Flat name,
#: holder, token, ms left of every held lease.
LEASES = r"""
local out = {}
for _, name in ipairs(redis.call('SMEMBERS', P .. 'leases')) do
  local key = P .. 'lease:' .. name
  local held = redis.call('HMGET', key, 'holder', 'token')
  local left = redis.call('PTTL', key)
  if held[1] and left ~= -2 then
    out[#out + 1] = name
    out[#out + 1] = held[1]
    out[#out + 1] = held[2]
    out[#out + 1] = left
  elseif ARGV[2] == '1' then
    redis.call('SREM', P .. 'leases', name)
  end
end
return out
"""

#: ARGV: prefix, whether to forget expired ids ('1'; not when read-only). Flat id, info
#: (JSON) of every live instance.
INSTANCES = r"""
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', P .. 'instances')) do
  local info = redis.call('GET', P .. 'instance:' .. id)
  if info then
    out[#out + 1] = id
    out[#out + 1] = info
  elseif ARGV[2] == '1' then
    redis.call('SREM', P .. 'instances', id)
  end
end
return out
"""

#: The batched writes (:mod:`chatkernel.core.store.redis.batch`), one script call a batch.
#: ARGV: prefix, now, inbox length, the writes, the fence set count, then per set: its
#: size, then per fence: acct, lease name, token. The writes are one JSON array of
#: strings: per write its op, its field count, its fields (see the functions below; a
#: fence set index 0 means no fences). Returns an answer per
#: write: its result, ``LEASE_LOST <lease>`` when its fence refused it (it wrote
#: nothing), ``ERR <message>`` when it failed. Each write is checked and made by itself,
#: so a refused or failed one does not hold back the others.
BATCH = r"""
local now, inbox_length, writes = ARGV[2], ARGV[3], cjson.decode(ARGV[4])
local sets = {}
local at = 6
for s = 1, tonumber(ARGV[5]) do
  local set = {}
  for _ = 1, tonumber(ARGV[at]) do
    set[ARGV[at + 1]] = {ARGV[at + 2], ARGV[at + 3]}
    at = at + 3
  end
  sets[s] = set
  at = at + 1
end

-- The batch's changes to sorted sets (the journal's and the outbox's indexes, the
-- session logs), made at its end with one ZADD and one ZREM a key instead of a command
-- each: no write of a batch reads these sets, and of a member's changes only its last
-- one counts. Members are kept as text, as the server keeps them.
local zchanges, zkeys = {}, {}

local function zchange(key, member, score)
  local changes = zchanges[key]
  if not changes then
    changes = {}
    zchanges[key] = changes
    zkeys[#zkeys + 1] = key
  end
  changes[tostring(member)] = score
end

local function zadd(key, score, member)
  zchange(key, member, score)
end

local function zrem(key, member)
  zchange(key, member, false)
end

-- `command key values...`, a thousand values at a time (an even count: ZADD's pairs
-- stay whole): unpack() has a limit on how many values it spreads.
local function in_chunks(command, key, values)
  for first = 1, #values, 1000 do
    redis.call(command, key, unpack(values, first, math.min(first + 999, #values)))
  end
end

local function zflush()
  for _, key in ipairs(zkeys) do
    local adds, removes = {}, {}
    for member, score in pairs(zchanges[key]) do
      if score then
        adds[#adds + 1] = score
        adds[#adds + 1] = member
      else
        removes[#removes + 1] = member
      end
    end
    in_chunks('ZADD', key, adds)
    in_chunks('ZREM', key, removes)
  end
end

-- Raise a hash field to `value` (an account's latest activity): once per field in a
-- batch, whose writes all raise it to the batch's `now`.
local raised = {}
local function raise_to(key, field, value)
  local memo = key .. '\n' .. field
  if raised[memo] == value then
    return
  end
  raised[memo] = value
  local current = redis.call('HGET', key, field)
  if not current or tonumber(current) < tonumber(value) then
    redis.call('HSET', key, field, value)
  end
end

-- An account's [channel, account] JSON, kept the first time it is journaled: asked
-- once per account in a batch.
local known_accounts = {}
local function know_account(acct, who)
  if not known_accounts[acct] then
    known_accounts[acct] = true
    redis.call('HSETNX', P .. 'accounts', acct, who)
  end
end

-- The indexes of an outbox entry moving from status `old` (false: a new entry)
-- to `new`.
local function outbox_index(id, acct, created, old, new, now)
  local open_now = new == 'pending' or new == 'sending'
  local was_open = old == 'pending' or old == 'sending'
  if open_now and not was_open then
    zadd(P .. 'o:unfinished', id, id)
    zadd(P .. 'o:unfinished:' .. acct, id, id)
    zrem(P .. 'o:finished', id)
  elseif was_open and not open_now then
    zrem(P .. 'o:unfinished', id)
    zrem(P .. 'o:unfinished:' .. acct, id)
  end
  if not open_now then
    zadd(P .. 'o:finished', created, id)
  end
  if new == 'pending' then
    zrem(P .. 'o:changed', id)
  else
    zadd(P .. 'o:changed', now, id)
  end
  if new == 'failed' or new == 'unknown' then
    zadd(P .. 'o:failures', id, id)
  elseif old == 'failed' or old == 'unknown' then
    zrem(P .. 'o:failures', id)
  end
  if new == 'sent' then
    raise_to(P .. 'activity:sent', acct, now)
  end
end

local function finish_journal(seq, status)
  local key = P .. 'j:' .. seq
  local row = redis.call('HMGET', key, 'a', 't')
  if not row[1] then
    return 0
  end
  redis.call('HSET', key, 's', status)
  if status == 'received' then
    zadd(P .. 'j:unfinished', seq, seq)
    zadd(P .. 'j:unfinished:' .. row[1], seq, seq)
    zrem(P .. 'j:finished', seq)
  else
    zrem(P .. 'j:unfinished', seq)
    zrem(P .. 'j:unfinished:' .. row[1], seq)
    zadd(P .. 'j:finished', row[2], seq)
  end
  return 1
end

-- The lease name when the fence of `acct` in `set` no longer holds, else nil.
local function lost(set, acct)
  local fence = set and set[acct]
  if fence and redis.call('HGET', P .. 'lease:' .. fence[1], 'token') ~= fence[2] then
    return fence[1]
  end
  return nil
end

-- A: count, then per message: acct, message id, the JSON [channel, account], the
-- message's JSON. A seq per message (0: a redelivery).
local function journal(A)
  local out = {}
  for i = 0, tonumber(A[1]) - 1 do
    local base = 2 + i * 4
    local acct, message_id, who, message = A[base], A[base + 1], A[base + 2], A[base + 3]
    local dedupe = P .. 'j:dedupe:' .. acct
    if redis.call('HEXISTS', dedupe, message_id) == 1 then
      out[#out + 1] = 0
    else
      local seq = redis.call('INCR', P .. 'j:seq')
      redis.call('HSET', dedupe, message_id, seq)
      -- The entry keeps its inbox entry's id (`x`), so a refused stranger's can go with
      -- their text (journal_status): a field of the same HSET, no command more.
      local inboxed = redis.call('XADD', P .. 'inbox:' .. acct, 'MAXLEN', '~', inbox_length,
                                 '*', 'seq', seq, 'm', message, 't', now)
      redis.call('HSET', P .. 'j:' .. seq, 'a', acct, 'id', message_id, 'm', message,
                 's', 'received', 't', now, 'x', inboxed)
      zadd(P .. 'j:unfinished', seq, seq)
      zadd(P .. 'j:unfinished:' .. acct, seq, seq)
      know_account(acct, who)
      raise_to(P .. 'activity:in', acct, now)
      out[#out + 1] = seq
    end
  end
  return out
end

-- A: seq, status, and the message JSON the entry keeps instead (optional: a refused
-- stranger's, without its text). The message it replaces goes from the account's inbox
-- too: its stream entry is deleted (a reader's XREAD passes over it; an entry journaled
-- before `x` was kept stays until the stream is trimmed). 1, or 0 when there is no such
-- entry.
local function journal_status(A)
  local found = finish_journal(A[1], A[2])
  if found == 1 and A[3] then
    local key = P .. 'j:' .. A[1]
    local row = redis.call('HMGET', key, 'a', 'x')
    redis.call('HSET', key, 'm', A[3])
    if row[2] then
      redis.call('XDEL', P .. 'inbox:' .. row[1], row[2])
      redis.call('HDEL', key, 'x')
    end
  end
  return found
end

-- A: fence set, entry count, finish count, then per entry: acct, reply_id, session_key,
-- session_id, channel, account, route, payload, status, error (JSON), 1 to put it in
-- the account's inbox (another process owns the account and sends it) or 0; then the
-- journal seqs to finish. The new ids.
local function outbox_add(A)
  local set, entries, finish = sets[tonumber(A[1])], tonumber(A[2]), tonumber(A[3])
  for i = 0, entries - 1 do
    local name = lost(set, A[4 + i * 11])
    if name then
      return 'LEASE_LOST ' .. name
    end
  end
  local at = 4
  local ids = {}
  for _ = 1, entries do
    local acct, reply_id, status = A[at], A[at + 1], A[at + 8]
    local id = redis.call('INCR', P .. 'o:seq')
    redis.call('HSET', P .. 'o:' .. id, 'a', acct, 'r', reply_id, 'k', A[at + 2],
               'i', A[at + 3], 'c', A[at + 4], 'n', A[at + 5], 'ro', A[at + 6],
               'p', A[at + 7], 's', status, 'e', A[at + 9], 't', now, 'u', now)
    zadd(P .. 'o:reply:' .. reply_id, id, id)
    outbox_index(id, acct, now, false, status, now)
    if A[at + 10] == '1' then
      -- Queued by a process that does not own the account: its owner sends it.
      redis.call('XADD', P .. 'inbox:' .. acct, 'MAXLEN', '~', inbox_length, '*',
                 'o', id, 'r', reply_id, 'k', A[at + 2], 'i', A[at + 3],
                 'c', A[at + 4], 'n', A[at + 5], 'ro', A[at + 6], 'p', A[at + 7],
                 's', status, 't', now)
    end
    ids[#ids + 1] = id
    at = at + 11
  end
  for _ = 1, finish do
    finish_journal(A[at], 'done')
    at = at + 1
  end
  return ids
end

-- A: fence set (the entry's own account is checked), id, status, error (JSON). 1, or 0
-- when there is no such entry.
local function outbox_mark(A)
  local id, status = A[2], A[3]
  local key = P .. 'o:' .. id
  local row = redis.call('HMGET', key, 'a', 's', 't')
  if not row[1] then
    return 0
  end
  local name = lost(sets[tonumber(A[1])], row[1])
  if name then
    return 'LEASE_LOST ' .. name
  end
  redis.call('HSET', key, 's', status, 'e', A[4], 'u', now)
  outbox_index(id, row[1], row[3], row[2], status, now)
  return 1
end

-- A: id, platform id.
local function outbox_sent_as(A)
  local key = P .. 'o:' .. A[1]
  local acct = redis.call('HGET', key, 'a')
  if acct then
    redis.call('HSET', key, 'pid', A[2])
    redis.call('HSET', P .. 'o:platform:' .. acct, A[2], A[1])
  end
  return 0
end

-- A: session key, count, then per entry: session id (JSON), role (JSON), body (JSON).
-- The last seq.
local function log_append(A)
  local count = tonumber(A[2])
  local last = redis.call('INCRBY', P .. 'log:seq', count)
  local first = last - count + 1
  local key = P .. 'log:' .. A[1]
  for i = 0, count - 1 do
    local base = 3 + i * 3
    local seq = first + i
    zadd(key, seq, A[base] .. '\n' .. A[base + 1] .. '\n' .. seq .. '\n' .. A[base + 2])
  end
  return last
end

local OPS = {j = journal, js = journal_status, a = outbox_add, m = outbox_mark,
             s = outbox_sent_as, l = log_append}

local out = {}
local pos, last = 1, #writes
while pos <= last do
  local op, count = OPS[writes[pos]], tonumber(writes[pos + 1])
  local A = {}
  for i = 1, count do
    A[i] = writes[pos + 1 + i]
  end
  pos = pos + 2 + count
  local ok, result = pcall(op, A)
  if ok then
    out[#out + 1] = result
  elseif type(result) == 'table' and result.err then
    out[#out + 1] = 'ERR ' .. result.err
  else
    out[#out + 1] = 'ERR ' .. tostring(result)
  end
end
zflush()
return out
"""
