"""The Responses API served on chat-completions vendors: requests, whole answers, streams.

Every translated request is checked against the OpenAI SDK's chat params (unknown keys
refused), every response object and stream event against the SDK's Responses types, and the
streams are run through the SDK's own accumulator, the one `responses.stream()` uses; the
last tests drive the official client itself over a mock transport.
"""

from __future__ import annotations

import copy
import json
from typing import Any, cast, get_args

import httpx2
import openai
import pytest
from openai._models import construct_type, validate_type
from openai._types import omit
from openai.lib._parsing._responses import parse_response, type_to_text_format_param
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses import Response, ResponseStreamEvent, ResponseTextConfig
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import BaseModel

from gateway.shapes.requests_to_anthropic import openai_request_to_anthropic
from gateway.shapes.responses_answers import chat_completion_to_response, usage_from_chat
from gateway.shapes.responses_requests import responses_request_to_chat
from gateway.shapes.responses_streams import ChatStreamToResponses
from tests.unit.gateway.test_translate import refusal, sdk_errors

VENDOR = "groq"
RESPONSE_ID = "resp_abc"
CREATED = 1700000000

# ---------------------------------------------------------------- requests: Responses -> chat


def to_chat(**body: Any) -> dict:
    """Translate a Responses body that the SDK's own params type accepts, and check the chat
    body against the SDK's chat params."""
    body = {"model": "gpt-x", **body}
    assert sdk_errors(body, ResponseCreateParamsNonStreaming) == []
    out = responses_request_to_chat(body, vendor_kind=VENDOR)
    assert sdk_errors({**out, "model": "gpt-x"}, CompletionCreateParamsNonStreaming) == []
    return out


def refused(**body: Any) -> str:
    return refusal(responses_request_to_chat, {"model": "gpt-x", **body}, vendor_kind=VENDOR)


def cannot(path: str, kind: str | None = None) -> str:
    shown = f"'{path}' {kind}" if kind else f"'{path}'"
    return f"{shown} cannot be translated for {VENDOR} vendors."


WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": WEATHER_SCHEMA,
    "strict": True,
}
CHAT_WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": WEATHER_SCHEMA,
        "strict": True,
    },
}


def test_instructions_become_a_leading_system_message_and_a_string_input_one_user_message():
    assert to_chat(instructions="Be brief.", input="Hi") == {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ]
    }


def test_owned_fields_are_left_out_and_never_refused():
    out = to_chat(
        input="Hi",
        max_output_tokens=50,
        stream=False,
        user="end-user-7",
        safety_identifier="end-user-7",
        store=True,
        stream_options={"include_obfuscation": False},
    )

    assert out == {"messages": [{"role": "user", "content": "Hi"}]}
    assert "end-user-7" not in json.dumps(out)
    assert responses_request_to_chat(
        {"model": "a,b", "input": "Hi", "fallback_model": "c"}, vendor_kind=VENDOR
    ) == {"messages": [{"role": "user", "content": "Hi"}]}


def test_the_stateful_fields_the_caller_refuses_first_are_not_refused_again():
    body = {"model": "gpt-x", "input": "Hi", "previous_response_id": "resp_0", "background": True}

    assert responses_request_to_chat(body, vendor_kind=VENDOR) == {
        "messages": [{"role": "user", "content": "Hi"}]
    }


def test_sampling_and_cache_fields_become_their_chat_equivalents():
    out = to_chat(
        input="Hi",
        temperature=0.4,
        top_p=0.9,
        metadata={"job": "nightly"},
        service_tier="flex",
        prompt_cache_key="tenant-1",
        prompt_cache_retention="24h",
    )

    assert out == {
        "messages": [{"role": "user", "content": "Hi"}],
        "temperature": 0.4,
        "top_p": 0.9,
        "metadata": {"job": "nightly"},
        "service_tier": "flex",
        "prompt_cache_key": "tenant-1",
        "prompt_cache_retention": "24h",
    }


def test_message_items_of_every_role_become_chat_messages_without_their_ids():
    out = to_chat(
        input=[
            {"role": "developer", "content": "Answer in French."},
            {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "S"}]},
            {
                "type": "message",
                "role": "user",
                "status": "completed",
                "content": [{"type": "input_text", "text": "Hi"}],
            },
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "phase": "final_answer",
                "content": [
                    {"type": "output_text", "text": "Bonjour", "annotations": [], "logprobs": []}
                ],
            },
            {"role": "assistant", "content": "Ça va ?"},
            {"role": "user", "content": "Oui"},
        ]
    )

    assert out["messages"] == [
        {"role": "developer", "content": "Answer in French."},
        {"role": "system", "content": [{"type": "text", "text": "S"}]},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Bonjour"}]},
        {"role": "assistant", "content": "Ça va ?"},
        {"role": "user", "content": "Oui"},
    ]


def test_an_assistant_refusal_part_becomes_the_chat_refusal():
    out = to_chat(
        input=[
            {"role": "user", "content": "Do the bad thing."},
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "refusal", "refusal": "I can't help with that."}],
            },
        ]
    )

    assert out["messages"][1] == {
        "role": "assistant",
        "content": None,
        "refusal": "I can't help with that.",
    }


def test_images_and_files_become_chat_parts():
    out = to_chat(
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Compare."},
                    {
                        "type": "input_image",
                        "image_url": "https://example.com/a.png",
                        "detail": "high",
                    },
                    {
                        "type": "input_image",
                        "image_url": "data:image/png;base64,iVBORw0KGgo=",
                        "detail": "auto",
                    },
                    {
                        "type": "input_file",
                        "file_data": "data:application/pdf;base64,JVBERi0=",
                        "filename": "report.pdf",
                    },
                    {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0="},
                ],
            }
        ]
    )

    assert out["messages"][0]["content"] == [
        {"type": "text", "text": "Compare."},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "high"}},
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"},
        },
        {
            "type": "file",
            "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "report.pdf"},
        },
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0="}},
    ]


