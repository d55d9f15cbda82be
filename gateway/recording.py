"""Recording usage: what one finished request used, priced once and journaled.

Platform-served: token cost from the price table -> provider_cost (added to settled and
spent). Team-served: cost 0, logged as byok tokens. Bandwidth: request + response body bytes
at the group's rate, charged to key and group spent (never settled), only if an upstream
call was actually sent and the request did not end in a gateway refusal (LM-3021 after
team keys were tried is still "not billed"). The row is journaled before the client sees
the end of its answer; its money is applied when the row is stored (billing/settlement.py),
once.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from core import metrics
from core.errors import REFUSAL_CODES
from core.money import bandwidth_charge_micro, token_cost_micro
from core.shared_state import SharedStateDown
from gateway.context import RequestContext
from gateway.plan import PLATFORM, TEAM
from usage.models import TRAIL_FIELDS
from usage.rows import clean_row

log = logging.getLogger(__name__)


def usage_row(ctx: RequestContext, *, bytes_out: int) -> dict:
    """Price the request and return its usage log row (JSON-ready, attempts included)."""
    principal = ctx.principal
    usage = ctx.usage
    platform = ctx.served_by == PLATFORM
    ctx.provider_cost_micro = (
        token_cost_micro(
            tokens_in=usage.input_tokens,
            tokens_out=usage.output_tokens,
            input_micro_per_mtok=ctx.input_micro_per_mtok,
            output_micro_per_mtok=ctx.output_micro_per_mtok,
        )
        if platform
        else 0
    )
    total_bytes = ctx.meter.bytes_in + bytes_out
    ctx.bandwidth_charge_micro = (
        bandwidth_charge_micro(
            total_bytes=total_bytes, micro_per_gb=principal.bandwidth_micro_per_gb
        )
        if principal is not None and ctx.meter.upstream_sent and ctx.error_code not in REFUSAL_CODES
        else 0
    )
    team = ctx.served_by == TEAM
    row = {
        "request_id": ctx.request_id,
        "client_request_id": ctx.client_request_id,
        "created_at": datetime.now(UTC).isoformat(),
        "account_id": principal.account_id if principal else None,
        "group_id": principal.group_id if principal else None,
        "api_key_id": principal.api_key_id if principal else None,
        "caller_label": ctx.caller_label or "",
        "route": ctx.endpoint,
        "model_requested": ctx.req.model if ctx.req else "",
        "model_served": ctx.served_model,
        "provider": ctx.served_provider,
        "served_by": ctx.served_by,
        "tokens_in": usage.input_tokens if platform else 0,
        "tokens_out": usage.output_tokens if platform else 0,
        "byok_tokens_in": usage.input_tokens if team else 0,
        "byok_tokens_out": usage.output_tokens if team else 0,
        "provider_cost_micro": ctx.provider_cost_micro,
        "bytes_in": ctx.meter.bytes_in,
        "bytes_out": bytes_out,
        "bandwidth_charge_micro": ctx.bandwidth_charge_micro,
        "upstream_sent": ctx.meter.upstream_sent,
        "status": ctx.status,
        "error_code": ctx.error_code,
        "latency_ms": ctx.elapsed_ms(),
        "ttft_ms": ctx.ttft_ms,
        "streamed": ctx.streamed,
        "attempts": [{name: getattr(t, name) for name in TRAIL_FIELDS} for t in ctx.trail],
    }
    return clean_row(row)  # bounded before it is journaled: no client text makes it unstorable


async def record_and_release(runtime, ctx: RequestContext, row: dict) -> None:
    """Journal the usage row and free the request's limits: one Redis round trip.

    Runs before the client sees the end of its answer, so a completed answer always has its
    row, and the principal's next request is judged with these tokens counted.
    """
    metrics.count_usage(row)
    admission, ctx.admission = ctx.admission, None
    tokens = ctx.usage.total_tokens
    journal = ctx.principal is not None
    shared_admission = admission is not None and admission.in_shared
    if runtime.shared.available and (journal or shared_admission):

        def commands(client):
            pipe = client.pipeline(transaction=False)
            if journal:
                runtime.usage.journal_into(pipe, row)
            if shared_admission:
                runtime.limiter.finish_into(pipe, admission, tokens=tokens)
            return pipe.execute()

        try:
            await runtime.shared.call(commands)
            journal = False
            admission = None if shared_admission else admission
        except SharedStateDown:
            if shared_admission:
                runtime.limiter.release_later(admission)
    elif shared_admission:  # Redis went down mid-request: retry freeing its shared slots
        runtime.limiter.release_later(admission)
    if journal:
        runtime.usage.keep(row)
    if admission is not None:
        runtime.limiter.finish_local(admission, tokens=tokens)
