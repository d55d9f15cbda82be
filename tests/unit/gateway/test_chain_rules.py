"""The chain rules every request kind shares (gateway/attempts.py, gateway/chain.py), each
run against a model request and a web action: the same world of two vendors `a` and `b`, the
same faults, the same verdicts. Real breakers and key rotation (their per-process fallback,
so no test sees another's), the test database's escrow; the vendors are in-process fakes
scripted per call.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from billing.escrow import Escrow
from core import errors
from core.money import with_margin_micro
from gateway.adapters.base import error_for_status
from gateway.adapters.fake import STATUS_FAULTS, Call, FakeProvider, Fault
from gateway.attempts import PLATFORM, TEAM
from gateway.catalog import Catalog, Profile, WebProfile
from gateway.context import Meter, ModelContext, RequestContext, WebContext
from gateway.orchestrator import Orchestrator
from gateway.plan import build_plan, worst_case_cost_micro
from gateway.shapes import openai as openai_shape
from gateway.web.adapters import WebAdapter
from gateway.web.orchestrator import AcquisitionOrchestrator
from gateway.web.plan import build_web_plan
from gateway.web.types import QUERY, SEARCH, SearchAnswer, WebRequest, WebTarget
from gateway.web.units import DailyUnits
from tests.support.chains import ChainWorld

PLATFORM_KEY = "sk-platform-chain"
PRICE = 1_000  # a web query's price; a model's: 1 micro-USD per input token, 2 per output

pytestmark = pytest.mark.usefixtures("transactional_db")


class ScriptedSearch(WebAdapter):
    """A search vendor that answers at once unless a scripted fault says otherwise."""

    kind = "search_api"
    units = {SEARCH: QUERY}

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._faults: list[Fault] = []

    def script(self, *faults: Fault) -> None:
        self._faults.extend(faults)

    async def search(self, query: str, max_results: int, target: WebTarget) -> SearchAnswer:
        assert target.api_key is not None  # every link here carries a key
        self.calls.append(Call(target.api_key, QUERY, stream=False))
        for index, fault in enumerate(self._faults):
            if fault.key is None or fault.key == target.api_key:
                fault = self._faults.pop(index)
                retry_after = (
                    {"retry-after": str(fault.retry_after_s)} if fault.retry_after_s else {}
                )
                raise error_for_status(STATUS_FAULTS[fault.kind], retry_after)
        return SearchAnswer(results=({"url": "https://a.example/", "title": query, "snippet": ""},))


class World(ChainWorld):
    """Two vendors `a` and `b` of one request kind, tried in that order."""

    def __init__(self, kind: str, *, invoiced: bool = True) -> None:
        super().__init__(invoiced=invoiced)
        self.kind = kind
        # A FakeProvider or a ScriptedSearch per vendor, as the world's kind is.
        self.vendors: dict[str, Any]
        if kind == "model":
            self.vendors = {"a": FakeProvider(), "b": FakeProvider()}
            profiles = {name: self._model_profile(name) for name in self.vendors}
            self.catalog = Catalog(
                profiles=profiles,
                offers_by_model={
                    "m": (self.offer(profiles["a"], "m"),),
                    "n": (self.offer(profiles["b"], "n"),),
                },
            )
        else:
            self.vendors = {"a": ScriptedSearch(), "b": ScriptedSearch()}
            self.catalog = Catalog(
                profiles={},
                offers_by_model={},
                web={name: self._web_profile(name) for name in self.vendors},
            )

    def _model_profile(self, name: str) -> Profile:
        return Profile(
            name=name,
            kind="openai_compatible",  # a kind team keys may use (the fake kind is keyless)
            base_url="",
            platform_key=PLATFORM_KEY,
            allows_platform=True,
            timeout_s=1.0,
            idle_timeout_s=1.0,
            adapter=self.vendors[name],
        )

    def _web_profile(self, name: str) -> WebProfile:
        return WebProfile(
            name=name,
            kind="search_api",
            platform_key=PLATFORM_KEY,
            allows_platform=True,
            timeout_s=1.0,
            prices={QUERY: PRICE},
            respect_robots=True,
            adapter=self.vendors[name],
        )

    def plan(self):
        if self.kind == "model":
            return build_plan(self._model_request(), self.principal, self.catalog, self.pool_for)
        return build_web_plan(self._web_request(), self.principal, self.catalog, self.pool_for)

    @staticmethod
    def _model_request():
        return openai_shape.parse_request(
            {"model": "m,n", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
        )

    @staticmethod
    def _web_request() -> WebRequest:
        return WebRequest(action=SEARCH, query="tollgate", max_results=1)

    def serve(self) -> tuple[RequestContext, object]:
        """Serve one request of the world's kind through its orchestrator; return its context
        and what it answered (or the error it raised)."""
        ctx: ModelContext | WebContext
        if self.kind == "model":
            ctx = ModelContext(
                request_id=uuid.uuid4().hex,
                endpoint="model",
                meter=Meter(),
                principal=self.principal,
            )
            ctx.req = self._model_request()
        else:
            ctx = WebContext(
                request_id=uuid.uuid4().hex, endpoint="web", meter=Meter(), principal=self.principal
            )
        plan = ctx.plan = self.plan()

        async def main():
            escrow = Escrow()
            await escrow.open()
            ctx.money = self.money_for(escrow, ctx.request_id, plan.budget_estimate_micro)
            try:
                if self.kind == "model":
                    orchestrator = Orchestrator(breakers=self.breakers, keys=self.keys)
                    return await orchestrator.complete(ctx, first_ticket=None)
                web = AcquisitionOrchestrator(
                    breakers=self.breakers, keys=self.keys, units=DailyUnits(self.shared)
                )
                return await web.run(ctx, plan, self._web_request(), keep_page=None)
            except errors.GatewayError as exc:
                return exc
            finally:
                await escrow.close()
                others = asyncio.all_tasks() - {asyncio.current_task()}
                if others:
                    await asyncio.wait(others, timeout=5)

        return ctx, asyncio.run(main())

    def open_circuit(self, provider: str) -> None:
        """Trip the platform breaker of `provider` as failing calls would."""
        model = "m" if provider == "a" else "n"
        judged = model if self.kind == "model" else "web"

        async def trip():
            for _ in range(self.breakers.threshold):
                ticket = await self.breakers.acquire(provider, judged, lease_s=5)
                await self.breakers.failure(ticket)

        asyncio.run(trip())


def trail(ctx: RequestContext) -> list[tuple[str, str, str]]:
    return [(a.provider, a.served_by, a.outcome) for a in ctx.trail]


KINDS = pytest.mark.parametrize("kind", ["model", "web"])


@KINDS
def test_a_retryable_500_is_tried_twice_then_the_next_link_serves(kind):
    world = World(kind)
    world.vendors["a"].script(Fault("500"), Fault("500"))

    ctx, answered = world.serve()

    assert not isinstance(answered, errors.GatewayError)
    assert trail(ctx) == [
        ("a", PLATFORM, "upstream_error"),
        ("a", PLATFORM, "upstream_error"),
        ("b", PLATFORM, "ok"),
    ]
    assert [c.api_key for c in world.vendors["a"].calls] == [PLATFORM_KEY, PLATFORM_KEY]


@KINDS
def test_a_team_key_429_benches_it_and_the_next_key_serves_without_using_a_try(kind):
    world = World(kind)
    world.team_pool("a", "team-1", "team-2", fallback=False)
    world.vendors["a"].script(Fault("429", key="team-1"))

    ctx, answered = world.serve()

    assert not isinstance(answered, errors.GatewayError)
    assert [c.api_key for c in world.vendors["a"].calls] == ["team-1", "team-2"]
    assert trail(ctx) == [("a", TEAM, "upstream_error"), ("a", TEAM, "ok")]
    # Benched: the next request starts at the other key.
    world.vendors["a"].calls.clear()
    world.serve()
    assert [c.api_key for c in world.vendors["a"].calls] == ["team-2"]


@KINDS
def test_a_fallback_off_team_link_locks_the_chain_and_its_upstream_error_is_answered(kind):
    world = World(kind)
    world.team_pool("a", "team-1", fallback=False)
    world.vendors["a"].script(Fault("500"), Fault("500"))

    ctx, answered = world.serve()

    assert isinstance(answered, errors.UpstreamFailed)
    assert answered.code == "LM-5001"  # not the LM-3021 of the locked link
    assert world.vendors["b"].calls == []
    assert trail(ctx) == [
        ("a", TEAM, "upstream_error"),
        ("a", TEAM, "upstream_error"),
        ("b", "", "chain_locked"),
    ]


@KINDS
def test_a_team_link_with_fallback_on_goes_to_the_platform_when_its_keys_are_refused(kind):
    world = World(kind)
    world.team_pool("a", "team-1", fallback=True)
    world.vendors["a"].script(Fault("401", key="team-1"))

    ctx, answered = world.serve()

    assert not isinstance(answered, errors.GatewayError)
    assert [c.api_key for c in world.vendors["a"].calls] == ["team-1", PLATFORM_KEY]
    assert trail(ctx) == [("a", TEAM, "upstream_error"), ("a", PLATFORM, "ok")]


@KINDS
def test_an_open_circuit_refuses_without_a_call_and_yields_to_an_earlier_upstream_failure(kind):
    world = World(kind)
    world.open_circuit("b")
    world.vendors["a"].script(Fault("500"), Fault("500"))

    ctx, answered = world.serve()

    assert isinstance(answered, errors.UpstreamFailed)  # a's failure, not b's LM-3030
    assert world.vendors["b"].calls == []
    assert trail(ctx)[-1] == ("b", "", "circuit_open")


@KINDS
def test_an_open_circuit_alone_answers_lm_3030(kind):
    world = World(kind)
    world.open_circuit("a")
    world.open_circuit("b")

    ctx, answered = world.serve()

    assert isinstance(answered, errors.CircuitOpen)
    assert world.vendors["a"].calls == world.vendors["b"].calls == []


@KINDS
def test_the_billing_boundary_puts_the_team_first_then_the_platform_with_the_margin(kind):
    world = World(kind, invoiced=False)
    world.team_pool("a", "team-1", fallback=True)

    first, second = world.plan().links

    assert [(a.served_by, a.needs_escrow) for a in first.attempts] == [
        (TEAM, False),
        (PLATFORM, True),
    ]
    assert [(a.served_by, a.needs_escrow) for a in second.attempts] == [(PLATFORM, True)]
    # The team link's breaker is the group's own; a platform link's is the profile's.
    assert first.breaker_key == f"a#group:{world.tenant.group_id}"
    assert second.breaker_key == "b"
    # A platform attempt reserves its worst case with the escrow margin (120%) on top.
    if kind == "web":
        worst = PRICE
    else:
        worst = worst_case_cost_micro(world._model_request(), first.offer, max_tokens=10)
    assert first.attempts[0].escrow_budget_micro == 0
    assert first.attempts[1].escrow_budget_micro == with_margin_micro(worst, margin_pct=120)
    assert worst > 0
