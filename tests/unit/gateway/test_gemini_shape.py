"""The Gemini shape, both ways: an OpenAI chat body into generateContent (refusing, by name,
what Gemini cannot carry), and Gemini's answers, whole and streamed, back as OpenAI chat with
their usage (cached and thinking tokens included). Pure functions: no call is made."""

from __future__ import annotations

import orjson
import pytest

from core.errors import InvalidRequest
from gateway.adapters.base import CallTarget, VendorOptions
from gateway.adapters.gemini import GeminiProvider
from gateway.adapters.vertex import VertexProvider, region_of
from gateway.shapes import anthropic as anthropic_shape
from gateway.shapes import gemini, gemini_answers
from gateway.shapes import openai as openai_shape
from gateway.types import OPENAI, Usage

PNG = "iVBORw0KGgo="
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def translate(**body) -> dict:
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return gemini.chat_request_to_gemini({"model": "m", **body}, vendor_kind="gemini")


def refusal(**body) -> str:
    with pytest.raises(InvalidRequest) as refused:
        translate(**body)
    return refused.value.message


# ---------------------------------------------------------------- requests


def test_system_and_developer_messages_become_the_system_instruction_and_turns_alternate():
    out = translate(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
            {"role": "developer", "content": [{"type": "text", "text": "No jokes."}]},
            {"role": "user", "content": [{"type": "text", "text": "again"}]},
            {"role": "assistant", "content": "hello"},
        ]
    )

    assert out == {
        "systemInstruction": {"parts": [{"text": "Be brief."}, {"text": "No jokes."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "hi"}, {"text": "again"}]},
            {"role": "model", "parts": [{"text": "hello"}]},
        ],
    }


def test_images_files_and_audio_go_inline():
    out = translate(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                    {
                        "type": "file",
                        "file": {
                            "filename": "a.pdf",
                            "file_data": "data:application/pdf;base64,JVBERi0x",
                        },
                    },
                    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                ],
            }
        ]
    )

    assert out["contents"][0]["parts"] == [
        {"inlineData": {"mimeType": "image/png", "data": PNG}},
        {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0x"}},
        {"inlineData": {"mimeType": "audio/wav", "data": "UklGRg=="}},
    ]


def test_tools_calls_and_results_become_declarations_function_calls_and_responses():
    out = translate(
        messages=[
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_0",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
        ],
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )

    assert out["contents"][1:] == [
        {
            "role": "model",
            "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}}
            ],
        },
    ]
    assert out["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "The weather in a city",
                    "parametersJsonSchema": WEATHER["function"]["parameters"],
                }
            ]
        }
    ]
    assert out["toolConfig"] == {
        "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}
    }


@pytest.mark.parametrize(
    ("choice", "strict", "config"),
    [
        ("auto", False, None),
        ("auto", True, {"mode": "VALIDATED"}),
        ("none", False, {"mode": "NONE"}),
        ("required", False, {"mode": "ANY"}),
        (
            {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "required",
                    "tools": [{"type": "function", "function": {"name": "get_weather"}}],
                },
            },
            False,
            {"mode": "ANY", "allowedFunctionNames": ["get_weather"]},
        ),
    ],
)
def test_tool_choice_is_a_function_calling_mode(choice, strict, config):
    tool = {**WEATHER, "function": {**WEATHER["function"], "strict": strict}}

    out = translate(tools=[tool], tool_choice=choice)

    assert out.get("toolConfig") == (config and {"functionCallingConfig": config})


