"""The stub's tool calls: OpenAI ``tools`` / Anthropic ``tools``, streamed and not."""

from __future__ import annotations

from typing import Any, Literal

import anthropic
import httpx
import openai
import pydantic
import pytest
from openai.types.chat import ChatCompletionMessageFunctionToolCall

from stubvendor.tools import example_from_schema, tool_arguments

from ._support import (
    AN,
    AN_AUTH,
    ANSWER_M1,
    OA,
    OA_AUTH,
    an_usage,
    oa_usage,
    parse_anthropic,
    parse_anthropic_events,
    parse_openai,
    parse_openai_chunks,
    seq_of,
    sse_data,
    sse_events,
    user,
)

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "detail": {"type": "boolean"},
        "extra": {"type": "string"},  # not required: left out
    },
    "required": ["city", "days", "unit", "detail"],
}
TIME_SCHEMA = {
    "type": "object",
    "properties": {
        "tz": {"type": "number"},
        "opts": {
            "type": "object",
            "properties": {"fmt": {"type": "string"}, "n": {"type": "array"}},
            "required": ["fmt", "n"],
        },
    },
    "required": ["tz", "opts"],
}
WEATHER_ARGS = '{"city":"stub","days":1,"unit":"c","detail":true}'
TIME_ARGS = '{"tz":1.5,"opts":{"fmt":"stub","n":[]}}'
OA_TOOLS: list[Any] = [  # raw bodies' and the SDK's
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "d", "parameters": WEATHER_SCHEMA},
    },
    {"type": "function", "function": {"name": "get_time", "parameters": TIME_SCHEMA}},
    {"type": "function", "function": {"name": "ping"}},
]
AN_TOOLS: list[Any] = [  # raw bodies' and the SDK's
    {"name": "get_weather", "description": "d", "input_schema": WEATHER_SCHEMA},
    {"name": "get_time", "input_schema": TIME_SCHEMA},
    {"name": "ping", "input_schema": {"type": "object", "properties": {}}},
]
QUESTION = user("weather in paris please")  # 4 prompt words


def halves(text: str) -> list[str]:
    return [text[: len(text) // 2], text[len(text) // 2 :]]


# --------------------------------------------------------------------------- schemas


def test_example_from_schema_fills_required_properties_by_type() -> None:
    schema = {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "i": {"type": "integer"},
            "f": {"type": "number"},
            "b": {"type": "boolean"},
            "a": {"type": "array", "items": {"type": "string"}},
            "e": {"enum": [3, 4]},
            "c": {"const": "fixed"},
            "o": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
            "u": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "n": {"type": ["integer", "null"]},
            "r": {"$ref": "#/$defs/Inner"},
            "optional": {"type": "string"},
        },
        "required": ["s", "i", "f", "b", "a", "e", "c", "o", "u", "n", "r", "missing"],
        "$defs": {
            "Inner": {"type": "object", "properties": {"k": {"type": "boolean"}}, "required": ["k"]}
        },
    }
    assert example_from_schema(schema) == {
        "s": "stub",
        "i": 1,
        "f": 1.5,
        "b": True,
        "a": [],
        "e": 3,
        "c": "fixed",
        "o": {"x": "stub"},
        "u": None,
        "n": 1,
        "r": {"k": True},
        "missing": None,
    }
    assert tool_arguments(None) == {}
    assert tool_arguments({"type": "object", "properties": {"x": {"type": "string"}}}) == {}
    assert tool_arguments({"type": "string"}) == {}
    recursive = {"type": "object", "properties": {"me": {"$ref": "#"}}, "required": ["me"]}
    assert isinstance(tool_arguments(recursive), dict)  # bounded depth, no RecursionError


# --------------------------------------------------------------------------- OpenAI


def test_openai_calls_first_two_tools_with_schema_arguments(client: httpx.Client) -> None:
    body = {"model": "m1", "messages": QUESTION, "tools": OA_TOOLS}
    r = client.post(OA, json=body, headers=OA_AUTH)
    assert r.status_code == 200
    data = r.json()
    n = seq_of(data["id"])
    assert data["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_stub_{n}_0",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": WEATHER_ARGS},
                    },
                    {
                        "id": f"call_stub_{n}_1",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": TIME_ARGS},
                    },
                ],
            },
            "finish_reason": "tool_calls",
        }
    ]
    assert data["usage"] == oa_usage(4 + 3 * 10, 2 * 5)
    parse_openai(data)


