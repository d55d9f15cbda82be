"""Who a sign-in attempt counts against (a name's keyed hash, a client's address), and what
a refused attempt is told."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import unicodedata
from collections.abc import Mapping

from django.conf import settings

from core.config import tollgate

UNKNOWN_ADDRESS = "unknown"  # a peer without a parsable address (a unix socket, a bad header)


def normalised_name(name: str) -> str:
    return unicodedata.normalize("NFKC", name).casefold().strip()


def name_digest(name: str) -> str:
    """Return the keyed hash that stands for an account name in keys and logs."""
    key = settings.SECRET_KEY.encode()
    return hmac.new(key, normalised_name(name).encode(), hashlib.sha256).hexdigest()[:32]


def address_subject(raw: str) -> str:
    """Return the address an attempt counts against: the IP, an IPv6 client's /64."""
    text = raw.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # v4:port, as some proxies write it
        text = text.split(":")[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return UNKNOWN_ADDRESS
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def client_address(meta: Mapping[str, str]) -> str:
    """Return the client's address subject from a request's META (see PROXY_HOPS)."""
    hops = tollgate().proxy_hops
    raw = meta.get("REMOTE_ADDR") or ""
    if hops:
        seen = [part.strip() for part in meta.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        seen = [part for part in seen if part]
        if seen:
            # Fewer entries than proxies: the request skipped the outer ones, and the first
            # entry is still one a trusted proxy wrote.
            raw = seen[-hops] if len(seen) >= hops else seen[0]
    return address_subject(raw)


def wait_phrase(wait_s: int) -> str:
    if wait_s < 60:
        return f"{wait_s} second{'s' if wait_s != 1 else ''}"
    minutes = math.ceil(wait_s / 60)
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


def sign_in_refusal(wait_s: int, *, busy: bool = False) -> str:
    if busy:
        return (
            "Too many sign-ins from this address are being checked at once. "
            f"Try again in {wait_phrase(wait_s)}."
        )
    return (
        "Too many failed sign-ins for this account or address. "
        f"Try again in {wait_phrase(wait_s)}, or ask an operator to unlock it."
    )


def token_refusal(wait_s: int, *, busy: bool = False) -> str:
    if busy:
        return (
            "Too many tenant tokens from this address are being checked at once. "
            f"Try again in {wait_phrase(wait_s)}."
        )
    return (
        "Too many unknown or revoked tenant tokens from this address. "
        f"Try again in {wait_phrase(wait_s)}, or ask an operator to unlock it."
    )
