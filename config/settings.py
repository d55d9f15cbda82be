"""Settings, read from the environment through django-environ.

Every variable has an embedded default so a first run needs none of them (SQLite, no Redis,
Celery on a local transport). In production set DATABASE_URL and REDIS_URL. A variable that
is unknown (our prefixes only) or malformed stops the process at start with its name.
"""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path

import environ
from csp import constants as csp_constants
from django.core.exceptions import ImproperlyConfigured

from core.sealing import parse_keyring as _parse_keyring
from core.signing import parse_receipt_keys as _parse_receipt_keys
from webfetch.addresses import allowed_networks as _allowed_networks

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("TOLLGATE_VAR_DIR", BASE_DIR / "var"))

# Every variable Tollgate reads, with its type and embedded default.
SCHEME: dict[str, tuple[type, object]] = {
    "DEBUG": (bool, False),
    "SECRET_KEY": (str, ""),
    "ALLOWED_HOSTS": (list, ["*"]),
    "CSRF_TRUSTED_ORIGINS": (list, []),
    "DATABASE_URL": (str, ""),
    # The owner's login, for `migrate` and `grant_app_role` only (core/db_roles.py): given on
    # those commands' line, never in .env, so no serving process holds it.
    "DATABASE_OWNER_URL": (str, ""),
    "REDIS_URL": (str, ""),
    "CELERY_BROKER_URL": (str, ""),
    "GATEWAY_INTERNAL_TOKEN": (str, ""),
    # Web acquisition's own internal bearer, and its legacy alias (docs/settings.md).
    "WEB_FETCH_INTERNAL_TOKEN": (str, ""),
    "WEB_FETCH_TOKEN": (str, ""),
    "GATEWAY_PTB_ENABLED": (bool, True),
    "GATEWAY_BYOK_ENABLED": (bool, True),
    # Read by the process commands (compose.yaml, Procfile), not by Django: the gateway's
    # worker count, and its address in the Procfile.
    "GATEWAY_WORKERS": (int, 2),
    "GATEWAY_BIND": (str, "127.0.0.1:8000"),
    "GATEWAY_PORT": (int, 8000),  # compose.yaml: the gateway's port on 127.0.0.1
    "TOLLGATE_IMAGE": (str, "tollgate:latest"),  # compose.yaml: the image it runs
    "SEALING_KEYS": (str, ""),
    "TOLLGATE_RECEIPT_KEYS": (str, ""),
    "PROVIDER_PROFILES_JSON": (str, ""),
    "TOLLGATE_VAR_DIR": (str, ""),
    "TOLLGATE_PUBLIC_URL": (str, ""),
    # Behind TLS (production): cookies, HSTS, and how a request says it came over https.
    "TOLLGATE_SECURE_COOKIES": (str, ""),
    "TOLLGATE_BEHIND_TLS_PROXY": (bool, False),
    "TOLLGATE_SSL_REDIRECT": (bool, False),
    "TOLLGATE_HSTS_SECONDS": (int, 0),
    "TOLLGATE_HSTS_INCLUDE_SUBDOMAINS": (bool, False),
    "TOLLGATE_HSTS_PRELOAD": (bool, False),
    "TOLLGATE_REDIS_PERSISTENCE": (str, "check"),
    # Sign-in throttling (dashboard, Django admin, tenant API tokens).
    "TOLLGATE_LOGIN_FAILURES": (int, 5),
    "TOLLGATE_LOGIN_LOCKOUT_S": (int, 60),
    "TOLLGATE_LOGIN_LOCKOUT_MAX_S": (int, 3600),
    "TOLLGATE_LOGIN_CONCURRENCY": (int, 1),
    "TOLLGATE_PROXY_HOPS": (int, 0),
    # Single sign-on (sso/): the operators' own OpenID provider for the Django admin, and
    # whether an http:// issuer is accepted (a test provider; never in production).
    "TOLLGATE_ADMIN_OIDC_ISSUER": (str, ""),
    "TOLLGATE_ADMIN_OIDC_CLIENT_ID": (str, ""),
    "TOLLGATE_ADMIN_OIDC_CLIENT_SECRET": (str, ""),
    "TOLLGATE_ADMIN_OIDC_NAME": (str, "single sign-on"),
    "TOLLGATE_ADMIN_OIDC_SUBJECTS": (list, []),
    "TOLLGATE_ADMIN_OIDC_GROUP": (str, ""),
    "TOLLGATE_ADMIN_OIDC_GROUPS_CLAIM": (str, "groups"),
    "TOLLGATE_SSO_ALLOW_HTTP": (bool, False),
    "TOLLGATE_BEAT_SCHEDULE": (str, ""),
    "TOLLGATE_MAX_BODY_BYTES": (int, 1_048_576),
    "TOLLGATE_MAX_ROUTE": (int, 2),
    "TOLLGATE_IMAGE_TOKENS_BOUND": (int, 1_600),
    "TOLLGATE_AUTH_CACHE_TTL_S": (int, 300),
    "TOLLGATE_AUTH_FAIL_PER_MIN": (int, 60),
    "TOLLGATE_RATE_EPOCH_S": (int, 0),
    "TOLLGATE_CONFIG_RELOAD_S": (int, 30),
    "TOLLGATE_REPLICAS": (int, 1),
    "TOLLGATE_INFLIGHT_MAX": (int, 1000),
    "TOLLGATE_WEB_INFLIGHT_MAX": (int, 100),
    "TOLLGATE_REDIS_TIMEOUT_MS": (int, 250),
    "TOLLGATE_BREAKER_FAILURES": (int, 5),
    "TOLLGATE_BREAKER_COOLDOWN_S": (int, 30),
    "TOLLGATE_ESCROW_MARGIN_PCT": (int, 120),
    "TOLLGATE_RESERVATION_TTL_S": (int, 300),
    "TOLLGATE_REQUEST_DEADLINE_S": (int, 240),
    "TOLLGATE_USAGE_WINDOW_S": (int, 60),
    "TOLLGATE_USAGE_SINK_URL": (str, ""),
    "TOLLGATE_USAGE_SINK_SECRET": (str, ""),
    "TOLLGATE_USAGE_GRACE_S": (int, 30),
    "TOLLGATE_USAGE_FLUSH_MS": (int, 500),
    "TOLLGATE_USAGE_CLAIM_IDLE_MS": (int, 15_000),
    "TOLLGATE_USAGE_RETENTION_DAYS": (int, 0),
    "TOLLGATE_BILLING_STATE_RETENTION_DAYS": (int, 7),
    "TOLLGATE_RECEIPT_RETENTION_DAYS": (int, 0),
    "TOLLGATE_ARCHIVE_DIR": (str, ""),
    "TOLLGATE_BUDGET_ROLL_S": (int, 60),
    "TOLLGATE_BUDGET_ALERTS_S": (int, 10),
    # Tenant alerts (alerts/): how often beat evaluates the rules and sends what is due, and
    # the first retry's wait (doubling after each failed try, at most an hour).
    "TOLLGATE_ALERTS_S": (int, 30),
    "TOLLGATE_ALERT_RETRY_BASE_S": (int, 30),
    # Django's email (tenant alert emails): the SMTP server and the sender (docs/production.md).
    "EMAIL_HOST": (str, "localhost"),
    "EMAIL_PORT": (int, 25),
    "EMAIL_HOST_USER": (str, ""),
    "EMAIL_HOST_PASSWORD": (str, ""),
    "EMAIL_USE_TLS": (bool, False),
    "EMAIL_USE_SSL": (bool, False),
    "EMAIL_TIMEOUT": (int, 10),
    "DEFAULT_FROM_EMAIL": (str, "tollgate@localhost"),
    "TOLLGATE_CALLER_KEY": (str, ""),
    "TOLLGATE_CALLER_WINDOW": (str, "month"),
    "TOLLGATE_LOG_LEVEL": (str, "INFO"),
    "TOLLGATE_IDEMPOTENCY_TTL_S": (int, 86_400),
    "TOLLGATE_IDEMPOTENCY_MAX_BYTES": (int, 4_194_304),
    "TOLLGATE_CACHE_REDIS_URL": (str, ""),
    "TOLLGATE_CACHE_MAX_ENTRY_BYTES": (int, 1_048_576),
    "TOLLGATE_CACHE_MEMORY_MB": (int, 64),
    "TOLLGATE_METRICS_DIR": (str, ""),
    "TOLLGATE_METRICS_TOKEN": (str, ""),
    # Web acquisition (webfetch/, gateway/web/).
    "TOLLGATE_WEB_ACTION_TIMEOUT_S": (int, 30),
    "TOLLGATE_WEB_MAX_RESULTS": (int, 10),
    "TOLLGATE_WEB_MAX_REDIRECTS": (int, 5),
    "TOLLGATE_WEB_MAX_BYTES": (int, 5_000_000),
    "TOLLGATE_WEB_MAX_DECOMPRESSED_BYTES": (int, 10_000_000),
    "TOLLGATE_WEB_ALLOW_NETS": (list, []),
    "TOLLGATE_WEB_USER_AGENT": (str, "TollgateFetch/1.0 (+https://tollgate.invalid/bot)"),
    "TOLLGATE_CRAWL_MAX_PAGES": (int, 200),
    "TOLLGATE_CRAWL_MAX_DEPTH": (int, 5),
    "TOLLGATE_CRAWL_HOST_DELAY_MS": (int, 1000),
    "TOLLGATE_CRAWL_LEASE_S": (int, 120),
}
OUR_PREFIXES = ("TOLLGATE_", "GATEWAY_", "WEB_FETCH_")