@pytest.mark.parametrize(
    ("part", "shown"),
    [
        ({"type": "input_image", "file_id": "file-1", "detail": "auto"}, cannot("P.file_id")),
        ({"type": "input_image", "image_url": "ftp://x/a.png"}, cannot("P.image_url")),
        ({"type": "input_file", "file_id": "file-1"}, cannot("P.file_id")),
        ({"type": "input_file", "file_url": "https://x/a.pdf"}, cannot("P.file_url")),
        ({"type": "input_file", "file_data": "JVBERi0=", "detail": "high"}, cannot("P.detail")),
        (
            {"type": "input_text", "text": "x", "prompt_cache_breakpoint": {"mode": "explicit"}},
            cannot("P.prompt_cache_breakpoint"),
        ),
        ({"type": "output_text", "text": "x"}, cannot("P.type", "output_text")),
    ],
)
def test_user_parts_a_chat_vendor_cannot_take_are_refused_by_path(part, shown):
    message = refused(input=[{"role": "user", "content": [part]}])

    assert message == shown.replace("'P", "'input[0].content[0]")


def test_system_and_assistant_parts_other_than_text_are_refused():
    image = {"type": "input_image", "image_url": "https://x/a.png", "detail": "auto"}
    cited = {
        "type": "output_text",
        "text": "See",
        "annotations": [{"type": "url_citation", "url": "u", "title": "t", "start_index": 0}],
    }

    assert refused(input=[{"role": "system", "content": [image]}]) == cannot(
        "input[0].content[0].type", "input_image"
    )
    assert refused(input=[{"role": "assistant", "content": [image]}]) == cannot(
        "input[0].content[0].type", "input_image"
    )
    assert refused(input=[{"role": "assistant", "content": [cited]}]) == cannot(
        "input[0].content[0].annotations"
    )
    assert refused(input=[{"role": "critic", "content": "x"}]) == cannot("input[0].role", "critic")


def test_a_tool_loop_merges_the_calls_and_the_text_before_them_into_one_assistant_message():
    out = to_chat(
        input=[
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
            },
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_a",
                "name": "get_weather",
                "arguments": '{"city":"Paris"}',
                "status": "completed",
            },
            {
                "type": "function_call",
                "call_id": "call_b",
                "name": "get_weather",
                "arguments": '{"city":"Rome"}',
            },
            {"type": "function_call_output", "call_id": "call_a", "output": "18C"},
            {
                "type": "function_call_output",
                "call_id": "call_b",
                "output": [{"type": "input_text", "text": "21C"}],
            },
        ],
        tools=[WEATHER_TOOL],
    )

    assert out["messages"] == [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Checking."}],
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "18C"},
        {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "21C"}]},
    ]


def test_calls_after_a_user_turn_become_an_assistant_message_without_content():
    call = {"type": "function_call", "call_id": "call_a", "name": "f", "arguments": "{}"}

    out = to_chat(input=[{"role": "user", "content": "Go"}, call])

    assert out["messages"][1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }


def test_calls_separated_by_their_outputs_are_two_assistant_messages():
    def call(call_id: str) -> dict:
        return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}

    def output(call_id: str) -> dict:
        return {"type": "function_call_output", "call_id": call_id, "output": "ok"}

    out = to_chat(input=[{"role": "user", "content": "Go"}, call("a"), output("a"), call("b")])

    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert out["messages"][3]["tool_calls"][0]["id"] == "b"


def test_a_function_call_output_with_an_image_is_refused():
    output = [{"type": "input_image", "image_url": "https://x/a.png", "detail": "auto"}]

    message = refused(input=[{"type": "function_call_output", "call_id": "c", "output": output}])

    assert message == cannot("input[0].output[0].type", "input_image")


def test_a_function_call_with_a_namespace_is_refused_and_a_direct_caller_accepted():
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}

    assert refused(input=[{**call, "namespace": "tools"}]) == cannot("input[0].namespace")
    assert to_chat(input=[{**call, "caller": {"type": "direct"}}])["messages"][0]["tool_calls"]


def test_reasoning_items_are_dropped():
    out = to_chat(
        input=[
            {"role": "user", "content": "Hi"},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "x"}]},
        ]
    )

    assert out["messages"] == [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize(
    "item",
    [
        {"type": "item_reference", "id": "msg_0"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": None},
        {"type": "file_search_call", "id": "fs_1", "queries": [], "status": "completed"},
        {"type": "computer_call_output", "call_id": "c", "output": {}},
        {"type": "mcp_call", "id": "mcp_1", "name": "x", "arguments": "{}", "server_label": "s"},
        {"type": "custom_tool_call", "call_id": "c", "name": "x", "input": "y"},
    ],
)
def test_input_items_without_a_chat_counterpart_are_refused_by_path_and_type(item):
    message = refused(input=[{"role": "user", "content": "Hi"}, item])

    assert message == cannot("input[1].type", item["type"])


def test_function_tools_become_chat_tools_with_only_what_was_given():
    out = to_chat(
        input="Hi",
        tools=[
            WEATHER_TOOL,
            {
                "type": "function",
                "name": "now",
                "parameters": None,
                "strict": None,
                "defer_loading": False,
                "allowed_callers": ["direct"],
            },
        ],
    )

    assert out["tools"] == [
        CHAT_WEATHER_TOOL,
        {"type": "function", "function": {"name": "now"}},
    ]


@pytest.mark.parametrize(
    ("tool", "shown"),
    [
        ({"type": "web_search"}, cannot("tools[0].type", "web_search")),
        (
            {"type": "file_search", "vector_store_ids": ["vs_1"]},
            cannot("tools[0].type", "file_search"),
        ),
        ({"type": "custom", "name": "sql"}, cannot("tools[0].type", "custom")),
        (
            {**WEATHER_TOOL, "output_schema": {"type": "object"}},
            cannot("tools[0].output_schema.type", "object"),
        ),
        ({**WEATHER_TOOL, "allowed_callers": ["programmatic"]}, cannot("tools[0].allowed_callers")),
    ],
)
def test_tools_a_chat_vendor_cannot_run_are_refused(tool, shown):
    assert refused(input="Hi", tools=[tool]) == shown


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        (
            {"type": "function", "name": "get_weather"},
            {"type": "function", "function": {"name": "get_weather"}},
        ),
    ],
)
def test_tool_choice_becomes_chat(choice, expected):
    out = to_chat(input="Hi", tools=[WEATHER_TOOL], tool_choice=choice, parallel_tool_calls=False)

    assert out["tool_choice"] == expected
    assert out["parallel_tool_calls"] is False


