"""A small OTLP/HTTP trace receiver: a real HTTP server that decodes what the gateway exports.

`POST .../v1/traces` bodies (any prefix: Langfuse's is /api/public/otel) are decoded as the
collector protocol's ExportTraceServiceRequest (protobuf); tests read the spans as plain
`Span` values, and each export's path and headers. `hang()` makes it hold every export
without answering (a collector that hangs) until `release()`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.support.waits import wait_until


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str  # hex, as a traceparent writes it
    span_id: str
    parent_span_id: str  # "" for a root span
    kind: int  # the protocol's SpanKind: 2 server, 3 client, 1 internal
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error
    service: str


def _value(any_value) -> Any:
    which = any_value.WhichOneof("value")
    if which == "array_value":
        return tuple(_value(v) for v in any_value.array_value.values)
    return getattr(any_value, which) if which else None


class OtlpReceiver:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[Span] = []
        self.exports = 0  # POSTs received (each a batch)
        self._hang = threading.Event()
        self._released = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with receiver._lock:
                    receiver.exports += 1
                if receiver._hang.is_set():
                    receiver._released.wait(60)
                if not self.path.endswith("/v1/traces"):
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver._take(
                    body, {"path": self.path} | {k.lower(): v for k, v in self.headers.items()}
                )
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:
                return None

        self.headers_seen: list[dict[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _take(self, body: bytes, headers: dict[str, str]) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    spans.append(
                        Span(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(),
                            kind=s.kind,
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            status_code=s.status.code,
                            service=str(resource.get("service.name", "")),
                        )
                    )
        with self._lock:
            self._spans.extend(spans)
            self.headers_seen.append(headers)

    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    def trace_of(self, request_id: str, *, count: int, timeout_s: float = 15.0) -> list[Span]:
        """Wait for the `count` spans of the trace whose request span names `request_id`."""

        def found() -> list[Span] | None:
            spans = self.spans()
            root = [s for s in spans if s.attributes.get("tollgate.request_id") == request_id]
            if not root:
                return None
            trace = [s for s in spans if s.trace_id == root[0].trace_id]
            return trace if len(trace) >= count else None

        return wait_until(found, timeout_s=timeout_s, what=f"{count} spans of {request_id}")

    def hang(self) -> None:
        self._released.clear()
        self._hang.set()

    def release(self) -> None:
        self._hang.clear()
        self._released.set()

    def clear(self) -> None:
        with self._lock:
            self._spans.clear()
            self.headers_seen.clear()

    def stop(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()
