"""Real receivers for tenant alerts: an HTTP endpoint that checks each POST's signature as a
tenant would (core.webhook_signing.verify), answering scripted statuses; and an SMTP server
(aiosmtpd) that keeps every message Django's SMTP backend sends it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from alerts.channels import EVENT_ID_HEADER, SIGNATURE_HEADER
from core.webhook_signing import verify


@dataclass
class Received:
    event_id: str
    body: bytes
    signed: bool
    status: int
    host: str = ""  # the Host header it came with


@dataclass
class WebhookReceiver:
    """POSTs checked with `secret` (set once the webhook exists); `statuses` answered in turn,
    200 after them."""

    statuses: list[int] = field(default_factory=list)
    secret: str = ""
    received: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                signed = verify(
                    body,
                    self.headers.get(SIGNATURE_HEADER, ""),
                    secret=receiver.secret,
                    now=int(time.time()),
                )
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                receiver.received.append(
                    Received(
                        self.headers.get(EVENT_ID_HEADER, ""),
                        body,
                        signed,
                        status,
                        self.headers.get("Host", ""),
                    )
                )
                self.send_response(status if signed else 401)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/tollgate"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class SmtpReceiver:
    """An aiosmtpd server on 127.0.0.1 keeping each message it accepts."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.messages: list[tuple[list[str], Message]] = []
        receiver = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):  # noqa: N802
                receiver.messages.append(
                    (list(envelope.rcpt_tos), message_from_bytes(envelope.content))
                )
                return "250 OK"

        from tests.support.processes import free_port

        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def close(self) -> None:
        self.controller.stop()
