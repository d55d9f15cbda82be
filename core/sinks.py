"""Where outbound events go (usage events, spend alerts): a signed webhook, or the log (the
default), and the retry policy their deliveries share.

A sink sends one event's body or raises SinkError, saying whether trying again can help. Each
delivery loop (usage.services.usage_events_deliver, billing.alerts.budget_alerts_deliver)
claims what is due for a lease, sends it and records the outcome; a failure is tried again
after `backoff_s`, up to MAX_DELIVERY_ATTEMPTS, a permanent one fails at once.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

from core.config import tollgate

log = logging.getLogger(__name__)

MAX_DELIVERY_ATTEMPTS = 10
BACKOFF_BASE_S = 30
BACKOFF_MAX_S = 3600
DELIVERY_LEASE_S = 120  # a sender that died mid-delivery gives the event back after this
DELIVERY_BATCH = 200

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
    url = tollgate().usage_sink_url
    if url:
        return WebhookSink(url=url, secret=tollgate().usage_sink_secret)
    return LogSink()


@dataclass(frozen=True, slots=True)
class DeliveryReport:
    delivered: int = 0
    retrying: int = 0
    failed: int = 0


def backoff_s(attempts: int) -> int:
    """Return the wait before the next try after `attempts` failed ones (30 s, 60 s, ... 1 h)."""
    return min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** max(0, attempts - 1))


def rfc3339(moment: datetime) -> str:
    """Return an instant as receivers read it: UTC, `Z`, microseconds only when there are some."""
    moment = moment.astimezone(UTC)
    spec = "microseconds" if moment.microsecond else "seconds"
    return moment.replace(tzinfo=None).isoformat(timespec=spec) + "Z"
