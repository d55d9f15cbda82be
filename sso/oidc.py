"""The relying party's protocol steps: discovery, the authorization request (code with PKCE
S256, state and nonce), the code exchange, and the ID token's validation.

Authlib supplies the protocol rules: the PKCE challenge and the ID token's claims checks
(iss, aud, exp, iat, nonce, azp, at_hash, from OpenID Connect Core 3.1.3.7); joserfc, its
JOSE layer, verifies the signature against the provider's published keys (JWKS). The three
HTTP calls are ours, with httpx and short timeouts, so one code path serves every account's
provider, read from the database per sign-in (a library bound to one provider in settings
could not).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from authlib.common.security import generate_token
from authlib.common.urls import add_params_to_uri
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from authlib.oidc.core import CodeIDToken
from django.conf import settings
from joserfc import jwt
from joserfc.errors import ExpiredTokenError, InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet

from webfetch.addresses import HostRefused, allowed_networks
from webfetch.checked_http import checked_request

# The provider's metadata and keys are kept this long, for this many issuers (oldest out).
CACHE_TTL_S = 3600
CACHE_MAX = 256
HTTP_TIMEOUT_S = 5.0
# Clocks differ a little between us and the provider: this much, no more.
LEEWAY_S = 60
SCOPES = "openid email profile"
SUB_MAX = 255  # OpenID Connect Core 2: a subject is at most 255 ASCII characters
EMAIL_MAX = 254
# Asymmetric only: a shared-secret (HS256) token would be signed with the client secret.
SIGNING_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384")


class SignInRefused(Exception):
    """The sign-in did not prove who the person is, or they may not enter: say why."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason  # a stable word for logs and tests: "aud", "expired", "code"...


@dataclass(frozen=True)
class Client:
    """One registration at a provider, and where the provider sends people back."""

    issuer: str
    client_id: str
    client_secret: str
    redirect_uri: str
    # An account's provider is the tenant's to name: its URLs must reach public addresses
    # only. The operators' own (from settings) may live on their network.
    operator: bool = False


@dataclass(frozen=True)
class Pending:
    """A started sign-in's secrets, kept in the browser's session until it comes back."""

    state: str
    nonce: str
    code_verifier: str

    @classmethod
    def fresh(cls) -> Pending:
        return cls(
            state=generate_token(32), nonce=generate_token(32), code_verifier=generate_token(64)
        )


class _Bounded:
    """A small LRU with an age limit, shared by the threads of one process."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, tuple[float, dict]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> dict | None:
        with self._lock:
            item = self._items.get(key)
            if item is None or item[0] < time.monotonic():
                self._items.pop(key, None)
                return None
            self._items.move_to_end(key)
            return item[1]

    def put(self, key: str, value: dict) -> None:
        with self._lock:
            self._items[key] = (time.monotonic() + CACHE_TTL_S, value)
            self._items.move_to_end(key)
            while len(self._items) > CACHE_MAX:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


_metadata = _Bounded()
_jwks = _Bounded()


def check_issuer(issuer: str) -> str | None:
    """Return why `issuer` cannot be a provider's issuer (None: it can)."""
    parts = urlsplit(issuer)
    if parts.scheme == "http" and settings.SSO_ALLOW_HTTP:
        pass  # the operator's explicit choice (TOLLGATE_SSO_ALLOW_HTTP): a test provider
    elif parts.scheme != "https":
        return "An issuer is an https:// URL."
    if not parts.netloc or parts.query or parts.fragment:
        return "An issuer is a URL without query or fragment, e.g. https://example.okta.com."
    return None


def _call(method: str, url: str, *, operator: bool, **options: Any) -> httpx.Response:
    """Call a provider's URL. A tenant's provider is called only at an address that is
    globally reachable (not loopback, private, link-local, cloud metadata...) unless inside
    TOLLGATE_WEB_ALLOW_NETS, and only at the address checked (webfetch/checked_http.py): a
    tenant's issuer never makes the control plane call into the operator's own network. An
    operator's provider is called as configured."""
    if operator:
        return httpx.request(method, url, timeout=HTTP_TIMEOUT_S, follow_redirects=False, **options)
    allow = allowed_networks(settings.TOLLGATE["WEB_ALLOW_NETS"])
    try:
        return checked_request(method, url, allow=allow, timeout_s=HTTP_TIMEOUT_S, **options)
    except HostRefused as refused:
        raise SignInRefused(f"The provider's {refused}.", reason="address") from None


def _get_json(url: str, *, what: str, operator: bool = False) -> dict:
    try:
        response = _call("GET", url, operator=operator)
    except httpx.HTTPError:
        raise SignInRefused(
            f"The provider's {what} could not be read.", reason="discovery"
        ) from None
    if response.status_code != 200:
        raise SignInRefused(
            f"The provider's {what} answered {response.status_code}.", reason="discovery"
        )
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise SignInRefused(f"The provider's {what} is not JSON.", reason="discovery")
    return body