@pytest.mark.parametrize(
    "extra,names",
    [
        ({"parallel_tool_calls": False}, ["get_weather"]),
        ({"tool_choice": "required"}, ["get_weather", "get_time"]),
        ({"tool_choice": "auto", "parallel_tool_calls": True}, ["get_weather", "get_time"]),
        ({"tool_choice": {"type": "function", "function": {"name": "ping"}}}, ["ping"]),
        ({"tools": OA_TOOLS[2:]}, ["ping"]),
    ],
)
def test_openai_tool_choice_and_parallel_pick_the_calls(
    client: httpx.Client, extra: dict[str, Any], names: list[str]
) -> None:
    body = {"model": "m1", "messages": QUESTION, "tools": OA_TOOLS, **extra}
    data = client.post(OA, json=body, headers=OA_AUTH).json()
    calls = data["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == names
    assert [c["id"] for c in calls] == [
        f"call_stub_{seq_of(data['id'])}_{i}" for i in range(len(names))
    ]
    assert data["usage"]["completion_tokens"] == 5 * len(names)
    assert data["usage"]["prompt_tokens"] == 4 + 10 * len(body["tools"])
    if names == ["ping"]:
        assert calls[0]["function"]["arguments"] == "{}"


def test_openai_tool_choice_none_or_tool_result_answers_text(client: httpx.Client) -> None:
    body = {"model": "m1", "messages": QUESTION, "tools": OA_TOOLS, "tool_choice": "none"}
    data = client.post(OA, json=body, headers=OA_AUTH).json()
    assert data["choices"][0]["message"] == {"role": "assistant", "content": ANSWER_M1}
    assert data["choices"][0]["finish_reason"] == "stop"
    assert data["usage"] == oa_usage(34, 8)
    messages = [
        *QUESTION,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny and warm"},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "noon"}]},
    ]
    body = {"model": "m1", "messages": messages, "tools": OA_TOOLS}
    data = client.post(OA, json=body, headers=OA_AUTH).json()
    assert data["choices"][0]["message"]["content"] == ANSWER_M1
    assert data["usage"] == oa_usage(4 + 3 + 1 + 30, 8)


def test_openai_tool_choice_naming_an_unknown_tool_is_400(client: httpx.Client) -> None:
    body = {
        "model": "m1",
        "messages": QUESTION,
        "tools": OA_TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "nope"}},
    }
    r = client.post(OA, json=body, headers=OA_AUTH)
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert "nope" in r.json()["error"]["message"]


