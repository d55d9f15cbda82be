"""What real clients send, through the official SDKs unmodified, same shape and across.

The stub answers deterministically (its rules are in stubvendor/answers.py and the README):
given tools it calls the one `tool_choice` names, else the first (or the first two, when
parallel calls are allowed) with arguments built from their schemas, unless the last message
is a tool result; given a JSON response format it answers JSON (on Anthropic vendors JSON
mode is a forced tool, so there too the schema comes back filled); images cost 85 prompt
tokens; a repeated prefix is reported cached; reasoning models report 16 reasoning tokens.
Each test checks what reached the vendor (the stub's call log holds every body) and what the
tenant was billed.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pydantic
import pytest

from billing.models import Reservation
from core.money import TokenPrices
from tests.support.profiles import stub_profiles
from tests.support.stacks import own_stack
from tests.support.usage import settled

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string"}},
            "required": ["zone"],
        },
    },
}
WEATHER_TOOL = {  # the same tool, as an Anthropic client declares it
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": WEATHER["function"]["parameters"],
}
QUESTION = "What is the weather in Paris"  # 6 words
STUB_ARGS = {"city": "stub", "days": 1}  # what the stub fills the weather schema with
PNG = (  # a 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJ"
    "RU5ErkJggg=="
)
LONG_SYSTEM = " ".join(f"rule{i}" for i in range(80))  # 80 words: over the stub's cache floor

PRICES = {
    "gpt-4o-mini": {"input": 150_000, "output": 600_000, "cached": 75_000},
    "o4-mini": {"input": 1_100_000, "output": 4_400_000, "cached": 275_000},
    "claude-3-5-haiku": {"input": 800_000, "output": 4_000_000, "cached": 80_000},
}
CLAUDE_CACHE_WRITE = 1_000_000


def fidelity_profiles(stub_url: str) -> list[dict]:
    """The stub profiles with cached prices, a reasoning model, and a passthrough profile."""
    spec = stub_profiles(stub_url)
    openai_profile, anthropic_profile = spec[0], spec[1]
    openai_profile["models"][0]["cached_input_micro_per_mtok"] = PRICES["gpt-4o-mini"]["cached"]
    openai_profile["models"].append(
        {
            "name": "o4-mini",
            "input_micro_per_mtok": PRICES["o4-mini"]["input"],
            "output_micro_per_mtok": PRICES["o4-mini"]["output"],
            "cached_input_micro_per_mtok": PRICES["o4-mini"]["cached"],
        }
    )
    claude = anthropic_profile["models"][0]
    claude["cached_input_micro_per_mtok"] = PRICES["claude-3-5-haiku"]["cached"]
    claude["cache_write_micro_per_mtok"] = CLAUDE_CACHE_WRITE
    spec.append(
        {
            "name": "stub-passthrough",
            "kind": "openai_compatible",
            "base_url": f"{stub_url}/pass/v1",
            "passthrough": True,
            "models": [{"name": "pass-model", "upstream": "local-model"}],
        }
    )
    return spec


@pytest.fixture
def fidelity(transactional_db, shared_gateway, stub):
    return own_stack(shared_gateway, stub, fidelity_profiles(stub.url))


def bodies(stack) -> list[dict]:
    return [call["body"] for call in stack.stub.vendor_calls()]


def cost(model: str, *, tokens_in: int, tokens_out: int, cached: int = 0, written: int = 0):
    price = PRICES[model]
    return TokenPrices.configured(
        input_micro_per_mtok=price["input"],
        output_micro_per_mtok=price["output"],
        cached_input_micro_per_mtok=price["cached"],
        cache_write_micro_per_mtok=CLAUDE_CACHE_WRITE,
    ).cost_micro(
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        cache_read_tokens=cached,
        cache_write_tokens=written,
    )


# ---------------------------------------------------------------- same shape: fields unchanged


def test_every_documented_openai_field_reaches_an_openai_vendor_unchanged(fidelity):
    tenant = fidelity.tenant()
    sent = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": QUESTION, "name": "alice"},
        ],
        "tools": [WEATHER],
        "tool_choice": "none",
        "parallel_tool_calls": False,
        "seed": 7,
        "presence_penalty": 0,
        "frequency_penalty": 0.25,
        "logit_bias": {"1734": -10},
        "logprobs": True,
        "top_logprobs": 2,
        "stop": ["never"],
        "metadata": {"feature": "fidelity"},
        "temperature": 0.3,
        "top_p": 0.9,
        "service_tier": "auto",
        "max_completion_tokens": 40,
        "user": "end-user-1",
    }

    fidelity.openai(tenant).chat.completions.create(**sent)

    [received] = bodies(fidelity)
    owned = {"model", "user", "max_completion_tokens"}
    assert {k: v for k, v in received.items() if k not in owned} == {
        k: v for k, v in sent.items() if k not in owned
    }
    assert received["max_completion_tokens"] == 40
    assert received["user"] != "end-user-1"  # the caller label, never the raw id
    assert "max_tokens" not in received


def test_every_documented_anthropic_field_reaches_an_anthropic_vendor_unchanged(fidelity):
    tenant = fidelity.tenant()
    sent = {
        "model": "claude-3-5-haiku",
        "max_tokens": 300,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": QUESTION},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                ],
            }
        ],
        "tools": [WEATHER_TOOL],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "stop_sequences": ["never"],
        "thinking": {"type": "enabled", "budget_tokens": 128},
        "metadata": {"user_id": "end-user-1"},
    }

    sampling = {"top_k": 5, "top_p": 0.9}  # documented; this SDK takes them as extra fields
    message = fidelity.anthropic(tenant).messages.create(**sent, extra_body=sampling)
    sent.update(sampling)

    [received] = bodies(fidelity)
    assert received["model"] == "claude-3-5-haiku-latest"
    assert received["metadata"]["user_id"] != "end-user-1"
    assert {k: v for k, v in received.items() if k not in ("model", "metadata")} == {
        k: v for k, v in sent.items() if k not in ("model", "metadata")
    }
    assert [block.type for block in message.content] == ["thinking", "tool_use"]
    assert message.content[0].signature == "stub-signature"


def test_an_unknown_field_goes_only_to_a_profile_that_passes_unknown_fields_through(fidelity):
    tenant = fidelity.tenant()
    client = fidelity.openai(tenant)

    client.chat.completions.create(
        model="pass-model",
        messages=[{"role": "user", "content": QUESTION}],
        extra_body={"repetition_penalty": 1.1, "top_k": 20},
    )
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": QUESTION}],
            extra_body={"repetition_penalty": 1.1},
        )

    [received] = bodies(fidelity)
    assert (received["repetition_penalty"], received["top_k"]) == (1.1, 20)
    assert refused.value.body["code"] == "LM-2001"
    assert refused.value.body["message"] == (
        "'repetition_penalty' is not a field Tollgate knows, and profile stub-openai does not "
        "pass unknown fields through."
    )


# ---------------------------------------------------------------- tools, both SDKs


def openai_tool_loop(client, model: str, *, stream: bool):
    """Ask, run the tool the model called, send its result, get the final answer."""
    messages = [{"role": "user", "content": QUESTION}]
    if stream:
        with client.chat.completions.stream(
            model=model,
            messages=messages,
            tools=[WEATHER],
            stream_options={"include_usage": True},
        ) as s:
            first = s.get_final_completion()
    else:
        first = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER])
    [call] = first.choices[0].message.tool_calls
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    final = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER])
    return first, call, final


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize(
    ("model", "vendor_path"),
    [("gpt-4o-mini", "/v1/chat/completions"), ("claude-3-5-haiku", "/v1/messages")],
    ids=["same-shape", "to-anthropic"],
)
def test_openai_sdk_runs_a_tool_loop(fidelity, model, vendor_path, stream):
    tenant = fidelity.tenant()

    first, call, final = openai_tool_loop(fidelity.openai(tenant), model, stream=stream)

    assert first.choices[0].finish_reason == "tool_calls"
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", STUB_ARGS)
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.content.startswith("Hello from the stub model")
    calls = fidelity.stub.vendor_calls()
    assert [c["path"] for c in calls] == [vendor_path, vendor_path]
    if vendor_path == "/v1/messages":  # translated: Anthropic tools, a tool_result turn
        assert calls[0]["body"]["tools"] == [WEATHER_TOOL]
        assert calls[1]["body"]["messages"][-1] == {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
        }
    else:
        assert calls[0]["body"]["tools"] == [WEATHER]
    rows = settled(tenant, 2)
    assert [r.tokens_out for r in rows] == [
        first.usage.completion_tokens,
        final.usage.completion_tokens,
    ]
    assert [r.provider_cost_micro for r in rows] == [
        cost(model, tokens_in=r.tokens_in, tokens_out=r.tokens_out) for r in rows
    ]
    assert [r.tokens_in for r in rows] == [first.usage.prompt_tokens, final.usage.prompt_tokens]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize(
    ("model", "vendor_path"),
    [("claude-3-5-haiku", "/v1/messages"), ("gpt-4o-mini", "/v1/chat/completions")],
    ids=["same-shape", "to-openai"],
)
def test_anthropic_sdk_runs_a_tool_loop(fidelity, model, vendor_path, stream):
    tenant = fidelity.tenant()
    client = fidelity.anthropic(tenant)
    messages = [{"role": "user", "content": QUESTION}]
    ask = {"model": model, "max_tokens": 200, "tools": [WEATHER_TOOL]}

    if stream:
        with client.messages.stream(messages=messages, **ask) as s:
            deltas = [e.partial_json for e in s if e.type == "input_json"]
            first = s.get_final_message()
        assert "".join(deltas) == json.dumps(STUB_ARGS, separators=(",", ":"))
    else:
        first = client.messages.create(messages=messages, **ask)
    [use] = [block for block in first.content if block.type == "tool_use"]
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}],
        },
    ]
    final = client.messages.create(messages=messages, **ask)

    assert (first.stop_reason, use.name, use.input) == ("tool_use", "get_weather", STUB_ARGS)
    assert final.stop_reason == "end_turn"
    assert final.content[0].text.startswith("Hello from the stub model")
    calls = fidelity.stub.vendor_calls()
    assert [c["path"] for c in calls] == [vendor_path, vendor_path]
    if vendor_path == "/v1/chat/completions":  # translated: OpenAI tools, a tool message
        assert calls[0]["body"]["tools"] == [WEATHER]
        assert calls[1]["body"]["messages"][-1] == {
            "role": "tool",
            "tool_call_id": use.id,
            "content": "sunny",
        }
    rows = settled(tenant, 2)
    assert [(r.tokens_out, r.endpoint) for r in rows] == [
        (first.usage.output_tokens, "messages"),
        (final.usage.output_tokens, "messages"),
    ]


@pytest.mark.parametrize("model", ["gpt-4o-mini", "claude-3-5-haiku"])
def test_parallel_tool_calls_come_back_as_two_calls_streamed_and_not(fidelity, model):
    tenant = fidelity.tenant()
    client = fidelity.openai(tenant)
    ask = {
        "model": model,
        "messages": [{"role": "user", "content": QUESTION}],
        "tools": [WEATHER, TIME],
    }

    plain = client.chat.completions.create(**ask)
    with client.chat.completions.stream(**ask, stream_options={"include_usage": True}) as s:
        streamed = s.get_final_completion()

    for completion in (plain, streamed):
        calls = completion.choices[0].message.tool_calls
        assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
            ("get_weather", STUB_ARGS),
            ("get_time", {"zone": "stub"}),
        ]
        assert len({c.id for c in calls}) == 2
        assert completion.usage.completion_tokens == 10  # the stub: 5 tokens per call


# ---------------------------------------------------------------- JSON mode, images, reasoning


class Forecast(pydantic.BaseModel):
    city: str
    days: int
    sunny: bool


def test_json_mode_is_parsed_by_the_sdks_parse_helper(fidelity):
    tenant = fidelity.tenant()

    completion = fidelity.openai(tenant).chat.completions.parse(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": QUESTION}],
        response_format=Forecast,
    )

    assert completion.choices[0].message.parsed == Forecast(city="stub", days=1, sunny=True)
    [received] = bodies(fidelity)
    assert received["response_format"]["type"] == "json_schema"
    assert received["response_format"]["json_schema"]["name"] == "Forecast"


FORECAST_SCHEMA = {  # what the SDK's parse helpers send for Forecast
    "type": "object",
    "title": "Forecast",
    "properties": {
        "city": {"title": "City", "type": "string"},
        "days": {"title": "Days", "type": "integer"},
        "sunny": {"title": "Sunny", "type": "boolean"},
    },
    "required": ["city", "days", "sunny"],
    "additionalProperties": False,
}
JSON_TOOL = "tollgate_json_answer"
JSON_TOOL_DESCRIPTION = "Give your answer as this tool's input: a JSON object in its schema."
FORCED_JSON = {"type": "tool", "name": JSON_TOOL, "disable_parallel_tool_use": True}
STUB_FORECAST = '{"city":"stub","days":1,"sunny":true}'  # Forecast as the stub fills it
TOOL_TOKENS = 10  # the stub: each tool costs 10 prompt tokens
CALL_TOKENS = 5  # and each call 5 output tokens


def assert_json_call_billed(tenant, usage, *, words: int) -> int:
    """Check a forced JSON call's usage and usage row; return what it cost."""
    tokens_in = words + TOOL_TOKENS
    assert (usage.prompt_tokens, usage.completion_tokens) == (tokens_in, CALL_TOKENS)
    [row] = settled(tenant, 1)
    assert (row.tokens_in, row.tokens_out) == (tokens_in, CALL_TOKENS)
    assert row.provider_cost_micro == cost(
        "claude-3-5-haiku", tokens_in=tokens_in, tokens_out=CALL_TOKENS
    )
    return row.provider_cost_micro


