"""Sign-in throttling: per account name and per client address, fleet-wide through Redis.

The rules (numbers from core.config.tollgate()):

- A sign-in (the dashboard's and the admin's login form) is an attempt by an account name
  from a client address. A tenant API request with `Authorization: Token ...` is an attempt
  by its address alone. Each door counts apart per address: the dashboard's sign-ins, the
  tenant tokens and the admin's sign-ins, so an office that mistypes passwords does not stop
  its scripts' API calls, nor the reverse, and neither touches the admin.
- On the admin, an operator's name (an active staff user's) counts by its name alone: the
  failures of tenants who share an address (an office NAT, or every client when PROXY_HOPS is
  wrong) never lock the operator out; only failures of the operator's own name do, which a
  tenant must guess first. Other names on the admin count by name and the admin's address.
- A name is NFKC-normalised, case-folded and stripped, and only its keyed hash goes into a
  Redis key (a hostile name cannot shape keys, a password typed as a name is not stored).
  The address is REMOTE_ADDR, or with PROXY_HOPS = N the Nth X-Forwarded-For entry from the
  right; an IPv6 client counts by its /64 (one host holds a whole /64); an attempt without
  a parsable address counts by its name alone.
- LOGIN_FAILURES failures of a name or of an address within FAILURE_WINDOW_S lock it: for
  LOGIN_LOCKOUT_S the first time, twice as long at each further lockout (its strikes are
  remembered STRIKE_MEMORY_S after the last one), at most LOGIN_LOCKOUT_MAX_S. The failure
  that reaches the limit is already answered with the lockout. LOGIN_FAILURES = 0: off.
- Only a wrong secret is a failure: a wrong password, an unknown or revoked token. A right
  one clears its name's failures (not its strikes). An attempt that ends in a server error
  (the database unreachable) is neither: it is given back.
- While a name or the address is locked, an attempt is refused before any password is
  hashed or any token looked up, even with the right secret.

Attempts in flight. Failures are counted when they are known, never in advance, so attempts
under way are no failures and a right secret is never refused because of them. To keep
concurrent guesses from outrunning the limit, each subject (name, address) lets at most
LOGIN_FAILURES minus its failures so far be checked at once: if every one of them turned out
wrong, the last would lock it, and no further guess was let in meanwhile. An attempt beyond
that waits for a slot (it is not refused): a password check or a token lookup takes
milliseconds to a second, so 64 calls with one valid token or 8 colleagues behind one NAT
all get through, a little later. If the slots' attempts were guesses, the lockout they cause
refuses the waiters, as it should. A slot is a lease of IN_FLIGHT_LEASE_S, so the slots of a
process killed mid-check come back; an attempt that finds no slot within SLOT_WAIT_S (the
fleet too slow to check anything) is refused as busy, retry in BUSY_RETRY_S, with no lockout.

Operators clear names and addresses: `manage.py unlock_login`, and the User admin's action.

Redis unset (the embedded single-process mode): the same state in this process's memory.
Redis failing: each process falls back to that memory with one warning, and goes back to
Redis when it answers again. Failing open (per process) rather than closed because the rest
of Tollgate serves through a Redis outage, and a shut login page would lock the operators
out of the admin they need during one; a per-process throttle still bounds the guessing.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import math
import random
import secrets
import threading
import time
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import redis
from django.conf import settings

from core.config import tollgate

log = logging.getLogger(__name__)

PREFIX = "tollgate:login"
FAILURE_WINDOW_S = 15 * 60
STRIKE_MEMORY_S = 24 * 3600
IN_FLIGHT_LEASE_S = 60  # a slot outlives any check; then a crashed process's slot is free
SLOT_WAIT_S = 30.0  # about a reverse proxy's patience
BUSY_RETRY_S = 1
RETRY_REDIS_AFTER_S = 1.0  # after a failure, this process uses its memory this long
UNKNOWN_ADDRESS = "unknown"  # a peer without a parsable address (a unix socket, a bad header)
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


def _new_flight() -> str:
    return FLIGHT + secrets.token_hex(8)


@dataclass(frozen=True)
class Attempt:
    """A sign-in or token check under way; `wait_s` > 0: refused, retry after that long
    (`busy`: no slot came free in time, rather than a lockout)."""

    keys: tuple[str, ...]
    has_name: bool
    address: str
    wait_s: int = 0
    busy: bool = False
    flight: str = field(default_factory=_new_flight)  # its slot's field on each key


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


class StoreDown(Exception):
    """Redis did not answer an operator's unlock (which never falls back to memory)."""


