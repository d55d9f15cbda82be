"""The stub's OpenAI Responses API (stubvendor/responses.py), through the official SDK."""

from __future__ import annotations

import time
from typing import Any, Literal

import httpx
import openai
import pydantic
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from ._support import ANSWER_M1, OA, OA_AUTH, WORDS_M1, assert_no_extra, seq_of, sse_events

RESP = "/v1/responses"
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
}
TIME_SCHEMA = {"type": "object", "properties": {"tz": {"type": "number"}}, "required": ["tz"]}
WEATHER_ARGS = '{"city":"stub","days":1}'
TIME_ARGS = '{"tz":1.5}'
TOOLS: list[Any] = [
    {"type": "function", "name": "get_weather", "parameters": WEATHER_SCHEMA, "strict": True},
    {"type": "web_search"},  # counted, never called
    {"type": "function", "name": "get_time", "parameters": TIME_SCHEMA, "strict": True},
    {"type": "function", "name": "ping", "parameters": None, "strict": False},
]
_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)


class Place(pydantic.BaseModel):
    name: str


class Forecast(pydantic.BaseModel):
    city: str
    days: int
    temp: float
    rain: bool
    tags: list[str]
    unit: Literal["c", "f"]
    where: Place


FORECAST_JSON = (
    '{"city":"stub","days":1,"temp":1.5,"rain":true,"tags":[],"unit":"c","where":{"name":"stub"}}'
)
FORECAST = Forecast(
    city="stub", days=1, temp=1.5, rain=True, tags=[], unit="c", where=Place(name="stub")
)


# --------------------------------------------------------------------------- helpers


def queue(client: httpx.Client, *faults: dict[str, Any]) -> None:
    assert client.post("/_stub/faults", json={"faults": list(faults)}).status_code == 200


def calls(client: httpx.Client) -> list[dict[str, Any]]:
    return client.get("/_stub/calls").json()["calls"]


def usage(
    input_tokens: int, output_tokens: int, cached: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message(n: int, text: str, status: str = "completed") -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_stub_{n}",
        "status": status,
        "role": "assistant",
        "content": [output_text(text)],
    }


def function_call(n: int, i: int, name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_stub_{n}_{i}",
        "call_id": f"call_stub_{n}_{i}",
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def reasoning_item(n: int) -> dict[str, Any]:
    return {"type": "reasoning", "id": f"rs_stub_{n}", "summary": []}


def response_object(
    n: int,
    created_at: int,
    *,
    status: str = "completed",
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    **echoed: Any,
) -> dict[str, Any]:
    """The whole response object; ``echoed`` overrides the defaults of echoed fields."""
    return {
        "id": f"resp_stub_{n}",
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": None,
        "max_output_tokens": None,
        "metadata": {},
        "model": "m1",
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "user": None,
        **echoed,
    }


def assert_declared(response: Response) -> None:
    """Every field is one the SDK declares, but ``store``: the API sends it, the SDK omits it."""
    assert response.model_extra is not None
    assert response.model_extra == {"store": response.model_extra["store"]}
    for name in type(response).model_fields:
        assert_no_extra(getattr(response, name), f"response.{name}")


def parse_response(data: dict[str, Any]) -> Response:
    parsed = Response.model_validate(data)
    assert_declared(parsed)
    return parsed


def stream_events(text: str) -> list[dict[str, Any]]:
    """The typed events of a raw stream; each validates as the SDK's event of its type."""
    events = sse_events(text)
    for number, (name, data) in enumerate(events):
        assert data["type"] == name and data["sequence_number"] == number
        event = _EVENT.validate_python(data)
        for field in type(event).model_fields:
            value = getattr(event, field)
            if isinstance(value, Response):
                assert_declared(value)
            else:
                assert_no_extra(value, f"{name}.{field}")
    return [data for _, data in events]


def read_until_broken(client: httpx.Client, body: dict[str, Any]) -> tuple[int, str]:
    chunks: list[str] = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        client.stream("POST", RESP, json=body, headers=OA_AUTH) as r,
    ):
        status = r.status_code
        chunks.extend(r.iter_text())
    return status, "".join(chunks)


# --------------------------------------------------------------------------- text answers


