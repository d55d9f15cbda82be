"""The TOLLGATE setting: Tollgate's own numbers (core.config.tollgate() reads them), each
from its TOLLGATE_* variable, checked together at start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import environ
from django.core.exceptions import ImproperlyConfigured

from webfetch.addresses import allowed_networks as _allowed_networks


def tollgate_settings(
    env: environ.Env, *, var_dir: Path, caller_key: str, redis_url: str
) -> dict[str, Any]:
    """Return the TOLLGATE dict, or stop the process on a value out of range."""
    values: dict[str, Any] = {
        "MAX_BODY_BYTES": env("TOLLGATE_MAX_BODY_BYTES"),
        "MAX_ROUTE": env("TOLLGATE_MAX_ROUTE"),
        # What a hold assumes one image or document costs beyond its bytes (vendors price an
        # image by its pixels, which Tollgate does not decode).
        "IMAGE_TOKENS_BOUND": env("TOLLGATE_IMAGE_TOKENS_BOUND"),
        "AUTH_CACHE_TTL_S": env("TOLLGATE_AUTH_CACHE_TTL_S"),
        "AUTH_FAIL_PER_MIN": env("TOLLGATE_AUTH_FAIL_PER_MIN"),
        # The one-minute rate windows start at this Unix time plus whole minutes (0: on the
        # minute); every replica of a fleet must share it, as Redis keys carry the window number.
        "RATE_EPOCH_S": env("TOLLGATE_RATE_EPOCH_S"),
        "CONFIG_RELOAD_S": env("TOLLGATE_CONFIG_RELOAD_S"),
        "REPLICAS": max(1, env("TOLLGATE_REPLICAS")),
        "INFLIGHT_MAX": env("TOLLGATE_INFLIGHT_MAX"),
        # Web actions' own fleet-wide in-flight cap: slow scrapes never take the model routes'.
        "WEB_INFLIGHT_MAX": env("TOLLGATE_WEB_INFLIGHT_MAX"),
        "REDIS_TIMEOUT_MS": env("TOLLGATE_REDIS_TIMEOUT_MS"),
        "BREAKER_FAILURES": env("TOLLGATE_BREAKER_FAILURES"),
        "BREAKER_COOLDOWN_S": env("TOLLGATE_BREAKER_COOLDOWN_S"),
        "ESCROW_MARGIN_PCT": env("TOLLGATE_ESCROW_MARGIN_PCT"),
        "RESERVATION_TTL_S": env("TOLLGATE_RESERVATION_TTL_S"),
        "REQUEST_DEADLINE_S": env("TOLLGATE_REQUEST_DEADLINE_S"),
        "USAGE_WINDOW_S": env("TOLLGATE_USAGE_WINDOW_S"),
        "USAGE_SINK_URL": env("TOLLGATE_USAGE_SINK_URL"),
        "USAGE_SINK_SECRET": env("TOLLGATE_USAGE_SINK_SECRET"),
        "USAGE_GRACE_S": env("TOLLGATE_USAGE_GRACE_S"),
        "USAGE_FLUSH_MS": env("TOLLGATE_USAGE_FLUSH_MS"),
        "USAGE_CLAIM_IDLE_MS": env("TOLLGATE_USAGE_CLAIM_IDLE_MS"),
        # Usage rows (with their attempt trails) older than this many days are dropped, a month
        # at a time on PostgreSQL, once their rollups are audited (usage/partitions.py). Ledger
        # entries and rollups stay. 0 keeps everything forever.
        "USAGE_RETENTION_DAYS": max(0, env("TOLLGATE_USAGE_RETENTION_DAYS")),
        # The closed per-request working state (holds, reservations, settled markers) older than
        # this many days is dropped, a slice of a month at a time, never under 7 days
        # (billing/partitions.py): what a request used and paid stays in its usage row, receipt
        # and ledger entries. 0 keeps it forever.
        "BILLING_STATE_RETENTION_DAYS": max(0, env("TOLLGATE_BILLING_STATE_RETENTION_DAYS")),
        # Receipts older than this many days leave PostgreSQL as signed monthly archives in
        # ARCHIVE_DIR, a whole month at a time, each account's last receipt kept (billing/
        # archives.py). 0 keeps receipts in PostgreSQL forever.
        "RECEIPT_RETENTION_DAYS": max(0, env("TOLLGATE_RECEIPT_RETENTION_DAYS")),
        "ARCHIVE_DIR": Path(env("TOLLGATE_ARCHIVE_DIR") or var_dir / "archives"),
        # How often beat rolls the budget periods nothing charged since they ended, and sends the
        # spend alerts settlement raised.
        "BUDGET_ROLL_S": max(1, env("TOLLGATE_BUDGET_ROLL_S")),
        "BUDGET_ALERTS_S": max(1, env("TOLLGATE_BUDGET_ALERTS_S")),
        "ALERTS_S": max(1, env("TOLLGATE_ALERTS_S")),
        "ALERT_RETRY_BASE_S": max(1, env("TOLLGATE_ALERT_RETRY_BASE_S")),
        "CALLER_KEY": caller_key,
        "CALLER_WINDOW": env("TOLLGATE_CALLER_WINDOW"),
        # Idempotency-Key records live this long; answers past the cap are served, not stored.
        "IDEMPOTENCY_TTL_S": env("TOLLGATE_IDEMPOTENCY_TTL_S"),
        "IDEMPOTENCY_MAX_BYTES": env("TOLLGATE_IDEMPOTENCY_MAX_BYTES"),
        # The response cache (docs/cache.md): its Redis (empty: REDIS_URL's; none: in process),
        # the largest entry kept (compressed), and the cap on its memory (the in-process store's;
        # a cache Redis of its own is set to it with LRU eviction at start).
        "CACHE_REDIS_URL": env("TOLLGATE_CACHE_REDIS_URL") or redis_url,
        "CACHE_MAX_ENTRY_BYTES": max(1024, env("TOLLGATE_CACHE_MAX_ENTRY_BYTES")),
        "CACHE_MEMORY_MB": max(1, env("TOLLGATE_CACHE_MEMORY_MB")),
        # Where the workers of a multi-process server share their metrics (core/metrics.py).
        "METRICS_DIR": Path(env("TOLLGATE_METRICS_DIR") or var_dir / "metrics"),
        "METRICS_TOKEN": env("TOLLGATE_METRICS_TOKEN"),
        # Web acquisition: one action's deadline (every try of every profile), the cap on a
        # search's results, and the direct fetcher's limits (webfetch/fetcher.py).
        "WEB_ACTION_TIMEOUT_S": env("TOLLGATE_WEB_ACTION_TIMEOUT_S"),
        "WEB_MAX_RESULTS": env("TOLLGATE_WEB_MAX_RESULTS"),
        "WEB_MAX_REDIRECTS": env("TOLLGATE_WEB_MAX_REDIRECTS"),
        "WEB_MAX_BYTES": env("TOLLGATE_WEB_MAX_BYTES"),
        "WEB_MAX_DECOMPRESSED_BYTES": env("TOLLGATE_WEB_MAX_DECOMPRESSED_BYTES"),
        # Networks the direct fetcher may reach although they are not public (CIDRs; empty: none).
        # Off by default; the test suite allows the 127.0.0.1 it serves its test site on.
        "WEB_ALLOW_NETS": env("TOLLGATE_WEB_ALLOW_NETS"),
        "WEB_USER_AGENT": env("TOLLGATE_WEB_USER_AGENT"),
        # Crawl jobs: the most pages and depth a job may ask, the wait between two fetches of one
        # host, and how long a worker's claim on a job lasts without renewal.
        "CRAWL_MAX_PAGES": env("TOLLGATE_CRAWL_MAX_PAGES"),
        "CRAWL_MAX_DEPTH": env("TOLLGATE_CRAWL_MAX_DEPTH"),
        "CRAWL_HOST_DELAY_MS": env("TOLLGATE_CRAWL_HOST_DELAY_MS"),
        "CRAWL_LEASE_S": env("TOLLGATE_CRAWL_LEASE_S"),
        # Sign-in throttling (accounts/throttle.py): failures per account name or client address
        # before a lockout (0: off), the first lockout, and its cap as lockouts repeat (doubling).
        "LOGIN_FAILURES": env("TOLLGATE_LOGIN_FAILURES"),
        "LOGIN_LOCKOUT_S": env("TOLLGATE_LOGIN_LOCKOUT_S"),
        "LOGIN_LOCKOUT_MAX_S": env("TOLLGATE_LOGIN_LOCKOUT_MAX_S"),
        # Password checks one control-plane process runs at once (each takes a core for ~0.3 s).
        "LOGIN_CONCURRENCY": env("TOLLGATE_LOGIN_CONCURRENCY"),
        # How many reverse proxies in front append to X-Forwarded-For (0: the peer's address is
        # the client's). The client is the address the outermost trusted proxy saw.
        "PROXY_HOPS": env("TOLLGATE_PROXY_HOPS"),
    }
    if (
        min(values["LOGIN_FAILURES"], values["PROXY_HOPS"]) < 0
        or values["LOGIN_CONCURRENCY"] < 1
        or not (1 <= values["LOGIN_LOCKOUT_S"] <= values["LOGIN_LOCKOUT_MAX_S"])
    ):
        raise ImproperlyConfigured(
            "Malformed setting TOLLGATE_LOGIN_*: failures and proxy hops >= 0, concurrency >= 1, "
            "and 1 <= TOLLGATE_LOGIN_LOCKOUT_S <= TOLLGATE_LOGIN_LOCKOUT_MAX_S."
        )
    if values["RESERVATION_TTL_S"] < values["REQUEST_DEADLINE_S"]:
        # A hold must outlive the request it covers, or the reaper frees a live stream's money.
        raise ImproperlyConfigured(
            "Malformed setting TOLLGATE_RESERVATION_TTL_S: it must be at least "
            "TOLLGATE_REQUEST_DEADLINE_S."
        )
    if values["IDEMPOTENCY_TTL_S"] < 2 * values["REQUEST_DEADLINE_S"]:
        # A key must outlive the request running it by far, or a duplicate runs it twice.
        raise ImproperlyConfigured(
            "Malformed setting TOLLGATE_IDEMPOTENCY_TTL_S: it must be at least twice "
            "TOLLGATE_REQUEST_DEADLINE_S."
        )
    if values["IDEMPOTENCY_MAX_BYTES"] < 1:
        raise ImproperlyConfigured("Malformed setting TOLLGATE_IDEMPOTENCY_MAX_BYTES: use >= 1.")
    if values["AUTH_FAIL_PER_MIN"] < 0:
        raise ImproperlyConfigured(
            "Malformed setting TOLLGATE_AUTH_FAIL_PER_MIN: use >= 0 (0 turns the limit off)."
        )
    if values["RATE_EPOCH_S"] < 0:
        raise ImproperlyConfigured(
            "Malformed setting TOLLGATE_RATE_EPOCH_S: use >= 0 (Unix seconds)."
        )
    if values["MAX_ROUTE"] < 1:
        raise ImproperlyConfigured("Malformed setting TOLLGATE_MAX_ROUTE: use >= 1.")
    if values["METRICS_TOKEN"] and len(values["METRICS_TOKEN"]) < 32:
        raise ImproperlyConfigured(
            "Malformed setting TOLLGATE_METRICS_TOKEN: it must be at least 32 characters."
        )
    if values["CALLER_WINDOW"] not in ("month", "year"):
        raise ImproperlyConfigured("Malformed setting TOLLGATE_CALLER_WINDOW: use month or year.")
    if values["USAGE_WINDOW_S"] < 1 or values["USAGE_GRACE_S"] < 0:
        raise ImproperlyConfigured(
            "Malformed setting TOLLGATE_USAGE_WINDOW_S / TOLLGATE_USAGE_GRACE_S: use >= 1 / >= 0."
        )
    try:
        _allowed_networks(values["WEB_ALLOW_NETS"])  # the fetcher's own parse, once at start
    except ValueError as exc:
        raise ImproperlyConfigured(f"Malformed setting {exc}") from None
    if values["USAGE_SINK_URL"] and not values["USAGE_SINK_SECRET"]:
        raise ImproperlyConfigured(
            "Missing setting TOLLGATE_USAGE_SINK_SECRET: the usage webhook is always signed."
        )
    return values
