"""A sampled request's spans, made at once when it ended (gateway/tracing.py recorded them)
as plain tuples, and queued as one record for the SDK's batch processor (core/tracing.py);
core/trace_export.py writes their OTLP protobuf in the exporter's thread.

The request span (SERVER; a child of the client's traceparent when it sent one) carries the
OpenTelemetry GenAI attributes and ours (`tollgate.*`); under it: admission, the hold, one
CLIENT span per vendor call (its HTTP status; a stream's ends at its first token), the
stream, and settlement. Prompt and answer text only with the account's content capture.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

import orjson
from opentelemetry.trace import TraceState

from core import tracing
from core.trace_export import CLIENT, ERROR, INTERNAL, SERVER, UNSET, Span, TraceRecord
from core.usage_record import UsageRecord

if TYPE_CHECKING:
    from gateway.context import RequestContext
    from gateway.tracing import Call, RequestTrace

# Our provider kinds as GenAI's well-known `gen_ai.provider.name` values (others: as is).
GENAI_PROVIDERS = {
    "openai": "openai",
    "openai_compatible": "openai",
    "azure": "azure.ai.openai",
    "anthropic": "anthropic",
    "bedrock": "aws.bedrock",
    "gemini": "gcp.gemini",
    "vertex": "gcp.vertex_ai",
    "openrouter": "openrouter",
}
NO_ATTRIBUTES: dict[str, Any] = {}
# Stage spans: (name, the mark it starts at, the mark it ends at).
STAGES = (
    ("admission", "planned", "admitted"),
    ("hold", "admitted", "held"),
    ("stream", "streaming", "settling"),
    ("settlement", "settling", "settled"),
)


def operation(endpoint: str) -> str:
    """GenAI's operation name of a route: embeddings, chat, or the web action's own name
    (moderations too: GenAI names no operation for it)."""
    if endpoint in ("embeddings", "moderations"):
        return endpoint
    if endpoint.startswith(("web.", "internal.scrape", "internal.search", "internal.crawl")):
        return endpoint
    return "chat"


def provider_kinds(ctx: RequestContext) -> dict[str, str]:
    """Profile name -> GenAI provider name, for the profiles this request's plan names."""
    plan = getattr(ctx, "plan", None)
    kinds: dict[str, str] = {}
    for link in getattr(plan, "links", ()) or ():
        profile = getattr(link, "profile", None) or link.offer.profile
        kinds[profile.name] = GENAI_PROVIDERS.get(profile.kind, profile.kind)
    return kinds