def test_text_answer_has_exact_output_ids_and_usage(oa_sdk: openai.OpenAI) -> None:
    r = oa_sdk.responses.create(model="m1", input="hi there", instructions="be very brief")
    n = seq_of(r.id)
    assert r.id == f"resp_stub_{n}" and r.object == "response"
    assert (r.status, r.incomplete_details, r.error) == ("completed", None, None)
    assert r.output_text == ANSWER_M1
    assert [item.to_dict() for item in r.output] == [message(n, ANSWER_M1)]
    assert r.usage is not None and r.usage.to_dict() == usage(5, 8)  # 2 + 3 words


def test_raw_answer_is_the_whole_response_object_with_defaults(client: httpx.Client) -> None:
    r = client.post(RESP, json={"model": "m1", "input": "x"}, headers=OA_AUTH)
    data = r.json()
    n = seq_of(data["id"])
    assert abs(data["created_at"] - time.time()) < 5
    assert data == response_object(
        n, data["created_at"], output=[message(n, ANSWER_M1)], usage=usage(1, 8)
    )
    parse_response(data)


def test_request_fields_are_echoed_and_unknown_ones_recorded(client: httpx.Client) -> None:
    body = {
        "model": "m1",
        "input": "x",
        "instructions": "be brief",
        "metadata": {"k": "v"},
        "temperature": 0.2,
        "top_p": 0.5,
        "store": False,
        "truncation": "auto",
        "user": "u-9",
        "previous_response_id": "resp_prev",
        "tool_choice": "none",
        "parallel_tool_calls": False,
        "text": {"format": {"type": "text"}, "verbosity": "low"},
        "include": ["reasoning.encrypted_content"],
        "service_tier": "auto",
        "stub_unknown": {"any": 1},
    }
    data = client.post(RESP, json=body, headers=OA_AUTH).json()
    n = seq_of(data["id"])
    assert data == response_object(
        n,
        data["created_at"],
        output=[message(n, ANSWER_M1)],
        usage=usage(3, 8),
        instructions="be brief",
        metadata={"k": "v"},
        temperature=0.2,
        top_p=0.5,
        store=False,
        truncation="auto",
        user="u-9",
        previous_response_id="resp_prev",
        tool_choice="none",
        parallel_tool_calls=False,
        text={"format": {"type": "text"}, "verbosity": "low"},
    )
    parse_response(data)
    assert calls(client)[0]["body"] == body


def test_input_items_count_words_media_and_tool_outputs(oa_sdk: openai.OpenAI) -> None:
    items: list[Any] = [
        {"role": "developer", "content": "answer in french"},  # 3
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look at  this"},  # 3
                {"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"},  # 85
                {"type": "input_file", "file_id": "file-1"},  # 100
            ],
        },
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [
                {"type": "output_text", "text": "a cat", "annotations": []},  # 2
                {"type": "refusal", "refusal": "no way"},  # 0
            ],
        },
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "hm"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": "b c"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny and warm"},  # 3
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [
                {"type": "input_text", "text": "two words"},  # 2
                {"type": "input_image", "image_url": "u", "detail": "low"},  # 85
            ],
        },
    ]
    r = oa_sdk.responses.create(model="m1", input=items, instructions="be brief", tools=TOOLS)
    # 3 + 188 + 2 + 0 + 0 + 3 + 87, instructions 2, four tools 40; a tool output came last
    assert r.output_text == ANSWER_M1
    assert r.usage is not None and r.usage.to_dict() == usage(325, 8)


def test_x_stub_words_sets_the_answer_length(oa_sdk: openai.OpenAI) -> None:
    r = oa_sdk.responses.create(model="m1", input="x", extra_headers={"x-stub-words": "10"})
    assert r.output_text == ANSWER_M1 + " Hello from"
    assert r.usage is not None and r.usage.output_tokens == 10


# --------------------------------------------------------------------------- tool calls


def test_function_tools_answer_the_first_two_function_calls(oa_sdk: openai.OpenAI) -> None:
    r = oa_sdk.responses.create(model="m1", input="weather in paris", tools=TOOLS)
    n = seq_of(r.id)
    assert [item.to_dict() for item in r.output] == [
        function_call(n, 0, "get_weather", WEATHER_ARGS),
        function_call(n, 1, "get_time", TIME_ARGS),
    ]
    assert r.output_text == ""
    assert r.usage is not None and r.usage.to_dict() == usage(43, 10)  # 3 + 4 x 10; 2 x 5
    assert r.tools[1].type == "web_search" and r.tool_choice == "auto"