def test_openai_tool_call_stream_exact_chunks(client: httpx.Client) -> None:
    body = {
        "model": "m1",
        "messages": QUESTION,
        "tools": OA_TOOLS,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    r = client.post(OA, json=body, headers=OA_AUTH)
    items = sse_data(r.text)
    assert items[-1] == "[DONE]"
    chunks = items[:-1]
    n = seq_of(chunks[0]["id"])
    assert [ch["choices"][0] if ch["choices"] else None for ch in chunks] == [
        {"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None},
        *[
            {"index": 0, "delta": {"tool_calls": [tc]}, "finish_reason": None}
            for i, (name, args) in enumerate(
                [("get_weather", WEATHER_ARGS), ("get_time", TIME_ARGS)]
            )
            for tc in [
                {
                    "index": i,
                    "id": f"call_stub_{n}_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                },
                *[{"index": i, "function": {"arguments": half}} for half in halves(args)],
            ]
        ],
        {"index": 0, "delta": {}, "finish_reason": "tool_calls"},
        None,
    ]
    assert chunks[-1]["usage"] == oa_usage(34, 10)
    parse_openai_chunks(r.text)


def test_openai_fail_after_tokens_counts_tool_call_pieces(client: httpx.Client) -> None:
    client.post(
        "/_stub/faults", json={"faults": [{"kind": "fail_after_tokens", "after_tokens": 2}]}
    )
    body = {"model": "m1", "messages": QUESTION, "tools": OA_TOOLS, "stream": True}
    chunks: list[str] = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        client.stream("POST", OA, json=body, headers=OA_AUTH) as r,
    ):
        chunks.extend(r.iter_text())
    deltas = [ch["choices"][0]["delta"] for ch in sse_data("".join(chunks))]
    assert len(deltas) == 3  # the role chunk, the first call's header, its first half
    assert deltas[2] == {
        "tool_calls": [{"index": 0, "function": {"arguments": halves(WEATHER_ARGS)[0]}}]
    }


class Weather(pydantic.BaseModel):
    city: str
    days: int
    unit: Literal["c", "f"]


def function_call(call: object) -> tuple[str, str]:
    """Return a function tool call's name and arguments."""
    assert isinstance(call, ChatCompletionMessageFunctionToolCall), call
    return call.function.name, call.function.arguments


def test_openai_sdk_parses_tool_calls_plain_parse_and_stream(oa_sdk: openai.OpenAI) -> None:
    messages: Any = QUESTION
    done = oa_sdk.chat.completions.create(model="m1", messages=messages, tools=OA_TOOLS)
    assert done.choices[0].finish_reason == "tool_calls"
    calls = done.choices[0].message.tool_calls or []
    assert [function_call(c) for c in calls] == [
        ("get_weather", WEATHER_ARGS),
        ("get_time", TIME_ARGS),
    ]
    parsed = oa_sdk.chat.completions.parse(
        model="m1", messages=messages, tools=[openai.pydantic_function_tool(Weather)]
    )
    [call] = parsed.choices[0].message.tool_calls or []
    assert call.function.parsed_arguments == Weather(city="stub", days=1, unit="c")
    with oa_sdk.chat.completions.stream(
        model="m1",
        messages=messages,
        tools=[openai.pydantic_function_tool(Weather), OA_TOOLS[1]],
        stream_options={"include_usage": True},
    ) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_completion()
    assert events.count("tool_calls.function.arguments.done") == 2
    streamed = final.choices[0].message.tool_calls or []
    assert streamed[0].function.parsed_arguments == Weather(city="stub", days=1, unit="c")
    assert (streamed[1].function.name, streamed[1].function.arguments) == ("get_time", TIME_ARGS)
    assert final.usage is not None and final.usage.completion_tokens == 10


# --------------------------------------------------------------------------- Anthropic


def an_tools_body(**extra: Any) -> dict[str, Any]:
    return {"model": "m1", "max_tokens": 100, "messages": QUESTION, "tools": AN_TOOLS, **extra}


def test_anthropic_calls_first_two_tools_with_schema_input(client: httpx.Client) -> None:
    data = client.post(AN, json=an_tools_body(), headers=AN_AUTH).json()
    n = seq_of(data["id"])
    assert data == {
        "id": f"msg_stub_{n}",
        "type": "message",
        "role": "assistant",
        "model": "m1",
        "content": [
            {
                "type": "tool_use",
                "id": f"toolu_stub_{n}_0",
                "name": "get_weather",
                "input": {"city": "stub", "days": 1, "unit": "c", "detail": True},
            },
            {
                "type": "tool_use",
                "id": f"toolu_stub_{n}_1",
                "name": "get_time",
                "input": {"tz": 1.5, "opts": {"fmt": "stub", "n": []}},
            },
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": an_usage(4 + 30, 10),
    }
    parse_anthropic(data)


@pytest.mark.parametrize(
    "choice,names",
    [
        ({"type": "auto"}, ["get_weather", "get_time"]),
        ({"type": "any"}, ["get_weather", "get_time"]),
        ({"type": "any", "disable_parallel_tool_use": True}, ["get_weather"]),
        ({"type": "tool", "name": "ping"}, ["ping"]),
        ({"type": "none"}, []),
    ],
)
def test_anthropic_tool_choice_picks_the_calls(
    client: httpx.Client, choice: dict[str, Any], names: list[str]
) -> None:
    data = client.post(AN, json=an_tools_body(tool_choice=choice), headers=AN_AUTH).json()
    if not names:
        assert data["content"] == [{"type": "text", "text": ANSWER_M1}]
        assert data["stop_reason"] == "end_turn"
        return
    assert [b["name"] for b in data["content"]] == names
    assert data["usage"]["output_tokens"] == 5 * len(names)
    if names == ["ping"]:
        assert data["content"][0]["input"] == {}


def test_anthropic_tool_result_answers_text_and_counts_its_content(client: httpx.Client) -> None:
    messages = [
        *QUESTION,
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "sunny and warm"},
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "content": [
                        {"type": "text", "text": "noon"},
                        {"type": "image", "source": {"type": "base64", "data": "x"}},
                    ],
                },
            ],
        },
    ]
    data = client.post(AN, json=an_tools_body(messages=messages), headers=AN_AUTH).json()
    assert data["content"] == [{"type": "text", "text": ANSWER_M1}]
    assert data["usage"] == an_usage(4 + 3 + 1 + 85 + 30, 8)
    bad = an_tools_body(tool_choice={"type": "tool", "name": "nope"})
    r = client.post(AN, json=bad, headers=AN_AUTH)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_anthropic_tool_use_stream_exact_events(client: httpx.Client) -> None:
    r = client.post(AN, json=an_tools_body(stream=True), headers=AN_AUTH)
    events = sse_events(r.text)
    n = seq_of(events[0][1]["message"]["id"])
    assert events[0][1]["message"]["usage"] == an_usage(34, 1)
    expected: list[tuple[str, dict[str, Any]]] = []
    for i, (name, args) in enumerate([("get_weather", WEATHER_ARGS), ("get_time", TIME_ARGS)]):
        block = {"type": "tool_use", "id": f"toolu_stub_{n}_{i}", "name": name, "input": {}}
        expected.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": block},
            )
        )
        if i == 0:
            expected.append(("ping", {"type": "ping"}))
        expected.extend(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": i,
                    "delta": {"type": "input_json_delta", "partial_json": half},
                },
            )
            for half in halves(args)
        )
        expected.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    expected.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 10},
            },
        )
    )
    expected.append(("message_stop", {"type": "message_stop"}))
    assert events[1:] == expected
    parse_anthropic_events(r.text)


def test_anthropic_sdk_stream_helper_accumulates_tool_use(an_sdk: anthropic.Anthropic) -> None:
    with an_sdk.messages.stream(
        model="m1",
        max_tokens=100,
        messages=QUESTION,
        tools=AN_TOOLS,
        tool_choice={"type": "any"},
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [(b.type, getattr(b, "name", None)) for b in final.content] == [
        ("tool_use", "get_weather"),
        ("tool_use", "get_time"),
    ]
    block = final.content[0]
    assert isinstance(block, anthropic.types.ToolUseBlock), block
    assert block.input == {"city": "stub", "days": 1, "unit": "c", "detail": True}
    assert (final.usage.input_tokens, final.usage.output_tokens) == (34, 10)
    msg = an_sdk.messages.create(
        model="m1",
        max_tokens=100,
        messages=QUESTION,
        tools=AN_TOOLS[2:],
    )
    assert msg.content[0].type == "tool_use" and msg.content[0].input == {}
