"""The rules every key pool shares (core/key_pool.py, walked by gateway/chain.py's one key
loop), each run against a group's team keys (byok/routing.py) and a profile's platform keys
(gateway/platform_keys.py): the same three keys, the same faults, the same verdicts, and
where the kinds differ (their refusal when no key is free) the test says so in one table.

Requests run through the real orchestrator against an in-process vendor; benches live on
their per-process fallback, on a clock the test moves. The Redis names of a bench, which
running gateways read, are checked against real Redis.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator

import pytest

from billing.escrow import Escrow
from byok.pools import Pool, PoolKey
from byok.routing import KeyRotation
from core import errors
from core.key_pool import KeyPool, NoKeyFree
from core.shared_state import SharedState
from gateway.adapters.base import ProviderError
from gateway.adapters.fake import FakeProvider, Fault
from gateway.attempts import PLATFORM, TEAM
from gateway.catalog import Catalog, Profile
from gateway.context import Meter, ModelContext
from gateway.orchestrator import Orchestrator
from gateway.plan import build_plan
from gateway.platform_keys import (
    OwnCredential,
    OwnKey,
    PlatformCredential,
    PlatformKeys,
    PlatformPool,
)
from gateway.shapes import openai as openai_shape
from tests.support.chains import ChainWorld
from tests.support.clock import FakeClock
from tests.support.services import delete_redis_keys

pytestmark = pytest.mark.usefixtures("transactional_db")

SECRETS = ("k-1", "k-2", "k-3")
KINDS = pytest.mark.parametrize("kind", [TEAM, PLATFORM])
# What each kind answers once every key is benched: a team key refused is the key's problem
# (LM-3021, no trail line); a platform key refused is the platform's (LM-3010 with the
# soonest bench's wait, and a `keys_busy` line).
ALL_BENCHED = {
    TEAM: (errors.TeamKeysExhausted, "LM-3021", []),
    PLATFORM: (errors.UpstreamRateLimited, "LM-3010", ["keys_busy"]),
}


class World(ChainWorld):
    """One vendor `a` whose calls are served from three keys of one kind, nothing else: a
    team pool with its fallback off, or a profile's platform pool (round robin)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.clock = FakeClock()
        self.vendor = FakeProvider()
        platform_pool = PlatformPool(
            profile="a",
            strategy="round_robin",
            keys=tuple(
                PlatformCredential(key_id=0, label=f"key-{n}", secret=s)
                for n, s in enumerate(SECRETS)
            ),
        )
        profile = Profile(
            name="a",
            kind="openai_compatible",  # a kind team keys may use
            base_url="",
            platform_key="sk-own",  # never used: the pool serves
            allows_platform=kind == PLATFORM,
            timeout_s=1.0,
            idle_timeout_s=1.0,
            adapter=self.vendor,
            key_pool=platform_pool if kind == PLATFORM else None,
        )
        offer = self.offer(profile, "m")
        self.catalog = Catalog(profiles={"a": profile}, offers_by_model={"m": (offer,)})
        self.keys = KeyRotation(self.shared, clock=self.clock)
        self.platform_keys = PlatformKeys(self.shared, clock=self.clock)
        if kind == TEAM:
            self.pool: object = self.team_pool("a", *SECRETS, fallback=False)
            self.kind_keys: KeyPool = self.keys
        else:
            self.pool = platform_pool
            self.kind_keys = self.platform_keys

    def serve(self) -> tuple[ModelContext, object]:
        """Serve one request; return its context and its completion (or its error)."""
        req = openai_shape.parse_request(
            {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
        )
        ctx = ModelContext(
            request_id=uuid.uuid4().hex, endpoint="chat", meter=Meter(), principal=self.principal
        )
        ctx.req = req
        plan = ctx.plan = build_plan(req, self.principal, self.catalog, self.pool_for)

        async def main():
            escrow = Escrow()
            await escrow.open()
            ctx.money = self.money_for(escrow, ctx.request_id, plan.budget_estimate_micro)
            try:
                orchestrator = Orchestrator(
                    breakers=self.breakers, keys=self.keys, platform_keys=self.platform_keys
                )
                return await orchestrator.complete(ctx, first_ticket=None)
            except errors.GatewayError as exc:
                return exc
            finally:  # a benched team key's status row, written in the background
                await escrow.close()
                others = asyncio.all_tasks() - {asyncio.current_task()}
                if others:
                    await asyncio.wait(others, timeout=5)

        return ctx, asyncio.run(main())

    def called_with(self) -> list[str]:
        """Return the keys the vendor was called with since the last look, and forget them."""
        keys = [c.api_key for c in self.vendor.calls]
        self.vendor.calls.clear()
        return keys


def trail(ctx: ModelContext) -> list[tuple[str, str, str]]:
    return [(a.served_by, a.outcome, a.key_label) for a in ctx.trail]


@KINDS
def test_keys_take_turns_one_further_each_call(kind):
    world = World(kind)

    for _ in range(4):
        ctx, answered = world.serve()
        assert not isinstance(answered, errors.GatewayError)

    assert world.called_with() == ["k-1", "k-2", "k-3", "k-1"]
    assert trail(ctx) == [(kind, "ok", "key-0")]


@KINDS
@pytest.mark.parametrize(
    "fault",
    [Fault("429", retry_after_s=40, key="k-1"), Fault("401", key="k-1")],
    ids=["429", "401"],
)
def test_a_refused_key_is_set_aside_and_the_next_key_serves_at_no_tries_cost(kind, fault):
    world = World(kind)
    # The first key refused, then one retryable failure: the retry is still allowed.
    world.vendor.script(fault, Fault("500", key="k-2"))

    ctx, answered = world.serve()

    assert not isinstance(answered, errors.GatewayError)
    assert world.called_with() == ["k-1", "k-2", "k-3"]
    assert trail(ctx) == [
        (kind, "upstream_error", "key-0"),
        (kind, "upstream_error", "key-1"),
        (kind, "ok", "key-2"),
    ]


@KINDS
def test_a_failed_try_is_tried_once_more_on_the_next_key_and_no_more(kind):
    world = World(kind)
    world.vendor.script(Fault("500"), Fault("500"))

    ctx, answered = world.serve()

    assert isinstance(answered, errors.UpstreamFailed)
    assert world.called_with() == ["k-1", "k-2"]
    assert [outcome for _, outcome, _ in trail(ctx)] == ["upstream_error", "upstream_error"]


@KINDS
def test_a_benched_key_comes_back_when_its_bench_lapses_on_the_clock(kind):
    world = World(kind)
    world.vendor.script(Fault("429", retry_after_s=40, key="k-1"))
    world.serve()
    assert world.called_with() == ["k-1", "k-2"]

    world.clock.at(39.9)
    for _ in range(3):  # every turn, the one starting at k-1 too, passes it by
        world.serve()
    assert "k-1" not in world.called_with()

    world.clock.at(40.0)
    for _ in range(3):
        world.serve()
    assert sorted(world.called_with()) == ["k-1", "k-2", "k-3"]


@KINDS
def test_every_key_benched_answers_the_pools_refusal_without_a_call(kind):
    world = World(kind)
    world.vendor.script(*(Fault("429", retry_after_s=40, key=s) for s in SECRETS))
    _, answered = world.serve()
    assert isinstance(answered, errors.GatewayError)
    assert world.called_with() == ["k-1", "k-2", "k-3"]

    world.clock.at(10.0)
    ctx, refused = world.serve()

    error_type, code, lines = ALL_BENCHED[kind]
    assert isinstance(refused, error_type) and refused.code == code
    assert world.called_with() == []  # decided without a call
    assert [outcome for _, outcome, _ in trail(ctx)] == lines
    world.clock.at(40.0)
    _, answered = world.serve()
    assert not isinstance(answered, errors.GatewayError)


@KINDS
def test_a_key_is_in_flight_until_its_call_is_over_a_stream_until_it_ends(kind):
    world = World(kind)
    keys, pool = world.kind_keys, world.pool

    async def chunks() -> AsyncGenerator[list[str], None]:
        yield ["a"]
        yield ["b"]

    async def run() -> list[int]:
        seen = []
        walk = await keys.walk(pool, tokens=1)
        whole = await walk.next()
        assert not isinstance(whole, NoKeyFree)
        seen.append(keys.in_flight(pool, whole))
        assert keys.in_flight_until_done(pool, whole, "answer") == "answer"
        seen.append(keys.in_flight(pool, whole))
        walk = await keys.walk(pool, tokens=1)
        streamed = await walk.next()
        assert not isinstance(streamed, NoKeyFree)
        stream = keys.in_flight_until_done(pool, streamed, chunks())
        assert await anext(stream) == ["a"]
        seen.append(keys.in_flight(pool, streamed))
        assert [c async for c in stream] == [["b"]]
        seen.append(keys.in_flight(pool, streamed))
        return seen

    assert asyncio.run(run()) == [1, 0, 1, 0]


@pytest.mark.usefixtures("redis_only")
@KINDS
def test_a_bench_is_kept_in_redis_under_the_names_running_gateways_read(kind, tag):
    world = World(kind)
    world.shared = SharedState()  # real Redis this time
    key_id = 800_000 + uuid.uuid4().int % 100_000
    if kind == TEAM:
        keys: KeyPool = KeyRotation(world.shared, clock=world.clock)
        key: object = PoolKey(key_id=key_id, label="key-0", secret="k-1")
        pool: object = Pool(group_id=1, provider="a", fallback=False, keys=(key,))
        name, value = f"tollgate:bench:{key_id}", b"active"
    else:
        keys = PlatformKeys(world.shared, clock=world.clock)
        key = PlatformCredential(key_id=0, label="key-0", secret="k-1")
        pool = PlatformPool(profile=f"p-{tag}", strategy="round_robin", keys=(key,))
        name, value = f"tollgate:pk:p-{tag}:key-0:bench", b"1"

    async def run() -> tuple[bool, object, int]:
        refusal = ProviderError("rate limited", retryable=True, status=429, retry_after_s=40)
        set_aside = await keys.set_aside(pool, key, refusal)
        [stored, left_ms] = await world.shared.run(("GET", name), ("PTTL", name))
        others = asyncio.all_tasks() - {asyncio.current_task()}
        if others:  # a team key's status row, written in the background
            await asyncio.wait(others, timeout=5)
        return set_aside, stored, left_ms

    try:
        set_aside, stored, left_ms = asyncio.run(run())
    finally:
        delete_redis_keys(name)
    assert set_aside and stored == value
    assert 39_000 < left_ms <= 40_000


def test_a_profiles_own_key_hands_a_stream_on_as_it_is_and_counts_nothing():
    async def stream() -> AsyncGenerator[bytes, None]:
        yield b"chunk"

    keys = OwnKey()
    own = OwnCredential("a", "sk-own")
    answer = stream()
    assert keys.in_flight_until_done(own, keys.started(own, own), answer) is answer
    assert keys.in_flight(own, own) == 0
    asyncio.run(answer.aclose())
