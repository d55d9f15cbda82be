"""Platform keys as a key pool (core/key_pool.py): a profile's keys, its strategy, its limits.

Who: any request the plan gives a platform attempt on the profile (byok/payers.py).

A profile with platform keys of its own (providers.models.PlatformKey) spreads its calls over
the usable ones, in the order its strategy gives:
- round robin: each call starts one key further;
- least in flight: the key with the fewest calls in flight in this replica first (ties in
  round-robin order);
- weighted: smooth weighted round robin (each key's share is its weight over the total, and
  the keys interleave rather than come in runs).
The order is this replica's; what a key may take is the fleet's. A key is usable when it is
not benched and its vendor limits have room: its requests this minute under its rpm, and the
tokens promised to it this minute under its tpm. A call promises the vendor what the vendor
itself counts against the key before answering: the prompt's bound plus the output cap (so
the key is never driven into the vendor's 429). Bench and counts live in Redis (one script,
one round trip per pick); without Redis each replica counts alone.

A key the vendor answers 429 is benched for its Retry-After (BENCH_429_DEFAULT_S without
one); one answered 401 / 403 is taken out: marked failing in the database (the catalog loads
no failing key: an operator puts it back), logged at ERROR, counted
(`tollgate_platform_key_refused_total`) and written to the audit trail, and benched
fleet-wide at once until every replica has reloaded without it (two reload periods: the
bench must not outlive an operator putting the key back). The profile's own key has no row
to mark: it comes back after that bench, and is refused and benched again until fixed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from core import errors, metrics
from core.config import tollgate
from core.db import off_loop
from core.key_pool import Bench, KeyPool, NoKeyFree, Refusal
from core.shared_state import Script, SharedState, SharedStateDown
from providers.models import KeyStrategy
from providers.services import platform_key_failed

log = logging.getLogger(__name__)

PREFIX = "tollgate:pk:"
WINDOW_S = 60
BENCH_429_DEFAULT_S = 30.0


@dataclass(frozen=True, slots=True)
class PlatformCredential:
    """One platform key of a profile, unsealed, with the vendor's limits for it."""

    key_id: int
    label: str
    secret: str = field(repr=False)
    weight: int = 1
    rpm: int = 0  # 0: no limit
    tpm: int = 0


@dataclass(frozen=True, slots=True)
class PlatformPool:
    """A profile's platform keys and how they share its calls."""

    profile: str
    strategy: str
    keys: tuple[PlatformCredential, ...]


@dataclass(frozen=True, slots=True)
class OwnCredential:
    """A profile's one platform key, when it has no pool (None: a keyless vendor)."""

    profile: str
    secret: str | None = field(repr=False)
    label: str = ""  # the trail names no key: the profile is its name


# Per candidate: its bench key, its requests and its tokens this minute. ARGV: the window's
# TTL, the call's tokens, then per candidate its rpm and tpm. Returns {index} of the key that
# takes the call (counted), or {0, all benched (1 / 0), the soonest wait in ms}.
PICK = Script("""
local ttl, tokens = tonumber(ARGV[1]), tonumber(ARGV[2])
local n = #KEYS / 3
local benched, wait = 0, -1
for i = 1, n do
  local bench, reqs, toks = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local rpm, tpm = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i])
  local left = redis.call('PTTL', bench)
  if left > 0 or left == -1 then
    benched = benched + 1
    if left > 0 and (wait < 0 or left < wait) then wait = left end
  elseif (rpm == 0 or tonumber(redis.call('GET', reqs) or '0') < rpm)
      and (tpm == 0 or tonumber(redis.call('GET', toks) or '0') < tpm) then
    if redis.call('INCR', reqs) == 1 then redis.call('EXPIRE', reqs, ttl) end
    if redis.call('INCRBY', toks, tokens) == tokens then redis.call('EXPIRE', toks, ttl) end
    return {i}
  end
end
return {0, benched == n and 1 or 0, wait}
""")


