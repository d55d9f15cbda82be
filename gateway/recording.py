"""Recording usage: what one finished request used, priced once and journaled.

Platform-served: token cost from the price table -> provider_cost (added to settled and
spent). Team-served: cost 0, logged as byok tokens. Bandwidth: request + response body bytes
at the group's rate, charged to key and group spent (never settled), only if an upstream
call was actually sent and the request did not end in a gateway refusal (LM-3021 after
team keys were tried is still "not billed"). The record is journaled before the client sees
the end of its answer; its money is applied when it is stored (billing/settlement.py), once.
"""

from __future__ import annotations

from datetime import UTC, datetime

from core import metrics
from core.errors import REFUSAL_CODES
from core.money import bandwidth_charge_micro
from core.shared_state import SharedStateDown
from core.usage_record import UsageRecord
from gateway.attempts import PLATFORM, TEAM
from gateway.context import ModelContext, RequestContext, WebContext
from gateway.runtime import runtime
from gateway.types import Usage
from usage.rows import clean_record

NO_USAGE = Usage()  # a web action's tokens


def usage_record(ctx: RequestContext, *, bytes_out: int) -> UsageRecord:
    """Price the request and return its usage record (attempts included), cleaned."""
    principal = ctx.principal
    model = ctx if isinstance(ctx, ModelContext) else None
    web = ctx.web if isinstance(ctx, WebContext) else None
    served = model.served if model else None
    usage = model.usage if model else NO_USAGE
    # Platform-served: priced at the served offer's prices.
    priced = served.offer if served is not None and served.served_by == PLATFORM else None
    platform = priced is not None
    team = served is not None and served.served_by == TEAM
    provider_cost_micro = priced.cost_micro(usage) if priced is not None else 0
    prices = priced.prices.as_json() if priced is not None else {}
    if web is not None:  # a web action: its units, priced as they were billed
        provider_cost_micro = web.cost_micro
        prices = dict(web.prices)
    bandwidth_micro = (
        bandwidth_charge_micro(
            total_bytes=ctx.meter.bytes_in + bytes_out,
            micro_per_gb=principal.bandwidth_micro_per_gb,
        )
        if principal is not None and ctx.meter.upstream_sent and ctx.error_code not in REFUSAL_CODES
        else 0
    )
    record = UsageRecord(
        request_id=ctx.request_id,
        client_request_id=ctx.client_request_id,
        created_at=datetime.now(UTC),
        account_id=principal.account_id if principal else None,
        group_id=principal.group_id if principal else None,
        api_key_id=principal.api_key_id if principal else None,
        caller_label=ctx.caller_label or "",
        endpoint=ctx.endpoint,
        model_requested=model.req.model if model and model.req else "",
        model_served=served.model if served else "",
        provider=served.provider if served else (web.provider if web else ""),
        served_by=served.served_by if served else (web.served_by if web else ""),
        tokens_in=usage.input_tokens if platform else 0,
        tokens_out=usage.output_tokens if platform else 0,
        byok_tokens_in=usage.input_tokens if team else 0,
        byok_tokens_out=usage.output_tokens if team else 0,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        provider_cost_micro=provider_cost_micro,
        bytes_in=ctx.meter.bytes_in,
        bytes_out=bytes_out,
        bandwidth_charge_micro=bandwidth_micro,
        upstream_sent=ctx.meter.upstream_sent,
        status=ctx.status,
        error_code=ctx.error_code,
        error_message=ctx.error_message,
        latency_ms=ctx.elapsed_ms(),
        ttft_ms=model.ttft_ms if model else None,
        streamed=model.req.stream if model and model.req else False,
        reservation_id=served.reservation_id if served else (web.reservation_id if web else None),
        web_pages=web.pages if web else 0,
        web_rendered_pages=web.rendered_pages if web else 0,
        web_queries=web.queries if web else 0,
        web_url=web.url if web else "",
        cache_status=model.cache.status if model and model.cache else "",
        uncached_cost_micro=model.cache.uncached_cost_micro if model and model.cache else 0,
        tags=ctx.tags,
        guardrails=tuple(v.as_json() for v in model.guardrail_verdicts) if model else (),
        attempts=tuple(ctx.trail),
        prices=prices,
    )
    return clean_record(record)  # bounded before it is journaled: no client text jams storage


async def record_and_release(
    ctx: RequestContext, record: UsageRecord, *, also: tuple[tuple, ...] = ()
) -> list | None:
    """Journal the usage record and free the request's limits: one Redis round trip.

    Runs before the client sees the end of its answer, so a completed answer always has its
    record, and the caller's next request is judged with these tokens counted. `also`: more
    commands for that round trip (a cached answer); returns their replies, None when unsent.
    """
    metrics.count_usage(record)
    also_replies = None
    admission, ctx.admission = ctx.admission, None
    tokens = ctx.usage.total_tokens if isinstance(ctx, ModelContext) else 0
    journal = ctx.principal is not None
    # The admission when it took shared (Redis) slots, else None.
    shared = admission if admission is not None and admission.in_shared else None
    if runtime.shared.available and (journal or shared is not None):
        commands = [runtime.usage.journal_command(record)] if journal else []
        if shared is not None:
            commands += runtime.limiter.finish_commands(shared, tokens=tokens)
        try:
            replies = await runtime.shared.run(*commands, *also)
            also_replies = replies[len(commands) :] if also else None
            if journal:  # its entry id: this process's flusher stores the record as it is
                runtime.usage.journaled(replies[0], record)
            journal = False
            admission = None if shared is not None else admission
        except SharedStateDown:
            if shared is not None:
                runtime.limiter.release_later(shared)
    elif shared is not None:  # Redis went down mid-request: retry freeing its shared slots
        runtime.limiter.release_later(shared)
    if journal:
        runtime.usage.keep(record)
    if admission is not None:
        runtime.limiter.finish_local(admission, tokens=tokens)
    return also_replies
