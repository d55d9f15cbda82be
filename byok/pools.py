"""Team key pools held in memory: the request path never reads keys from the database.

Loaded whole off the request path (at start, on a bus message, periodically), unsealed once
into memory. DELETE of a key evicts it here on every replica before the API answers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from byok.models import KeyPool
from core.sealing import SealBroken, unseal

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PoolKey:
    key_id: int
    label: str
    secret: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class Pool:
    group_id: int
    provider: str
    fallback: bool
    keys: tuple[PoolKey, ...]


def key_binding(*, group_id: int, provider: str, key_id: int) -> str:
    """Name the row a team key is sealed to: a copy elsewhere does not open."""
    return f"teamkey:{group_id}:{provider}:{key_id}"


def load_pools() -> dict[tuple[int, str], Pool]:
    """Read every pool with its keys, unsealed (sync ORM: call from a thread)."""
    pools: dict[tuple[int, str], Pool] = {}
    for row in KeyPool.objects.prefetch_related("keys"):
        keys = []
        for key in sorted(row.keys.all(), key=lambda k: k.pk):
            try:
                secret = unseal(
                    key.sealed,
                    version=key.seal_version,
                    bound_to=key_binding(
                        group_id=row.group_id, provider=row.provider, key_id=key.pk
                    ),
                )
            except SealBroken:
                log.error("team key %s does not open for its row; left out", key.pk)
                continue
            keys.append(PoolKey(key_id=key.pk, label=key.label, secret=secret))
        pools[(row.group_id, row.provider)] = Pool(
            group_id=row.group_id, provider=row.provider, fallback=row.fallback, keys=tuple(keys)
        )
    return pools


class PoolRegistry:
    def __init__(self) -> None:
        self._pools: dict[tuple[int, str], Pool] = {}

    def replace(self, pools: dict[tuple[int, str], Pool]) -> None:
        self._pools = pools

    def get(self, group_id: int, provider: str) -> Pool | None:
        """Return the group's pool for a provider, even with no key left in it.

        An emptied pool still decides: with fallback off it answers LM-3021 rather than
        letting the group's traffic silently reach the platform's keys.
        """
        return self._pools.get((group_id, provider))

    def fallback_of(self, group_id: int, provider: str) -> bool | None:
        pool = self._pools.get((group_id, provider))
        return pool.fallback if pool is not None else None

    def evict_key(self, payload: dict) -> None:
        key_id = payload.get("key_id")
        for slot, pool in list(self._pools.items()):
            if any(k.key_id == key_id for k in pool.keys):
                kept = tuple(k for k in pool.keys if k.key_id != key_id)
                self._pools[slot] = Pool(pool.group_id, pool.provider, pool.fallback, kept)
