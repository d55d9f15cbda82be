"""Redis for state that can be lost or rebuilt, with a per-process stand-in when it is not there.

Every Redis call of the request path goes through `SharedState.call`, which bounds it by a
short timeout. When Redis is unset (embedded runs) or failing, callers use their in-process
fallback; a failure flips the `degraded` flag, logs one line and sets a gauge, and the next
successful call flips it back, so recovery needs no restart.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio as aioredis
from django.conf import settings

from core import metrics

log = logging.getLogger(__name__)
RETRY_AFTER_FAILURE_S = 1.0


class SharedState:
    def __init__(self) -> None:
        self.client: aioredis.Redis | None = None
        self.timeout_s = settings.TOLLGATE["REDIS_TIMEOUT_MS"] / 1000
        self.degraded = False
        self._down_until = 0.0
        self._dropping: asyncio.Task | None = None
        if settings.REDIS_URL:
            self.client = self.new_client()

    def new_client(self) -> aioredis.Redis:
        # Every call is already bounded by `call`'s one timer, so the client sets no read
        # timeout of its own (it would arm a second timer per read). The pool may grow to
        # match a burst rather than make requests queue for a connection.
        pool = aioredis.ConnectionPool.from_url(
            settings.REDIS_URL,
            max_connections=1024,
            socket_timeout=None,
            socket_connect_timeout=self.timeout_s,
        )
        return aioredis.Redis.from_pool(pool)

    @property
    def available(self) -> bool:
        """Say whether to try Redis now (not configured, or recently failed: use fallback)."""
        return self.client is not None and time.monotonic() >= self._down_until

    async def call(self, make_awaitable):
        """Run one Redis operation within the timeout; raise SharedStateDown on any failure."""
        try:
            async with asyncio.timeout(self.timeout_s):
                result = await make_awaitable(self.client)
        except (TimeoutError, OSError, aioredis.ConnectionError, aioredis.TimeoutError) as exc:
            self._down_until = time.monotonic() + RETRY_AFTER_FAILURE_S
            if not isinstance(exc, TimeoutError | aioredis.TimeoutError):
                # A refused or reset connection: the pooled ones are as stale (a restart).
                # A timeout is often only this loop running late: keep the healthy pool.
                self._drop_idle_connections()
            if not self.degraded:
                self.degraded = True
                metrics.REDIS_DEGRADED.set(1)
                log.warning(
                    "Redis unavailable (%s): limits and breakers fall back to this process",
                    type(exc).__name__,
                )
            raise SharedStateDown() from None
        if self.degraded:
            self.degraded = False
            self._down_until = 0.0  # a success (e.g. the usage flusher's) ends the wait too
            metrics.REDIS_DEGRADED.set(0)
            log.warning("Redis is back: limits and breakers are shared again")
        return result

    def _drop_idle_connections(self) -> None:
        """Forget pooled connections in the background: after a Redis restart each would
        fail once more, flapping the degraded state back on for every stale connection."""
        if self._dropping is not None and not self._dropping.done():
            return

        async def drop() -> None:
            try:
                async with asyncio.timeout(RETRY_AFTER_FAILURE_S):
                    await self.client.connection_pool.disconnect(inuse_connections=False)
            except Exception:
                pass

        self._dropping = asyncio.get_running_loop().create_task(drop())

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()


class SharedStateDown(Exception):
    pass
