"""Recorded bodies, OpenAI ``n`` / ``logprobs``, stop sequences, ignored parameters."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
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

QUESTION = user("two words")


def calls(c: httpx.Client) -> list[dict[str, Any]]:
    return c.get("/_stub/calls").json()["calls"]


# --------------------------------------------------------------------------- recorded bodies


def test_calls_log_records_the_whole_body_and_ignores_unknown_fields(client: httpx.Client) -> None:
    oa = {
        "model": "m1",
        "messages": QUESTION,
        "seed": 7,
        "temperature": 0.2,
        "top_p": 0.9,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "logit_bias": {"50256": -100},
        "metadata": {"team": "a"},
        "service_tier": "flex",
        "user": "u-1",
        "store": True,
        "prediction": {"type": "content", "content": "x"},
    }
    data = client.post(OA, json=oa, headers=OA_AUTH).json()
    assert data["choices"][0]["message"]["content"] == ANSWER_M1
    assert data["usage"] == oa_usage(2, 8)
    an = {
        "model": "m1",
        "max_tokens": 100,
        "messages": QUESTION,
        "top_k": 5,
        "top_p": 0.5,
        "temperature": 1,
        "metadata": {"user_id": "u-2"},
        "service_tier": "auto",
        "container": None,
    }
    data = client.post(AN, json=an, headers=AN_AUTH).json()
    assert data["usage"] == an_usage(2, 8)
    client.post(OA, content=b"[1, 2]", headers=OA_AUTH)
    client.post(OA, content=b"not json", headers=OA_AUTH)
    client.get("/v1/models", headers=OA_AUTH)
    log = calls(client)
    assert [c["body"] for c in log] == [oa, an, [1, 2], None, None]
    assert [c["status"] for c in log] == [200, 200, 400, 400, 200]
    assert (log[0]["user"], log[1]["user"]) == ("u-1", "u-2")


# --------------------------------------------------------------------------- n


def test_n_answers_n_identical_choices(client: httpx.Client) -> None:
    data = client.post(
        OA, json={"model": "m1", "messages": QUESTION, "n": 3}, headers=OA_AUTH
    ).json()
    assert data["choices"] == [
        {
            "index": i,
            "message": {"role": "assistant", "content": ANSWER_M1},
            "finish_reason": "stop",
        }
        for i in range(3)
    ]
    assert data["usage"] == oa_usage(2, 24)
    parse_openai(data)
    body = {"model": "m1", "messages": QUESTION, "n": 2, "max_tokens": 2}
    data = client.post(OA, json=body, headers=OA_AUTH).json()
    assert [c["finish_reason"] for c in data["choices"]] == ["length", "length"]
    assert data["usage"]["completion_tokens"] == 4


def test_n_stream_sends_each_choice_then_the_finishes(client: httpx.Client) -> None:
    body = {
        "model": "m1",
        "messages": QUESTION,
        "n": 2,
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    r = client.post(OA, json=body, headers=OA_AUTH)
    items = sse_data(r.text)
    assert items[-1] == "[DONE]"
    choices = [ch["choices"][0] for ch in items[:-2]]
    per_choice = [{"role": "assistant", "content": ""}, *({"content": t} for t in WORDS_M1[:3])]
    assert choices == [
        *({"index": 0, "delta": d, "finish_reason": None} for d in per_choice),
        *({"index": 1, "delta": d, "finish_reason": None} for d in per_choice),
        {"index": 0, "delta": {}, "finish_reason": "length"},
        {"index": 1, "delta": {}, "finish_reason": "length"},
    ]
    assert items[-2]["usage"] == oa_usage(2, 6)
    parse_openai_chunks(r.text)


def test_openai_sdk_accumulates_n_choices(oa_sdk: openai.OpenAI) -> None:
    messages: Any = QUESTION
    with oa_sdk.chat.completions.stream(model="m1", messages=messages, n=2) as stream:
        final = stream.get_final_completion()
    assert [(c.index, c.message.content, c.finish_reason) for c in final.choices] == [
        (0, ANSWER_M1, "stop"),
        (1, ANSWER_M1, "stop"),
    ]


# --------------------------------------------------------------------------- logprobs


def entry(token: str, top: int) -> dict[str, Any]:
    utf8 = list(token.encode())
    return {
        "token": token,
        "logprob": -0.5,
        "bytes": utf8,
        "top_logprobs": [{"token": token, "logprob": -1.5, "bytes": utf8}] * top,
    }


def test_logprobs_give_one_entry_per_answer_token(client: httpx.Client) -> None:
    body = {"model": "mé", "messages": QUESTION, "logprobs": True, "top_logprobs": 2}
    data = client.post(OA, json=body, headers=OA_AUTH).json()
    tokens = ["Hello", " from", " the", " stub", " model", " mé", " reply", " ok"]
    assert data["choices"][0]["logprobs"] == {
        "content": [entry(t, 2) for t in tokens],
        "refusal": None,
    }
    assert data["choices"][0]["logprobs"]["content"][5]["bytes"] == [32, 109, 195, 169]
    parse_openai(data)
    data = client.post(OA, json={**body, "logprobs": False}, headers=OA_AUTH).json()
    assert data["choices"][0]["logprobs"] is None
    data = client.post(
        OA, json={"model": "m1", "messages": QUESTION, "logprobs": True}, headers=OA_AUTH
    ).json()
    assert data["choices"][0]["logprobs"]["content"][0]["top_logprobs"] == []


def test_logprobs_in_streams_ride_on_each_content_chunk(client: httpx.Client) -> None:
    body = {
        "model": "m1",
        "messages": QUESTION,
        "logprobs": True,
        "top_logprobs": 1,
        "max_tokens": 2,
        "stream": True,
    }
    r = client.post(OA, json=body, headers=OA_AUTH)
    choices = [ch["choices"][0] for ch in sse_data(r.text)[:-1]]
    assert choices == [
        {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        },
        *(
            {
                "index": 0,
                "delta": {"content": t},
                "logprobs": {"content": [entry(t, 1)], "refusal": None},
                "finish_reason": None,
            }
            for t in ["Hello", " from"]
        ),
        {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"},
    ]
    parse_openai_chunks(r.text)


def test_openai_sdk_reads_logprobs(oa_sdk: openai.OpenAI) -> None:
    messages: Any = QUESTION
    done = oa_sdk.chat.completions.create(
        model="m1", messages=messages, logprobs=True, top_logprobs=3
    )
    assert done.choices[0].logprobs is not None and done.choices[0].logprobs.content is not None
    first = done.choices[0].logprobs.content[0]
    assert (first.token, first.logprob, len(first.top_logprobs)) == ("Hello", -0.5, 3)


# --------------------------------------------------------------------------- stop


@pytest.mark.parametrize(
    "stop,text,finish",
    [
        ("model", "Hello from the stub", "stop"),
        (["ok", "reply"], "Hello from the stub model m1", "stop"),
        (["stub model"], ANSWER_M1, "stop"),  # compared word by word: never matches
        (["Hello"], "", "stop"),
    ],
)
def test_openai_stop_ends_the_answer_before_the_word(
    client: httpx.Client, stop: Any, text: str, finish: str
) -> None:
    data = client.post(
        OA, json={"model": "m1", "messages": QUESTION, "stop": stop}, headers=OA_AUTH
    ).json()
    assert data["choices"][0]["message"]["content"] == text
    assert data["choices"][0]["finish_reason"] == finish
    assert data["usage"]["completion_tokens"] == len(text.split())


def test_openai_stop_and_max_tokens_whichever_comes_first(client: httpx.Client) -> None:
    body = {"model": "m1", "messages": QUESTION, "stop": "model"}
    data = client.post(OA, json={**body, "max_tokens": 2}, headers=OA_AUTH).json()
    assert (data["choices"][0]["message"]["content"], data["choices"][0]["finish_reason"]) == (
        "Hello from",
        "length",
    )
    data = client.post(OA, json={**body, "max_tokens": 4}, headers=OA_AUTH).json()
    assert (data["choices"][0]["message"]["content"], data["choices"][0]["finish_reason"]) == (
        "Hello from the stub",
        "stop",
    )
    r = client.post(OA, json={**body, "stream": True}, headers=OA_AUTH)
    chunks = sse_data(r.text)[:-1]
    assert [ch["choices"][0]["delta"].get("content") for ch in chunks] == ["", *WORDS_M1[:4], None]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_anthropic_stop_sequences_report_the_sequence(client: httpx.Client) -> None:
    body = {
        "model": "m1",
        "max_tokens": 100,
        "messages": QUESTION,
        "stop_sequences": ["reply", "stub"],
    }
    data = client.post(AN, json=body, headers=AN_AUTH).json()
    assert data["content"] == [{"type": "text", "text": "Hello from the"}]
    assert (data["stop_reason"], data["stop_sequence"]) == ("stop_sequence", "stub")
    assert data["usage"] == an_usage(2, 3)
    parse_anthropic(data)
    r = client.post(AN, json={**body, "stream": True}, headers=AN_AUTH)
    events = sse_events(r.text)
    assert [d["delta"]["text"] for n, d in events if n == "content_block_delta"] == WORDS_M1[:3]
    assert events[-2][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "stop_sequence", "stop_sequence": "stub"},
        "usage": {"output_tokens": 3},
    }
    parse_anthropic_events(r.text)
    capped = client.post(AN, json={**body, "max_tokens": 1}, headers=AN_AUTH).json()
    assert (capped["stop_reason"], capped["stop_sequence"]) == ("max_tokens", None)


def test_anthropic_sdk_reads_stop_sequence(an_sdk: anthropic.Anthropic) -> None:
    with an_sdk.messages.stream(
        model="m1",
        max_tokens=100,
        messages=QUESTION,
        stop_sequences=["ok"],
    ) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "ok")
    assert (
        final.content[0].type == "text"
        and final.content[0].text == "Hello from the stub model m1 reply"
    )
