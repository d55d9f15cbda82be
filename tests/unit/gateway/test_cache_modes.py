"""A cached answer served in the other mode: a stored whole answer streamed, a stored stream
answered whole. Each client shape reads both through the official SDK's own types and
accumulators, and must see the same text, tool calls, finish reason and token counts."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from anthropic.lib.streaming._messages import accumulate_event  # MessageStream's; unexported
from anthropic.types import Message, RawMessageStreamEvent
from openai._models import construct_type
from openai._types import omit
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.cache.modes import (
    chunks_are_portable,
    chunks_from_completion,
    completion_from_chunks,
    completion_is_portable,
    text_pieces,
)
from gateway.shapes import anthropic as anthropic_shape
from gateway.shapes import openai as openai_shape
from gateway.shapes import responses as responses_shape
from gateway.shapes.protocols import ClientShape
from gateway.shapes.requests_to_anthropic import JSON_TOOL
from gateway.types import ANTHROPIC, OPENAI, Chunk, Completion, ModelRequest

ANTHROPIC_EVENT: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
REQUEST_ID = "req123"
TEXT = "The capital of France is Paris, a city on the Seine with about two million people."
WEATHER_ARGS = {"city": "Paris", "unit": "celsius", "days": 3}

# ---------------------------------------------------------------- what vendors answer

OPENAI_USAGE = {
    "prompt_tokens": 31,
    "completion_tokens": 19,
    "total_tokens": 50,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
}


def openai_answer(*messages: dict, finish: str = "stop") -> dict:
    return {
        "id": "chatcmpl-Bx1",
        "object": "chat.completion",
        "created": 1765000000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": index,
                "message": {"role": "assistant", "refusal": None, "annotations": [], **message},
                "logprobs": None,
                "finish_reason": finish,
            }
            for index, message in enumerate(messages)
        ],
        "usage": OPENAI_USAGE,
        "service_tier": "default",
        "system_fingerprint": "fp_560af6e559",
    }


OPENAI_TEXT = openai_answer({"content": TEXT})
OPENAI_TOOL = openai_answer(
    {
        "content": None,
        "tool_calls": [
            {
                "id": "call_a1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps(WEATHER_ARGS)},
            },
            {
                "id": "call_b2",
                "type": "function",
                "function": {"name": "get_time", "arguments": '{"tz":"Europe/Paris"}'},
            },
        ],
    },
    finish="tool_calls",
)
OPENAI_TWO = openai_answer({"content": TEXT}, {"content": "Paris."})

ANTHROPIC_USAGE = {
    "input_tokens": 12,
    "cache_creation_input_tokens": 5,
    "cache_read_input_tokens": 100,
    "output_tokens": 23,
    "service_tier": "standard",
}


def anthropic_answer(*content: dict, stop: str = "end_turn") -> dict:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": list(content),
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": ANTHROPIC_USAGE,
    }


ANTHROPIC_TEXT = anthropic_answer({"type": "text", "text": TEXT})
ANTHROPIC_TOOL = anthropic_answer(
    {"type": "text", "text": "Let me check the weather."},
    {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": WEATHER_ARGS},
    {"type": "tool_use", "id": "toolu_02B", "name": "get_time", "input": {}},
    stop="tool_use",
)


def stored(data: dict) -> Completion:
    if data.get("type") == "message":
        return anthropic_shape.completion_from_vendor(data, model="claude-x")
    return openai_shape.completion_from_vendor(data, model="gpt-x")


# ---------------------------------------------------------------- what clients read


def request(client: str, *, stream: bool) -> ModelRequest:
    if client == "openai":
        body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        return openai_shape.parse_request(body)
    if client == "anthropic":
        return anthropic_shape.parse_request(
            {"model": "m", "max_tokens": 500, "messages": [{"role": "user", "content": "Hi"}]}
            | {"stream": stream}
        )
    return responses_shape.parse_request({"model": "m", "input": "Hi", "stream": stream})


SHAPES: dict[str, ClientShape] = {
    "openai": openai_shape.OPENAI_SHAPE,
    "anthropic": anthropic_shape.ANTHROPIC_SHAPE,
    "responses": responses_shape.RESPONSES_SHAPE,
}


def whole_view(client: str, completion: Completion) -> list[dict]:
    """Render a whole answer to the client and read it with the SDK's type."""
    body = SHAPES[client].render_completion(
        completion, request_id=REQUEST_ID, req=request(client, stream=False)
    )
    return read(client, orjson.loads(body))