def test_generation_settings_json_schema_and_reasoning_effort():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}

    out = translate(
        temperature=0.5,
        top_p=0.9,
        stop="END",
        n=2,
        seed=7,
        presence_penalty=0.5,
        frequency_penalty=0,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "A", "schema": schema, "strict": True},
        },
        reasoning_effort="medium",
        max_tokens=99,
        user="end-user-1",
        prompt_cache_key="k",
    )

    assert out["generationConfig"] == {
        "temperature": 0.5,
        "topP": 0.9,
        "stopSequences": ["END"],
        "candidateCount": 2,
        "seed": 7,
        "presencePenalty": 0.5,
        "responseMimeType": "application/json",
        "responseJsonSchema": schema,
        "thinkingConfig": {"thinkingBudget": 8192},
    }
    body = orjson.loads(gemini.vendor_body(out, max_tokens=50))
    assert body["generationConfig"]["maxOutputTokens"] == 50
    assert "end-user-1" not in str(body)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}
                        ],
                    }
                ]
            },
            "'messages[0].content[0].image_url.url' an http(s) URL cannot be translated for gemini",
        ),
        ({"logprobs": True}, "'logprobs' cannot be translated for gemini vendors."),
        ({"logit_bias": {"1": 5}}, "'logit_bias' cannot be translated"),
        ({"reasoning_effort": "xhigh"}, "'reasoning_effort' xhigh cannot be translated"),
        (
            {"tools": [WEATHER], "parallel_tool_calls": False},
            "'parallel_tool_calls' false cannot be translated for gemini vendors: Gemini has no",
        ),
        (
            {"messages": [{"role": "tool", "tool_call_id": "call_9", "content": "x"}]},
            "'messages[0].tool_call_id' cannot be translated for gemini vendors: Gemini answers",
        ),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "'tools[0].type' custom"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "A", "description": "d", "schema": {}},
                }
            },
            "'response_format.json_schema.description' cannot be translated",
        ),
        ({"metadata": {"a": "b"}}, "'metadata' cannot be translated"),
    ],
)
def test_what_gemini_cannot_carry_is_refused_by_name(body, named):
    assert named in refusal(**body)


def test_neutral_values_ask_for_nothing():
    assert translate(n=1, logprobs=False, parallel_tool_calls=True, service_tier="auto") == {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}]
    }


# ---------------------------------------------------------------- answers

USAGE = {
    "promptTokenCount": 120,
    "cachedContentTokenCount": 64,
    "candidatesTokenCount": 8,
    "thoughtsTokenCount": 16,
    "totalTokenCount": 144,
}


def test_a_whole_answer_reads_as_chat_with_cached_and_thinking_tokens():
    answer = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "Hel"}, {"text": "lo"}]},
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": USAGE,
        "modelVersion": "gemini-2.5-flash",
        "responseId": "r1",
    }

    completion = gemini_answers.completion_from_vendor(answer, model="flash")

    assert (completion.shape, completion.text, completion.finish_reason) == (
        OPENAI,
        "Hello",
        "stop",
    )
    assert completion.usage == Usage(
        input_tokens=120, output_tokens=24, cache_read_tokens=64, reasoning_tokens=16
    )
    assert completion.data["usage"] == {
        "prompt_tokens": 120,
        "completion_tokens": 24,
        "total_tokens": 144,
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 16},
    }


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("OTHER", "stop"),
    ],
)
def test_finish_reasons(reason, finish):
    answer = {"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": reason}]}

    assert gemini_answers.chat_completion(answer)["choices"][0]["finish_reason"] == finish


def test_function_calls_get_stable_ids_and_render_for_anthropic_clients():
    answer = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {
                            "functionCall": {"name": "a", "args": {"x": 1}},
                            "thoughtSignature": "c2ln",
                        },
                        {"functionCall": {"name": "b", "args": {}}},
                    ],
                },
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 10},
    }

    chat = gemini_answers.chat_completion(answer)

    assert chat["choices"][0]["finish_reason"] == "tool_calls"
    assert chat["choices"][0]["message"]["tool_calls"] == [
        {"id": "call_0", "type": "function", "function": {"name": "a", "arguments": '{"x":1}'}},
        {"id": "call_1", "type": "function", "function": {"name": "b", "arguments": "{}"}},
    ]
    completion = gemini_answers.completion_from_vendor(answer, model="flash")
    message = orjson.loads(anthropic_shape.render_completion(completion, request_id="r", req=None))
    assert [block["id"] for block in message["content"]] == ["call_0", "call_1"]
    assert message["stop_reason"] == "tool_use"