def test_tool_choice_auto_and_parallel_tool_calls_without_tools_mean_nothing():
    out = to_chat(input="Hi", tool_choice="auto", parallel_tool_calls=True, tools=[])

    assert out == {"messages": [{"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize(
    ("choice", "shown"),
    [
        ({"type": "web_search_preview"}, cannot("tool_choice.type", "web_search_preview")),
        (
            {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "x"}]},
            cannot("tool_choice.type", "allowed_tools"),
        ),
        ({"type": "custom", "name": "sql"}, cannot("tool_choice.type", "custom")),
    ],
)
def test_tool_choices_other_than_a_function_are_refused(choice, shown):
    assert refused(input="Hi", tools=[WEATHER_TOOL], tool_choice=choice) == shown


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ({"format": {"type": "text"}}, {}),
        ({"format": {"type": "json_object"}}, {"response_format": {"type": "json_object"}}),
        (
            {
                "format": {
                    "type": "json_schema",
                    "name": "weather",
                    "schema": WEATHER_SCHEMA,
                    "strict": True,
                    "description": "A city.",
                },
                "verbosity": "low",
            },
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "weather",
                        "schema": WEATHER_SCHEMA,
                        "strict": True,
                        "description": "A city.",
                    },
                },
                "verbosity": "low",
            },
        ),
        (
            {"format": {"type": "json_schema", "name": "w", "schema": WEATHER_SCHEMA}},
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "w", "schema": WEATHER_SCHEMA},
                }
            },
        ),
    ],
)
def test_text_format_becomes_response_format(text, expected):
    out = to_chat(input="Hi", text=text)

    assert {k: v for k, v in out.items() if k != "messages"} == expected


def test_the_sdks_pydantic_text_format_becomes_a_strict_json_schema():
    form = type_to_text_format_param(Weather)

    out = to_chat(input="Hi", text={"format": form})

    assert out["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Weather", "schema": form["schema"], "strict": True},
    }


@pytest.mark.parametrize(
    ("reasoning", "expected"),
    [
        ({"effort": "low"}, {"reasoning_effort": "low"}),
        ({"effort": "high", "summary": None, "context": "auto"}, {"reasoning_effort": "high"}),
        ({}, {}),
        ({"effort": None, "summary": None}, {}),
    ],
)
def test_reasoning_effort_becomes_chat_reasoning_effort(reasoning, expected):
    out = to_chat(input="Hi", reasoning=reasoning)

    assert {k: v for k, v in out.items() if k != "messages"} == expected
    assert to_chat(input="Hi", reasoning=None) == {"messages": [{"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize(
    ("reasoning", "shown"),
    [
        ({"effort": "low", "summary": "auto"}, cannot("reasoning.summary", "auto")),
        ({"generate_summary": "concise"}, cannot("reasoning.generate_summary", "concise")),
        ({"context": "all_turns"}, cannot("reasoning.context")),
        ({"mode": "pro"}, cannot("reasoning.mode")),
    ],
)
def test_reasoning_summaries_and_modes_are_refused(reasoning, shown):
    assert refused(input="Hi", reasoning=reasoning) == shown


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"include": None}, {}),
        ({"include": []}, {}),
        ({"include": ["reasoning.encrypted_content"]}, {}),
        ({"top_logprobs": 0}, {}),
        ({"top_logprobs": 3}, {"logprobs": True, "top_logprobs": 3}),
        (
            {"include": ["message.output_text.logprobs"], "top_logprobs": 2},
            {"logprobs": True, "top_logprobs": 2},
        ),
        ({"include": ["message.output_text.logprobs"]}, {"logprobs": True}),
    ],
)
def test_include_and_top_logprobs_become_chat_logprobs(fields, expected):
    out = to_chat(input="Hi", **fields)

    assert {k: v for k, v in out.items() if k != "messages"} == expected


@pytest.mark.parametrize(
    ("fields", "shown"),
    [
        (
            {"include": ["file_search_call.results"]},
            cannot("include[0]", "file_search_call.results"),
        ),
        (
            {"include": ["reasoning.encrypted_content", "message.input_image.image_url"]},
            cannot("include[1]", "message.input_image.image_url"),
        ),
        ({"truncation": "auto"}, cannot("truncation", "auto")),
        ({"max_tool_calls": 3}, cannot("max_tool_calls")),
        ({"service_tier": "ultrafast"}, cannot("service_tier", "ultrafast")),
        ({"moderation": {"model": "omni-moderation-latest"}}, cannot("moderation")),
        ({"context_management": [{"type": "compaction"}]}, cannot("context_management")),
        ({"prompt_cache_options": {"mode": "explicit"}}, cannot("prompt_cache_options")),
        ({"image": {"context_compression": "enabled"}}, cannot("image")),
        ({"text": {"format": {"type": "grammar"}}}, cannot("text.format.type", "grammar")),
    ],
)
def test_top_level_fields_without_a_chat_counterpart_are_refused_naming_them(fields, shown):
    assert refused(input="Hi", **fields) == shown