def _read_environment() -> environ.Env:
    unknown = sorted(
        name for name in os.environ if name.startswith(OUR_PREFIXES) and name not in SCHEME
    )
    if unknown:
        raise ImproperlyConfigured(f"Unknown setting {unknown[0]}: not a Tollgate variable.")
    env = environ.Env(**{name: (kind, default) for name, (kind, default) in SCHEME.items()})
    for name, (kind, _) in SCHEME.items():
        try:
            env(name)
        except (ValueError, TypeError) as exc:
            raise ImproperlyConfigured(
                f"Malformed setting {name}: expected {kind.__name__}."
            ) from exc
    return env


env = _read_environment()

DEBUG = env("DEBUG")
EMBEDDED = not env("DATABASE_URL")
if env("TOLLGATE_VAR_DIR"):
    VAR_DIR = Path(env("TOLLGATE_VAR_DIR"))


def _embedded_secret(filename: str, make: callable) -> str:
    """Return a per-checkout secret kept under var/, created on first use (embedded runs)."""
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    path = VAR_DIR / filename
    if not path.exists():
        path.write_text(make())
        path.chmod(0o600)
    return path.read_text().strip()


def _random_secret() -> str:
    return secrets.token_urlsafe(48)


def _random_sealing_key() -> str:
    return "v1:" + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


