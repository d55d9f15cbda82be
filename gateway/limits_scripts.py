"""The Lua scripts of the rate limiter (gateway/limits.py): each runs in one Redis round trip.

`ADMIT` judges a request against its scopes' rates and the in-flight and concurrency caps,
and admits it (counts, reserved tokens, leased slots) only when all pass. `SYNC` pushes what a
process counted while it judged alone, once Redis answers again. ADMIT's refusals are
gateway.limits' codes: {RPM or TPM, the scope's number from 1} or {CAP, 0 in flight / 1 group}.
"""

from __future__ import annotations

from core.shared_state import Script

ADMIT = Script("""
local now, window_ttl, rid, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local inflight_max, conc_max, n = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local estimate = tonumber(ARGV[8 + 2 * n])
for i = 1, n do
  local rpm, tpm = tonumber(ARGV[7 + 2 * i - 1]), tonumber(ARGV[7 + 2 * i])
  if rpm > 0 and tonumber(redis.call('GET', KEYS[2 + 2 * i - 1]) or '0') >= rpm then
    return {1, i}
  end
  if tpm > 0 and tonumber(redis.call('GET', KEYS[2 + 2 * i]) or '0') >= tpm then
    return {2, i}
  end
end
if inflight_max > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if redis.call('ZCARD', KEYS[1]) >= inflight_max then return {3, 0} end
end
if conc_max > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= conc_max then return {3, 1} end
end
local out = {0, 0}  -- admitted; the second slot names a refusing scope otherwise
for i = 1, n do
  local used = redis.call('INCR', KEYS[2 + 2 * i - 1])
  if used == 1 then redis.call('EXPIRE', KEYS[2 + 2 * i - 1], window_ttl) end
  out[#out + 1] = used
  -- Reserve the estimate now: tokens used before this request are returned.
  if estimate > 0 then
    local tokens = redis.call('INCRBY', KEYS[2 + 2 * i], estimate)
    if tokens == estimate then redis.call('EXPIRE', KEYS[2 + 2 * i], window_ttl) end
    out[#out + 1] = tokens - estimate
  else
    out[#out + 1] = tonumber(redis.call('GET', KEYS[2 + 2 * i]) or '0')
  end
end
if inflight_max > 0 then redis.call('ZADD', KEYS[1], lease, rid) end
if conc_max > 0 then redis.call('ZADD', KEYS[2], lease, rid) end
-- A hash the caller asked to read in the same round trip (the breakers' peek, which only
-- they interpret): its fields follow the counts (false where unset).
local m = tonumber(ARGV[9 + 2 * n])
if m > 0 then
  local got = redis.call('HMGET', KEYS[#KEYS], unpack(ARGV, 10 + 2 * n, 9 + 2 * n + m))
  for i = 1, m do out[#out + 1] = got[i] end
end
return out
""")

# Per slot: its rpm and tpm keys; ARGV: the window TTL, then per slot the requests this
# process last saw, those it admitted alone since, the tokens it last saw, those it counted
# alone since. Returns the counters after, two per slot.
SYNC = Script("""
local ttl, out = tonumber(ARGV[1]), {}
for i = 1, #KEYS / 2 do
  local rkey, tkey = KEYS[2 * i - 1], KEYS[2 * i]
  local seen, alone = tonumber(ARGV[4 * i - 2]), tonumber(ARGV[4 * i - 1])
  local stored = tonumber(redis.call('GET', rkey) or '0')
  -- Requests only grow within a window: fewer than this process saw means Redis lost them.
  local used = math.max(stored, seen) + alone
  if used ~= stored then redis.call('SET', rkey, used, 'EX', ttl) end
  seen, alone = tonumber(ARGV[4 * i]), tonumber(ARGV[4 * i + 1])
  local tokens = redis.call('GET', tkey)
  if tokens then
    -- Trued-up reservations make tokens shrink, so only a missing key says Redis lost them.
    tokens = tonumber(tokens)
    if alone ~= 0 then tokens = redis.call('INCRBY', tkey, alone) end
  else
    tokens = seen + alone
    if tokens ~= 0 then redis.call('SET', tkey, tokens, 'EX', ttl) end
  end
  out[#out + 1] = used
  out[#out + 1] = tokens
end
return out
""")
