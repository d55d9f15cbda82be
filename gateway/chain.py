"""Running a chain of links, the same for every request kind; each kind's rules are a policy.

Rules, once, here:
- a link refused by the chain lock, or with no attempt (no pool and no platform serving, or an
  emptied pool with fallback off), refuses LM-3021 without a call;
- a judged link asks its breaker first (an open circuit: LM-3030, no call); a failure that
  says something about the provider opens it, a success closes it;
- an attempt walks its keys (core/key_pool.py: team keys round-robin, a profile's platform
  keys in its strategy's order, or its one key): a key the vendor refuses is set aside as
  its kind says and the next key is tried (a key-specific refusal does not use up a try);
  with no usable key the next attempt (the platform's, if the link has one) runs;
- at most two tries of an attempt, the second only when the policy says the failure may be
  retried; a platform attempt's call is covered first by the request's money handle
  (billing/request_money.py), and a failed call's own reservation is given back;
- every try and every refusal before a call is one line of the attempt trail;
- a vendor's refusal of the request itself (a 4xx but 401, 402, 403, 408, 409, 429) ends
  the request at once with the vendor's status and message (LM-2002): the same request would
  be refused again anywhere, so no retry, no other key, link or platform fallback, no
  breaker failure and no bench;
- the client gets the last link's error, except that a chain-lock or open-circuit refusal
  yields to an earlier upstream failure.

What a vendor's failure means in our language is gateway/failures.py's.

A `ChainPolicy` says what differs between model and web requests: how one call is made and
what a failure means, which failures are retried, how a platform call is covered, which
links are judged, and when an answer ends the chain (gateway/orchestrator.py,
gateway/web/orchestrator.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from byok.payers import refusal_message
from byok.routing import KeyRotation
from core import errors, metrics
from core.key_pool import KeyPool, NoKeyFree
from core.shared_state import SharedState
from core.usage_record import AttemptRecord
from gateway.adapters.base import ProviderError
from gateway.attempts import TEAM, Attempt
from gateway.breakers import Ticket
from gateway.catalog import Profile
from gateway.context import RequestContext
from gateway.failures import AttemptFailed, refused_by_vendor
from gateway.platform_keys import OwnCredential, OwnKey, PlatformKeys
from gateway.tracing import called, calling

TRIES_PER_ATTEMPT = 2
UPSTREAM_ERRORS = (
    errors.UpstreamFailed,
    errors.UpstreamTimeout,
    errors.UpstreamRateLimited,
    errors.VendorRefused,
)
# The request context a policy works on (ModelContext, WebContext): the runner hands its
# policy the context it was given.
C = TypeVar("C", bound=RequestContext)
C_in = TypeVar("C_in", bound=RequestContext, contravariant=True)


class LinkFailed(Exception):
    """One link failed: its error, whether a vendor was called and failed (`upstream`), and
    whether it was a refusal before any call that an earlier upstream failure beats."""

    def __init__(
        self,
        error: errors.GatewayError,
        *,
        upstream: bool,
        defers: bool = False,
        ends_request: bool = False,
    ) -> None:
        super().__init__(error.message)
        self.error = error
        self.upstream = upstream
        self.defers = defers
        self.ends_request = ends_request

    @classmethod
    def of(cls, failed: AttemptFailed | None) -> LinkFailed:
        if failed is None:
            return cls(errors.UpstreamFailed(), upstream=False)
        return cls(
            failed.error,
            upstream=isinstance(failed.error, UPSTREAM_ERRORS),
            ends_request=failed.ends_request,
        )


def pick_error(failures: list[LinkFailed], *, none: str) -> errors.GatewayError:
    """Return the error a failed chain answers: the last link's, except that a refusal before
    any call (a chain lock, an open circuit) yields to an earlier upstream failure. `none`:
    the message when nothing was tried."""
    if not failures:
        return errors.UpstreamFailed(none)
    last = failures[-1]
    if last.defers:
        earlier_upstream = [f for f in failures[:-1] if f.upstream]
        if earlier_upstream:
            return earlier_upstream[-1].error
    return last.error


class ChainLink(Protocol):
    """What the runner reads of a link (gateway.plan.Link, gateway.web.plan.WebLink)."""

    @property
    def profile(self) -> Profile: ...
    @property
    def attempts(self) -> tuple[Attempt, ...]: ...
    @property
    def breaker_key(self) -> str: ...
    @property
    def locked(self) -> bool: ...
    @property
    def pool_exhausted_refusal(self) -> bool: ...
    @property
    def key_tokens(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """What served: the link, the attempt, and the policy's answer."""

    link: Any
    attempt: Attempt
    answer: Any


