"""Config reloads run one at a time, so the state read last is the state that stays.

A bus message's reload and an operator's (or a test's) `/internal/reload` can overlap. Were
they to run side by side, the one that read the database first could finish last and put
back a catalog the database no longer holds (CI once saw a profile's removed own key serve).
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from gateway import runtime as runtime_module
from gateway.runtime import Runtime
from tests.unit.gateway.test_cache_rules import in_a_loop

database = {"version": 1}
first_read = threading.Event()
release_first = threading.Event()
reads: list[int] = []


def load_catalog(session, vendors) -> str:
    """A catalog loader whose first read stalls until released (a slow database)."""
    version = database["version"]
    reads.append(version)
    if len(reads) == 1:
        first_read.set()
        release_first.wait(10)
    return f"catalog v{version}"


@pytest.fixture(autouse=True)
def slow_database(monkeypatch):
    database["version"] = 1
    first_read.clear()
    release_first.clear()
    reads.clear()
    monkeypatch.setattr(runtime_module, "load_catalog", load_catalog)
    monkeypatch.setattr(runtime_module, "load_pools", dict)


@in_a_loop
async def test_a_reload_asked_for_during_another_reads_after_it_and_its_state_stays():
    runtime = Runtime()
    runtime.session = runtime.vendors = None  # the fake loader calls no vendor
    earlier = asyncio.create_task(runtime.reload())
    await asyncio.to_thread(first_read.wait, 10)

    database["version"] = 2  # an operator's change lands while the first reload reads
    later = asyncio.create_task(runtime.reload())
    for _ in range(5):
        await asyncio.sleep(0)
    assert reads == [1]  # the later reload waits: it has not read yet

    release_first.set()
    await asyncio.gather(earlier, later)

    assert reads == [1, 2]
    assert runtime.catalog == "catalog v2"