def stream_view(client: str, arrivals: list[list[Chunk]], *, model: str) -> list[dict]:
    """Render a stream to the client, as the pipeline does, and accumulate it with the SDK."""
    renderer = SHAPES[client].stream_renderer(
        request(client, stream=True), request_id=REQUEST_ID, model=model
    )
    out, finish = [], None
    for arrival in arrivals:
        for chunk in arrival:
            finish = chunk.finish_reason or finish
            out.append(renderer.chunk(chunk))
    out.append(renderer.finish(finish or "stop", anthropic_shape.Usage()))
    events = [
        orjson.loads(line[6:])
        for line in b"".join(out).decode().split("\n")
        if line.startswith("data: ") and line != "data: [DONE]"
    ]
    if client == "openai":
        assert b"".join(out).endswith(b"data: [DONE]\n\n")
        return read(client, openai_accumulated(events))
    if client == "anthropic":
        snapshot, buffers = None, {}  # type: ignore[var-annotated]
        for event in events:
            typed = ANTHROPIC_EVENT.validate_python(event)
            snapshot = accumulate_event(event=typed, current_snapshot=snapshot, json_bufs=buffers)
        assert events[-1] == {"type": "message_stop"}
        assert snapshot is not None
        return read(client, snapshot.to_dict())
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        state.handle_event(construct_type(type_=ResponseStreamEvent, value=event))  # type: ignore[arg-type]
    assert events[-1]["type"] == "response.completed"
    return read(client, events[-1]["response"])


def openai_accumulated(events: list[dict]) -> dict:
    state = ChatCompletionStreamState()
    for event in events:
        state.handle_chunk(ChatCompletionChunk.model_validate(event))
    data = state.get_final_completion().to_dict()
    assert events[-1]["choices"] == []  # the usage chunk the client asked for, last
    return {**data, "usage": events[-1]["usage"]}


def read(client: str, data: dict) -> list[dict]:
    """Return what each answer says, per choice, as the client's SDK types hold it."""
    if client == "openai":
        answer = ChatCompletion.model_validate(data)
        usage = answer.usage
        assert usage is not None
        counts = (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)
        return [
            {
                "text": choice.message.content or "",
                "calls": [
                    (c.id, c.function.name, json.loads(c.function.arguments))  # type: ignore[union-attr]
                    for c in choice.message.tool_calls or []
                ],
                "finish": choice.finish_reason,
                "usage": counts,
                "id": answer.id,
            }
            for choice in answer.choices
        ]
    if client == "anthropic":
        message = Message.model_validate(data)
        u = message.usage
        return [
            {
                "text": "".join(b.text for b in message.content if b.type == "text"),
                "calls": [(b.id, b.name, b.input) for b in message.content if b.type == "tool_use"],
                "finish": message.stop_reason,
                "usage": (
                    u.input_tokens,
                    u.output_tokens,
                    u.cache_read_input_tokens,
                    u.cache_creation_input_tokens,
                ),
                "id": message.id,
            }
        ]
    response = Response.model_validate(data)
    ru = response.usage
    assert ru is not None
    return [
        {
            "text": response.output_text,
            "calls": [
                (item.call_id, item.name, json.loads(item.arguments))
                for item in response.output
                if item.type == "function_call"
            ],
            "finish": response.status,
            "usage": (ru.input_tokens, ru.output_tokens, ru.input_tokens_details.cached_tokens),
            "id": response.id,
        }
    ]


CLIENTS = ["openai", "anthropic", "responses"]
ANSWERS = {
    "openai-text": OPENAI_TEXT,
    "openai-tools": OPENAI_TOOL,
    "anthropic-text": ANTHROPIC_TEXT,
    "anthropic-tools": ANTHROPIC_TOOL,
}

