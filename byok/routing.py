"""Which team key serves next: round-robin over usable keys, bench state shared fleet-wide.

A benched key is skipped until its bench lapses (Redis key with a TTL, so every replica
agrees); without Redis the bench is remembered in this process, on `clock` (tests move it).
The database copy of a key's status is updated off the request path, for the admin pages.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from datetime import timedelta

from django.utils import timezone

from byok.models import TeamKey
from byok.pools import Pool, PoolKey
from core.db import off_loop
from core.shared_state import SharedState, SharedStateDown

log = logging.getLogger(__name__)
PREFIX = "tollgate:bench:"


def _record_status(key_id: int, status: str, seconds: float) -> None:
    TeamKey.objects.filter(pk=key_id).update(
        status=status, benched_until=timezone.now() + timedelta(seconds=seconds)
    )


class KeyRotation:
    def __init__(self, shared: SharedState, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._shared = shared
        self._clock = clock  # seconds; only the per-process bench reads it
        self._turns: dict[tuple[int, str], itertools.count] = {}
        self._local_bench: dict[int, float] = {}
        self._background: set[asyncio.Task] = set()

    async def candidates(self, pool: Pool) -> list[PoolKey]:
        """Return the pool's usable keys, starting at the next key in round-robin order."""
        keys = pool.keys
        if not keys:
            return []
        turn = next(self._turns.setdefault((pool.group_id, pool.provider), itertools.count()))
        start = turn % len(keys)
        ordered = keys[start:] + keys[:start]
        benched = await self._benched([k.key_id for k in ordered])
        return [k for k in ordered if k.key_id not in benched]

    async def bench(self, key: PoolKey, seconds: float) -> None:
        await self._set_bench(key, seconds, TeamKey.Status.ACTIVE)

    async def mark_failing(self, key: PoolKey, seconds: float) -> None:
        await self._set_bench(key, seconds, TeamKey.Status.FAILING)

    async def _benched(self, key_ids: list[int]) -> set[int]:
        now = self._clock()
        local = {k for k in key_ids if self._local_bench.get(k, 0) > now}
        if not self._shared.available:
            return local
        try:
            values = await self._shared.call(lambda r: r.mget([PREFIX + str(k) for k in key_ids]))
        except SharedStateDown:
            return local
        return {k for k, v in zip(key_ids, values, strict=True) if v is not None}

    async def _set_bench(self, key: PoolKey, seconds: float, status: str) -> None:
        self._local_bench[key.key_id] = self._clock() + seconds
        if self._shared.available:
            try:
                await self._shared.call(
                    lambda r: r.set(PREFIX + str(key.key_id), status, px=int(seconds * 1000))
                )
            except SharedStateDown:
                pass
        task = asyncio.create_task(off_loop(_record_status)(key.key_id, status, seconds))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
