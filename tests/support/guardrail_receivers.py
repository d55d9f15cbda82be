"""A real endpoint for webhook guardrails: an HTTP server on 127.0.0.1 (a thread of the test
process) that checks each POST's signature as a vendor would (core.webhook_signing.verify on
X-Tollgate-Guardrail-Signature) and answers its scripted replies in turn, clean after them.
An unsigned or badly signed POST is answered 401, so a test sees the gateway's failure."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson

from core.webhook_signing import verify
from gateway.guard_hooks import SIGNATURE_HEADER


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b'{"flagged": false}'
    delay_s: float = 0.0  # sleep first: past a deadline, the gateway is gone when it answers


CLEAN = Reply()
FLAGGED = Reply(body=b'{"flagged": true, "matches": 2}')


def late(delay_s: float) -> Reply:
    return Reply(delay_s=delay_s)


@dataclass
class HookCall:
    body: bytes
    signed: bool
    host: str  # the Host header it came with

    @property
    def json(self) -> dict:
        return orjson.loads(self.body)


@dataclass
class GuardrailReceiver:
    """POSTs checked with `secret` (set once the guardrail exists); `replies` in turn."""

    replies: list[Reply] = field(default_factory=list)
    secret: str = ""
    received: list[HookCall] = field(default_factory=list)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                header = self.headers.get(SIGNATURE_HEADER, "")
                signed = verify(body, header, secret=receiver.secret, now=int(time.time()))
                receiver.received.append(HookCall(body, signed, self.headers.get("Host", "")))
                reply = receiver.replies.pop(0) if receiver.replies else CLEAN
                time.sleep(reply.delay_s)
                status, answer = (reply.status, reply.body) if signed else (401, b"")
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except OSError:
                    pass  # the caller gave up (its deadline passed)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/check"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