SECRET_KEY = env("SECRET_KEY")
if not SECRET_KEY:
    if not EMBEDDED:
        raise ImproperlyConfigured("Missing setting SECRET_KEY: required with DATABASE_URL.")
    SECRET_KEY = _embedded_secret("secret_key", _random_secret)

SEALING_KEYS = env("SEALING_KEYS")
if not SEALING_KEYS:
    if not EMBEDDED:
        raise ImproperlyConfigured("Missing setting SEALING_KEYS: required with DATABASE_URL.")
    SEALING_KEYS = _embedded_secret("sealing_keys", _random_sealing_key)
_parse_keyring(SEALING_KEYS)  # a malformed master key stops the process here

# Caller governance is on by default: embedded runs mint a per-checkout caller key; a
# production deployment names one, or says `off` to run without caller labels on purpose.
CALLER_KEY = env("TOLLGATE_CALLER_KEY")
if not CALLER_KEY:
    if not EMBEDDED:
        raise ImproperlyConfigured(
            "Missing setting TOLLGATE_CALLER_KEY: required with DATABASE_URL (caller labels,"
            " per-caller budgets and limits); set it to 'off' to run without them."
        )
    CALLER_KEY = _embedded_secret("caller_key", _random_secret)
elif CALLER_KEY == "off":
    CALLER_KEY = ""


def _random_receipt_key() -> str:
    return "r1:" + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


# The Ed25519 keys receipts are signed with (billing/receipts.py), newest first.
RECEIPT_KEYS = env("TOLLGATE_RECEIPT_KEYS")
if not RECEIPT_KEYS:
    if not EMBEDDED:
        raise ImproperlyConfigured(
            "Missing setting TOLLGATE_RECEIPT_KEYS: required with DATABASE_URL (receipts are"
            " signed with it)."
        )
    RECEIPT_KEYS = _embedded_secret("receipt_keys", _random_receipt_key)
_parse_receipt_keys(RECEIPT_KEYS)  # a malformed signing key stops the process here