def request_attributes(
    ctx: RequestContext, trace: RequestTrace, record: UsageRecord, kinds: dict[str, str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The request span's attributes, GenAI's and ours: those many requests share (encoded
    once for them all), and this request's own (ids, amounts, times, content)."""
    principal = ctx.principal
    req = getattr(ctx, "req", None)
    op = operation(ctx.endpoint)
    own: dict[str, Any] = {
        "tollgate.request_id": record.request_id,
        "tollgate.cost_micro_usd": record.provider_cost_micro,
        "tollgate.bandwidth_charge_micro_usd": record.bandwidth_charge_micro,
    }
    attrs: dict[str, Any] = {
        "tollgate.route": ctx.endpoint,
        "tollgate.attempts": len(trace.calls),
        "tollgate.streamed": record.streamed,
        "http.response.status_code": record.status,
    }
    if op != ctx.endpoint or not hasattr(ctx, "web"):  # a model route: GenAI's operation
        attrs["gen_ai.operation.name"] = op
    if record.model_requested or req is not None:
        attrs["gen_ai.request.model"] = req.model if req is not None else record.model_requested
    if record.model_served:
        attrs["gen_ai.response.model"] = record.model_served
    if record.provider:
        attrs["gen_ai.provider.name"] = kinds.get(record.provider, record.provider)
        attrs["tollgate.provider"] = record.provider
    if record.status == 200 or record.tokens_in or record.byok_tokens_in:
        own["gen_ai.usage.input_tokens"] = record.tokens_in + record.byok_tokens_in
        own["gen_ai.usage.output_tokens"] = record.tokens_out + record.byok_tokens_out
    stream = getattr(ctx, "stream", None)
    finish_reason = trace.finish_reason or (stream.finish_reason if stream is not None else "")
    if finish_reason:
        attrs["gen_ai.response.finish_reasons"] = (finish_reason,)
    if record.served_by:
        attrs["tollgate.served_by"] = record.served_by
    if record.cache_status:
        attrs["tollgate.cache"] = record.cache_status
    if record.error_code:
        attrs["tollgate.error_code"] = attrs["error.type"] = record.error_code
    if record.ttft_ms is not None:
        own["tollgate.ttft_ms"] = record.ttft_ms
    if record.client_request_id:
        own["tollgate.client_request_id"] = record.client_request_id
    if principal is not None:
        attrs["tollgate.account_id"] = principal.account_id
        attrs["tollgate.group_id"] = principal.group_id
        if principal.api_key_id is not None:
            attrs["tollgate.api_key_id"] = principal.api_key_id
    served_label = next((a.key_label for a in record.attempts if a.outcome == "ok"), "")
    if served_label:
        attrs["tollgate.key_label"] = served_label
    if ctx.tags:
        attrs["tollgate.tags"] = tuple(ctx.tags)
    for unit in ("web_pages", "web_rendered_pages", "web_queries"):
        if getattr(record, unit):
            own[f"tollgate.{unit}"] = getattr(record, unit)
    if principal is not None and principal.trace_content:
        if req is not None:
            asked = req.body.get("messages") or req.body.get("input") or []
            own["gen_ai.input.messages"] = orjson.dumps(asked).decode()
        if trace.answer is not None:
            text = "".join(trace.answer)
            said = [{"role": "assistant", "parts": [{"type": "text", "content": text}]}]
            own["gen_ai.output.messages"] = orjson.dumps(said).decode()
    return attrs, own


def build(ctx: RequestContext, trace: RequestTrace, record: UsageRecord, now: float) -> None:
    """Make the request's spans, with the times and ids recorded, and queue them as one
    record."""
    kinds = provider_kinds(ctx)
    attrs, own = request_attributes(ctx, trace, record, kinds)
    span_id = trace.span_id
    parent = trace.parent
    op, model = attrs.get("gen_ai.operation.name", ctx.endpoint), attrs.get("gen_ai.request.model")
    spans: list[Span] = [
        (
            span_id,
            parent.span_id if parent is not None else 0,
            f"{op} {model}" if model else op,
            SERVER,
            trace.wall_ns,
            trace.ns(now),
            attrs,
            own,
            # A 5xx is ours or the vendor's failure; a refusal (4xx) is no error of ours.
            ERROR if record.status >= 500 else UNSET,
            record.error_code if record.status >= 500 else "",
            parent is not None,
        )
    ]
    marks = trace.marks
    for stage, start, end in STAGES:
        if start in marks and end in marks:
            spans.append(
                (
                    tracing.new_span_id(),
                    span_id,
                    stage,
                    INTERNAL,
                    trace.ns(marks[start]),
                    trace.ns(marks[end]),
                    NO_ATTRIBUTES,
                    NO_ATTRIBUTES,
                    UNSET,
                    "",
                    False,
                )
            )
    for call in trace.calls:
        if call.ended:
            spans.append(call_span(call, trace, record, kinds))
    state = trace_state(parent.state) if parent is not None and parent.state else ""
    tracing.exporter().export(TraceRecord(trace.trace_id, state, spans))


@lru_cache(maxsize=256)
def trace_state(header: str) -> str:
    """A client's tracestate as the SDK keeps it (parsed, invalid entries dropped)."""
    entries = TraceState.from_header([header])
    return ",".join(f"{key}={value}" for key, value in entries.items())


def call_span(call: Call, trace: RequestTrace, record: UsageRecord, kinds: dict[str, str]) -> Span:
    """One vendor call's span (CLIENT), under the request's, with the id its traceparent
    named."""
    index = call.trail_index
    line = record.attempts[index] if 0 <= index < len(record.attempts) else None
    attrs = own = NO_ATTRIBUTES
    code, message = UNSET, ""
    if line is not None:
        attrs = {
            "tollgate.attempt": line.order,
            "tollgate.provider": line.provider,
            "gen_ai.provider.name": kinds.get(line.provider, line.provider),
            "gen_ai.request.model": line.model,
            "tollgate.served_by": line.served_by,
            "tollgate.outcome": line.outcome,
        }
        if line.upstream_status is not None:
            attrs["http.response.status_code"] = line.upstream_status
        if line.key_label:
            attrs["tollgate.key_label"] = line.key_label
        if record.streamed and line.outcome == "ok":
            own = {"tollgate.ttft_ms": round((call.ended - call.started) * 1000, 3)}
        if line.outcome != "ok":
            code, message = ERROR, line.outcome
    return (
        call.span_id,
        trace.span_id,
        f"attempt {line.order} {line.provider}" if line is not None else "attempt",
        CLIENT,
        trace.ns(call.started),
        trace.ns(call.ended),
        attrs,
        own,
        code,
        message,
        False,
    )
