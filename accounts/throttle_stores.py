"""Sign-in throttling's state: the rules' numbers, the Redis scripts and their in-memory twin.

accounts/throttle.py says what the rules are and drives attempts through a store; a store
counts failures, lockouts and attempts in flight per key, atomically: RedisStore for the
fleet, LocalStore (the same semantics in this process's memory) for the embedded mode and
Redis outages.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import redis

from core.config import tollgate

FAILURE_WINDOW_S = 15 * 60
STRIKE_MEMORY_S = 24 * 3600
IN_FLIGHT_LEASE_S = 60  # a slot outlives any check; then a crashed process's slot is free
FLIGHT = "a:"  # the hash field of an attempt in flight: a:<id> -> its lease's end (ms)

# One hash per subject: f failures since w (ms), locked until u (ms), s strikes, the last
# lockout at l (ms), and a field a:<id> per attempt in flight holding its lease's end (ms).
# Each write keeps the key a day and a cap more.
#
# Begin: > 0, locked that long (ms); 0, admitted (its slot taken on every key); -1, no slot
# free: failures and attempts in flight together reach the limit, so wait.
_BEGIN = """
local now, limit, window = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local memory, first, cap = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local flight, lease = ARGV[7], tonumber(ARGV[8])
local wait, busy = 0, false
for _, key in ipairs(KEYS) do
  local h = redis.call('HMGET', key, 'f', 'w', 'u', 's', 'l')
  local f, w, u = tonumber(h[1]) or 0, tonumber(h[2]) or 0, tonumber(h[3]) or 0
  local s, l = tonumber(h[4]) or 0, tonumber(h[5]) or 0
  if now - w >= window then f = 0 end
  if u > now then
    wait = math.max(wait, u - now)
  else
    local flying, fields = 0, redis.call('HGETALL', key)
    for j = 1, #fields, 2 do
      if string.sub(fields[j], 1, 2) == 'a:' then
        if tonumber(fields[j + 1]) > now then
          flying = flying + 1
        else
          redis.call('HDEL', key, fields[j])
        end
      end
    end
    if f >= limit and flying == 0 then
      -- the limit was lowered under these failures: refused as long as a lockout would be
      if now - l >= memory then s = 0 end
      wait = math.max(wait, math.min(first * 2 ^ s, cap))
    elseif f + flying >= limit then
      busy = true
    end
  end
end
if wait > 0 then return wait end
if busy then return -1 end
for _, key in ipairs(KEYS) do
  redis.call('HSET', key, flight, now + lease)
  redis.call('PEXPIRE', key, memory + cap)
end
return 0
"""

# Fail: the attempt's slot is freed and its failure counted; the failure that reaches the
# limit locks. Returns the longest lockout (ms) in force, then (strikes, new lockout) per key.
_FAIL = """
local now, limit, window = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local memory, first, cap = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local flight = ARGV[7]
local out = {0}
for i, key in ipairs(KEYS) do
  redis.call('HDEL', key, flight)
  local h = redis.call('HMGET', key, 'f', 'w', 'u', 's', 'l')
  local f, w, u = tonumber(h[1]) or 0, tonumber(h[2]) or 0, tonumber(h[3]) or 0
  local s, l = tonumber(h[4]) or 0, tonumber(h[5]) or 0
  local locked = 0
  if u > now then
    -- another attempt's failure locked it meanwhile: this one was let in before the lock
    out[1] = math.max(out[1], u - now)
  else
    if now - w >= window then f = 0 end
    if f == 0 then w = now end
    f = f + 1
    if f >= limit then
      if now - l >= memory then s = 0 end
      s = s + 1
      locked = math.min(first * 2 ^ (s - 1), cap)
      redis.call('HSET', key, 'f', 0, 'u', now + locked, 's', s, 'l', now)
      out[1] = math.max(out[1], locked)
    else
      redis.call('HSET', key, 'f', f, 'w', w)
    end
    redis.call('PEXPIRE', key, memory + cap)
  end
  out[2 * i] = s
  out[2 * i + 1] = locked
end
return out
"""

# Succeed (ARGV[1] == '1') frees the slot and clears the first key's failures, the name's;
# give back ('0') only frees the slot. A key an operator deleted stays deleted.
_END = """
for i, key in ipairs(KEYS) do
  redis.call('HDEL', key, ARGV[2])
  if i == 1 and ARGV[1] == '1' and redis.call('EXISTS', key) == 1 then
    redis.call('HSET', key, 'f', 0)
  end
end
return 0
"""


@dataclass(frozen=True)
class Rules:
    failures: int
    lockout_ms: int
    lockout_max_ms: int
    window_ms: int = FAILURE_WINDOW_S * 1000
    memory_ms: int = STRIKE_MEMORY_S * 1000
    lease_ms: int = IN_FLIGHT_LEASE_S * 1000

    @classmethod
    def from_settings(cls) -> Rules:
        conf = tollgate()
        return cls(
            failures=conf.login_failures,
            lockout_ms=conf.login_lockout_s * 1000,
            lockout_max_ms=conf.login_lockout_max_s * 1000,
        )

    def lockout_for(self, strike: int) -> int:
        """Return the lockout (ms) of the `strike`th lockout in a row (1 is the first)."""
        return min(self.lockout_ms * 2 ** min(strike - 1, 64), self.lockout_max_ms)

    def args(self, now_ms: int) -> list[int]:
        return [
            now_ms,
            self.failures,
            self.window_ms,
            self.memory_ms,
            self.lockout_ms,
            self.lockout_max_ms,
        ]


@dataclass(frozen=True)
class Cleared:
    """What an operator's unlock removed from one key."""

    key: str
    locked_s: int
    strikes: int
    failures: int

    def describe(self) -> str:
        state = f"locked {self.locked_s} s more" if self.locked_s else "not locked"
        return f"{self.key}: {state}, {self.failures} failure(s), {self.strikes} strike(s)"