GATEWAY_INTERNAL_TOKEN = env("GATEWAY_INTERNAL_TOKEN")
if GATEWAY_INTERNAL_TOKEN and len(GATEWAY_INTERNAL_TOKEN) < 32:
    raise ImproperlyConfigured(
        "Malformed setting GATEWAY_INTERNAL_TOKEN: it must be at least 32 characters."
    )

# Web acquisition's internal routes (/internal/scrape, search, crawl, jobs) take their own
# token, the seed's WEB_FETCH_INTERNAL_TOKEN, or its legacy alias WEB_FETCH_TOKEN (both
# accepted: a rotation keeps the old one in the alias); never GATEWAY_INTERNAL_TOKEN, which
# opens the model routes only. Neither set: those routes refuse.
WEB_FETCH_INTERNAL_TOKENS = tuple(
    token for token in (env("WEB_FETCH_INTERNAL_TOKEN"), env("WEB_FETCH_TOKEN")) if token
)
for _name in ("WEB_FETCH_INTERNAL_TOKEN", "WEB_FETCH_TOKEN"):
    if env(_name) and len(env(_name)) < 32:
        raise ImproperlyConfigured(f"Malformed setting {_name}: it must be at least 32 characters.")
    if env(_name) and env(_name) == GATEWAY_INTERNAL_TOKEN:
        raise ImproperlyConfigured(
            f"Malformed setting {_name}: it must differ from GATEWAY_INTERNAL_TOKEN (the model"
            " routes' token), or one token would open both."
        )

ALLOWED_HOSTS = env("ALLOWED_HOSTS")
CSRF_TRUSTED_ORIGINS = env("CSRF_TRUSTED_ORIGINS")

