"""The model orchestrator: the shared chain runner (gateway/chain.py) under the model policy.

The model policy, here:
- a deadline on every vendor call (the profile's timeout to the answer or the first chunk,
  then its idle timeout between chunks);
- a try is retried only on a retryable error;
- every link is judged by its breaker, per (scope, model);
- each platform attempt reserves its own worst case on a prepaid wallet (billed by its
  usage row at measured cost), given back when the attempt serves nothing;
- never retry or fall back once the first streamed token reached the client: a stream is
  handed over only after its first generated token, and a failure after that is told
  in-band (`_follow`);
- fallback: the links in order until one answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import replace

from core import errors
from gateway.adapters.base import CallTarget, ProviderError
from gateway.attempts import Attempt
from gateway.breakers import Ticket
from gateway.chain import ChainRunner, Outcome
from gateway.context import ModelContext, Served
from gateway.failures import AttemptFailed, upstream_error, vendor_failure
from gateway.plan import Link
from gateway.platform_keys import PlatformKeys
from gateway.types import Chunk, Completion

log = logging.getLogger(__name__)
# The pipeline's stages run in order: the plan is built, then the money handle opened (the
# hold stage), before the orchestrator runs.
PLANNED = "the orchestrator ran before the plan was built"
MONEY_OPEN = "a platform call was covered before the request's money was opened"


class ModelPolicy:
    """How a model request's chain is walked (the rules in this module's docstring)."""

    none_served = "No provider can serve this request."

    def __init__(self, *, stream: bool) -> None:
        self.stream = stream

    def trail_model(self, link: Link) -> str:
        return link.offer.name

    def breaker_model(self, link: Link) -> str:
        return link.offer.name

    def may_retry(self, exc: ProviderError) -> bool:
        return exc.retryable

    def failure(self, exc: ProviderError, *, served_by: str) -> AttemptFailed:
        return vendor_failure(exc, served_by=served_by)

    async def cover(self, ctx: ModelContext, link: Link, attempt: Attempt) -> int | None:
        assert ctx.money is not None, MONEY_OPEN
        return await ctx.money.before_platform_call(
            attempt,
            escrow_micro=attempt.escrow_budget_micro if attempt.needs_escrow else None,
            attempt_no=len(ctx.trail) + 1,
        )

    async def uncovered(self, ctx: ModelContext, reservation_id: int) -> None:
        assert ctx.money is not None, MONEY_OPEN
        await ctx.money.unused(reservation_id)

    def skips(self, link: Link) -> bool:
        return False

    async def answers(self, outcome: Outcome, rest: tuple) -> bool:
        return True

    def held_back(self, refusal: errors.GatewayError | None) -> Outcome | None:
        return None

    async def call(
        self,
        ctx: ModelContext,
        link: Link,
        attempt: Attempt,
        *,
        api_key: str | None,
        reservation_id: int | None,
    ) -> Completion | AsyncIterator[list[Chunk]]:
        # A model link has a platform attempt only with a platform key (no model adapter is
        # keyless: attempts.platform_serves), and a team attempt calls with its pool's key.
        assert api_key is not None
        req = ctx.req
        assert req is not None  # the pipeline's `accept` set it before any call
        profile = link.offer.profile
        target = CallTarget(
            upstream_model=link.offer.upstream,
            api_key=api_key,
            max_tokens=link.max_tokens,
            payload=link.payload,
            shape=link.payload_shape,
            caller_label=ctx.caller_label,
        )
        ctx.meter.upstream_sent = True  # the upstream mark: set where the adapter is called
        if not self.stream:
            try:
                async with asyncio.timeout(profile.timeout_s):
                    completion = await profile.adapter.complete(req, target)
            except TimeoutError:
                raise ProviderError("upstream timed out", retryable=True, timeout=True) from None
            self._served(ctx, link, attempt, reservation_id)
            # The answer names the model that served it (a fallback link, not the first asked).
            return replace(completion, model=link.offer.name)
        chunks = profile.adapter.stream(req, target)  # an async generator: its own iterator
        first: list[Chunk] = []
        try:
            # The answer starts with its first generated token (or its end), not with the
            # role or block openings before it: until then a failure may still be retried.
            async with asyncio.timeout(profile.timeout_s):
                while not any(c.generated or c.finish_reason for c in first):
                    first += await anext(chunks)
        except TimeoutError:
            await chunks.aclose()
            raise ProviderError("upstream timed out", retryable=True, timeout=True) from None
        except StopAsyncIteration:
            raise ProviderError("upstream stream was empty", retryable=True) from None
        except BaseException:
            await chunks.aclose()
            raise
        ctx.ttft_ms = ctx.elapsed_ms()
        self._served(ctx, link, attempt, reservation_id)
        return _follow(first, chunks, profile.idle_timeout_s)

    @staticmethod
    def _served(
        ctx: ModelContext, link: Link, attempt: Attempt, reservation_id: int | None
    ) -> None:
        ctx.served = Served(
            offer=link.offer, served_by=attempt.served_by, reservation_id=reservation_id
        )


WHOLE = ModelPolicy(stream=False)
STREAMED = ModelPolicy(stream=True)


class Orchestrator:
    def __init__(self, *, breakers, keys, platform_keys: PlatformKeys | None = None) -> None:
        self.runner = ChainRunner(breakers=breakers, keys=keys, platform_keys=platform_keys)
        self.breakers = breakers
        self.keys = keys

    async def complete(self, ctx: ModelContext, *, first_ticket: Ticket | None) -> Completion:
        """Run the plan to a whole answer; `first_ticket`: the first link's breaker admission,
        when the breakers granted it along with the request's admission."""
        assert ctx.plan is not None, PLANNED
        outcome = await self.runner.run(ctx, ctx.plan.links, WHOLE, first_ticket=first_ticket)
        return outcome.answer

    async def open_stream(
        self, ctx: ModelContext, *, first_ticket: Ticket | None
    ) -> AsyncIterator[list[Chunk]]:
        """Return a stream whose first chunk already arrived: from here on, no fallback.

        It yields the chunks in lists, those that arrived together (one write for them).

        Failures while it runs arrive as GatewayError (upstream_error, mid_stream=True).
        """
        assert ctx.plan is not None, PLANNED
        outcome = await self.runner.run(ctx, ctx.plan.links, STREAMED, first_ticket=first_ticket)
        return outcome.answer