class PlatformKeys(KeyPool[PlatformPool, PlatformCredential]):
    """The platform keys' pool kind (one per replica: its turns and in-flight counts)."""

    refusal_fails_attempt = True  # a platform key refused is the platform's failure
    busy_outcome = "keys_busy"

    def __init__(self, shared: SharedState, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(shared, clock=clock)
        self._current: dict[tuple[str, str], int] = defaultdict(int)  # smooth weighted RR
        self._local_counts: dict[tuple[str, str], list[int]] = {}  # this window's, per key
        self._local_window = 0

    def slot(self, pool: PlatformPool) -> str:
        return pool.profile

    def bench_name(self, pool: PlatformPool, key: PlatformCredential) -> str:
        return f"{PREFIX}{pool.profile}:{key.label}:bench"

    def bench_for(self, refusal: Refusal) -> Bench | None:
        if refusal.status == 429:
            return Bench(refusal.retry_after_s or BENCH_429_DEFAULT_S)
        if refusal.status in (401, 403):
            # Until every replica has reloaded without it (two reload periods): the bench
            # must not outlive an operator putting the key back.
            return Bench(2.0 * tollgate().config_reload_s, taken_out=True)
        return None

    async def benched_out(
        self, pool: PlatformPool, key: PlatformCredential, bench: Bench, refusal: Refusal
    ) -> None:
        """A key taken out: marked failing in the database (off the request path), logged,
        counted, audited."""
        status = refusal.status
        if not bench.taken_out or status is None:  # taken out on a 401 / 403 only
            return
        log.error(
            "platform key %s of profile %s refused by the vendor (HTTP %s): taken out until "
            "an operator puts it back",
            key.label,
            pool.profile,
            status,
        )
        metrics.PLATFORM_KEY_REFUSED.labels(pool.profile, key.label, str(status)).inc()
        if key.key_id:
            self.in_background(
                asyncio.ensure_future(off_loop(platform_key_failed)(key.key_id, status))
            )

    def exhausted(
        self, pool: PlatformPool, free: NoKeyFree, *, profile: str
    ) -> errors.GatewayError:
        return errors.UpstreamRateLimited(
            f"Every platform key of {pool.profile} is "
            + ("benched." if free.benched else "at its vendor limits."),
            retry_after_s=math.ceil(free.retry_after_s),
        )

    async def walk(self, pool: PlatformPool, *, tokens: int) -> PlatformWalk:
        return PlatformWalk(self, pool, tokens)

    def order(self, pool: PlatformPool) -> list[PlatformCredential]:
        """Return the pool's keys in the order its strategy tries them for the next call."""
        if pool.strategy == KeyStrategy.WEIGHTED and pool.keys:
            return self._weighted(pool)
        keys = self.round_robin(pool, pool.keys)
        if pool.strategy == KeyStrategy.LEAST_IN_FLIGHT:
            keys.sort(key=lambda k: self.in_flight(pool, k))  # stable
        return keys

    def _weighted(self, pool: PlatformPool) -> list[PlatformCredential]:
        total = sum(k.weight for k in pool.keys)
        for k in pool.keys:
            self._current[(pool.profile, k.label)] += k.weight
        ordered = sorted(pool.keys, key=lambda k: -self._current[(pool.profile, k.label)])
        self._current[(pool.profile, ordered[0].label)] -= total
        return ordered

    async def pick(
        self, pool: PlatformPool, *, tokens: int, skip: frozenset[str] = frozenset()
    ) -> PlatformCredential | NoKeyFree:
        """Take the first usable key in strategy order for a call of `tokens` (counted
        against its limits and in flight), or say why none is free."""
        candidates = [k for k in self.order(pool) if k.label not in skip]
        if not candidates:
            return NoKeyFree(benched=True, retry_after_s=BENCH_429_DEFAULT_S)
        window = int(self._clock() // WINDOW_S)
        if self._shared is not None and self._shared.available:
            try:
                return await self._pick_shared(pool, candidates, tokens, window)
            except SharedStateDown:
                pass
        return self._pick_local(pool, candidates, tokens, window)

    async def _pick_shared(
        self, pool: PlatformPool, candidates: list[PlatformCredential], tokens: int, window: int
    ) -> PlatformCredential | NoKeyFree:
        keys: list[str] = []
        args: list[int] = [WINDOW_S * 2, tokens]
        for k in candidates:
            stem = f"{PREFIX}{pool.profile}:{k.label}"
            keys += [f"{stem}:bench", f"{stem}:r:{window}", f"{stem}:t:{window}"]
            args += [k.rpm, k.tpm]
        assert self._shared is not None  # asked only when Redis is there
        [reply] = await self._shared.run(PICK.command(keys, args))
        if reply[0]:
            return self.started(pool, candidates[reply[0] - 1])
        all_benched, wait_ms = bool(reply[1]), reply[2]
        if all_benched:
            return NoKeyFree(True, wait_ms / 1000 if wait_ms > 0 else BENCH_429_DEFAULT_S)
        return NoKeyFree(False, self._window_left(window))

    def _pick_local(
        self, pool: PlatformPool, candidates: list[PlatformCredential], tokens: int, window: int
    ) -> PlatformCredential | NoKeyFree:
        benched = [left for k in candidates if (left := self.bench_left_here(pool, k)) > 0]
        if window != self._local_window:  # a new minute: the last one's counts are done
            self._local_window, self._local_counts = window, {}
        for k in candidates:
            if self.bench_left_here(pool, k) > 0:
                continue
            counts = self._local_counts.setdefault((pool.profile, k.label), [0, 0])
            if (k.rpm and counts[0] >= k.rpm) or (k.tpm and counts[1] >= k.tpm):
                continue
            counts[0] += 1
            counts[1] += tokens
            return self.started(pool, k)
        if len(benched) == len(candidates):
            return NoKeyFree(True, min(benched))
        return NoKeyFree(False, self._window_left(window))

    def _window_left(self, window: int) -> float:
        return max(1.0, (window + 1) * WINDOW_S - self._clock())


class PlatformWalk:
    """One platform attempt's way through its pool: each call picks afresh in strategy order,
    passing by the keys the vendor refused; a retry may land on any usable key."""

    def __init__(self, keys: PlatformKeys, pool: PlatformPool, tokens: int) -> None:
        self._keys = keys
        self._pool = pool
        self._tokens = tokens
        self._refused: set[str] = set()

    async def next(self) -> PlatformCredential | NoKeyFree:
        return await self._keys.pick(self._pool, tokens=self._tokens, skip=frozenset(self._refused))

    def refused(self, key: PlatformCredential) -> None:
        self._refused.add(key.label)

    def failed(self, key: PlatformCredential) -> None:
        pass


class OwnKey(KeyPool[OwnCredential, OwnCredential]):
    """A profile's one platform key as a pool of one: never benched (a refusal is the
    attempt's failure), every try on it, its calls not counted (one key: nothing to pick by)."""

    counts_in_flight = False

    def __init__(self) -> None:
        super().__init__(None, clock=time.time)

    def slot(self, pool: OwnCredential) -> str:
        return pool.profile

    def bench_for(self, refusal: Refusal) -> Bench | None:
        return None

    async def walk(self, pool: OwnCredential, *, tokens: int) -> OwnWalk:
        return OwnWalk(self, pool)

    def exhausted(
        self, pool: OwnCredential, free: NoKeyFree, *, profile: str
    ) -> errors.GatewayError:
        raise AssertionError("a profile's own key is never benched")


class OwnWalk:
    def __init__(self, keys: OwnKey, key: OwnCredential) -> None:
        self._keys = keys
        self._key = key

    async def next(self) -> OwnCredential:
        return self._keys.started(self._key, self._key)

    def refused(self, key: OwnCredential) -> None:
        raise AssertionError("a profile's own key is never set aside")

    def failed(self, key: OwnCredential) -> None:
        pass