# Production is served over TLS (a reverse proxy terminates it): cookies are Secure unless the
# operator says otherwise (`TOLLGATE_SECURE_COOKIES=false`, a plain-http trial). Embedded
# runs on http://127.0.0.1 and keeps plain cookies.
_secure_cookies = env("TOLLGATE_SECURE_COOKIES").strip().lower()
if _secure_cookies not in ("", "true", "false"):
    raise ImproperlyConfigured("Malformed setting TOLLGATE_SECURE_COOKIES: use true or false.")
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = (
    _secure_cookies == "true" if _secure_cookies else not EMBEDDED
)
SESSION_COOKIE_HTTPONLY = True
# The proxy in front says https in X-Forwarded-Proto; only set this behind one that always
# overwrites that header, or a client could claim https over plain http.
if env("TOLLGATE_BEHIND_TLS_PROXY"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env("TOLLGATE_SSL_REDIRECT")
SECURE_HSTS_SECONDS = env("TOLLGATE_HSTS_SECONDS")
SECURE_HSTS_INCLUDE_SUBDOMAINS = env("TOLLGATE_HSTS_INCLUDE_SUBDOMAINS")
SECURE_HSTS_PRELOAD = env("TOLLGATE_HSTS_PRELOAD")
# Joining browsers' preload list is the domain owner's own submission, not a setting's gap.
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
if SECURE_HSTS_SECONDS < 0:
    raise ImproperlyConfigured("Malformed setting TOLLGATE_HSTS_SECONDS: use >= 0.")

# Where people reach the control plane (dashboard links such as a set-password link).
PUBLIC_URL = env("TOLLGATE_PUBLIC_URL").rstrip("/")
if PUBLIC_URL and not PUBLIC_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(
        "Malformed setting TOLLGATE_PUBLIC_URL: an absolute URL, e.g. https://tollgate.example.com."
    )

# The operators' OpenID provider for the Django admin (sso/operators.py): who may enter is a
# subject in SUBJECTS or a member of GROUP (the groups claim); either makes a superuser.
ADMIN_OIDC = {
    "ISSUER": env("TOLLGATE_ADMIN_OIDC_ISSUER"),
    "CLIENT_ID": env("TOLLGATE_ADMIN_OIDC_CLIENT_ID"),
    "CLIENT_SECRET": env("TOLLGATE_ADMIN_OIDC_CLIENT_SECRET"),
    "NAME": env("TOLLGATE_ADMIN_OIDC_NAME"),
    "SUBJECTS": frozenset(env("TOLLGATE_ADMIN_OIDC_SUBJECTS")),
    "GROUP": env("TOLLGATE_ADMIN_OIDC_GROUP"),
    "GROUPS_CLAIM": env("TOLLGATE_ADMIN_OIDC_GROUPS_CLAIM"),
}
if ADMIN_OIDC["ISSUER"] and not (ADMIN_OIDC["SUBJECTS"] or ADMIN_OIDC["GROUP"]):
    raise ImproperlyConfigured(
        "Missing setting TOLLGATE_ADMIN_OIDC_SUBJECTS or TOLLGATE_ADMIN_OIDC_GROUP: who may"
        " enter the admin through TOLLGATE_ADMIN_OIDC_ISSUER."
    )
SSO_ALLOW_HTTP = env("TOLLGATE_SSO_ALLOW_HTTP")

# The usage journal lives in Redis: without persistence a Redis crash loses measured rows.
# `check` (default) refuses to start on a Redis without AOF; `trusted` skips the check (a
# managed Redis that hides CONFIG but persists); `none` runs without it on purpose.
REDIS_PERSISTENCE = env("TOLLGATE_REDIS_PERSISTENCE")
if REDIS_PERSISTENCE not in ("check", "trusted", "none"):
    raise ImproperlyConfigured(
        "Malformed setting TOLLGATE_REDIS_PERSISTENCE: use check, trusted or none."
    )
REDIS_URL = env("REDIS_URL")
GATEWAY_PTB_ENABLED = env("GATEWAY_PTB_ENABLED")
GATEWAY_BYOK_ENABLED = env("GATEWAY_BYOK_ENABLED")
PROVIDER_PROFILES_JSON = env("PROVIDER_PROFILES_JSON")

TOLLGATE = {
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
    "ARCHIVE_DIR": Path(env("TOLLGATE_ARCHIVE_DIR") or VAR_DIR / "archives"),
    # How often beat rolls the budget periods nothing charged since they ended, and sends the
    # spend alerts settlement raised.
    "BUDGET_ROLL_S": max(1, env("TOLLGATE_BUDGET_ROLL_S")),
    "BUDGET_ALERTS_S": max(1, env("TOLLGATE_BUDGET_ALERTS_S")),
    "ALERTS_S": max(1, env("TOLLGATE_ALERTS_S")),
    "ALERT_RETRY_BASE_S": max(1, env("TOLLGATE_ALERT_RETRY_BASE_S")),
    "CALLER_KEY": CALLER_KEY,
    "CALLER_WINDOW": env("TOLLGATE_CALLER_WINDOW"),
    # Idempotency-Key records live this long; answers past the cap are served, not stored.
    "IDEMPOTENCY_TTL_S": env("TOLLGATE_IDEMPOTENCY_TTL_S"),
    "IDEMPOTENCY_MAX_BYTES": env("TOLLGATE_IDEMPOTENCY_MAX_BYTES"),
    # The response cache (docs/cache.md): its Redis (empty: REDIS_URL's; none: in process),
    # the largest entry kept (compressed), and the cap on its memory (the in-process store's;
    # a cache Redis of its own is set to it with LRU eviction at start).
    "CACHE_REDIS_URL": env("TOLLGATE_CACHE_REDIS_URL") or REDIS_URL,
    "CACHE_MAX_ENTRY_BYTES": max(1024, env("TOLLGATE_CACHE_MAX_ENTRY_BYTES")),
    "CACHE_MEMORY_MB": max(1, env("TOLLGATE_CACHE_MEMORY_MB")),
    # Where the workers of a multi-process server share their metrics (core/metrics.py).
    "METRICS_DIR": Path(env("TOLLGATE_METRICS_DIR") or VAR_DIR / "metrics"),
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
    min(TOLLGATE["LOGIN_FAILURES"], TOLLGATE["PROXY_HOPS"]) < 0
    or TOLLGATE["LOGIN_CONCURRENCY"] < 1
    or not (1 <= TOLLGATE["LOGIN_LOCKOUT_S"] <= TOLLGATE["LOGIN_LOCKOUT_MAX_S"])
):
    raise ImproperlyConfigured(
        "Malformed setting TOLLGATE_LOGIN_*: failures and proxy hops >= 0, concurrency >= 1, "
        "and 1 <= TOLLGATE_LOGIN_LOCKOUT_S <= TOLLGATE_LOGIN_LOCKOUT_MAX_S."
    )
if TOLLGATE["RESERVATION_TTL_S"] < TOLLGATE["REQUEST_DEADLINE_S"]:
    # A hold must outlive the request it covers, or the reaper frees a live stream's money.
    raise ImproperlyConfigured(
        "Malformed setting TOLLGATE_RESERVATION_TTL_S: it must be at least "
        "TOLLGATE_REQUEST_DEADLINE_S."
    )
if TOLLGATE["IDEMPOTENCY_TTL_S"] < 2 * TOLLGATE["REQUEST_DEADLINE_S"]:
    # A key must outlive the request running it by far, or a duplicate runs it twice.
    raise ImproperlyConfigured(
        "Malformed setting TOLLGATE_IDEMPOTENCY_TTL_S: it must be at least twice "
        "TOLLGATE_REQUEST_DEADLINE_S."
    )
if TOLLGATE["IDEMPOTENCY_MAX_BYTES"] < 1:
    raise ImproperlyConfigured("Malformed setting TOLLGATE_IDEMPOTENCY_MAX_BYTES: use >= 1.")
if TOLLGATE["AUTH_FAIL_PER_MIN"] < 0:
    raise ImproperlyConfigured(
        "Malformed setting TOLLGATE_AUTH_FAIL_PER_MIN: use >= 0 (0 turns the limit off)."
    )
if TOLLGATE["RATE_EPOCH_S"] < 0:
    raise ImproperlyConfigured("Malformed setting TOLLGATE_RATE_EPOCH_S: use >= 0 (Unix seconds).")
if TOLLGATE["MAX_ROUTE"] < 1:
    raise ImproperlyConfigured("Malformed setting TOLLGATE_MAX_ROUTE: use >= 1.")
if TOLLGATE["METRICS_TOKEN"] and len(TOLLGATE["METRICS_TOKEN"]) < 32:
    raise ImproperlyConfigured(
        "Malformed setting TOLLGATE_METRICS_TOKEN: it must be at least 32 characters."
    )
if TOLLGATE["CALLER_WINDOW"] not in ("month", "year"):
    raise ImproperlyConfigured("Malformed setting TOLLGATE_CALLER_WINDOW: use month or year.")
if TOLLGATE["USAGE_WINDOW_S"] < 1 or TOLLGATE["USAGE_GRACE_S"] < 0:
    raise ImproperlyConfigured(
        "Malformed setting TOLLGATE_USAGE_WINDOW_S / TOLLGATE_USAGE_GRACE_S: use >= 1 / >= 0."
    )
try:
    _allowed_networks(TOLLGATE["WEB_ALLOW_NETS"])  # the fetcher's own parse, once at start
except ValueError as exc:
    raise ImproperlyConfigured(f"Malformed setting {exc}") from None
if TOLLGATE["USAGE_SINK_URL"] and not TOLLGATE["USAGE_SINK_SECRET"]:
    raise ImproperlyConfigured(
        "Missing setting TOLLGATE_USAGE_SINK_SECRET: the usage webhook is always signed."
    )

INSTALLED_APPS = [
    "core.admin_site.TollgateAdminConfig",  # Django's admin, branded (core/admin_site.py)
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "audit",
    "accounts",
    "billing",
    "providers",
    "byok",
    "gateway",
    "usage",
    "alerts",
    "guardrails",
    "dashboard",
    "webfetch",
    "sso",
    "scim",
    "stubvendor",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Content-Security-Policy on every response (CONTENT_SECURITY_POLICY below).
    "csp.middleware.CSPMiddleware",
    # Static files before the session and the rest: a stylesheet needs none of them.
    "config.staticfiles.StaticFilesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# The control plane's pages load scripts, styles, fonts and images from themselves only: no
# inline script or style, no framing. The API docs pages widen it for themselves (config/urls.py).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [csp_constants.SELF],
        "script-src": [csp_constants.SELF],
        "style-src": [csp_constants.SELF],
        "img-src": [csp_constants.SELF, "data:"],
        "object-src": [csp_constants.NONE],
        "base-uri": [csp_constants.SELF],
        "form-action": [csp_constants.SELF],
        "frame-ancestors": [csp_constants.NONE],
    },
}