@pytest.mark.parametrize(
    "options,expected",
    [
        ({"parallel_tool_calls": False}, [("get_weather", WEATHER_ARGS)]),
        ({"tool_choice": {"type": "function", "name": "ping"}}, [("ping", "{}")]),
        ({"tool_choice": "required"}, [("get_weather", WEATHER_ARGS), ("get_time", TIME_ARGS)]),
        ({"tools": TOOLS[:2]}, [("get_weather", WEATHER_ARGS)]),
        ({"max_output_tokens": 1}, [("get_weather", WEATHER_ARGS), ("get_time", TIME_ARGS)]),
    ],
)
def test_tool_choice_rules_pick_the_calls(
    oa_sdk: openai.OpenAI, options: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    r = oa_sdk.responses.create(**{"model": "m1", "input": "x", "tools": TOOLS, **options})
    n = seq_of(r.id)
    assert r.status == "completed"
    assert [item.to_dict() for item in r.output] == [
        function_call(n, i, name, arguments) for i, (name, arguments) in enumerate(expected)
    ]
    assert r.usage is not None and r.usage.output_tokens == 5 * len(expected)


def test_tool_choice_none_answers_text(oa_sdk: openai.OpenAI) -> None:
    r = oa_sdk.responses.create(model="m1", input="x", tools=TOOLS, tool_choice="none")
    assert [item.type for item in r.output] == ["message"]
    assert r.output_text == ANSWER_M1


def test_function_call_output_round_trip_answers_text(oa_sdk: openai.OpenAI) -> None:
    question: Any = {"role": "user", "content": "weather in paris"}  # an input item
    first = oa_sdk.responses.create(model="m1", input=[question], tools=TOOLS[:1])
    call = first.output[0]
    assert call.type == "function_call"
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
    # The SDK takes its own output item back as input, which its param types do not say.
    items: list[Any] = [question, call, result]
    second = oa_sdk.responses.create(model="m1", input=items, tools=TOOLS[:1])
    n = seq_of(second.id)
    assert [item.to_dict() for item in second.output] == [message(n, ANSWER_M1)]
    assert second.usage is not None and second.usage.to_dict() == usage(14, 8)  # 3 + 1 + 10


def test_forced_tool_missing_from_tools_is_400(client: httpx.Client) -> None:
    body = {
        "model": "m1",
        "input": "x",
        "tools": TOOLS,
        "tool_choice": {"type": "function", "name": "nope"},
    }
    r = client.post(RESP, json=body, headers=OA_AUTH)
    assert (r.status_code, r.json()) == (
        400,
        {
            "error": {
                "message": "tool_choice names a tool that is not in tools: 'nope'.",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        },
    )


# ---------------------------------------------------------------------- JSON, reasoning, limits


def test_json_schema_via_parse_fills_the_pydantic_model(oa_sdk: openai.OpenAI) -> None:
    r = oa_sdk.responses.parse(model="m1", input="forecast please", text_format=Forecast)
    assert r.output_parsed == FORECAST
    assert r.output_text == FORECAST_JSON
    assert r.usage is not None and r.usage.to_dict() == usage(2, 12)  # 92 chars: 12 pieces
    assert r.text is not None and r.text.format is not None
    assert r.text.format.type == "json_schema"


def test_json_object_answers_the_words_in_an_object(oa_sdk: openai.OpenAI) -> None:
    r = oa_sdk.responses.create(
        model="m1", input="x", text={"format": {"type": "json_object"}}, max_output_tokens=2
    )
    assert r.status == "completed"  # JSON is never cut
    assert r.output_text == '{"answer":"Hello from the stub model m1 reply ok"}'
    assert r.usage is not None and r.usage.output_tokens == 7  # 50 chars


def test_reasoning_model_adds_a_reasoning_item_and_16_tokens(oa_sdk: openai.OpenAI) -> None:
    r = oa_sdk.responses.create(model="o3-mini", input="x")
    n = seq_of(r.id)
    text = "Hello from the stub model o3-mini reply ok"
    assert [item.to_dict() for item in r.output] == [reasoning_item(n), message(n, text)]
    assert r.usage is not None and r.usage.to_dict() == usage(1, 24, reasoning=16)


def test_reasoning_field_makes_any_model_reason(oa_sdk: openai.OpenAI) -> None:
    r = oa_sdk.responses.create(model="m1", input="x", reasoning={"effort": "low"})
    n = seq_of(r.id)
    assert [item.to_dict() for item in r.output] == [reasoning_item(n), message(n, ANSWER_M1)]
    assert r.reasoning is not None and r.reasoning.to_dict() == {"effort": "low"}
    assert r.usage is not None and r.usage.to_dict() == usage(1, 24, reasoning=16)


def test_max_output_tokens_below_the_words_is_incomplete(
    oa_sdk: openai.OpenAI, client: httpx.Client
) -> None:
    r = oa_sdk.responses.create(model="m1", input="x", max_output_tokens=3)
    n = seq_of(r.id)
    assert r.status == "incomplete"
    assert r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens"
    assert [item.to_dict() for item in r.output] == [message(n, "Hello from the", "incomplete")]
    assert r.usage is not None and r.usage.to_dict() == usage(1, 3)
    r = oa_sdk.responses.create(model="gpt-5-mini", input="x", max_output_tokens=8)
    assert (r.status, r.incomplete_details) == ("completed", None)
    assert r.usage is not None and r.usage.to_dict() == usage(1, 24, reasoning=16)
    assert [c["max_tokens"] for c in calls(client)] == [3, 8]


# --------------------------------------------------------------------------- streams


TEXT_EVENTS = (
    ["response.created", "response.in_progress"]
    + ["response.output_item.added", "response.content_part.added"]
    + ["response.output_text.delta"] * 8
    + ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    + ["response.completed"]
)


def test_stream_helper_accepts_a_text_answer(oa_sdk: openai.OpenAI) -> None:
    with oa_sdk.responses.stream(model="m1", input="hi there") as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.type for e in events] == TEXT_EVENTS
    assert [e.sequence_number for e in events] == list(range(len(TEXT_EVENTS)))
    assert [e.delta for e in events if e.type == "response.output_text.delta"] == WORDS_M1
    n = seq_of(final.id)
    assert final.output_text == ANSWER_M1
    assert [item.to_dict() for item in final.output] == [
        {**message(n, ANSWER_M1), "content": [{**output_text(ANSWER_M1), "parsed": None}]}
    ]
    assert final.usage is not None and final.usage.to_dict() == usage(2, 8)


def test_raw_stream_events_are_exact(client: httpx.Client) -> None:
    body = {"model": "m1", "input": "x", "stream": True}
    r = client.post(RESP, json=body, headers={**OA_AUTH, "x-stub-words": "2"})
    assert r.headers["content-type"] == "text/event-stream"
    assert "[DONE]" not in r.text
    events = stream_events(r.text)
    n, created_at = seq_of(events[0]["response"]["id"]), events[0]["response"]["created_at"]
    start = response_object(n, created_at, status="in_progress", output=[], usage=None)
    msg_id = f"msg_stub_{n}"
    at = {"item_id": msg_id, "output_index": 0, "content_index": 0}
    started = {**message(n, ""), "status": "in_progress", "content": []}
    done = message(n, "Hello from")
    final = response_object(n, created_at, output=[done], usage=usage(1, 2))
    assert events == [
        {"type": "response.created", "sequence_number": 0, "response": start},
        {"type": "response.in_progress", "sequence_number": 1, "response": start},
        {
            "type": "response.output_item.added",
            "sequence_number": 2,
            "output_index": 0,
            "item": started,
        },
        {
            "type": "response.content_part.added",
            "sequence_number": 3,
            **at,
            "part": output_text(""),
        },
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
            "delta": " from",
            "logprobs": [],
        },
        {
            "type": "response.output_text.done",
            "sequence_number": 6,
            **at,
            "text": "Hello from",
            "logprobs": [],
        },
        {
            "type": "response.content_part.done",
            "sequence_number": 7,
            **at,
            "part": output_text("Hello from"),
        },
        {
            "type": "response.output_item.done",
            "sequence_number": 8,
            "output_index": 0,
            "item": done,
        },
        {"type": "response.completed", "sequence_number": 9, "response": final},
    ]