def test_an_unknown_top_level_field_is_refused_and_neutral_defaults_accepted():
    assert refused(input="Hi", frobnicate=1) == cannot("frobnicate")
    assert to_chat(
        input="Hi",
        truncation="disabled",
        max_tool_calls=None,
        image={"context_compression": "auto"},
        prompt_cache_options={"mode": "implicit", "ttl": "30m"},
        context_management=[],
    ) == {"messages": [{"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "'input' must be a string or a list."),
        ({"input": 3}, "'input' must be a string or a list."),
        ({"input": ["Hi"]}, "'input[0]' must be an object."),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]},
            "'input[0].arguments' must be a string.",
        ),
        (
            {"input": [{"type": "function_call_output", "output": "x"}]},
            "'input[0].call_id' must be a string.",
        ),
        ({"input": "Hi", "parallel_tool_calls": "yes"}, "'parallel_tool_calls' must be a boolean."),
        ({"input": "Hi", "top_logprobs": "3"}, "'top_logprobs' must be an integer."),
        ({"input": "Hi", "instructions": ["x"]}, "'instructions' must be a string."),
    ],
)
def test_malformed_responses_bodies_are_invalid_requests(body, message):
    assert refused(**body) == message


def test_a_responses_tool_loop_reaches_an_anthropic_vendor_through_both_translations():
    chat = to_chat(
        instructions="Be brief.",
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "function_call",
                "call_id": "call_a",
                "name": "get_weather",
                "arguments": "{}",
            },
            {"type": "function_call_output", "call_id": "call_a", "output": "18C"},
        ],
        tools=[WEATHER_TOOL],
    )

    out = openai_request_to_anthropic(chat, vendor_kind="anthropic")

    assert out["system"] == "Be brief."
    assert out["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "call_a", "content": "18C"}],
        },
    ]
    assert out["tools"][0]["name"] == "get_weather"


# ---------------------------------------------------------------- answers: chat -> Responses

REQUEST = {"model": "gpt-x", "input": "Hi"}
# What a response echoes of REQUEST: the API's defaults for everything it did not send.
ECHO: dict[str, Any] = {
    "instructions": None,
    "tools": [],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "temperature": None,
    "top_p": None,
    "max_output_tokens": None,
    "metadata": {},
    "text": {"format": {"type": "text"}},
    "reasoning": {"effort": None, "summary": None},
    "store": False,
    "truncation": "disabled",
    "previous_response_id": None,
    "user": None,
}
CHAT_USAGE = {
    "prompt_tokens": 30,
    "completion_tokens": 12,
    "total_tokens": 42,
    "prompt_tokens_details": {"cached_tokens": 20},
    "completion_tokens_details": {"reasoning_tokens": 4},
}
USAGE = {
    "input_tokens": 30,
    "input_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 0},
    "output_tokens": 12,
    "output_tokens_details": {"reasoning_tokens": 4},
    "total_tokens": 42,
}


def completion(message: dict, finish_reason: str = "stop", **choice: Any) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": CREATED,
        "model": "vendor-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "refusal": None, **message},
                "finish_reason": finish_reason,
                "logprobs": None,
                **choice,
            }
        ],
        "usage": CHAT_USAGE,
    }


def call(call_id: str, city: str) -> dict:
    arguments = json.dumps({"city": city}, separators=(",", ":"))
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": arguments},
    }


def typed_part(response: dict) -> dict:
    """Return what the SDK's Response type can check key by key. The API echoes `store`,
    which the type lacks (the SDK keeps it as an extra); `text` is validated here on its own,
    as its json_schema `schema` is an aliased field the key check cannot follow."""
    ResponseTextConfig.model_validate(response["text"])
    return {k: v for k, v in response.items() if k not in ("store", "text")}


def response_errors(response: dict) -> list[str]:
    return sdk_errors(typed_part(response), Response)


def answer(data: dict, request: dict = REQUEST) -> dict:
    """Translate a chat.completion (checked against the SDK's type first) and check the
    response against the SDK's Response type, unknown keys refused."""
    ChatCompletion.model_validate(data)
    out = chat_completion_to_response(data, response_id=RESPONSE_ID, model="gpt-x", request=request)
    Response.model_validate(out)
    assert response_errors(out) == []
    return out


def text_item(text: str, status: str = "completed", logprobs: list | None = None) -> dict:
    return {
        "type": "message",
        "id": f"msg_{RESPONSE_ID}",
        "status": status,
        "role": "assistant",
        "content": [
            {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}
        ],
    }


def call_item(index: int, call_id: str, city: str, status: str = "completed") -> dict:
    return {
        "type": "function_call",
        "id": f"fc_{RESPONSE_ID}_{index}",
        "call_id": call_id,
        "name": "get_weather",
        "arguments": json.dumps({"city": city}, separators=(",", ":")),
        "status": status,
    }


def test_a_text_answer_becomes_a_completed_response_with_one_message():
    out = answer(completion({"content": "Hello!"}))

    assert out == {
        "id": RESPONSE_ID,
        "object": "response",
        "created_at": CREATED,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "model": "gpt-x",
        "output": [text_item("Hello!")],
        "usage": USAGE,
        **ECHO,
    }
    assert Response.model_validate(out).output_text == "Hello!"


def test_parallel_tool_calls_become_function_call_items_in_order():
    data = completion(
        {"content": None, "tool_calls": [call("call_a", "Paris"), call("call_b", "Rome")]},
        "tool_calls",
    )

    out = answer(data)

    assert out["status"] == "completed"
    assert out["output"] == [call_item(0, "call_a", "Paris"), call_item(1, "call_b", "Rome")]
    assert Response.model_validate(out).output_text == ""


