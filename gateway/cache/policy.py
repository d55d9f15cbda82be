"""Who decides whether a request's answer is cached, and for how long.

Three parties, each within the one before:
1. the operator, per model (providers/response_cache.py): cacheable or not, a maximum TTL;
2. the tenant, per group or key (the key's setting wins): `off`, `on_request` (the default:
   only requests that ask) or `always` with a TTL, and the scope (cache/keys.py);
3. the request, by header: `X-Tollgate-Cache-TTL: <seconds>` asks for caching (0 turns it
   off), `Cache-Control: no-cache` skips the lookup but stores the fresh answer, `no-store`
   stores nothing (a stored answer may still serve it).
A request never widens what the tenant or the operator allow: its TTL is capped by the model's
maximum, and under `off` it is bypassed whatever it asks.
"""

from __future__ import annotations

from dataclasses import dataclass

from accounts.models import CacheMode
from core.errors import InvalidRequest
from gateway.catalog import CacheTerms

TTL_HEADER = b"x-tollgate-cache-ttl"
CACHE_CONTROL = b"cache-control"
HIT, MISS, BYPASS = "hit", "miss", "bypass"


@dataclass(frozen=True, slots=True)
class Decision:
    """What the cache does for one request: look up a stored answer, keep the fresh one."""

    lookup: bool
    ttl_s: int  # how long the fresh answer is kept; 0: not at all

    @property
    def bypassed(self) -> bool:
        return not self.lookup and not self.ttl_s


BYPASSED = Decision(lookup=False, ttl_s=0)


def decide(
    headers: dict[bytes, bytes], *, mode: str, tenant_ttl_s: int, terms: CacheTerms
) -> Decision:
    """Return what the cache does for a request with these headers (LM-2001 for a malformed
    TTL header), under the tenant's `mode` / `tenant_ttl_s` and the model's `terms`."""
    asked = requested_ttl(headers)
    if not terms.cacheable or mode == CacheMode.OFF or asked == 0:
        return BYPASSED
    if mode == CacheMode.ALWAYS:
        ttl = asked if asked is not None else tenant_ttl_s
    elif asked is not None:  # on request, and this one asks
        ttl = asked
    else:
        return BYPASSED
    directives = cache_control(headers)
    decision = Decision(
        lookup="no-cache" not in directives,
        ttl_s=0 if "no-store" in directives else min(ttl, terms.max_ttl_s),
    )
    return BYPASSED if decision.bypassed else decision


def requested_ttl(headers: dict[bytes, bytes]) -> int | None:
    """Return the TTL a request asks for (None: it does not say)."""
    raw = headers.get(TTL_HEADER)
    if raw is None:
        return None
    text = raw.decode("latin-1").strip()
    if not text.isdigit() or len(text) > 9:
        raise InvalidRequest("X-Tollgate-Cache-TTL must be whole seconds (0 turns caching off).")
    return int(text)


def cache_control(headers: dict[bytes, bytes]) -> frozenset[str]:
    """Return the request's Cache-Control directives, lower-cased, arguments dropped."""
    raw = headers.get(CACHE_CONTROL)
    if not raw:
        return frozenset()
    return frozenset(
        part.split("=", 1)[0].strip().lower() for part in raw.decode("latin-1").split(",")
    )
