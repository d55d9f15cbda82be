"""Every environment variable Tollgate reads (SCHEME), and the reader that checks them.

config/settings.py reads the environment once through read_environment(): a variable with
one of our prefixes that SCHEME does not name, or a value of the wrong type, stops the
process at start with its name.
"""

from __future__ import annotations

import os

import environ
from django.core.exceptions import ImproperlyConfigured

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


def read_environment() -> environ.Env:
    """Return the environment reader, after checking every variable's name and type."""
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