EXPECTED = {
    "openai-text": (TEXT, []),
    "openai-tools": ("", ["get_weather", "get_time"]),
    "anthropic-text": (TEXT, []),
    "anthropic-tools": ("Let me check the weather.", ["get_weather", "get_time"]),
}

# ---------------------------------------------------------------- whole answer -> stream


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("answer", list(ANSWERS))
def test_a_stored_answer_streams_what_the_client_reads_whole(client, answer):
    completion = stored(ANSWERS[answer])
    assert completion_is_portable(completion)
    arrivals = chunks_from_completion(completion, request(client, stream=True))
    view = stream_view(client, arrivals, model=completion.model)
    assert view == whole_view(client, completion)
    text, calls = EXPECTED[answer]
    assert (view[0]["text"], [call[1] for call in view[0]["calls"]]) == (text, calls)


def test_openai_text_streams_in_pieces_of_a_few_words_and_ends_with_finish_and_usage():
    completion = stored(OPENAI_TEXT)
    arrivals = chunks_from_completion(completion, request("openai", stream=True))
    texts = [chunk.text for arrival in arrivals for chunk in arrival if chunk.text]
    assert "".join(texts) == TEXT
    assert texts == [
        "The capital of France is ",
        "Paris, a city on the Seine ",
        "with about two million people.",
    ]
    last = arrivals[-1]
    assert [chunk.finish_reason for chunk in last] == ["stop", None]
    assert last[-1].usage == completion.usage
    assert sum(chunk.generated for arrival in arrivals for chunk in arrival) == 3


def test_anthropic_tool_input_streams_in_pieces_and_the_usage_keeps_cache_writes():
    completion = stored(ANTHROPIC_TOOL)
    arrivals = chunks_from_completion(completion, request("anthropic", stream=True))
    pieces = [
        c.event["delta"]["partial_json"]
        for a in arrivals
        for c in a
        if c.event and c.event.get("delta", {}).get("type") == "input_json_delta"
    ]
    assert pieces == ['{"city":"Paris","unit":"', 'celsius","days":3}', "{}"]
    last = arrivals[-1][-1]
    assert last.finish_reason == "tool_calls"
    assert last.usage == completion.usage
    assert (completion.usage.input_tokens, completion.usage.cache_write_tokens) == (117, 5)


def test_two_openai_choices_stream_by_index():
    completion = stored(OPENAI_TWO)
    assert completion_is_portable(completion)
    arrivals = chunks_from_completion(completion, request("openai", stream=True))
    view = stream_view("openai", arrivals, model="gpt-x")
    assert view == whole_view("openai", completion)
    assert [choice["text"] for choice in view] == [TEXT, "Paris."]


def test_a_json_mode_answer_from_anthropic_streams_as_the_same_content():
    data = anthropic_answer(
        {"type": "tool_use", "id": "toolu_9", "name": JSON_TOOL, "input": WEATHER_ARGS},
        stop="tool_use",
    )
    completion = stored(data)
    arrivals = chunks_from_completion(completion, request("openai", stream=True))
    view = stream_view("openai", arrivals, model="m-1")
    assert view == whole_view("openai", completion)
    assert (view[0]["text"], view[0]["finish"]) == (
        json.dumps(WEATHER_ARGS, separators=(",", ":")),
        "stop",
    )


def test_an_anthropic_stop_sequence_survives_both_ways():
    data = {**anthropic_answer({"type": "text", "text": "a b"}, stop="stop_sequence")}
    data["stop_sequence"] = "END"
    arrivals = chunks_from_completion(stored(data), request("anthropic", stream=True))
    chunks = [chunk for arrival in arrivals for chunk in arrival]
    back = completion_from_chunks(chunks, request("anthropic", stream=False), model="claude-x")
    assert (back.data["stop_reason"], back.data["stop_sequence"]) == ("stop_sequence", "END")
    assert back.data["content"] == data["content"]
    assert back.data["usage"] == ANTHROPIC_USAGE


def test_a_long_word_is_cut_at_the_piece_limit():
    assert text_pieces("x" * 70) == ["x" * 32, "x" * 32, "x" * 6]
    assert text_pieces("  hi") == ["  hi"]
    assert text_pieces("") == []


