"""Tracing's CPU per request, in one process: the pipeline's hooks and the spans' building and
export, without the rest of the gateway's noise (its run-to-run spread dwarfs 0.05 ms).

Run (from the repository root)::

    python bench/trace_cost.py            # --n 20000 --repeat 5
    python bench/trace_cost.py --profile  # and where the time goes (cProfile, 100 %)

For each mode (off: no endpoint; 1 %; 100 %) it runs, n times, what a non-streamed chat
request that one vendor call served does for its trace: `begin` (the sampling decision), the
five stage marks, `calling` / `called` around the call (and its headers given their
traceparent), `answered`, and `finished` (the spans built and queued). The exporter is the
real OTLP/HTTP one, to a sink in this process (the sink's thread is excluded); the batch
processor is flushed every 400 requests at 100 % (its queue never drops a request's spans) and
after the loop, so the protobuf encoding and the HTTP posts are counted. CPU is the process's
(every thread) minus the sink thread's; each mode runs `--repeat` rounds, and the least and
the median are printed (a shared host's neighbours only ever add CPU time).
Then, at 100 %, the request's thread and the export thread's encoding apart (`split`;
PROFILE_ENCODE=1 shows where the encoding's time goes).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class Sink:
    def __init__(self) -> None:
        self.cpu_s = 0.0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                started = time.thread_time()
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()
                sink.cpu_s += time.thread_time() - started

            def log_message(self, *args) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    sink = Sink()
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = sink.url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("TOLLGATE_VAR_DIR", "/tmp/tollgate-trace-cost")
    import django

    django.setup()
    from core import tracing as core_tracing
    from core.usage_record import AttemptRecord, UsageRecord
    from gateway import tracing
    from gateway.auth import Principal
    from gateway.context import Meter, ModelContext

    principal = Principal(
        account_id=1,
        billing_mode="prepaid",
        group_id=2,
        group_budget_max_micro=None,
        group_rpm=None,
        group_tpm=None,
        group_concurrency=None,
        bandwidth_micro_per_gb=0,
        api_key_id=3,
    )
    attempt = AttemptRecord(1, "openai-main", "gpt-4o-mini", "platform", "s", "ok", 200, 120)
    record = UsageRecord(
        request_id="01a2",
        client_request_id="",
        created_at=datetime.now(UTC),
        account_id=1,
        group_id=2,
        api_key_id=3,
        caller_label="",
        endpoint="chat",
        model_requested="gpt-4o-mini",
        model_served="gpt-4o-mini",
        provider="openai-main",
        served_by="platform",
        tokens_in=12,
        tokens_out=8,
        byok_tokens_in=0,
        byok_tokens_out=0,
        provider_cost_micro=7,
        bytes_in=120,
        bytes_out=400,
        bandwidth_charge_micro=0,
        upstream_sent=True,
        status=200,
        error_code="",
        latency_ms=130,
        ttft_ms=None,
        streamed=False,
        reservation_id=None,
        cache_status="bypass",
        attempts=(attempt,),
    )
    headers: dict[bytes, bytes] = {}
    vendor_headers = {"authorization": "Bearer sk-x", "content-type": "application/json"}

    def one() -> None:
        ctx = ModelContext(request_id="01a2", endpoint="chat", meter=Meter(), principal=principal)
        ctx.trace = tracing.begin(headers, ctx.started)
        tracing.mark(ctx, "planned")
        tracing.mark(ctx, "admitted")
        tracing.mark(ctx, "held")
        tracing.calling(ctx)
        tracing.outbound_headers(vendor_headers)
        started = time.monotonic()
        ctx.trail.append(attempt)
        tracing.called(ctx, started)
        tracing.answered(ctx, "stop", "")
        tracing.mark(ctx, "settling")
        tracing.mark(ctx, "settled")
        tracing.finished(ctx, record)

    for name, ratio in (("off", None), ("1%", 0.01), ("100%", 1.0)):
        core_tracing.SETTINGS = core_tracing.Settings(
            ratio is not None, core_tracing.Sampler(ratio or 0.0, False)
        )
        for _ in range(500):  # warm-up (and the tracer built)
            one()
        if ratio is not None:
            core_tracing.flush()
        profiler = cProfile.Profile() if args.profile and ratio == 1.0 else None
        per_request_ms = [measure(one, args.n, ratio, sink, core_tracing, profiler)]
        if profiler is None:
            per_request_ms += [
                measure(one, args.n, ratio, sink, core_tracing) for _ in range(args.repeat - 1)
            ]
        per_request_ms.sort()
        print(
            f"{name:>5}: {per_request_ms[0]:.4f} ms CPU per request at the least, "
            f"{statistics.median(per_request_ms):.4f} ms the median "
            f"({len(per_request_ms)} rounds of {args.n})",
            flush=True,
        )
        if profiler:
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    split(one, args.n, core_tracing)


def measure(one, n: int, ratio, sink: Sink, core_tracing, profiler=None) -> float:
    """One round: n requests' CPU (every thread but the sink's), per request, in ms."""
    sink.cpu_s = 0.0
    cpu = time.process_time()
    if profiler:
        profiler.enable()
    for i in range(n):
        one()
        if ratio == 1.0 and i % 400 == 399:  # the queue (4096 spans) never overflows
            core_tracing.flush(30)
    if ratio is not None:
        core_tracing.flush(30)
    if profiler:
        profiler.disable()
    return (time.process_time() - cpu - sink.cpu_s) * 1000 / n


def split(one, n: int, core_tracing) -> None:
    """At 100 %: the request's own thread (hooks and span building) apart from the export
    thread's work (the OTLP protobuf encoding of the same spans, in the processor's batches)."""
    kept: list = []
    encoder = core_tracing.exporter().processor.span_exporter.encoder
    real = core_tracing.Exporter.export
    core_tracing.Exporter.export = lambda self, record: kept.append(record)
    try:
        cpu = time.thread_time()
        for _ in range(n):
            one()
        hooks_ms = (time.thread_time() - cpu) * 1000 / n
    finally:
        core_tracing.Exporter.export = real
    cpu = time.thread_time()
    batch = core_tracing.BATCH_MAX
    profiler = cProfile.Profile() if os.environ.get("PROFILE_ENCODE") else None
    if profiler:
        profiler.enable()
    for start in range(0, len(kept), batch):
        encoder.encode(kept[start : start + batch])
    if profiler:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
    encode_ms = (time.thread_time() - cpu) * 1000 / n
    print(
        f"100% split: {hooks_ms:.4f} ms on the request's thread (hooks, spans built), "
        f"{encode_ms:.4f} ms encoding on the export thread, per request "
        f"({sum(len(r.spans) for r in kept) / n:.0f} spans each)"
    )


if __name__ == "__main__":
    main()
