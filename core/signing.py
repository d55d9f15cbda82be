"""The operator's signing keys (TOLLGATE_RECEIPT_KEYS): receipts, statements and the signed
heads of the receipt and audit chains; apart from them so the settings can check the keys
before Django's apps load.

Ed25519 private keys, newest first, as `id:base64url(32-byte seed)`, comma separated: new
receipts are signed with the newest; every listed key's public part is published, so receipts
signed before a rotation still verify.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from functools import cache

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class ReceiptKeys:
    newest: str
    private: dict[str, Ed25519PrivateKey] = field(repr=False)

    def public(self) -> dict[str, str]:
        """Each key's public part: base64url of its 32 raw bytes."""
        return {key_id: public_key_text(key.public_key()) for key_id, key in self.private.items()}


def public_key_text(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_receipt_keys(spec: str) -> ReceiptKeys:
    """Parse TOLLGATE_RECEIPT_KEYS, refusing anything malformed with the variable's name."""
    name = "TOLLGATE_RECEIPT_KEYS"
    private: dict[str, Ed25519PrivateKey] = {}
    order: list[str] = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        key_id, sep, encoded = part.partition(":")
        if not sep or not key_id or not encoded:
            raise ImproperlyConfigured(f"Malformed setting {name}: use 'r2:<base64>,r1:...'.")
        try:
            seed = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        except (binascii.Error, ValueError):
            raise ImproperlyConfigured(
                f"Malformed setting {name}: {key_id} is not base64."
            ) from None
        if len(seed) != 32:
            raise ImproperlyConfigured(
                f"Malformed setting {name}: {key_id} must decode to 32 bytes."
            )
        if key_id in private:
            raise ImproperlyConfigured(f"Malformed setting {name}: {key_id} repeated.")
        private[key_id] = Ed25519PrivateKey.from_private_bytes(seed)
        order.append(key_id)
    if not order:
        raise ImproperlyConfigured(f"Missing setting {name}.")
    return ReceiptKeys(newest=order[0], private=private)


@cache
def receipt_keys() -> ReceiptKeys:
    return parse_receipt_keys(settings.RECEIPT_KEYS)
