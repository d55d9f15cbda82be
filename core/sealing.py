"""Seal secrets at rest: AES-GCM under a versioned master key, bound to the row they live in.

SEALING_KEYS lists master keys newest first as `version:base64url(32 bytes)`, comma
separated. New seals use the newest; any listed version still opens. The associated data
names the row (e.g. group, provider and key id), so a ciphertext copied to another row fails.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass
from functools import cache

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

NONCE_BYTES = 12


class SealBroken(Exception):
    """A sealed value did not open: wrong row, unknown version or tampered bytes."""


@dataclass(frozen=True)
class Keyring:
    newest: str
    keys: dict[str, AESGCM]


def parse_keyring(spec: str) -> Keyring:
    """Parse SEALING_KEYS, refusing anything malformed with a message naming the variable."""
    keys: dict[str, AESGCM] = {}
    order: list[str] = []
    for part in (p.strip() for p in spec.split(",")):
        version, sep, encoded = part.partition(":")
        if not sep or not version or not encoded:
            raise ImproperlyConfigured("Malformed setting SEALING_KEYS: use 'v2:<base64>,v1:...'.")
        try:
            raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        except (binascii.Error, ValueError):
            raise ImproperlyConfigured(
                f"Malformed setting SEALING_KEYS: version {version} is not base64."
            ) from None
        if len(raw) != 32:
            raise ImproperlyConfigured(
                f"Malformed setting SEALING_KEYS: version {version} must decode to 32 bytes."
            )
        if version in keys:
            raise ImproperlyConfigured(f"Malformed setting SEALING_KEYS: {version} repeated.")
        keys[version] = AESGCM(raw)
        order.append(version)
    if not order:
        raise ImproperlyConfigured("Missing setting SEALING_KEYS.")
    return Keyring(newest=order[0], keys=keys)


@cache
def keyring() -> Keyring:
    return parse_keyring(settings.SEALING_KEYS)


def seal(plaintext: str, *, bound_to: str) -> tuple[bytes, str]:
    """Return (sealed bytes, key version) for a secret bound to the row named `bound_to`."""
    ring = keyring()
    nonce = os.urandom(NONCE_BYTES)
    sealed = nonce + ring.keys[ring.newest].encrypt(nonce, plaintext.encode(), bound_to.encode())
    return sealed, ring.newest


def unseal(sealed: bytes | memoryview, *, version: str, bound_to: str) -> str:
    """Open a sealed secret; raise SealBroken if it does not belong to `bound_to`."""
    key = keyring().keys.get(version)
    if key is None:
        raise SealBroken(f"sealing key version {version} is not configured")
    sealed = bytes(sealed)
    try:
        plain = key.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], bound_to.encode())
    except InvalidTag:
        raise SealBroken("sealed value does not open for this row") from None
    return plain.decode()
