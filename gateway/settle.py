"""The settle step: what one finished request used, recorded and charged exactly once.

Platform-served: token cost from the price table -> provider_cost, added to settled and
spent. Team-served: cost 0, logged as byok tokens. Bandwidth: request + response body bytes
at the group's rate, charged to key and group spent (never settled), only if an upstream
call was actually sent.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from billing.money import bandwidth_charge_micro, token_cost_micro
from billing.services import Settlement
from gateway.context import RequestContext
from gateway.plan import PLATFORM, TEAM

log = logging.getLogger(__name__)


def usage_row(ctx: RequestContext, *, bytes_out: int) -> dict:
    """Price the request and return its usage log row (JSON-ready, attempts included)."""
    caller = ctx.caller
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
        bandwidth_charge_micro(total_bytes=total_bytes, micro_per_gb=caller.bandwidth_micro_per_gb)
        if caller is not None and ctx.meter.upstream_sent
        else 0
    )
    team = ctx.served_by == TEAM
    return {
        "request_id": ctx.request_id,
        "created_at": datetime.now(UTC).isoformat(),
        "account_id": caller.account_id if caller else None,
        "group_id": caller.group_id if caller else None,
        "api_key_id": caller.api_key_id if caller else None,
        "caller_label": ctx.caller_label or "",
        "route": ctx.route,
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
        "attempts": [
            {
                "order": t.order,
                "provider": t.provider,
                "model": t.model,
                "served_by": t.served_by,
                "source": t.source,
                "outcome": t.outcome,
                "upstream_status": t.upstream_status,
                "latency_ms": t.latency_ms,
                "reservation_id": t.reservation_id,
            }
            for t in ctx.trail
        ],
    }


async def settle_request(runtime, ctx: RequestContext, row: dict) -> None:
    """Release limits and holds, and charge what the row says: once, whatever happened."""
    if ctx.admission is not None:
        await runtime.limiter.finish(ctx.admission, tokens=ctx.usage.total_tokens)
    if ctx.caller is None:
        return
    if (
        ctx.spend_hold_taken
        or ctx.reservation_id is not None
        or (ctx.provider_cost_micro or ctx.bandwidth_charge_micro)
    ):
        await runtime.escrow.settle(
            Settlement(
                request_id=ctx.request_id,
                group_id=ctx.caller.group_id,
                api_key_id=ctx.caller.api_key_id,
                provider_cost_micro=ctx.provider_cost_micro,
                bandwidth_charge_micro=ctx.bandwidth_charge_micro,
                hold_taken=ctx.spend_hold_taken,
                reservation_id=ctx.reservation_id,
            )
        )
