"""Google Vertex AI's `generateContent`, authorised with a service account's access tokens.

Bodies and answers are the Gemini API's (gateway/adapters/gemini.py, gateway/shapes/gemini.py,
gateway/shapes/gemini_answers.py); what differs is where a call goes and how it is authorised:

- URL: `{base_url}/v1/projects/{project}/locations/{region}/publishers/google/models/
  {upstream}:generateContent` (`:streamGenerateContent?alt=sse` for a stream), the project
  and region being the profile's vendor options. A profile without a base URL calls
  `https://{region}-aiplatform.googleapis.com` (`https://aiplatform.googleapis.com` for the
  `global` region); a profile without a region takes the one its
  `{region}-aiplatform.googleapis.com` host names. Without a project or a region the call
  fails without calling (not retryable: the operator must fix the profile).
- Credentials: the profile's platform key (or a team key) is a service account's JSON key,
  the whole JSON text. Each call carries `Authorization: Bearer <access token>`; the tokens
  come from google-auth's service-account credentials (scope cloud-platform), minted at the
  key's `token_uri` by AccessTokens: off the event loop (a thread), cached per key, refreshed
  in the background once a token is within REFRESH_MARGIN_S of its expiry (a request never
  waits for a refresh while the cached token is valid), one refresh at a time per key shared
  by every request that needs it. google-auth reaches the token endpoint through
  UrllibTransport (the `requests` package is not a dependency).
- A key that is not a service account's JSON fails the call without calling (not
  retryable); a token endpoint that refuses the key is the vendor refusing the key (a 401,
  not retryable); one that cannot be reached is a connection failure (retryable). No message
  ever carries the key or a token.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from datetime import UTC
from typing import Any
from urllib.parse import urlsplit

import google.auth.exceptions
import google.auth.transport
from google.oauth2 import service_account

from gateway.adapters.base import CallTarget, ProviderError
from gateway.adapters.gemini import GeminiProvider
from gateway.types import OPENAI, Completion, ModelRequest

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
REFRESH_MARGIN_S = 300.0  # a token this close to its expiry is refreshed behind the requests
TOKEN_TIMEOUT_S = 10.0
UNKNOWN_LIFETIME_S = 3600.0  # a token endpoint that says no expiry: Google's default lifetime
KEYS_CACHED = 1024  # service-account keys whose credentials and token are kept
API_PATH = "/v1"
HOST_SUFFIX = "-aiplatform.googleapis.com"
MALFORMED_KEY = "the key of a vertex profile must be a service account's JSON key"


class _Response(google.auth.transport.Response):
    def __init__(self, status: int, headers: dict[str, str], data: bytes) -> None:
        self._status, self._headers, self._data = status, headers, data

    @property
    def status(self) -> int:
        return self._status

    @property
    def headers(self) -> dict[str, str]:
        return self._headers

    @property
    def data(self) -> bytes:
        return self._data


class UrllibTransport(google.auth.transport.Request):
    """google-auth's HTTP transport over urllib, for the token endpoint (called in a thread)."""

    def __call__(
        self,
        url: str,
        method: str = "GET",
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> _Response:
        request = urllib.request.Request(url, data=body, headers=dict(headers or {}), method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout or TOKEN_TIMEOUT_S) as response:
                return _Response(response.status, dict(response.headers), response.read())
        except urllib.error.HTTPError as error:  # an answer all the same: google-auth reads it
            with error:
                return _Response(error.code, dict(error.headers), error.read())
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            raise google.auth.exceptions.TransportError(type(exc).__name__) from None


@dataclass
class _Grant:
    """One service-account key: its credentials (built in a thread), its token, its refresh."""

    key: str = field(repr=False)
    credentials: service_account.Credentials | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    expiry_s: float = 0.0  # epoch seconds
    refreshing: asyncio.Task[str] | None = None


def _mint(grant: _Grant) -> tuple[str, float]:
    """Ask the key's token endpoint for a token (blocking: run in a thread)."""
    if grant.credentials is None:
        try:
            info = json.loads(grant.key)
            if not isinstance(info, dict):
                raise ValueError
            grant.credentials = service_account.Credentials.from_service_account_info(
                info, scopes=list(SCOPES)
            )
        except (ValueError, KeyError, TypeError):
            raise ProviderError(MALFORMED_KEY, retryable=False) from None
    credentials = grant.credentials
    try:
        credentials.refresh(UrllibTransport())
    except google.auth.exceptions.RefreshError:
        # The endpoint refused the key (revoked, disabled, unknown): the key's problem.
        raise ProviderError(
            "the token endpoint refused the service account", retryable=False, status=401
        ) from None
    except google.auth.exceptions.TransportError:
        raise ProviderError("the token endpoint could not be reached", retryable=True) from None
    expiry = credentials.expiry
    expiry_s = (
        expiry.replace(tzinfo=UTC).timestamp()
        if expiry is not None
        else time.time() + UNKNOWN_LIFETIME_S
    )
    return str(credentials.token), expiry_s


class AccessTokens:
    """Access tokens per service-account key, minted and refreshed off the request path."""

    def __init__(self, *, margin_s: float = REFRESH_MARGIN_S, capacity: int = KEYS_CACHED) -> None:
        self._margin_s = margin_s
        self._capacity = capacity
        self._grants: OrderedDict[bytes, _Grant] = OrderedDict()

    async def token(self, key: str) -> str:
        """Return a valid access token for `key`, waiting only when none is cached."""
        grant = self._grant(key)
        now = time.time()
        if grant.token is not None and now < grant.expiry_s:
            if now >= grant.expiry_s - self._margin_s:
                self._refresh(grant)  # behind the requests: this one goes with the cached token
            return grant.token
        # shield: a request that gives up does not cancel the refresh others wait for.
        return await asyncio.shield(self._refresh(grant))

    def _grant(self, key: str) -> _Grant:
        digest = hashlib.sha256(key.encode()).digest()
        grant = self._grants.get(digest)
        if grant is None:
            grant = self._grants[digest] = _Grant(key)
            while len(self._grants) > self._capacity:
                self._grants.popitem(last=False)
        self._grants.move_to_end(digest)
        return grant

    def _refresh(self, grant: _Grant) -> asyncio.Task[str]:
        """Return the key's refresh under way, starting one if none is."""
        if grant.refreshing is None:
            grant.refreshing = asyncio.create_task(self._refreshed(grant))
            grant.refreshing.add_done_callback(_retrieved)
        return grant.refreshing

    async def _refreshed(self, grant: _Grant) -> str:
        try:
            token, expiry_s = await asyncio.to_thread(_mint, grant)
        finally:
            grant.refreshing = None
        grant.token, grant.expiry_s = token, expiry_s
        return token


def _retrieved(task: asyncio.Task[str]) -> None:
    # A background refresh that failed is retried by the next request; nobody awaits it, so
    # its exception is taken here (asyncio would log it as never retrieved).
    if not task.cancelled():
        task.exception()


ACCESS_TOKENS = AccessTokens()


def region_of(region: str, base_url: str) -> str:
    """Return the profile's region, else the one its `{region}-aiplatform` host names."""
    if region:
        return region
    host = urlsplit(base_url).hostname or ""
    return (
        host.removesuffix(".googleapis.com").removesuffix("-aiplatform")
        if host.endswith(HOST_SUFFIX)
        else ""
    )


class VertexProvider(GeminiProvider):
    kind = "vertex"
    tokens = ACCESS_TOKENS

    def url_for(self, base_url: str, shape: str) -> str:
        region = self._options.region
        if not base_url and region:
            host = "aiplatform.googleapis.com" if region == "global" else f"{region}{HOST_SUFFIX}"
            base_url = f"https://{host}"
        return base_url if base_url.endswith(API_PATH) else base_url + API_PATH

    def model_url(self, target: CallTarget, *, stream: bool) -> str:
        project = self._options.project
        region = region_of(self._options.region, self._base_url)
        if not project or not region:
            raise ProviderError("the vertex profile needs a project and a region", retryable=False)
        model = target.upstream_model.removeprefix("models/")
        return (
            f"{self._urls[OPENAI]}/projects/{project}/locations/{region}/publishers/google/"
            f"models/{model}:{self.method(stream)}"
        )

    def headers(self, api_key: str) -> dict[str, str]:
        # `api_key` is the access token here: complete and _post swap it in for the key.
        return {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}

    async def _authorized(self, target: CallTarget) -> CallTarget:
        """Return the target with the key's access token in place of the key."""
        return replace(target, api_key=await self.tokens.token(target.api_key))

    async def complete(self, req: ModelRequest, target: CallTarget) -> Completion:
        return await super().complete(req, await self._authorized(target))

    async def _post(self, req: ModelRequest, target: CallTarget):
        # The stream's one call: base.HttpProvider.stream awaits it for the response.
        return await super()._post(req, await self._authorized(target))
