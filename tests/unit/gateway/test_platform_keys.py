"""Platform key picks without Redis: each replica orders, counts and benches alone."""

from __future__ import annotations

import asyncio

from core.key_pool import NoKeyFree
from core.shared_state import SharedState
from gateway.platform_keys import PlatformCredential, PlatformKeys, PlatformPool


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_040.0  # 20 s into a minute

    def __call__(self) -> float:
        return self.now


def no_redis() -> SharedState:
    """A shared state that never asks Redis (a configured one is the Redis tests' own)."""
    shared = SharedState()
    shared.client = None
    return shared


def pool(strategy: str, *keys: PlatformCredential) -> PlatformPool:
    return PlatformPool(profile="p", strategy=strategy, keys=keys)


def key(label: str, **limits: int) -> PlatformCredential:
    return PlatformCredential(key_id=0, label=label, secret=f"sk-{label}", **limits)


def picks(keys: PlatformKeys, of: PlatformPool, n: int, *, tokens: int = 10) -> list[str]:
    async def run() -> list[str]:
        got = []
        for _ in range(n):
            picked = await keys.pick(of, tokens=tokens)
            got.append(picked.label if isinstance(picked, PlatformCredential) else "-")
            if isinstance(picked, PlatformCredential):
                keys.done(of, picked)
        return got

    return asyncio.run(run())


def test_round_robin_and_weighted_orders():
    keys = PlatformKeys(no_redis(), clock=Clock())
    assert picks(keys, pool("round_robin", key("a"), key("b"), key("c")), 6) == list("abcabc")
    weighted = pool("weighted", key("a", weight=2), key("b", weight=1), key("c", weight=1))
    assert picks(keys, weighted, 8) == list("abcaabca")


def test_limits_count_requests_and_promised_tokens_per_minute():
    clock = Clock()
    keys = PlatformKeys(no_redis(), clock=clock)
    limited = pool("round_robin", key("a", rpm=2), key("b", tpm=250))
    # a takes two calls a minute; b takes calls while under 250 tokens (100 each).
    assert picks(keys, limited, 6, tokens=100) == ["a", "b", "a", "b", "b", "-"]
    refused = asyncio.run(keys.pick(limited, tokens=100))
    assert refused == NoKeyFree(benched=False, retry_after_s=40.0)
    clock.now += 40  # the next minute: both have room again
    assert sorted(picks(keys, limited, 2, tokens=100)) == ["a", "b"]


def test_a_benched_key_is_passed_by_until_its_bench_lapses():
    clock = Clock()
    keys = PlatformKeys(no_redis(), clock=clock)
    two = pool("round_robin", key("a"), key("b"))
    asyncio.run(keys.bench(two, two.keys[0], 5))
    assert picks(keys, two, 3) == ["b", "b", "b"]
    asyncio.run(keys.bench(two, two.keys[1], 2))
    assert asyncio.run(keys.pick(two, tokens=1)) == NoKeyFree(benched=True, retry_after_s=2.0)
    clock.now += 5
    assert sorted(picks(keys, two, 2)) == ["a", "b"]


def test_least_in_flight_prefers_the_idle_key():
    keys = PlatformKeys(no_redis(), clock=Clock())
    two = pool("least_in_flight", key("a"), key("b"))

    async def run() -> list[str]:
        busy = await keys.pick(two, tokens=1)  # a, kept in flight
        got = []
        for _ in range(3):
            picked = await keys.pick(two, tokens=1)
            got.append(picked.label)
            keys.done(two, picked)
        keys.done(two, busy)
        return [busy.label, *got]

    assert asyncio.run(run()) == ["a", "b", "b", "b"]
