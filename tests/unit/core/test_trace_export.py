"""Our OTLP protobuf writer against the SDK's encoder: the same spans, as TraceRecords and as
ReadableSpans, decode to the same ExportTraceServiceRequest, field by field."""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from core.trace_export import (
    CLIENT,
    ERROR,
    INTERNAL,
    SERVER,
    UNSET,
    Encoder,
    Span,
    TraceRecord,
    varint,
)

RESOURCE = Resource.create({"service.name": "tollgate", "deployment.environment": "test"})
SCOPE = InstrumentationScope("tollgate")
KINDS = {INTERNAL: SpanKind.INTERNAL, SERVER: SpanKind.SERVER, CLIENT: SpanKind.CLIENT}
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
REQUEST_ATTRS = {
    "tollgate.request_id": "01a2b3",
    "tollgate.cost_micro_usd": 1234567,
    "tollgate.attempts": 2,
    "tollgate.streamed": True,
    "tollgate.cache": "bypass",
    "http.response.status_code": 200,
    "gen_ai.request.model": "gpt-4o-mini",
    "gen_ai.response.finish_reasons": ("stop",),
    "tollgate.tags": ("team:a", "env:prod", "ünïcode"),
    "tollgate.ttft_ms": 12.345,
    "tollgate.balance": -42,  # a negative int64: ten bytes
    "tollgate.big": 2**62 + 7,
    "tollgate.off": False,
    "gen_ai.input.messages": '[{"role":"user","content":"' + "x" * 300 + '"}]',
}
CALL_ATTRS = {"tollgate.attempt": 1, "tollgate.outcome": "upstream_5xx", "tollgate.ttft_ms": 3}


def records() -> list[TraceRecord]:
    """Two requests: one under a client's remote parent (with a tracestate), failed; one a
    root, fine."""
    first = [
        Span(0xA1, 0xC0FFEE, "chat gpt-4o-mini", SERVER, 10**18, 10**18 + 5_000_000,
             REQUEST_ATTRS, ERROR, "upstream_5xx", remote_parent=True),
        Span(0xA2, 0xA1, "admission", INTERNAL, 10**18 + 1, 10**18 + 200, {}),
        Span(0xA3, 0xA1, "attempt 1 openai", CLIENT, 10**18 + 300, 10**18 + 4_000_000,
             CALL_ATTRS, ERROR, "upstream_5xx"),
    ]  # fmt: skip
    second = [
        Span(0xB1, 0, "embeddings", SERVER, 2 * 10**18, 2 * 10**18 + 9, {"a": 1}),
        Span(0xB2, 0xB1, "settlement", INTERNAL, 2 * 10**18 + 1, 2 * 10**18 + 8, {}, UNSET),
    ]
    return [
        TraceRecord(0x4BF92F3577B34DA6A3CE929D0E0E4736, "vendor=abc,other=1", first),
        TraceRecord(0x1, "", second),
    ]


def readable(record: TraceRecord) -> list[ReadableSpan]:
    """The same spans as the SDK's ReadableSpans (as gateway/trace_spans.py built them)."""
    state = TraceState.from_header([record.trace_state]) if record.trace_state else None
    out = []
    for span in record.spans:
        parent = None
        if span.parent_id:
            parent = SpanContext(
                record.trace_id, span.parent_id, span.remote_parent, SAMPLED, state
            )
        status = Status(StatusCode(span.status_code), span.status_message or None)
        out.append(
            ReadableSpan(
                span.name,
                SpanContext(record.trace_id, span.span_id, False, SAMPLED, state),
                parent,
                RESOURCE,
                dict(span.attributes),
                kind=KINDS[span.kind],
                status=status,
                start_time=span.start_ns,
                end_time=span.end_ns,
                instrumentation_scope=SCOPE,
            )
        )
    return out


def test_our_encoding_decodes_to_the_sdk_encoders_request():
    batch = records()
    ours = ExportTraceServiceRequest.FromString(Encoder(RESOURCE, SCOPE).encode(batch))
    theirs = encode_spans([span for record in batch for span in readable(record)])
    assert len(ours.resource_spans) == len(theirs.resource_spans) == 1
    assert ours.resource_spans[0].resource == theirs.resource_spans[0].resource
    assert ours.resource_spans[0].schema_url == theirs.resource_spans[0].schema_url
    our_scopes, their_scopes = (
        ours.resource_spans[0].scope_spans,
        theirs.resource_spans[0].scope_spans,
    )
    assert len(our_scopes) == len(their_scopes) == 1
    assert our_scopes[0].scope == their_scopes[0].scope
    our_spans, their_spans = our_scopes[0].spans, their_scopes[0].spans
    assert len(our_spans) == len(their_spans) == 5
    for mine, sdks in zip(our_spans, their_spans, strict=True):
        for descriptor in sdks.DESCRIPTOR.fields:
            name = descriptor.name
            assert getattr(mine, name) == getattr(sdks, name), name
        assert mine.HasField("status") and sdks.HasField("status")
        assert mine == sdks
    assert ours == theirs


def test_the_cached_encodings_are_reused_identically():
    encoder = Encoder(RESOURCE, SCOPE)
    assert encoder.encode(records()) == encoder.encode(records())


def test_varints():
    assert varint(0) == b"\x00"
    assert varint(127) == b"\x7f"
    assert varint(300) == b"\xac\x02"
    assert varint(-1) == b"\xff" * 9 + b"\x01"