class LocalStore:
    """The Redis scripts' semantics in this process's memory (embedded mode, outages)."""

    def __init__(self) -> None:
        self._keys: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()

    def begin(self, keys: tuple[str, ...], flight: str, rules: Rules, now_ms: int) -> int:
        with self._lock:
            self._forget_expired(now_ms)
            wait_ms, busy = 0, False
            for key in keys:
                h = self._keys.get(key, {})
                f = h.get("f", 0) if now_ms - h.get("w", 0) < rules.window_ms else 0
                if h.get("u", 0) > now_ms:
                    wait_ms = max(wait_ms, h["u"] - now_ms)
                    continue
                for gone in [k for k, end in h.items() if k.startswith(FLIGHT) and end <= now_ms]:
                    del h[gone]
                flying = sum(1 for k in h if k.startswith(FLIGHT))
                if f >= rules.failures and not flying:
                    strikes = h.get("s", 0) if now_ms - h.get("l", 0) < rules.memory_ms else 0
                    wait_ms = max(wait_ms, rules.lockout_for(strikes + 1))
                elif f + flying >= rules.failures:
                    busy = True
            if wait_ms:
                return wait_ms
            if busy:
                return -1
            for key in keys:
                h = self._keys.setdefault(key, {})
                h[flight] = now_ms + rules.lease_ms
                h["x"] = now_ms + rules.memory_ms + rules.lockout_max_ms
            return 0

    def fail(self, keys: tuple[str, ...], flight: str, rules: Rules, now_ms: int) -> list[int]:
        with self._lock:
            out = [0]
            for key in keys:
                h = self._keys.setdefault(key, {})
                h.pop(flight, None)
                strikes, locked = h.get("s", 0), 0
                if h.get("u", 0) > now_ms:
                    out[0] = max(out[0], h["u"] - now_ms)
                else:
                    f = h.get("f", 0) if now_ms - h.get("w", 0) < rules.window_ms else 0
                    if f == 0:
                        h["w"] = now_ms
                    h["f"] = f + 1
                    if h["f"] >= rules.failures:
                        if now_ms - h.get("l", 0) >= rules.memory_ms:
                            strikes = 0
                        strikes += 1
                        locked = rules.lockout_for(strikes)
                        h.update(f=0, u=now_ms + locked, s=strikes, l=now_ms)
                        out[0] = max(out[0], locked)
                    h["x"] = now_ms + rules.memory_ms + rules.lockout_max_ms
                out += [strikes, locked]
            return out

    def end(self, keys: tuple[str, ...], flight: str, *, clears_name: bool) -> None:
        with self._lock:
            for i, key in enumerate(keys):
                h = self._keys.get(key)
                if h is None:
                    continue
                h.pop(flight, None)
                if set(h) <= {"x"}:  # nothing but its expiry: gone, as Redis drops it
                    del self._keys[key]
                elif i == 0 and clears_name:
                    h["f"] = 0

    def clear(self, keys: list[str], now_ms: int) -> list[Cleared]:
        with self._lock:
            self._forget_expired(now_ms)
            gone = [(key, self._keys.pop(key)) for key in keys if key in self._keys]
        return [_cleared(key, h, now_ms) for key, h in gone]

    def keys(self, prefix: str) -> list[str]:
        with self._lock:
            return [key for key in self._keys if key.startswith(prefix)]

    def _forget_expired(self, now_ms: int) -> None:
        if len(self._keys) > 10_000:
            self._keys = {k: h for k, h in self._keys.items() if h.get("x", 0) > now_ms}


class RedisStore:
    """The shared state: one connection pool per process and Redis URL, three scripts."""

    def __init__(self, url: str) -> None:
        timeout_s = tollgate().redis_timeout_ms / 1000
        self.client = redis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        self._begin = self.client.register_script(_BEGIN)
        self._fail = self.client.register_script(_FAIL)
        self._end = self.client.register_script(_END)

    def begin(self, keys: tuple[str, ...], flight: str, rules: Rules, now_ms: int) -> int:
        args: list[int | str] = [*rules.args(now_ms), flight, rules.lease_ms]
        return int(self._begin(keys=list(keys), args=args))

    def fail(self, keys: tuple[str, ...], flight: str, rules: Rules, now_ms: int) -> list[int]:
        out = self._fail(keys=list(keys), args=[*rules.args(now_ms), flight])
        return [int(value) for value in out]

    def end(self, keys: tuple[str, ...], flight: str, *, clears_name: bool) -> None:
        self._end(keys=list(keys), args=["1" if clears_name else "0", flight])

    def clear(self, keys: list[str], now_ms: int) -> list[Cleared]:
        if not keys:
            return []
        with self.client.pipeline(transaction=True) as pipe:
            for key in keys:
                pipe.hgetall(key)
            pipe.delete(*keys)
            *hashes, _ = pipe.execute()
        return [
            _cleared(key, {k.decode(): int(v) for k, v in h.items()}, now_ms)
            for key, h in zip(keys, hashes, strict=True)
            if h
        ]

    def keys(self, prefix: str) -> list[str]:
        return [key.decode() for key in self.client.scan_iter(f"{prefix}*", count=1000)]


def _cleared(key: str, h: Mapping[str, int], now_ms: int) -> Cleared:
    return Cleared(
        key=key,
        locked_s=max(0, math.ceil((h.get("u", 0) - now_ms) / 1000)),
        strikes=h.get("s", 0),
        failures=h.get("f", 0),
    )
