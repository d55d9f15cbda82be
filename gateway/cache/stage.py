"""The response cache as a stage of the request pipeline (gateway/pipeline.py).

- `prepare`, after the plan, decides (cache/policy.py) and keys (cache/keys.py); its lookup
  rides in the admission's Redis round trip when the cache shares that Redis. `look_up`
  then reads the stored answer; a store that is down is a miss, never an error. Every answer on the
  cached routes then says `X-Tollgate-Cache: hit | miss | bypass` (and `Age` on a hit).
- A hit is a request like any other but for its vendor call: admitted against the limits,
  held against the budgets, covered on the wallet like a platform call, recorded with a usage
  row and a receipt. It is priced at the operator's share of the call it replays
  (`cache_hit_price_pct` of the served model's prices) and paid by whoever would pay for that
  call now: when a team key would, the hit costs 0, like a team-served call, and no platform
  money moves.
  The row says `cache_status: hit` and what the replayed call cost (`uncached_cost_micro`).
- `answer_to_keep` and `keep`, in the finish, store a miss's answer before the client sees
  its end, so the next identical request hits: only a whole answer the vendor ended normally
  (never an error, a cut stream, a refusal, a content filter's end or an answer an output
  guardrail redacted). On the limits' Redis
  the write joins the finish's one round trip (the usage journal and the admission's
  release).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from core import metrics
from core.shared_state import Script, ScriptCall, SharedState
from core.usage_record import AttemptRecord
from gateway.attempts import PLATFORM, Attempt
from gateway.cache import modes
from gateway.cache.entries import Entry, pack, unpack
from gateway.cache.keys import entry_key
from gateway.cache.policy import BYPASS, BYPASSED, HIT, MISS, Decision, decide
from gateway.cache.store import RedisStore, Store, StoreDown
from gateway.catalog import ModelOffer
from gateway.context import ModelContext, Served
from gateway.types import Chunk, Completion, ModelRequest

if TYPE_CHECKING:
    from gateway.asgi import Exchange

# A SET whose refusal (a Redis out of memory that evicts nothing) is a reply, not an error:
# it rides in the finish's batch beside the usage journal, which it must never fail.
KEEP = Script(
    """
    local done = redis.pcall('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
    if type(done) == 'table' and done.err then return 0 end
    return 1
    """
)
# Ends that are not an answer worth replaying: a content filter's or a model's refusal.
UNSTORED_ENDS = frozenset({"content_filter", "refusal"})


@dataclass(slots=True)
class CacheState:
    """One request's dealings with the cache."""

    decision: Decision
    key: str = ""
    status: str = BYPASS
    uncached_cost_micro: int = 0  # a hit's replayed call, at full price
    completion: Completion | None = None  # a whole miss's answer, to keep
    arrivals: list[tuple[Chunk, ...]] | None = None  # a streamed miss's chunks, to keep


@dataclass(frozen=True, slots=True)
class Hit:
    entry: Entry
    offer: ModelOffer  # the plan's offer that served the stored answer, at the cache's prices
    attempt: Attempt  # who pays the hit, and its wallet cover
    cost_micro: int  # what the hit costs its payer (0 for a team's)
    uncached_cost_micro: int


@dataclass(frozen=True, slots=True)
class Kept:
    """A miss's answer, packed, on its way to the store."""

    key: str
    packed: bytes
    ttl_s: int

    def command(self) -> ScriptCall:
        """The write as a command that cannot fail the batch it joins (a full Redis: 0)."""
        return KEEP.command([self.key], [self.packed, self.ttl_s])


@dataclass(slots=True)
class ResponseCache:
    """The process's cache: its store, its clock (tests move it) and its entry cap."""

    store: Store
    max_entry_bytes: int
    clock: Callable[[], float] = field(default=time.time)

    def fresh(self, raw: bytes | None) -> Entry | None:
        """Return the entry a stored value holds while it is fresh on the cache's clock."""
        entry = unpack(raw) if raw is not None else None
        return entry if entry is not None and entry.fresh(self.clock()) else None

    def packed(self, entry: Entry) -> bytes | None:
        """Return an entry packed for the store, or None (counted) when over the entry cap."""
        packed = pack(entry)
        if len(packed) > self.max_entry_bytes:
            metrics.labeled(metrics.CACHE_STORES, "too_large").inc()
            return None
        return packed

    def rides_with(self, shared: SharedState) -> bool:
        """Say whether answers are kept in `shared`'s Redis (a write can join its batch)."""
        return isinstance(self.store, RedisStore) and self.store.shared is shared


def prepare(
    cache: ResponseCache, shared: SharedState, ex: Exchange, ctx: ModelContext, route: str
) -> tuple[tuple, ...]:
    """Decide what the cache does for this request and key it; return the lookup to send in
    the admission's Redis round trip when the cache shares that Redis (else nothing)."""
    req, plan, principal = ctx.req, ctx.plan, ctx.principal
    assert req is not None and plan is not None and principal is not None
    first = plan.links[0] if plan.links else None
    decision = (
        decide(
            ex.headers,
            mode=principal.cache_mode,
            tenant_ttl_s=principal.cache_ttl_s,
            terms=first.offer.cache,
        )
        if first is not None
        else BYPASSED
    )
    state = ctx.cache = CacheState(decision)
    if decision.bypassed:
        metrics.labeled(metrics.CACHE_LOOKUPS, route, BYPASS).inc()
        return ()
    state.key = entry_key(
        principal,
        ctx.caller_label,
        route=route,
        chain=tuple(link.offer.name for link in plan.links),
        body=req.body,
    )
    if not decision.lookup:  # a fresh answer, to be kept: a miss whatever is stored
        state.status = MISS
        ex.cache_status = MISS.encode()
        metrics.labeled(metrics.CACHE_LOOKUPS, route, MISS).inc()
        return ()
    return (("GET", state.key),) if cache.rides_with(shared) else ()


async def look_up(cache: ResponseCache, ex: Exchange, ctx: ModelContext, route: str) -> Hit | None:
    """Return the request's hit, if any: from the admission's round trip when the lookup
    rode in it, else from the store (a store that is down is a miss)."""
    state, req = ctx.cache, ctx.req
    assert state is not None and req is not None  # `prepare` ran
    if not state.decision.lookup:
        return None
    # Until here (an admission refused) the answer says bypass: nothing was looked up.
    state.status = MISS
    ex.cache_status = MISS.encode()
    replies = ctx.admission.also_replies if ctx.admission is not None else None
    try:
        raw = replies[0] if replies else await cache.store.get(state.key)
    except StoreDown:
        metrics.labeled(metrics.CACHE_LOOKUPS, route, "error").inc()
        return None
    entry = cache.fresh(raw)
    hit = _hit(ctx, entry, stream=req.stream) if entry is not None else None
    if hit is None:
        metrics.labeled(metrics.CACHE_LOOKUPS, route, MISS).inc()
        return None
    metrics.labeled(metrics.CACHE_LOOKUPS, route, HIT).inc()
    state.status = HIT
    state.uncached_cost_micro = hit.uncached_cost_micro
    ex.cache_status = HIT.encode()
    ex.cache_age = hit.entry.age_s(cache.clock())
    return hit


def _hit(ctx: ModelContext, entry: Entry, *, stream: bool) -> Hit | None:
    """Return the hit a stored entry makes for this request, or None when it cannot serve it
    (another mode it cannot cross to, or a plan that no longer offers the model that answered:
    a hit is always named and priced as what really answered it)."""
    if entry.streamed != stream and not _portable(entry):
        return None
    assert ctx.plan is not None
    links = [link for link in ctx.plan.links if link.attempts and not link.locked]
    link = next(
        (
            link
            for link in links
            if (link.offer.profile.name, link.offer.name) == (entry.provider, entry.model)
        ),
        None,
    )
    if link is None or not link.offer.cache.cacheable:
        return None
    payer = link.attempts[0]
    full = link.offer
    priced = replace(full, prices=full.prices.scaled(full.cache.hit_price_pct))
    uncached = full.cost_micro(entry.usage)
    cost = priced.cost_micro(entry.usage) if payer.served_by == PLATFORM else 0
    attempt = Attempt(
        served_by=payer.served_by,
        source=f"cache:{full.name}:{payer.served_by}",
        needs_escrow=payer.needs_escrow and cost > 0,
        escrow_budget_micro=cost,
    )
    return Hit(entry, priced, attempt, cost, uncached)


def _portable(entry: Entry) -> bool:
    if entry.completion is not None:
        return modes.completion_is_portable(entry.completion)
    assert entry.arrivals is not None
    return modes.chunks_are_portable([chunk for arrival in entry.arrivals for chunk in arrival])


async def cover_hit(ctx: ModelContext, hit: Hit) -> None:
    """Cover the hit like the platform call it replaces (a wallet reservation for prepaid,
    the hold marked otherwise), then say who served it: the attempt trail's one try."""
    reservation_id = None
    if hit.cost_micro > 0:
        assert ctx.money is not None  # the hold stage opened it
        reservation_id = await ctx.money.before_platform_call(
            hit.attempt,
            escrow_micro=hit.attempt.escrow_budget_micro if hit.attempt.needs_escrow else None,
            attempt_no=1,
        )
    ctx.served = Served(
        offer=hit.offer, served_by=hit.attempt.served_by, reservation_id=reservation_id
    )
    ctx.usage = hit.entry.usage
    ctx.trail.append(
        AttemptRecord(
            order=1,
            provider="cache",
            model=hit.offer.name,
            served_by=hit.attempt.served_by,
            source=hit.attempt.source,
            outcome="ok",
            upstream_status=None,
            reservation_id=reservation_id,
        )
    )
    metrics.CACHE_SAVED_MICRO.inc(max(0, hit.uncached_cost_micro - hit.cost_micro))


def hit_completion(hit: Hit, req: ModelRequest) -> Completion:
    """The stored answer as a whole one (from a stored stream when it was streamed)."""
    entry = hit.entry
    if entry.completion is not None:
        return replace(entry.completion, model=hit.offer.name)
    assert entry.arrivals is not None
    chunks = [chunk for arrival in entry.arrivals for chunk in arrival]
    return modes.completion_from_chunks(chunks, req, model=hit.offer.name)


async def hit_arrivals(hit: Hit, ctx: ModelContext) -> AsyncIterator[list[Chunk]]:
    """The stored answer as a stream, arrival by arrival (made from a whole one when it was
    stored whole)."""
    entry = hit.entry
    assert ctx.req is not None
    if entry.arrivals is not None:
        arrivals = [list(arrival) for arrival in entry.arrivals]
    else:
        assert entry.completion is not None
        arrivals = modes.chunks_from_completion(entry.completion, ctx.req)
    for arrival in arrivals:
        yield arrival


def collect_stream(ctx: ModelContext) -> list[tuple[Chunk, ...]] | None:
    """Return the list a streamed miss's arrivals go into, when its answer is to be kept."""
    state = ctx.cache
    if state is None or state.status != MISS or not state.decision.ttl_s:
        return None
    state.arrivals = []
    return state.arrivals


def answer_to_keep(cache: ResponseCache, ctx: ModelContext, *, ok: bool) -> Kept | None:
    """Return a miss's answer packed for the store, when it is one worth replaying (see the
    module's docstring) and not too large."""
    state, served = ctx.cache, ctx.served
    if (
        state is None
        or state.status != MISS
        or not state.decision.ttl_s
        or not ok
        or served is None
        or not served.offer.cache.cacheable
        or ctx.answer_rewritten  # the client got other text than the vendor's
    ):
        return None
    stream = ctx.stream
    if stream is not None:
        if not stream.finished or stream.finish_reason in UNSTORED_ENDS or not state.arrivals:
            return None
        usage, completion, arrivals = stream.usage, None, tuple(state.arrivals)
    else:
        if state.completion is None or state.completion.finish_reason in UNSTORED_ENDS:
            return None
        usage, completion, arrivals = state.completion.usage, state.completion, None
    ttl_s = min(state.decision.ttl_s, served.offer.cache.max_ttl_s)
    packed = cache.packed(
        Entry(
            created_s=cache.clock(),
            ttl_s=ttl_s,
            provider=served.provider,
            model=served.model,
            usage=usage,
            completion=completion,
            arrivals=arrivals,
        )
    )
    return Kept(state.key, packed, ttl_s) if packed is not None else None


async def keep(cache: ResponseCache, kept: Kept, *, reply: int | None) -> None:
    """Store a packed answer, unless it went with the request's last Redis round trip (then
    `reply` is what that write answered: 1 kept, 0 refused); a store that is down keeps
    nothing."""
    if reply == 0:
        metrics.labeled(metrics.CACHE_STORES, "refused").inc()
        return
    if reply is None:
        try:
            await cache.store.put(kept.key, kept.packed, kept.ttl_s)
        except StoreDown:
            metrics.labeled(metrics.CACHE_STORES, "store_down").inc()
            return
    metrics.labeled(metrics.CACHE_STORES, "stored").inc()
    metrics.CACHE_STORED_BYTES.inc(len(kept.packed))
