"""core.shared_state.SharedState in the test's own process: Redis as configured, cut, restored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio as aioredis

from core.shared_state import SharedState
from tests.support.processes import free_port


@asynccontextmanager
async def shared_state() -> AsyncIterator[SharedState]:
    """Open a SharedState on this event loop (settings.REDIS_URL, or none), closed after."""
    shared = SharedState()
    try:
        yield shared
    finally:
        await shared.close()


def cut(shared: SharedState) -> aioredis.Redis:
    """Point `shared` at a port where nothing listens (every call refused); return the live
    client, for `restore`. Redis itself is untouched: other processes keep using it."""
    live = shared.client
    shared.client = aioredis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.5)
    return live


def restore(shared: SharedState, live: aioredis.Redis) -> None:
    """Point `shared` at the live Redis again (as if it answered again)."""
    shared.client = live
