"""JSON mode (OpenAI ``response_format``), OpenAI reasoning models, Anthropic thinking."""

from __future__ import annotations

from typing import Any, Literal

import anthropic
import httpx
import openai
import pydantic
import pytest

from ._support import (
    AN,
    AN_AUTH,
    ANSWER_M1,
    OA,
    OA_AUTH,
    WORDS_M1,
    an_usage,
    oa_usage,
    parse_anthropic,
    parse_anthropic_events,
    parse_openai,
    parse_openai_chunks,
    sse_data,
    sse_events,
    user,
)

QUESTION = user("answer in json")  # 3 prompt words


class Inner(pydantic.BaseModel):
    label: str
    tags: list[str]


class Report(pydantic.BaseModel):
    city: str
    days: int
    temp: float
    ok: bool
    unit: Literal["c", "f"]
    inner: Inner


REPORT_JSON = (
    '{"city":"stub","days":1,"temp":1.5,"ok":true,"unit":"c","inner":{"label":"stub","tags":[]}}'
)
REPORT = Report(
    city="stub", days=1, temp=1.5, ok=True, unit="c", inner=Inner(label="stub", tags=[])
)


def pieces(text: str) -> list[str]:
    return [text[i : i + 8] for i in range(0, len(text), 8)]


# --------------------------------------------------------------------------- JSON mode


def test_json_object_wraps_the_answer_and_counts_8_char_pieces(client: httpx.Client) -> None:
    body = {"model": "m1", "messages": QUESTION, "response_format": {"type": "json_object"}}
    data = client.post(OA, json=body, headers=OA_AUTH).json()
    content = data["choices"][0]["message"]["content"]
    assert content == '{"answer":"Hello from the stub model m1 reply ok"}'
    assert len(content) == 50
    assert data["choices"][0]["finish_reason"] == "stop"
    assert data["usage"] == oa_usage(3, 7)  # ceil(50 / 8)
    r = client.post(OA, json={**body, "stream": True}, headers=OA_AUTH)
    tokens = [ch["choices"][0]["delta"].get("content") for ch in sse_data(r.text)[1:-2]]
    assert tokens == pieces(content)
    assert all(len(t) == 8 for t in tokens[:-1]) and tokens[-1] == '"}'
    body = {**body, "response_format": {"type": "text"}}
    data = client.post(OA, json=body, headers=OA_AUTH).json()
    assert data["choices"][0]["message"]["content"] == ANSWER_M1
    assert data["usage"] == oa_usage(3, 8)


def test_json_schema_answer_is_built_from_the_schema(client: httpx.Client) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["name", "n"],
        "additionalProperties": False,
    }
    body = {
        "model": "m1",
        "messages": QUESTION,
        "max_tokens": 1,  # JSON answers are never truncated
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": schema, "strict": True},
        },
    }
    data = client.post(OA, json=body, headers=OA_AUTH).json()
    assert data["choices"][0]["message"]["content"] == '{"name":"stub","n":1}'
    assert data["choices"][0]["finish_reason"] == "stop"
    assert data["usage"] == oa_usage(3, 3)
    parse_openai(data)


def test_openai_sdk_parse_and_stream_helper_fill_a_pydantic_model(oa_sdk: openai.OpenAI) -> None:
    messages: Any = QUESTION
    done = oa_sdk.chat.completions.parse(model="m1", messages=messages, response_format=Report)
    assert done.choices[0].message.content == REPORT_JSON
    assert done.choices[0].message.parsed == REPORT
    assert done.usage is not None and done.usage.completion_tokens == len(pieces(REPORT_JSON)) == 12
    with oa_sdk.chat.completions.stream(
        model="m1",
        messages=messages,
        response_format=Report,
        stream_options={"include_usage": True},
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "content.delta"]
        final = stream.get_final_completion()
    assert deltas == ["", *pieces(REPORT_JSON)]  # the role chunk carries content ""
    assert final.choices[0].message.parsed == REPORT
    assert final.usage is not None and final.usage.completion_tokens == 12


# --------------------------------------------------------------------------- OpenAI reasoning


@pytest.mark.parametrize("model", ["o1", "o3-mini", "o4-mini", "gpt-5", "gpt-5-nano"])
def test_reasoning_models_refuse_max_tokens_like_openai(client: httpx.Client, model: str) -> None:
    r = client.post(
        OA, json={"model": model, "messages": QUESTION, "max_tokens": 5}, headers=OA_AUTH
    )
    assert r.status_code == 400
    assert r.json() == {
        "error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "unsupported_parameter",
        }
    }
    r = client.post(
        OA, json={"model": "gpt-4o", "messages": QUESTION, "max_tokens": 5}, headers=OA_AUTH
    )
    assert r.status_code == 200


