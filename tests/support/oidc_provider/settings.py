"""A real OpenID provider for the single sign-on tests: django-oauth-toolkit's, in a small
project of its own (its own process, port, SQLite file and RSA key).

OP_DIR holds its files (config.json, written by the test; the database); OP_PORT its port.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

OP_DIR = Path(os.environ["OP_DIR"])
PORT = int(os.environ["OP_PORT"])
ISSUER = f"http://127.0.0.1:{PORT}/o"

SECRET_KEY = "test-provider-only-" + os.urandom(8).hex()
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "oidc_provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
            ]
        },
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": OP_DIR / "op.sqlite3"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
# Browsers share cookies across ports of one host: the provider's never clobber Tollgate's.
SESSION_COOKIE_NAME = "op_session"
CSRF_COOKIE_NAME = "op_csrftoken"
LOGIN_URL = "/accounts/login/"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # a test's speed

_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_ISS_ENDPOINT": ISSUER,
    "OIDC_RSA_PRIVATE_KEY": _key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode(),
    "PKCE_REQUIRED": True,
    "SCOPES": {"openid": "OpenID Connect", "email": "Email", "profile": "Profile"},
    "OAUTH2_VALIDATOR_CLASS": "oidc_provider.validator.Validator",
}
