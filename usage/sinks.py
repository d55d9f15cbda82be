"""Where usage events go: a signed webhook, or the log (the default).

A sink sends one event's body or raises SinkError, saying whether trying again can help. The
delivery loop (usage.services.usage_events_deliver) owns retries, backoff and bookkeeping.
"""

from __future__ import annotations

import hashlib
import hmac
import logging

import httpx
from django.conf import settings

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Tollgate-Signature"
EVENT_ID_HEADER = "X-Tollgate-Event-Id"
TIMEOUT_S = 10.0


class SinkError(Exception):
    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class Sink:
    name = "sink"

    def send(self, *, event_id: str, body: bytes) -> None:
        raise NotImplementedError


class LogSink(Sink):
    """Write each event as one log line (the default when no webhook is configured)."""

    name = "log"

    def send(self, *, event_id: str, body: bytes) -> None:
        log.info("usage event %s %s", event_id, body.decode())


def signature(body: bytes, *, secret: str) -> str:
    """Return the webhook signature header value: "sha256=" + hex HMAC-SHA256 of the body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookSink(Sink):
    """POST the event's JSON, signed with the shared secret; 2xx means delivered."""

    name = "webhook"

    def __init__(self, *, url: str, secret: str) -> None:
        self.url = url
        self.secret = secret

    def send(self, *, event_id: str, body: bytes) -> None:
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(body, secret=self.secret),
            EVENT_ID_HEADER: event_id,
        }
        try:
            response = httpx.post(self.url, content=body, headers=headers, timeout=TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise SinkError(f"{type(exc).__name__} posting to the usage webhook") from None
        if response.is_success:
            return
        # A 4xx other than timeout / conflict / rate limit will not change by waiting.
        permanent = 400 <= response.status_code < 500 and response.status_code not in (
            408,
            409,
            425,
            429,
        )
        raise SinkError(f"usage webhook answered {response.status_code}", permanent=permanent)


def configured_sink() -> Sink:
    url = settings.TOLLGATE["USAGE_SINK_URL"]
    if url:
        return WebhookSink(url=url, secret=settings.TOLLGATE["USAGE_SINK_SECRET"])
    return LogSink()
