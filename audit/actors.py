"""Who made a control-plane change, and from where: what every audit entry names.

Never a secret: a person by username, a tenant API token by its display prefix and id.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.config import tollgate


class Kind:
    USER = "user"  # a person signed in (dashboard, or the tenant API's session)
    TOKEN = "token"  # a tenant API token
    OPERATOR = "operator"  # a person in the operator's Django admin
    SYSTEM = "system"  # a management command, a start-up bootstrap, a direct call

    CHOICES = [
        (USER, "user"),
        (TOKEN, "tenant API token"),
        (OPERATOR, "operator"),
        (SYSTEM, "system"),
    ]


@dataclass(frozen=True)
class Actor:
    kind: str
    label: str
    id: int | None = None
    remote_addr: str | None = None


def remote_address(meta: Mapping[str, Any]) -> str | None:
    """Return the client's address of a request's META: REMOTE_ADDR, or with PROXY_HOPS = N
    the Nth X-Forwarded-For entry from the right (the one our own proxy wrote); None when
    it is not an IP address."""
    raw = str(meta.get("REMOTE_ADDR") or "")
    hops = tollgate().proxy_hops
    if hops:
        seen = [part.strip() for part in str(meta.get("HTTP_X_FORWARDED_FOR", "")).split(",")]
        seen = [part for part in seen if part]
        if seen:
            raw = seen[-hops] if len(seen) >= hops else seen[0]
    try:
        return str(ipaddress.ip_address(raw.strip()))
    except ValueError:
        return None


def request_actor(request: Any, *, operator: bool = False) -> Actor:
    """Return who sent `request`: an operator (the admin's pages say `operator=True`), a
    tenant API token (DRF's `request.auth` carries it), or a signed-in user."""
    user = request.user
    address = remote_address(request.META)
    if operator:
        return Actor(Kind.OPERATOR, user.get_username(), user.pk, address)
    token = getattr(request, "auth", None)
    prefix = getattr(token, "prefix", "")
    if token is not None and prefix:
        label = f"{user.get_username()} via token {prefix}…"
        return Actor(Kind.TOKEN, label, token.pk, address)
    return Actor(Kind.USER, user.get_username(), user.pk, address)


def system(label: str) -> Actor:
    """Return a system actor: a management command ("manage.py create_tenant"), a start-up."""
    return Actor(Kind.SYSTEM, label)


def default_actor() -> Actor:
    """The actor of a change no caller named: the management command running, if one is
    (python manage.py seed_demo), else "system"."""
    argv = sys.argv
    if len(argv) > 1 and argv[0].endswith("manage.py"):
        return system(f"manage.py {argv[1]}")
    return system("system")
