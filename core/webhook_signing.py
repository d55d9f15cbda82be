"""Webhook signatures, the one scheme every webhook Tollgate sends is signed with (alert
webhooks, webhook guardrails): `t=<unix seconds>,v1=<hex>`, the HMAC-SHA256 under the
webhook's secret of "<t>." followed by the raw body. The timestamp in the signed text lets a
receiver refuse a replay older than a few minutes (docs/tenant-api.md shows the check). Each
sender names its own header."""

from __future__ import annotations

import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"
TOLERANCE_S = 300


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def sign(body: bytes, *, secret: str, timestamp: int) -> str:
    """Return the signature header's value for `body` sent at `timestamp`."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(
    body: bytes, header: str, *, secret: str, now: int, tolerance_s: int = TOLERANCE_S
) -> bool:
    """Return whether `header` signs `body` with `secret` within `tolerance_s` of `now`:
    what a receiver does (constant-time compare)."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance_s:
        return False
    expected = sign(body, secret=secret, timestamp=timestamp).split("v1=", 1)[1]
    return hmac.compare_digest(expected, fields.get("v1", ""))
