"""Which platform key of a profile serves next: its strategy, its vendor limits, its bench.

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
import time
from collections import defaultdict
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import TypeVar, cast

from core import metrics
from core.config import tollgate
from core.db import off_loop
from core.shared_state import Script, SharedState, SharedStateDown
from gateway.adapters.base import ProviderError
from providers.models import KeyStrategy
from providers.services import platform_key_failed

log = logging.getLogger(__name__)
T = TypeVar("T")

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
class KeyPool:
    """A profile's platform keys and how they share its calls."""

    profile: str
    strategy: str
    keys: tuple[PlatformCredential, ...]


@dataclass(frozen=True, slots=True)
class NoKeyFree:
    """Why no key of a pool could take a call, and when one may again."""

    benched: bool  # every key benched (else: the limits are full)
    retry_after_s: float


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


class PlatformKeys:
    """Picks platform keys for calls (one per replica: its turns and in-flight counts)."""

    def __init__(self, shared: SharedState, *, clock: Callable[[], float] = time.time) -> None:
        self._shared = shared
        self._clock = clock
        self._turns: dict[str, int] = defaultdict(int)
        self._current: dict[tuple[str, str], int] = defaultdict(int)  # smooth weighted RR
        self._in_flight: dict[tuple[str, str], int] = defaultdict(int)
        self._local_bench: dict[tuple[str, str], float] = {}
        self._local_counts: dict[tuple[str, str], list[int]] = {}  # this window's, per key
        self._local_window = 0
        self._background: set[asyncio.Future] = set()

    def order(self, pool: KeyPool) -> list[PlatformCredential]:
        """Return the pool's keys in the order its strategy tries them for the next call."""
        keys = list(pool.keys)
        if not keys:
            return keys
        if pool.strategy == KeyStrategy.WEIGHTED:
            return self._weighted(pool)
        turn = self._turns[pool.profile]
        self._turns[pool.profile] = turn + 1
        start = turn % len(keys)
        keys = keys[start:] + keys[:start]
        if pool.strategy == KeyStrategy.LEAST_IN_FLIGHT:
            keys.sort(key=lambda k: self._in_flight[(pool.profile, k.label)])  # stable
        return keys

    def _weighted(self, pool: KeyPool) -> list[PlatformCredential]:
        total = sum(k.weight for k in pool.keys)
        for k in pool.keys:
            self._current[(pool.profile, k.label)] += k.weight
        ordered = sorted(pool.keys, key=lambda k: -self._current[(pool.profile, k.label)])
        self._current[(pool.profile, ordered[0].label)] -= total
        return ordered

    async def pick(
        self, pool: KeyPool, *, tokens: int, skip: frozenset[str] = frozenset()
    ) -> PlatformCredential | NoKeyFree:
        """Take the first usable key in strategy order for a call of `tokens` (counted
        against its limits), or say why none is free."""
        candidates = [k for k in self.order(pool) if k.label not in skip]
        if not candidates:
            return NoKeyFree(benched=True, retry_after_s=BENCH_429_DEFAULT_S)
        window = int(self._clock() // WINDOW_S)
        if self._shared.available:
            try:
                return await self._pick_shared(pool, candidates, tokens, window)
            except SharedStateDown:
                pass
        return self._pick_local(pool, candidates, tokens, window)

    async def _pick_shared(
        self, pool: KeyPool, candidates: list[PlatformCredential], tokens: int, window: int
    ) -> PlatformCredential | NoKeyFree:
        keys: list[str] = []
        args: list[int] = [WINDOW_S * 2, tokens]
        for k in candidates:
            stem = f"{PREFIX}{pool.profile}:{k.label}"
            keys += [f"{stem}:bench", f"{stem}:r:{window}", f"{stem}:t:{window}"]
            args += [k.rpm, k.tpm]
        [reply] = await self._shared.run(PICK.command(keys, args))
        if reply[0]:
            return self._started(pool, candidates[reply[0] - 1])
        all_benched, wait_ms = bool(reply[1]), reply[2]
        if all_benched:
            return NoKeyFree(True, wait_ms / 1000 if wait_ms > 0 else BENCH_429_DEFAULT_S)
        return NoKeyFree(False, self._window_left(window))

    def _pick_local(
        self, pool: KeyPool, candidates: list[PlatformCredential], tokens: int, window: int
    ) -> PlatformCredential | NoKeyFree:
        now = self._clock()
        benched = [
            self._local_bench[(pool.profile, k.label)] - now
            for k in candidates
            if self._local_bench.get((pool.profile, k.label), 0) > now
        ]
        if window != self._local_window:  # a new minute: the last one's counts are done
            self._local_window, self._local_counts = window, {}
        for k in candidates:
            if self._local_bench.get((pool.profile, k.label), 0) > now:
                continue
            counts = self._local_counts.setdefault((pool.profile, k.label), [0, 0])
            if (k.rpm and counts[0] >= k.rpm) or (k.tpm and counts[1] >= k.tpm):
                continue
            counts[0] += 1
            counts[1] += tokens
            return self._started(pool, k)
        if len(benched) == len(candidates):
            return NoKeyFree(True, min(benched))
        return NoKeyFree(False, self._window_left(window))

    def _window_left(self, window: int) -> float:
        return max(1.0, (window + 1) * WINDOW_S - self._clock())

    def _started(self, pool: KeyPool, key: PlatformCredential) -> PlatformCredential:
        self._in_flight[(pool.profile, key.label)] += 1
        return key

    def done(self, pool: KeyPool, key: PlatformCredential) -> None:
        """Say a call `pick` gave `key` is over (served or failed)."""
        self._in_flight[(pool.profile, key.label)] -= 1

    def in_flight_until_done(self, pool: KeyPool, key: PlatformCredential, answer: T) -> T:
        """Return a call's answer, `key` counted in flight until it is over: a whole answer
        is over now; a stream (an async generator) once it ends or is closed."""
        if not isinstance(answer, AsyncGenerator):
            self.done(pool, key)
            return answer
        return cast(T, self._held(pool, key, answer))

    async def _held(
        self, pool: KeyPool, key: PlatformCredential, stream: AsyncGenerator
    ) -> AsyncGenerator:
        try:
            async for chunks in stream:
                yield chunks
        finally:
            self.done(pool, key)
            await stream.aclose()

    async def set_aside(self, pool: KeyPool, key: PlatformCredential, exc: ProviderError) -> bool:
        """Bench a key the vendor refused (429: for its Retry-After; 401 / 403: taken out) and
        say so: the call goes to the next key, at no try's cost."""
        if exc.status == 429:
            await self.bench(pool, key, exc.retry_after_s or BENCH_429_DEFAULT_S)
            return True
        if exc.status in (401, 403):
            await self.take_out(pool, key, exc.status)
            return True
        return False

    async def bench(self, pool: KeyPool, key: PlatformCredential, seconds: float) -> None:
        """Keep `key` out of every replica's picks for `seconds` (a vendor's 429)."""
        self._local_bench[(pool.profile, key.label)] = self._clock() + seconds
        if self._shared.available:
            try:
                await self._shared.run(
                    (
                        "SET",
                        f"{PREFIX}{pool.profile}:{key.label}:bench",
                        1,
                        "PX",
                        int(seconds * 1000),
                    )
                )
            except SharedStateDown:
                pass

    async def take_out(self, pool: KeyPool, key: PlatformCredential, status: int) -> None:
        """The vendor refused `key` itself (401 / 403): bench it fleet-wide now, mark it failing
        in the database (off the request path) and tell the operator."""
        await self.bench(pool, key, 2.0 * tollgate().config_reload_s)
        log.error(
            "platform key %s of profile %s refused by the vendor (HTTP %s): taken out until "
            "an operator puts it back",
            key.label,
            pool.profile,
            status,
        )
        metrics.PLATFORM_KEY_REFUSED.labels(pool.profile, key.label, str(status)).inc()
        if key.key_id:
            task = asyncio.ensure_future(off_loop(platform_key_failed)(key.key_id, status))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