def test_json_mode_onto_anthropic_is_a_forced_tool_the_parse_helper_reads(fidelity):
    tenant = fidelity.tenant()

    completion = fidelity.openai(tenant).chat.completions.parse(
        model="claude-3-5-haiku",
        messages=[{"role": "user", "content": QUESTION}],
        response_format=Forecast,
    )

    choice = completion.choices[0]
    assert choice.message.parsed == Forecast(city="stub", days=1, sunny=True)
    assert (choice.message.content, choice.message.tool_calls) == (STUB_FORECAST, None)
    assert choice.finish_reason == "stop"
    [call] = fidelity.stub.vendor_calls()
    assert call["path"] == "/v1/messages"
    assert "response_format" not in call["body"]
    assert call["body"]["tools"] == [
        {
            "name": JSON_TOOL,
            "description": JSON_TOOL_DESCRIPTION,
            "input_schema": FORECAST_SCHEMA,
            "strict": True,
        }
    ]
    assert call["body"]["tool_choice"] == FORCED_JSON
    # 16 x 0.8 + 5 x 4.0 = 32.8 -> 33
    assert assert_json_call_billed(tenant, completion.usage, words=6) == 33


def test_json_mode_onto_anthropic_streams_the_json_as_content(fidelity):
    tenant = fidelity.tenant()

    with fidelity.openai(tenant).chat.completions.stream(
        model="claude-3-5-haiku",
        messages=[{"role": "user", "content": QUESTION}],
        response_format=Forecast,
        stream_options={"include_usage": True},
    ) as stream:
        deltas = [event.delta for event in stream if event.type == "content.delta"]
        final = stream.get_final_completion()

    # The role chunk's empty content (as OpenAI sends it), then the stub's two input halves.
    half = len(STUB_FORECAST) // 2
    assert deltas == ["", STUB_FORECAST[:half], STUB_FORECAST[half:]]
    choice = final.choices[0]
    assert choice.message.parsed == Forecast(city="stub", days=1, sunny=True)
    assert (choice.finish_reason, choice.message.tool_calls) == ("stop", None)
    assert assert_json_call_billed(tenant, final.usage, words=6) == 33


