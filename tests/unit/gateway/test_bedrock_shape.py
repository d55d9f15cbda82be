"""Bedrock's Converse shape: an OpenAI chat body into Converse (or refused, naming the field),
a Converse answer and ConverseStream's events back into OpenAI chat, usage with the cache
tokens counted in; the adapter's credentials and stream exceptions."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from botocore.eventstream import EventStreamBuffer

from core.errors import InvalidRequest
from gateway.adapters.base import ProviderError
from gateway.adapters.bedrock import (
    MALFORMED_KEY,
    ConverseStream,
    aws_credentials,
    converse_events,
    region_of,
    stream_exception,
)
from gateway.adapters.client import VendorClient
from gateway.shapes.bedrock import chat_to_converse, converse_body
from gateway.shapes.bedrock_answers import ConverseStreamToChat, completion_from_converse
from gateway.types import Usage
from stubvendor.bedrock_answers import event_frame, exception_frame

PNG = "iVBORw0KGgoAAAANSUhEUg=="
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {
    "type": "function",
    "function": {"name": "weather", "description": "The weather", "parameters": SCHEMA},
}


def refusal(**body) -> str:
    with pytest.raises(InvalidRequest) as refused:
        chat_to_converse({"messages": [{"role": "user", "content": "hi"}], **body})
    return refused.value.message


# ---------------------------------------------------------------- requests


def test_a_conversation_with_tools_becomes_a_converse_body():
    body = {
        "model": "claude",
        "max_tokens": 100,
        "user": "end-user-7",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is here?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "user", "content": "And tomorrow?"},
            {"role": "developer", "content": [{"type": "text", "text": "Use metric."}]},
        ],
        "tools": [WEATHER],
        "tool_choice": "required",
        "temperature": 0.5,
        "top_p": 0.9,
        "stop": "END",
        "n": 1,
        "prompt_cache_key": "team-a",
    }

    assert chat_to_converse(body) == {
        "system": [{"text": "Be brief."}, {"text": "Use metric."}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"text": "What is here?"},
                    {"image": {"format": "png", "source": {"bytes": PNG}}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {
                        "toolUse": {
                            "toolUseId": "call_1",
                            "name": "weather",
                            "input": {"city": "Oslo"},
                        }
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {"toolResult": {"toolUseId": "call_1", "content": [{"text": "sunny"}]}},
                    {"text": "And tomorrow?"},
                ],
            },
        ],
        "inferenceConfig": {"temperature": 0.5, "topP": 0.9, "stopSequences": ["END"]},
        "toolConfig": {
            "tools": [
                {
                    "toolSpec": {
                        "name": "weather",
                        "description": "The weather",
                        "inputSchema": {"json": SCHEMA},
                    }
                }
            ],
            "toolChoice": {"any": {}},
        },
    }


def test_the_call_sets_the_holds_output_cap():
    payload = chat_to_converse({"messages": [{"role": "user", "content": "hi"}], "temperature": 0})

    assert converse_body(payload, max_tokens=256)["inferenceConfig"] == {
        "temperature": 0,
        "maxTokens": 256,
    }


def test_a_named_tool_choice_and_a_json_schema_answer_translate():
    named = {"type": "function", "function": {"name": "weather"}}
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA, "strict": True}}

    with_tool = chat_to_converse({"messages": [], "tools": [WEATHER], "tool_choice": named})
    with_schema = chat_to_converse({"messages": [], "response_format": fmt})

    assert with_tool["toolConfig"]["toolChoice"] == {"tool": {"name": "weather"}}
    assert with_schema["outputConfig"] == {
        "textFormat": {
            "type": "json_schema",
            "structure": {
                "jsonSchema": {
                    "schema": '{"type":"object","properties":{"city":{"type":"string"}},'
                    '"required":["city"]}',
                    "name": "city",
                }
            },
        }
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"n": 2}, "'n' cannot be translated for bedrock vendors."),
        ({"seed": 7}, "'seed' cannot be translated for bedrock vendors."),
        ({"logprobs": True}, "'logprobs' cannot be translated for bedrock vendors."),
        ({"temperature": 1.5}, "'temperature' above 1 cannot be translated for bedrock vendors."),
        (
            {"response_format": {"type": "json_object"}},
            "'response_format.type' json_object cannot be translated for bedrock vendors: "
            "Converse has a JSON schema mode only.",
        ),
        (
            {"tools": [WEATHER], "tool_choice": "none"},
            "'tool_choice' none cannot be translated for bedrock vendors: Converse cannot "
            "forbid calling the tools it is given.",
        ),
        (
            {"tools": [WEATHER], "parallel_tool_calls": False},
            "'parallel_tool_calls' false cannot be translated for bedrock vendors: Converse "
            "cannot keep tool calls sequential.",
        ),
    ],
    ids=["n", "seed", "logprobs", "temperature", "json_object", "choice-none", "sequential"],
)
def test_what_converse_cannot_carry_is_refused_naming_the_field(body, message):
    assert refusal(**body) == message


def test_an_image_link_and_a_file_are_refused_naming_the_part():
    link = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    file = {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBER"}}

    with pytest.raises(InvalidRequest) as linked:
        chat_to_converse({"messages": [{"role": "user", "content": [link]}]})
    with pytest.raises(InvalidRequest) as filed:
        chat_to_converse({"messages": [{"role": "user", "content": [file]}]})

    assert linked.value.message == (
        "'messages[0].content[0].image_url.url' cannot be translated for bedrock vendors: "
        "Converse takes image bytes (a base64 data: URL), not links."
    )
    assert filed.value.message == (
        "'messages[0].content[0].type' file cannot be translated for bedrock vendors."
    )


# ---------------------------------------------------------------- answers


def test_an_answer_with_a_tool_call_and_cache_tokens_reads_as_chat():
    data = {
        "output": {
            "message": {
                "role": "assistant",
                "content": [
                    {"text": "Checking."},
                    {"toolUse": {"toolUseId": "tooluse_1", "name": "weather", "input": {"a": 1}}},
                ],
            }
        },
        "stopReason": "tool_use",
        "usage": {
            "inputTokens": 10,
            "outputTokens": 7,
            "totalTokens": 47,
            "cacheReadInputTokens": 20,
            "cacheWriteInputTokens": 10,
        },
        "metrics": {"latencyMs": 5},
    }

    completion = completion_from_converse(data, model="claude")

    assert completion.usage == Usage(
        input_tokens=40, output_tokens=7, cache_read_tokens=20, cache_write_tokens=10
    )
    assert (completion.text, completion.finish_reason, completion.model) == (
        "Checking.",
        "tool_calls",
        "claude",
    )
    choice = completion.data["choices"][0]
    assert choice["message"]["tool_calls"] == [
        {
            "id": "tooluse_1",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"a":1}'},
        }
    ]
    assert completion.data["usage"]["prompt_tokens"] == 40
    assert completion.data["usage"]["prompt_tokens_details"] == {
        "cached_tokens": 20,
        "cache_write_tokens": 10,
    }


@pytest.mark.parametrize(
    ("stop", "openai", "ours"),
    [
        ("end_turn", "stop", "stop"),
        ("stop_sequence", "stop", "stop"),
        ("max_tokens", "length", "length"),
        ("guardrail_intervened", "content_filter", "stop"),
        ("content_filtered", "content_filter", "stop"),
    ],
)
def test_stop_reasons_map_to_finish_reasons(stop, openai, ours):
    data = {"output": {"message": {"content": [{"text": "x"}]}}, "stopReason": stop, "usage": {}}

    completion = completion_from_converse(data, model="m")

    assert completion.data["choices"][0]["finish_reason"] == openai
    assert completion.finish_reason == ours


# ---------------------------------------------------------------- streams


def test_stream_events_become_chat_chunks_and_end_with_stop_and_metadata():
    decoder = ConverseStreamToChat()
    tool_start = {"toolUse": {"toolUseId": "tooluse_9", "name": "weather"}}
    feed = [
        ("messageStart", {"role": "assistant"}),
        ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hi"}}),
        ("contentBlockStop", {"contentBlockIndex": 0}),
        ("contentBlockStart", {"contentBlockIndex": 1, "start": tool_start}),
        ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"a"'}}}),
        ("contentBlockStop", {"contentBlockIndex": 1}),
        ("messageStop", {"stopReason": "tool_use"}),
    ]

    chunks = [decoder.feed(kind, payload) for kind, payload in feed]
    assert not decoder.done
    usage = {"inputTokens": 3, "outputTokens": 4, "cacheReadInputTokens": 2}
    last = decoder.feed("metadata", {"usage": usage, "metrics": {"latencyMs": 1}})

    assert decoder.done
    deltas = [c.event["choices"][0]["delta"] if c else None for c in chunks]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"content": "Hi"},
        None,
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "tooluse_9",
                    "type": "function",
                    "function": {"name": "weather", "arguments": ""},
                }
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]},
        None,
        {},
    ]
    assert [bool(c and c.generated) for c in chunks] == [
        False,
        True,
        False,
        True,
        True,
        False,
        False,
    ]
    assert chunks[-1].finish_reason == "tool_calls"
    assert last.usage == Usage(input_tokens=5, output_tokens=4, cache_read_tokens=2)
    assert last.event["choices"] == []
    assert last.event["usage"]["prompt_tokens"] == 5


def messages_of(raw: bytes) -> list:
    buffer = EventStreamBuffer()
    buffer.add_data(raw)
    return list(buffer)


def test_an_event_frame_is_read_into_its_chunk():
    [message] = messages_of(event_frame("contentBlockDelta", {"delta": {"text": "yo"}}))

    chunk = ConverseStream().feed(message.headers[":event-type"], message.payload)

    assert chunk is not None and chunk.text == "yo"


@pytest.mark.parametrize(
    ("exception", "status", "retryable"),
    [
        ("throttlingException", 429, True),
        ("internalServerException", 500, True),
        ("serviceUnavailableException", 503, True),
        ("modelStreamErrorException", None, True),
        ("validationException", 400, False),
    ],
)
def test_stream_exceptions_are_provider_errors(exception, status, retryable):
    [message] = messages_of(exception_frame(exception, "it went wrong"))

    failed = stream_exception(message, "AKID:SECRET")

    assert (failed.status, failed.retryable) == (status, retryable)
    assert str(failed) == f"upstream stream exception ({exception})"


def events_of_one_read(raw: bytes) -> tuple[list, ProviderError | None]:
    """Serve `raw` in one write and read it with converse_events: its batches, and the
    error it ended with."""

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(raw)
        return response

    async def main() -> tuple[list, ProviderError | None]:
        app = web.Application()
        app.router.add_post("/", answer)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        batches: list = []
        try:
            async with (
                VendorClient() as client,
                client.post(f"http://127.0.0.1:{port}/", data=b"", headers={}) as response,
            ):
                async for batch in converse_events(response, "AKID:SECRET"):
                    batches.append(batch)
        except ProviderError as error:
            return batches, error
        finally:
            await runner.cleanup()
        return batches, None

    return asyncio.run(main())


def test_an_exception_frame_ends_the_events_after_those_read_before_it():
    start = event_frame("messageStart", {"role": "assistant"})
    throttled = exception_frame("throttlingException", "slow down")

    batches, error = events_of_one_read(start + throttled)

    assert batches == [[("messageStart", b'{"role":"assistant"}')]]
    assert error is not None and (error.status, error.retryable) == (429, True)


# ---------------------------------------------------------------- credentials


def test_credentials_take_a_session_token():
    credentials = aws_credentials("AKID:se/cr+et:token==")

    assert (credentials.access_key, credentials.secret_key, credentials.token) == (
        "AKID",
        "se/cr+et",
        "token==",
    )


@pytest.mark.parametrize("key", ["sk-platform-secret-key", "AKID:", "A:B:C:D", "AKID: secret"])
def test_a_malformed_key_fails_without_retry_and_without_the_key(key):
    with pytest.raises(ProviderError) as failed:
        aws_credentials(key)

    assert (str(failed.value), failed.value.retryable) == (MALFORMED_KEY, False)
    assert "secret" not in str(failed.value)


def test_the_region_is_the_profiles_or_its_aws_hosts():
    assert region_of("eu-west-1", "http://127.0.0.1:9") == "eu-west-1"
    assert region_of("", "https://bedrock-runtime.us-west-2.amazonaws.com") == "us-west-2"
    assert region_of("", "http://127.0.0.1:9") == ""
