"""Shared helpers of the stub's fidelity tests: fixtures live in conftest.py."""

from __future__ import annotations

from typing import Any

import orjson
import pydantic
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk

OA = "/v1/chat/completions"
AN = "/v1/messages"
AN_COUNT = "/v1/messages/count_tokens"
OA_AUTH = {"Authorization": "Bearer sk-test-1"}
AN_AUTH = {"x-api-key": "sk-ant-1"}
ANSWER_M1 = "Hello from the stub model m1 reply ok"
WORDS_M1 = ["Hello", " from", " the", " stub", " model", " m1", " reply", " ok"]
_STREAM_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RawMessageStreamEvent)


def oa_usage(prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def an_usage(
    input_tokens: int, output_tokens: int, creation: int = 0, read: int = 0
) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": creation,
        "cache_read_input_tokens": read,
        "output_tokens": output_tokens,
    }


def user(text: str) -> list[Any]:
    """Return one user message: a raw body's, or either SDK's message param (hence Any)."""
    return [{"role": "user", "content": text}]


def seq_of(response_id: str) -> int:
    """The process counter ``<n>`` of ``chatcmpl-stub-<n>`` / ``msg_stub_<n>``."""
    return int(response_id.replace("-", "_").rsplit("_", 1)[1])


def sse_data(text: str) -> list[Any]:
    out = []
    for line in text.split("\n"):
        if line.startswith("data: "):
            payload = line[6:]
            out.append(payload if payload == "[DONE]" else orjson.loads(payload))
    return out


def sse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in text.split("\n\n"):
        if not block:
            continue
        name_line, data_line = block.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: ")
        events.append((name_line[7:], orjson.loads(data_line[6:])))
    return events


def assert_no_extra(value: Any, where: str = "") -> None:
    """Every field of the parsed SDK model (recursively) is one the SDK declares."""
    if isinstance(value, pydantic.BaseModel):
        assert not value.model_extra, f"{where}: undeclared fields {value.model_extra}"
        for name in type(value).model_fields:
            assert_no_extra(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            assert_no_extra(item, f"{where}[{i}]")


def parse_openai(data: dict[str, Any]) -> ChatCompletion:
    parsed = ChatCompletion.model_validate(data)
    assert_no_extra(parsed, "completion")
    return parsed


def parse_openai_chunks(text: str) -> list[ChatCompletionChunk]:
    items = sse_data(text)
    assert items[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(item) for item in items[:-1]]
    for chunk in chunks:
        assert_no_extra(chunk, "chunk")
    return chunks


def parse_anthropic(data: dict[str, Any]) -> Message:
    parsed = Message.model_validate(data)
    assert_no_extra(parsed, "message")
    return parsed


def parse_anthropic_events(text: str) -> list[Any]:
    parsed = []
    for name, data in sse_events(text):
        assert data["type"] == name
        if name == "ping":
            continue
        event = _STREAM_EVENT.validate_python(data)
        assert_no_extra(event, name)
        parsed.append(event)
    return parsed
