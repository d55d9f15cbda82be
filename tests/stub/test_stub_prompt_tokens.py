"""Prompt tokens: images, documents, prompt caching, Anthropic count_tokens."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest

from ._support import (
    AN,
    AN_AUTH,
    AN_COUNT,
    OA,
    OA_AUTH,
    an_usage,
    oa_usage,
    parse_anthropic,
    parse_anthropic_events,
    parse_openai,
    sse_data,
    sse_events,
    user,
)

EPHEMERAL = {"type": "ephemeral"}
TOOL: Any = {"name": "lookup", "input_schema": {"type": "object", "properties": {}}}
SYSTEM_20 = " ".join(f"s{i}" for i in range(20))


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


# --------------------------------------------------------------------------- images, documents


def test_openai_images_and_files_add_fixed_prompt_tokens(client: httpx.Client) -> None:
    content = [
        {"type": "text", "text": "look at this"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
        {"type": "file", "file": {"file_id": "file-1"}},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
    ]
    body = {"model": "m1", "messages": [{"role": "user", "content": content}]}
    data = client.post(OA, json=body, headers=OA_AUTH).json()
    assert data["usage"] == oa_usage(3 + 2 * 85 + 100, 8)
    parse_openai(data)


def test_anthropic_images_documents_and_system_blocks_add_prompt_tokens(
    client: httpx.Client,
) -> None:
    body = {
        "model": "m1",
        "max_tokens": 100,
        "system": [{"type": "text", "text": "a b"}, {"type": "text", "text": "c"}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "x"},
                    },
                    {
                        "type": "document",
                        "source": {"type": "text", "media_type": "text/plain", "data": "x y"},
                    },
                    {"type": "text", "text": "what is it"},
                ],
            }
        ],
    }
    data = client.post(AN, json=body, headers=AN_AUTH).json()
    assert data["usage"] == an_usage(3 + 85 + 100 + 3, 8)


# --------------------------------------------------------------------------- Anthropic caching


def cached_body(question: str = "question here now", **extra: Any) -> dict[str, Any]:
    return {
        "model": "m1",
        "max_tokens": 100,
        "tools": [TOOL],
        "tool_choice": {"type": "none"},  # answer text
        "system": [{"type": "text", "text": SYSTEM_20, "cache_control": EPHEMERAL}],
        "messages": user(question),
        **extra,
    }  # prefix: tool 10 + system 20 = 30 tokens


def test_anthropic_cache_control_writes_then_reads_the_prefix(client: httpx.Client) -> None:
    first = client.post(AN, json=cached_body(), headers=AN_AUTH).json()
    assert first["usage"] == an_usage(3, 8, creation=30)
    parse_anthropic(first)
    again = client.post(AN, json=cached_body(), headers=AN_AUTH).json()
    assert again["usage"] == an_usage(3, 8, read=30)
    other = client.post(AN, json=cached_body("a different longer question"), headers=AN_AUTH).json()
    assert other["usage"] == an_usage(4, 8, read=30)
    # cache_control itself is not part of the key; the model is
    body = cached_body()
    body["system"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    assert client.post(AN, json=body, headers=AN_AUTH).json()["usage"] == an_usage(3, 8, read=30)
    m2 = client.post(AN, json=cached_body(model="m2"), headers=AN_AUTH).json()
    assert m2["usage"] == an_usage(3, 8, creation=30)
    changed = cached_body()
    changed["system"][0]["text"] += " more"
    assert client.post(AN, json=changed, headers=AN_AUTH).json()["usage"] == an_usage(
        3, 8, creation=31
    )


def test_anthropic_cache_prefix_ends_at_the_last_marked_block(client: httpx.Client) -> None:
    body: dict[str, Any] = {
        "model": "m1",
        "max_tokens": 100,
        "tools": [{**TOOL, "cache_control": EPHEMERAL}, {**TOOL, "name": "other"}],
        "tool_choice": {"type": "none"},
        "system": SYSTEM_20,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "ctx ctx ctx", "cache_control": EPHEMERAL},
                    {"type": "text", "text": "tail words"},
                ],
            }
        ],
    }
    # prefix: 2 tools (20) + system (20) + the first block (3); after it: 2
    assert client.post(AN, json=body, headers=AN_AUTH).json()["usage"] == an_usage(
        2, 8, creation=43
    )
    body["messages"][0]["content"][1]["text"] = "other tail words here"
    assert client.post(AN, json=body, headers=AN_AUTH).json()["usage"] == an_usage(4, 8, read=43)
    # only the first tool is marked: the prefix is that tool; the other tool, system and
    # message come after it (10 + 1 + 2)
    only_tool = {**body, "messages": user("plain question"), "system": "x"}
    assert client.post(AN, json=only_tool, headers=AN_AUTH).json()["usage"] == an_usage(
        13, 8, creation=10
    )


def test_anthropic_stream_usage_carries_the_cache_fields(client: httpx.Client) -> None:
    client.post(AN, json=cached_body(), headers=AN_AUTH)
    r = client.post(AN, json=cached_body(stream=True), headers=AN_AUTH)
    events = sse_events(r.text)
    assert events[0][1]["message"]["usage"] == an_usage(3, 1, read=30)
    assert events[-2][1]["usage"] == {"output_tokens": 8}
    parse_anthropic_events(r.text)


def test_delete_calls_clears_the_prompt_caches(client: httpx.Client) -> None:
    assert (
        client.post(AN, json=cached_body(), headers=AN_AUTH).json()["usage"][
            "cache_creation_input_tokens"
        ]
        == 30
    )
    oa = {"model": "m1", "messages": [*user(words(70)), *user("x")]}
    client.post(OA, json=oa, headers=OA_AUTH)
    assert client.post(OA, json=oa, headers=OA_AUTH).json()["usage"]["prompt_tokens_details"] == {
        "cached_tokens": 70
    }
    client.delete("/_stub/calls")
    assert (
        client.post(AN, json=cached_body(), headers=AN_AUTH).json()["usage"][
            "cache_creation_input_tokens"
        ]
        == 30
    )
    assert client.post(OA, json=oa, headers=OA_AUTH).json()["usage"]["prompt_tokens_details"] == {
        "cached_tokens": 0
    }


def test_anthropic_sdk_reads_cache_usage(an_sdk: anthropic.Anthropic) -> None:
    system: Any = [{"type": "text", "text": SYSTEM_20, "cache_control": EPHEMERAL}]
    messages: Any = user("question here now")
    first = an_sdk.messages.create(model="m1", max_tokens=100, system=system, messages=messages)
    assert (first.usage.input_tokens, first.usage.cache_creation_input_tokens) == (3, 20)
    with an_sdk.messages.stream(
        model="m1", max_tokens=100, system=system, messages=messages
    ) as stream:
        final = stream.get_final_message()
    assert final.usage.cache_read_input_tokens == 20
    assert final.usage.cache_creation_input_tokens == 0
    assert (final.usage.input_tokens, final.usage.output_tokens) == (3, 8)


# --------------------------------------------------------------------------- OpenAI caching


def test_openai_caches_the_longest_seen_prefix_of_at_least_64_tokens(client: httpx.Client) -> None:
    sys60 = {"role": "system", "content": words(60)}
    first = [sys60, *user("a b c d")]
    assert client.post(OA, json={"model": "m1", "messages": first}, headers=OA_AUTH).json()[
        "usage"
    ] == oa_usage(64, 8)
    longer = [*first, {"role": "assistant", "content": "ok"}, *user("more")]
    data = client.post(OA, json={"model": "m1", "messages": longer}, headers=OA_AUTH).json()
    assert data["usage"] == oa_usage(66, 8, cached=64)  # first two messages: 60 + 4 tokens
    parse_openai(data)
    # the same two messages again: only the first (60 tokens, < 64) is a proper prefix
    assert client.post(OA, json={"model": "m1", "messages": first}, headers=OA_AUTH).json()[
        "usage"
    ] == oa_usage(64, 8)
    # now [sys60, user, assistant] was seen as a prefix of `longer`
    branch = [*longer[:3], *user("other question")]
    data = client.post(OA, json={"model": "m1", "messages": branch}, headers=OA_AUTH).json()
    assert data["usage"] == oa_usage(67, 8, cached=65)
    assert client.post(OA, json={"model": "m2", "messages": longer}, headers=OA_AUTH).json()[
        "usage"
    ] == oa_usage(66, 8)


def test_openai_cached_tokens_exclude_tools_and_show_in_the_stream(client: httpx.Client) -> None:
    tool = {"type": "function", "function": {"name": "f"}}
    body: dict[str, Any] = {
        "model": "m1",
        "messages": [{"role": "system", "content": words(70)}, *user("hi")],
        "tools": [tool],
        "tool_choice": "none",
    }
    assert client.post(OA, json=body, headers=OA_AUTH).json()["usage"] == oa_usage(81, 8)
    body["messages"][1] = user("hello again")[0]
    body.update(stream=True, stream_options={"include_usage": True})
    r = client.post(OA, json=body, headers=OA_AUTH)
    assert sse_data(r.text)[-2]["usage"] == oa_usage(82, 8, cached=70)


def test_openai_sdk_reads_cached_tokens(oa_sdk: openai.OpenAI) -> None:
    messages: Any = [{"role": "system", "content": words(64)}, *user("one")]
    oa_sdk.chat.completions.create(model="m1", messages=messages)
    messages[1] = {"role": "user", "content": "two"}
    done = oa_sdk.chat.completions.create(model="m1", messages=messages)
    assert done.usage is not None and done.usage.prompt_tokens_details is not None
    assert (done.usage.prompt_tokens, done.usage.prompt_tokens_details.cached_tokens) == (65, 64)


# --------------------------------------------------------------------------- count_tokens


def test_count_tokens_counts_like_messages_without_answering(client: httpx.Client) -> None:
    body = cached_body()
    body["messages"] = [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "x"},
                },
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "x"},
                },
                {"type": "text", "text": "what is it"},
            ],
        }
    ]
    del body["max_tokens"]
    r = client.post(AN_COUNT, json=body, headers=AN_AUTH)
    assert r.status_code == 200
    assert r.json() == {"input_tokens": 10 + 20 + 85 + 100 + 3}
    # count_tokens neither reads nor writes the cache: the next messages call writes it
    usage = client.post(AN, json={**body, "max_tokens": 50}, headers=AN_AUTH).json()["usage"]
    assert usage == an_usage(188, 8, creation=30)
    assert client.post(AN_COUNT, json=body, headers=AN_AUTH).json() == {"input_tokens": 218}
    [count, _, _] = client.get("/_stub/calls").json()["calls"]
    assert {
        k: count[k] for k in ("path", "shape", "model", "key", "stream", "max_tokens", "status")
    } == {
        "path": AN_COUNT,
        "shape": "anthropic",
        "model": "m1",
        "key": "sk-ant-1",
        "stream": False,
        "max_tokens": None,
        "status": 200,
    }
    assert count["body"] == body


def test_count_tokens_checks_the_key_and_takes_faults(client: httpx.Client) -> None:
    body = {"model": "m1", "messages": user("one two")}
    assert client.post(AN_COUNT, json=body).status_code == 401
    assert client.post(AN_COUNT, json={"messages": []}, headers=AN_AUTH).status_code == 400
    client.post("/_stub/faults", json={"faults": [{"kind": "429", "retry_after": 3}]})
    r = client.post("/anthropic" + AN_COUNT, json=body, headers=AN_AUTH)
    assert (r.status_code, r.headers["retry-after"]) == (429, "3")
    assert r.json()["error"]["type"] == "rate_limit_error"
    client.post("/_stub/faults", json={"faults": [{"kind": "fail_before_first_token"}]})
    with pytest.raises(httpx.RemoteProtocolError):
        client.post(AN_COUNT, json=body, headers=AN_AUTH)
    assert client.post(AN_COUNT, json=body, headers=AN_AUTH).json() == {"input_tokens": 2}
    assert [(c["fault"], c["status"]) for c in client.get("/_stub/calls").json()["calls"]] == [
        (None, 401),
        (None, 400),
        ("429", 429),
        ("fail_before_first_token", None),
        (None, 200),
    ]


def test_anthropic_sdk_count_tokens(an_sdk: anthropic.Anthropic) -> None:
    counted = an_sdk.messages.count_tokens(
        model="m1",
        system="be brief",
        messages=user("three words here"),
        tools=[TOOL],
    )
    assert counted.input_tokens == 2 + 3 + 10
    assert not counted.model_extra