# ---------------------------------------------------------------- stream -> whole answer


def openai_vendor_stream(*deltas: dict, finish: str) -> list[list[Chunk]]:
    """Return what the OpenAI adapter yields for these deltas: its chunks, one per arrival."""
    head = {"id": "chatcmpl-S1", "object": "chat.completion.chunk", "created": 1765000000}
    head |= {"model": "gpt-4o-mini", "system_fingerprint": "fp_1", "service_tier": "default"}

    def chunk(delta: dict, finish_reason: str | None = None) -> dict:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**head, "choices": [choice], "usage": None}

    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    events += [chunk(delta) for delta in deltas] + [chunk({}, finish)]
    events.append({**head, "choices": [], "usage": OPENAI_USAGE})
    return [[openai_shape.chunk_from_vendor(event)] for event in events]


def anthropic_vendor_stream(*blocks: tuple[dict, list[dict]], stop: str) -> list[list[Chunk]]:
    """Return what the Anthropic adapter yields for these blocks (start, deltas)."""
    start_usage = {**ANTHROPIC_USAGE, "output_tokens": 1}
    message = {**ANTHROPIC_TEXT, "content": [], "stop_reason": None, "usage": start_usage}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"message": message})]
    for index, (block, deltas) in enumerate(blocks):
        events.append(("content_block_start", {"index": index, "content_block": block}))
        events += [("content_block_delta", {"index": index, "delta": d}) for d in deltas]
        events.append(("content_block_stop", {"index": index}))
    events.append(("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None}}))
    events[-1][1]["usage"] = {"output_tokens": 23}
    arrivals = []
    for kind, data in events:
        chunk = anthropic_shape.chunk_from_event(kind, {"type": kind, **data})
        assert chunk is not None
        arrivals.append([chunk])
    return arrivals


STREAMS = {
    "openai-text": lambda: openai_vendor_stream(
        {"content": "The capital "}, {"content": "is Paris."}, finish="stop"
    ),
    "openai-tools": lambda: openai_vendor_stream(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_a1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]},
        finish="tool_calls",
    ),
    "anthropic-text": lambda: anthropic_vendor_stream(
        (
            {"type": "text", "text": ""},
            [{"type": "text_delta", "text": "The capital "}, {"type": "text_delta", "text": "is"}],
        ),
        stop="end_turn",
    ),
    "anthropic-tools": lambda: anthropic_vendor_stream(
        ({"type": "text", "text": ""}, [{"type": "text_delta", "text": "Checking."}]),
        (
            {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {}},
            [
                {"type": "input_json_delta", "partial_json": ""},
                {"type": "input_json_delta", "partial_json": '{"city": "Par'},
                {"type": "input_json_delta", "partial_json": 'is"}'},
            ],
        ),
        stop="tool_use",
    ),
}


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("stream", list(STREAMS))
def test_a_stored_stream_answers_whole_what_the_client_read_streamed(client, stream):
    arrivals = STREAMS[stream]()
    chunks = [chunk for arrival in arrivals for chunk in arrival]
    assert chunks_are_portable(chunks)
    completion = completion_from_chunks(chunks, request(client, stream=False), model="m-1")
    assert whole_view(client, completion) == stream_view(client, arrivals, model="m-1")


def test_a_stored_stream_keeps_the_usage_it_was_billed_and_its_finish():
    chunks = [c for a in STREAMS["anthropic-tools"]() for c in a]
    completion = completion_from_chunks(chunks, request("anthropic", stream=False), model="m-1")
    assert completion.shape == ANTHROPIC
    assert completion.finish_reason == "tool_calls"
    assert completion.usage.input_tokens == 117
    assert completion.usage.output_tokens == 23
    assert completion.usage.cache_write_tokens == 5
    assert completion.data["content"][1]["input"] == {"city": "Paris"}
    chunks = [c for a in STREAMS["openai-text"]() for c in a]
    completion = completion_from_chunks(chunks, request("openai", stream=False), model="m-1")
    assert (completion.shape, completion.text, completion.finish_reason) == (
        OPENAI,
        "The capital is Paris.",
        "stop",
    )
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (31, 19)


