"""The orchestrator: runs an attempt plan and decides what a vendor failure may cost.

Rules, once, here:
- a deadline on every vendor call (the profile's timeout to the answer or the first chunk,
  then its idle timeout between chunks);
- at most two tries of an attempt, and only on a retryable error;
- team attempts rotate keys round-robin: a 429 benches the key for max(Retry-After, 30 s),
  a 401/403 marks it failing for 10 minutes, and the next key is tried (a key-specific
  refusal does not use up a try); with no usable key the platform attempt runs if the plan
  has one, else the link answers LM-3021;
- breakers per (scope, model), judged only on what says something about the provider;
- escrow reserved before a prepaid platform call, committed at measured cost, else cancelled;
- never retry or fall back once the first streamed chunk reached the client;
- each link's error is kept; the client gets the last one, except that a chain-lock or
  open-circuit refusal yields to an earlier upstream failure.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from core import errors, metrics
from core.usage_record import AttemptRecord
from gateway.adapters.base import CallTarget, ProviderError
from gateway.breakers import Ticket
from gateway.context import RequestContext, Served
from gateway.plan import PLATFORM, TEAM, Attempt, Link
from gateway.types import Chunk, Completion

log = logging.getLogger(__name__)
TEAM_BENCH_429_MIN_S = 30.0
TEAM_BENCH_AUTH_S = 600.0
TRIES_PER_ATTEMPT = 2


class _NoUsableKey(Exception):
    """Every key of a team pool is benched or failed during this request."""


@dataclass(slots=True)
class _LinkError:
    error: errors.GatewayError
    upstream: bool  # the provider was actually called and failed
    defers: bool = False  # a chain-lock or open-circuit refusal: an upstream error beats it


def upstream_error(exc: ProviderError, *, mid_stream: bool = False) -> errors.GatewayError:
    """Say in our language what a vendor failure means: the one place this is decided."""
    if exc.timeout:
        return errors.UpstreamTimeout()
    if mid_stream:  # after the first chunk there is no status to speak of, only a cut
        return errors.UpstreamFailed("The upstream stream broke.")
    if exc.status == 429:
        # Waiting helps: say so in our language, with the vendor's wait (or a second).
        retry_after_s = math.ceil(exc.retry_after_s) if exc.retry_after_s else 1
        return errors.UpstreamRateLimited(
            f"The upstream provider is rate limiting (HTTP 429); retry after {retry_after_s} s.",
            retry_after_s=retry_after_s,
        )
    if exc.status is not None:
        return errors.UpstreamFailed(f"The upstream provider failed (HTTP {exc.status}).")
    return errors.UpstreamFailed()


def judges_provider(exc: ProviderError, *, served_by: str) -> bool:
    """Say whether a failure counts against the breaker (client faults do not)."""
    if exc.status is None or exc.status >= 500 or exc.status in (408, 429):
        return True
    # A platform key refused is the platform's problem; a team key refused is the key's.
    return exc.status in (401, 403) and served_by == PLATFORM


def record_attempt(
    ctx: RequestContext,
    *,
    provider: str,
    model: str,
    attempt: Attempt | None,
    outcome: str,
    exc: ProviderError | None = None,
    started: float | None = None,
    reservation_id: int | None = None,
) -> None:
    """Add one try (or a link refused before any call) to the request's attempt trail."""
    if exc is not None and exc.timeout:
        outcome = "timeout"
    latency_ms = 0
    if started is not None:  # a failed call's wait counts too (a timeout: the deadline)
        waited_s = time.monotonic() - started
        metrics.UPSTREAM_LATENCY.labels(provider).observe(waited_s)
        latency_ms = int(waited_s * 1000)
    ctx.trail.append(
        AttemptRecord(
            order=len(ctx.trail) + 1,
            provider=provider,
            model=model,
            served_by=attempt.served_by if attempt else "",
            source=attempt.source if attempt else f"{provider}:{model}",
            outcome=outcome,
            upstream_status=200 if outcome == "ok" else (exc.status if exc else None),
            latency_ms=latency_ms,
            reservation_id=reservation_id,
        )
    )


