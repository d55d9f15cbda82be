"""Google service accounts for tests: a fresh RSA key as the JSON key Google hands out, its
token endpoint at the stub, and its public key registered there (so the stub checks the
assertion's signature)."""

from __future__ import annotations

import json
import uuid

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

TOKEN_PATH = "/_stub/google/token"


def service_account_key(stub_url: str, *, register: bool = True, lifetime_s: int = 3600) -> dict:
    """Return a new service account's JSON key (as a dict) whose token_uri is the stub's;
    its public key is registered at the stub unless `register` is false."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    email = f"sa-{uuid.uuid4().hex[:10]}@tollgate-test.iam.gserviceaccount.com"
    info = {
        "type": "service_account",
        "project_id": "tollgate-test",
        "private_key_id": uuid.uuid4().hex,
        "private_key": private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
        "client_email": email,
        "client_id": str(uuid.uuid4().int)[:21],
        "token_uri": f"{stub_url}{TOKEN_PATH}",
    }
    if register:
        public = private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        response = httpx.post(
            f"{stub_url}/_stub/google/keys",
            json={
                "client_email": email,
                "public_key": public.decode(),
                "token_lifetime_s": lifetime_s,
            },
        )
        response.raise_for_status()
    return info


def key_text(info: dict) -> str:
    """Return the key as the platform key holds it: the whole JSON text."""
    return json.dumps(info, indent=2)
