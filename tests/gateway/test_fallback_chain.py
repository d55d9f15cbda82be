"""The caller's chain: "model": "a,b", X-Tollgate-Fallback or fallback_model, in the caller's
order; each link's error kept, the client gets the most useful one; never a fallback once
the first streamed token reached the client.
"""

from __future__ import annotations

import anthropic
import httpx
import orjson
import pytest

from tests.support.profiles import fast_profiles
from tests.support.sse import sse_events
from tests.support.stacks import own_stack
from tests.support.usage import usage_rows

PROMPT = [{"role": "user", "content": "pick a model"}]


@pytest.fixture
def fstack(transactional_db, tolerant_gateway, stub):
    return own_stack(tolerant_gateway, stub, fast_profiles(stub.url, timeout_s=1, idle_s=1))


@pytest.fixture(scope="module")
def long_route_gateway(module_gateways):
    """Breakers that never open, and a route list of three models (the default allows two)."""
    return module_gateways(TOLLGATE_BREAKER_FAILURES="1000000", TOLLGATE_MAX_ROUTE="3")


@pytest.fixture
def lstack(transactional_db, long_route_gateway, stub):
    return own_stack(long_route_gateway, stub, fast_profiles(stub.url, timeout_s=1, idle_s=1))


@pytest.fixture(scope="module")
def touchy_gateway(module_gateways):
    """One failure opens a breaker."""
    return module_gateways(TOLLGATE_BREAKER_FAILURES="1")


@pytest.fixture
def touchy(transactional_db, touchy_gateway, stub):
    return own_stack(touchy_gateway, stub, fast_profiles(stub.url, timeout_s=1, idle_s=1))


def chat(stack, tenant, *, headers=None, **body):
    return httpx.post(
        f"{stack.url}/v1/chat/completions",
        timeout=20,
        headers={"Authorization": f"Bearer {tenant.api_key}", **(headers or {})},
        json={"messages": PROMPT, **body},
    )


def trail(request_id: str) -> list[tuple]:
    [row] = usage_rows([request_id], expect=1)
    return [(a.provider, a.model, a.outcome, a.upstream_status) for a in row.attempts]


def test_route_list_in_the_model_field_is_tried_in_the_callers_order(lstack):
    tenant = lstack.tenant()
    lstack.stub.faults(
        {"kind": "500", "times": 2, "match": {"model": "gpt-4o"}},
        {"kind": "429", "times": 2, "match": {"model": "claude-3-5-haiku-latest"}},
    )

    response = chat(lstack, tenant, model="gpt-4o,claude-3-5-haiku,gpt-4o-mini")

    assert response.status_code == 200
    assert response.json()["model"] == "gpt-4o-mini"  # the model that served, not the first
    assert response.json()["choices"][0]["message"]["content"] == (
        "Hello from the stub model gpt-4o-mini reply ok"
    )
    assert [c["model"] for c in lstack.stub.vendor_calls()] == [
        "gpt-4o",
        "gpt-4o",
        "claude-3-5-haiku-latest",
        "claude-3-5-haiku-latest",
        "gpt-4o-mini",
    ]
    assert trail(response.headers["x-request-id"]) == [
        ("stub-openai", "gpt-4o", "upstream_error", 500),
        ("stub-openai", "gpt-4o", "upstream_error", 500),
        ("stub-anthropic", "claude-3-5-haiku", "upstream_error", 429),
        ("stub-anthropic", "claude-3-5-haiku", "upstream_error", 429),
        ("stub-openai", "gpt-4o-mini", "ok", 200),
    ]


def test_fallback_header_extends_the_chain_in_its_order(lstack):
    tenant = lstack.tenant()
    lstack.stub.faults({"kind": "500", "times": 2, "match": {"model": "gpt-4o-mini"}})

    response = chat(
        lstack, tenant, model="gpt-4o-mini", headers={"X-Tollgate-Fallback": "router-mini, gpt-4o"}
    )

    assert (response.status_code, response.json()["model"]) == (200, "router-mini")
    assert [(c["path"], c["model"]) for c in lstack.stub.vendor_calls()] == [
        ("/v1/chat/completions", "gpt-4o-mini"),
        ("/v1/chat/completions", "gpt-4o-mini"),
        ("/api/v1/chat/completions", "openai/gpt-4o-mini"),
    ]