class ChainPolicy(Protocol[C_in]):
    """What a request kind decides while the shared runner walks its chain (on its kind of
    request context)."""

    none_served: str  # the failed chain's message when no link was tried

    def trail_model(self, link: Any) -> str:
        """Name the link's model (or unit) as the attempt trail records it."""

    def breaker_model(self, link: Any) -> str | None:
        """Name what the link's breaker judges, or None when no breaker judges it."""

    def may_retry(self, exc: ProviderError) -> bool:
        """Say whether a failed try may be tried again."""

    def failure(self, exc: ProviderError, *, served_by: str) -> AttemptFailed:
        """Say what a vendor failure means for this kind."""

    async def cover(self, ctx: C_in, link: Any, attempt: Attempt) -> int | None:
        """Cover a platform call before it is sent; return its reservation, if any."""

    async def uncovered(self, ctx: C_in, reservation_id: int) -> None:
        """Settle what a platform attempt that served nothing reserved."""

    async def call(
        self,
        ctx: C_in,
        link: Any,
        attempt: Attempt,
        *,
        api_key: str | None,
        reservation_id: int | None,
    ) -> Any:
        """Make one vendor call; raise ProviderError when it fails."""

    def skips(self, link: Any) -> bool:
        """Say whether the chain passes this link by."""

    async def answers(self, outcome: Outcome, rest: tuple) -> bool:
        """Say whether what served ends the chain (False: try the links after it)."""

    def held_back(self, refusal: errors.GatewayError | None) -> Outcome | None:
        """Return an answer held back that still serves when the chain ends (`refusal`: a
        refusal mid-chain, e.g. the day's units spent; None: the links ran out), if any."""


