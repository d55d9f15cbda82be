"""The response cache's rules in this process: who decides (policy), what keys an answer
(keys), and how long and where it is kept (entries, stores) on a clock the test moves, in
real Redis and in the in-process store."""

from __future__ import annotations

import asyncio
import functools
import uuid
from typing import Any

import pytest

from accounts.models import CacheMode, CacheScope
from core.errors import InvalidRequest
from gateway.auth import Principal
from gateway.cache.entries import Entry, pack, unpack
from gateway.cache.keys import entry_key
from gateway.cache.policy import BYPASSED, Decision, decide
from gateway.cache.stage import ResponseCache
from gateway.cache.store import MemoryStore, RedisStore
from gateway.catalog import CacheTerms
from gateway.types import OPENAI, Chunk, Completion, Usage
from tests.support.clock import FakeClock
from tests.support.shared_state import cut, restore, shared_state


def in_a_loop(test):
    """Run an async test on its own event loop (the suite has no async plugin)."""

    @functools.wraps(test)  # its signature too: pytest passes its fixtures and parameters
    def run(*args, **kwargs) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


CACHEABLE = CacheTerms(cacheable=True, max_ttl_s=3600, hit_price_pct=10)
USAGE = Usage(input_tokens=12, output_tokens=7)


def policy(headers: dict[bytes, bytes], mode=CacheMode.ON_REQUEST, terms=CACHEABLE) -> Decision:
    return decide(headers, mode=mode, tenant_ttl_s=600, terms=terms)


def test_who_decides():
    ask = {b"x-tollgate-cache-ttl": b"120"}
    assert policy({}) == BYPASSED  # on request, not asked
    assert policy(ask) == Decision(lookup=True, ttl_s=120)
    assert policy({}, CacheMode.ALWAYS) == Decision(lookup=True, ttl_s=600)
    assert policy({b"x-tollgate-cache-ttl": b"0"}, CacheMode.ALWAYS) == BYPASSED
    assert policy(ask, CacheMode.OFF) == BYPASSED
    assert policy({b"x-tollgate-cache-ttl": b"99999"}) == Decision(lookup=True, ttl_s=3600)
    assert policy(ask, terms=CacheTerms(False, 3600, 10)) == BYPASSED
    assert policy({**ask, b"cache-control": b"no-cache"}) == Decision(lookup=False, ttl_s=120)
    assert policy({**ask, b"cache-control": b"No-Store"}) == Decision(lookup=True, ttl_s=0)
    assert policy({**ask, b"cache-control": b"no-store, no-cache"}) == BYPASSED
    assert policy({**ask, b"cache-control": b"max-age=0"}) == Decision(lookup=True, ttl_s=120)


@pytest.mark.parametrize("bad", [b"soon", b"-1", b"1.5", b"", b"9999999999"])
def test_a_malformed_ttl_is_refused(bad):
    with pytest.raises(InvalidRequest, match="X-Tollgate-Cache-TTL"):
        policy({b"x-tollgate-cache-ttl": bad})


def principal(**fields: Any) -> Principal:
    base: dict[str, Any] = dict(
        account_id=7,
        billing_mode="prepaid",
        group_id=70,
        group_budget_max_micro=None,
        group_rpm=None,
        group_tpm=None,
        group_concurrency=None,
        bandwidth_micro_per_gb=0,
        api_key_id=700,
        account_created_us=1_700_000_000_000_000,
    )
    return Principal(**(base | fields))


def key(who: Principal, caller: str | None = None, **body) -> str:
    message = {"messages": [{"role": "user", "content": "hi"}], "model": "gpt-4o-mini"}
    return entry_key(who, caller, route="chat", chain=("gpt-4o-mini",), body=message | body)


def test_the_key_holds_no_prompt_text_and_never_crosses_accounts():
    mine = key(principal())
    assert mine.startswith("tollgate:cache:7:") and "hi" not in mine.split(":", 3)[3]
    assert key(principal(account_id=8)) != mine
    # An id handed out again (a restored database) is another account.
    assert key(principal(account_created_us=1_800_000_000_000_000)) != mine
    # Labels and transport are not the question: the same answer.
    assert key(principal(), stream=True, user="u1", metadata={"a": "b"}, model="alias") == mine
    # What shapes the answer is.
    for other in ({"temperature": 0.5}, {"n": 2}, {"seed": 1}, {"tools": []}):
        assert key(principal(), **other) != mine


