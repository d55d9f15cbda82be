"""Settings, read from the environment through django-environ.

Every variable has an embedded default so a first run needs none of them (SQLite, no Redis,
Celery on a local transport). In production set DATABASE_URL and REDIS_URL. A variable that
is unknown (our prefixes only) or malformed stops the process at start with its name.

Beside this module: config/settings_environment.py (every variable, its type and default:
SCHEME), config/settings_tollgate.py (the TOLLGATE dict and its checks) and
config/settings_beat.py (CELERY_BEAT_SCHEDULE).
"""

from __future__ import annotations

import base64
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from csp import constants as csp_constants
from django.core.exceptions import ImproperlyConfigured

from config.settings_beat import beat_schedule
from config.settings_environment import read_environment
from config.settings_tollgate import tollgate_settings
from core.sealing import parse_keyring as _parse_keyring
from core.signing import parse_receipt_keys as _parse_receipt_keys

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("TOLLGATE_VAR_DIR", BASE_DIR / "var"))

env = read_environment()

DEBUG = env("DEBUG")
EMBEDDED = not env("DATABASE_URL")
if env("TOLLGATE_VAR_DIR"):
    VAR_DIR = Path(env("TOLLGATE_VAR_DIR"))


def _embedded_secret(filename: str, make: Callable[[], str]) -> str:
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

TOLLGATE = tollgate_settings(env, var_dir=VAR_DIR, caller_key=CALLER_KEY, redis_url=REDIS_URL)

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
CELERY_BEAT_SCHEDULE = beat_schedule(TOLLGATE)

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
