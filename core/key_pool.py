"""A pool of keys that take turns serving calls: one type for team keys and platform keys.

The shared rules, here once:
- a call walks the pool's usable keys in the order its kind gives (`KeyWalk`): a key is
  usable when it is not benched (and, for kinds with vendor limits, has room);
- a key the vendor refuses (401, 403, 429) is set aside as its kind says (benched for a
  while, or taken out) and the call goes on to the next key, at no try's cost;
- a bench is a Redis key with a TTL, so every replica agrees; this process remembers it too,
  on `clock` (tests move it), and reads its own copy while Redis is away;
- a key is in flight from its pick until its call is over (a stream: until it ends);
- no usable key left: `NoKeyFree`, which the kind turns into its refusal.

What differs is the kind's policy, a subclass: who uses it and its bench store
(byok/routing.py `KeyRotation`, a group's team keys; gateway/platform_keys.py `PlatformKeys`,
a profile's platform keys, and `OwnKey`, a profile's one key), how it orders keys and walks
them, and what a refusal means. Who may use which pool is the plan's rule (byok/payers.py);
the chain runner (gateway/chain.py) walks every kind with one loop.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncGenerator, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, cast

from core.errors import GatewayError
from core.shared_state import SharedState, SharedStateDown

T = TypeVar("T")
P = TypeVar("P")  # the kind's pool of keys (byok.pools.Pool, gateway.platform_keys.PlatformPool)


class PooledKey(Protocol):
    """What the shared rules read of a key: its label (never the key) and its secret."""

    @property
    def label(self) -> str: ...
    @property
    def secret(self) -> str | None: ...


K = TypeVar("K", bound=PooledKey)


class Refusal(Protocol):
    """What the rules read of a vendor's failure (gateway.adapters.base.ProviderError)."""

    @property
    def status(self) -> int | None: ...
    @property
    def retry_after_s(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class NoKeyFree:
    """Why no key of a pool could take a call, and when one may again."""

    benched: bool  # every key benched (else: the limits are full)
    retry_after_s: float


@dataclass(frozen=True, slots=True)
class Bench:
    """What a vendor's refusal of a key means: out of every pick for `seconds`, the bench
    holding `value` (the key's status, where the kind keeps one); `taken_out`: the kind
    also tells its operator (a key refused as such, not only for the moment)."""

    seconds: float
    value: str | int = 1
    taken_out: bool = False


class KeyWalk(Protocol[K]):
    """One attempt's way through a pool's keys."""

    async def next(self) -> K | NoKeyFree:
        """Return the key the next call uses, or why there is none."""

    def refused(self, key: K) -> None:
        """Say the vendor refused `key` (set aside): the walk passes it by from now on."""

    def failed(self, key: K) -> None:
        """Say a call on `key` failed and is to be tried once more."""


class KeyPool(Generic[P, K]):
    """A kind of keys' turns, benches and in-flight counts in this replica (one per kind per
    process). A subclass is the kind's policy: it fills in the hooks below."""

    # Whether a refused key's vendor error is the attempt's when no key is left (a platform
    # key refused is the platform's failure), or the pool's own refusal answers (a team key
    # refused is the key's problem: LM-3021).
    refusal_fails_attempt = False
    # The attempt trail's line when no key is free, if the kind records one.
    busy_outcome: str | None = None
    # Whether the kind keeps its keys' in-flight counts (a kind with one key that no rule
    # reads them for skips the count, and a stream is handed on without a wrapper).
    counts_in_flight = True

    def __init__(self, shared: SharedState | None, *, clock: Callable[[], float]) -> None:
        self._shared = shared  # None: a kind that never benches shares nothing
        self._clock = clock  # seconds: the per-process bench reads it (and a kind's windows)
        self._turns: dict[Hashable, int] = defaultdict(int)
        self._in_flight: dict[tuple[Hashable, str], int] = defaultdict(int)
        self._local_bench: dict[str, float] = {}  # by bench name: when it lapses
        self._background: set[asyncio.Future] = set()

    # ------------------------------------------------------------- the kind's policy

    def slot(self, pool: P) -> Hashable:
        """Name the pool among the kind's (its turns and in-flight counts live under it)."""
        raise NotImplementedError

    def bench_name(self, pool: P, key: K) -> str:
        """Name the Redis key that holds `key`'s bench (its format is a contract)."""
        raise NotImplementedError

    def bench_for(self, refusal: Refusal) -> Bench | None:
        """Say what the vendor's refusal of a key means, or None: not the key's refusal."""
        raise NotImplementedError

    async def walk(self, pool: P, *, tokens: int) -> KeyWalk[K]:
        """Start one attempt's walk over the pool (`tokens`: what its call promises a key)."""
        raise NotImplementedError

    def exhausted(self, pool: P, free: NoKeyFree, *, profile: str) -> GatewayError:
        """Return the pool's refusal when no key is free for `profile`'s attempt."""
        raise NotImplementedError

    async def benched_out(self, pool: P, key: K, bench: Bench, refusal: Refusal) -> None:
        """Do what else the kind does once `key` is benched (its status row, its operator)."""

    # ------------------------------------------------------------- the shared rules

    def round_robin(self, pool: P, keys: Sequence[K]) -> list[K]:
        """Return `keys` starting one further than the pool's last call did."""
        if not keys:
            return []
        slot = self.slot(pool)
        turn = self._turns[slot]
        self._turns[slot] = turn + 1
        start = turn % len(keys)
        return [*keys[start:], *keys[:start]]

    async def set_aside(self, pool: P, key: K, refusal: Refusal) -> bool:
        """Bench a key the vendor refused, as the kind says, and say so: the call goes to the
        next key, at no try's cost."""
        bench = self.bench_for(refusal)
        if bench is None:
            return False
        await self.bench(pool, key, bench.seconds, value=bench.value)
        await self.benched_out(pool, key, bench, refusal)
        return True

    async def bench(self, pool: P, key: K, seconds: float, *, value: str | int = 1) -> None:
        """Keep `key` out of every replica's picks for `seconds`."""
        name = self.bench_name(pool, key)
        self._local_bench[name] = self._clock() + seconds
        if self._shared is not None and self._shared.available:
            try:
                await self._shared.run(("SET", name, value, "PX", int(seconds * 1000)))
            except SharedStateDown:
                pass

    def bench_left_here(self, pool: P, key: K) -> float:
        """Return how long `key` stays benched as this process remembers it (0: not)."""
        return max(0.0, self._local_bench.get(self.bench_name(pool, key), 0.0) - self._clock())

    def in_background(self, work: asyncio.Future) -> None:
        """Keep work off the request path alive until it is done."""
        self._background.add(work)
        work.add_done_callback(self._background.discard)

    def in_flight(self, pool: P, key: K) -> int:
        """Return how many calls `key` has in flight in this replica."""
        return self._in_flight[(self.slot(pool), key.label)]

    def started(self, pool: P, key: K) -> K:
        """Count a call on `key` in flight; return the key."""
        if self.counts_in_flight:
            self._in_flight[(self.slot(pool), key.label)] += 1
        return key

    def done(self, pool: P, key: K) -> None:
        """Say a call a walk gave `key` is over (served or failed)."""
        if self.counts_in_flight:
            self._in_flight[(self.slot(pool), key.label)] -= 1

    def in_flight_until_done(self, pool: P, key: K, answer: T) -> T:
        """Return a call's answer, `key` counted in flight until it is over: a whole answer
        is over now; a stream (an async generator) once it ends or is closed."""
        if not self.counts_in_flight:
            return answer
        if not isinstance(answer, AsyncGenerator):
            self.done(pool, key)
            return answer
        return cast(T, self._held(pool, key, answer))

    async def _held(self, pool: P, key: K, stream: AsyncGenerator) -> AsyncGenerator:
        try:
            async for chunks in stream:
                yield chunks
        finally:
            self.done(pool, key)
            await stream.aclose()