def test_json_object_mode_onto_anthropic_streams_an_object(fidelity):
    tenant = fidelity.tenant()

    chunks = list(
        fidelity.openai(tenant).chat.completions.create(
            model="claude-3-5-haiku",
            messages=[{"role": "user", "content": f"{QUESTION}, in JSON"}],
            response_format={"type": "json_object"},
            stream=True,
            stream_options={"include_usage": True},
        )
    )

    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == "{}"  # the stub fills {"type": "object"}: no required keys
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    [received] = bodies(fidelity)
    assert received["tools"] == [
        {
            "name": JSON_TOOL,
            "description": JSON_TOOL_DESCRIPTION,
            "input_schema": {"type": "object"},
        }
    ]
    assert received["tool_choice"] == FORCED_JSON
    # 18 x 0.8 + 5 x 4.0 = 34.4 -> 35
    assert assert_json_call_billed(tenant, chunks[-1].usage, words=8) == 35


def test_json_mode_beside_tools_onto_anthropic_is_refused_before_the_vendor(fidelity):
    tenant = fidelity.tenant()

    with pytest.raises(openai.BadRequestError) as refused:
        fidelity.openai(tenant).chat.completions.create(
            model="claude-3-5-haiku",
            messages=[{"role": "user", "content": QUESTION}],
            response_format={"type": "json_object"},
            tools=[WEATHER],
        )

    assert refused.value.status_code == 400
    assert refused.value.body["code"] == "LM-2001"
    assert refused.value.body["message"] == (
        "'response_format' json_object beside tools cannot be translated for anthropic "
        "vendors: JSON mode is a forced tool call there, which excludes the client's tools."
    )
    assert fidelity.stub.vendor_calls() == []


