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
    "tollgate.attempts": 2,
    "tollgate.streamed": True,
    "tollgate.cache": "bypass",
    "http.response.status_code": 200,
    "gen_ai.request.model": "gpt-4o-mini",
    "gen_ai.response.finish_reasons": ("stop",),
    "tollgate.tags": ("team:a", "env:prod", "ünïcode"),
    "tollgate.balance": -42,  # a negative int64: ten bytes
    "tollgate.big": 2**62 + 7,
    "tollgate.off": False,
}
REQUEST_OWN = {
    "tollgate.request_id": "01a2b3",
    "tollgate.cost_micro_usd": 1234567,
    "tollgate.ttft_ms": 12.345,
    "gen_ai.input.messages": '[{"role":"user","content":"' + "x" * 300 + '"}]',
}
CALL_ATTRS = {"tollgate.attempt": 1, "tollgate.outcome": "upstream_5xx"}
CALL_OWN = {"tollgate.ttft_ms": 3}


def records() -> list[TraceRecord]:
    """Two requests: one under a client's remote parent (with a tracestate), failed; one a
    root, fine."""
    first: list[Span] = [
        (0xA1, 0xC0FFEE, "chat gpt-4o-mini", SERVER, 10**18, 10**18 + 5_000_000,
         REQUEST_ATTRS, REQUEST_OWN, ERROR, "upstream_5xx", True),
        (0xA2, 0xA1, "admission", INTERNAL, 10**18 + 1, 10**18 + 200, {}, {}, UNSET, "", False),
        (0xA3, 0xA1, "attempt 1 openai", CLIENT, 10**18 + 300, 10**18 + 4_000_000,
         CALL_ATTRS, CALL_OWN, ERROR, "upstream_5xx", False),
    ]  # fmt: skip
    second: list[Span] = [
        (0xB1, 0, "embeddings", SERVER, 2 * 10**18, 2 * 10**18 + 9, {"a": 1}, {}, UNSET, "", False),
        (
            0xB2,
            0xB1,
            "settlement",
            INTERNAL,
            2 * 10**18 + 1,
            2 * 10**18 + 8,
            {},
            {},
            UNSET,
            "",
            False,
        ),
    ]
    return [
        TraceRecord(0x4BF92F3577B34DA6A3CE929D0E0E4736, "vendor=abc,other=1", first),
        TraceRecord(0x1, "", second),
    ]


def readable(record: TraceRecord) -> list[ReadableSpan]:
    """The same spans as the SDK's ReadableSpans (as gateway/trace_spans.py built them)."""
    state = TraceState.from_header([record.trace_state]) if record.trace_state else None
    out = []
    for (
        span_id,
        parent_id,
        name,
        kind,
        start,
        end,
        attrs,
        own,
        code,
        message,
        remote,
    ) in record.spans:
        parent = None
        if parent_id:
            parent = SpanContext(record.trace_id, parent_id, remote, SAMPLED, state)
        out.append(
            ReadableSpan(
                name,
                SpanContext(record.trace_id, span_id, False, SAMPLED, state),
                parent,
                RESOURCE,
                {**attrs, **own},
                kind=KINDS[kind],
                status=Status(StatusCode(code), message or None),
                start_time=start,
                end_time=end,
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
    first = encoder.encode(records())
    assert len(encoder.cache) == 3  # the request's, the call's, the second request's
    assert not any(key == "tollgate.request_id" for kept, _ in encoder.cache for key, _ in kept)
    assert encoder.encode(records()) == first


def test_a_bool_and_an_int_of_one_key_are_not_confused_by_the_cache():
    encoder = Encoder(RESOURCE, SCOPE)
    spans = [(1, 0, "a", SERVER, 1, 2, {"k": flag}, {}, UNSET, "", False) for flag in (True, 1)]
    decoded = ExportTraceServiceRequest.FromString(encoder.encode([TraceRecord(1, "", spans)]))
    values = [s.attributes[0].value for s in decoded.resource_spans[0].scope_spans[0].spans]
    assert values[0].bool_value is True and values[0].WhichOneof("value") == "bool_value"
    assert values[1].int_value == 1 and values[1].WhichOneof("value") == "int_value"


def test_varints():
    assert varint(0) == b"\x00"
    assert varint(127) == b"\x7f"
    assert varint(300) == b"\xac\x02"
    assert varint(-1) == b"\xff" * 9 + b"\x01"