def test_the_scope_narrows_within_the_account():
    account = principal()
    assert key(principal(group_id=71, api_key_id=701)) == key(account)
    group = principal(cache_scope=CacheScope.GROUP)
    assert key(principal(cache_scope=CacheScope.GROUP, api_key_id=701)) == key(group)
    assert key(principal(cache_scope=CacheScope.GROUP, group_id=71)) != key(group)
    by_key = principal(cache_scope=CacheScope.KEY)
    assert key(principal(cache_scope=CacheScope.KEY, api_key_id=701)) != key(by_key)
    caller = principal(cache_scope=CacheScope.CALLER)
    assert key(caller, "alice") != key(caller, "bob")
    assert key(caller, "alice") == key(caller, "alice")


def whole_entry(created_s: float, ttl_s: int = 30) -> Entry:
    completion = Completion(
        shape=OPENAI,
        data={"choices": [{"message": {"role": "assistant", "content": "kept"}}]},
        text="kept",
        finish_reason="stop",
        usage=USAGE,
        model="gpt-4o-mini",
    )
    return Entry(created_s, ttl_s, "stub-openai", "gpt-4o-mini", USAGE, completion=completion)


def test_an_entry_packs_and_unpacks_exactly():
    whole = whole_entry(1_000.5)
    assert unpack(pack(whole)) == whole
    streamed = Entry(
        1_000.5,
        30,
        "stub-openai",
        "gpt-4o-mini",
        USAGE,
        arrivals=(
            (Chunk(event={"x": 1}, text="a", generated=True),),
            (Chunk(finish_reason="stop", usage=USAGE),),
        ),
    )
    assert unpack(pack(streamed)) == streamed
    assert unpack(b"not zlib") is None


@in_a_loop
async def test_an_answer_expires_at_its_ttl_on_the_cache_clock():
    clock = FakeClock()
    store_key = f"tollgate:cache:999999:{uuid.uuid4().hex}"
    async with shared_state() as shared:
        cache = ResponseCache(RedisStore(shared), max_entry_bytes=10_000, clock=clock)
        packed = cache.packed(whole_entry(clock(), ttl_s=30))
        assert packed is not None
        await cache.store.put(store_key, packed, 30)
        clock.advance(29.9)
        found = cache.fresh(await cache.store.get(store_key))
        assert found is not None and found.age_s(clock()) == 29
        clock.advance(0.1)
        assert cache.fresh(await cache.store.get(store_key)) is None


@in_a_loop
async def test_an_answer_over_the_entry_cap_is_not_kept():
    clock = FakeClock()
    store = MemoryStore(cap_bytes=1 << 20, clock=clock)
    cache = ResponseCache(store, max_entry_bytes=len(pack(whole_entry(clock()))) - 1, clock=clock)
    assert cache.packed(whole_entry(clock())) is None
    assert store.bytes == 0


@in_a_loop
async def test_the_memory_store_evicts_the_least_recently_used_past_its_cap():
    clock = FakeClock()
    store = MemoryStore(cap_bytes=300, clock=clock)
    for name in ("a", "b", "c"):
        await store.put(f"tollgate:cache:1:{name}", b"x" * 100, 60)
    assert await store.get("tollgate:cache:1:a") == b"x" * 100  # a is now the most recent
    await store.put("tollgate:cache:2:d", b"y" * 100, 60)
    assert store.bytes == 300
    assert await store.get("tollgate:cache:1:b") is None  # the least recently used went
    assert await store.get("tollgate:cache:1:c") is not None
    clock.advance(60)
    assert await store.get("tollgate:cache:1:c") is None  # expired
    assert store.purge_now("tollgate:cache:1:") == 1  # a; d is another account's
    assert await store.get("tollgate:cache:2:d") is None  # expired too, on the same clock
    assert store.bytes == 0


@in_a_loop
async def test_a_redis_that_is_down_is_a_store_down_not_an_error():
    from gateway.cache.store import StoreDown

    async with shared_state() as shared:
        live = cut(shared)
        store = RedisStore(shared)
        with pytest.raises(StoreDown):
            await store.get("tollgate:cache:1:a")
        with pytest.raises(StoreDown):
            await store.put("tollgate:cache:1:a", b"v", 10)
        restore(shared, live)