def test_text_said_with_a_tool_call_comes_first_as_its_message():
    data = completion(
        {"content": "Checking.", "tool_calls": [call("call_a", "Paris")]}, "tool_calls"
    )

    assert answer(data)["output"] == [text_item("Checking."), call_item(0, "call_a", "Paris")]


def test_a_refusal_is_a_refusal_part_of_the_message():
    out = answer(completion({"content": None, "refusal": "I can't help with that."}))

    assert out["output"] == [
        {
            "type": "message",
            "id": f"msg_{RESPONSE_ID}",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "refusal", "refusal": "I can't help with that."}],
        }
    ]


def test_an_empty_answer_has_no_output_items():
    assert answer(completion({"content": ""}))["output"] == []


@pytest.mark.parametrize(
    ("finish_reason", "reason"),
    [("length", "max_output_tokens"), ("content_filter", "content_filter")],
)
def test_a_cut_answer_is_incomplete_and_so_is_its_last_item(finish_reason, reason):
    data = completion(
        {"content": "Checking.", "tool_calls": [call("call_a", "Par")]}, finish_reason
    )

    out = answer(data)

    assert (out["status"], out["incomplete_details"]) == ("incomplete", {"reason": reason})
    assert [item["status"] for item in out["output"]] == ["completed", "incomplete"]


def test_the_request_settings_are_echoed():
    request = {
        "model": "gpt-x",
        "input": "Hi",
        "instructions": "Be brief.",
        "tools": [WEATHER_TOOL],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "temperature": 0.2,
        "top_p": 0.5,
        "max_output_tokens": 100,
        "metadata": {"job": "nightly"},
        "text": {"verbosity": "low"},
        "reasoning": {"effort": "low"},
        "user": "end-user-7",
    }

    out = answer(completion({"content": "Hi"}), request)

    assert {key: out[key] for key in ECHO} == {
        **ECHO,
        "instructions": "Be brief.",
        "tools": [WEATHER_TOOL],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "temperature": 0.2,
        "top_p": 0.5,
        "max_output_tokens": 100,
        "metadata": {"job": "nightly"},
        "text": {"format": {"type": "text"}, "verbosity": "low"},
        "reasoning": {"effort": "low", "summary": None},
    }


def test_token_logprobs_come_back_on_the_output_text_part():
    logprobs = {
        "content": [
            {
                "token": "Hi",
                "bytes": [72, 105],
                "logprob": -0.1,
                "top_logprobs": [{"token": "Hi", "bytes": [72, 105], "logprob": -0.1}],
            },
            {"token": "é", "bytes": None, "logprob": -2.0, "top_logprobs": []},
        ],
        "refusal": None,
    }

    out = answer(completion({"content": "Hié"}, logprobs=logprobs))

    assert out["output"][0]["content"][0]["logprobs"] == [
        {
            "token": "Hi",
            "bytes": [72, 105],
            "logprob": -0.1,
            "top_logprobs": [{"token": "Hi", "bytes": [72, 105], "logprob": -0.1}],
        },
        {"token": "é", "bytes": [195, 169], "logprob": -2.0, "top_logprobs": []},
    ]


def test_usage_maps_cached_and_reasoning_tokens_and_missing_counts_are_zero():
    assert usage_from_chat(CHAT_USAGE) == USAGE
    assert usage_from_chat(
        {"prompt_tokens": 5, "completion_tokens": 2, "prompt_tokens_details": None}
    ) == {
        "input_tokens": 5,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 2,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 7,
    }
    assert usage_from_chat({})["total_tokens"] == 0


def test_without_created_the_response_is_dated_now():
    data = completion({"content": "Hi"})
    data["created"] = 0

    assert (
        chat_completion_to_response(data, response_id=RESPONSE_ID, model="gpt-x", request=REQUEST)[
            "created_at"
        ]
        > CREATED
    )


def test_an_answer_the_request_cannot_have_caused_is_a_value_error():
    custom = {"id": "c", "type": "custom", "custom": {"name": "sql", "input": "x"}}
    no_id = {"type": "function", "function": {"name": "f", "arguments": "{}"}}

    for data in (
        {**completion({"content": "x"}), "choices": []},
        completion({"content": None, "tool_calls": [custom]}),
        completion({"content": None, "tool_calls": [no_id]}),
    ):
        with pytest.raises(ValueError):
            chat_completion_to_response(
                data, response_id=RESPONSE_ID, model="gpt-x", request=REQUEST
            )


class Weather(BaseModel):
    city: str
    celsius: int


def test_a_json_schema_answer_is_parsed_by_the_sdk_into_the_pydantic_model():
    request = {**REQUEST, "text": {"format": type_to_text_format_param(Weather)}}

    out = answer(completion({"content": '{"city":"Paris","celsius":18}'}), request)

    parsed = parse_response(
        text_format=Weather, input_tools=omit, response=Response.model_validate(out)
    )
    assert parsed.output_parsed == Weather(city="Paris", celsius=18)


# ---------------------------------------------------------------- streams

EVENT_CLASSES = {
    get_args(option.model_fields["type"].annotation)[0]: option
    for option in get_args(get_args(ResponseStreamEvent)[0])
}
# The API sends these; the SDK's types lack them (and keep them as extras).
EVENT_EXTRAS = {"response.function_call_arguments.done": ("name",)}


def chunk(
    delta: dict | None = None,
    finish_reason: str | None = None,
    *,
    logprobs: dict | None = None,
    usage: dict | None = None,
) -> dict:
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": logprobs}]
    )
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "vendor-model",
        "choices": choices,
        "usage": usage,
    }


def fragment(index: int, arguments: str, **first: Any) -> dict:
    return {"tool_calls": [{"index": index, **first, "function": {"arguments": arguments}}]}