ROOT_URLCONF = "config.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

ASGI_APPLICATION = "config.asgi.application"

if EMBEDDED:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "tollgate.sqlite3",
            # IMMEDIATE: a transaction takes the write lock when it begins, so a second writer
            # waits (up to the timeout) instead of failing "database is locked" on a stale read.
            "OPTIONS": {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL;",
            },
            # A file, not memory, so gateway processes started by the tests share it.
            "TEST": {"NAME": str(VAR_DIR / "test.sqlite3")},
        }
    }
else:
    # DATABASE_URL's role serves; with DATABASE_OWNER_URL set (a migrate), the owner connects
    # and DATABASE_URL names the role it sets up (grant_app_role).
    _connect_as = "DATABASE_OWNER_URL" if env("DATABASE_OWNER_URL") else "DATABASE_URL"
    try:
        DATABASES = {"default": env.db_url_config(env(_connect_as))}
        APP_DATABASE = env.db_url_config(env("DATABASE_URL"))
    except Exception as exc:  # django-environ raises several types for a bad URL
        raise ImproperlyConfigured(f"Malformed setting {_connect_as}.") from exc
    DATABASES["default"]["CONN_MAX_AGE"] = 60
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        DATABASES["default"]["CONN_MAX_AGE"] = 0
        DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# Static files: served by the ASGI process itself (config/staticfiles.py, WhiteNoise) in
