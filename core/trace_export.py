"""A request's spans as one plain record, and their OTLP/HTTP export: the SDK's exporter
(endpoint, headers, timeout, compression, TLS, its retries and its metrics) with the protobuf
written here, not by the SDK's encoder (a message object per span and per attribute: most of
tracing's cost when every request is traced).

The SDK's BatchSpanProcessor queues one `TraceRecord` per request (it reads only
`.context.trace_flags.sampled`) and hands batches of them to `RecordExporter.export`, which
writes an `ExportTraceServiceRequest` (opentelemetry-proto's trace.proto, common.proto,
resource.proto field numbers) decoding to what the SDK's encoder makes of the same spans as
`ReadableSpan`s (tests/unit/core/test_trace_export.py compares them field by field). The
attributes many requests share (route, model, provider, account, status...) are encoded once
per distinct set (a bounded cache); the resource and scope once.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

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
TIMES = struct.Struct("<BQBQ")  # start (field 7) and end (field 8), fixed64 each
FLAGS = struct.Struct("<BBI")  # field 16, fixed32
DOUBLE = struct.Struct("<Bd")
EMPTY_STATUS = b"\x7a\x00"
CACHE_MAX = 1024  # distinct sets of shared attributes kept encoded
KIND_FIELDS = {kind: bytes((0x30, kind)) for kind in (INTERNAL, SERVER, CLIENT)}
LOCAL_FLAGS = FLAGS.pack(0x85, 0x01, HAS_IS_REMOTE)
REMOTE_FLAGS = FLAGS.pack(
    0x85, 0x01, HAS_IS_REMOTE | IS_REMOTE
)  # the SDK always sets Span.status, empty when unset


# One span of a request: (span id, parent span id (0: none), name, kind, start ns, end ns,
# the attributes many requests share (encoded once for them all), its own attributes (ids,
# amounts, times: encoded each time), status code, status message, whether the parent is
# remote). A plain tuple: a few of them per request, made on the request's thread.
Span = tuple[int, int, str, int, int, int, Mapping[str, Any], Mapping[str, Any], int, str, bool]


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
    if n < 0x4000:  # a span's or an attribute's length: two bytes
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field (`tag` is the key byte: number << 3 | 2)."""
    size = len(payload)
    if size < 0x80:
        return bytes((tag, size)) + payload
    return bytes((tag,)) + varint(size) + payload


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
    return key_field(key) + field(0x12, any_value(value))


def span_attribute(key: str, value: Any) -> bytes:
    """A Span.attributes (field 9) entry."""
    return field(0x4A, key_value(key, value))


def attributes(attrs: Mapping[str, Any]) -> bytes:
    """Span.attributes entries (a value the encoder cannot write: logged and left out, as the
    SDK does)."""
    parts = []
    for key, value in attrs.items():
        try:
            parts.append(span_attribute(key, value))
        except TypeError as error:
            log.error("Failed to encode key %s: %s", key, error)
    return b"".join(parts)


def own_attributes(attrs: Mapping[str, Any], cache: dict[tuple, bytes]) -> bytes:
    """A request's own Span.attributes entries: its ids, texts and times encoded each time,
    its amounts (integers, which repeat) from `cache`."""
    parts = []
    for key, value in attrs.items():
        kind = value.__class__
        if kind is str:  # an id or a text: the most common own value, written directly
            parts.append(field(0x4A, key_field(key) + field(0x12, field(0x0A, value.encode()))))
            continue
        if kind is not int:
            parts.append(attributes({key: value}))
            continue
        encoded = cache.get((key, value))
        if encoded is None:
            encoded = span_attribute(key, value)
            if len(cache) >= CACHE_MAX:
                cache.clear()
            cache[key, value] = encoded
        parts.append(encoded)
    return b"".join(parts)


def shared_attributes(attrs: Mapping[str, Any], cache: dict[tuple, bytes]) -> bytes:
    """Span.attributes entries many requests share, encoded once per distinct set (keyed by
    the values' types too: True is 1 to a dict)."""
    try:
        key = (tuple(attrs.items()), tuple(map(type, attrs.values())))
        encoded = cache.get(key)
    except TypeError:  # an unhashable value (a list): encoded each time
        return attributes(attrs)
    if encoded is None:
        encoded = attributes(attrs)
        if len(cache) >= CACHE_MAX:
            cache.clear()  # bounded; refilled by the next requests
        cache[key] = encoded
    return encoded


@lru_cache(maxsize=1024)
def key_field(key: str) -> bytes:
    """A KeyValue's key (field 1): attribute names are few, encoded once each."""
    return field(0x0A, key.encode())


@lru_cache(maxsize=1024)
def name_kind_fields(name: str, kind: int) -> bytes:
    """Span.name (field 5) and Span.kind (field 6): few distinct pairs, encoded once each."""
    return field(0x2A, name.encode()) + KIND_FIELDS[kind]


@lru_cache(maxsize=256)
def tail_fields(code: int, message: str, remote: bool) -> bytes:
    """Span.status (field 15; the SDK always writes it, empty when unset) and Span.flags
    (field 16): few distinct combinations, encoded once each."""
    if code:
        body = (field(0x12, message.encode()) if message else b"") + b"\x18" + varint(code)
        status = field(0x7A, body)
    else:
        status = EMPTY_STATUS
    return status + (REMOTE_FLAGS if remote else LOCAL_FLAGS)


def encode_span(
    trace_id: bytes,
    state: bytes,
    span: Span,
    cache: dict[tuple, bytes],
    own_cache: dict[tuple, bytes],
) -> bytes:
    """A Span message, tagged as ScopeSpans.spans (field 2)."""
    span_id, parent_id, name, kind, start_ns, end_ns, attrs, own, code, message, remote = span
    head = trace_id + span_id.to_bytes(8, "big") + state
    if parent_id:
        head += b"\x22\x08" + parent_id.to_bytes(8, "big")
    body = b"".join(
        (
            head,
            name_kind_fields(name, kind),
            TIMES.pack(0x39, start_ns, 0x41, end_ns),
            shared_attributes(attrs, cache) if attrs else b"",
            own_attributes(own, own_cache) if own else b"",
            tail_fields(code, message, remote),
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
        # Only the export thread encodes: its caches need no lock.
        self.cache: dict[tuple, bytes] = {}
        self.own_cache: dict[tuple, bytes] = {}

    def encode(self, records: Sequence[TraceRecord]) -> bytes:
        parts = [self.scope]
        cache, own_cache = self.cache, self.own_cache
        for record in records:
            # Span.trace_id (field 1), then Span.span_id's key (field 2): the same for all.
            trace_id = b"\x0a\x10" + record.trace_id.to_bytes(16, "big") + b"\x12\x08"
            state = field(0x1A, record.trace_state.encode()) if record.trace_state else b""
            for span in record.spans:
                parts.append(encode_span(trace_id, state, span, cache, own_cache))
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