def call_start(index: int, call_id: str, name: str = "get_weather") -> dict:
    return {
        "tool_calls": [
            {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
        ]
    }


def assert_sdk_event(event: dict) -> None:
    validate_type(type_=ResponseStreamEvent, value=event)  # type: ignore[arg-type]  # a union
    fields = {k: v for k, v in event.items() if k not in EVENT_EXTRAS.get(event["type"], ())}
    if "response" in fields:
        fields["response"] = typed_part(fields["response"])
    assert sdk_errors(fields, EVENT_CLASSES[event["type"]]) == []


def translate_stream(chunks: list[dict], request: dict = REQUEST) -> list[dict]:
    translator = ChatStreamToResponses(response_id=RESPONSE_ID, model="gpt-x", request=request)
    events = [event for item in chunks for event in translator.feed(item)]
    events += translator.finish()
    for item in chunks:
        ChatCompletionChunk.model_validate(item)
    for event in events:
        assert_sdk_event(event)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    return events


def sdk_accumulated(events: list[dict], *, tools: Any = omit, text_format: Any = omit) -> Any:
    """Run events through the SDK's stream state as `responses.stream()` does (each event
    built from its JSON) and return the state."""
    state = ResponseStreamState(input_tools=tools, text_format=text_format)
    for event in events:
        raw = construct_type(type_=ResponseStreamEvent, value=json.loads(json.dumps(event)))
        state.handle_event(cast(ResponseStreamEvent, raw))  # what construct_type built
    return state


def chat_answer_of(chunks: list[dict]) -> dict:
    """Return the chat.completion the SDK's chat accumulator makes of the chunks (which
    refuses to finish on "length": the finish reason is set after)."""
    state = ChatCompletionStreamState()
    finish_reason = None
    for item in chunks:
        for choice in item["choices"]:
            finish_reason = choice["finish_reason"] or finish_reason
        unfinished = [{**choice, "finish_reason": None} for choice in item["choices"]]
        state.handle_chunk(ChatCompletionChunk.model_validate({**item, "choices": unfinished}))
    data: dict[str, Any] = state.get_final_completion().to_dict()
    data["choices"][0]["finish_reason"] = finish_reason
    return data


def assert_both_paths_agree(chunks: list[dict], events: list[dict], request: dict = REQUEST):
    whole = chat_completion_to_response(
        chat_answer_of(chunks), response_id=RESPONSE_ID, model="gpt-x", request=request
    )
    assert events[-1]["response"] == whole


TEXT_STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Hello"}),
    chunk({"content": " world"}),
    chunk({}, "stop"),
    chunk(usage=CHAT_USAGE),
]


def test_a_text_stream_becomes_the_responses_event_sequence():
    events = translate_stream(TEXT_STREAM)

    item_id = f"msg_{RESPONSE_ID}"
    at = {"item_id": item_id, "output_index": 0, "content_index": 0}
    started = {
        "id": RESPONSE_ID,
        "object": "response",
        "created_at": CREATED,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "model": "gpt-x",
        "output": [],
        "usage": None,
        **ECHO,
    }
    empty_part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    full_part = {**empty_part, "text": "Hello world"}
    assert events == [
        {"type": "response.created", "sequence_number": 0, "response": started},
        {"type": "response.in_progress", "sequence_number": 1, "response": started},
        {
            "type": "response.output_item.added",
            "sequence_number": 2,
            "output_index": 0,
            "item": {
                "type": "message",
                "id": item_id,
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            },
        },
        {"type": "response.content_part.added", "sequence_number": 3, **at, "part": empty_part},
        {
            "type": "response.output_text.delta",
            "sequence_number": 4,
            **at,
            "delta": "Hello",
            "logprobs": [],
        },
        {
            "type": "response.output_text.delta",
            "sequence_number": 5,
            **at,
            "delta": " world",
            "logprobs": [],
        },
        {
            "type": "response.output_text.done",
            "sequence_number": 6,
            **at,
            "text": "Hello world",
            "logprobs": [],
        },
        {"type": "response.content_part.done", "sequence_number": 7, **at, "part": full_part},
        {
            "type": "response.output_item.done",
            "sequence_number": 8,
            "output_index": 0,
            "item": text_item("Hello world"),
        },
        {
            "type": "response.completed",
            "sequence_number": 9,
            "response": {
                **started,
                "status": "completed",
                "output": [text_item("Hello world")],
                "usage": USAGE,
            },
        },
    ]


def test_the_sdk_accumulates_the_text_stream():
    state = sdk_accumulated(translate_stream(TEXT_STREAM))

    final = state._completed_response
    assert final.output_text == "Hello world"
    assert final.usage.model_dump(exclude_none=True) == USAGE


def test_the_whole_answer_and_the_stream_agree_for_text():
    assert_both_paths_agree(TEXT_STREAM, translate_stream(TEXT_STREAM))


TWO_CALL_STREAM = [
    chunk({"role": "assistant", "content": None}),
    chunk(call_start(0, "call_a")),
    chunk(fragment(0, '{"ci')),
    chunk(fragment(0, 'ty":"Paris"}')),
    chunk(call_start(1, "call_b")),
    chunk(fragment(1, '{"city":"Rome"}')),
    chunk({}, "tool_calls"),
    chunk(usage=CHAT_USAGE),
]


def test_a_two_call_stream_opens_and_closes_one_function_call_item_after_the_other():
    events = translate_stream(TWO_CALL_STREAM)

    assert [event["type"] for event in events[2:]] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[2]["item"] == {
        **call_item(0, "call_a", "Paris"),
        "arguments": "",
        "status": "in_progress",
    }
    assert events[3] == {
        "type": "response.function_call_arguments.delta",
        "sequence_number": 3,
        "item_id": f"fc_{RESPONSE_ID}_0",
        "output_index": 0,
        "delta": '{"ci',
    }
    assert events[5] == {
        "type": "response.function_call_arguments.done",
        "sequence_number": 5,
        "item_id": f"fc_{RESPONSE_ID}_0",
        "output_index": 0,
        "arguments": '{"city":"Paris"}',
        "name": "get_weather",
    }
    assert events[7]["output_index"] == 1


