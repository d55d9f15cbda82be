"""The acquisition orchestrator: the shared chain runner (gateway/chain.py) under the web
policy.

The web policy, here:
- the links in order until one succeeds; a scrape whose page our fetcher got but whose
  content scripts write goes on to a renderer, and comes back to that page if none serves
  (or the day's units run out first);
- a second try only after a retryable failure that billed nothing (a vendor that says it
  charged a failed try ends that profile's tries);
- before every call, the unit it may bill is taken from the group's daily unit budget
  (LM-3004), and given back when the call billed nothing;
- a prepaid request's first platform call reserves the plan's worst case on the wallet
  (LM-4002), committed at the units billed when its usage row is stored: one reservation
  for the whole request, kept across failed calls;
- breakers judge the vendors (render, search); our own fetcher's failures are the site's;
- a URL the fetcher refuses (a private address, a scheme) ends the request: LM-2001.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from core import errors
from gateway.adapters.base import ProviderError, connection_error
from gateway.attempts import PLATFORM, Attempt
from gateway.chain import ChainRunner, Outcome
from gateway.context import WebContext
from gateway.failures import AttemptFailed, vendor_failure
from gateway.web.plan import WebLink, WebPlan
from gateway.web.types import (
    SCRAPE,
    PageAnswer,
    SearchAnswer,
    WebProviderError,
    WebRequest,
    WebTarget,
)
from gateway.web.units import DailyUnits

BREAKER_MODEL = "web"
WEB_CALL = "web"  # a web request's platform calls share one reservation


@dataclass(frozen=True, slots=True)
class Answered:
    link: WebLink
    served_by: str
    answer: PageAnswer | SearchAnswer


class WebPolicy:
    """How one web request's chain is walked (the rules in this module's docstring)."""

    none_served = "No web profile could serve this request."

    def __init__(self, plan: WebPlan, req: WebRequest, units: DailyUnits, keep_page) -> None:
        self.plan = plan
        self.req = req
        self.units = units
        self.keep_page = keep_page
        self.kept: Outcome | None = None  # a direct page held back while renderers try

    def trail_model(self, link: WebLink) -> str:
        return link.unit

    def breaker_model(self, link: WebLink) -> str | None:
        return BREAKER_MODEL if link.judged else None

    def may_retry(self, exc: ProviderError) -> bool:
        """A second try only after a retryable failure that billed nothing (the seed's rule)."""
        billed = exc.billed_units if isinstance(exc, WebProviderError) else 0
        return exc.retryable and not billed

    def failure(self, exc: ProviderError, *, served_by: str) -> AttemptFailed:
        if isinstance(exc, WebProviderError) and exc.refused:
            return AttemptFailed(
                errors.InvalidRequest(exc.message), judged=False, ends_request=True
            )
        if isinstance(exc, WebProviderError) and exc.status is None and not exc.timeout:
            # Our fetcher's own verdict on the site (too large, unreachable): say it plainly.
            return AttemptFailed(errors.UpstreamFailed(exc.message), judged=False)
        return vendor_failure(exc, served_by=served_by)

    async def cover(self, ctx: WebContext, link: WebLink, attempt: Attempt) -> int | None:
        bill = ctx.web
        if self.plan.budget_estimate_micro and bill.reservation_id is None:
            # The hold stage opened the request's money before the chain runs.
            assert ctx.money is not None
            bill.reservation_id = await ctx.money.before_platform_call(
                WEB_CALL,
                escrow_micro=self.plan.budget_estimate_micro if attempt.needs_escrow else None,
                attempt_no=1,
            )
        return bill.reservation_id

    async def uncovered(self, ctx: WebContext, reservation_id: int) -> None:
        """The request's one reservation outlives a failed call: its usage row settles it."""

    def skips(self, link: WebLink) -> bool:
        return self.kept is not None and not link.profile.adapter.renders

    async def answers(self, outcome: Outcome, rest: tuple) -> bool:
        renderers_left = any(later.profile.adapter.renders for later in rest)
        if (
            self.req.action == SCRAPE
            and renderers_left
            and not await self.keep_page(outcome.answer)
        ):
            self.kept = outcome  # scripts write its content: a renderer tries first
            return False
        return True

    def held_back(self, refusal: errors.GatewayError | None) -> Outcome | None:
        # The day's units spent while a renderer was to try: the page our fetcher got serves.
        if refusal is None or isinstance(refusal, errors.DailyUnitsExhausted):
            return self.kept
        return None

    async def call(
        self,
        ctx: WebContext,
        link: WebLink,
        attempt: Attempt,
        *,
        api_key: str | None,
        reservation_id: int | None,
    ) -> PageAnswer | SearchAnswer:
        principal = ctx.principal
        assert principal is not None  # the service authenticated the request before its plan
        req = self.req
        taken = await self.units.take(principal.group_id, principal.web_units_per_day)
        target = WebTarget(api_key=api_key, timeout_s=link.profile.timeout_s)
        adapter = link.profile.adapter
        platform = attempt.served_by == PLATFORM
        ctx.meter.upstream_sent = True  # the upstream mark: set where the adapter is called
        try:
            try:
                if req.action == SCRAPE:
                    answer = await _bounded(adapter.scrape(req.url, target), link.profile.timeout_s)
                else:
                    answer = await _bounded(
                        adapter.search(req.query, req.max_results, target), link.profile.timeout_s
                    )
            except ProviderError as exc:
                billed = exc.billed_units if isinstance(exc, WebProviderError) else 0
                if billed:
                    ctx.web.add(link.unit, billed, price_micro=link.price_micro, platform=platform)
                    ctx.web.provider = ctx.web.provider or link.profile.name
                    ctx.web.served_by = ctx.web.served_by or attempt.served_by
                else:
                    await self.units.give_back(taken)
                raise
        except BaseException as exc:
            if not isinstance(exc, ProviderError):
                await self.units.give_back(taken)
            raise
        ctx.web.add(link.unit, 1, price_micro=link.price_micro, platform=platform)
        return answer


class AcquisitionOrchestrator:
    def __init__(self, *, breakers, keys, units: DailyUnits) -> None:
        self.runner = ChainRunner(breakers=breakers, keys=keys)
        self.units = units

    async def run(self, ctx: WebContext, plan: WebPlan, req: WebRequest, *, keep_page) -> Answered:
        """Walk the plan; return what served. `await keep_page(answer)` says whether a
        direct page may be the answer (False: scripts write its content, try a renderer)."""
        ctx.web.url = ctx.web.url or req.url
        policy = WebPolicy(plan, req, self.units, keep_page)
        outcome = await self.runner.run(ctx, plan.links, policy)
        ctx.web.provider = outcome.link.profile.name
        ctx.web.served_by = outcome.attempt.served_by
        return Answered(
            link=outcome.link, served_by=outcome.attempt.served_by, answer=outcome.answer
        )


async def _bounded(call, timeout_s: float):
    try:
        async with asyncio.timeout(timeout_s):
            return await call
    except TimeoutError as exc:
        raise connection_error(exc) from None
