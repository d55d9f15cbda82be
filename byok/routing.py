"""Team keys as a key pool (core/key_pool.py): a group's keys for one provider, round-robin.

- Who: the group whose pool it is, on a link the plan gave a team attempt (byok/payers.py).
- Order: round-robin over the usable keys, read once per attempt; a retry goes to the next
  usable key, or the same one when it is the last.
- A refusal: a 429 benches the key for max(Retry-After, 30 s), a 401/403 marks it failing
  for 10 minutes; the next key is tried. No usable key left: LM-3021.
- The bench: `tollgate:bench:{key_id}` holding the key's status, with a TTL, so every
  replica agrees; without Redis it is remembered in this process, on `clock` (tests move it).
  The database copy of a key's status is updated off the request path, for the admin pages.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta

from django.utils import timezone

from byok.models import TeamKey
from byok.payers import keys_exhausted_message
from byok.pools import Pool, PoolKey
from core import errors
from core.db import off_loop
from core.key_pool import Bench, KeyPool, NoKeyFree, Refusal
from core.shared_state import SharedState, SharedStateDown

PREFIX = "tollgate:bench:"
BENCH_429_MIN_S = 30.0
BENCH_AUTH_S = 600.0


def _record_status(key_id: int, status: str, seconds: float) -> None:
    TeamKey.objects.filter(pk=key_id).update(
        status=status, benched_until=timezone.now() + timedelta(seconds=seconds)
    )


class KeyRotation(KeyPool[Pool, PoolKey]):
    """The team keys' pool kind (one per process: its turns and per-process benches)."""

    def __init__(self, shared: SharedState, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(shared, clock=clock)

    def slot(self, pool: Pool) -> tuple[int, str]:
        return (pool.group_id, pool.provider)

    def bench_name(self, pool: Pool, key: PoolKey) -> str:
        return PREFIX + str(key.key_id)

    def bench_for(self, refusal: Refusal) -> Bench | None:
        if refusal.status == 429:
            return Bench(
                max(refusal.retry_after_s or 0, BENCH_429_MIN_S), TeamKey.Status.ACTIVE.value
            )
        if refusal.status in (401, 403):
            return Bench(BENCH_AUTH_S, TeamKey.Status.FAILING.value)
        return None

    async def benched_out(self, pool: Pool, key: PoolKey, bench: Bench, refusal: Refusal) -> None:
        self.in_background(
            asyncio.ensure_future(
                off_loop(_record_status)(key.key_id, str(bench.value), bench.seconds)
            )
        )

    def exhausted(self, pool: Pool, free: NoKeyFree, *, profile: str) -> errors.GatewayError:
        return errors.TeamKeysExhausted(keys_exhausted_message(profile))

    async def walk(self, pool: Pool, *, tokens: int) -> TeamWalk:
        return TeamWalk(self, pool, await self.candidates(pool))

    async def candidates(self, pool: Pool) -> list[PoolKey]:
        """Return the pool's usable keys, starting at the next key in round-robin order."""
        ordered = self.round_robin(pool, pool.keys)
        if not ordered:
            return []
        benched = await self._benched(pool, ordered)
        return [k for k in ordered if k.key_id not in benched]

    async def _benched(self, pool: Pool, keys: list[PoolKey]) -> set[int]:
        local = {k.key_id for k in keys if self.bench_left_here(pool, k) > 0}
        shared = self._shared
        if shared is None or not shared.available:
            return local
        names = [self.bench_name(pool, k) for k in keys]
        try:
            values = await shared.call(lambda r: r.mget(names))
        except SharedStateDown:
            return local
        return {k.key_id for k, v in zip(keys, values, strict=True) if v is not None}


class TeamWalk:
    """One team attempt's way through the usable keys read at its start."""

    def __init__(self, rotation: KeyRotation, pool: Pool, candidates: list[PoolKey]) -> None:
        self._rotation = rotation
        self._pool = pool
        self._candidates = candidates
        self._index = 0

    async def next(self) -> PoolKey | NoKeyFree:
        if self._index >= len(self._candidates):
            return NoKeyFree(benched=True, retry_after_s=BENCH_429_MIN_S)
        return self._rotation.started(self._pool, self._candidates[self._index])

    def refused(self, key: PoolKey) -> None:
        self._index += 1

    def failed(self, key: PoolKey) -> None:
        # The one retry goes to the next usable key, or the same one if it is the last.
        self._index = min(self._index + 1, len(self._candidates) - 1)