def test_first_link_that_works_serves_and_the_rest_are_never_called(fstack):
    tenant = fstack.tenant()

    response = chat(fstack, tenant, model="gpt-4o-mini", fallback_model="claude-3-5-haiku")

    assert (response.status_code, response.json()["model"]) == (200, "gpt-4o-mini")
    assert [c["model"] for c in fstack.stub.vendor_calls()] == ["gpt-4o-mini"]


def test_fallback_model_on_the_messages_route_with_the_anthropic_sdk(fstack):
    tenant = fstack.tenant()
    fstack.stub.faults({"kind": "hang", "times": 2, "match": {"model": "claude-3-5-haiku-latest"}})

    message = fstack.anthropic(tenant).messages.create(
        model="claude-3-5-haiku",
        max_tokens=100,
        messages=PROMPT,
        extra_body={"fallback_model": "gpt-4o-mini"},
    )

    assert message.model == "gpt-4o-mini"
    assert message.content[0].text == "Hello from the stub model gpt-4o-mini reply ok"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (3, 8)
    assert [c["model"] for c in fstack.stub.vendor_calls()] == [
        "claude-3-5-haiku-latest",
        "claude-3-5-haiku-latest",
        "gpt-4o-mini",
    ]


def test_client_gets_the_last_links_error_when_every_link_failed_upstream(fstack):
    tenant = fstack.tenant()
    fstack.stub.faults(
        {"kind": "401", "match": {"model": "gpt-4o-mini"}},
        {"kind": "hang", "times": 2, "match": {"model": "gpt-4o"}},
    )

    timed_out = chat(fstack, tenant, model="gpt-4o-mini,gpt-4o")

    assert (timed_out.status_code, timed_out.json()["error"]["code"]) == (504, "LM-5002")
    assert timed_out.headers.get("retry-after") is None
    assert trail(timed_out.headers["x-request-id"]) == [
        ("stub-openai", "gpt-4o-mini", "upstream_error", 401),
        ("stub-openai", "gpt-4o", "timeout", None),
        ("stub-openai", "gpt-4o", "timeout", None),
    ]

    fstack.stub.clear()
    fstack.stub.faults(
        {"kind": "hang", "times": 2, "match": {"model": "gpt-4o-mini"}},
        {"kind": "500", "times": 2, "match": {"model": "gpt-4o"}},
    )

    failed = chat(fstack, tenant, model="gpt-4o-mini,gpt-4o")

    assert (failed.status_code, failed.json()["error"]) == (
        502,
        {
            "message": "The upstream provider failed (HTTP 500).",
            "type": "api_error",
            "code": "LM-5001",
        },
    )
    assert len(fstack.stub.vendor_calls()) == 4


def test_an_earlier_upstream_error_beats_a_later_open_circuit(touchy):
    tenant = touchy.tenant()
    touchy.stub.faults({"kind": "500", "times": 2, "match": {"model": "gpt-4o"}})
    opened = chat(touchy, tenant, model="gpt-4o")  # one failure opens gpt-4o's breaker
    assert (opened.status_code, opened.json()["error"]["code"]) == (502, "LM-5001")

    touchy.stub.clear()
    touchy.stub.faults({"kind": "403", "match": {"model": "gpt-4o-mini"}})
    response = chat(touchy, tenant, model="gpt-4o-mini,gpt-4o")

    assert (response.status_code, response.json()["error"]) == (
        502,
        {
            "message": "The upstream provider failed (HTTP 403).",
            "type": "api_error",
            "code": "LM-5001",
        },
    )
    assert [c["model"] for c in touchy.stub.vendor_calls()] == ["gpt-4o-mini"]
    assert trail(response.headers["x-request-id"]) == [
        ("stub-openai", "gpt-4o-mini", "upstream_error", 403),
        ("stub-openai", "gpt-4o", "circuit_open", None),
    ]

    every_link_open = chat(touchy, tenant, model="gpt-4o,gpt-4o-mini")

    assert (every_link_open.status_code, every_link_open.json()["error"]["code"]) == (
        503,
        "LM-5003",
    )
    assert every_link_open.headers["retry-after"] == "2"
    assert [c["model"] for c in touchy.stub.vendor_calls()] == ["gpt-4o-mini"]