def test_stream_helper_accepts_reasoning_and_tool_calls(oa_sdk: openai.OpenAI) -> None:
    with oa_sdk.responses.stream(model="o4-mini", input="x", tools=TOOLS) as stream:
        events = list(stream)
        final = stream.get_final_response()
    call_events = [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ]
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",  # reasoning
        "response.output_item.done",
        *call_events,
        *call_events,
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(15))
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert deltas == ['{"city":"stu', 'b","days":1}', '{"tz"', ":1.5}"]
    assert [e.output_index for e in events if e.type == "response.output_item.added"] == [0, 1, 2]
    n = seq_of(final.id)
    assert [item.to_dict() for item in final.output] == [
        reasoning_item(n),
        {
            **function_call(n, 0, "get_weather", WEATHER_ARGS),
            "parsed_arguments": {"city": "stub", "days": 1},
        },
        {**function_call(n, 1, "get_time", TIME_ARGS), "parsed_arguments": {"tz": 1.5}},
    ]
    assert final.usage is not None and final.usage.to_dict() == usage(41, 26, reasoning=16)


def test_raw_tool_stream_validates_and_ends_completed(client: httpx.Client) -> None:
    body = {"model": "m1", "input": "x", "tools": TOOLS[:1], "stream": True}
    events = stream_events(client.post(RESP, json=body, headers=OA_AUTH).text)
    n = seq_of(events[0]["response"]["id"])
    call = function_call(n, 0, "get_weather", WEATHER_ARGS)
    at = {"item_id": f"fc_stub_{n}_0", "output_index": 0}
    assert events[2:7] == [
        {
            "type": "response.output_item.added",
            "sequence_number": 2,
            "output_index": 0,
            "item": {**call, "arguments": "", "status": "in_progress"},
        },
        {
            "type": "response.function_call_arguments.delta",
            "sequence_number": 3,
            **at,
            "delta": '{"city":"stu',
        },
        {
            "type": "response.function_call_arguments.delta",
            "sequence_number": 4,
            **at,
            "delta": 'b","days":1}',
        },
        {
            "type": "response.function_call_arguments.done",
            "sequence_number": 5,
            **at,
            "arguments": WEATHER_ARGS,
        },
        {
            "type": "response.output_item.done",
            "sequence_number": 6,
            "output_index": 0,
            "item": call,
        },
    ]
    assert events[7]["type"] == "response.completed" and len(events) == 8
    assert events[7]["response"]["output"] == [call]
    assert events[7]["response"]["usage"] == usage(11, 5)


