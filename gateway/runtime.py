"""One gateway process's long-lived parts: the pooled upstream client, the in-memory config,
caches, shared state, and the background tasks that keep them fresh.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable

import aiohttp

from billing.escrow import Escrow
from byok.pools import PoolRegistry, load_pools
from byok.routing import KeyRotation
from core import bus, tracing
from core.config import tollgate
from core.db import off_loop
from core.response_cache import account_prefix
from core.shared_state import SharedState
from core.sqlexec import Database
from gateway.adapters.client import VendorClient
from gateway.auth import PrincipalCache
from gateway.breakers import BreakerBoard
from gateway.cache.stage import ResponseCache
from gateway.cache.store import MB, MemoryStore, RedisStore, Store
from gateway.catalog import EMPTY, Catalog, load_catalog
from gateway.limits import Limiter
from gateway.orchestrator import Orchestrator
from gateway.platform_keys import PlatformKeys
from gateway.web.orchestrator import AcquisitionOrchestrator
from gateway.web.units import DailyUnits
from usage.writer import UsageWriter

log = logging.getLogger(__name__)
# The cyclic collector's thresholds once startup is frozen (see `start`).
GC_THRESHOLDS = (20_000, 20, 20)


class Runtime:
    """The process's parts, built once by `start` (these are set from then on)."""

    session: aiohttp.ClientSession  # web acquisition and guard hooks' calls
    vendors: VendorClient  # model vendors' calls: the hot path's one client
    shared: SharedState
    breakers: BreakerBoard
    keys: KeyRotation
    limiter: Limiter
    platform_keys: PlatformKeys
    db: Database  # the request path's database (asyncpg on PostgreSQL)
    escrow: Escrow
    orchestrator: Orchestrator
    web: AcquisitionOrchestrator  # web acquisition's (gateway/web/)
    usage: UsageWriter
    cache: ResponseCache  # the response cache (gateway/cache/)

    def __init__(self) -> None:
        self.started = False
        self._starting: asyncio.Lock | None = None
        self.catalog: Catalog = EMPTY
        self.pools = PoolRegistry()
        self.principals = PrincipalCache()
        self._tasks: list[asyncio.Task] = []
        self._subscribed = False
        self._cache_shared: SharedState | None = None  # a cache Redis of its own
        # One reload at a time: two overlapping (a bus message's and an operator's) could
        # finish out of order, and the one that read the database first would win.
        self._reloading = asyncio.Lock()

    async def start(self) -> None:
        """Build everything once per process (lifespan startup, or the first request)."""
        if self.started:
            return
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self.started:
                return
            self._loop = asyncio.get_running_loop()
            self._reloading = asyncio.Lock()  # a lock binds to the loop it first waits on
            self.session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
                skip_auto_headers=("User-Agent",),
            )
            self.vendors = VendorClient(connect_timeout_s=10)
            self.shared = SharedState()
            self.breakers = BreakerBoard(self.shared)
            self.keys = KeyRotation(self.shared)
            self.limiter = Limiter(self.shared)
            self.db = Database()
            await self.db.open()
            self.escrow = Escrow(self.db)
            self.platform_keys = PlatformKeys(self.shared)
            self.orchestrator = Orchestrator(
                breakers=self.breakers, keys=self.keys, platform_keys=self.platform_keys
            )
            self.web = AcquisitionOrchestrator(
                breakers=self.breakers, keys=self.keys, units=DailyUnits(self.shared)
            )
            self.usage = UsageWriter(self.shared)
            self.cache = await self._response_cache()
            self._subscribe()
            await self.reload()
            if not tollgate().byok_enabled:
                log.warning(
                    "GATEWAY_BYOK_ENABLED is off: team key pools are inert; every request is "
                    "served and billed on platform keys"
                )
            self._tasks.append(asyncio.create_task(self._reload_periodically()))
            if self.shared.client is not None:
                self._tasks.append(
                    asyncio.create_task(bus.listen(self.shared.new_client, self._reload_soon))
                )
            self._tasks.append(asyncio.create_task(self.usage.run()))
            self.started = True
            # What startup built (Django, the modules, the first config) lives as long as the
            # process: frozen out of the cyclic collector's way, a full collection during a
            # burst walks only what the requests made, not the whole startup heap each time.
            gc.collect()
            gc.freeze()
            # A request leaves no cycles behind (tests/unit/gateway/test_exchange_cycles.py):
            # the young generation is collected every 20,000 allocations rather than 700, so a
            # burst's in-flight requests are not walked again and again while still alive.
            gc.set_threshold(*GC_THRESHOLDS)

    async def _response_cache(self) -> ResponseCache:
        """The cache on Redis (the limits' own, or one of its own, capped), else in memory."""
        conf = tollgate()
        store: Store
        if not conf.cache_redis_url:
            store = MemoryStore(cap_bytes=conf.cache_memory_mb * MB)
        elif conf.cache_redis_url == self.shared.url:
            store = RedisStore(self.shared)
        else:
            own = SharedState(fallback="response cache lookups are misses", gauged=False)
            own.use(conf.cache_redis_url)
            self._cache_shared = own
            store = RedisStore(own)
            await store.cap_memory(conf.cache_memory_mb)
        return ResponseCache(store, max_entry_bytes=conf.cache_max_entry_bytes)

    def _purge_cache(self, payload: dict) -> None:
        """Drop an account's answers from this process's memory (Redis is purged by the
        control plane itself)."""
        store = self.cache.store if self.started else None
        if isinstance(store, MemoryStore):
            store.purge_now(account_prefix(int(payload["account_id"])))

    async def stop(self) -> None:
        if not self.started:
            return
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.usage.flush()
        await asyncio.to_thread(tracing.flush)  # queued spans, bounded by the export timeout
        await self.session.close()
        await self.vendors.close()
        await self.db.close()
        await self.shared.close()
        if self._cache_shared is not None:
            await self._cache_shared.close()
            self._cache_shared = None
        self._tasks.clear()
        self._starting = None  # a worker's next event loop builds everything anew
        self.started = False

    async def reload(self) -> None:
        """Rebuild config and pools from the database, off the request path; a reload asked
        for while one runs reads the database after it, so the latest state is what stays."""
        async with self._reloading:
            self.catalog = await off_loop(load_catalog)(self.session, self.vendors)
            self.pools.replace(await off_loop(load_pools)())

    async def _reload_pools(self) -> None:
        async with self._reloading:
            self.pools.replace(await off_loop(load_pools)())

    def _on_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def _apply_change(self, *, pools_only: bool) -> Awaitable | None:
        """Reload what a bus message says went stale, so it is live when the message counts
        as applied.

        On this process's loop (a message from another replica) the reload is returned for
        the bus to await before it acknowledges. From another thread (a control-plane write
        in this same process: the embedded demo serves both planes) it runs right there, in
        that sync thread, so the write's response leaves with its change live. The loop sees
        the new pools in one reference swap.
        """
        if not self.started:
            return None
        if self._on_loop():
            return self._reload_pools() if pools_only else self.reload()
        if not pools_only:
            self.catalog = load_catalog(self.session, self.vendors)
        self.pools.replace(load_pools())
        return None

    def _reload_soon(self) -> None:
        """Schedule a reload on this process's loop (after the bus reconnects)."""
        task = self._loop.create_task(self._safe_reload())
        self._tasks.append(task)
        task.add_done_callback(self._forget_task)

    def _forget_task(self, task: asyncio.Task) -> None:
        if task in self._tasks:
            self._tasks.remove(task)

    async def _safe_reload(self) -> None:
        try:
            await self.reload()
        except Exception:
            log.exception("config reload failed; keeping the last good config")

    async def _reload_periodically(self) -> None:
        while True:
            await asyncio.sleep(tollgate().config_reload_s)
            await self._safe_reload()

    def _subscribe(self) -> None:
        if self._subscribed:  # once per process: a restarted runtime keeps its subscriptions
            return
        self._subscribed = True
        bus.subscribe(bus.Topic.API_KEY, self.principals.evict_key)
        bus.subscribe(bus.Topic.GROUP, self.principals.evict_group)
        bus.subscribe(bus.Topic.PROFILES, lambda _: self._apply_change(pools_only=False))
        bus.subscribe(bus.Topic.POOL, self._on_pool_change)
        bus.subscribe(bus.Topic.CACHE_PURGE, self._purge_cache)

    def _on_pool_change(self, payload: dict) -> Awaitable | None:
        if payload.get("evict_key_id") is not None:
            # At once, before any reload: the key is out of memory whatever the database says.
            self.pools.evict_key({"key_id": payload["evict_key_id"]})
        return self._apply_change(pools_only=True)


runtime = Runtime()