def metadata(issuer: str, *, operator: bool = False) -> dict:
    """Return the issuer's discovery document (/.well-known/openid-configuration), cached."""
    found = _metadata.get(issuer)
    if found is not None:
        return found
    if why := check_issuer(issuer):
        raise SignInRefused(why, reason="discovery")
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    body = _get_json(url, what="discovery document", operator=operator)
    # Discovery 4.3: the document must name exactly the issuer it was fetched for.
    if body.get("issuer") != issuer:
        raise SignInRefused("The provider's discovery names another issuer.", reason="discovery")
    for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        if not isinstance(body.get(name), str):
            raise SignInRefused(f"The provider's discovery lacks {name}.", reason="discovery")
    _metadata.put(issuer, body)
    return body


def _key_set(jwks_uri: str, *, operator: bool, fresh: bool = False) -> KeySet:
    found = None if fresh else _jwks.get(jwks_uri)
    if found is None:
        found = _get_json(jwks_uri, what="signing keys", operator=operator)
        _jwks.put(jwks_uri, found)
    try:
        return KeySet.import_key_set(found)  # type: ignore[arg-type]
    except (JoseError, ValueError, KeyError, TypeError):
        raise SignInRefused("The provider's signing keys are unreadable.", reason="jwks") from None


def authorization_url(client: Client, pending: Pending) -> str:
    """Return where to send the browser: the provider's sign-in, for this pending sign-in."""
    found = metadata(client.issuer, operator=client.operator)
    params = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": client.redirect_uri,
        "scope": SCOPES,
        "state": pending.state,
        "nonce": pending.nonce,
        "code_challenge": create_s256_code_challenge(pending.code_verifier),
        "code_challenge_method": "S256",
    }
    return add_params_to_uri(found["authorization_endpoint"], params)


def exchange(client: Client, *, code: str, pending: Pending) -> dict[str, Any]:
    """Trade the code for tokens at the provider and return the ID token's validated claims."""
    found = metadata(client.issuer, operator=client.operator)
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": client.redirect_uri,
        "code_verifier": pending.code_verifier,
    }
    methods = found.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
    auth = None
    if "client_secret_basic" in methods:
        auth = httpx.BasicAuth(client.client_id, client.client_secret)
    else:
        form.update(client_id=client.client_id, client_secret=client.client_secret)
    try:
        response = _call(
            "POST", found["token_endpoint"], operator=client.operator, data=form, auth=auth
        )
    except httpx.HTTPError:
        raise SignInRefused("The provider could not be reached.", reason="token") from None
    if response.status_code != 200:
        # invalid_grant: a code used already (replayed), expired, or not this verifier's.
        raise SignInRefused(
            "The provider refused the sign-in code: it was used already or has expired."
            " Start again.",
            reason="code",
        )
    try:
        tokens = response.json()
    except ValueError:
        tokens = {}
    if not isinstance(tokens, dict) or not isinstance(tokens.get("id_token"), str):
        raise SignInRefused("The provider sent no ID token.", reason="token")
    return validate_id_token(
        client, tokens["id_token"], nonce=pending.nonce, access_token=tokens.get("access_token")
    )


def validate_id_token(
    client: Client, id_token: str, *, nonce: str, access_token: str | None = None
) -> dict[str, Any]:
    """Return the claims of an ID token signed by the issuer's keys, for this client, not
    expired, carrying this sign-in's nonce; refuse anything else."""
    found = metadata(client.issuer, operator=client.operator)
    offered = found.get("id_token_signing_alg_values_supported") or ["RS256"]
    algorithms = [alg for alg in offered if alg in SIGNING_ALGORITHMS] or ["RS256"]
    try:
        try:
            token = jwt.decode(
                id_token,
                _key_set(found["jwks_uri"], operator=client.operator),
                algorithms=algorithms,
            )
        except InvalidKeyIdError:  # the provider rotated its keys since we read them
            token = jwt.decode(
                id_token,
                _key_set(found["jwks_uri"], operator=client.operator, fresh=True),
                algorithms=algorithms,
            )
    except JoseError:
        raise SignInRefused(
            "The ID token's signature does not verify.", reason="signature"
        ) from None
    options = {
        "iss": {"essential": True, "value": client.issuer},
        "aud": {"essential": True, "value": client.client_id},
        "sub": {"essential": True},
    }
    params = {"nonce": nonce, "client_id": client.client_id}
    if access_token:
        params["access_token"] = access_token
    claims = CodeIDToken(token.claims, token.header, options, params)
    try:
        claims.validate(now=int(time.time()), leeway=LEEWAY_S)
    except ExpiredTokenError:
        raise SignInRefused("The ID token has expired. Start again.", reason="expired") from None
    except JoseError as exc:
        claim = getattr(exc, "claim", "") or ""
        raise SignInRefused(
            f"The ID token is not for this sign-in (its {claim or 'claims'} do not match).",
            reason=claim or "claims",
        ) from None
    if not isinstance(claims.get("sub"), str) or not 0 < len(claims["sub"]) <= SUB_MAX:
        raise SignInRefused("The ID token names no subject we can keep.", reason="sub")
    found_claims = dict(claims)
    email = found_claims.get("email")
    if not isinstance(email, str) or len(email) > EMAIL_MAX or "@" not in email:
        # An address we could not store or route is no address: never half of one.
        found_claims.pop("email", None)
        found_claims.pop("email_verified", None)
    return found_claims
