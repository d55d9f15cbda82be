"""The acquisition orchestrator: walks a web plan and decides what a failure may cost.

Its own policy, the model path's primitives (breakers, key rotation, escrow, one mapping of
vendor failures to our errors):
- the links in order until one succeeds; a scrape whose page our fetcher got but whose
  content scripts write goes on to a renderer, and comes back to that page if none serves;
- at most two tries per profile, the second only after a retryable failure that billed
  nothing (a vendor that says it charged a failed try ends that profile's tries);
- before every call, the unit it may bill is taken from the group's daily unit budget
  (LM-3004), and given back when the call billed nothing;
- team pools rotate as for models (a 429 benches the key, a 401/403 marks it failing);
- a prepaid request's first platform call reserves the plan's worst case on the wallet
  (LM-4002), committed at the units billed when its usage row is stored;
- breakers judge the vendors (render, search); our own fetcher's failures are the site's;
- a URL the fetcher refuses (a private address, a scheme) ends the request: LM-2001.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from core import errors
from gateway.adapters.base import ProviderError, connection_error
from gateway.context import RequestContext
from gateway.orchestrator import (
    TRIES_PER_ATTEMPT,
    bench_refused_key,
    judges_provider,
    pick_error,
    record_attempt,
    upstream_error,
)
from gateway.plan import PLATFORM, TEAM, Attempt
from gateway.web.plan import WebLink, WebPlan
from gateway.web.types import (
    SCRAPE,
    PageAnswer,
    SearchAnswer,
    WebBill,
    WebProviderError,
    WebRequest,
    WebTarget,
)
from gateway.web.units import DailyUnits

BREAKER_MODEL = "web"


@dataclass(frozen=True, slots=True)
class Answered:
    link: WebLink
    served_by: str
    answer: PageAnswer | SearchAnswer


class _LinkFailed(Exception):
    def __init__(self, error: errors.GatewayError, *, upstream: bool, defers: bool = False):
        super().__init__(error.message)
        self.error = error
        self.upstream = upstream  # a vendor was called and failed
        self.defers = defers  # a refusal before any call: an earlier upstream error beats it


class _AttemptFailed(Exception):
    def __init__(self, error: errors.GatewayError, *, judged: bool, upstream: bool = True):
        super().__init__(error.message)
        self.error = error
        self.judged = judged
        self.upstream = upstream


class AcquisitionOrchestrator:
    def __init__(self, *, breakers, keys, escrow, units: DailyUnits) -> None:
        self.breakers = breakers
        self.keys = keys
        self.escrow = escrow
        self.units = units

    async def run(
        self, ctx: RequestContext, plan: WebPlan, req: WebRequest, *, keep_page
    ) -> Answered:
        """Walk the plan; return what served. `await keep_page(answer)` says whether a
        direct page may be the answer (False: scripts write its content, try a renderer)."""
        ctx.web = ctx.web or WebBill()
        ctx.web.url = ctx.web.url or req.url
        failures: list[_LinkFailed] = []
        kept: Answered | None = None
        for index, link in enumerate(plan.links):
            if kept is not None and not link.profile.adapter.renders:
                continue
            try:
                served = await self._run_link(ctx, plan, link, req)
            except errors.DailyUnitsExhausted:
                if kept is not None:  # the page our fetcher got is the answer
                    return self._settled(ctx, kept)
                raise
            except _LinkFailed as failed:
                if isinstance(failed.error, errors.InvalidRequest):
                    raise failed.error from None  # the URL itself is refused: no profile may try it
                failures.append(failed)
                continue
            renderers_left = any(later.profile.adapter.renders for later in plan.links[index + 1 :])
            if req.action == SCRAPE and renderers_left and not await keep_page(served.answer):
                kept = served
                continue
            return self._settled(ctx, served)
        if kept is not None:
            return self._settled(ctx, kept)
        raise pick_error(failures, none="No web profile could serve this request.")

    @staticmethod
    def _settled(ctx: RequestContext, served: Answered) -> Answered:
        ctx.web.provider = served.link.profile.name
        ctx.web.served_by = served.served_by
        return served

    # ---- one link ----

    async def _run_link(
        self, ctx: RequestContext, plan: WebPlan, link: WebLink, req: WebRequest
    ) -> Answered:
        name = link.profile.name
        if link.locked:
            self._trail(ctx, link, None, "chain_locked")
            raise _LinkFailed(
                errors.TeamKeysExhausted(
                    f"Chain locked: no team key for {name} and platform fallback is off."
                ),
                upstream=False,
                defers=True,
            )
        if not link.attempts:
            self._trail(ctx, link, None, "no_attempt")
            raise _LinkFailed(
                errors.TeamKeysExhausted(f"No team key for {name} and platform serving is off."),
                upstream=False,
            )
        ticket = None
        if link.judged:
            lease_s = link.profile.timeout_s * TRIES_PER_ATTEMPT * len(link.attempts) + 5
            ticket = await self.breakers.acquire(link.breaker_key, BREAKER_MODEL, lease_s=lease_s)
            if ticket is None:
                self._trail(ctx, link, None, "circuit_open")
                raise _LinkFailed(
                    errors.CircuitOpen(retry_after_s=self.breakers.cooldown_s),
                    upstream=False,
                    defers=True,
                )
        last: _LinkFailed | None = None
        try:
            for attempt in link.attempts:
                try:
                    if attempt.served_by == TEAM:
                        answer = await self._run_team(ctx, link, attempt, req)
                    else:
                        answer = await self._run_platform(ctx, plan, link, attempt, req)
                except _AttemptFailed as failed:
                    last = _LinkFailed(failed.error, upstream=failed.upstream)
                    if isinstance(failed.error, errors.InvalidRequest):
                        raise last from None
                    if failed.judged and ticket is not None:
                        await self.breakers.failure(ticket)
                        ticket = None
                        break
                    continue
                if ticket is not None:
                    await self.breakers.success(ticket)
                    ticket = None
                return Answered(link=link, served_by=attempt.served_by, answer=answer)
        finally:
            if ticket is not None:
                await self.breakers.release(ticket)
        raise last or _LinkFailed(errors.UpstreamFailed(), upstream=False)

    async def _run_team(self, ctx: RequestContext, link: WebLink, attempt: Attempt, req):
        candidates = await self.keys.candidates(attempt.pool)
        tries = 0
        index = 0
        last: _AttemptFailed | None = None
        while index < len(candidates):
            pool_key = candidates[index]
            try:
                return await self._call(ctx, link, attempt, req, api_key=pool_key.secret)
            except ProviderError as exc:
                if await bench_refused_key(self.keys, pool_key, exc):
                    index += 1
                    continue
                last = self._failed(exc, served_by=TEAM)
                tries += 1
                if not _may_retry(exc) or tries >= TRIES_PER_ATTEMPT:
                    raise last from None
                index = min(index + 1, len(candidates) - 1)
        if last is not None:
            raise last
        raise _AttemptFailed(
            errors.TeamKeysExhausted(
                f"Every team key for {link.profile.name} is benched or failing."
            ),
            judged=False,
            upstream=False,
        )

    async def _run_platform(
        self, ctx: RequestContext, plan: WebPlan, link: WebLink, attempt: Attempt, req
    ):
        principal = ctx.principal
        bill = ctx.web
        if plan.budget_estimate_micro and bill.reservation_id is None and not ctx.call_marked:
            if attempt.needs_escrow:
                try:
                    bill.reservation_id = await self.escrow.reserve(
                        account_id=principal.account_id,
                        request_id=ctx.request_id,
                        group_id=principal.group_id,
                        api_key_id=principal.api_key_id,
                        attempt_no=1,
                        amount_micro=plan.budget_estimate_micro,
                    )
                except errors.WalletInsufficient as exc:
                    self._trail(ctx, link, attempt, "wallet_insufficient")
                    raise _AttemptFailed(exc, judged=False, upstream=False) from None
            else:  # the hold says a call was sent, so a crash charges it (billing/reaper.py)
                ctx.hold_taken = await self.escrow.mark_sent(
                    request_id=ctx.request_id,
                    group_id=principal.group_id,
                    amount_micro=plan.budget_estimate_micro,
                    hold_taken=ctx.hold_taken,
                )
                ctx.call_marked = True
        api_key = link.profile.platform_key
        for try_no in range(1, TRIES_PER_ATTEMPT + 1):
            try:
                return await self._call(ctx, link, attempt, req, api_key=api_key)
            except ProviderError as exc:
                if try_no < TRIES_PER_ATTEMPT and _may_retry(exc):
                    continue
                raise self._failed(exc, served_by=PLATFORM) from None
        raise AssertionError("unreachable")

    def _failed(self, exc: ProviderError, *, served_by: str) -> _AttemptFailed:
        if isinstance(exc, WebProviderError) and exc.refused:
            return _AttemptFailed(errors.InvalidRequest(exc.message), judged=False, upstream=False)
        if isinstance(exc, WebProviderError) and exc.status is None and not exc.timeout:
            # Our fetcher's own verdict on the site (too large, unreachable): say it plainly.
            return _AttemptFailed(errors.UpstreamFailed(exc.message), judged=False)
        return _AttemptFailed(upstream_error(exc), judged=judges_provider(exc, served_by=served_by))

    # ---- one call ----

    async def _call(self, ctx: RequestContext, link: WebLink, attempt: Attempt, req, *, api_key):
        principal = ctx.principal
        taken = await self.units.take(principal.group_id, principal.web_units_per_day)
        target = WebTarget(api_key=api_key, timeout_s=link.profile.timeout_s)
        adapter = link.profile.adapter
        platform = attempt.served_by == PLATFORM
        ctx.meter.upstream_sent = True  # the upstream mark: set where the adapter is called
        started = time.monotonic()
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
                self._trail(ctx, link, attempt, "upstream_error", exc, started)
                raise
        except BaseException as exc:
            if not isinstance(exc, ProviderError):
                await self.units.give_back(taken)
            raise
        ctx.web.add(link.unit, 1, price_micro=link.price_micro, platform=platform)
        self._trail(ctx, link, attempt, "ok", None, started)
        return answer

    # ---- bookkeeping ----

    def _trail(
        self,
        ctx: RequestContext,
        link: WebLink,
        attempt: Attempt | None,
        outcome: str,
        exc: ProviderError | None = None,
        started: float | None = None,
    ) -> None:
        platform = attempt is not None and attempt.served_by == PLATFORM
        record_attempt(
            ctx,
            provider=link.profile.name,
            model=link.unit,
            attempt=attempt,
            outcome=outcome,
            exc=exc,
            started=started,
            reservation_id=ctx.web.reservation_id if platform else None,
        )


def _may_retry(exc: ProviderError) -> bool:
    """A second try only after a retryable failure that billed nothing (the seed's rule)."""
    billed = exc.billed_units if isinstance(exc, WebProviderError) else 0
    return exc.retryable and not billed


async def _bounded(call, timeout_s: float):
    try:
        async with asyncio.timeout(timeout_s):
            return await call
    except TimeoutError as exc:
        raise connection_error(exc) from None
