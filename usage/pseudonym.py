"""Caller labels: a keyed, per-window pseudonym of the end-user id a client sends.

label = "c_" + base32(HMAC-SHA256(TOLLGATE_CALLER_KEY, window + ":" + raw id))[:24]. The
window (calendar month by default, or year) is at least the budget period, so a label is
stable while its budget counts. Without a caller key nothing is labelled: no id is
forwarded, spend falls back to the group bucket, and one warning says so.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from datetime import UTC, datetime

from core.config import tollgate

log = logging.getLogger(__name__)
_warned = False


def window_id(now: datetime | None = None, *, window: str | None = None) -> str:
    now = now or datetime.now(UTC)
    window = window or tollgate().caller_window
    return f"{now.year:04d}" if window == "year" else f"{now.year:04d}-{now.month:02d}"


def caller_label(raw_id: str | None, *, now: datetime | None = None) -> str | None:
    """Return the label for an end-user id, or None (no id, or no caller key configured)."""
    global _warned
    if not raw_id:
        return None
    key = tollgate().caller_key
    if not key:
        if not _warned:
            _warned = True
            log.warning(
                "TOLLGATE_CALLER_KEY is not set: end-user ids are dropped, nothing is "
                "forwarded, and per-caller spend falls back to the group bucket"
            )
        return None
    return label_for(raw_id, key=key, window=window_id(now))


def label_for(raw_id: str, *, key: str, window: str) -> str:
    """Return the label of an end-user id under a caller key in one window (e.g. "2026-11")."""
    digest = hmac.new(key.encode(), f"{window}:{raw_id}".encode(), hashlib.sha256).digest()
    return "c_" + base64.b32encode(digest).decode().lower()[:24]


def new_caller_key() -> str:
    """Return a fresh random caller key (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)