@pytest.mark.parametrize(
    ("model", "vendor_part"),
    [
        (
            "gpt-4o-mini",
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        ),
        (
            "claude-3-5-haiku",
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        ),
    ],
    ids=["same-shape", "to-anthropic"],
)
def test_an_image_reaches_the_vendor_and_is_billed_as_its_tokens(fidelity, model, vendor_part):
    tenant = fidelity.tenant()

    completion = fidelity.openai(tenant).chat.completions.create(
        model=model,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": QUESTION},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                ],
            }
        ],
    )

    [received] = bodies(fidelity)
    assert received["messages"][-1]["content"][1] == vendor_part
    assert completion.usage.prompt_tokens == 6 + 85  # the words, and the stub's image price
    [row] = settled(tenant, 1)
    assert (row.tokens_in, row.provider_cost_micro) == (
        91,
        cost(model, tokens_in=91, tokens_out=row.tokens_out),
    )


@pytest.mark.parametrize("cap", ["max_completion_tokens", "max_tokens"])
def test_a_reasoning_model_is_capped_with_max_completion_tokens_and_its_reasoning_billed(
    fidelity, cap
):
    tenant = fidelity.tenant()

    completion = fidelity.openai(tenant).chat.completions.create(
        model="o4-mini",
        messages=[{"role": "user", "content": QUESTION}],
        reasoning_effort="low",
        **{cap: 500},
    )

    [received] = bodies(fidelity)
    assert (received["max_completion_tokens"], "max_tokens" in received) == (500, False)
    assert received["reasoning_effort"] == "low"
    assert completion.usage.completion_tokens_details.reasoning_tokens == 16
    [row] = settled(tenant, 1)
    assert (row.tokens_out, row.reasoning_tokens) == (8 + 16, 16)
    assert row.provider_cost_micro == cost("o4-mini", tokens_in=6, tokens_out=24)