def test_reasoning_tokens_count_inside_completion_tokens(client: httpx.Client) -> None:
    body: dict[str, Any] = {"model": "o3-mini", "messages": QUESTION}
    data = client.post(OA, json=body, headers=OA_AUTH).json()
    assert data["usage"] == oa_usage(3, 8 + 16, reasoning=16)
    # Reasoning spends from the cap first, as OpenAI counts it: the words get what is left.
    body = {"model": "gpt-5-mini", "messages": QUESTION, "max_completion_tokens": 19}
    data = client.post(OA, json=body, headers=OA_AUTH).json()
    assert data["choices"][0]["message"]["content"] == "Hello from the"
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["usage"] == oa_usage(3, 3 + 16, reasoning=16)
    body = {"model": "gpt-5-mini", "messages": QUESTION, "max_completion_tokens": 3}
    data = client.post(OA, json=body, headers=OA_AUTH).json()
    assert data["choices"][0]["message"]["content"] == ""
    assert data["usage"] == oa_usage(3, 3, reasoning=3)
    body = {"model": "gpt-4o", "messages": QUESTION, "reasoning_effort": "low", "n": 2}
    data = client.post(OA, json=body, headers=OA_AUTH).json()
    assert data["usage"] == oa_usage(3, 2 * (8 + 16), reasoning=32)
    body = {
        "model": "o3",
        "messages": QUESTION,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    r = client.post(OA, json=body, headers=OA_AUTH)
    assert sse_data(r.text)[-2]["usage"] == oa_usage(3, 24, reasoning=16)
    parse_openai_chunks(r.text)


def test_openai_sdk_sees_reasoning_tokens_and_the_refusal(oa_sdk: openai.OpenAI) -> None:
    messages: Any = QUESTION
    done = oa_sdk.chat.completions.create(model="o4-mini", messages=messages)
    assert done.usage is not None and done.usage.completion_tokens_details is not None
    assert done.usage.completion_tokens_details.reasoning_tokens == 16
    with pytest.raises(openai.BadRequestError) as caught:
        oa_sdk.chat.completions.create(model="o4-mini", messages=messages, max_tokens=9)
    assert (caught.value.code, caught.value.param) == ("unsupported_parameter", "max_tokens")


# --------------------------------------------------------------------------- Anthropic thinking

THINKING: Any = {"type": "enabled", "budget_tokens": 1024}  # raw bodies' and the SDK's
THINKING_BLOCK = {
    "type": "thinking",
    "thinking": "Stub thinking about it.",
    "signature": "stub-signature",
}


def test_thinking_block_comes_first_and_counts_4_output_tokens(client: httpx.Client) -> None:
    body = {"model": "m1", "max_tokens": 2000, "messages": QUESTION, "thinking": THINKING}
    data = client.post(AN, json=body, headers=AN_AUTH).json()
    assert data["content"] == [THINKING_BLOCK, {"type": "text", "text": ANSWER_M1}]
    assert data["stop_reason"] == "end_turn"
    assert data["usage"] == an_usage(3, 4 + 8)
    parse_anthropic(data)
    disabled = {**body, "thinking": {"type": "disabled"}}
    assert client.post(AN, json=disabled, headers=AN_AUTH).json()["usage"] == an_usage(3, 8)


@pytest.mark.parametrize("budget", [2000, 3000])
def test_thinking_budget_not_below_max_tokens_is_400(client: httpx.Client, budget: int) -> None:
    body = {
        "model": "m1",
        "max_tokens": 2000,
        "messages": QUESTION,
        "thinking": {"type": "enabled", "budget_tokens": budget},
    }
    r = client.post(AN, json=body, headers=AN_AUTH)
    assert r.status_code == 400
    assert r.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "max_tokens must be greater than thinking.budget_tokens",
        },
    }


def test_thinking_stream_exact_events(client: httpx.Client) -> None:
    body = {
        "model": "m1",
        "max_tokens": 2000,
        "messages": QUESTION,
        "thinking": THINKING,
        "stream": True,
    }
    r = client.post(AN, json=body, headers=AN_AUTH)
    events = sse_events(r.text)
    assert [name for name, _ in events] == (
        ["message_start", "content_block_start", "ping"]
        + ["content_block_delta"] * 5
        + ["content_block_stop", "content_block_start"]
        + ["content_block_delta"] * 8
        + ["content_block_stop", "message_delta", "message_stop"]
    )
    assert events[1][1]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert [d["delta"] for _, d in events[3:8]] == [
        {"type": "thinking_delta", "thinking": "Stub"},
        {"type": "thinking_delta", "thinking": " thinking"},
        {"type": "thinking_delta", "thinking": " about"},
        {"type": "thinking_delta", "thinking": " it."},
        {"type": "signature_delta", "signature": "stub-signature"},
    ]
    assert all(d["index"] == 0 for _, d in events[1:9] if "index" in d)
    assert events[9][1] == {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "text", "text": ""},
    }
    assert [d["delta"]["text"] for _, d in events[10:18]] == WORDS_M1
    assert all(d["index"] == 1 for _, d in events[9:19])
    assert events[19][1]["usage"] == {"output_tokens": 12}
    parse_anthropic_events(r.text)


def test_anthropic_sdk_stream_helper_accumulates_thinking(an_sdk: anthropic.Anthropic) -> None:
    with an_sdk.messages.stream(
        model="m1",
        max_tokens=2000,
        messages=QUESTION,
        thinking=THINKING,
    ) as stream:
        final = stream.get_final_message()
    thinking, text = final.content
    assert thinking.type == "thinking"
    assert (thinking.thinking, thinking.signature) == ("Stub thinking about it.", "stub-signature")
    assert text.type == "text" and text.text == ANSWER_M1
    assert (final.usage.input_tokens, final.usage.output_tokens) == (3, 12)
    with pytest.raises(anthropic.BadRequestError):
        an_sdk.messages.create(
            model="m1",
            max_tokens=1000,
            messages=QUESTION,
            thinking={"type": "enabled", "budget_tokens": 1024},
        )