def test_two_streamed_openai_choices_answer_whole_by_index():
    arrivals = chunks_from_completion(stored(OPENAI_TWO), request("openai", stream=True))
    chunks = [chunk for arrival in arrivals for chunk in arrival]
    assert chunks_are_portable(chunks)
    completion = completion_from_chunks(chunks, request("openai", stream=False), model="m-1")
    view = whole_view("openai", completion)
    assert view == stream_view("openai", arrivals, model="m-1")
    assert [choice["text"] for choice in view] == [TEXT, "Paris."]


def test_a_stream_whose_usage_came_without_an_event_renders_that_usage():
    arrivals = STREAMS["openai-text"]()
    usage = arrivals[-1][0].usage
    arrivals[-1] = [Chunk(shape=OPENAI, usage=usage)]  # as the Gemini adapter yields it
    chunks = [chunk for arrival in arrivals for chunk in arrival]
    completion = completion_from_chunks(chunks, request("openai", stream=False), model="m-1")
    assert completion.data["usage"]["prompt_tokens"] == 31
    assert completion.data["usage"]["completion_tokens"] == 19


# ---------------------------------------------------------------- what is not portable


@pytest.mark.parametrize(
    "data",
    [
        anthropic_answer(
            {"type": "thinking", "thinking": "Hmm.", "signature": "sig"},
            {"type": "text", "text": "Paris."},
        ),
        anthropic_answer(
            {"type": "redacted_thinking", "data": "xyz"}, {"type": "text", "text": "a"}
        ),
        anthropic_answer({"type": "text", "text": "a", "citations": [{"type": "x"}]}),
        anthropic_answer({"type": "text", "text": "a"}, stop="refusal"),
        anthropic_answer({"type": "text", "text": "a"}, stop="pause_turn"),
        openai_answer({"content": None, "refusal": "I can't help with that."}),
        openai_answer({"content": "a", "reasoning": "Let me think."}),
        openai_answer({"content": "a", "audio": {"id": "audio_1", "data": "AAA"}}),
        openai_answer({"content": "a", "annotations": [{"type": "url_citation"}]}),
        openai_answer({"content": "a"}, finish="content_filter"),
        {**OPENAI_TEXT, "choices": [{**OPENAI_TEXT["choices"][0], "logprobs": {"content": []}}]},
    ],
)
def test_answers_the_other_mode_cannot_carry_are_not_portable(data):
    assert not completion_is_portable(stored(data))


def test_responses_and_embedding_answers_are_not_portable():
    response = {"id": "resp_1", "object": "response", "status": "completed", "output": []}
    completion = responses_shape.completion_from_vendor(response, model="m")
    assert not completion_is_portable(completion)
    assert not completion_is_portable(
        Completion("embeddings", {}, "", "stop", completion.usage, "m")
    )


def test_streams_with_thinking_reasoning_or_no_end_are_not_portable():
    thinking = STREAMS["anthropic-text"]()
    start = {"type": "content_block_start", "index": 1, "content_block": {"type": "thinking"}}
    delta = {"type": "content_block_delta", "index": 1}
    delta["delta"] = {"type": "thinking_delta", "thinking": "Hmm."}
    extra = [anthropic_shape.chunk_from_event(e["type"], e) for e in (start, delta)]
    chunks = [c for a in thinking for c in a] + [c for c in extra if c is not None]
    assert not chunks_are_portable(chunks)

    reasoning = [c for a in STREAMS["openai-text"]() for c in a]
    event = dict(reasoning[1].event or {})
    event["choices"] = [
        {"index": 0, "delta": {"reasoning": "Let me think."}, "finish_reason": None}
    ]
    assert not chunks_are_portable(
        [reasoning[0], openai_shape.chunk_from_vendor(event), *reasoning[1:]]
    )

    responses_chunk = responses_shape.chunk_from_vendor({"type": "response.output_text.delta"})
    assert not chunks_are_portable([responses_chunk])
    assert not chunks_are_portable([c for a in STREAMS["openai-text"]()[:-2] for c in a])
    assert not chunks_are_portable([])