# ---------------------------------------------------------------- prompt caching, n


def test_an_anthropic_cached_prompt_is_billed_at_the_cache_write_then_the_cached_price(fidelity):
    tenant = fidelity.tenant()
    client = fidelity.anthropic(tenant)
    system = [{"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}]

    answers = [
        client.messages.create(
            model="claude-3-5-haiku",
            max_tokens=100,
            system=system,
            messages=[{"role": "user", "content": QUESTION}],
        )
        for _ in range(2)
    ]

    usages = [
        (a.usage.input_tokens, a.usage.cache_creation_input_tokens, a.usage.cache_read_input_tokens)
        for a in answers
    ]
    assert usages == [(6, 80, 0), (6, 0, 80)]
    rows = settled(tenant, 2)
    assert [(r.tokens_in, r.cache_write_tokens, r.cache_read_tokens) for r in rows] == [
        (86, 80, 0),
        (86, 0, 80),
    ]
    expected = [
        cost("claude-3-5-haiku", tokens_in=86, tokens_out=8, written=80),
        cost("claude-3-5-haiku", tokens_in=86, tokens_out=8, cached=80),
    ]
    # 6 x 0.8 + 80 x 1.0 + 8 x 4.0 = 116.8 -> 117; 6 x 0.8 + 80 x 0.08 + 32 = 43.2 -> 44
    assert expected == [117, 44]
    assert [r.provider_cost_micro for r in rows] == expected
    committed = Reservation.objects.filter(wallet__account_id=tenant.account_id).order_by("id")
    assert [r.committed_micro for r in committed] == expected


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_an_openai_repeated_prefix_is_billed_at_the_cached_price(fidelity, stream):
    tenant = fidelity.tenant()
    client = fidelity.openai(tenant)
    prefix = [{"role": "system", "content": LONG_SYSTEM}]

    usages = []
    for question in ("first question here", "second question here"):
        messages = [*prefix, {"role": "user", "content": question}]
        if stream:
            chunks = list(
                client.chat.completions.create(
                    model="gpt-4o-mini",
                    messages=messages,
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )
            usages.append(chunks[-1].usage)
        else:
            usages.append(
                client.chat.completions.create(model="gpt-4o-mini", messages=messages).usage
            )

    assert [(u.prompt_tokens, u.prompt_tokens_details.cached_tokens) for u in usages] == [
        (83, 0),
        (83, 80),
    ]
    rows = settled(tenant, 2)
    assert [(r.tokens_in, r.cache_read_tokens) for r in rows] == [(83, 0), (83, 80)]
    # 83 x 0.15 + 8 x 0.6 = 17.25 -> 18; 3 x 0.15 + 80 x 0.075 + 4.8 = 11.25 -> 12
    assert [r.provider_cost_micro for r in rows] == [18, 12]


def test_an_anthropic_client_on_an_openai_vendor_sees_its_cached_prefix_and_pays_for_it(fidelity):
    tenant = fidelity.tenant()
    client = fidelity.anthropic(tenant)
    system = [{"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}]

    answers = [
        client.messages.create(
            model="gpt-4o-mini",
            max_tokens=100,
            system=system,
            messages=[{"role": "user", "content": question}],
        )
        for question in ("first question here", "second question here")
    ]

    # OpenAI caches prefixes by itself: the hint is not sent, the cached tokens come back.
    assert all("cache_control" not in str(body) for body in bodies(fidelity))
    assert [(a.usage.input_tokens, a.usage.cache_read_input_tokens) for a in answers] == [
        (83, 0),
        (3, 80),
    ]
    rows = settled(tenant, 2)
    assert [(r.tokens_in, r.cache_read_tokens, r.provider_cost_micro) for r in rows] == [
        (83, 0, 18),
        (83, 80, 12),
    ]


def test_anthropic_thinking_streams_through_with_its_signature(fidelity):
    tenant = fidelity.tenant()

    with fidelity.anthropic(tenant).messages.stream(
        model="claude-3-5-haiku",
        max_tokens=300,
        thinking={"type": "enabled", "budget_tokens": 128},
        messages=[{"role": "user", "content": QUESTION}],
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()

    assert "thinking" in kinds and "signature" in kinds
    assert [block.type for block in final.content] == ["thinking", "text"]
    assert (final.content[0].thinking, final.content[0].signature) == (
        "Stub thinking about it.",
        "stub-signature",
    )
    [received] = bodies(fidelity)
    assert (received["thinking"], received["max_tokens"]) == (
        {"type": "enabled", "budget_tokens": 128},
        300,
    )
    [row] = settled(tenant, 1)
    assert (row.tokens_out, row.provider_cost_micro) == (
        8 + 4,  # the answer and the thinking's four words
        cost("claude-3-5-haiku", tokens_in=6, tokens_out=12),
    )


def test_n_answers_are_held_for_and_charged_as_n(fidelity):
    tenant = fidelity.tenant()

    completion = fidelity.openai(tenant).chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=50,
        n=2,
    )

    assert [c.index for c in completion.choices] == [0, 1]
    assert completion.usage.completion_tokens == 16
    [received] = bodies(fidelity)
    assert (received["n"], received["max_tokens"]) == (2, 50)
    # The hold covers two answers: prompt bound 28 bytes + 8 per message + 8 = 44 tokens,
    # output 2 x 50: ceil(44 x 0.15 + 100 x 0.6) = 67, x 1.2 margin -> 81 (one answer: 45).
    [reservation] = Reservation.objects.filter(wallet__account_id=tenant.account_id)
    assert reservation.amount_micro == 81
    [row] = settled(tenant, 1)
    assert (row.tokens_in, row.tokens_out, row.provider_cost_micro) == (
        6,
        16,
        cost("gpt-4o-mini", tokens_in=6, tokens_out=16),
    )


# ---------------------------------------------------------------- each API, its own errors


def test_each_sdk_raises_its_typed_errors_for_our_refusals(fidelity):
    tenant = fidelity.tenant(wallet_micro=1)
    bad_openai = openai.OpenAI(base_url=f"{fidelity.url}/v1", api_key="tg-nope", max_retries=0)
    bad_anthropic = anthropic.Anthropic(base_url=fidelity.url, api_key="tg-nope", max_retries=0)
    hello = [{"role": "user", "content": QUESTION}]

    with pytest.raises(openai.AuthenticationError) as openai_auth:
        bad_openai.chat.completions.create(model="gpt-4o-mini", messages=hello)
    with pytest.raises(anthropic.AuthenticationError) as anthropic_auth:
        bad_anthropic.messages.create(model="claude-3-5-haiku", max_tokens=10, messages=hello)
    with pytest.raises(anthropic.APIStatusError) as anthropic_wallet:
        fidelity.anthropic(tenant).messages.create(
            model="claude-3-5-haiku", max_tokens=10, messages=hello
        )
    with pytest.raises(openai.APIStatusError) as openai_wallet:
        fidelity.openai(tenant).chat.completions.create(model="gpt-4o-mini", messages=hello)

    assert openai_auth.value.body["code"] == "LM-1001"
    assert anthropic_auth.value.body == {
        "type": "error",
        "error": {
            "type": "authentication_error",
            "message": "Missing, unknown, revoked or expired API key.",
            "code": "LM-1001",
        },
    }
    assert anthropic_wallet.value.status_code == 402
    assert anthropic_wallet.value.body["error"]["type"] == "billing_error"
    assert anthropic_wallet.value.body["error"]["code"] == "LM-4002"
    assert (openai_wallet.value.status_code, openai_wallet.value.body["code"]) == (402, "LM-4002")
    assert fidelity.stub.vendor_calls() == []


def test_a_rate_limited_request_is_each_sdks_rate_limit_error(
    transactional_db, spawn_gateway, stub, rate_window
):
    from accounts.models import ApiKey

    stack = own_stack(spawn_gateway(**rate_window.env), stub, fidelity_profiles(stub.url))
    tenant = stack.tenant()
    ApiKey.objects.filter(pk=tenant.api_key_id).update(rpm_limit=1)
    hello = [{"role": "user", "content": QUESTION}]
    stack.openai(tenant).chat.completions.create(model="gpt-4o-mini", messages=hello)

    with pytest.raises(openai.RateLimitError) as openai_limited:
        stack.openai(tenant).chat.completions.create(model="gpt-4o-mini", messages=hello)
    with pytest.raises(anthropic.RateLimitError) as anthropic_limited:
        stack.anthropic(tenant).messages.create(
            model="claude-3-5-haiku", max_tokens=10, messages=hello
        )

    assert rate_window.number() == 0  # all three in one window: the refusals are the limit's
    assert openai_limited.value.body["code"] == "LM-3001"
    assert anthropic_limited.value.body["error"]["type"] == "rate_limit_error"
    assert anthropic_limited.value.body["error"]["code"] == "LM-3001"
    assert int(anthropic_limited.value.response.headers["retry-after"]) >= 1
