"""Gemini API and Vertex AI profiles end to end: a real gateway on the stub, driven by the
official openai and anthropic SDKs (chat, Responses and messages; whole and streamed; tools
and JSON schemas), with exact usage and cost (thinking tokens billed as output, cached tokens
at the cached price), a prompt Gemini blocks refused after one call, and Vertex's access
token minted once at the stub's token endpoint and then reused."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from providers.models import ProviderProfile
from providers.services import profile_set_platform_key
from tests.support.google import key_text, service_account_key
from tests.support.profiles import PLATFORM_KEY
from tests.support.stacks import own_stack
from tests.support.usage import settled

WORDS = "Hello from the stub model gemini-2.5-flash reply ok"
INPUT, OUTPUT, CACHED = 300_000, 2_500_000, 75_000  # micro-USD per million tokens
GEMINI_PATH = "/v1beta/models/gemini-2.5-flash:generateContent"
VERTEX_PATH = (
    "/v1/projects/acme/locations/us-central1/publishers/google/models/gemini-2.5-flash"
    ":generateContent"
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def google_profiles(stub_url: str) -> list[dict]:
    model = {
        "upstream": "gemini-2.5-flash",
        "input_micro_per_mtok": INPUT,
        "output_micro_per_mtok": OUTPUT,
        "cached_input_micro_per_mtok": CACHED,
    }
    common = {"base_url": stub_url, "timeout_s": 5, "stream_idle_timeout_s": 2}
    return [
        {
            "name": "stub-gemini",
            "kind": "gemini",
            **common,
            "models": [{"name": "gm-flash", **model}],
        },
        {
            "name": "stub-vertex",
            "kind": "vertex",
            **common,
            "project": "acme",
            "region": "us-central1",
            "models": [{"name": "vx-flash", **model}],
        },
    ]


@pytest.fixture(scope="module")
def gateway(module_gateways):
    return module_gateways()


@pytest.fixture
def gstack(transactional_db, gateway, stub):
    """The gateway with both profiles; the vertex one's key a new service account's."""
    stack = own_stack(gateway, stub, google_profiles(stub.url))
    stack.service_account = service_account_key(stub.url)
    profile = ProviderProfile.objects.get(name="stub-vertex")
    profile_set_platform_key(profile=profile, api_key=key_text(stack.service_account))
    profile.save()
    gateway.reload()
    return stack


def cost(prompt: int, output: int, cached: int = 0) -> int:
    total = (prompt - cached) * INPUT + cached * CACHED + output * OUTPUT
    return -(-total // 1_000_000)


def token_grants(stack) -> list[dict]:
    return [c for c in stack.stub.calls() if c["shape"] == "google-token"]


# ---------------------------------------------------------------- the Gemini API


def test_chat_bills_thinking_as_output_and_cached_tokens_at_the_cached_price(gstack):
    tenant = gstack.tenant()
    client = gstack.openai(tenant)
    history = [
        {"role": "user", "content": "word " * 70},
        {"role": "assistant", "content": "ok"},
    ]

    first = client.chat.completions.create(
        model="gm-flash",
        messages=[*history, {"role": "user", "content": "one"}],
        reasoning_effort="low",
    )
    second = client.chat.completions.create(
        model="gm-flash", messages=[*history, {"role": "user", "content": "two more"}]
    )

    assert first.choices[0].message.content == WORDS
    assert (first.usage.prompt_tokens, first.usage.completion_tokens) == (72, 24)
    assert first.usage.completion_tokens_details.reasoning_tokens == 16
    assert (second.usage.prompt_tokens, second.usage.prompt_tokens_details.cached_tokens) == (
        73,
        71,
    )
    rows = settled(tenant, 2)
    assert [(r.tokens_in, r.tokens_out, r.reasoning_tokens, r.cache_read_tokens) for r in rows] == [
        (72, 24, 16, 0),
        (73, 8, 0, 71),
    ]
    assert [r.provider_cost_micro for r in rows] == [cost(72, 24), cost(73, 8, cached=71)]
    first_call = gstack.stub.vendor_calls()[0]
    assert (first_call["path"], first_call["key"], first_call["shape"]) == (
        GEMINI_PATH,
        PLATFORM_KEY,
        "gemini",
    )
    assert first_call["body"]["generationConfig"] == {
        "thinkingConfig": {"thinkingBudget": 1024},
        "maxOutputTokens": 4096,
    }


def test_a_streamed_chat_reports_its_usage(gstack):
    tenant = gstack.tenant()

    stream = gstack.openai(tenant).chat.completions.create(
        model="gm-flash",
        messages=[{"role": "user", "content": "hi there"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)

    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == WORDS
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (2, 8)
    [row] = settled(tenant, 1)
    assert (row.tokens_in, row.tokens_out, row.provider_cost_micro) == (2, 8, cost(2, 8))
    assert gstack.stub.vendor_calls()[0]["path"].endswith(":streamGenerateContent")


def test_tools_are_called_and_their_results_answered(gstack):
    client = gstack.openai(gstack.tenant())
    asked = [{"role": "user", "content": "weather in Oslo?"}]

    called = client.chat.completions.create(model="gm-flash", messages=asked, tools=[WEATHER])
    [call] = called.choices[0].message.tool_calls
    answered = client.chat.completions.create(
        model="gm-flash",
        messages=[
            *asked,
            called.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
        ],
        tools=[WEATHER],
    )

    assert called.choices[0].finish_reason == "tool_calls"
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        "call_0",
        "get_weather",
        {"city": "stub"},
    )
    assert answered.choices[0].message.content == WORDS
    sent = gstack.stub.vendor_calls()[1]["body"]["contents"]
    assert sent[1:] == [
        {
            "role": "model",
            "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "stub"}}}],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}}
            ],
        },
    ]


def test_a_json_schema_answer(gstack):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

    answer = gstack.openai(gstack.tenant()).chat.completions.create(
        model="gm-flash",
        messages=[{"role": "user", "content": "count"}],
        response_format={"type": "json_schema", "json_schema": {"name": "count", "schema": schema}},
    )

    assert json.loads(answer.choices[0].message.content) == {"n": 1}
    config = gstack.stub.vendor_calls()[0]["body"]["generationConfig"]
    assert (config["responseMimeType"], config["responseJsonSchema"]) == (
        "application/json",
        schema,
    )


def test_the_responses_api_whole_and_streamed(gstack):
    tenant = gstack.tenant()
    client = gstack.openai(tenant)

    whole = client.responses.create(model="gm-flash", input="hi there", instructions="be brief")
    with client.responses.stream(model="gm-flash", input="hi there") as stream:
        streamed = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()

    assert whole.output_text == streamed == WORDS
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (4, 8)
    assert (final.usage.input_tokens, final.usage.output_tokens) == (2, 8)
    assert [r.provider_cost_micro for r in settled(tenant, 2)] == [cost(4, 8), cost(2, 8)]
    assert gstack.stub.vendor_calls()[0]["body"]["systemInstruction"] == {
        "parts": [{"text": "be brief"}]
    }


def test_the_anthropic_sdk_whole_and_streamed(gstack):
    tenant = gstack.tenant()
    client = gstack.anthropic(tenant)
    asked = {"model": "gm-flash", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}

    whole = client.messages.create(**asked)
    with client.messages.stream(**asked) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()

    assert whole.content[0].text == streamed == WORDS
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (1, 8)
    assert (final.usage.output_tokens, final.stop_reason) == (8, "end_turn")
    assert [r.tokens_out for r in settled(tenant, 2)] == [8, 8]
    assert [c["max_tokens"] for c in gstack.stub.vendor_calls()] == [50, 50]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_blocked_prompt_is_refused_after_one_call(gstack, stream):
    tenant = gstack.tenant()

    with pytest.raises(openai.BadRequestError) as refused:
        gstack.openai(tenant).chat.completions.create(
            model="gm-flash",
            messages=[{"role": "user", "content": "BLOCKME please"}],
            stream=stream,
        )

    assert refused.value.body == {
        "message": "The upstream provider refused the request (HTTP 400): "
        "Gemini blocked the prompt (PROHIBITED_CONTENT)",
        "type": "invalid_request_error",
        "code": "LM-2002",
    }
    assert len(gstack.stub.vendor_calls()) == 1
    [row] = settled(tenant, 1)
    assert (row.status, row.error_code, row.provider_cost_micro) == (400, "LM-2002", 0)


def test_what_gemini_cannot_carry_is_refused_before_any_call(gstack):
    image = {"type": "image_url", "image_url": {"url": "https://example.test/cat.png"}}

    with pytest.raises(anthropic.BadRequestError) as refused:
        gstack.anthropic(gstack.tenant()).messages.create(
            model="gm-flash",
            max_tokens=20,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "url", "url": image["image_url"]["url"]},
                        }
                    ],
                }
            ],
        )

    assert (
        "'messages[0].content[0].image_url.url' an http(s) URL cannot be translated"
        in (refused.value.body["error"]["message"])
    )
    assert gstack.stub.vendor_calls() == []


# ---------------------------------------------------------------- Vertex AI


def test_vertex_calls_with_a_token_it_minted_once(gstack):
    tenant = gstack.tenant()
    client = gstack.openai(tenant)
    email = gstack.service_account["client_email"]

    whole = client.chat.completions.create(
        model="vx-flash", messages=[{"role": "user", "content": "hi there"}]
    )
    streamed = list(
        client.chat.completions.create(
            model="vx-flash", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )

    assert whole.choices[0].message.content == WORDS
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == WORDS
    [grant] = token_grants(gstack)
    assert (grant["key"], grant["status"]) == (email, 200)
    calls = gstack.stub.vendor_calls()
    assert [c["path"] for c in calls] == [
        VERTEX_PATH,
        VERTEX_PATH.replace(":generateContent", ":streamGenerateContent"),
    ]
    assert {(c["shape"], c["principal"], c["status"]) for c in calls} == {("vertex", email, 200)}
    assert calls[0]["key"] == calls[1]["key"] and calls[0]["key"].startswith("ya29.stub-")
    rows = settled(tenant, 2)
    assert [(r.provider, r.tokens_in, r.provider_cost_micro) for r in rows] == [
        ("stub-vertex", 2, cost(2, 8)),
        ("stub-vertex", 1, cost(1, 8)),
    ]