def pick_error(failures: list, *, none: str) -> errors.GatewayError:
    """Return the error a failed chain answers: the last link's, except that a refusal before
    any call (a chain lock, an open circuit) yields to an earlier upstream failure. Each
    failure has `error`, `upstream` and `defers`; `none`: the message when nothing was tried."""
    if not failures:
        return errors.UpstreamFailed(none)
    last = failures[-1]
    if last.defers:
        earlier_upstream = [f for f in failures[:-1] if f.upstream]
        if earlier_upstream:
            return earlier_upstream[-1].error
    return last.error


async def bench_refused_key(keys, pool_key, exc: ProviderError) -> bool:
    """Bench a team key the vendor refused (429: max(Retry-After, 30 s); 401/403: failing for
    10 minutes) and say so: the next key is tried, and the refusal uses up no try."""
    if exc.status == 429:
        await keys.bench(pool_key, max(exc.retry_after_s or 0, TEAM_BENCH_429_MIN_S))
        return True
    if exc.status in (401, 403):
        await keys.mark_failing(pool_key, TEAM_BENCH_AUTH_S)
        return True
    return False


class Orchestrator:
    def __init__(self, *, breakers, keys, escrow) -> None:
        self.breakers = breakers
        self.keys = keys
        self.escrow = escrow

    # ---- public entry points ----

    async def complete(self, ctx: RequestContext, *, first_ticket: Ticket | None) -> Completion:
        return await self._run_chain(ctx, stream=False, first_ticket=first_ticket)

    async def open_stream(
        self, ctx: RequestContext, *, first_ticket: Ticket | None
    ) -> AsyncIterator[list[Chunk]]:
        """Return a stream whose first chunk already arrived: from here on, no fallback.

        It yields the chunks in lists, those that arrived together (one write for them).

        Failures while it runs arrive as GatewayError (upstream_error, mid_stream=True).
        """
        return await self._run_chain(ctx, stream=True, first_ticket=first_ticket)

    async def _run_chain(self, ctx: RequestContext, *, stream: bool, first_ticket: Ticket | None):
        """Run the links in order; `first_ticket` is the first link's breaker admission, when
        the breakers granted it along with the request's admission (no round trip of its own).
        """
        failures: list[_LinkError] = []
        for link in ctx.plan.links:
            ticket, first_ticket = first_ticket, None
            try:
                return await self._run_link(ctx, link, stream=stream, ticket=ticket)
            except _LinkFailed as failed:
                failures.append(failed.link_error)
        raise pick_error(failures, none="No provider can serve this request.")

    # ---- one link ----

    async def _run_link(
        self, ctx: RequestContext, link: Link, *, stream: bool, ticket: Ticket | None
    ):
        offer = link.offer
        if link.locked:
            self._trail(ctx, link, None, "chain_locked")
            raise _LinkFailed(
                errors.TeamKeysExhausted(
                    f"Chain locked: no team key for {offer.profile.name} "
                    "and platform fallback is off."
                ),
                upstream=False,
                defers=True,
            )
        if not link.attempts:
            self._trail(ctx, link, None, "no_attempt")
            raise _LinkFailed(
                errors.TeamKeysExhausted(
                    f"No team key for {offer.profile.name} and platform serving is off."
                ),
                upstream=False,
            )
        # A probe's lease outlasts every try the link may make, so a slow probe is never
        # joined by a second one; a probe that hangs fails at its last deadline.
        lease_s = offer.profile.timeout_s * TRIES_PER_ATTEMPT * len(link.attempts) + 5
        if ticket is None:
            ticket = await self.breakers.acquire(link.breaker_key, offer.name, lease_s=lease_s)
        if ticket is None:
            self._trail(ctx, link, None, "circuit_open")
            raise _LinkFailed(
                errors.CircuitOpen(retry_after_s=self.breakers.cooldown_s),
                upstream=False,
                defers=True,
            )
        judged = False
        last: _LinkError | None = None
        try:
            for attempt in link.attempts:
                try:
                    if attempt.served_by == TEAM:
                        result = await self._run_team(ctx, link, attempt, stream=stream)
                    else:
                        result = await self._run_platform(ctx, link, attempt, stream=stream)
                except _NoUsableKey:
                    last = _LinkError(
                        errors.TeamKeysExhausted(
                            f"Every team key for {offer.profile.name} is benched or failing."
                        ),
                        upstream=False,
                    )
                    continue
                except _AttemptFailed as failed:
                    last = failed.link_error
                    if failed.judges_provider:
                        judged = True
                        await self.breakers.failure(ticket)
                        ticket = None
                        break
                    continue
                await self.breakers.success(ticket)
                ticket = None
                return result
        except BaseException:
            if ticket is not None:
                await self.breakers.release(ticket)
                ticket = None
            raise
        finally:
            if ticket is not None and not judged:
                await self.breakers.release(ticket)
        raise _LinkFailed.wrap(last)

    async def _run_team(self, ctx: RequestContext, link: Link, attempt: Attempt, *, stream: bool):
        candidates = await self.keys.candidates(attempt.pool)
        tries = 0
        index = 0
        last: _AttemptFailed | None = None
        while index < len(candidates):
            pool_key = candidates[index]
            target = self._target(ctx, link, api_key=pool_key.secret)
            started = time.monotonic()
            try:
                return await self._call(ctx, link, attempt, target, stream=stream)
            except ProviderError as exc:
                self._trail(ctx, link, attempt, "upstream_error", exc, started)
                if await bench_refused_key(self.keys, pool_key, exc):
                    index += 1
                    continue
                last = _AttemptFailed(
                    upstream_error(exc),
                    judges_provider=judges_provider(exc, served_by=TEAM),
                )
                tries += 1
                if not exc.retryable or tries >= TRIES_PER_ATTEMPT:
                    raise last from None
                # The one retry goes to the next usable key, or the same one if it is alone.
                index = min(index + 1, len(candidates) - 1)
        if last is not None:
            raise last
        raise _NoUsableKey()

    async def _run_platform(
        self, ctx: RequestContext, link: Link, attempt: Attempt, *, stream: bool
    ):
        offer = link.offer
        principal = ctx.principal
        reservation_id = None
        if ctx.reserved_ahead is not None and ctx.reserved_ahead[0] is attempt:
            reservation_id = ctx.reserved_ahead[1]  # taken with the hold, for this attempt
            ctx.reserved_ahead = None
        elif attempt.needs_escrow:
            try:
                reservation_id = await self.escrow.reserve(
                    account_id=principal.account_id,
                    request_id=ctx.request_id,
                    group_id=principal.group_id,
                    api_key_id=principal.api_key_id,
                    attempt_no=len(ctx.trail) + 1,
                    amount_micro=attempt.escrow_budget_micro,
                )
            except errors.WalletInsufficient as exc:
                self._trail(ctx, link, attempt, "wallet_insufficient")
                raise _AttemptFailed(exc, judges_provider=False) from None
        if reservation_id is None and not ctx.call_marked:
            # A reservation records its call itself; otherwise the hold must say it, so a
            # gateway dying mid-answer leaves a charge, not a free request.
            ctx.hold_taken = await self.escrow.mark_sent(
                request_id=ctx.request_id,
                group_id=principal.group_id,
                amount_micro=ctx.plan.budget_estimate_micro,
                hold_taken=ctx.hold_taken,
            )
            ctx.call_marked = True
        target = self._target(ctx, link, api_key=offer.profile.platform_key)
        committed = False
        try:
            for try_no in range(1, TRIES_PER_ATTEMPT + 1):
                started = time.monotonic()
                try:
                    result = await self._call(
                        ctx, link, attempt, target, stream=stream, reservation_id=reservation_id
                    )
                except ProviderError as exc:
                    self._trail(ctx, link, attempt, "upstream_error", exc, started, reservation_id)
                    if exc.retryable and try_no < TRIES_PER_ATTEMPT:
                        continue
                    raise _AttemptFailed(
                        upstream_error(exc),
                        judges_provider=judges_provider(exc, served_by=PLATFORM),
                    ) from None
                committed = True
                return result
        finally:
            if reservation_id is not None and not committed:
                await self.escrow.cancel(reservation_id)

    # ---- one upstream call ----

    def _target(self, ctx: RequestContext, link: Link, *, api_key: str) -> CallTarget:
        return CallTarget(
            upstream_model=link.offer.upstream,
            api_key=api_key,
            max_tokens=link.max_tokens,
            payload=link.payload,
            shape=link.payload_shape,
            caller_label=ctx.caller_label,
        )

    async def _call(
        self,
        ctx: RequestContext,
        link: Link,
        attempt: Attempt,
        target: CallTarget,
        *,
        stream: bool,
        reservation_id: int | None = None,
    ):
        profile = link.offer.profile
        ctx.meter.upstream_sent = True  # the upstream mark: set where the adapter is called
        started = time.monotonic()
        if not stream:
            try:
                async with asyncio.timeout(profile.timeout_s):
                    completion = await profile.adapter.complete(ctx.req, target)
            except TimeoutError:
                raise ProviderError("upstream timed out", retryable=True, timeout=True) from None
            self._served(ctx, link, attempt, started, reservation_id)
            # The answer names the model that served it (a fallback link, not the first asked).
            return replace(completion, model=link.offer.name)
        chunks = profile.adapter.stream(ctx.req, target).__aiter__()
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
        self._served(ctx, link, attempt, started, reservation_id)
        return _follow(first, chunks, profile.idle_timeout_s)

    def _served(
        self,
        ctx: RequestContext,
        link: Link,
        attempt: Attempt,
        started: float,
        reservation_id: int | None,
    ) -> None:
        ctx.served = Served(
            offer=link.offer, served_by=attempt.served_by, reservation_id=reservation_id
        )
        self._trail(ctx, link, attempt, "ok", None, started, reservation_id)

    # ---- bookkeeping ----

    def _trail(
        self,
        ctx: RequestContext,
        link: Link,
        attempt: Attempt | None,
        outcome: str,
        exc: ProviderError | None = None,
        started: float | None = None,
        reservation_id: int | None = None,
    ) -> None:
        record_attempt(
            ctx,
            provider=link.offer.profile.name,
            model=link.offer.name,
            attempt=attempt,
            outcome=outcome,
            exc=exc,
            started=started,
            reservation_id=reservation_id,
        )


class _AttemptFailed(Exception):
    def __init__(self, error: errors.GatewayError, *, judges_provider: bool) -> None:
        super().__init__(error.message)
        upstream = isinstance(
            error, errors.UpstreamFailed | errors.UpstreamTimeout | errors.UpstreamRateLimited
        )
        self.link_error = _LinkError(error, upstream=upstream)
        self.judges_provider = judges_provider


class _LinkFailed(Exception):
    def __init__(self, error: errors.GatewayError, *, upstream: bool, defers: bool = False) -> None:
        super().__init__(error.message)
        self.link_error = _LinkError(error, upstream=upstream, defers=defers)

    @classmethod
    def wrap(cls, link_error: _LinkError | None) -> _LinkFailed:
        if link_error is None:
            return cls(errors.UpstreamFailed(), upstream=False)
        return cls(link_error.error, upstream=link_error.upstream)


async def _follow(
    first: list[Chunk], rest: AsyncIterator[list[Chunk]], idle_s: float
) -> AsyncIterator[list[Chunk]]:
    """Yield the first chunks, then the rest, each arrival within the idle timeout.

    A failure from here on is never retried; it arrives as our GatewayError.
    """
    try:
        yield first
        while True:
            try:
                async with asyncio.timeout(idle_s):
                    chunks = await anext(rest)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise errors.UpstreamTimeout() from None
            except ProviderError as exc:
                raise upstream_error(exc, mid_stream=True) from None
            except Exception as exc:  # an adapter that broke on a malformed event
                log.error("upstream stream broke (%s)", type(exc).__name__)  # no vendor text
                raise errors.UpstreamFailed("The upstream stream broke.") from None
            yield chunks
    finally:
        await rest.aclose()
