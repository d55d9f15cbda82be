"""Cached answers streamed both ways, in each client shape, read by the official SDKs.

A stored whole answer serves a streamed request and a stored stream serves a whole one; the
SDKs read a hit exactly as they read a miss: the same text, tool calls, finish and usage.
"""

from __future__ import annotations

import pytest

from tests.gateway.test_response_cache import TTL, cacheable_profiles, vendor_calls
from tests.support.profiles import install_profiles
from tests.support.usage import usage_rows

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture
def cached(stack):
    install_profiles(stack.stub.url, cacheable_profiles(stack.stub.url))
    stack.gateway.reload()
    return stack


def openai_stream(client, **create):
    raw = client.chat.completions.with_raw_response.create(
        stream=True, stream_options={"include_usage": True}, extra_headers=TTL, **create
    )
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    [usage] = [c.usage for c in chunks if c.usage is not None]
    return raw.headers["x-tollgate-cache"], text, finish, usage, chunks


def openai_whole(client, **create):
    raw = client.chat.completions.with_raw_response.create(extra_headers=TTL, **create)
    answer = raw.parse()
    return raw.headers["x-tollgate-cache"], answer


def test_openai_a_whole_answer_streams_and_a_stream_answers_whole(cached):
    tenant = cached.tenant()
    client = cached.openai(tenant)
    ask = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "first words"}]}

    status, whole = openai_whole(client, **ask)
    assert status == "miss"
    status, text, finish, usage, chunks = openai_stream(client, **ask)
    assert status == "hit"
    assert text == whole.choices[0].message.content
    assert finish == [whole.choices[0].finish_reason]
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        whole.usage.prompt_tokens,
        whole.usage.completion_tokens,
    )
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1  # pieces

    other = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "second words"}]}
    status, text, finish, usage, _ = openai_stream(client, **other)
    assert status == "miss"
    status, again, *_ = openai_stream(client, **other)
    assert (status, again) == ("hit", text)
    status, whole = openai_whole(client, **other)
    assert status == "hit"
    assert whole.choices[0].message.content == text
    assert whole.usage.completion_tokens == usage.completion_tokens
    assert vendor_calls(cached) == 2

    rows = usage_rows(group_id=tenant.group_id, expect=5)
    assert [(row.cache_status, row.streamed) for row in rows] == [
        ("miss", False),
        ("hit", True),
        ("miss", True),
        ("hit", True),
        ("hit", False),
    ]


def test_openai_tool_calls_replay_in_either_mode(cached):
    tenant = cached.tenant()
    client = cached.openai(tenant)
    ask = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "weather in Oslo? use the tool"}],
        "tools": [WEATHER_TOOL],
        "tool_choice": "required",
    }
    status, whole = openai_whole(client, **ask)
    assert status == "miss"
    [call] = whole.choices[0].message.tool_calls

    raw = client.chat.completions.with_raw_response.create(stream=True, extra_headers=TTL, **ask)
    assert raw.headers["x-tollgate-cache"] == "hit"
    deltas = [
        tool
        for chunk in raw.parse()
        if chunk.choices
        for tool in chunk.choices[0].delta.tool_calls or ()
    ]
    assert "".join(d.function.arguments or "" for d in deltas) == call.function.arguments
    assert [d.function.name for d in deltas if d.function.name] == [call.function.name]
    assert vendor_calls(cached) == 1


