"""Sending one delivery: a signed POST to a tenant's webhook, or Django's email.

A tenant names the webhook's URL, so it must reach public addresses only: its host is
checked when the webhook is saved and again before every try (the web fetcher's rules,
webfetch/addresses.py, as sso/ checks a provider's URLs), each try connects to the very
address it checked (a name that resolves elsewhere the second time is never asked twice),
and redirects are not followed.
"""

from __future__ import annotations

import smtplib
import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx
import orjson
from django.conf import settings
from django.core.mail import EmailMessage

from alerts.signing import EVENT_ID_HEADER, SIGNATURE_HEADER, sign
from core.sinks import SinkError, configured_sink
from webfetch.addresses import HostRefused, IPAddress, allowed_networks, checked_address

TIMEOUT_S = 10.0


class Unreachable(ValueError):
    """A webhook URL Tollgate will not call."""


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    status_code: int | None = None
    error: str = ""
    permanent: bool = False


def check_url(url: str) -> IPAddress:
    """Refuse a URL that is not http(s), or whose host is, or resolves to, an address that
    is not globally reachable (unless inside TOLLGATE_WEB_ALLOW_NETS); return the address
    checked, the one to connect to."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Unreachable("A webhook URL is an http:// or https:// URL with a host.")
    allow = allowed_networks(settings.TOLLGATE["WEB_ALLOW_NETS"])
    try:
        return checked_address(url, allow=allow)
    except HostRefused as refused:
        raise Unreachable(f"The webhook's {refused}.") from None


def pinned(url: str, address: IPAddress) -> tuple[str, str, dict]:
    """`url` with its host replaced by `address`; the Host header it keeps; and for https the
    name its certificate must carry (the TLS server name, checked as for the name itself)."""
    parts = urlsplit(url)
    host = f"[{address}]" if address.version == 6 else str(address)
    netloc = f"{host}:{parts.port}" if parts.port else host
    extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
    return urlunsplit(parts._replace(netloc=netloc)), parts.netloc.rpartition("@")[2], extensions


def body_of(payload: dict) -> bytes:
    return orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)


def post_webhook(*, url: str, secret: str, event_id: str, payload: dict) -> Outcome:
    """POST the payload signed now; 2xx is delivered, a 4xx other than 408/409/425/429 will
    not change by waiting (permanent)."""
    try:
        address = check_url(url)
    except Unreachable as exc:
        return Outcome(ok=False, error=str(exc)[:200], permanent=True)
    target, host, extensions = pinned(url, address)
    body = body_of(payload)
    headers = {
        "Host": host,
        "Content-Type": "application/json",
        "User-Agent": "Tollgate-Alerts/1",
        SIGNATURE_HEADER: sign(body, secret=secret, timestamp=int(time.time())),
        EVENT_ID_HEADER: event_id,
    }
    try:
        with httpx.Client(timeout=TIMEOUT_S, follow_redirects=False) as client:
            response = client.post(target, content=body, headers=headers, extensions=extensions)
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