def test_unknown_model_anywhere_in_the_chain_is_refused_before_any_call(fstack):
    tenant = fstack.tenant()

    for body in (
        {"model": "gpt-4o-mini,no-such-model"},
        {"model": "gpt-4o-mini", "fallback_model": "no-such-model"},
    ):
        response = chat(fstack, tenant, **body)
        assert (response.status_code, response.json()["error"]) == (
            400,
            {
                "message": "Unknown model 'no-such-model'."
                " GET /v1/models lists the models this key may use.",
                "type": "invalid_request_error",
                "code": "LM-2001",
            },
        )
    assert fstack.stub.vendor_calls() == []


def test_stream_idle_deadline_ends_the_stream_with_an_error_and_no_fallback(stub, fstack):
    own_stack(fstack.gateway, stub, fast_profiles(stub.url, timeout_s=2, idle_s=1))
    tenant = fstack.tenant()
    # The first token after 1.2 s is inside the 2 s first-chunk deadline; the second, 1.2 s
    # later, is over the 1 s idle deadline.
    stub.faults({"kind": "slow", "delay_ms": 1200, "match": {"model": "gpt-4o-mini"}})

    response = chat(fstack, tenant, model="gpt-4o-mini", fallback_model="gpt-4o", stream=True)

    assert response.status_code == 200
    events = [data for _, data in sse_events(response.text)]
    chunks = [orjson.loads(data) for data in events]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1]) == "Hello"
    assert chunks[-1] == {
        "error": {
            "message": "The upstream provider timed out.",
            "type": "timeout_error",
            "code": "LM-5002",
        }
    }
    assert [c["model"] for c in stub.vendor_calls()] == ["gpt-4o-mini"]
    [row] = usage_rows([response.headers["x-request-id"]], expect=1)
    assert (row.status, row.error_code, row.model_served) == (504, "LM-5002", "gpt-4o-mini")


def test_anthropic_stream_broken_after_its_first_token_ends_with_an_error_event(fstack):
    tenant = fstack.tenant()
    fstack.stub.faults(
        {
            "kind": "fail_after_tokens",
            "after_tokens": 3,
            "match": {"model": "claude-3-5-haiku-latest"},
        }
    )

    response = httpx.post(
        f"{fstack.url}/v1/messages",
        timeout=20,
        headers={"x-api-key": tenant.api_key, "anthropic-version": "2023-06-01"},
        json={
            "model": "claude-3-5-haiku",
            "max_tokens": 50,
            "messages": PROMPT,
            "stream": True,
            "fallback_model": "gpt-4o-mini",
        },
    )

    assert response.status_code == 200
    events = sse_events(response.text)
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "error",
    ]
    deltas = [orjson.loads(data) for name, data in events if name == "content_block_delta"]
    assert "".join(d["delta"]["text"] for d in deltas) == "Hello from the"
    assert orjson.loads(events[-1][1])["error"]["code"] == "LM-5001"
    assert [c["model"] for c in fstack.stub.vendor_calls()] == ["claude-3-5-haiku-latest"]
    # Billed as the vendor bills a cut stream: the prompt its message_start told (3 words)
    # and the three tokens it sent (not the one its message_start counted).
    [row] = usage_rows([response.headers["x-request-id"]], expect=1)
    assert (row.tokens_in, row.tokens_out, row.provider_cost_micro) == (3, 3, 15)

    # The official SDK surfaces the in-band error as an exception, after the text it got.
    fstack.stub.clear()
    fstack.stub.faults({"kind": "fail_after_tokens", "after_tokens": 2})
    received = []
    stream = fstack.anthropic(tenant).messages.stream(
        model="claude-3-5-haiku", max_tokens=50, messages=PROMPT
    )
    with pytest.raises(anthropic.APIStatusError) as broken, stream as events:
        for text in events.text_stream:
            received.append(text)
    assert "".join(received) == "Hello from"
    assert "LM-5001" in str(broken.value)
    assert len(fstack.stub.vendor_calls()) == 1