def test_anthropic_a_whole_message_streams_as_anthropic_events_and_back(cached):
    tenant = cached.tenant()
    client = cached.anthropic(tenant)
    ask = {
        "model": "claude-3-5-haiku",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "a few words please"}],
        "extra_headers": TTL,
    }

    raw = client.messages.with_raw_response.create(**ask)
    assert raw.headers["x-tollgate-cache"] == "miss"
    whole = raw.parse()

    raw = client.messages.with_raw_response.create(stream=True, **ask)
    assert raw.headers["x-tollgate-cache"] == "hit"
    events = list(raw.parse())
    kinds = [event.type for event in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    text = "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    [end] = [e for e in events if e.type == "message_delta"]
    assert text == whole.content[0].text
    assert end.delta.stop_reason == whole.stop_reason
    assert end.usage.output_tokens == whole.usage.output_tokens

    # A streamed miss, then the same request whole: the stored stream answers it.
    other = {**ask, "messages": [{"role": "user", "content": "other words please"}]}
    with client.messages.stream(
        **{k: v for k, v in other.items() if k != "extra_headers"}, extra_headers=TTL
    ) as stream:
        streamed = stream.get_final_message()
    raw = client.messages.with_raw_response.create(**other)
    assert raw.headers["x-tollgate-cache"] == "hit"
    whole = raw.parse()
    assert whole.content[0].text == streamed.content[0].text
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (
        streamed.usage.input_tokens,
        streamed.usage.output_tokens,
    )
    assert vendor_calls(cached) == 2


def test_responses_streamed_hit_is_a_valid_event_sequence(cached):
    tenant = cached.tenant()
    client = cached.openai(tenant)
    ask = {"model": "gpt-4o-mini", "input": "tell me something", "store": False}

    raw = client.responses.with_raw_response.create(stream=True, extra_headers=TTL, **ask)
    assert raw.headers["x-tollgate-cache"] == "miss"
    first = [event for event in raw.parse()]
    raw = client.responses.with_raw_response.create(stream=True, extra_headers=TTL, **ask)
    assert raw.headers["x-tollgate-cache"] == "hit"
    again = [event for event in raw.parse()]

    def summary(events):
        [done] = [e for e in events if e.type == "response.completed"]
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        return text, done.response.output_text, done.response.usage.output_tokens

    assert summary(again) == summary(first)
    assert [e.type for e in again] == [e.type for e in first]
    assert vendor_calls(cached) == 1


def test_embeddings_are_cached_too(cached):
    tenant = cached.tenant()
    client = cached.openai(tenant)
    ask = {"model": "text-embedding-3-small", "input": ["one", "two"]}
    install_profiles(cached.stub.url, embedding_profiles(cached.stub.url))
    cached.gateway.reload()
    raw = client.embeddings.with_raw_response.create(extra_headers=TTL, **ask)
    assert raw.headers["x-tollgate-cache"] == "miss"
    first = raw.parse()
    raw = client.embeddings.with_raw_response.create(extra_headers=TTL, **ask)
    assert raw.headers["x-tollgate-cache"] == "hit"
    again = raw.parse()
    assert [d.embedding for d in again.data] == [d.embedding for d in first.data]
    assert again.usage.prompt_tokens == first.usage.prompt_tokens
    assert vendor_calls(cached) == 1


def test_moderations_are_never_cached_even_on_a_cacheable_model(cached):
    tenant = cached.tenant()
    client = cached.openai(tenant)
    ask = {"model": "omni-moderation-latest", "input": ["one", "two"]}
    install_profiles(cached.stub.url, embedding_profiles(cached.stub.url))
    cached.gateway.reload()

    statuses = [
        client.moderations.with_raw_response.create(extra_headers=TTL, **ask).headers[
            "x-tollgate-cache"
        ]
        for _ in range(2)
    ]

    assert statuses == ["bypass", "bypass"]
    assert vendor_calls(cached) == 2


def embedding_profiles(stub_url: str) -> list[dict]:
    """The cacheable profiles with embedding models and a moderation model, all cacheable."""
    from tests.support.profiles import EMBEDDING_PRICES

    spec = cacheable_profiles(stub_url)
    spec[0]["models"] += [
        {
            "name": name,
            "kind": "embedding",
            "input_micro_per_mtok": price,
            "output_micro_per_mtok": 0,
            "cacheable": True,
        }
        for name, price in EMBEDDING_PRICES.items()
    ]
    spec[0]["models"].append(
        {
            "name": "omni-moderation-latest",
            "kind": "moderation",
            "input_micro_per_mtok": 0,
            "output_micro_per_mtok": 0,
            "cacheable": True,
        }
    )
    return spec