def test_a_blocked_prompt_names_its_reason():
    blocked = {
        "promptFeedback": {"blockReason": "SAFETY"},
        "usageMetadata": {"promptTokenCount": 3},
    }

    assert gemini_answers.prompt_blocked(blocked) == "Gemini blocked the prompt (SAFETY)"
    assert gemini_answers.prompt_blocked({"candidates": [{}], "promptFeedback": {}}) is None


def test_a_stream_becomes_chunks_ending_with_the_finish_and_the_usage():
    decoder = gemini_answers.GeminiStreamToOpenAI()
    events = [
        {
            "candidates": [{"content": {"parts": [{"text": "Hel"}]}}],
            "usageMetadata": {"promptTokenCount": 120},
        },
        {"candidates": [{"content": {"parts": [{"functionCall": {"name": "a", "args": {}}}]}}]},
        {
            "candidates": [{"content": {"parts": [{"text": ""}]}, "finishReason": "STOP"}],
            "usageMetadata": USAGE,
        },
    ]

    chunks = [decoder.feed(event) for event in events]

    assert [c.event["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": "Hel"},
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "a", "arguments": "{}"},
                }
            ]
        },
        {},
    ]
    assert [c.finish_reason for c in chunks] == [None, None, "tool_calls"]
    assert decoder.done
    assert chunks[-1].event["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1].event["usage"]["completion_tokens"] == 24
    assert chunks[-1].usage == Usage(
        input_tokens=120, output_tokens=24, cache_read_tokens=64, reasoning_tokens=16
    )
    assert [c.generated for c in chunks] == [True, True, False]


def test_a_stream_of_two_candidates_is_done_when_both_finished():
    decoder = gemini_answers.GeminiStreamToOpenAI(candidates=2)

    decoder.feed(
        {
            "candidates": [
                {"content": {"parts": [{"text": "a"}]}, "finishReason": "STOP", "index": 0}
            ]
        }
    )
    assert not decoder.done
    decoder.feed(
        {
            "candidates": [
                {"content": {"parts": [{"text": "b"}]}, "finishReason": "STOP", "index": 1}
            ]
        }
    )
    assert decoder.done


# ---------------------------------------------------------------- the adapters build each call

REQ = openai_shape.parse_request(
    {"model": "flash", "messages": [{"role": "user", "content": "hi"}]}
)


def target(provider, key: str = "gm-key") -> CallTarget:
    shape, payload = provider.own_payload(OPENAI, REQ.body)
    assert shape == gemini.GEMINI
    return CallTarget(
        upstream_model="gemini-2.5-flash", api_key=key, max_tokens=64, payload=payload, shape=shape
    )


def test_the_gemini_call_names_the_model_in_its_url_and_the_key_in_its_header():
    provider = GeminiProvider(base_url="https://generativelanguage.googleapis.com", client=None)
    streamed = openai_shape.parse_request({**REQ.body, "stream": True})

    url, body, headers = provider.request(REQ, target(provider))
    stream_url, _, _ = provider.request(streamed, target(provider))

    assert (
        url
        == "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
    )
    assert stream_url.endswith("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
    assert headers["x-goog-api-key"] == "gm-key"
    assert orjson.loads(body) == {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "generationConfig": {"maxOutputTokens": 64},
    }


def test_the_vertex_call_names_project_region_and_model():
    options = VendorOptions(project="acme", region="europe-west4")
    provider = VertexProvider(base_url="", client=None, options=options)

    url, _, headers = provider.request(REQ, target(provider, key="ya29.token"))

    assert url == (
        "https://europe-west4-aiplatform.googleapis.com/v1/projects/acme/locations/europe-west4"
        "/publishers/google/models/gemini-2.5-flash:generateContent"
    )
    assert headers["Authorization"] == "Bearer ya29.token"
    assert region_of("", "https://us-central1-aiplatform.googleapis.com") == "us-central1"


def test_a_refusal_names_the_vertex_kind():
    provider = VertexProvider(
        base_url="", client=None, options=VendorOptions(project="p", region="r")
    )

    with pytest.raises(InvalidRequest, match="cannot be translated for vertex vendors"):
        provider.own_payload(OPENAI, {**REQ.body, "logit_bias": {"1": 1}})
