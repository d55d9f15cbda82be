"""How long a refused team key sits on the bench (byok/routing.py `KeyRotation`, the team
kind of core/key_pool.py): a 429 benches it for max(Retry-After, 30 s), a 401 or 403
marks it failing for 10 minutes. A request runs through the real orchestrator against an
in-process vendor; the key rotation keeps its bench on a clock the test moves (its
per-process fallback, no Redis), so each length is checked to the tenth of a second.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from byok.routing import KeyRotation
from core import errors
from gateway.adapters.fake import FakeProvider, Fault
from gateway.catalog import Catalog, Profile
from gateway.context import Meter, ModelContext
from gateway.orchestrator import Orchestrator
from gateway.plan import build_plan
from gateway.shapes import openai as openai_shape
from tests.support.chains import ChainWorld
from tests.support.clock import FakeClock

pytestmark = pytest.mark.usefixtures("transactional_db")


class World(ChainWorld):
    """One vendor `a` (a kind team keys may use) and a group pool of two keys, fallback off,
    whose bench runs on `clock`."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.keys = KeyRotation(self.shared, clock=self.clock)
        self.vendor = FakeProvider()
        profile = Profile(
            name="a",
            kind="openai_compatible",
            base_url="",
            platform_key="sk-platform",
            allows_platform=True,
            timeout_s=1.0,
            idle_timeout_s=1.0,
            adapter=self.vendor,
        )
        offer = self.offer(profile, "m")
        self.catalog = Catalog(profiles={"a": profile}, offers_by_model={"m": (offer,)})
        self.pool = self.team_pool("a", "team-1", "team-2", fallback=False)

    def serve(self) -> object:
        """Serve one request; return its completion, or the error it ended in."""
        req = openai_shape.parse_request(
            {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
        )
        ctx = ModelContext(
            request_id=uuid.uuid4().hex, endpoint="chat", meter=Meter(), principal=self.principal
        )
        ctx.req = req
        ctx.plan = build_plan(req, self.principal, self.catalog, self.pool_for)

        async def main():
            try:
                orchestrator = Orchestrator(breakers=self.breakers, keys=self.keys)
                return await orchestrator.complete(ctx, first_ticket=None)
            except errors.GatewayError as exc:
                return exc
            finally:  # the benched key's status row, written in the background
                others = asyncio.all_tasks() - {asyncio.current_task()}
                if others:
                    await asyncio.wait(others, timeout=5)

        return asyncio.run(main())

    def usable_at(self, offset_s: float) -> set[str]:
        """Return the pool's usable keys with the clock `offset_s` past the refusal."""
        self.clock.at(offset_s)
        return {k.secret for k in asyncio.run(self.keys.candidates(self.pool))}


BOTH = {"team-1", "team-2"}


@pytest.mark.parametrize(
    ("fault", "bench_s", "still_benched_at"),
    [
        (Fault("429", retry_after_s=5, key="team-1"), 30.0, (5.0, 29.9)),
        (Fault("429", retry_after_s=90, key="team-1"), 90.0, (30.0, 89.9)),
        (Fault("429", key="team-1"), 30.0, (29.9,)),  # no Retry-After
        (Fault("401", key="team-1"), 600.0, (30.0, 599.9)),
        (Fault("403", key="team-1"), 600.0, (30.0, 599.9)),
    ],
    ids=["429-retry-after-5", "429-retry-after-90", "429-no-retry-after", "401", "403"],
)
def test_a_refused_team_key_is_benched_for_exactly_its_rule_then_serves_again(
    fault, bench_s, still_benched_at
):
    world = World()
    world.vendor.script(fault)

    answered = world.serve()

    assert not isinstance(answered, errors.GatewayError)
    assert [c.api_key for c in world.vendor.calls] == ["team-1", "team-2"]
    for offset_s in still_benched_at:
        assert world.usable_at(offset_s) == {"team-2"}, offset_s
    assert world.usable_at(bench_s) == BOTH


def test_a_benched_key_is_skipped_by_every_request_until_its_bench_lapses():
    world = World()
    world.vendor.script(Fault("429", retry_after_s=5, key="team-1"))
    world.serve()  # team-1 refused (benched), team-2 serves
    world.vendor.calls.clear()

    world.clock.at(29.9)
    world.serve()
    world.serve()  # its turn would start at team-1: still on the bench
    assert [c.api_key for c in world.vendor.calls] == ["team-2", "team-2"]

    world.vendor.calls.clear()
    world.clock.at(30.0)
    world.serve()
    world.serve()
    assert sorted(c.api_key for c in world.vendor.calls) == ["team-1", "team-2"]


def test_both_keys_benched_refuse_lm_3021_without_a_call_until_the_first_bench_lapses():
    world = World()
    world.vendor.script(Fault("429", retry_after_s=45, key="team-1"), Fault("401", key="team-2"))

    refused = world.serve()

    assert isinstance(refused, errors.TeamKeysExhausted) and refused.code == "LM-3021"
    assert [c.api_key for c in world.vendor.calls] == ["team-1", "team-2"]
    world.vendor.calls.clear()
    world.clock.at(44.9)
    assert isinstance(world.serve(), errors.TeamKeysExhausted)
    assert world.vendor.calls == []  # decided without a call
    assert world.usable_at(45.0) == {"team-1"}  # team-2 stays failing until 600 s
    assert world.usable_at(599.9) == {"team-1"}
    assert world.usable_at(600.0) == BOTH
