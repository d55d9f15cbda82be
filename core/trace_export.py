"""A request's spans as one plain record, and their OTLP/HTTP export: the SDK's exporter
(endpoint, headers, timeout, compression, TLS, its retries and its metrics) with the protobuf
written here, not by the SDK's encoder (a message object per span and per attribute: most of
tracing's cost when every request is traced).

The SDK's BatchSpanProcessor queues one `TraceRecord` per request (it reads only
`.context.trace_flags.sampled`) and hands batches of them to `RecordExporter.export`, which
writes an `ExportTraceServiceRequest` (opentelemetry-proto's trace.proto, common.proto,
resource.proto field numbers) decoding to what the SDK's encoder makes of the same spans as
`ReadableSpan`s (tests/unit/core/test_trace_export.py compares them field by field). The
encoded attributes that repeat from request to request (provider, model, route, account...)
are kept in a bounded LRU; the resource and scope are encoded once.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from opentelemetry.exporter.otlp.proto.http._common import (
    RequestPayloadTooLargeError,
    _is_request_too_large,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.semconv.attributes.http_attributes import HTTP_RESPONSE_STATUS_CODE
from opentelemetry.trace import SpanContext, TraceFlags

log = logging.getLogger(__name__)

# Span kinds and status codes as the protocol numbers them.
INTERNAL, SERVER, CLIENT = 1, 2, 3
UNSET, ERROR = 0, 2
# Span.flags: whether the parent is remote is known (always), and that it is.
HAS_IS_REMOTE, IS_REMOTE = 0x100, 0x200
# Attributes whose values are new on every request (or large: content): never cached.
UNIQUE_KEYS = frozenset(
    {
        "tollgate.request_id",
        "tollgate.client_request_id",
        "tollgate.ttft_ms",
        "tollgate.cost_micro_usd",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
    }
)
TIMES = struct.Struct("<BQBQ")  # start (field 7) and end (field 8), fixed64 each
FLAGS = struct.Struct("<BBI")  # field 16, fixed32
DOUBLE = struct.Struct("<Bd")
EMPTY_STATUS = b"\x7a\x00"  # the SDK always sets Span.status, empty when unset


class Span(NamedTuple):
    """One span of a request: its ids (parent 0: none), name, kind, times (ns), attributes
    and status."""

    span_id: int
    parent_id: int
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    status_code: int = UNSET
    status_message: str = ""
    remote_parent: bool = False


class TraceRecord:
    """A finished request's spans, queued whole: the batch processor only asks whether it is
    sampled (it is)."""

    __slots__ = ("spans", "trace_id", "trace_state")
    context = SpanContext(1, 1, False, TraceFlags(TraceFlags.SAMPLED))

    def __init__(self, trace_id: int, trace_state: str, spans: list[Span]) -> None:
        self.trace_id = trace_id
        self.trace_state = trace_state
        self.spans = spans


def varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64: two's complement, ten bytes
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field (`tag` is the key byte: number << 3 | 2)."""
    return bytes((tag,)) + varint(len(payload)) + payload


def any_value(value: Any) -> bytes:
    """An AnyValue's body, by the SDK encoder's rules (bool before int; a sequence an
    array; a mapping a key-value list)."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return field(0x0A, value.encode())
    if isinstance(value, int):
        return b"\x18" + varint(value)
    if isinstance(value, float):
        return DOUBLE.pack(0x21, value)
    if isinstance(value, bytes):
        return field(0x3A, value)
    if isinstance(value, Sequence):
        return field(0x2A, b"".join(field(0x0A, any_value(v)) for v in value))
    if isinstance(value, Mapping):
        return field(0x32, b"".join(field(0x0A, key_value(str(k), v)) for k, v in value.items()))
    raise TypeError(f"Invalid type {type(value)} of value {value}")


def key_value(key: str, value: Any) -> bytes:
    """A KeyValue's body."""
    return field(0x0A, key.encode()) + field(0x12, any_value(value))


@lru_cache(maxsize=4096, typed=True)
def span_attribute(key: str, value: Any) -> bytes:
    """Span.attributes (field 9) entry, cached: most repeat from request to request."""
    return field(0x4A, key_value(key, value))


def attributes(attrs: Mapping[str, Any]) -> bytes:
    parts = []
    for key, value in attrs.items():
        try:
            parts.append(
                field(0x4A, key_value(key, value))
                if key in UNIQUE_KEYS
                else span_attribute(key, value)
            )
        except TypeError:  # unhashable (a list): encoded each time, as the SDK would
            try:
                parts.append(field(0x4A, key_value(key, value)))
            except TypeError as error:
                log.error("Failed to encode key %s: %s", key, error)
    return b"".join(parts)