class ChainRunner:
    """Walk a chain under a policy: breakers, key pools, tries, the trail, the error."""

    def __init__(
        self, *, breakers, keys: KeyRotation, platform_keys: PlatformKeys | None = None
    ) -> None:
        self.breakers = breakers
        self.keys = keys
        self._platform_keys = platform_keys
        self._own_key = OwnKey()

    @property
    def platform_keys(self) -> PlatformKeys:
        """The gateway's key picker; a runner made without one (tests of the rules, web
        chains: web profiles have no pools) makes its own the first time a pool needs it."""
        if self._platform_keys is None:
            self._platform_keys = PlatformKeys(SharedState())
        return self._platform_keys

    async def run(
        self,
        ctx: C,
        links: tuple,
        policy: ChainPolicy[C],
        *,
        first_ticket: Ticket | None = None,
    ) -> Outcome:
        """Run the links in order until one answers; `first_ticket` is the first link's
        breaker admission when the breakers granted it with the request's admission."""
        failures: list[LinkFailed] = []
        for index, link in enumerate(links):
            if policy.skips(link):
                continue
            ticket, first_ticket = first_ticket, None
            try:
                outcome = await self.run_link(ctx, link, policy, ticket=ticket)
            except LinkFailed as failed:
                if failed.ends_request:
                    # The chain ends here; an answer a kind held back (a page our fetcher
                    # got before a renderer refused it) still serves, as when links run out.
                    held_back = policy.held_back(None)
                    if held_back is not None:
                        return held_back
                    raise failed.error from None
                failures.append(failed)
                continue
            except errors.GatewayError as refusal:
                held_back = policy.held_back(refusal)
                if held_back is None:
                    raise
                return held_back
            if await policy.answers(outcome, links[index + 1 :]):
                return outcome
        held_back = policy.held_back(None)
        if held_back is not None:
            return held_back
        raise pick_error(failures, none=policy.none_served)

    async def run_link(
        self, ctx: C, link: ChainLink, policy: ChainPolicy[C], *, ticket: Ticket | None
    ) -> Outcome:
        """Run one link's attempts in order; raise LinkFailed when none serves."""
        profile = link.profile
        if link.locked:
            self._trail(ctx, link, policy, None, "chain_locked")
            raise LinkFailed(
                errors.TeamKeysExhausted(
                    refusal_message(
                        profile.name, locked=True, fallback_off=link.pool_exhausted_refusal
                    )
                ),
                upstream=False,
                defers=True,
            )
        if not link.attempts:
            self._trail(ctx, link, policy, None, "no_attempt")
            # No pool and no platform serving, or a pool emptied with its fallback off.
            raise LinkFailed(
                errors.TeamKeysExhausted(
                    refusal_message(
                        profile.name, locked=False, fallback_off=link.pool_exhausted_refusal
                    )
                ),
                upstream=False,
            )
        judged_as = policy.breaker_model(link)
        if judged_as is not None and ticket is None:
            # A probe's lease outlasts every try the link may make, so a slow probe is never
            # joined by a second one; a probe that hangs fails at its last deadline.
            lease_s = profile.timeout_s * TRIES_PER_ATTEMPT * len(link.attempts) + 5
            ticket = await self.breakers.acquire(link.breaker_key, judged_as, lease_s=lease_s)
            if ticket is None:
                self._trail(ctx, link, policy, None, "circuit_open")
                raise LinkFailed(
                    errors.CircuitOpen(retry_after_s=self.breakers.cooldown_s),
                    upstream=False,
                    defers=True,
                )
        last: AttemptFailed | None = None
        try:
            for attempt in link.attempts:
                try:
                    answer = await self._run_attempt(ctx, link, policy, attempt)
                except AttemptFailed as failed:
                    last = failed
                    if failed.ends_request:
                        break
                    if failed.judged and ticket is not None:
                        await self.breakers.failure(ticket)
                        ticket = None
                        break
                    continue
                if ticket is not None:
                    await self.breakers.success(ticket)
                    ticket = None
                return Outcome(link=link, attempt=attempt, answer=answer)
        finally:
            if ticket is not None:
                await self.breakers.release(ticket)
        raise LinkFailed.of(last)

    async def _run_attempt(
        self, ctx: C, link: ChainLink, policy: ChainPolicy[C], attempt: Attempt
    ) -> Any:
        """Run one attempt on its keys; a platform call is covered first, and what a platform
        attempt that served nothing reserved is given back."""
        if attempt.served_by == TEAM:
            return await self._run_keys(ctx, link, policy, attempt, reservation_id=None)
        try:
            reservation_id = await policy.cover(ctx, link, attempt)
        except errors.WalletInsufficient as exc:
            self._trail(ctx, link, policy, attempt, "wallet_insufficient")
            raise AttemptFailed(exc, judged=False) from None
        served = False
        try:
            answer = await self._run_keys(ctx, link, policy, attempt, reservation_id=reservation_id)
            served = True
            return answer
        finally:
            if reservation_id is not None and not served:
                await policy.uncovered(ctx, reservation_id)

    def _keys_of(self, link: ChainLink, attempt: Attempt) -> tuple[KeyPool[Any, Any], Any]:
        """Return the pool kind that serves an attempt, and its pool: the group's team keys,
        the profile's platform keys, or the profile's one key."""
        if attempt.served_by == TEAM:
            assert attempt.pool is not None  # the plan gives a team attempt its pool
            return self.keys, attempt.pool
        if link.profile.key_pool is not None:
            return self.platform_keys, link.profile.key_pool
        return self._own_key, OwnCredential(link.profile.name, link.profile.platform_key)

    async def _run_keys(
        self,
        ctx: C,
        link: ChainLink,
        policy: ChainPolicy[C],
        attempt: Attempt,
        *,
        reservation_id: int | None,
    ) -> Any:
        """The one key loop (core/key_pool.py): keys in their kind's order; a key the vendor
        refuses is set aside as its kind says and the call passes to the next one without
        using up a try; a failed try may be tried once more, on the key the kind gives next;
        no key free: the last failure, else the pool's refusal."""
        keys, pool = self._keys_of(link, attempt)
        walk = await keys.walk(pool, tokens=link.key_tokens)
        tries = 0
        last: AttemptFailed | None = None
        while True:
            key = await walk.next()
            if isinstance(key, NoKeyFree):
                if keys.busy_outcome is not None:
                    self._trail(ctx, link, policy, attempt, keys.busy_outcome)
                if last is not None:
                    raise last
                raise AttemptFailed(
                    keys.exhausted(pool, key, profile=link.profile.name), judged=False
                )
            try:
                answer = await self._try(
                    ctx,
                    link,
                    policy,
                    attempt,
                    api_key=key.secret,
                    reservation_id=reservation_id,
                    key_label=key.label,
                )
            except BaseException as exc:
                keys.done(pool, key)
                if not isinstance(exc, ProviderError):
                    raise
                if await keys.set_aside(pool, key, exc):
                    walk.refused(key)
                    if keys.refusal_fails_attempt:
                        last = policy.failure(exc, served_by=attempt.served_by)
                    continue
                last = policy.failure(exc, served_by=attempt.served_by)
                tries += 1
                if not policy.may_retry(exc) or tries >= TRIES_PER_ATTEMPT:
                    raise last from None
                walk.failed(key)
                continue
            # A stream keeps its key in flight until it ends, not only to its first chunk.
            return keys.in_flight_until_done(pool, key, answer)

    async def _try(
        self,
        ctx: C,
        link: ChainLink,
        policy: ChainPolicy[C],
        attempt: Attempt,
        *,
        api_key: str | None,
        reservation_id: int | None,
        key_label: str = "",
    ) -> Any:
        """One call, and its line of the trail."""
        calling(ctx)  # a traced call's span id, sent to the vendor as its traceparent
        started = time.monotonic()
        try:
            answer = await policy.call(
                ctx, link, attempt, api_key=api_key, reservation_id=reservation_id
            )
        except ProviderError as exc:
            self._trail(
                ctx,
                link,
                policy,
                attempt,
                "upstream_error",
                exc,
                started,
                reservation_id,
                key_label,
            )
            raise
        self._trail(ctx, link, policy, attempt, "ok", None, started, reservation_id, key_label)
        return answer

    @staticmethod
    def _trail(
        ctx: C,
        link: ChainLink,
        policy: ChainPolicy[C],
        attempt: Attempt | None,
        outcome: str,
        exc: ProviderError | None = None,
        started: float | None = None,
        reservation_id: int | None = None,
        key_label: str = "",
    ) -> None:
        """Add one try (or a link refused before any call) to the request's attempt trail;
        the label of the key that made it (a team key's, a pooled platform key's) names it,
        never the key."""
        provider, model = link.profile.name, policy.trail_model(link)
        if exc is not None and exc.timeout:
            outcome = "timeout"
        elif exc is not None and refused_by_vendor(exc):
            outcome = "refused_by_vendor"
        latency_ms = 0
        if started is not None:  # a failed call's wait counts too (a timeout: the deadline)
            waited_s = time.monotonic() - started
            metrics.labeled(metrics.UPSTREAM_LATENCY, provider).observe(waited_s)
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
                key_label=key_label,
            )
        )
        if started is not None:
            called(ctx, started)  # its wait (the overhead leaves it out), its span's end
