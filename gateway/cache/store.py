"""Where cached answers live: Redis, shared by every replica, or this process's memory when
there is no Redis (`make run`'s embedded defaults). The same rules for both: a key's value
expires at its TTL, memory is capped, the least recently used answers go first, and a
tenant's purge drops its own keys only (core/response_cache.py).

Redis serves the cache best as an instance of its own (TOLLGATE_CACHE_REDIS_URL): started
with that URL, the gateway sets its `maxmemory` to TOLLGATE_CACHE_MEMORY_MB and its policy to
`allkeys-lru`. On the Redis the limits use, the cache leaves the server's settings alone (an
LRU policy there could evict a rate window); its keys carry TTLs, so `volatile-lru` suits.

A store that fails answers like an empty one (`StoreDown`, which the caller counts and treats
as a miss): a request is never refused because its cache is down.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from core.shared_state import SharedState, SharedStateDown

log = logging.getLogger(__name__)
MB = 1024 * 1024


class StoreDown(Exception):
    """The store could not be reached: the request goes on as a miss."""


class Store(Protocol):
    async def get(self, key: str) -> bytes | None: ...

    async def put(self, key: str, value: bytes, ttl_s: int) -> None: ...


class RedisStore:
    """Answers in Redis: one GET per lookup and one SET per answer kept, on the pipelined
    connection the request path already uses."""

    def __init__(self, shared: SharedState) -> None:
        self.shared = shared

    async def get(self, key: str) -> bytes | None:
        if not self.shared.available:
            raise StoreDown()
        try:
            [value] = await self.shared.run(("GET", key))
        except SharedStateDown:
            raise StoreDown() from None
        return value

    async def put(self, key: str, value: bytes, ttl_s: int) -> None:
        if not self.shared.available:
            raise StoreDown()
        try:
            await self.shared.run(("SET", key, value, "EX", ttl_s))
        except SharedStateDown:
            raise StoreDown() from None

    async def cap_memory(self, megabytes: int) -> None:
        """Cap a cache Redis of its own and let it evict the least recently used answers."""
        try:
            await self.shared.call(lambda client: client.config_set("maxmemory", f"{megabytes}mb"))
            await self.shared.call(
                lambda client: client.config_set("maxmemory-policy", "allkeys-lru")
            )
        except Exception as exc:  # a managed Redis may refuse CONFIG: its operator sets it
            log.warning("response cache: could not cap the cache Redis (%s)", type(exc).__name__)


class MemoryStore:
    """Answers in this process, least recently used dropped first past the byte cap.

    A purge may come from a control-plane thread of the same process (the embedded run
    serves both planes): a lock keeps the two from tearing the order or the byte count.
    """

    def __init__(self, *, cap_bytes: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.cap_bytes = cap_bytes
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._lock = threading.Lock()
        self.bytes = 0

    async def get(self, key: str) -> bytes | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            expires, value = found
            if self._clock() >= expires:
                self._drop(key)
                return None
            self._entries.move_to_end(key)
            return value

    async def put(self, key: str, value: bytes, ttl_s: int) -> None:
        if len(value) > self.cap_bytes:
            return
        with self._lock:
            if key in self._entries:
                self._drop(key)
            self._entries[key] = (self._clock() + ttl_s, value)
            self.bytes += len(value)
            while self.bytes > self.cap_bytes:
                self._drop(next(iter(self._entries)))

    def purge_now(self, prefix: str) -> int:
        """Drop every key under `prefix`, from any thread; return how many went."""
        with self._lock:
            keys = [key for key in self._entries if key.startswith(prefix)]
            for key in keys:
                self._drop(key)
        return len(keys)

    def _drop(self, key: str) -> None:
        _, value = self._entries.pop(key)
        self.bytes -= len(value)
