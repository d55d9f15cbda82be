"""Tracing's cost: the gw loads again through gateways that trace (``*-trace100``, ``*-trace1``).

Used by ``bench/run.py`` when a ``-trace`` scenario runs. For each sampling ratio asked
(100 % and 1 %), one more gateway is started on the same database and stub, with the standard
variables: ``OTEL_EXPORTER_OTLP_ENDPOINT`` at a sink in this process (a threaded HTTP server
that answers every ``POST /v1/traces`` 200 and counts its bytes; decoding is the collector's
work, not the gateway's), ``OTEL_TRACES_SAMPLER=traceidratio`` and its ratio. The scenario
then runs exactly like its untraced twin (``run.run_scenario``), and the comparison sets its
gateway ``cpu/req`` against the twin's: what tracing adds per request (span building and
export included: the batch processor's thread is the gateway's CPU too).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RATIOS = {"trace100": "1", "trace1": "0.01"}
TARGET_MS = 0.05  # issue 42: at most 0.05 ms of gateway CPU per request at 100 % sampling


class Sink:
    """An OTLP/HTTP endpoint that accepts every export and keeps only counts."""

    def __init__(self) -> None:
        sink = self
        self.exports = 0
        self.bytes = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                size = int(self.headers.get("content-length") or 0)
                self.rfile.read(size)
                sink.exports += 1
                sink.bytes += size
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def start(
    env: dict[str, str],
    servers: Any,
    tmp: Path,
    procs: list,
    names: set[str],
    start_gateway: Callable[[dict[str, str], Path], tuple[Any, str]],
) -> dict[str, Any]:
    """Start a traced gateway per ratio in `names` ("trace100", "trace1") with run.py's
    `start_gateway`; return run.Servers naming each."""
    sink = Sink()
    started: dict[str, Any] = {}
    for name in sorted(names):
        traced_env = {
            **env,
            "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url,
            "OTEL_TRACES_SAMPLER": "traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": RATIOS[name],
            "OTEL_SERVICE_NAME": f"tollgate-bench-{name}",
        }
        logdir = tmp / name
        logdir.mkdir(exist_ok=True)
        gateway, url = start_gateway(traced_env, logdir)
        procs.append(gateway)
        started[name] = dataclasses.replace(servers, gateway=gateway, gw_url=url)
    return started


def comparisons(results: list) -> list[dict[str, Any]]:
    """Each traced scenario's gateway cpu/req against its untraced twin's."""
    by_name = {r.name: r for r in results}
    rows = []
    for r in results:
        twin_name, _, suffix = r.name.rpartition("-")
        if suffix not in RATIOS:
            continue
        twin = by_name.get(twin_name)
        added = (
            r.gateway_cpu_ms_per_req - twin.gateway_cpu_ms_per_req
            if twin is not None
            and r.gateway_cpu_ms_per_req is not None
            and twin.gateway_cpu_ms_per_req is not None
            else None
        )
        rows.append(
            {
                "scenario": r.name,
                "twin": twin_name,
                "cpu_ms_per_req": r.gateway_cpu_ms_per_req,
                "twin_cpu_ms_per_req": twin.gateway_cpu_ms_per_req if twin else None,
                "added_cpu_ms_per_req": added,
                "target_ms": TARGET_MS if suffix == "trace100" else None,
            }
        )
    return rows


def report(results: list) -> str:
    rows = comparisons(results)
    if not rows:
        return ""
    lines = ["Tracing (gateway cpu/req, ms): traced vs its untraced twin"]
    for row in rows:

        def fmt(v: float | None) -> str:
            return "-" if v is None else f"{v:.3f}"

        target = row["target_ms"]
        verdict = ""
        if target is not None and row["added_cpu_ms_per_req"] is not None:
            verdict = " ok" if row["added_cpu_ms_per_req"] <= target else f" OVER {target} ms"
        added = row["added_cpu_ms_per_req"]
        lines.append(
            f"  {row['scenario']:<28} {fmt(row['cpu_ms_per_req'])} vs {row['twin']} "
            f"{fmt(row['twin_cpu_ms_per_req'])}: "
            f"{'-' if added is None else format(added, '+.3f')}{verdict}"
        )
    return "\n".join(lines)
