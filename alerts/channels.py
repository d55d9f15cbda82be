"""Sending one delivery: a signed POST to a tenant's webhook, or Django's email.

A tenant names the webhook's URL, so it must reach public addresses only: its host is
checked when the webhook is saved and again before every try (the web fetcher's rules,
webfetch/addresses.py, as sso/ checks a provider's URLs), and each try connects to the very
address it checked, redirects not followed (webfetch/checked_http.py).
"""

from __future__ import annotations

import smtplib
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import orjson
from django.conf import settings
from django.core.mail import EmailMessage

from core.sinks import SinkError, configured_sink
from core.webhook_signing import sign
from webfetch.addresses import HostRefused, Network, allowed_networks, checked_address
from webfetch.checked_http import checked_request

# Each alert webhook call's signature (core/webhook_signing.py) and its event's id.
SIGNATURE_HEADER = "X-Tollgate-Alert-Signature"
EVENT_ID_HEADER = "X-Tollgate-Event-Id"
TIMEOUT_S = 10.0
NOT_HTTP = "A webhook URL is an http:// or https:// URL with a host."


class Unreachable(ValueError):
    """A webhook URL Tollgate will not call."""


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    status_code: int | None = None
    error: str = ""
    permanent: bool = False


def check_url(url: str) -> None:
    """Refuse a URL that is not http(s), or whose host is, or resolves to, an address that
    is not globally reachable (unless inside TOLLGATE_WEB_ALLOW_NETS)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Unreachable(NOT_HTTP)
    try:
        checked_address(url, allow=_allowed())
    except HostRefused as refused:
        raise Unreachable(f"The webhook's {refused}.") from None


def _allowed() -> tuple[Network, ...]:
    return allowed_networks(settings.TOLLGATE["WEB_ALLOW_NETS"])


def body_of(payload: dict) -> bytes:
    return orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)


def post_webhook(*, url: str, secret: str, event_id: str, payload: dict) -> Outcome:
    """POST the payload signed now; 2xx is delivered, a 4xx other than 408/409/425/429 will
    not change by waiting (permanent)."""
    if urlsplit(url).scheme not in ("http", "https"):
        return Outcome(ok=False, error=NOT_HTTP, permanent=True)
    body = body_of(payload)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Tollgate-Alerts/1",
        SIGNATURE_HEADER: sign(body, secret=secret, timestamp=int(time.time())),
        EVENT_ID_HEADER: event_id,
    }
    try:
        response = checked_request(
            "POST", url, allow=_allowed(), timeout_s=TIMEOUT_S, headers=headers, content=body
        )
    except HostRefused as refused:
        return Outcome(ok=False, error=f"The webhook's {refused}."[:200], permanent=True)
    except httpx.HTTPError as exc:
        return Outcome(ok=False, error=f"{type(exc).__name__} posting to the webhook")
    if response.is_success:
        return Outcome(ok=True, status_code=response.status_code)
    code = response.status_code
    permanent = 400 <= code < 500 and code not in (408, 409, 425, 429)
    return Outcome(
        ok=False, status_code=code, error=f"the webhook answered {code}", permanent=permanent
    )


def subject_of(payload: dict) -> str:
    return f"[Tollgate] {payload.get('summary', 'alert')}"


def text_of(payload: dict) -> str:
    lines = [payload.get("summary", ""), ""]
    lines += [f"{name}: {payload[name]}" for name in sorted(payload) if name != "summary"]
    return "\n".join(lines) + "\n"


def send_email(*, recipients: list[str], payload: dict) -> Outcome:
    """Send the alert by Django's email framework (EMAIL_* settings); a refused recipient or
    sender is permanent, a connection problem is tried again."""
    if not recipients:
        return Outcome(ok=False, error="no recipients", permanent=True)
    message = EmailMessage(subject=subject_of(payload), body=text_of(payload), to=recipients)
    try:
        message.send(fail_silently=False)
    except (smtplib.SMTPRecipientsRefused, smtplib.SMTPSenderRefused) as exc:
        return Outcome(ok=False, error=f"{type(exc).__name__}"[:200], permanent=True)
    except (OSError, smtplib.SMTPException) as exc:
        return Outcome(ok=False, error=f"{type(exc).__name__}: {exc}"[:200])
    return Outcome(ok=True)


def send_to_sink(*, event_id: str, payload: dict) -> Outcome:
    """Send a firing to the operator's sink (core/sinks.py: a signed webhook, or the log)."""
    try:
        configured_sink().send(event_id=event_id, body=orjson.dumps(payload))
    except SinkError as exc:
        return Outcome(ok=False, error=str(exc)[:200], permanent=exc.permanent)
    return Outcome(ok=True)
