"""The stub's Google OAuth: the token endpoint Vertex AI calls need, and the public keys
tests register for it (routes dispatched from stubvendor/gemini.py's ``google_vendor``).

* ``POST /_stub/google/token``: the OAuth 2.0 JWT-bearer grant
  (``application/x-www-form-urlencoded``: ``grant_type=urn:ietf:params:oauth:
  grant-type:jwt-bearer`` and ``assertion=<JWT>``), as google-auth's service
  account credentials call it.  The assertion must be a JWT with ``alg: RS256``
  whose claims name ``iss`` (the service account), an ``aud`` of Google's token URL
  (``https://oauth2.googleapis.com/token``, which google-auth always writes) or
  this route's own URL, a ``scope``, and an ``exp`` in the future.  When a test
  registered a public key for that ``iss`` (below), the RS256 signature must
  verify against it; without one, only the claims are checked.  Answers
  ``{"access_token": "ya29.stub-<n>-<hex>", "expires_in": <lifetime>,
  "token_type": "Bearer"}`` (lifetime 3600 s, or the one registered); refusals
  are OAuth's ``{"error": "invalid_grant" | "unsupported_grant_type" |
  "invalid_request", "error_description"}`` with status 400.  Recorded with
  ``shape: "google-token"``, ``model: null``, ``key`` the ``iss`` (so it is not
  a vendor call), ``body`` the grant's fields.  Not subject to faults (a fault
  meant for a Vertex call is never consumed by the token it needs first).
* ``POST /_stub/google/keys`` ``{"client_email", "public_key": <PEM>,
  "token_lifetime_s"?}``: register a service account's public key (and the
  lifetime of the tokens it gets) -> ``{"registered": <client_email>}``.  Issued
  tokens and registered keys outlive ``DELETE /_stub/calls`` (a gateway keeps
  its token); the prompt caches do not.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import secrets
import time
from typing import Any
from urllib.parse import parse_qs

import orjson
from aiohttp import web

from stubvendor.state import STATE, StubState
from stubvendor.vendor import read_body
from stubvendor.wire import _answer, _json

TOKEN_PATH = "/_stub/google/token"
KEYS_PATH = "/_stub/google/keys"
GOOGLE_TOKEN_URL = "https://oauth2.googleapis.com/token"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_LIFETIME_S = 3600


_token_numbers = itertools.count(1)


def _b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _oauth_error(error: str, description: str) -> web.Response:
    return _json(400, {"error": error, "error_description": description})


def _check_assertion(state: StubState, assertion: str, own_url: str) -> dict[str, Any] | str:
    """Return the claims of a valid JWT-bearer assertion, or why it is refused."""
    pieces = assertion.split(".")
    if len(pieces) != 3:
        return "The assertion is not a JWT."
    try:
        header = orjson.loads(_b64url(pieces[0]))
        claims = orjson.loads(_b64url(pieces[1]))
        signature = _b64url(pieces[2])
    except (ValueError, binascii.Error):
        return "The assertion is not a JWT."
    if not isinstance(header, dict) or header.get("alg") != "RS256":
        return "The assertion must be signed with RS256."
    if not isinstance(claims, dict) or not isinstance(claims.get("iss"), str):
        return "The assertion names no issuer (iss)."
    if claims.get("aud") not in (GOOGLE_TOKEN_URL, own_url):
        return f"Invalid JWT: the audience must be {GOOGLE_TOKEN_URL}."
    if not isinstance(claims.get("scope"), str) or not claims["scope"]:
        return "Invalid JWT: no scope."
    exp = claims.get("exp")
    if not isinstance(exp, int | float) or exp <= time.time():
        return "Invalid JWT: Token must be a short-lived token and in a reasonable timeframe."
    registered = state.google_keys.get(claims["iss"])
    if registered is not None and not _signature_valid(
        registered["public_key"], f"{pieces[0]}.{pieces[1]}".encode(), signature
    ):
        return "Invalid JWT Signature."
    return claims


def _signature_valid(public_pem: str, signed: bytes, signature: bytes) -> bool:
    # Imported here: only a test that registers a key needs cryptography.
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    key = serialization.load_pem_public_key(public_pem.encode())
    if not isinstance(key, rsa.RSAPublicKey):
        return False
    try:
        key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        return False
    return True


async def issue_token(request: web.Request) -> web.Response:
    """Answer the JWT-bearer grant with an access token (the module docstring)."""
    state = request.app[STATE]
    form = {
        name: values[0]
        for name, values in parse_qs((await request.read()).decode(errors="replace")).items()
    }
    claims: dict[str, Any] | str
    if form.get("grant_type") != JWT_BEARER:
        claims = "unsupported_grant_type"
    else:
        own_url = str(request.url.with_query(None))
        claims = _check_assertion(state, form.get("assertion", ""), own_url)
    issuer = claims.get("iss") if isinstance(claims, dict) else None
    call = state.record(
        body=form,
        path=request.path,
        shape="google-token",
        model=None,
        key=issuer,
        stream=False,
        user=None,
        max_tokens=None,
    )
    if claims == "unsupported_grant_type":
        return _answer(call, _oauth_error("unsupported_grant_type", "Invalid grant_type."))
    if isinstance(claims, str):
        return _answer(call, _oauth_error("invalid_grant", claims))
    lifetime = state.google_keys.get(claims["iss"], {}).get("lifetime_s", TOKEN_LIFETIME_S)
    token = f"ya29.stub-{next(_token_numbers)}-{secrets.token_hex(8)}"
    state.google_tokens[token] = (claims["iss"], time.time() + lifetime)
    answer = {"access_token": token, "expires_in": lifetime, "token_type": "Bearer"}
    return _answer(call, _json(200, answer))


async def register_key(request: web.Request) -> web.Response:
    """Register a service account's public key (and its tokens' lifetime)."""
    _, body = await read_body(request)
    if not isinstance(body, dict):
        return _json(400, {"error": "body must be a JSON object"})
    email, pem = body.get("client_email"), body.get("public_key")
    lifetime = body.get("token_lifetime_s", TOKEN_LIFETIME_S)
    if not isinstance(email, str) or not isinstance(pem, str):
        return _json(400, {"error": "client_email and public_key (PEM) are required"})
    if not isinstance(lifetime, int) or isinstance(lifetime, bool) or lifetime < 1:
        return _json(400, {"error": "token_lifetime_s must be a positive integer"})
    request.app[STATE].google_keys[email] = {"public_key": pem, "lifetime_s": lifetime}
    return _json(200, {"registered": email})