# embedded and production modes alike. Found through the finders at start, so there is no
# collectstatic step; STATIC_ROOT is only where `collectstatic` would put them for a proxy.
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
WHITENOISE_USE_FINDERS = True

# The tenant dashboard (dashboard/): its login page, and where a login lands.
LOGIN_URL = "dashboard:login"
LOGIN_REDIRECT_URL = "dashboard:home"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.TenantTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "accounts.api.errors.tenant_exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Tollgate tenant API",
    "VERSION": "1",
    "DESCRIPTION": (
        "Manage a Tollgate tenant: accounts, groups and their budgets, virtual keys, team keys "
        "(BYOK), usage and the wallet. Authenticate with `Authorization: Token <api_token>` "
        "(printed once by `create_tenant`) or a dashboard session. Money is integer micro-USD "
        "(`_micro` fields). Errors share one body: "
        '`{"error": {"message": ..., "type": ..., "code": "LM-xxxx"}}`. '
        "Another account's objects answer 404. The model routes (`/v1/...`) speak the "
        "OpenAI and Anthropic APIs and are documented by those vendors."
    ),
    # The schema route documents the API, not itself.
    "SERVE_INCLUDE_SCHEMA": False,
    # Request bodies are documented as JSON, the one format clients send.
    "PARSER_WHITELIST": ["rest_framework.parsers.JSONParser"],
    "TAGS": [
        {"name": "accounts", "description": "The accounts the caller is a member of."},
        {"name": "groups", "description": "Groups: budgets and rate limits."},
        {"name": "keys", "description": "Virtual keys for the model routes."},
        {"name": "team keys", "description": "Team provider keys (BYOK), under /admin/."},
        {"name": "usage", "description": "Usage rows, totals and the CSV export."},
        {"name": "billing", "description": "Wallet, ledger and group spend."},
        {"name": "receipts", "description": "Signed receipts of every charge, and statements."},
        {"name": "guardrails", "description": "Guardrails and where they are attached."},
    ],
    # Guardrails' kinds: every kind (answers) and the kinds an account defines (requests).
    "ENUM_NAME_OVERRIDES": {
        "GuardrailKindEnum": "guardrails.models.Guardrail.Kind",
        "TenantGuardrailKindEnum": "guardrails.api.serializers.TenantKind",
    },
    # Swagger UI and Redoc from the drf-spectacular-sidecar package: no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# Redis in production; without it a filesystem queue under var/, so `celery -A config worker
# -B` works embedded too. `memory://` (set explicitly) runs tasks inline.
CELERY_BROKER_URL = env("CELERY_BROKER_URL") or REDIS_URL or "filesystem://"
CELERY_TASK_ALWAYS_EAGER = CELERY_BROKER_URL == "memory://"
CELERY_TASK_IGNORE_RESULT = True
if CELERY_BROKER_URL == "filesystem://":
    _celery_queue = VAR_DIR / "celery" / "queue"
    _celery_queue.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_celery_queue),
        "data_folder_out": str(_celery_queue),
        "store_processed": False,
        "control_folder": str(VAR_DIR / "celery" / "control"),
    }