def test_stream_helper_parses_a_json_schema_answer(oa_sdk: openai.OpenAI) -> None:
    with oa_sdk.responses.stream(model="m1", input="x", text_format=Forecast) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert deltas == [FORECAST_JSON[i : i + 8] for i in range(0, 92, 8)]
    assert final.output_parsed == FORECAST
    assert final.usage is not None and final.usage.to_dict() == usage(1, 12)


def test_incomplete_stream_ends_with_response_incomplete(oa_sdk: openai.OpenAI) -> None:
    with oa_sdk.responses.stream(model="m1", input="x", max_output_tokens=2) as stream:
        events = list(stream)
        # The SDK's helper finalizes only on response.completed, as with the real API.
        with pytest.raises(RuntimeError, match="response.completed"):
            stream.get_final_response()
    last = events[-1]
    assert last.type == "response.incomplete"
    assert [e.delta for e in events if e.type == "response.output_text.delta"] == WORDS_M1[:2]
    assert last.response.status == "incomplete"
    assert last.response.incomplete_details is not None
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.output_text == "Hello from"
    assert last.response.usage is not None and last.response.usage.to_dict() == usage(1, 2)
    assert events[-2].type == "response.output_item.done"
    assert events[-2].item.to_dict() == message(
        seq_of(last.response.id), "Hello from", "incomplete"
    )


# --------------------------------------------------------------------------- refusals


def unsupported(name: str, moved_to: str) -> dict[str, Any]:
    return {
        "message": f"Unsupported parameter: '{name}'. In the Responses API, this parameter "
        f"has moved to '{moved_to}'. Try again with the new parameter.",
        "type": "invalid_request_error",
        "param": name,
        "code": "unsupported_parameter",
    }


