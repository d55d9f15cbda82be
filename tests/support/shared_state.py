"""core.shared_state.SharedState in the test's own process: Redis as configured, cut, restored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

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


def cut(shared: SharedState) -> str:
    """Point `shared` at a port where nothing listens (every call refused); return the live
    Redis URL, for `restore`. Redis itself is untouched: other processes keep using it."""
    live = shared.url
    shared.use(f"redis://127.0.0.1:{free_port()}/0")
    return live


def restore(shared: SharedState, live: str) -> None:
    """Point `shared` at the live Redis again (as if it answered again)."""
    shared.use(live)
