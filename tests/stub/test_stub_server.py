"""Tests for the stub LLM vendor server (stubvendor/server.py).

The stub runs in-process in a background thread (``StubServer``) on a free
port; these tests need no Django settings.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from stubvendor.server import StubServer, make_app
from stubvendor.state import STATE

from ._support import AN, AN_AUTH, OA, OA_AUTH, WORDS_M1, an_usage, oa_usage, sse_data, sse_events


def oa_body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "m1",
        "messages": [
            {"role": "system", "content": "be  brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "one two\nthree"},
                    {"type": "image_url", "image_url": {"url": "x y z"}},
                ],
            },
        ],
    }
    body.update(extra)
    return body  # 5 prompt words + 85 for the image = 90 prompt tokens


def an_body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "m1",
        "max_tokens": 100,
        "system": [{"type": "text", "text": "sys words here"}],
        "messages": [
            {"role": "user", "content": "hi there"},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            {"role": "user", "content": "again"},
        ],
    }
    body.update(extra)
    return body  # 3 + 2 + 1 + 1 = 7 prompt words


def queue(c: httpx.Client, *faults: dict[str, Any]) -> int:
    r = c.post("/_stub/faults", json={"faults": list(faults)})
    assert r.status_code == 200, r.text
    return r.json()["queued"]


def calls(c: httpx.Client) -> list[dict[str, Any]]:
    return c.get("/_stub/calls").json()["calls"]


def read_until_broken(
    c: httpx.Client, path: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int, str]:
    """Stream a response that must end with a broken connection; return (status, text read)."""
    chunks: list[str] = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        c.stream("POST", path, json=body, headers=headers) as r,
    ):
        status = r.status_code
        chunks.extend(r.iter_text())
    return status, "".join(chunks)


# --------------------------------------------------------------------------- OpenAI shape


def test_openai_answer_has_exact_text_and_usage(client: httpx.Client) -> None:
    r = client.post("/v1/chat/completions", json=oa_body(), headers=OA_AUTH)
    assert r.status_code == 200
    data = r.json()
    assert data["id"].startswith("chatcmpl-stub-")
    assert data["object"] == "chat.completion"
    assert isinstance(data["created"], int)
    assert data["model"] == "m1"
    assert data["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hello from the stub model m1 reply ok",
            },
            "finish_reason": "stop",
        }
    ]
    assert data["usage"] == oa_usage(90, 8)


def test_openai_route_accepts_any_prefix_and_counts_at_least_one_prompt_token(
    client: httpx.Client,
) -> None:
    body = {"model": "gpt-x", "messages": [{"role": "user", "content": "   "}]}
    r = client.post("/api/v1/chat/completions", json=body, headers=OA_AUTH)
    assert r.status_code == 200
    assert r.json()["usage"] == oa_usage(1, 8)
    assert r.json()["choices"][0]["message"]["content"].endswith("model gpt-x reply ok")
    assert calls(client)[0]["path"] == "/api/v1/chat/completions"


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_openai_max_tokens_below_answer_length_truncates_with_length(
    client: httpx.Client, field: str
) -> None:
    r = client.post(OA, json=oa_body(**{field: 3}), headers=OA_AUTH)
    choice = r.json()["choices"][0]
    assert choice["message"]["content"] == "Hello from the"
    assert choice["finish_reason"] == "length"
    assert r.json()["usage"]["completion_tokens"] == 3
    r = client.post(OA, json=oa_body(**{field: 8}), headers=OA_AUTH)
    assert r.json()["choices"][0]["finish_reason"] == "stop"
    assert r.json()["usage"]["completion_tokens"] == 8


def test_openai_stream_sends_exact_tokens_then_usage_then_done(
    client: httpx.Client,
) -> None:
    body = oa_body(stream=True, stream_options={"include_usage": True})
    r = client.post(OA, json=body, headers=OA_AUTH)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.text.endswith("data: [DONE]\n\n")
    items = sse_data(r.text)
    assert items[-1] == "[DONE]"
    chunks = items[:-1]
    assert len(chunks) == 1 + 8 + 1 + 1
    for ch in chunks:
        assert ch["object"] == "chat.completion.chunk"
        assert ch["model"] == "m1"
        assert ch["id"] == chunks[0]["id"]
        assert isinstance(ch["created"], int)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    tokens = [ch["choices"][0]["delta"]["content"] for ch in chunks[1:9]]
    assert tokens == WORDS_M1
    assert all(ch["choices"][0]["finish_reason"] is None for ch in chunks[:9])
    assert chunks[9]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}
    assert all("usage" in ch and ch["usage"] is None for ch in chunks[:10])
    assert chunks[10]["choices"] == []
    assert chunks[10]["usage"] == oa_usage(90, 8)


def test_openai_stream_without_include_usage_has_no_usage_field(
    client: httpx.Client,
) -> None:
    r = client.post(OA, json=oa_body(stream=True, max_tokens=2), headers=OA_AUTH)
    chunks = sse_data(r.text)
    assert chunks[-1] == "[DONE]"
    chunks = chunks[:-1]
    assert [ch["choices"][0]["delta"].get("content") for ch in chunks] == [
        "",
        "Hello",
        " from",
        None,
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all("usage" not in ch for ch in chunks)


def test_stub_words_header_sets_answer_length_capped_by_max_tokens(
    client: httpx.Client,
) -> None:
    r = client.post(OA, json=oa_body(), headers={**OA_AUTH, "x-stub-words": "20"})
    text = r.json()["choices"][0]["message"]["content"]
    words = [w.strip() for w in WORDS_M1]
    assert text.split() == (words * 3)[:20]
    assert r.json()["usage"]["completion_tokens"] == 20
    assert r.json()["choices"][0]["finish_reason"] == "stop"
    r = client.post(
        OA,
        json=oa_body(stream=True, max_tokens=10),
        headers={**OA_AUTH, "x-stub-words": "20"},
    )
    tokens = [ch["choices"][0]["delta"].get("content") for ch in sse_data(r.text)[1:-2]]
    assert tokens == WORDS_M1 + [" Hello", " from"]
    r = client.post(AN, json=an_body(max_tokens=1000), headers={**AN_AUTH, "x-stub-words": "1000"})
    assert r.json()["usage"]["output_tokens"] == 1000
    assert len(r.json()["content"][0]["text"].split()) == 1000


# --------------------------------------------------------------------------- Anthropic shape


def test_anthropic_answer_has_exact_text_and_usage(client: httpx.Client) -> None:
    r = client.post(AN, json=an_body(system="a b c"), headers=AN_AUTH)
    assert r.status_code == 200
    data = r.json()
    assert data["id"].startswith("msg_stub_")
    assert data == {
        "id": data["id"],
        "type": "message",
        "role": "assistant",
        "model": "m1",
        "content": [{"type": "text", "text": "Hello from the stub model m1 reply ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": an_usage(7, 8),
    }


def test_anthropic_accepts_bearer_and_truncates_at_max_tokens(
    client: httpx.Client,
) -> None:
    r = client.post(AN, json=an_body(max_tokens=4), headers={"Authorization": "Bearer sk-b"})
    data = r.json()
    assert data["content"][0]["text"] == "Hello from the stub"
    assert data["stop_reason"] == "max_tokens"
    assert data["usage"] == an_usage(7, 4)
    assert calls(client)[0]["key"] == "sk-b"


def test_anthropic_stream_sends_exact_event_sequence(client: httpx.Client) -> None:
    r = client.post(AN, json=an_body(stream=True), headers=AN_AUTH)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    names = [name for name, _ in events]
    assert names == (
        ["message_start", "content_block_start", "ping"]
        + ["content_block_delta"] * 8
        + ["content_block_stop", "message_delta", "message_stop"]
    )
    assert all(data["type"] == name for name, data in events)
    msg = events[0][1]["message"]
    assert msg["content"] == [] and msg["model"] == "m1" and msg["role"] == "assistant"
    assert msg["usage"] == an_usage(7, 1)
    assert events[1][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    deltas = [data["delta"] for _, data in events[3:11]]
    assert deltas == [{"type": "text_delta", "text": t} for t in WORDS_M1]
    assert events[11][1] == {"type": "content_block_stop", "index": 0}
    assert events[12][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 8},
    }


def test_anthropic_stream_truncated_ends_with_max_tokens(client: httpx.Client) -> None:
    r = client.post(AN, json=an_body(stream=True, max_tokens=2), headers=AN_AUTH)
    events = sse_events(r.text)
    assert [d["delta"]["text"] for n, d in events if n == "content_block_delta"] == [
        "Hello",
        " from",
    ]
    delta = next(d for n, d in events if n == "message_delta")
    assert delta["delta"]["stop_reason"] == "max_tokens"
    assert delta["usage"] == {"output_tokens": 2}


# --------------------------------------------------------------------------- auth, models, errors


def test_missing_key_answers_401_in_vendor_shape(client: httpx.Client) -> None:
    r = client.post(OA, json=oa_body())
    assert r.status_code == 401
    assert set(r.json()["error"]) >= {"message", "type", "code"}
    r = client.post(OA, json=oa_body(), headers={"Authorization": "Bearer"})
    assert r.status_code == 401
    r = client.post(AN, json=an_body(), headers={"x-api-key": ""})
    assert r.status_code == 401
    assert r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "authentication_error"
    log = calls(client)
    assert [(c["shape"], c["key"], c["status"]) for c in log] == [
        ("openai", None, 401),
        ("openai", None, 401),
        ("anthropic", None, 401),
    ]


def test_accept_keys_rejects_other_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    with StubServer(accept_keys=["good"]) as s, httpx.Client(base_url=s.url) as c:
        assert (
            c.post(OA, json=oa_body(), headers={"Authorization": "Bearer good"}).status_code == 200
        )
        bad = c.post(OA, json=oa_body(), headers={"Authorization": "Bearer bad"})
        assert bad.status_code == 401
        assert bad.json()["error"]["code"] == "invalid_api_key"
        assert c.post(AN, json=an_body(), headers={"x-api-key": "bad"}).status_code == 401
        assert c.get("/v1/models", headers={"Authorization": "Bearer bad"}).status_code == 401
    monkeypatch.delenv("STUB_ACCEPT_KEYS", raising=False)
    with StubServer() as s, httpx.Client(base_url=s.url) as c:
        assert (
            c.post(OA, json=oa_body(), headers={"Authorization": "Bearer any"}).status_code == 200
        )


def test_stub_accept_keys_env_var_restricts_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STUB_ACCEPT_KEYS", " k1, k2 ,")
    assert make_app()[STATE].accept_keys == frozenset({"k1", "k2"})
    with StubServer() as s, httpx.Client(base_url=s.url) as c:
        assert c.post(AN, json=an_body(), headers={"x-api-key": "k2"}).status_code == 200
        assert c.post(AN, json=an_body(), headers={"x-api-key": "k3"}).status_code == 401


def test_models_route_lists_stub_model_and_checks_key(client: httpx.Client) -> None:
    expected = {
        "object": "list",
        "data": [{"id": "stub-model", "object": "model", "created": 0, "owned_by": "stub"}],
    }
    for path in ("/v1/models", "/api/v1/models"):
        r = client.get(path, headers=OA_AUTH)
        assert r.status_code == 200 and r.json() == expected
    r = client.get("/v1/models", headers=AN_AUTH)
    assert r.status_code == 200 and r.json() == expected
    r = client.get("/v1/models")
    assert r.status_code == 401 and "error" in r.json()
    assert [c["status"] for c in calls(client)] == [200, 200, 200, 401]


def test_malformed_requests_answer_400_405_404(client: httpx.Client) -> None:
    r = client.post(OA, content=b"not json", headers=OA_AUTH)
    assert r.status_code == 400 and "error" in r.json()
    r = client.post(AN, json={"messages": []}, headers=AN_AUTH)
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert client.get(OA, headers=OA_AUTH).status_code == 405
    assert client.post("/v1/audio/speech", json={}, headers=OA_AUTH).status_code == 404
    assert [c["status"] for c in calls(client)] == [400, 400]


# --------------------------------------------------------------------------- faults


def test_fault_429_sends_retry_after(client: httpx.Client) -> None:
    assert queue(client, {"kind": "429"}, {"kind": "429", "retry_after": 7}) == 2
    r = client.post(OA, json=oa_body(), headers=OA_AUTH)
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    r = client.post(AN, json=an_body(), headers=AN_AUTH)
    assert r.status_code == 429 and r.headers["retry-after"] == "7"
    assert r.json()["error"]["type"] == "rate_limit_error"
    assert client.post(OA, json=oa_body(), headers=OA_AUTH).status_code == 200
    assert [(c["fault"], c["status"]) for c in calls(client)] == [
        ("429", 429),
        ("429", 429),
        (None, 200),
    ]


@pytest.mark.parametrize("kind", ["401", "403"])
def test_fault_401_403_echo_the_key_in_body_and_header(client: httpx.Client, kind: str) -> None:
    queue(client, {"kind": kind, "times": 2})
    r = client.post(OA, json=oa_body(), headers={"Authorization": "Bearer sk-secret-oa"})
    assert r.status_code == int(kind)
    assert "sk-secret-oa" in r.json()["error"]["message"]
    assert r.headers["x-stub-echo-key"] == "Bearer sk-secret-oa"
    r = client.post(AN, json=an_body(), headers={"x-api-key": "sk-ant-secret"})
    assert r.status_code == int(kind)
    assert r.json()["type"] == "error"
    assert "sk-ant-secret" in r.json()["error"]["message"]
    assert r.headers["x-stub-echo-key"] == "sk-ant-secret"


def test_fault_500_answers_vendor_error(client: httpx.Client) -> None:
    queue(client, {"kind": "500"})
    r = client.post(AN, json=an_body(stream=True), headers=AN_AUTH)
    assert r.status_code == 500
    assert r.json() == {
        "type": "error",
        "error": {"type": "api_error", "message": r.json()["error"]["message"]},
    }


def test_fault_hang_never_answers(client: httpx.Client) -> None:
    queue(client, {"kind": "hang"})
    start = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        client.post(OA, json=oa_body(), headers=OA_AUTH, timeout=0.5)
    assert time.monotonic() - start < 3
    log = calls(client)
    assert log[0]["fault"] == "hang" and log[0]["status"] is None
    # the stub is still healthy afterwards
    assert client.post(OA, json=oa_body(), headers=OA_AUTH).status_code == 200


@pytest.mark.parametrize("path,body,headers", [(OA, oa_body, OA_AUTH), (AN, an_body, AN_AUTH)])
def test_fail_before_first_token_breaks_connection(
    client: httpx.Client, path: str, body: Any, headers: dict[str, str]
) -> None:
    queue(client, {"kind": "fail_before_first_token", "times": 2})
    status, text = read_until_broken(client, path, body(stream=True), headers)
    assert status == 200
    assert "delta" not in text
    with pytest.raises(httpx.RemoteProtocolError):
        client.post(path, json=body(), headers=headers)
    assert [(c["fault"], c["status"]) for c in calls(client)] == [
        ("fail_before_first_token", None)
    ] * 2


def test_fail_after_tokens_breaks_openai_stream_after_n_tokens(
    client: httpx.Client,
) -> None:
    queue(
        client,
        {"kind": "fail_after_tokens"},
        {"kind": "fail_after_tokens", "after_tokens": 5},
    )
    body = oa_body(stream=True, stream_options={"include_usage": True})
    for n in (2, 5):
        status, text = read_until_broken(client, OA, body, OA_AUTH)
        assert status == 200
        chunks = sse_data(text)
        assert "[DONE]" not in chunks
        assert [ch["choices"][0]["delta"]["content"] for ch in chunks] == [""] + WORDS_M1[:n]
        assert all(ch["choices"][0]["finish_reason"] is None for ch in chunks)
    with pytest.raises(httpx.RemoteProtocolError):
        queue(client, {"kind": "fail_after_tokens"})
        client.post(OA, json=oa_body(), headers=OA_AUTH)
    assert [c["status"] for c in calls(client)] == [None, None, None]


def test_fail_after_tokens_breaks_anthropic_stream_after_n_tokens(
    client: httpx.Client,
) -> None:
    queue(client, {"kind": "fail_after_tokens", "after_tokens": 3})
    status, text = read_until_broken(client, AN, an_body(stream=True), AN_AUTH)
    assert status == 200
    events = sse_events(text)
    assert [n for n, _ in events] == [
        "message_start",
        "content_block_start",
        "ping",
    ] + ["content_block_delta"] * 3
    assert "".join(d["delta"]["text"] for _, d in events[3:]) == "Hello from the"


def test_fault_slow_delays_each_token(client: httpx.Client) -> None:
    queue(client, {"kind": "slow", "delay_ms": 50}, {"kind": "slow", "delay_ms": 30})
    start = time.monotonic()
    arrivals = []
    with client.stream("POST", OA, json=oa_body(stream=True, max_tokens=4), headers=OA_AUTH) as r:
        for line in r.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                arrivals.append(time.monotonic() - start)
    assert len(arrivals) == 4
    assert arrivals[-1] >= 0.2
    assert arrivals[-1] - arrivals[0] >= 0.14
    start = time.monotonic()
    r = client.post(AN, json=an_body(), headers=AN_AUTH)  # 8 tokens x 30 ms
    assert r.status_code == 200 and r.json()["usage"]["output_tokens"] == 8
    assert time.monotonic() - start >= 0.24
    assert [(c["fault"], c["status"]) for c in calls(client)] == [
        ("slow", 200),
        ("slow", 200),
    ]


def test_faults_match_by_key_and_model_in_queue_order_and_times(
    client: httpx.Client,
) -> None:
    assert (
        queue(
            client,
            {"kind": "500", "match": {"key": "sk-b"}},
            {"kind": "429", "match": {"model": "m2"}, "times": 2},
            {"kind": "403", "match": {"key": "sk-a", "model": "m2"}},
        )
        == 3
    )

    def call(key: str, model: str) -> int:
        return client.post(
            OA, json=oa_body(model=model), headers={"Authorization": f"Bearer {key}"}
        ).status_code

    assert call("sk-a", "m1") == 200  # nothing matches
    assert call("sk-a", "m2") == 429  # first match in queue order (429 before 403)
    assert call("sk-b", "m1") == 500  # key match
    assert call("sk-b", "m1") == 200  # times=1 consumed
    assert call("sk-c", "m2") == 429  # second (last) use of the 429
    assert call("sk-a", "m2") == 403  # now the 403 is first matching
    assert call("sk-a", "m2") == 200
    assert client.get("/_stub/faults").json() == {"faults": []}


def test_call_rejected_for_key_does_not_consume_fault(client: httpx.Client) -> None:
    queue(client, {"kind": "500"})
    assert client.post(OA, json=oa_body()).status_code == 401
    assert client.post(OA, json=oa_body(), headers=OA_AUTH).status_code == 500


def test_delete_calls_clears_calls_and_faults(client: httpx.Client) -> None:
    assert queue(client, {"kind": "500", "times": 3}) == 1
    assert queue(client, {"kind": 429}) == 2
    client.post(OA, json=oa_body(), headers=OA_AUTH)
    assert client.get("/_stub/faults").json()["faults"][0]["times"] == 2
    assert client.delete("/_stub/calls").json() == {"cleared": True}
    assert calls(client) == []
    assert client.post(OA, json=oa_body(), headers=OA_AUTH).status_code == 200
    assert calls(client)[0]["seq"] == 1


def test_invalid_faults_are_rejected_and_nothing_queued(client: httpx.Client) -> None:
    for bad in (
        {"kind": "boom"},
        {"kind": "429", "times": 0},
        {"kind": "slow", "delay_ms": -1},
        {"kind": "500", "match": {"user": "x"}},
    ):
        r = client.post("/_stub/faults", json={"faults": [{"kind": "500"}, bad]})
        assert r.status_code == 400, bad
    assert client.post("/_stub/faults", json={"kind": "500"}).status_code == 400
    assert client.get("/_stub/faults").json() == {"faults": []}


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_calls_log_records_every_call_in_order(client: httpx.Client) -> None:
    queue(client, {"kind": "429", "match": {"model": "m9"}})
    client.post(
        OA,
        json=oa_body(user="u-1", max_completion_tokens=50, stream=True),
        headers={**OA_AUTH, "traceparent": TRACEPARENT},
    )
    client.post(AN, json=an_body(metadata={"user_id": "u-2"}, model="m9"), headers=AN_AUTH)
    client.post(AN, json=an_body(), headers={})
    assert calls(client) == [
        {
            "seq": 1,
            "path": OA,
            "shape": "openai",
            "model": "m1",
            "key": "sk-test-1",
            "stream": True,
            "user": "u-1",
            "max_tokens": 50,
            "fault": None,
            "status": 200,
            "body": oa_body(user="u-1", max_completion_tokens=50, stream=True),
            "traceparent": TRACEPARENT,
        },
        {
            "seq": 2,
            "path": AN,
            "shape": "anthropic",
            "model": "m9",
            "key": "sk-ant-1",
            "stream": False,
            "user": "u-2",
            "max_tokens": 100,
            "fault": "429",
            "status": 429,
            "body": an_body(metadata={"user_id": "u-2"}, model="m9"),
            "traceparent": None,
        },
        {
            "seq": 3,
            "path": AN,
            "shape": "anthropic",
            "model": "m1",
            "key": None,
            "stream": False,
            "user": None,
            "max_tokens": 100,
            "fault": None,
            "status": 401,
            "body": an_body(),
            "traceparent": None,
        },
    ]


# --------------------------------------------------------------------------- official SDKs


def test_official_openai_sdk_parses_answers_and_usage(
    stub: StubServer, client: httpx.Client
) -> None:
    sdk = openai.OpenAI(api_key="sk-sdk", base_url=stub.url + "/v1", max_retries=0)
    messages: Any = [{"role": "user", "content": "count these four words"}]
    done = sdk.chat.completions.create(model="gpt-stub", messages=messages)
    assert done.choices[0].message.content == "Hello from the stub model gpt-stub reply ok"
    assert done.choices[0].finish_reason == "stop"
    assert done.usage is not None
    assert (
        done.usage.prompt_tokens,
        done.usage.completion_tokens,
        done.usage.total_tokens,
    ) == (4, 8, 12)
    stream = sdk.chat.completions.create(
        model="gpt-stub",
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},
        max_tokens=5,
    )
    text, usage, finish = "", None, None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage is not None:
            usage = chunk.usage
    assert text == "Hello from the stub model"
    assert finish == "length"
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (
        4,
        5,
        9,
    )
    with pytest.raises(openai.RateLimitError):
        queue(client, {"kind": "429"})
        sdk.chat.completions.create(model="gpt-stub", messages=messages)


def test_official_anthropic_sdk_parses_answers_and_usage(
    stub: StubServer, client: httpx.Client
) -> None:
    sdk = anthropic.Anthropic(api_key="sk-ant-sdk", base_url=stub.url, max_retries=0)
    messages: Any = [{"role": "user", "content": "three words here"}]
    msg = sdk.messages.create(
        model="claude-stub", max_tokens=100, system="be nice", messages=messages
    )
    assert msg.content[0].type == "text"
    assert msg.content[0].text == "Hello from the stub model claude-stub reply ok"
    assert msg.stop_reason == "end_turn"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (5, 8)
    with sdk.messages.stream(model="claude-stub", max_tokens=6, messages=messages) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Hello from the stub model claude-stub"
    assert final.stop_reason == "max_tokens"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (3, 6)
    assert calls(client)[0]["key"] == "sk-ant-sdk"
    with pytest.raises(anthropic.AuthenticationError):
        queue(client, {"kind": "401"})
        sdk.messages.create(model="claude-stub", max_tokens=10, messages=messages)


# --------------------------------------------------------------------------- CLI


def test_module_cli_serves_without_django() -> None:
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stubvendor.server",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
        ],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            assert line.startswith("stub listening on http://127.0.0.1:"), line
            url = line.rsplit(" ", 1)[1]
            r = httpx.post(url + OA, json=oa_body(), headers=OA_AUTH)
            assert r.json()["usage"]["total_tokens"] == 98
        finally:
            proc.terminate()
        assert proc.wait(10) == 0
