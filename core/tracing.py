"""Traces: the OpenTelemetry SDK set up from the standard OTEL_* variables, the W3C trace
context, and the sampling decision, once per request.

Off (nothing imported, nothing built, every hook a test of one attribute) unless an OTLP
endpoint is set (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`) and
`OTEL_SDK_DISABLED` is not true. On, spans are exported over OTLP/HTTP (protobuf) by a
BatchSpanProcessor: a bounded queue and a worker thread with its own export timeout, so a
dead or hanging collector only drops spans, never slows or fails a request.

Sampling is decided here when a request starts, not by the SDK: a client's `traceparent`
flag is obeyed when the sampler is parent-based, else the trace id is compared with the
ratio (the SDK's own rule, so a trace's services agree). Only a sampled request records
anything; its spans are built when it ends (gateway/trace_spans.py), with the ids decided
here.
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
# The SDK's TraceIdRatioBased compares the trace id's low 64 bits with ratio * 2**64.
ID_LOW_MASK = (1 << 64) - 1
SAMPLERS = frozenset(
    {
        "always_on",
        "always_off",
        "traceidratio",
        "parentbased_always_on",
        "parentbased_always_off",
        "parentbased_traceidratio",
    }
)
DEFAULT_SERVICE = "tollgate"
# Requests (about five spans each) waiting for export: past it they are dropped, never
# waited on; and per OTLP post.
QUEUE_MAX = 2048
BATCH_MAX = 512
EXPORT_TIMEOUT_S = 5.0  # one export's wait on a collector that does not answer


@dataclass(frozen=True, slots=True)
class Sampler:
    """The OTEL_TRACES_SAMPLER rule: a ratio (1.0 for always_on), and whether a parent's
    sampled flag decides instead."""

    ratio: float = 1.0
    parent_based: bool = True

    def sampled(self, trace_id: int, parent_sampled: bool | None) -> bool:
        """Decide once for a request: its parent's flag (when parent-based and given), else
        its trace id against the ratio."""
        if parent_sampled is not None and self.parent_based:
            return parent_sampled
        return (trace_id & ID_LOW_MASK) < int(self.ratio * (1 << 64))


def sampler_from(name: str | None, arg: str | None) -> Sampler:
    """Read OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG (unknown names: the default,
    parentbased_always_on, as the SDK does)."""
    name = (name or "parentbased_always_on").strip().lower()
    if name not in SAMPLERS:
        name = "parentbased_always_on"
    parent_based = name.startswith("parentbased_")
    rule = name.removeprefix("parentbased_")
    if rule == "always_off":
        return Sampler(0.0, parent_based)
    if rule == "always_on":
        return Sampler(1.0, parent_based)
    try:
        ratio = float(arg) if arg else 1.0
    except ValueError:
        ratio = 1.0
    return Sampler(min(max(ratio, 0.0), 1.0), parent_based)


@dataclass(frozen=True, slots=True)
class Parent:
    """A client's W3C trace context: its trace, its span, its sampled flag, its tracestate."""

    trace_id: int
    span_id: int
    sampled: bool
    state: str = ""


def parse_traceparent(value: bytes | str | None, state: bytes | str | None = None) -> Parent | None:
    """Read a `traceparent` header (version 00); None when absent or malformed (all-zero ids
    are invalid, as W3C says)."""
    if not value:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    match = TRACEPARENT.match(text.strip())
    if match is None:
        return None
    trace_id, span_id = int(match.group(1), 16), int(match.group(2), 16)
    if not trace_id or not span_id:
        return None
    if isinstance(state, bytes):
        state = state.decode("latin-1")
    return Parent(trace_id, span_id, bool(int(match.group(3), 16) & 1), (state or "")[:512])


def traceparent(trace_id: int, span_id: int, *, sampled: bool = True) -> str:
    """Write a `traceparent` header naming a span."""
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def new_trace_id() -> int:
    return random.getrandbits(128) or 1


def new_span_id() -> int:
    return random.getrandbits(64) or 1


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


@dataclass(frozen=True, slots=True)
class Settings:
    enabled: bool
    sampler: Sampler


def settings_from(env: dict[str, str] | os._Environ) -> Settings:
    """Tracing is on when an OTLP endpoint is set and the SDK is not disabled."""
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    enabled = bool(endpoint) and not _truthy(env.get("OTEL_SDK_DISABLED"))
    return Settings(
        enabled, sampler_from(env.get("OTEL_TRACES_SAMPLER"), env.get("OTEL_TRACES_SAMPLER_ARG"))
    )


SETTINGS = settings_from(os.environ)


def should_sample(parent: Parent | None) -> tuple[int, bool]:
    """Return a request's trace id (its parent's, or a new one) and whether it is sampled."""
    trace_id = parent.trace_id if parent is not None else new_trace_id()
    if not SETTINGS.enabled:
        return trace_id, False
    return trace_id, SETTINGS.sampler.sampled(trace_id, parent.sampled if parent else None)


@dataclass(frozen=True, slots=True)
class Exporter:
    """What finished requests' spans are handed to: the SDK's batch processor (its own
    thread, a bounded queue, OTLP/HTTP protobuf), one record per request."""

    processor: Any

    def export(self, record: Any) -> None:
        """Queue a request's spans (a core.trace_export.TraceRecord); never waits: a full
        queue drops them."""
        self.processor.on_end(record)


@cache
def exporter() -> Exporter:
    """Return the process's exporter (built on first use: after a worker forked).

    A request's spans are one plain record (gateway/trace_spans.py), queued here whole: the
    SDK's Tracer, its span objects and its protobuf encoder are skipped (they were most of
    tracing's cost per request), not its batch processor and its OTLP/HTTP exporter."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    from core.trace_export import RecordExporter

    resource = Resource.create(
        {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: DEFAULT_SERVICE}
    )
    timeout_s = float(os.environ.get("OTEL_EXPORTER_OTLP_TIMEOUT") or EXPORT_TIMEOUT_S)
    processor = BatchSpanProcessor(
        RecordExporter(
            resource, InstrumentationScope("tollgate"), timeout=min(timeout_s, EXPORT_TIMEOUT_S)
        ),
        max_queue_size=QUEUE_MAX,
        max_export_batch_size=BATCH_MAX,
        export_timeout_millis=int(EXPORT_TIMEOUT_S * 1000),
    )
    return Exporter(processor)


def flush(timeout_s: float = EXPORT_TIMEOUT_S) -> None:
    """Export what is queued, waiting at most `timeout_s` (a process about to stop)."""
    if exporter.cache_info().currsize:
        exporter().processor.force_flush(int(timeout_s * 1000))