def test_max_tokens_is_refused_400_and_keeps_the_fault_queued(
    oa_sdk: openai.OpenAI, client: httpx.Client
) -> None:
    queue(client, {"kind": "500"})
    with pytest.raises(openai.BadRequestError) as caught:
        oa_sdk.responses.create(model="m1", input="x", extra_body={"max_tokens": 5})
    assert caught.value.body == unsupported("max_tokens", "max_output_tokens")
    assert [(c["status"], c["fault"], c["max_tokens"]) for c in calls(client)] == [
        (400, None, None)
    ]
    assert client.get("/_stub/faults").json()["faults"][0]["kind"] == "500"


@pytest.mark.parametrize(
    "extra,name,moved_to",
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "messages", "input"),
        ({"max_tokens": None}, "max_tokens", "max_output_tokens"),
        ({"max_tokens": 5, "messages": []}, "messages", "input"),
    ],
)
def test_chat_parameters_are_refused_400(
    client: httpx.Client, extra: dict[str, Any], name: str, moved_to: str
) -> None:
    r = client.post(RESP, json={"model": "m1", "input": "x", **extra}, headers=OA_AUTH)
    assert (r.status_code, r.json()) == (400, {"error": unsupported(name, moved_to)})


def test_malformed_input_words_key_and_model_are_refused(client: httpx.Client) -> None:
    r = client.post(RESP, json={"model": "m1", "input": {"a": 1}}, headers=OA_AUTH)
    assert (r.status_code, r.json()["error"]) == (
        400,
        {
            "message": "input: a string or a list of input items is required.",
            "type": "invalid_request_error",
            "param": "input",
            "code": None,
        },
    )
    r = client.post(RESP, json={"model": "m1"}, headers={**OA_AUTH, "x-stub-words": "many"})
    assert (r.status_code, r.json()["error"]["message"]) == (
        400,
        "x-stub-words must be an integer.",
    )
    r = client.post(RESP, json={"model": "m1", "input": "x"})
    assert (r.status_code, r.json()["error"]["code"]) == (401, "invalid_api_key")
    r = client.post(RESP, json={"input": "x"}, headers=OA_AUTH)
    assert (r.status_code, r.json()["error"]["message"]) == (
        400,
        "model: a non-empty string is required.",
    )


def test_absent_input_counts_only_the_instructions(client: httpx.Client) -> None:
    body = {"model": "m1", "instructions": "say hi"}
    data = client.post(RESP, json=body, headers=OA_AUTH).json()
    assert data["usage"] == usage(2, 8)


# --------------------------------------------------------------------------- log and faults


def test_calls_log_records_path_model_key_stream_and_body(stub: Any, client: httpx.Client) -> None:
    sdk = openai.OpenAI(base_url=stub.url + "/openai/v1", api_key="sk-resp", max_retries=0)
    sdk.responses.create(model="m1", input="hi", user="u-1", max_output_tokens=50)
    with sdk.responses.stream(model="m1", input="hi") as stream:
        stream.until_done()
    record = {
        "path": "/openai/v1/responses",
        "shape": "openai",
        "model": "m1",
        "key": "sk-resp",
        "fault": None,
        "status": 200,
        "traceparent": None,
    }
    assert calls(client) == [
        {
            **record,
            "seq": 1,
            "stream": False,
            "user": "u-1",
            "max_tokens": 50,
            "body": {"model": "m1", "input": "hi", "user": "u-1", "max_output_tokens": 50},
        },
        {
            **record,
            "seq": 2,
            "stream": True,
            "user": None,
            "max_tokens": None,
            "body": {"model": "m1", "stream": True, "input": "hi"},
        },
    ]


