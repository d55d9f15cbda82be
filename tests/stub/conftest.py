"""Fixtures of the stub's tests: one in-process stub per module, cleared per test."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from stubvendor.server import StubServer


@pytest.fixture(scope="module")
def stub() -> Iterator[StubServer]:
    with StubServer() as server:
        yield server


@pytest.fixture()
def client(stub: StubServer) -> Iterator[httpx.Client]:
    """A client of the stub; the calls log, faults and prompt caches start empty."""
    with httpx.Client(base_url=stub.url, timeout=10) as c:
        assert c.delete("/_stub/calls").json() == {"cleared": True}
        yield c


@pytest.fixture()
def oa_sdk(stub: StubServer, client: httpx.Client) -> openai.OpenAI:
    return openai.OpenAI(base_url=stub.url + "/v1", api_key="k", max_retries=0)


@pytest.fixture()
def an_sdk(stub: StubServer, client: httpx.Client) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stub.url, api_key="k", max_retries=0)