def test_the_sdk_accumulates_the_two_call_stream_and_parses_strict_arguments():
    events = translate_stream(TWO_CALL_STREAM, {**REQUEST, "tools": [WEATHER_TOOL]})

    state = sdk_accumulated(events, tools=[WEATHER_TOOL])

    final = state._completed_response
    assert [(c.type, c.id, c.call_id, c.name, c.parsed_arguments) for c in final.output] == [
        ("function_call", f"fc_{RESPONSE_ID}_0", "call_a", "get_weather", {"city": "Paris"}),
        ("function_call", f"fc_{RESPONSE_ID}_1", "call_b", "get_weather", {"city": "Rome"}),
    ]
    assert (final.usage.input_tokens, final.usage.output_tokens) == (30, 12)
    assert final.usage.input_tokens_details.cached_tokens == 20


def test_the_whole_answer_and_the_stream_agree_for_two_calls():
    assert_both_paths_agree(TWO_CALL_STREAM, translate_stream(TWO_CALL_STREAM))


TEXT_THEN_CALL_STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Checking."}),
    chunk(call_start(0, "call_a")),
    chunk(fragment(0, '{"city":"Paris"}')),
    chunk({}, "tool_calls"),
    chunk(usage=CHAT_USAGE),
]


def test_a_text_then_call_stream_closes_the_message_before_the_call():
    events = translate_stream(TEXT_THEN_CALL_STREAM)

    assert [event["type"] for event in events[2:]] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    state = sdk_accumulated(events)
    final = state._completed_response
    assert final.output_text == "Checking."
    assert [(item.type, item.id) for item in final.output] == [
        ("message", f"msg_{RESPONSE_ID}"),
        ("function_call", f"fc_{RESPONSE_ID}_0"),
    ]
    assert_both_paths_agree(TEXT_THEN_CALL_STREAM, events)


def test_a_refusal_stream_has_a_refusal_part_and_both_paths_agree():
    chunks = [
        chunk({"role": "assistant", "content": None, "refusal": ""}),
        chunk({"refusal": "I can't"}),
        chunk({"refusal": " help."}),
        chunk({}, "stop"),
        chunk(usage=CHAT_USAGE),
    ]

    events = translate_stream(chunks)

    at = {"item_id": f"msg_{RESPONSE_ID}", "output_index": 0, "content_index": 0}
    assert events[3:8] == [
        {
            "type": "response.content_part.added",
            "sequence_number": 3,
            **at,
            "part": {"type": "refusal", "refusal": ""},
        },
        {"type": "response.refusal.delta", "sequence_number": 4, **at, "delta": "I can't"},
        {"type": "response.refusal.delta", "sequence_number": 5, **at, "delta": " help."},
        {"type": "response.refusal.done", "sequence_number": 6, **at, "refusal": "I can't help."},
        {
            "type": "response.content_part.done",
            "sequence_number": 7,
            **at,
            "part": {"type": "refusal", "refusal": "I can't help."},
        },
    ]
    assert sdk_accumulated(events)._completed_response.output[0].content[0].refusal == (
        "I can't help."
    )
    assert_both_paths_agree(chunks, events)


def test_a_stream_cut_by_the_cap_ends_incomplete_and_both_paths_agree():
    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Once upon"}),
        chunk({}, "length"),
        chunk(usage=CHAT_USAGE),
    ]

    events = translate_stream(chunks)

    assert events[-2]["item"]["status"] == "incomplete"
    final = events[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["status"] == "incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    state = sdk_accumulated(events)  # the SDK takes it; only response.completed sets a final
    assert state._completed_response is None
    assert_both_paths_agree(chunks, events)


def test_stream_logprobs_ride_the_deltas_and_the_final_part():
    top = [{"token": "Hi", "bytes": [72, 105], "logprob": -0.1}]
    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk(
            {"content": "Hi"},
            logprobs={
                "content": [
                    {"token": "Hi", "bytes": [72, 105], "logprob": -0.1, "top_logprobs": top}
                ]
            },
        ),
        chunk({}, "stop"),
    ]

    events = translate_stream(chunks)

    assert events[4]["logprobs"] == [
        {"token": "Hi", "logprob": -0.1, "top_logprobs": [{"token": "Hi", "logprob": -0.1}]}
    ]
    assert events[-1]["response"]["output"][0]["content"][0]["logprobs"] == [
        {"token": "Hi", "bytes": [72, 105], "logprob": -0.1, "top_logprobs": top}
    ]
    sdk_accumulated(events)
    assert_both_paths_agree(chunks, events)


def test_the_first_chunk_starts_the_response_and_a_usage_chunk_says_nothing():
    translator = ChatStreamToResponses(response_id=RESPONSE_ID, model="gpt-x", request=REQUEST)

    first = translator.feed(chunk({"role": "assistant", "content": ""}))

    assert [event["type"] for event in first] == ["response.created", "response.in_progress"]
    assert translator.feed(chunk(usage=CHAT_USAGE)) == []
    assert translator.feed(chunk({}, "stop")) == []
    assert translator.finish()[-1]["response"]["usage"] == USAGE


def test_a_stream_that_ends_before_any_chunk_still_starts_and_completes():
    translator = ChatStreamToResponses(response_id=RESPONSE_ID, model="gpt-x", request=REQUEST)

    events = translator.finish()

    assert [event["type"] for event in events] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]
    sdk_accumulated(events)


