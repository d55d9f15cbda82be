"""Mint and hash the secrets Tollgate hands out (virtual keys, tenant tokens)."""

from __future__ import annotations

import hashlib
import secrets

VIRTUAL_KEY_PREFIX = "tg-"
TENANT_TOKEN_PREFIX = "tgt_"


def hash_secret(secret: str) -> str:
    """Return the SHA-256 hex digest we store in place of a secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


def mint_secret(prefix: str) -> tuple[str, str, str]:
    """Return (secret, its hash, a short display prefix)."""
    secret = prefix + secrets.token_urlsafe(32)
    return secret, hash_secret(secret), secret[: len(prefix) + 6]
