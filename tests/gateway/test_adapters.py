"""Adapters, one interface (complete, stream), against the real stub vendor.

They translate one vendor each, raise ProviderError(retryable, status, retry_after) and never
retry: every call below costs the stub exactly one call.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from gateway.adapters.anthropic import AnthropicProvider
from gateway.adapters.base import CallTarget, ProviderError
from gateway.adapters.client import VendorClient
from gateway.adapters.fake import FakeProvider
from gateway.adapters.openai import OpenAIProvider
from gateway.adapters.openrouter import OpenRouterProvider
from gateway.shapes import anthropic as anthropic_shape
from gateway.shapes import openai as openai_shape
from gateway.types import OPENAI, ModelRequest, StreamResult, Usage

KEY = "sk-adapter-test-0042"
OPENAI_REQ = openai_shape.parse_request(
    {
        "model": "client-model",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "say hello now"},
        ],
        "max_tokens": 3,
    }
)
ANTHROPIC_REQ = anthropic_shape.parse_request(
    {
        "model": "client-model",
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "say hello now"}],
        "max_tokens": 3,
    }
)
ADAPTERS = {
    "openai": (OpenAIProvider, "/v1", "/v1/chat/completions"),
    "openrouter": (OpenRouterProvider, "/api/v1", "/api/v1/chat/completions"),
    "anthropic": (AnthropicProvider, "", "/v1/messages"),
}


def run(stub, kind: str, call, *, max_tokens: int = 3):
    """Run `call(adapter, target)` with a fresh vendor client against the stub."""
    adapter_class, suffix, _ = ADAPTERS[kind]

    async def main():
        async with VendorClient() as client:
            adapter = adapter_class(base_url=stub.url + suffix, client=client)
            target = CallTarget(
                upstream_model="up-model",
                api_key=KEY,
                max_tokens=max_tokens,
                payload=request_for(adapter).body,
            )
            return await call(adapter, target)

    return asyncio.run(main())


def request_for(adapter) -> ModelRequest:
    """Return the request in the shape the adapter speaks (the same words either way)."""
    return OPENAI_REQ if adapter.shape == OPENAI else ANTHROPIC_REQ


def answer(completion) -> tuple:
    return (completion.text, completion.finish_reason, completion.usage, completion.model)


async def complete(adapter, target):
    return await adapter.complete(request_for(adapter), target)


async def stream(adapter, target):
    req = replace(request_for(adapter), stream=True)
    return [chunk async for arrived in adapter.stream(req, target) for chunk in arrived]


async def stream_until_error(adapter, target):
    received = []
    req = replace(request_for(adapter), stream=True, max_tokens=100)
    try:
        async for arrived in adapter.stream(req, target):
            received.extend(arrived)
    except ProviderError as exc:
        return received, exc
    return received, None


@pytest.fixture
def vendor(stub):
    stub.clear()
    return stub


@pytest.mark.parametrize("kind", list(ADAPTERS))
def test_adapter_completes_and_streams_with_the_vendors_usage(vendor, kind):
    completion = run(vendor, kind, complete)
    chunks = run(vendor, kind, stream)

    # 5 prompt words (system included), 3 answer words (max_tokens), in either vendor shape.
    assert answer(completion) == ("Hello from the", "length", Usage(5, 3), "client-model")
    assert [c.text for c in chunks if c.text] == ["Hello", " from", " the"]
    result = StreamResult()
    for chunk in chunks:
        result.fold(chunk)  # Anthropic tells its usage in two parts
    assert result.usage == Usage(5, 3)
    assert [c.finish_reason for c in chunks if c.finish_reason] == ["length"]
    path = ADAPTERS[kind][2]
    assert [
        (c["path"], c["model"], c["key"], c["stream"], c["max_tokens"])
        for c in vendor.vendor_calls()
    ] == [(path, "up-model", KEY, False, 3), (path, "up-model", KEY, True, 3)]


@pytest.mark.parametrize("kind", list(ADAPTERS))
@pytest.mark.parametrize(
    ("fault", "status", "retryable", "retry_after"),
    [
        ({"kind": "429", "retry_after": 7}, 429, True, 7.0),
        ({"kind": "401"}, 401, False, None),
        ({"kind": "403"}, 403, False, None),
        ({"kind": "500"}, 500, True, None),
        ({"kind": "fail_before_first_token"}, None, True, None),
    ],
    ids=["429", "401", "403", "500", "dropped"],
)
def test_adapter_maps_a_vendor_failure_to_a_provider_error_without_retrying(
    vendor, kind, fault, status, retryable, retry_after
):
    for call in (complete, stream):
        vendor.clear()
        vendor.faults(fault)

        with pytest.raises(ProviderError) as failed:
            run(vendor, kind, call)

        error = failed.value
        assert (error.status, error.retryable, error.retry_after_s, error.timeout) == (
            status,
            retryable,
            retry_after,
            False,
        )
        assert KEY not in str(error)  # the vendor's body (which echoes the key) is not kept
        assert len(vendor.vendor_calls()) == 1


@pytest.mark.parametrize("kind", list(ADAPTERS))
def test_adapter_hands_on_the_tokens_received_before_a_stream_breaks(vendor, kind):
    vendor.faults({"kind": "fail_after_tokens", "after_tokens": 4})

    received, error = run(vendor, kind, stream_until_error, max_tokens=100)

    assert [c.text for c in received if c.text] == ["Hello", " from", " the", " stub"]
    assert error is not None and error.retryable and error.status is None
    assert len(vendor.vendor_calls()) == 1


def test_fake_adapter_answers_in_process():
    async def both():
        adapter = FakeProvider()
        target = CallTarget(
            upstream_model="fake", api_key="", max_tokens=2, payload=OPENAI_REQ.body
        )
        completion = await adapter.complete(OPENAI_REQ, target)
        chunks = [c async for arrived in adapter.stream(OPENAI_REQ, target) for c in arrived]
        return completion, chunks

    completion, chunks = asyncio.run(both())

    assert answer(completion) == ("Hello from", "length", Usage(5, 2), "client-model")
    message = completion.data["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "Hello from"}
    assert [(c.text, c.finish_reason, c.usage) for c in chunks] == [
        ("", None, None),  # the role chunk
        ("Hello", None, None),
        (" from", None, None),
        ("", "length", None),
        ("", None, Usage(5, 2)),
    ]