def test_text_after_a_call_is_a_further_message_the_sdk_accepts():
    chunks = [
        chunk({"content": "Checking."}),
        chunk(call_start(0, "call_a")),
        chunk(fragment(0, "{}")),
        chunk({"content": "Done."}),
        chunk({}, "stop"),
    ]

    events = translate_stream(chunks)

    output = events[-1]["response"]["output"]
    assert [(item["type"], item["id"]) for item in output] == [
        ("message", f"msg_{RESPONSE_ID}"),
        ("function_call", f"fc_{RESPONSE_ID}_0"),
        ("message", f"msg_{RESPONSE_ID}_2"),
    ]
    assert sdk_accumulated(events)._completed_response.output_text == "Checking.Done."


def test_a_vendor_repeating_the_call_id_on_every_fragment_is_one_call():
    chunks = [
        chunk(call_start(0, "call_a")),
        chunk(fragment(0, '{"city":', id="call_a")),
        chunk(fragment(0, '"Paris"}', id="call_a")),
        chunk({}, "tool_calls"),
    ]

    events = translate_stream(chunks)

    assert events[-1]["response"]["output"] == [call_item(0, "call_a", "Paris")]


def test_a_call_without_an_id_or_a_fragment_after_another_call_cannot_be_streamed_on():
    translator = ChatStreamToResponses(response_id=RESPONSE_ID, model="gpt-x", request=REQUEST)
    with pytest.raises(ValueError):
        translator.feed(chunk(fragment(0, "{}")))

    translator = ChatStreamToResponses(response_id=RESPONSE_ID, model="gpt-x", request=REQUEST)
    translator.feed(chunk(call_start(0, "call_a")))
    translator.feed(chunk(call_start(1, "call_b")))
    with pytest.raises(ValueError):
        translator.feed(chunk(fragment(0, "{}")))


def test_a_json_schema_stream_is_parsed_by_the_sdk_into_the_pydantic_model():
    request = {**REQUEST, "text": {"format": type_to_text_format_param(Weather)}}
    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": '{"city":"Par'}),
        chunk({"content": 'is","celsius":18}'}),
        chunk({}, "stop"),
    ]

    events = translate_stream(chunks, request)

    state = sdk_accumulated(events, text_format=Weather)
    assert state._completed_response.output_parsed == Weather(city="Paris", celsius=18)


def test_stream_events_do_not_share_state_with_the_translator():
    translator = ChatStreamToResponses(response_id=RESPONSE_ID, model="gpt-x", request=REQUEST)
    added = translator.feed(chunk({"role": "assistant", "content": "Hel"}))
    before = copy.deepcopy(added)

    translator.feed(chunk({"content": "lo"}))
    translator.finish()

    assert added == before


# ---------------------------------------------------------------- the official client


class FakeTollgate:
    """Answer the official client as the pipeline would: translate its Responses body, take
    the canned chat answer, and send back the response or its events."""

    def __init__(self, *, whole: dict | None = None, chunks: list[dict] | None = None) -> None:
        self.whole = whole
        self.chunks = chunks
        self.chat_bodies: list[dict] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.chat_bodies.append(responses_request_to_chat(body, vendor_kind=VENDOR))
        if not body.get("stream"):
            assert self.whole is not None, "no answer given"
            out = chat_completion_to_response(
                self.whole, response_id=RESPONSE_ID, model=body["model"], request=body
            )
            return httpx2.Response(200, json=out)
        translator = ChatStreamToResponses(
            response_id=RESPONSE_ID, model=body["model"], request=body
        )
        assert self.chunks is not None, "no chunks given"
        events = [event for item in self.chunks for event in translator.feed(item)]
        events += translator.finish()
        sse = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
        return httpx2.Response(200, text=sse, headers={"content-type": "text/event-stream"})

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(
            api_key="tg-test",
            base_url="http://tollgate.test/v1",
            http_client=httpx2.Client(transport=httpx2.MockTransport(self)),
            max_retries=0,
            _strict_response_validation=True,
        )


def test_the_official_client_reads_a_whole_answer():
    tollgate = FakeTollgate(whole=completion({"content": "Hello!"}))

    response = tollgate.client().responses.create(model="gpt-x", input="Hi", instructions="Brief.")

    assert response.output_text == "Hello!"
    assert response.usage.total_tokens == 42
    assert tollgate.chat_bodies == [
        {
            "messages": [
                {"role": "system", "content": "Brief."},
                {"role": "user", "content": "Hi"},
            ]
        }
    ]


def test_the_official_client_streams_text_then_calls_and_gets_the_final_response():
    tollgate = FakeTollgate(chunks=TEXT_THEN_CALL_STREAM)

    with tollgate.client().responses.stream(
        model="gpt-x", input="Weather in Paris?", tools=[WEATHER_TOOL]
    ) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()

    assert deltas == ["Checking."]
    assert final.output_text == "Checking."
    assert [(item.type, getattr(item, "call_id", None)) for item in final.output] == [
        ("message", None),
        ("function_call", "call_a"),
    ]
    assert final.output[1].parsed_arguments == {"city": "Paris"}
    assert tollgate.chat_bodies[0]["tools"] == [CHAT_WEATHER_TOOL]


def test_the_official_client_parses_a_json_schema_answer_whole_and_streamed():
    text = '{"city":"Paris","celsius":18}'
    tollgate = FakeTollgate(
        whole=completion({"content": text}),
        chunks=[chunk({"role": "assistant", "content": text}), chunk({}, "stop")],
    )
    client = tollgate.client()

    parsed = client.responses.parse(model="gpt-x", input="Weather?", text_format=Weather)
    with client.responses.stream(model="gpt-x", input="Weather?", text_format=Weather) as stream:
        streamed = stream.get_final_response()

    assert parsed.output_parsed == Weather(city="Paris", celsius=18)
    assert streamed.output_parsed == Weather(city="Paris", celsius=18)
    assert tollgate.chat_bodies[0]["response_format"]["json_schema"]["name"] == "Weather"
