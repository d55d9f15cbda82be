"""The orchestrator in this process: real breakers, key rotation and escrow (the test
database), the in-process fake vendor scripted per call; no server is started.

Breakers and key benches run on their per-process fallback (no Redis), so what one test
opens or benches no other test sees.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from billing.escrow import Escrow
from billing.models import Reservation
from core import errors
from core.money import TokenPrices
from gateway.adapters.fake import FakeProvider, Fault
from gateway.catalog import Catalog, ModelOffer, Profile
from gateway.context import Meter, ModelContext
from gateway.orchestrator import Orchestrator
from gateway.plan import build_plan
from gateway.shapes import openai as openai_shape
from tests.support.chains import ChainWorld

PLATFORM_KEY = "sk-platform-unit"
# 1 micro-USD per input token, 2 per output token: worst cases are easy to read.
PRICE_IN, PRICE_OUT = 1_000_000, 2_000_000

pytestmark = pytest.mark.usefixtures("transactional_db")


class World(ChainWorld):
    """Two fake vendors `a` and `b`, each serving model `m` (a) or `n` (b)."""

    def __init__(
        self, *, invoiced: bool = True, timeout_s: float = 1.0, idle_timeout_s: float | None = None
    ) -> None:
        super().__init__(invoiced=invoiced)
        self.vendors = {"a": FakeProvider(), "b": FakeProvider()}
        self.profiles = {
            name: Profile(
                name=name,
                kind="openai_compatible",  # a kind team keys may use (the fake kind is keyless)
                base_url="",
                platform_key=PLATFORM_KEY,
                allows_platform=True,
                timeout_s=timeout_s,
                idle_timeout_s=timeout_s if idle_timeout_s is None else idle_timeout_s,
                adapter=vendor,
            )
            for name, vendor in self.vendors.items()
        }
        self.catalog = Catalog(
            profiles=self.profiles,
            offers_by_model={
                "m": (self._offer("a", "m"),),
                "n": (self._offer("b", "n"),),
            },
        )
        self.contexts: list[ModelContext] = []

    def _offer(self, profile: str, model: str) -> ModelOffer:
        return ModelOffer(
            profile=self.profiles[profile],
            name=model,
            upstream=f"{model}-upstream",
            prices=TokenPrices.configured(
                input_micro_per_mtok=PRICE_IN, output_micro_per_mtok=PRICE_OUT
            ),
            max_output_tokens=100,
        )

    def context(self, *chain: str, stream: bool = False) -> ModelContext:
        req = openai_shape.parse_request(
            {
                "model": ",".join(chain),
                "messages": [{"role": "user", "content": "say hello"}],
                "max_tokens": 10,
                "stream": stream,
            }
        )
        ctx = ModelContext(
            request_id=uuid.uuid4().hex, endpoint="chat", meter=Meter(), principal=self.principal
        )
        self.contexts.append(ctx)
        ctx.req = req
        ctx.plan = build_plan(
            req,
            self.principal,
            self.catalog,
            self.pool_for,
        )
        return ctx

    def run(self, coro_of):
        """Run `coro_of(orchestrator)` on a fresh loop, with an escrow of its own (a pool
        belongs to one loop) on which each request's money handle opens, as the pipeline's
        hold stage opens it; then let background work (a benched key's status) finish."""

        async def main():
            escrow = Escrow()
            await escrow.open()
            for ctx in self.contexts:
                ctx.money = self.money_for(escrow, ctx.request_id, ctx.plan.budget_estimate_micro)
            try:
                return await coro_of(Orchestrator(breakers=self.breakers, keys=self.keys))
            finally:
                await escrow.close()
                others = asyncio.all_tasks() - {asyncio.current_task()}
                if others:
                    await asyncio.wait(others, timeout=5)

        return asyncio.run(main())

    def complete(self, ctx: ModelContext):
        return self.run(lambda o: o.complete(ctx, first_ticket=None))


def outcomes(ctx: ModelContext) -> list[tuple[str, str, str]]:
    return [(a.provider, a.served_by, a.outcome) for a in ctx.trail]


def test_a_retryable_500_is_tried_twice_then_the_next_link_serves():
    world = World()
    world.vendors["a"].script(Fault("500"), Fault("500"))
    ctx = world.context("m", "n")

    completion = world.complete(ctx)

    assert (completion.model, ctx.served.provider, ctx.served.model) == ("n", "b", "n")
    assert outcomes(ctx) == [
        ("a", "platform", "upstream_error"),
        ("a", "platform", "upstream_error"),
        ("b", "platform", "ok"),
    ]
    assert [a.upstream_status for a in ctx.trail] == [500, 500, 200]
    assert [(c.api_key, c.model) for c in world.vendors["a"].calls] == [
        (PLATFORM_KEY, "m-upstream"),
        (PLATFORM_KEY, "m-upstream"),
    ]
    assert ctx.meter.upstream_sent is True


def test_a_platform_key_refused_is_not_retried_and_the_chain_moves_on():
    world = World()
    world.vendors["a"].script(Fault("401"))
    ctx = world.context("m", "n")

    world.complete(ctx)

    assert len(world.vendors["a"].calls) == 1  # a 401 is not worth a second try
    assert outcomes(ctx) == [("a", "platform", "upstream_error"), ("b", "platform", "ok")]


def test_the_vendor_still_rate_limiting_answers_lm3010_with_its_retry_after():
    world = World()
    world.vendors["a"].script(Fault("429", retry_after_s=7), Fault("429", retry_after_s=7))
    ctx = world.context("m")

    with pytest.raises(errors.UpstreamRateLimited) as refused:
        world.complete(ctx)

    assert (refused.value.code, refused.value.status, refused.value.retry_after_s) == (
        "LM-3010",
        429,
        7,
    )
    assert len(world.vendors["a"].calls) == 2


def test_a_hung_call_times_out_at_the_profile_deadline_and_is_tried_again():
    world = World(timeout_s=0.05)
    world.vendors["a"].script(Fault("hang"))
    ctx = world.context("m")

    completion = world.complete(ctx)

    assert completion.text == "Hello from the fake model reply ok"
    assert [a.outcome for a in ctx.trail] == ["timeout", "ok"]
    assert ctx.trail[0].latency_ms >= 50


def test_team_key_429_benches_key_and_tries_next():
    world = World()
    pool = world.team_pool("a", "team-1", "team-2", fallback=False)
    world.vendors["a"].script(Fault("429", retry_after_s=90, key="team-1"))
    ctx = world.context("m")

    world.complete(ctx)

    assert [c.api_key for c in world.vendors["a"].calls] == ["team-1", "team-2"]
    assert outcomes(ctx) == [("a", "team", "upstream_error"), ("a", "team", "ok")]
    assert ctx.served.served_by == "team"
    usable = world.run(lambda o: o.keys.candidates(pool))
    assert [k.secret for k in usable] == ["team-2"]  # benched for max(90 s, 30 s)


def test_every_team_key_refused_with_fallback_off_answers_lm3021_and_never_the_platform():
    world = World()
    world.team_pool("a", "team-1", "team-2", fallback=False)
    world.vendors["a"].script(Fault("401", key="team-1"), Fault("403", key="team-2"))
    ctx = world.context("m")

    with pytest.raises(errors.TeamKeysExhausted) as refused:
        world.complete(ctx)

    assert refused.value.code == "LM-3021"
    assert [c.api_key for c in world.vendors["a"].calls] == ["team-1", "team-2"]


def test_team_keys_exhausted_with_fallback_on_fall_back_to_the_platform_key():
    world = World()
    world.team_pool("a", "team-1", fallback=True)
    world.vendors["a"].script(Fault("401", key="team-1"))
    ctx = world.context("m")

    world.complete(ctx)

    assert [c.api_key for c in world.vendors["a"].calls] == ["team-1", PLATFORM_KEY]
    assert outcomes(ctx) == [("a", "team", "upstream_error"), ("a", "platform", "ok")]


def test_a_chain_lock_refusal_yields_to_the_earlier_upstream_failure():
    world = World()
    world.team_pool("a", "team-1", fallback=False)  # locks the chain: `n` has no team pool
    world.vendors["a"].script(Fault("500"), Fault("500"))
    ctx = world.context("m", "n")

    with pytest.raises(errors.UpstreamFailed) as refused:
        world.complete(ctx)

    assert refused.value.code == "LM-5001"  # not the LM-3021 of the locked link
    assert world.vendors["b"].calls == []
    assert [a.outcome for a in ctx.trail] == ["upstream_error", "upstream_error", "chain_locked"]


def test_a_stream_that_breaks_after_its_role_chunk_but_before_any_token_falls_back():
    world = World()
    world.vendors["a"].script(Fault("fail_after_tokens", after_tokens=0))
    ctx = world.context("m", "n", stream=True)

    async def read(orchestrator):
        chunks = await orchestrator.open_stream(ctx, first_ticket=None)
        return [chunk.text async for arrived in chunks for chunk in arrived if chunk.text]

    texts = world.run(read)

    # The role chunk is an opening, not the answer: nothing was committed before the break.
    assert "".join(texts) == "Hello from the fake model reply ok"
    assert outcomes(ctx) == [("a", "platform", "upstream_error"), ("b", "platform", "ok")]


async def read_texts(chunks, *, into: list[str], pause_s: float = 0.0, after_first=None) -> None:
    """Read a stream's texts into `into` (kept whatever the stream raises), as a client that
    takes `pause_s` over each arrival; `after_first` runs once the first arrival is read."""
    async for arrived in chunks:
        into.extend(chunk.text for chunk in arrived if chunk.text)
        if after_first is not None:
            after_first, then = None, after_first
            then()
        if pause_s:
            await asyncio.sleep(pause_s)


async def texts_until(orchestrator, ctx, error: type[Exception]) -> tuple[list[str], Exception]:
    """Open the request's stream and read it until it raises `error`: the texts read before
    it, and the error."""
    chunks = await orchestrator.open_stream(ctx, first_ticket=None)
    texts: list[str] = []
    with pytest.raises(error) as ended:
        await read_texts(chunks, into=texts)
    return texts, ended.value


def test_a_stream_that_breaks_after_its_first_chunks_is_never_retried_or_fallen_back():
    world = World()
    world.vendors["a"].script(Fault("fail_after_tokens", after_tokens=2))
    ctx = world.context("m", "n", stream=True)

    texts, broke = world.run(
        lambda orchestrator: texts_until(orchestrator, ctx, errors.UpstreamFailed)
    )

    assert texts == ["Hello", " from"]
    assert broke.message == "The upstream stream broke."
    assert world.vendors["b"].calls == []
    assert outcomes(ctx) == [("a", "platform", "ok")]


def test_a_vendor_quiet_past_the_idle_timeout_ends_the_stream_after_what_it_sent():
    # Each token 0.3 s after the last: the first is within the call's 1 s, the next is not
    # within the stream's 0.1 s idle timeout.
    world = World(timeout_s=1.0, idle_timeout_s=0.1)
    world.vendors["a"].script(Fault("slow", delay_ms=300))
    ctx = world.context("m", "n", stream=True)

    async def read(orchestrator):
        texts, quiet = await texts_until(orchestrator, ctx, errors.UpstreamTimeout)
        task = asyncio.current_task()
        assert task is not None
        return texts, quiet, task.cancelling()

    texts, quiet, cancelling = world.run(read)

    assert texts == ["Hello"]
    assert (quiet.code, quiet.status) == ("LM-5002", 504)
    assert cancelling == 0  # the timer's cancellation was taken back: the request goes on
    assert world.vendors["b"].calls == []  # once the answer started, no fallback


def test_a_client_reading_slower_than_the_idle_timeout_is_not_an_idle_vendor():
    # The vendor answers at once; the client takes 0.15 s over each arrival, past the 0.1 s
    # idle timeout: only time spent waiting on the vendor counts.
    world = World(timeout_s=1.0, idle_timeout_s=0.1)
    ctx = world.context("m", stream=True)

    async def read(orchestrator):
        chunks = await orchestrator.open_stream(ctx, first_ticket=None)
        texts: list[str] = []
        await read_texts(chunks, into=texts, pause_s=0.15)
        return texts

    texts = world.run(read)

    assert "".join(texts) == "Hello from the fake model reply ok"  # every word, no timeout


def test_a_cancellation_from_elsewhere_while_waiting_on_the_vendor_is_not_a_timeout():
    # The client leaves (its watcher cancels the request's task) while the stream waits on
    # a vendor slower than the idle timeout: the task ends cancelled, not with LM-5002.
    world = World(timeout_s=1.0, idle_timeout_s=0.1)
    world.vendors["a"].script(Fault("slow", delay_ms=300))
    ctx = world.context("m", stream=True)

    async def read(orchestrator):
        chunks = await orchestrator.open_stream(ctx, first_ticket=None)
        texts: list[str] = []
        # The client leaves 0.05 s after the first arrival.
        task = asyncio.ensure_future(
            read_texts(chunks, into=texts, after_first=lambda: loop.call_later(0.05, task.cancel))
        )
        loop = asyncio.get_running_loop()
        with pytest.raises(asyncio.CancelledError):
            await task
        return texts, task.cancelling()

    texts, cancelling = world.run(read)

    assert texts == ["Hello"]
    assert cancelling == 1  # the client's cancellation alone: the idle timer took none


def test_the_breaker_opens_after_its_threshold_and_then_fails_fast_with_lm5003(settings):
    world = World()
    threshold = settings.TOLLGATE["BREAKER_FAILURES"]
    world.vendors["a"].script(*[Fault("500")] * (2 * threshold))
    for _ in range(threshold):
        with pytest.raises(errors.UpstreamFailed):
            world.complete(world.context("m"))
    calls_before = len(world.vendors["a"].calls)

    with pytest.raises(errors.CircuitOpen) as refused:
        world.complete(world.context("m"))

    assert (refused.value.code, refused.value.retry_after_s) == (
        "LM-5003",
        settings.TOLLGATE["BREAKER_COOLDOWN_S"],
    )
    assert len(world.vendors["a"].calls) == calls_before  # failing fast: no call


def test_a_prepaid_failed_attempt_cancels_its_reservation_and_the_served_one_is_named():
    world = World(invoiced=False)
    world.vendors["a"].script(Fault("500"), Fault("500"))
    ctx = world.context("m", "n")

    world.complete(ctx)

    reservations = list(
        Reservation.objects.filter(request_id=ctx.request_id)
        .order_by("attempt_no")
        .values_list("attempt_no", "status", "amount_micro")
    )
    assert reservations == [
        (1, "cancelled", ctx.plan.links[0].attempts[0].escrow_budget_micro),
        (3, "pending", ctx.plan.links[1].attempts[0].escrow_budget_micro),  # settlement commits
    ]
    served_reservation = Reservation.objects.get(request_id=ctx.request_id, attempt_no=3)
    assert ctx.served.reservation_id == served_reservation.pk
    cancelled = Reservation.objects.get(request_id=ctx.request_id, attempt_no=1)
    assert [a.reservation_id for a in ctx.trail] == [
        cancelled.pk,
        cancelled.pk,
        served_reservation.pk,
    ]