def test_status_faults_answer_in_openai_shape(oa_sdk: openai.OpenAI, client: httpx.Client) -> None:
    queue(client, {"kind": "429", "retry_after": 4}, {"kind": "500"})
    with pytest.raises(openai.RateLimitError) as caught:
        oa_sdk.responses.create(model="m1", input="x")
    assert caught.value.response.headers["retry-after"] == "4"
    assert caught.value.body == {
        "message": "Rate limit reached (stub fault).",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
    with (
        pytest.raises(openai.InternalServerError),
        oa_sdk.responses.stream(model="m1", input="x") as stream,
    ):
        stream.until_done()
    assert [(c["fault"], c["status"], c["stream"]) for c in calls(client)] == [
        ("429", 429, False),
        ("500", 500, True),
    ]


def test_fail_after_tokens_cuts_the_stream_after_n_deltas(client: httpx.Client) -> None:
    queue(client, {"kind": "fail_after_tokens"}, {"kind": "fail_after_tokens", "after_tokens": 3})
    status, text = read_until_broken(client, {"model": "m1", "input": "x", "stream": True})
    assert status == 200
    events = stream_events(text)
    assert [e["type"] for e in events] == TEXT_EVENTS[:4] + ["response.output_text.delta"] * 2
    assert [e["delta"] for e in events[4:]] == WORDS_M1[:2]
    body = {"model": "m1", "input": "x", "tools": TOOLS, "stream": True}
    status, text = read_until_broken(client, body)
    events = stream_events(text)
    assert [e["type"] for e in events][-5:] == [
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
    ]
    assert [c["status"] for c in calls(client)] == [None, None]


def test_fail_after_all_deltas_still_withholds_the_final_event(client: httpx.Client) -> None:
    queue(client, {"kind": "fail_after_tokens", "after_tokens": 99})
    body = {"model": "m1", "input": "x", "stream": True}
    _, text = read_until_broken(client, body)
    assert [e["type"] for e in stream_events(text)] == TEXT_EVENTS[:-1]


def test_drop_faults_close_the_connection(client: httpx.Client) -> None:
    queue(client, {"kind": "fail_before_first_token"}, {"kind": "fail_after_tokens"})
    for _ in range(2):
        with pytest.raises(httpx.RemoteProtocolError):
            client.post(RESP, json={"model": "m1", "input": "x"}, headers=OA_AUTH)
    queue(client, {"kind": "fail_before_first_token"})
    status, text = read_until_broken(client, {"model": "m1", "input": "x", "stream": True})
    assert (status, text) == (200, "")
    assert [(c["fault"], c["status"]) for c in calls(client)] == [
        ("fail_before_first_token", None),
        ("fail_after_tokens", None),
        ("fail_before_first_token", None),
    ]


def test_slow_waits_before_each_delta(client: httpx.Client) -> None:
    queue(client, {"kind": "slow", "delay_ms": 40}, {"kind": "slow", "delay_ms": 30})
    body = {"model": "m1", "input": "x", "stream": True}
    start = time.monotonic()
    arrivals = []
    headers = {**OA_AUTH, "x-stub-words": "3"}
    with client.stream("POST", RESP, json=body, headers=headers) as r:
        for line in r.iter_lines():
            if line == "event: response.output_text.delta":
                arrivals.append(time.monotonic() - start)
    assert len(arrivals) == 3 and arrivals[-1] >= 0.12
    start = time.monotonic()
    r = client.post(RESP, json={"model": "m1", "input": "x"}, headers=OA_AUTH)  # 8 x 30 ms
    assert r.status_code == 200 and time.monotonic() - start >= 0.24


# --------------------------------------------------------------------------- prompt caching


def test_repeated_input_prefix_reports_cached_tokens(client: httpx.Client) -> None:
    instructions = " ".join(["word"] * 70)
    first = {
        "model": "m1",
        "instructions": instructions,
        "input": [{"role": "user", "content": "a"}],
    }
    longer = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "b"},
    ]
    second = {**first, "input": longer}

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        return client.post(RESP, json=body, headers=OA_AUTH).json()["usage"]

    assert answer(first) == usage(71, 8)
    assert answer(second) == usage(73, 8, cached=71)  # instructions + "a"
    assert answer({**second, "model": "m2"}) == usage(73, 8)
    client.delete("/_stub/calls")
    assert answer(second) == usage(73, 8)


def test_chat_calls_do_not_warm_the_responses_cache(client: httpx.Client) -> None:
    long_text = " ".join(["word"] * 70)
    messages = [{"role": "user", "content": long_text}, {"role": "user", "content": "x"}]
    assert client.post(OA, json={"model": "m1", "messages": messages}, headers=OA_AUTH).is_success
    body = {"model": "m1", "input": [messages[0], {"role": "user", "content": "y"}]}
    r = client.post(RESP, json=body, headers=OA_AUTH)
    assert r.json()["usage"] == usage(71, 8)
