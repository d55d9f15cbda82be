"""The operator's say over the response cache, per model: whether its answers may be cached,
the longest a tenant may keep one, and what a hit costs (a share of the call it replays).

Read from PROVIDER_PROFILES_JSON's models (`"cacheable": true, "cache_max_ttl_s": 3600,
"cache_hit_price_pct": 10`) and the admin; the gateway applies them (gateway/cache/policy.py).
"""

from __future__ import annotations

from typing import Any

from providers.models import DEFAULT_CACHE_HIT_PRICE_PCT, DEFAULT_CACHE_MAX_TTL_S

CACHE_FIELDS = ("cacheable", "cache_max_ttl_s", "cache_hit_price_pct")
MAX_TTL_S = 30 * 86_400  # a month: longer is a store, not a cache


def cache_fields_problem(model: dict[str, Any]) -> str | None:
    """Say what is wrong with a JSON model's cache fields, or None."""
    if not isinstance(model.get("cacheable", False), bool):
        return "'cacheable' must be true or false"
    ttl = model.get("cache_max_ttl_s", DEFAULT_CACHE_MAX_TTL_S)
    if not _whole(ttl) or not 1 <= ttl <= MAX_TTL_S:
        return f"'cache_max_ttl_s' must be whole seconds from 1 to {MAX_TTL_S}"
    pct = model.get("cache_hit_price_pct", DEFAULT_CACHE_HIT_PRICE_PCT)
    if not _whole(pct) or not 0 <= pct <= 100:
        return "'cache_hit_price_pct' must be a whole percent from 0 to 100"
    return None


def cache_fields(model: dict[str, Any]) -> dict[str, Any]:
    """Return a JSON model's cache columns, defaults filled in (checked before)."""
    return {
        "cacheable": model.get("cacheable", False),
        "cache_max_ttl_s": model.get("cache_max_ttl_s", DEFAULT_CACHE_MAX_TTL_S),
        "cache_hit_price_pct": model.get("cache_hit_price_pct", DEFAULT_CACHE_HIT_PRICE_PCT),
    }


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
