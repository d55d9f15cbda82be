"""A request's trace and its overhead: recorded cheaply while it runs, spans built at its end.

While a request runs, only plain fields are written, and only for a sampled one: the
monotonic time of each stage's end (`mark`), each vendor call's span id and times
(`calling` / `called`; `outbound_headers` sends the call its traceparent), the answer's
finish reason (and its text with content capture). When the answer has gone out,
`finished` builds the spans at once, with the times recorded (gateway/trace_spans.py); the
SDK's batch processor exports them from its own thread.

The overhead (X-Tollgate-Overhead-Ms, tollgate_gateway_overhead_seconds) is the time from
the request's arrival to its answer's head, less the time spent waiting on vendor calls
(each try, to its answer or to a stream's first token): what the gateway itself added.
"""

from __future__ import annotations

import contextvars
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core import metrics, tracing
from core.tracing import Parent

if TYPE_CHECKING:
    from core.usage_record import UsageRecord
    from gateway.context import RequestContext

log = logging.getLogger(__name__)
OVERHEAD_HEADER = b"x-tollgate-overhead-ms"
TRACEPARENT = b"traceparent"
TRACESTATE = b"tracestate"
# The vendor call being made: its traceparent, for the upstream client's hook to send.
OUTBOUND: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "tollgate_outbound_trace", default=None
)


@dataclass(slots=True)
class Call:
    """One vendor call of the request: its span id, its times, its line of the trail."""

    span_id: int
    started: float
    ended: float = 0.0
    trail_index: int = -1


@dataclass(slots=True)
class RequestTrace:
    """What a sampled request records for its spans (times are time.monotonic())."""

    trace_id: int
    span_id: int  # the request span's
    parent: Parent | None
    wall_ns: int  # time.time_ns() at `started`: monotonic times are placed from it
    started: float
    marks: dict[str, float] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    finish_reason: str = ""
    answer: list[str] | None = None  # the answer's text: only with content capture

    def ns(self, at: float) -> int:
        return self.wall_ns + int((at - self.started) * 1e9)


def begin(headers: dict[bytes, bytes], started: float) -> RequestTrace | None:
    """Decide once whether a request is traced (its client's traceparent respected)."""
    if not tracing.SETTINGS.enabled:
        return None
    parent = tracing.parse_traceparent(headers.get(TRACEPARENT), headers.get(TRACESTATE))
    trace_id, sampled = tracing.should_sample(parent)
    if not sampled:
        return None
    wall_ns = time.time_ns() - int((time.monotonic() - started) * 1e9)
    return RequestTrace(trace_id, tracing.new_span_id(), parent, wall_ns, started)


def mark(ctx: RequestContext, name: str) -> None:
    """Note that a stage ended (or, for "streaming" and "settling", began) now."""
    trace = ctx.trace
    if trace is not None:
        trace.marks[name] = time.monotonic()


def calling(ctx: RequestContext) -> None:
    """A vendor call starts: give it a span id and its traceparent (sent by the client hook)."""
    trace = ctx.trace
    if trace is None:
        return
    call = Call(tracing.new_span_id(), time.monotonic())
    trace.calls.append(call)
    OUTBOUND.set(
        (
            tracing.traceparent(trace.trace_id, call.span_id),
            trace.parent.state if trace.parent is not None else "",
        )
    )


def called(ctx: RequestContext, started: float) -> None:
    """A vendor call ended (its trail line was just written): count its wait."""
    ended = time.monotonic()
    ctx.vendor_s += ended - started
    trace = ctx.trace
    if trace is not None and trace.calls and not trace.calls[-1].ended:
        call = trace.calls[-1]
        call.ended, call.trail_index = ended, len(ctx.trail) - 1


def answered(ctx: RequestContext, finish_reason: str, text: str = "") -> None:
    """Keep what a whole answer says for the trace: its finish reason, its text if captured."""
    trace = ctx.trace
    if trace is not None:
        trace.finish_reason = finish_reason
        if captures(ctx):
            trace.answer = [text]


def answer_sink(ctx: RequestContext) -> list[str] | None:
    """Return the list a stream's text goes into when the trace captures content."""
    trace = ctx.trace
    if trace is None or not captures(ctx):
        return None
    trace.answer = []
    return trace.answer


def captures(ctx: RequestContext) -> bool:
    return ctx.principal is not None and ctx.principal.trace_content


def overhead_header(ctx: RequestContext) -> tuple[bytes, bytes]:
    """Return the answer's X-Tollgate-Overhead-Ms (and observe it): time so far, less the
    vendor's."""
    overhead_s = max(time.monotonic() - ctx.started - ctx.vendor_s, 0.0)
    metrics.labeled(metrics.OVERHEAD, ctx.endpoint).observe(overhead_s)
    return OVERHEAD_HEADER, b"%.2f" % (overhead_s * 1000)


def finished(ctx: RequestContext, record: UsageRecord | None) -> None:
    """The answer went out: observe its time to first token; build its spans if sampled."""
    ttft_ms = getattr(ctx, "ttft_ms", None)
    if ttft_ms is not None and record is not None and record.provider:
        metrics.labeled(metrics.TIME_TO_FIRST_TOKEN, record.provider).observe(ttft_ms / 1000)
    trace = ctx.trace
    if trace is None or record is None:
        return
    from gateway.trace_spans import build

    try:
        build(ctx, trace, record, time.monotonic())
    except Exception:  # a trace is never worth a request: its books are already closed
        log.exception("could not build the trace of request %s", ctx.request_id)


def outbound_headers(headers: dict[str, str]) -> dict[str, str]:
    """A vendor call's headers: a traced call's with its span's traceparent (and the client's
    tracestate) added, any other's as they were (one context-variable read, nothing else: no
    aiohttp trace hooks, which cost every call a dozen signals)."""
    outbound = OUTBOUND.get()
    if outbound is None:
        return headers
    traced = {**headers, "traceparent": outbound[0]}
    if outbound[1]:
        traced["tracestate"] = outbound[1]
    return traced
