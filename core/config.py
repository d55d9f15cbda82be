"""Tollgate's own settings as one frozen, typed object, built once from Django's settings.

config/settings.py reads and checks the environment (config/settings_environment.py's SCHEME)
and leaves Tollgate's numbers in the `TOLLGATE` dict and the gateway's switches in top-level
names. `tollgate()` turns them into a `TollgateSettings` on first use and keeps it, so code
reads `tollgate().request_deadline_s`, never `settings.TOLLGATE["REQUEST_DEADLINE_S"]`: a
misspelt name is an error mypy sees, and every value has its type. A test that changes one of
them (pytest-django's `settings` fixture, `override_settings`) makes Django send
`setting_changed`, which drops the kept object; the next call builds it anew. Replacing the
whole dict is the way to change it: a value written into the dict in place is not seen.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_origin, get_type_hints

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed


@dataclass(frozen=True, slots=True)
class TollgateSettings:
    """Hold one value per TOLLGATE_* setting (config/settings.py says what each means)."""

    # Requests: body cap, models in a fallback chain, what a hold assumes per image.
    max_body_bytes: int
    max_route: int
    image_tokens_bound: int
    # Authentication: the key cache's age cap, failed lookups per address and minute.
    auth_cache_ttl_s: int
    auth_fail_per_min: int
    # Limits: the rate windows' epoch, the fleet's size and in-flight caps (model requests',
    # web actions'), Redis's timeout.
    rate_epoch_s: int
    config_reload_s: int
    replicas: int
    inflight_max: int
    web_inflight_max: int
    redis_timeout_ms: int
    # Breakers, escrow and the request's deadline.
    breaker_failures: int
    breaker_cooldown_s: int
    escrow_margin_pct: int
    reservation_ttl_s: int
    request_deadline_s: int
    # The usage log: windows, the webhook sink, the writer, retention, budget beats.
    usage_window_s: int
    usage_sink_url: str
    usage_sink_secret: str = field(repr=False)
    usage_grace_s: int
    usage_flush_ms: int
    usage_claim_idle_ms: int
    usage_retention_days: int
    # Holds, reservations and settled markers: days kept once closed (0: forever).
    billing_state_retention_days: int
    # Receipts: days kept in PostgreSQL (0: forever) and the archive store past them.
    receipt_retention_days: int
    archive_dir: Path
    budget_roll_s: int
    budget_alerts_s: int
    alerts_s: int
    alert_retry_base_s: int
    # Caller labels ("" when off) and their window ("month" or "year").
    caller_key: str = field(repr=False)
    caller_window: str
    idempotency_ttl_s: int
    idempotency_max_bytes: int
    # The response cache: its Redis ("": in process), entry and memory caps.
    cache_redis_url: str = field(repr=False)
    cache_max_entry_bytes: int
    cache_memory_mb: int
    metrics_dir: Path
    metrics_token: str = field(repr=False)
    # Web acquisition and crawl jobs.
    web_action_timeout_s: int
    web_max_results: int
    web_max_redirects: int
    web_max_bytes: int
    web_max_decompressed_bytes: int
    web_allow_nets: tuple[str, ...]
    web_user_agent: str
    crawl_max_pages: int
    crawl_max_depth: int
    crawl_host_delay_ms: int
    crawl_lease_s: int
    # Sign-in throttling.
    login_failures: int
    login_lockout_s: int
    login_lockout_max_s: int
    login_concurrency: int
    proxy_hops: int
    # Not in the TOLLGATE dict: the gateway's top-level GATEWAY_* settings.
    byok_enabled: bool
    ptb_enabled: bool
    internal_token: str = field(repr=False)
    web_internal_tokens: tuple[str, ...] = field(repr=False)


# Fields read from a top-level Django setting rather than from the TOLLGATE dict.
TOP_LEVEL = {
    "byok_enabled": "GATEWAY_BYOK_ENABLED",
    "ptb_enabled": "GATEWAY_PTB_ENABLED",
    "internal_token": "GATEWAY_INTERNAL_TOKEN",
    "web_internal_tokens": "WEB_FETCH_INTERNAL_TOKENS",
}


@functools.cache
def tollgate() -> TollgateSettings:
    """Return Tollgate's settings, built from Django's on the first call after a change."""
    return from_django(
        settings.TOLLGATE, {name: getattr(settings, name) for name in TOP_LEVEL.values()}
    )


def from_django(conf: dict[str, Any], top_level: dict[str, Any]) -> TollgateSettings:
    """Build the settings object from the TOLLGATE dict and the top-level GATEWAY_* values."""
    names = {field.name for field in fields(TollgateSettings)} - TOP_LEVEL.keys()
    given = {key.lower() for key in conf}
    if given != names:
        odd = sorted(given ^ names)
        raise ImproperlyConfigured(
            f"TOLLGATE and core.config.TollgateSettings differ: {', '.join(odd).upper()}."
        )
    values = {key.lower(): value for key, value in conf.items()}
    values |= {field: top_level[name] for field, name in TOP_LEVEL.items()}
    values["web_allow_nets"] = tuple(values["web_allow_nets"])
    values["metrics_dir"] = Path(values["metrics_dir"])
    values["archive_dir"] = Path(values["archive_dir"])
    for name, hint in get_type_hints(TollgateSettings).items():
        kind = get_origin(hint) or hint
        if not isinstance(values[name], kind) or (kind is int and isinstance(values[name], bool)):
            raise ImproperlyConfigured(
                f"Malformed setting {name.upper()}: expected {kind.__name__}, got {values[name]!r}."
            )
    return TollgateSettings(**values)


def _forget(*, setting: str, **kwargs: object) -> None:
    if setting == "TOLLGATE" or setting in TOP_LEVEL.values():
        tollgate.cache_clear()


setting_changed.connect(_forget)