# Where beat keeps its last-run times; the scheduler (config/celery.py) creates the
# directory when beat starts, so a fresh production checkout with no var/ starts too.
CELERY_BEAT_SCHEDULE_FILENAME = env("TOLLGATE_BEAT_SCHEDULE") or str(
    VAR_DIR / "celerybeat-schedule"
)
CELERY_BEAT_SCHEDULER = "config.celery:BeatScheduler"
# Each task is a thin interface to a service; every one is safe to run twice or concurrently.
CELERY_BEAT_SCHEDULE: dict = {
    "usage-flush-events": {
        "task": "usage.flush_events",
        "schedule": float(TOLLGATE["USAGE_WINDOW_S"]),
    },
    "billing-reconcile-bandwidth": {
        "task": "billing.reconcile_bandwidth",
        "schedule": float(TOLLGATE["USAGE_WINDOW_S"]),
    },
    # Closed days' rollups against their rows: one day's work at most once a day, so hourly.
    "usage-reconcile-rollups": {"task": "usage.reconcile_rollups", "schedule": 3600.0},
    # The usage log's monthly partitions (PostgreSQL), made ahead of the rows that need them;
    # retention drops whole months past TOLLGATE_USAGE_RETENTION_DAYS (0: never).
    "usage-ensure-partitions": {"task": "usage.ensure_partitions", "schedule": 6 * 3600.0},
    "usage-apply-retention": {"task": "usage.apply_retention", "schedule": 3600.0},
    # The per-request billing tables' partitions (PostgreSQL: slices of months), made ahead
    # the same way; retention drops closed working state past
    # TOLLGATE_BILLING_STATE_RETENTION_DAYS (never under 7).
    "billing-ensure-partitions": {"task": "billing.ensure_partitions", "schedule": 6 * 3600.0},
    "billing-apply-retention": {"task": "billing.apply_retention", "schedule": 3600.0},
    # Receipts past TOLLGATE_RECEIPT_RETENTION_DAYS (0: never) archived a month at a time.
    "billing-archive-receipts": {"task": "billing.archive_receipts", "schedule": 3600.0},
    "usage-drain-journal": {
        "task": "usage.drain_journal",
        "schedule": max(1.0, TOLLGATE["USAGE_CLAIM_IDLE_MS"] / 1000),
    },
    # Budget periods end at midnight in each account's zone; rows nothing charged since are
    # rolled within this lag (a hold reads an ended period as fresh anyway; settle rolls first).
    "billing-roll-periods": {
        "task": "billing.roll_periods",
        "schedule": float(TOLLGATE["BUDGET_ROLL_S"]),
    },
    "billing-deliver-budget-alerts": {
        "task": "billing.deliver_budget_alerts",
        "schedule": float(TOLLGATE["BUDGET_ALERTS_S"]),
    },
    # Tenant alerts: evaluate the rules against the counters, then send what is due.
    "alerts-run": {"task": "alerts.run", "schedule": float(TOLLGATE["ALERTS_S"])},
    "billing-expire-stale-holds": {
        "task": "billing.expire_stale_holds",
        "schedule": float(min(60, TOLLGATE["RESERVATION_TTL_S"])),
    },
    # Crawl jobs are handed to a worker when queued; this picks up a lost hand-off and the
    # jobs of a worker that died (their lease lapsed).
    "webfetch-run-crawls": {
        "task": "webfetch.run_crawls",
        "schedule": float(max(5, TOLLGATE["CRAWL_LEASE_S"] // 2)),
    },
}

# Tenant alert emails go through Django's SMTP backend (docs/production.md, "Email").
EMAIL_HOST = env("EMAIL_HOST")
EMAIL_PORT = env("EMAIL_PORT")
EMAIL_HOST_USER = env("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env("EMAIL_USE_TLS")
EMAIL_USE_SSL = env("EMAIL_USE_SSL")
EMAIL_TIMEOUT = env("EMAIL_TIMEOUT")
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL")
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    raise ImproperlyConfigured("EMAIL_USE_TLS and EMAIL_USE_SSL exclude each other: set one.")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    # Refused requests (403, 404, CSRF, a disallowed Host) are one line each (config/logs.py).
    "filters": {"refusals": {"()": "config.logs.OneLineRefusals"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["refusals"],
        }
    },
    "root": {"handlers": ["console"], "level": env("TOLLGATE_LOG_LEVEL")},
    # trafilatura logs what it discards with the page's URL: tenants' data, not ours to log.
    "loggers": {"django": {"level": "WARNING"}, "trafilatura": {"level": "ERROR"}},
}