# ---------------------------------------------------------------- subjects


def normalised_name(name: str) -> str:
    return unicodedata.normalize("NFKC", name).casefold().strip()


def name_digest(name: str) -> str:
    """Return the keyed hash that stands for an account name in keys and logs."""
    key = settings.SECRET_KEY.encode()
    return hmac.new(key, normalised_name(name).encode(), hashlib.sha256).hexdigest()[:32]


def address_subject(raw: str) -> str:
    """Return the address an attempt counts against: the IP, an IPv6 client's /64."""
    text = raw.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # v4:port, as some proxies write it
        text = text.split(":")[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return UNKNOWN_ADDRESS
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def client_address(meta: Mapping[str, str]) -> str:
    """Return the client's address subject from a request's META (see PROXY_HOPS)."""
    hops = tollgate().proxy_hops
    raw = meta.get("REMOTE_ADDR") or ""
    if hops:
        seen = [part.strip() for part in meta.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        seen = [part for part in seen if part]
        if seen:
            # Fewer entries than proxies: the request skipped the outer ones, and the first
            # entry is still one a trusted proxy wrote.
            raw = seen[-hops] if len(seen) >= hops else seen[0]
    return address_subject(raw)


def wait_phrase(wait_s: int) -> str:
    if wait_s < 60:
        return f"{wait_s} second{'s' if wait_s != 1 else ''}"
    minutes = math.ceil(wait_s / 60)
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


def sign_in_refusal(wait_s: int, *, busy: bool = False) -> str:
    if busy:
        return (
            "Too many sign-ins from this address are being checked at once. "
            f"Try again in {wait_phrase(wait_s)}."
        )
    return (
        "Too many failed sign-ins for this account or address. "
        f"Try again in {wait_phrase(wait_s)}, or ask an operator to unlock it."
    )


def token_refusal(wait_s: int, *, busy: bool = False) -> str:
    if busy:
        return (
            "Too many tenant tokens from this address are being checked at once. "
            f"Try again in {wait_phrase(wait_s)}."
        )
    return (
        "Too many unknown or revoked tenant tokens from this address. "
        f"Try again in {wait_phrase(wait_s)}, or ask an operator to unlock it."
    )


# ---------------------------------------------------------------- stores


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
        args = [*rules.args(now_ms), flight, rules.lease_ms]
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


# ---------------------------------------------------------------- the throttle


class Throttle:
    """Sign-in and token attempts against the rules; Redis when configured and answering."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        prefix: str = PREFIX,
        slot_wait_s: float = SLOT_WAIT_S,
    ) -> None:
        self.clock = clock
        self.prefix = prefix
        self.slot_wait_s = slot_wait_s
        self.local = LocalStore()
        self._stores: dict[str, RedisStore] = {}
        self._stores_lock = threading.Lock()
        self._down_until = 0.0
        self.degraded = False

    # -- keys

    def name_key(self, name: str) -> str:
        return f"{self.prefix}:name:{name_digest(name)}"

    def address_keys(self, address: str) -> tuple[str, str, str]:
        """Return the address's keys: the dashboard's sign-ins, tenant tokens, the admin's."""
        return (
            f"{self.prefix}:addr:{address}",
            f"{self.prefix}:token:{address}",
            f"{self.prefix}:admin:{address}",
        )

    # -- attempts

    # An attempt without a known address counts by its name alone: a bucket shared by every
    # such client would let one of them lock all the others out.

    def begin_sign_in(self, *, name: str, address: str) -> Attempt:
        """Begin a dashboard sign-in: it waits for a slot, or comes back refused."""
        keys = (self.name_key(name), *self._address_key(address, 0))
        return self._begin(Attempt(keys=keys, has_name=True, address=address))

    def begin_admin_sign_in(self, *, name: str, address: str, operator: bool) -> Attempt:
        """Begin an admin sign-in; an operator's name (`operator`) counts by the name alone."""
        keys = (self.name_key(name), *(() if operator else self._address_key(address, 2)))
        return self._begin(Attempt(keys=keys, has_name=True, address=address))

    def begin_token(self, *, address: str) -> Attempt:
        keys = self._address_key(address, 1)
        return self._begin(Attempt(keys=keys, has_name=False, address=address))

    def _address_key(self, address: str, scope: int) -> tuple[str, ...]:
        return () if address == UNKNOWN_ADDRESS else (self.address_keys(address)[scope],)

    def failed(self, attempt: Attempt) -> int:
        """Count the attempt as failed; return the seconds it is now locked out (0: not)."""
        rules = Rules.from_settings()
        if not rules.failures or attempt.wait_s or not attempt.keys:
            return 0
        out = self._run(
            lambda store, now_ms: store.fail(attempt.keys, attempt.flight, rules, now_ms)
        )
        for key, strike, locked_ms in zip(attempt.keys, out[1::2], out[2::2], strict=True):
            if locked_ms:
                log.warning(
                    "Sign-in lockout: %s locked for %d s (strike %d) after failures from %s",
                    key.removeprefix(self.prefix + ":"),
                    math.ceil(locked_ms / 1000),
                    strike,
                    attempt.address,
                )
        return math.ceil(out[0] / 1000)

    def succeeded(self, attempt: Attempt) -> None:
        """Free the attempt's slot and clear its name's failures: the secret was right."""
        self._end(attempt, clears_name=attempt.has_name)

    def released(self, attempt: Attempt) -> None:
        """Give the attempt back uncounted: it ended in a server error, not a wrong secret."""
        self._end(attempt, clears_name=False)

    def _end(self, attempt: Attempt, *, clears_name: bool) -> None:
        if not Rules.from_settings().failures or attempt.wait_s or not attempt.keys:
            return
        self._run(
            lambda store, now_ms: store.end(attempt.keys, attempt.flight, clears_name=clears_name)
        )

    def _begin(self, attempt: Attempt) -> Attempt:
        rules = Rules.from_settings()
        if not rules.failures or not attempt.keys:
            return attempt
        give_up_at = time.monotonic() + self.slot_wait_s
        pause_s = 0.005
        while True:
            wait_ms = self._run(
                lambda store, now_ms: store.begin(attempt.keys, attempt.flight, rules, now_ms)
            )
            if wait_ms == 0:
                return attempt
            if wait_ms > 0:
                return replace(attempt, wait_s=math.ceil(wait_ms / 1000))
            if time.monotonic() >= give_up_at:
                return replace(attempt, wait_s=BUSY_RETRY_S, busy=True)
            # A check takes milliseconds (a token) to a second (a password hash): poll soon,
            # then less often; the jitter keeps waiters from asking all at once.
            time.sleep(pause_s * random.uniform(0.5, 1.0))
            pause_s = min(pause_s * 2, 0.1)

    # -- operators

    def unlock_name(self, name: str) -> list[Cleared]:
        return self._clear([self.name_key(name)])

    def unlock_address(self, address: str) -> list[Cleared]:
        return self._clear(list(self.address_keys(address)))

    def unlock_all(self) -> list[Cleared]:
        return self._run(
            lambda store, now_ms: store.clear(store.keys(self.prefix + ":"), now_ms),
            fallback=False,
        )

    def _clear(self, keys: list[str]) -> list[Cleared]:
        # An operator must know whether the unlock reached the fleet: no silent fallback.
        return self._run(lambda store, now_ms: store.clear(keys, now_ms), fallback=False)

    # -- the store of the moment

    def _run(self, operation, *, fallback: bool = True):
        now_ms = int(self.clock() * 1000)
        url = settings.REDIS_URL
        if not url:
            return operation(self.local, now_ms)
        if not fallback or time.monotonic() >= self._down_until:
            try:
                result = operation(self._store(url), now_ms)
            except (redis.RedisError, OSError) as exc:
                if not fallback:
                    raise StoreDown(f"Redis unavailable ({type(exc).__name__})") from exc
                self._failed(exc)
            else:
                if self.degraded:
                    self.degraded = False
                    log.warning("Redis is back: sign-in throttling is shared again")
                return result
        return operation(self.local, now_ms)

    def _store(self, url: str) -> RedisStore:
        store = self._stores.get(url)
        if store is None:
            with self._stores_lock:
                store = self._stores.get(url)
                if store is None:
                    store = self._stores[url] = RedisStore(url)
        return store

    def _failed(self, exc: BaseException) -> None:
        self._down_until = time.monotonic() + RETRY_REDIS_AFTER_S
        if not self.degraded:
            self.degraded = True
            log.warning(
                "Redis unavailable (%s): sign-in throttling falls back to this process",
                type(exc).__name__,
            )


default = Throttle()