async def _follow(
    first: list[Chunk], rest: AsyncGenerator[list[Chunk], None], idle_s: float
) -> AsyncIterator[list[Chunk]]:
    """Yield the first chunks, then the rest, each arrival within the idle timeout.

    A failure from here on is never retried; it arrives as our GatewayError.
    """
    silence: VendorSilence | None = None
    try:
        yield first
        silence = VendorSilence(idle_s)
        while True:
            silence.waiting()
            try:
                chunks = await anext(rest)
            except StopAsyncIteration:
                return
            except asyncio.CancelledError:
                if silence.timed_out():
                    raise errors.UpstreamTimeout() from None
                raise
            except TimeoutError:  # the adapter's own
                raise errors.UpstreamTimeout() from None
            except ProviderError as exc:
                raise upstream_error(exc, mid_stream=True) from None
            except Exception as exc:  # an adapter that broke on a malformed event
                log.error("upstream stream broke (%s)", type(exc).__name__)  # no vendor text
                raise errors.UpstreamFailed("The upstream stream broke.") from None
            silence.answered()
            yield chunks
    finally:
        if silence is not None:
            silence.close()
        await rest.aclose()


class VendorSilence:
    """How long a stream's vendor has been silent, watched by one lazy timer.

    Only the time spent waiting on the vendor counts (a client slow to read is not a silent
    vendor). Marking a wait costs a clock read: the timer is armed once and, when it fires
    early (an arrival came meanwhile, or the client is being written to), armed again for
    what is left. A timer armed and cancelled on every arrival (`asyncio.timeout`) cost ~3.5 us
    an arrival, over a third of the gateway's own work on one (docs/benchmarks.md). Past the
    idle timeout it cancels the task, as `asyncio.timeout` does, and `timed_out` tells that
    cancellation from another's.
    """

    def __init__(self, idle_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None  # a stream is read in the request's task
        self._task = task
        self._cancelling = task.cancelling()  # cancellations before ours are not ours
        self._idle_s = idle_s
        self._since: float | None = None  # when the current wait began (None: not waiting)
        self._expired = False
        self._timer = self._loop.call_later(idle_s, self._check)

    def waiting(self) -> None:
        self._since = self._loop.time()

    def answered(self) -> None:
        self._since = None

    def timed_out(self) -> bool:
        """Say whether the cancellation being raised is this watch's (and take it back)."""
        return self._expired and self._task.uncancel() <= self._cancelling

    def close(self) -> None:
        self._timer.cancel()

    def _check(self) -> None:
        if self._since is None:
            self._timer = self._loop.call_later(self._idle_s, self._check)
            return
        left = self._since + self._idle_s - self._loop.time()
        if left > 0:
            self._timer = self._loop.call_later(left, self._check)
            return
        self._expired = True
        self._task.cancel()
