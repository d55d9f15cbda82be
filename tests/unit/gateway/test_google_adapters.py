"""The Google adapters against the stub (in this process, on a thread): Vertex's access tokens
minted once for concurrent requests, served from the cache, refreshed behind the requests
near their expiry, a bad key or a refused grant told as our ProviderError; and Gemini's HTTP
400 for a bad API key read as the 401 it means."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest

from gateway.adapters.base import CallTarget, ProviderError
from gateway.adapters.client import VendorClient
from gateway.adapters.gemini import GeminiProvider
from gateway.adapters.vertex import AccessTokens
from gateway.shapes import openai as openai_shape
from gateway.types import OPENAI
from stubvendor.server import StubServer
from tests.support.google import key_text, service_account_key


@pytest.fixture(scope="module")
def stub() -> Iterator[StubServer]:
    with StubServer() as server:
        yield server


def grants(stub: StubServer, email: str) -> int:
    calls = httpx.get(f"{stub.url}/_stub/calls").json()["calls"]
    return sum(1 for c in calls if c["shape"] == "google-token" and c["key"] == email)


def test_concurrent_requests_share_one_grant_and_then_the_cache(stub):
    info = service_account_key(stub.url)
    tokens = AccessTokens()

    async def run() -> tuple[list[str], str]:
        together = await asyncio.gather(*(tokens.token(key_text(info)) for _ in range(5)))
        return together, await tokens.token(key_text(info))

    together, later = asyncio.run(run())

    assert len(set(together)) == 1 and later == together[0]
    assert grants(stub, info["client_email"]) == 1


def test_a_token_near_its_expiry_is_served_while_a_new_one_is_minted_behind(stub):
    info = service_account_key(stub.url)
    tokens = AccessTokens(margin_s=3700)  # every token of an hour is already near its expiry

    async def run() -> tuple[str, str, str]:
        first = await tokens.token(key_text(info))
        served_meanwhile = await tokens.token(key_text(info))  # starts the refresh, waits not
        for _ in range(200):
            if grants(stub, info["client_email"]) == 2:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        return first, served_meanwhile, await tokens.token(key_text(info))

    first, served_meanwhile, refreshed = asyncio.run(run())

    assert served_meanwhile == first
    assert refreshed != first
    assert grants(stub, info["client_email"]) >= 2


def test_a_key_that_is_not_a_service_accounts_fails_without_calling(stub):
    with pytest.raises(ProviderError) as failed:
        asyncio.run(AccessTokens().token(json.dumps({"type": "service_account"})))

    assert (failed.value.retryable, failed.value.status) == (False, None)
    assert "service account" in str(failed.value)


def test_a_grant_the_endpoint_refuses_is_the_key_refused(stub):
    registered = service_account_key(stub.url)
    impostor = service_account_key(stub.url, register=False)
    impostor["client_email"] = registered["client_email"]

    with pytest.raises(ProviderError) as refused:
        asyncio.run(AccessTokens().token(key_text(impostor)))

    assert (refused.value.retryable, refused.value.status) == (False, 401)
    assert impostor["private_key"] not in str(refused.value)


@pytest.mark.parametrize(("key", "failed"), [("bad", (401, False)), ("good", None)])
def test_a_gemini_key_google_calls_not_valid_is_a_401(key, failed):
    req = openai_shape.parse_request(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    )

    async def call(url: str) -> ProviderError | None:
        async with VendorClient() as client:
            provider = GeminiProvider(base_url=url, client=client)
            shape, payload = provider.own_payload(OPENAI, req.body)
            target = CallTarget(
                upstream_model="gemini-2.5-flash",
                api_key=key,
                max_tokens=8,
                payload=payload,
                shape=shape,
            )
            try:
                await provider.complete(req, target)
            except ProviderError as error:
                return error
            return None

    with StubServer(accept_keys=["good"]) as stub:
        error = asyncio.run(call(stub.url))

    assert (error and (error.status, error.retryable)) == failed
