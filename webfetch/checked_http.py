"""Calling a URL a tenant gave, from the control plane (alert webhooks, SSO providers): its
host resolved once and checked (`addresses.checked_address`), then the connection made to the
address checked, the name kept in the Host header and as the TLS server name (so the
certificate is verified for the name). Never a second lookup that a name rebound after the
check (DNS rebinding) could answer with a refused address. Redirects are not followed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from webfetch.addresses import IPAddress, Network, checked_address


def pinned(url: str, address: IPAddress) -> tuple[str, str, dict[str, Any]]:
    """`url` with its host replaced by `address`; the Host header it keeps; and the request
    extensions that name the TLS server for https."""
    parts = urlsplit(url)
    host = f"[{address}]" if address.version == 6 else str(address)
    netloc = f"{host}:{parts.port}" if parts.port else host
    extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
    return urlunsplit(parts._replace(netloc=netloc)), parts.netloc.rpartition("@")[2], extensions


def checked_request(
    method: str,
    url: str,
    *,
    allow: Sequence[Network],
    timeout_s: float,
    headers: dict[str, str] | None = None,
    **options: Any,
) -> httpx.Response:
    """Send one request to a tenant's URL at the address its check approved. Raises
    addresses.HostRefused (nothing sent) or httpx.HTTPError."""
    target, host, extensions = pinned(url, checked_address(url, allow=allow))
    with httpx.Client(timeout=timeout_s, follow_redirects=False) as client:
        return client.request(
            method,
            target,
            headers={**(headers or {}), "Host": host},
            extensions=extensions,
            **options,
        )