@lru_cache(maxsize=1024)
def name_field(name: str) -> bytes:
    return field(0x2A, name.encode())


@lru_cache(maxsize=256)
def status_field(code: int, message: str) -> bytes:
    body = (field(0x12, message.encode()) if message else b"") + (
        b"\x18" + varint(code) if code else b""
    )
    return field(0x7A, body)


def encode_span(trace_id: bytes, state: bytes, span: Span) -> bytes:
    """A Span message, tagged as ScopeSpans.spans (field 2)."""
    body = b"".join(
        (
            b"\x0a\x10",
            trace_id,
            b"\x12\x08",
            span.span_id.to_bytes(8, "big"),
            state,
            b"\x22\x08" + span.parent_id.to_bytes(8, "big") if span.parent_id else b"",
            name_field(span.name),
            b"\x30" + bytes((span.kind,)),
            TIMES.pack(0x39, span.start_ns, 0x41, span.end_ns),
            attributes(span.attributes) if span.attributes else b"",
            status_field(span.status_code, span.status_message)
            if span.status_code
            else EMPTY_STATUS,
            FLAGS.pack(
                0x85, 0x01, HAS_IS_REMOTE | IS_REMOTE if span.remote_parent else HAS_IS_REMOTE
            ),
        )
    )
    return b"\x12" + varint(len(body)) + body


def resource_field(resource: Any) -> bytes:
    """ResourceSpans.resource (field 1): the process's resource, encoded once."""
    attrs = b"".join(field(0x0A, key_value(k, v)) for k, v in resource.attributes.items())
    return field(0x0A, attrs)


def scope_field(scope: Any) -> bytes:
    """ScopeSpans.scope (field 1): the instrumentation scope, encoded once."""
    body = field(0x0A, scope.name.encode()) if scope.name else b""
    if scope.version:
        body += field(0x12, scope.version.encode())
    for k, v in (scope.attributes or {}).items():
        body += field(0x1A, key_value(k, v))
    return field(0x0A, body)


class Encoder:
    """Writes ExportTraceServiceRequest bytes for batches of TraceRecords, under one resource
    and one instrumentation scope (encoded once)."""

    def __init__(self, resource: Any, scope: Any) -> None:
        self.resource = resource_field(resource)
        if resource.schema_url:
            self.resource_tail = field(0x1A, resource.schema_url.encode())
        else:
            self.resource_tail = b""
        self.scope = scope_field(scope)
        self.scope_tail = field(0x1A, scope.schema_url.encode()) if scope.schema_url else b""

    def encode(self, records: Sequence[TraceRecord]) -> bytes:
        parts = [self.scope]
        for record in records:
            trace_id = record.trace_id.to_bytes(16, "big")
            state = field(0x1A, record.trace_state.encode()) if record.trace_state else b""
            parts.extend(encode_span(trace_id, state, span) for span in record.spans)
        parts.append(self.scope_tail)
        scope_spans = field(0x12, b"".join(parts))
        return field(0x0A, self.resource + scope_spans + self.resource_tail)


class RecordExporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP exporter, fed TraceRecords: its export() with our encoding."""

    def __init__(self, resource: Any, scope: Any, **options: Any) -> None:
        super().__init__(**options)
        self.encoder = Encoder(resource, scope)

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        if self._shutdown:
            log.warning("Exporter already shutdown, ignoring batch")
            return SpanExportResult.FAILURE
        count = sum(len(record.spans) for record in spans)
        with self._metrics.export_operation(count) as result:
            try:
                data = self.encoder.encode(spans)
            except Exception as error:
                log.error("Failed to encode span batch: %s", error)
                result.error = error
                return SpanExportResult.FAILURE
            if _is_request_too_large(data, self._max_request_size):
                log.warning("Dropping span batch: %d bytes serialized", len(data))
                result.error = RequestPayloadTooLargeError(
                    f"Serialized span request size {len(data)} bytes exceeds "
                    f"max_request_size {self._max_request_size} bytes."
                )
                return SpanExportResult.FAILURE
            done = self._client.export(data)
            if not done.success:
                result.error = done.error
                if done.status_code is not None:
                    result.error_attrs = {HTTP_RESPONSE_STATUS_CODE: done.status_code}
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS
