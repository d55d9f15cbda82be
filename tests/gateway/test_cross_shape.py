"""Either client shape served by either vendor shape, through the official SDKs unmodified.

The stub counts prompt tokens as the words of every text it receives (the system prompt
included), so usage proves what reached the vendor; max_tokens is in its call log. How
every field is translated is in tests/unit/gateway/test_translate.py; tools, images, JSON
mode and caching end to end in tests/e2e/test_fidelity.py.
"""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.support.profiles import PLATFORM_KEY, stub_profiles
from tests.support.stacks import own_stack
from tests.support.usage import usage_rows

SYSTEM = "You are terse."  # 3 words
QUESTION = "What is the gateway for"  # 5 words
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}


def test_anthropic_sdk_on_the_messages_route_reaches_an_anthropic_vendor(stack):
    tenant = stack.tenant()
    client = stack.anthropic(tenant)

    message = client.messages.create(
        model="claude-3-5-haiku",
        max_tokens=64,
        system=SYSTEM,
        messages=[{"role": "user", "content": QUESTION}],
        extra_body={"temperature": 0.2},
    )

    assert message.type == "message" and message.role == "assistant"
    assert message.model == "claude-3-5-haiku"
    assert message.content[0].text == "Hello from the stub model claude-3-5-haiku-latest reply ok"
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (8, 8)
    [call] = stack.stub.vendor_calls()
    assert (call["path"], call["model"], call["key"], call["max_tokens"], call["stream"]) == (
        "/v1/messages",
        "claude-3-5-haiku-latest",
        PLATFORM_KEY,
        64,
        False,
    )


def test_anthropic_sdk_streams_through_the_messages_route(stack):
    tenant = stack.tenant()

    with stack.anthropic(tenant).messages.stream(
        model="claude-3-5-haiku",
        max_tokens=5,
        system=SYSTEM,
        messages=[{"role": "user", "content": QUESTION}],
    ) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()

    assert texts == ["Hello", " from", " the", " stub", " model"]
    assert final.content[0].text == "Hello from the stub model"
    assert final.stop_reason == "max_tokens"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (8, 5)
    [call] = stack.stub.vendor_calls()
    assert (call["stream"], call["max_tokens"]) == (True, 5)
    [row] = usage_rows(group_id=tenant.group_id, expect=1)
    assert (row.endpoint, row.streamed, row.tokens_in, row.tokens_out) == ("messages", True, 8, 5)


def test_anthropic_sdk_served_by_an_openai_vendor(stack):
    tenant = stack.tenant()
    client = stack.anthropic(tenant)

    message = client.messages.create(
        model="gpt-4o-mini",
        max_tokens=3,
        system=[{"type": "text", "text": SYSTEM}],
        stop_sequences=["never"],
        extra_body={"top_p": 0.5},
        messages=[{"role": "user", "content": [{"type": "text", "text": QUESTION}]}],
    )
    events = list(
        client.messages.create(
            model="gpt-4o-mini",
            max_tokens=100,
            system=SYSTEM,
            stream=True,
            messages=[{"role": "user", "content": QUESTION}],
        )
    )

    assert message.content[0].text == "Hello from the"
    assert message.stop_reason == "max_tokens"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (8, 3)
    assert [e.type for e in events] == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * 8,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == (
        "Hello from the stub model gpt-4o-mini reply ok"
    )
    delta = next(e for e in events if e.type == "message_delta")
    assert (delta.delta.stop_reason, delta.usage.output_tokens, delta.usage.input_tokens) == (
        "end_turn",
        8,
        8,
    )
    assert [(c["path"], c["max_tokens"], c["stream"]) for c in stack.stub.vendor_calls()] == [
        ("/v1/chat/completions", 3, False),
        ("/v1/chat/completions", 100, True),
    ]


def test_openai_sdk_served_by_an_anthropic_vendor(stack):
    tenant = stack.tenant()
    client = stack.openai(tenant)

    completion = client.chat.completions.create(
        model="claude-3-5-haiku",
        temperature=0.5,
        stop="never",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
    )
    chunks = list(
        client.chat.completions.create(
            model="claude-3-5-haiku",
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
            messages=[
                {"role": "developer", "content": SYSTEM},
                {"role": "user", "content": QUESTION},
            ],
        )
    )

    assert completion.model == "claude-3-5-haiku"
    assert completion.choices[0].message.content == (
        "Hello from the stub model claude-3-5-haiku-latest reply ok"
    )
    assert completion.choices[0].finish_reason == "stop"
    assert (
        completion.usage.prompt_tokens,
        completion.usage.completion_tokens,
        completion.usage.total_tokens,
    ) == (8, 8, 16)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "Hello from the stub"
    )
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (8, 4)
    # The vendor needs max_tokens: without the client's, the model's cap goes (4096).
    assert [(c["path"], c["max_tokens"], c["stream"]) for c in stack.stub.vendor_calls()] == [
        ("/v1/messages", 4096, False),
        ("/v1/messages", 4, True),
    ]
    rows = usage_rows(group_id=tenant.group_id, expect=2)
    assert [(r.tokens_in, r.tokens_out) for r in rows] == [(8, 8), (8, 4)]


def test_openrouter_and_openai_compatible_vendors_speak_the_openai_shape(
    transactional_db, tolerant_gateway, stub
):
    stack = own_stack(
        tolerant_gateway,
        stub,
        [
            *stub_profiles(stub.url),
            {
                "name": "compat",
                "kind": "openai_compatible",
                "base_url": f"{stub.url}/compat/v1",
                "models": [{"name": "local-llama", "upstream": "llama-3-8b"}],
            },
            {
                "name": "in-process",
                "kind": "fake",
                "base_url": "",
                "models": [{"name": "fake-model"}],
            },
        ],
    )
    tenant = stack.tenant()
    client = stack.anthropic(tenant)

    answers = [
        client.messages.create(
            model=model, max_tokens=100, messages=[{"role": "user", "content": QUESTION}]
        )
        for model in ("router-mini", "local-llama", "fake-model")
    ]

    assert [a.content[0].text for a in answers] == [
        "Hello from the stub model openai/gpt-4o-mini reply ok",
        "Hello from the stub model llama-3-8b reply ok",
        "Hello from the fake model reply ok",
    ]
    assert [(a.usage.input_tokens, a.usage.output_tokens) for a in answers] == [
        (5, 8),
        (5, 8),
        (5, 7),
    ]
    # The fake vendor is in-process: only the two HTTP vendors were called.
    assert [(c["path"], c["model"], c["key"]) for c in stub.vendor_calls()] == [
        ("/api/v1/chat/completions", "openai/gpt-4o-mini", PLATFORM_KEY),
        ("/compat/v1/chat/completions", "llama-3-8b", PLATFORM_KEY),
    ]


def test_x_api_key_and_bearer_identify_the_same_caller_on_both_routes(stack):
    tenant = stack.tenant()
    body = {
        "model": "gpt-4o-mini",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": QUESTION}],
    }

    answers = [
        httpx.post(f"{stack.url}{route}", json=body, headers=headers)
        for route in ("/v1/messages", "/v1/chat/completions")
        for headers in (
            {"x-api-key": tenant.api_key},
            {"Authorization": f"Bearer {tenant.api_key}"},
        )
    ]

    assert [a.status_code for a in answers] == [200] * 4
    rows = usage_rows([a.headers["x-request-id"] for a in answers], expect=4)
    assert {r.api_key_id for r in rows} == {tenant.api_key_id}


@pytest.mark.parametrize(
    ("body", "untranslatable"),
    [
        ({"top_k": 5}, "'top_k'"),
        ({"thinking": {"type": "enabled", "budget_tokens": 64}}, "'thinking.type' enabled"),
        ({"unknown_knob": 1}, "'unknown_knob'"),
    ],
    ids=["top_k", "thinking", "unknown"],
)
def test_an_anthropic_field_an_openai_vendor_cannot_honour_is_refused_naming_it(
    stack, body, untranslatable
):
    tenant = stack.tenant()

    with pytest.raises(anthropic.BadRequestError) as refused:
        stack.anthropic(tenant).messages.create(
            model="gpt-4o-mini",
            max_tokens=100,
            messages=[{"role": "user", "content": QUESTION}],
            extra_body=body,
        )

    assert refused.value.status_code == 400
    assert refused.value.body["type"] == "error"  # Anthropic's error shape, our code in it
    error = refused.value.body["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "LM-2001")
    assert untranslatable in error["message"] and "openai vendors" in error["message"]
    assert stack.stub.vendor_calls() == []


@pytest.mark.parametrize(
    ("body", "untranslatable"),
    [
        ({"logprobs": True}, "'logprobs'"),
        ({"n": 2}, "'n'"),
        (  # JSON mode is a forced tool on Anthropic: it cannot sit beside the client's own
            {"response_format": {"type": "json_object"}, "tools": [WEATHER]},
            "'response_format' json_object beside tools",
        ),
        ({"seed": 7}, "'seed'"),
    ],
    ids=["logprobs", "n", "json-beside-tools", "seed"],
)
def test_an_openai_field_an_anthropic_vendor_cannot_honour_is_refused_naming_it(
    stack, body, untranslatable
):
    tenant = stack.tenant()

    with pytest.raises(openai.BadRequestError) as refused:
        stack.openai(tenant).chat.completions.create(
            model="claude-3-5-haiku",
            messages=[{"role": "user", "content": QUESTION}],
            **body,
        )

    assert refused.value.status_code == 400
    assert (refused.value.body["type"], refused.value.body["code"]) == (
        "invalid_request_error",
        "LM-2001",
    )
    message = refused.value.body["message"]
    assert untranslatable in message and "anthropic vendors" in message
    assert stack.stub.vendor_calls() == []


def test_messages_route_refuses_a_model_the_key_may_not_use(stack):
    from accounts.models import ApiKey

    tenant = stack.tenant()
    ApiKey.objects.filter(pk=tenant.api_key_id).update(allowed_models=["gpt-4o-mini"])

    with pytest.raises(anthropic.PermissionDeniedError) as refused:
        stack.anthropic(tenant).messages.create(
            model="claude-3-5-haiku",
            max_tokens=10,
            messages=[{"role": "user", "content": QUESTION}],
        )

    assert refused.value.body["error"]["code"] == "LM-1003"
    assert refused.value.body["error"]["message"] == (
        "This key may not use model 'claude-3-5-haiku'. It may use: gpt-4o-mini"
        " (GET /v1/models lists them)."
    )
    assert stack.stub.vendor_calls() == []


def test_messages_route_refuses_an_unknown_x_api_key(stack):
    refused_client = anthropic.Anthropic(
        base_url=stack.url, api_key="tg-no-such-key", max_retries=0
    )

    with pytest.raises(anthropic.AuthenticationError) as refused:
        refused_client.messages.create(
            model="claude-3-5-haiku", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )

    assert refused.value.body["error"]["code"] == "LM-1001"
    assert stack.stub.vendor_calls() == []
