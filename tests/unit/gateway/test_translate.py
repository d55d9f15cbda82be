"""Translation between the OpenAI and Anthropic shapes: requests both ways, whole responses,
streams, usage. Every output is also checked against the official SDKs' own types (unknown
keys refused) and the streams against the SDKs' own accumulators."""

from __future__ import annotations

import collections.abc as cabc
import json
import types
import typing
from typing import Any, Literal, NotRequired, Required, Union, get_args, get_origin

import pydantic
import pytest
from anthropic.lib.streaming._messages import accumulate_event  # MessageStream's; unexported
from anthropic.types import Message, RawMessageStreamEvent
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from pydantic import TypeAdapter
from typing_extensions import get_type_hints, is_typeddict

from core.errors import InvalidRequest
from gateway.shapes.chat_answers import (
    anthropic_message_to_openai,
    anthropic_usage_from_openai,
    openai_completion_to_anthropic,
    openai_usage_from_anthropic,
)
from gateway.shapes.chat_streams import AnthropicStreamToOpenAI, OpenAIStreamToAnthropic
from gateway.shapes.requests_to_anthropic import JSON_TOOL, openai_request_to_anthropic
from gateway.shapes.requests_to_openai import anthropic_request_to_openai

# ---------------------------------------------------------------- SDK shapes, strictly


def sdk_errors(value: Any, hint: Any, path: str = "$") -> list[str]:
    """Return where `value` does not fit the SDK type `hint`; unknown keys count as misfits
    (the SDKs' own validation ignores them, which would hide a misspelt field)."""
    origin = get_origin(hint)
    if hint is Any or hint is object:
        return []
    if origin in (Required, NotRequired, typing.Annotated):
        return sdk_errors(value, get_args(hint)[0], path)
    if origin in (Union, types.UnionType):
        options = [sdk_errors(value, option, path) for option in get_args(hint)]
        if any(not errors for errors in options):
            return []
        # The option that got furthest into the value explains the misfit best.
        return min(
            options, key=lambda errors: (-max(len(e.split(":")[0]) for e in errors), len(errors))
        )
    if origin is Literal:
        return [] if value in get_args(hint) else [f"{path}: {value!r} is not {get_args(hint)}"]
    if hint is type(None):
        return [] if value is None else [f"{path}: expected None"]
    if is_typeddict(hint):
        hints = get_type_hints(hint, include_extras=True)
        required = [
            key
            for key, item in hints.items()
            if get_origin(item) is Required
            or (hint.__total__ and get_origin(item) is not NotRequired)
        ]
        return _object_errors(value, hint.__name__, hints, required, path)
    if isinstance(hint, type) and hasattr(hint, "model_fields"):
        fields = hint.model_fields
        hints = {key: field.annotation for key, field in fields.items()}
        required = [key for key, field in fields.items() if field.is_required()]
        return _object_errors(value, hint.__name__, hints, required, path)
    if origin in (dict, cabc.Mapping):
        if not isinstance(value, dict):
            return [f"{path}: expected an object"]
        return [
            e for k, v in value.items() for e in sdk_errors(v, get_args(hint)[1], f"{path}.{k}")
        ]
    if (
        origin in (list, cabc.Iterable, cabc.Sequence)
        or getattr(origin, "__name__", "") == "SequenceNotStr"
    ):
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        (item,) = get_args(hint)
        return [e for i, v in enumerate(value) for e in sdk_errors(v, item, f"{path}[{i}]")]
    if hint is float:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return [] if number else [f"{path}: expected a number"]
    if isinstance(hint, type):
        return [] if isinstance(value, hint) else [f"{path}: expected {hint.__name__}"]
    return [f"{path}: cannot check {hint!r}"]


def _object_errors(value: Any, name: str, hints: dict, required: list, path: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: expected {name}"]
    errors = [f"{path}.{key}: unknown to {name}" for key in value if key not in hints]
    errors += [f"{path}.{key}: missing from {name}" for key in required if key not in value]
    for key, item in value.items():
        if key in hints:
            errors += sdk_errors(item, hints[key], f"{path}.{key}")
    return errors


# The Anthropic SDK no longer types the sampling fields; the API takes them, and Tollgate
# sends them as its own tests do (`extra_body={"temperature": ...}`).
ANTHROPIC_UNTYPED = ("temperature", "top_p")


def assert_anthropic_request(body: dict) -> None:
    typed = {key: value for key, value in body.items() if key not in ANTHROPIC_UNTYPED}
    full = {**typed, "model": "claude-x", "max_tokens": 100}
    assert sdk_errors(full, MessageCreateParamsNonStreaming) == []


def assert_openai_request(body: dict) -> None:
    assert sdk_errors({**body, "model": "gpt-x"}, CompletionCreateParamsNonStreaming) == []


def assert_anthropic_message(message: dict) -> None:
    Message.model_validate(message)
    assert sdk_errors(message, Message) == []


def assert_chat_completion(completion: dict) -> None:
    ChatCompletion.model_validate(completion)
    assert sdk_errors(completion, ChatCompletion) == []


def assert_openai_chunks(chunks: list[dict]) -> None:
    for chunk in chunks:
        full = {**chunk, "id": "x", "model": "m", "created": 0}
        ChatCompletionChunk.model_validate(full)
        assert sdk_errors(full, ChatCompletionChunk) == []


ANTHROPIC_EVENT = TypeAdapter(RawMessageStreamEvent)


def assert_anthropic_events(events: list[dict]) -> None:
    for event in events:
        ANTHROPIC_EVENT.validate_python(event)
        assert _event_errors(event) == []


def _event_errors(event: dict) -> list[str]:
    options = get_args(get_args(RawMessageStreamEvent)[0])
    return min((sdk_errors(event, option) for option in options), key=len)


def test_the_sdk_shape_check_catches_unknown_keys_and_wrong_literals():
    start, _delta, stop, *_ = get_args(get_args(RawMessageStreamEvent)[0])
    block = {"type": "text", "txt": "x"}

    assert sdk_errors(
        {"role": "user", "content": "x", "nmae": "a"}, MessageCreateParamsNonStreaming
    )
    assert sdk_errors(
        {"messages": [{"role": "user", "content": [block]}]}, CompletionCreateParamsNonStreaming
    )
    assert sdk_errors({"type": "message_stop", "index": 0}, stop)
    assert sdk_errors({"type": "message_start", "message": {}}, start)


def refusal(call, *args, **kwargs) -> str:
    with pytest.raises(InvalidRequest) as caught:
        call(*args, **kwargs)
    return caught.value.message


# ---------------------------------------------------------------- requests: OpenAI -> Anthropic


def to_anthropic(vendor_kind: str = "anthropic", **body) -> dict:
    body.setdefault("messages", [{"role": "user", "content": "Hi"}])
    out = openai_request_to_anthropic({"model": "gpt-x", **body}, vendor_kind=vendor_kind)
    assert_anthropic_request(out)
    return out


WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


def test_openai_conversation_becomes_anthropic_with_system_hoisted_and_sampling_kept():
    out = to_anthropic(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": "Answer in French."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Bonjour"},
            {"role": "user", "content": [{"type": "text", "text": "How are you?"}]},
        ],
        temperature=0.5,
        top_p=0.9,
        stop="END",
    )

    assert out == {
        "system": "Be brief.\n\nAnswer in French.",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Bonjour"},
            {"role": "user", "content": [{"type": "text", "text": "How are you?"}]},
        ],
        "temperature": 0.5,
        "top_p": 0.9,
        "stop_sequences": ["END"],
    }


def test_openai_owned_fields_are_dropped_and_the_end_user_id_never_appears():
    out = to_anthropic(
        model="gpt-x",
        max_tokens=10,
        max_completion_tokens=20,
        user="end-user-7",
        safety_identifier="end-user-7",
        stream=True,
        stream_options={"include_usage": True},
        fallback_model="gpt-y",
    )

    assert out == {"messages": [{"role": "user", "content": "Hi"}]}
    assert "end-user-7" not in json.dumps(out)


def test_system_messages_with_text_parts_become_a_list_of_text_blocks():
    out = to_anthropic(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "No lists."}]},
            {"role": "user", "content": "Hi"},
        ]
    )

    assert out["system"] == [
        {"type": "text", "text": "Be brief."},
        {"type": "text", "text": "No lists."},
    ]


def test_a_system_message_mid_conversation_is_hoisted_and_its_user_neighbours_merge():
    out = to_anthropic(
        messages=[
            {"role": "user", "content": "Hi"},
            {"role": "system", "content": "Be formal."},
            {"role": "user", "content": "Who are you?"},
        ]
    )

    assert out == {
        "system": "Be formal.",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Hi"},
                    {"type": "text", "text": "Who are you?"},
                ],
            }
        ],
    }


def test_images_become_base64_and_url_sources():
    out = to_anthropic(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Compare:"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
                    },
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://example.com/cat.jpg", "detail": "auto"},
                    },
                ],
            }
        ]
    )

    assert out["messages"][0]["content"] == [
        {"type": "text", "text": "Compare:"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]


@pytest.mark.parametrize("detail", ["low", "high", "original"])
def test_an_image_detail_other_than_auto_is_refused(detail):
    image = {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": detail}}

    message = refusal(to_anthropic, messages=[{"role": "user", "content": [image]}])

    assert message == (
        f"'messages[0].content[0].image_url.detail' {detail}"
        " cannot be translated for anthropic vendors."
    )


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("data:image/tiff;base64,AAAA", "'messages[0].content[0].image_url.url' image/tiff"),
        ("data:image/png,rawbytes", "'messages[0].content[0].image_url.url'"),
        ("ftp://example.com/a.png", "'messages[0].content[0].image_url.url'"),
    ],
)
def test_an_image_anthropic_cannot_take_is_refused(url, shown):
    image = {"type": "image_url", "image_url": {"url": url}}

    message = refusal(to_anthropic, messages=[{"role": "user", "content": [image]}])

    assert message == f"{shown} cannot be translated for anthropic vendors."


def test_pdf_file_parts_become_documents_and_the_filename_their_title():
    out = to_anthropic(
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "file",
                        "file": {
                            "filename": "report.pdf",
                            "file_data": "data:application/pdf;base64,JVBERi0xLjQK",
                        },
                    },
                    {"type": "file", "file": {"file_data": "JVBERi0xLjcK"}},
                    {"type": "text", "text": "Summarise both."},
                ],
            }
        ]
    )

    assert out["messages"][0]["content"] == [
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"},
            "title": "report.pdf",
        },
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjcK"},
        },
        {"type": "text", "text": "Summarise both."},
    ]


@pytest.mark.parametrize(
    ("file", "shown"),
    [
        ({"file_id": "file-abc"}, "'messages[0].content[0].file.file_id'"),
        (
            {"file_data": "data:text/plain;base64,aGk=", "filename": "a.txt"},
            "'messages[0].content[0].file.file_data' text/plain",
        ),
        ({"file_data": "aGVsbG8="}, "'messages[0].content[0].file.file_data'"),
    ],
)
def test_uploaded_and_non_pdf_files_are_refused(file, shown):
    part = {"type": "file", "file": file}

    message = refusal(to_anthropic, messages=[{"role": "user", "content": [part]}])

    assert message == f"{shown} cannot be translated for anthropic vendors."


def test_input_audio_is_refused_by_its_type():
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    messages = [
        {"role": "user", "content": "Listen"},
        {"role": "assistant", "content": "OK"},
        {"role": "user", "content": [{"type": "text", "text": "here:"}, audio]},
    ]

    message = refusal(to_anthropic, messages=messages)

    assert message == (
        "'messages[2].content[1].type' input_audio cannot be translated for anthropic vendors."
    )


OPENAI_TOOL_LOOP = [
    {"role": "system", "content": "You check the weather."},
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "18C, cloudy"},
    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "24C, sunny"}]},
    {"role": "user", "content": "Which is warmer?"},
    {"role": "assistant", "content": "Rome is warmer."},
    {"role": "user", "content": "Thanks"},
]
OPENAI_WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": WEATHER_SCHEMA,
    },
}


def test_an_openai_tool_loop_becomes_anthropic_tool_use_and_results_in_one_user_turn():
    out = to_anthropic(
        messages=OPENAI_TOOL_LOOP,
        tools=[
            {
                **OPENAI_WEATHER_TOOL,
                "function": {**OPENAI_WEATHER_TOOL["function"], "strict": False},
            }
        ],
        tool_choice="auto",
        parallel_tool_calls=True,
    )

    assert out == {
        "system": "You check the weather.",
        "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "call_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                    {
                        "type": "tool_use",
                        "id": "call_2",
                        "name": "get_weather",
                        "input": {"city": "Rome"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "18C, cloudy"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_2",
                        "content": [{"type": "text", "text": "24C, sunny"}],
                    },
                    {"type": "text", "text": "Which is warmer?"},
                ],
            },
            {"role": "assistant", "content": "Rome is warmer."},
            {"role": "user", "content": "Thanks"},
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": "Current weather of a city",
                "input_schema": WEATHER_SCHEMA,
            }
        ],
        "tool_choice": {"type": "auto"},
    }


def test_assistant_text_comes_before_its_tool_use_blocks():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "Go"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Calling."}],
            "tool_calls": [call],
        },
    ]

    out = to_anthropic(messages=messages)

    assert out["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Calling."},
            {"type": "tool_use", "id": "c1", "name": "f", "input": {}},
        ],
    }


def test_a_tool_without_parameters_gets_an_empty_object_schema_and_strict_passes():
    out = to_anthropic(tools=[{"type": "function", "function": {"name": "now", "strict": True}}])

    assert out["tools"] == [
        {"name": "now", "input_schema": {"type": "object", "properties": {}}, "strict": True}
    ]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("required", {"type": "any"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"type": "tool", "name": "get_weather"},
        ),
    ],
)
def test_tool_choice_becomes_anthropic(choice, expected):
    out = to_anthropic(tools=[OPENAI_WEATHER_TOOL], tool_choice=choice)

    assert out["tool_choice"] == expected


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (None, {"type": "auto", "disable_parallel_tool_use": True}),
        ("required", {"type": "any", "disable_parallel_tool_use": True}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        ),
        ("none", {"type": "none"}),
    ],
)
def test_parallel_tool_calls_false_disables_parallel_use_on_the_tool_choice(choice, expected):
    body = {"tools": [OPENAI_WEATHER_TOOL], "parallel_tool_calls": False}
    if choice is not None:
        body["tool_choice"] = choice

    assert to_anthropic(**body)["tool_choice"] == expected


def test_parallel_tool_calls_false_without_tools_means_nothing():
    assert "tool_choice" not in to_anthropic(parallel_tool_calls=False)


@pytest.mark.parametrize(
    ("tools", "choice", "shown"),
    [
        ([{"type": "custom", "custom": {"name": "grammar"}}], None, "'tools[0].type' custom"),
        (
            [OPENAI_WEATHER_TOOL],
            {"type": "custom", "custom": {"name": "x"}},
            "'tool_choice.type' custom",
        ),
        (
            [OPENAI_WEATHER_TOOL],
            {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}},
            "'tool_choice.type' allowed_tools",
        ),
    ],
)
def test_non_function_tools_and_choices_are_refused(tools, choice, shown):
    body = {"tools": tools} if choice is None else {"tools": tools, "tool_choice": choice}

    assert refusal(to_anthropic, **body) == f"{shown} cannot be translated for anthropic vendors."


@pytest.mark.parametrize("arguments", ['["Paris"]', "3", "not json", '{"city": '])
def test_tool_call_arguments_that_are_not_a_json_object_are_refused(arguments):
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages = [{"role": "user", "content": "Go"}, {"role": "assistant", "tool_calls": [call]}]

    message = refusal(to_anthropic, messages=messages)

    assert message == (
        "'messages[1].tool_calls[0].function.arguments' not a JSON object"
        " cannot be translated for anthropic vendors."
    )


def test_empty_tool_call_arguments_are_an_empty_input():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}
    messages = [{"role": "user", "content": "Go"}, {"role": "assistant", "tool_calls": [call]}]

    out = to_anthropic(messages=messages)

    assert out["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "f", "input": {}}
    ]


def test_a_tool_call_sent_back_as_an_sdk_stream_helper_left_it_keeps_its_place():
    call = {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {"name": "f", "arguments": "{}"},
    }
    messages = [{"role": "user", "content": "Go"}, {"role": "assistant", "tool_calls": [call]}]

    out = to_anthropic(messages=messages)

    assert out["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "f", "input": {}}
    ]


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        ({"role": "function", "name": "f", "content": "x"}, "'messages[1].role' function"),
        ({"role": "user", "content": "x", "name": "alice"}, "'messages[1].name'"),
        ({"role": "system", "content": "x", "name": "rules"}, "'messages[1].name'"),
        (
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "f", "arguments": "{}"},
            },
            "'messages[1].function_call'",
        ),
        ({"role": "assistant", "content": None, "refusal": "I can't."}, "'messages[1].refusal'"),
        ({"role": "assistant", "content": None, "audio": {"id": "audio_1"}}, "'messages[1].audio'"),
        (
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]},
            "'messages[1].content[0].type' refusal",
        ),
        (
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c", "type": "custom", "custom": {"name": "g", "input": "x"}}
                ],
            },
            "'messages[1].tool_calls[0].type' custom",
        ),
        (
            {"role": "tool", "tool_call_id": "c", "content": [{"type": "image_url"}]},
            "'messages[1].content[0].type' image_url",
        ),
    ],
)
def test_untranslatable_message_fields_are_refused_by_path(message, shown):
    messages = [{"role": "user", "content": "Hi"}, message]

    error = refusal(to_anthropic, messages=messages)

    assert error.startswith(shown)
    assert error.endswith(" cannot be translated for anthropic vendors.")


def test_a_prompt_cache_breakpoint_is_refused_with_its_full_path():
    part = {
        "type": "text",
        "text": "x",
        "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "30m"},
    }

    message = refusal(to_anthropic, messages=[{"role": "user", "content": [part]}])

    assert message == (
        "'messages[0].content[0].prompt_cache_breakpoint'"
        " cannot be translated for anthropic vendors."
    )


def test_temperature_up_to_one_passes_and_above_one_is_refused():
    assert to_anthropic(temperature=1)["temperature"] == 1

    assert refusal(to_anthropic, temperature=1.2) == (
        "'temperature' above 1 cannot be translated for anthropic vendors."
    )


def test_a_stop_list_becomes_stop_sequences():
    assert to_anthropic(stop=["a", "b"])["stop_sequences"] == ["a", "b"]


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("n", 2, "'n'"),
        ("logprobs", True, "'logprobs'"),
        ("top_logprobs", 3, "'top_logprobs'"),
        ("logit_bias", {"50256": -100}, "'logit_bias'"),
        ("seed", 0, "'seed'"),  # 0 is a seed like any other
        ("presence_penalty", 0.5, "'presence_penalty'"),
        ("frequency_penalty", -1, "'frequency_penalty'"),
        ("response_format", {"type": "regex", "regex": "a+"}, "'response_format.type' regex"),
        ("reasoning_effort", "low", "'reasoning_effort'"),
        ("metadata", {"team": "search"}, "'metadata'"),
        ("store", True, "'store'"),
        ("service_tier", "flex", "'service_tier'"),
        ("modalities", ["text", "audio"], "'modalities'"),
        ("audio", {"voice": "alloy", "format": "mp3"}, "'audio'"),
        ("prediction", {"type": "content", "content": "x"}, "'prediction.type' content"),
        ("web_search_options", {"search_context_size": "low"}, "'web_search_options'"),
        ("verbosity", "low", "'verbosity'"),
        ("prompt_cache_key", "k1", "'prompt_cache_key'"),
        ("prompt_cache_retention", "24h", "'prompt_cache_retention'"),
        ("prompt_cache_options", {"mode": "explicit"}, "'prompt_cache_options'"),
        ("moderation", {"model": "omni-moderation-latest"}, "'moderation'"),
        ("functions", [{"name": "f"}], "'functions'"),
        ("function_call", "auto", "'function_call'"),
        ("a_field_from_the_future", 1, "'a_field_from_the_future'"),
    ],
)
def test_untranslatable_openai_fields_are_refused_naming_field_and_vendor(field, value, shown):
    message = refusal(to_anthropic, vendor_kind="bedrock-claude", **{field: value})

    assert message == f"{shown} cannot be translated for bedrock-claude vendors."


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n", 1),
        ("logprobs", False),
        ("top_logprobs", 0),
        ("logit_bias", {}),
        ("seed", None),
        ("presence_penalty", 0),
        ("frequency_penalty", 0.0),
        ("response_format", {"type": "text"}),
        ("reasoning_effort", None),
        ("metadata", {}),
        ("store", False),
        ("service_tier", "auto"),
        ("modalities", ["text"]),
        ("audio", None),
        ("prediction", None),
        ("web_search_options", {}),
        ("verbosity", None),
        ("prompt_cache_key", None),
        ("prompt_cache_options", {"mode": "implicit", "ttl": "30m"}),
        ("moderation", None),
        ("functions", []),
        ("function_call", None),
        ("parallel_tool_calls", True),
        ("tools", []),
        ("stop", []),
        ("tool_choice", None),
        ("a_field_from_the_future", None),
    ],
)
def test_neutral_openai_values_are_accepted_and_omitted(field, value):
    assert to_anthropic(**{field: value}) == {"messages": [{"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"messages": "Hi"}, "'messages' must be a list."),
        ({"messages": ["Hi"]}, "'messages[0]' must be an object."),
        ({"messages": [{"role": "user", "content": 3}]}, "'messages[0].content' must be a list."),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": None}]}]},
            "'messages[0].content[0].text' must be a string.",
        ),
        (
            {"messages": [], "parallel_tool_calls": "no"},
            "'parallel_tool_calls' must be a boolean.",
        ),
    ],
)
def test_malformed_openai_bodies_are_invalid_requests(body, message):
    assert refusal(openai_request_to_anthropic, body, vendor_kind="anthropic") == message


JSON_DESCRIPTION = "Give your answer as this tool's input: a JSON object in its schema."
FORCED_JSON = {"type": "tool", "name": "tollgate_json_answer", "disable_parallel_tool_use": True}


def test_json_object_mode_becomes_one_forced_tool_taking_any_object():
    out = to_anthropic(response_format={"type": "json_object"})

    assert JSON_TOOL == "tollgate_json_answer"
    assert out == {
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": [
            {
                "name": "tollgate_json_answer",
                "description": JSON_DESCRIPTION,
                "input_schema": {"type": "object"},
            }
        ],
        "tool_choice": FORCED_JSON,
    }


def test_a_json_schema_becomes_the_forced_tools_schema_with_its_description_and_strictness():
    response_format = {
        "type": "json_schema",
        "json_schema": {
            "name": "Weather",
            "description": "The weather asked for.",
            "schema": WEATHER_SCHEMA,
            "strict": True,
        },
    }

    out = to_anthropic(response_format=response_format)

    assert out["tools"] == [
        {
            "name": "tollgate_json_answer",
            "description": "The weather asked for.",
            "input_schema": WEATHER_SCHEMA,
            "strict": True,
        }
    ]
    assert out["tool_choice"] == FORCED_JSON


def test_a_json_schema_without_description_gets_the_fixed_one_and_strict_false_is_omitted():
    json_schema = {"name": "Weather", "schema": WEATHER_SCHEMA, "strict": False}

    out = to_anthropic(response_format={"type": "json_schema", "json_schema": json_schema})

    assert out["tools"] == [
        {
            "name": "tollgate_json_answer",
            "description": JSON_DESCRIPTION,
            "input_schema": WEATHER_SCHEMA,
        }
    ]


@pytest.mark.parametrize(
    "neutral", [{"tools": []}, {"tool_choice": "none"}, {"parallel_tool_calls": False}]
)
def test_json_mode_beside_neutral_tool_fields_is_still_the_forced_tool(neutral):
    out = to_anthropic(response_format={"type": "json_object"}, **neutral)

    assert [tool["name"] for tool in out["tools"]] == ["tollgate_json_answer"]
    assert out["tool_choice"] == FORCED_JSON


@pytest.mark.parametrize(
    ("beside", "shown"),
    [
        ({"tools": [OPENAI_WEATHER_TOOL]}, "tools"),
        ({"tools": [OPENAI_WEATHER_TOOL], "tool_choice": "none"}, "tools"),
        ({"tool_choice": "auto"}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
    ],
)
@pytest.mark.parametrize(
    ("response_format", "kind"),
    [
        ({"type": "json_object"}, "json_object"),
        (
            {"type": "json_schema", "json_schema": {"name": "W", "schema": WEATHER_SCHEMA}},
            "json_schema",
        ),
    ],
)
def test_json_mode_beside_client_tools_is_refused(beside, shown, response_format, kind):
    message = refusal(to_anthropic, response_format=response_format, **beside)

    assert message == (
        f"'response_format' {kind} beside {shown} cannot be translated for anthropic vendors: "
        "JSON mode is a forced tool call there, which excludes the client's tools."
    )


def test_json_mode_beside_a_named_tool_choice_is_refused():
    choice = {"type": "function", "function": {"name": "get_weather"}}

    message = refusal(to_anthropic, response_format={"type": "json_object"}, tool_choice=choice)

    assert message.startswith("'response_format' json_object beside tool_choice cannot be")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "string"}},
        {"type": "string"},
        {"properties": {"a": {"type": "string"}}},  # untyped: any JSON value with these keys
        {"anyOf": [{"type": "object"}, {"type": "null"}]},
        {},
    ],
)
def test_a_json_schema_whose_root_is_no_object_schema_is_refused(schema):
    json_schema = {"name": "Answer", "schema": schema}

    message = refusal(
        to_anthropic, response_format={"type": "json_schema", "json_schema": json_schema}
    )

    assert message == (
        "'response_format.json_schema.schema' not an object schema"
        " cannot be translated for anthropic vendors."
    )


@pytest.mark.parametrize(
    ("response_format", "message"),
    [
        (
            {"type": "json_object", "strict": True},
            "'response_format.strict' cannot be translated for anthropic vendors.",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "W", "schema": WEATHER_SCHEMA, "x": 1}},
            "'response_format.json_schema.x' cannot be translated for anthropic vendors.",
        ),
        ({"type": "json_schema"}, "'response_format.json_schema' must be an object."),
        (
            {"type": "json_schema", "json_schema": {"name": "W"}},
            "'response_format.json_schema.schema' must be an object.",
        ),
        (
            {"type": "json_schema", "json_schema": {"schema": WEATHER_SCHEMA}},
            "'response_format.json_schema.name' must be a string.",
        ),
        (
            {
                "type": "json_schema",
                "json_schema": {"name": "W", "schema": WEATHER_SCHEMA, "description": 3},
            },
            "'response_format.json_schema.description' must be a string.",
        ),
        ("json", "'response_format' must be an object."),
        (
            {"type": "text", "text": "x"},
            "'response_format.type' text cannot be translated for anthropic vendors.",
        ),
    ],
)
def test_malformed_or_extended_json_formats_are_refused(response_format, message):
    assert refusal(to_anthropic, response_format=response_format) == message


@pytest.mark.parametrize("response_format", [None, {"type": "json_object"}])
def test_a_client_tool_named_like_the_json_tool_is_refused_with_or_without_json_mode(
    response_format,
):
    tool = {"type": "function", "function": {"name": "tollgate_json_answer"}}

    message = refusal(
        to_anthropic, tools=[OPENAI_WEATHER_TOOL, tool], response_format=response_format
    )

    assert message == (
        "'tools[1].function.name' tollgate_json_answer cannot be translated for anthropic "
        "vendors: the name is reserved for JSON answers."
    )


# ---------------------------------------------------------------- requests: Anthropic -> OpenAI


def to_openai(vendor_kind: str = "openai", **body) -> dict:
    body.setdefault("messages", [{"role": "user", "content": "Hi"}])
    out = anthropic_request_to_openai(
        {"model": "claude-x", "max_tokens": 100, **body}, vendor_kind=vendor_kind
    )
    assert_openai_request(out)
    return out


def test_anthropic_conversation_becomes_openai_with_a_leading_system_message():
    out = to_openai(
        system="Be brief.",
        messages=[
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
            {"role": "user", "content": [{"type": "text", "text": "How are you?"}]},
        ],
        temperature=0.3,
        top_p=0.8,
        stop_sequences=["END", "STOP"],
    )

    assert out == {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": [{"type": "text", "text": "How are you?"}]},
        ],
        "temperature": 0.3,
        "top_p": 0.8,
        "stop": ["END", "STOP"],
    }


def test_anthropic_owned_fields_are_dropped_and_the_end_user_id_never_appears():
    out = to_openai(
        model="claude-x",
        max_tokens=50,
        metadata={"user_id": "end-user-7"},
        stream=True,
        fallback_model="claude-y",
    )

    assert out == {"messages": [{"role": "user", "content": "Hi"}]}
    assert "end-user-7" not in json.dumps(out)


def test_metadata_other_than_user_id_is_refused():
    message = refusal(to_openai, metadata={"user_id": "u", "team": "search"})

    assert message == "'metadata.team' cannot be translated for openai vendors."


def test_system_text_blocks_become_text_parts_and_cache_control_is_dropped_everywhere():
    cache = {"type": "ephemeral"}
    out = to_openai(
        system=[
            {"type": "text", "text": "Be brief."},
            {"type": "text", "text": "Long shared context.", "cache_control": cache},
        ],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": cache}]}
        ],
        tools=[{"name": "now", "input_schema": {"type": "object"}, "cache_control": cache}],
        cache_control=cache,
    )

    assert out == {
        "messages": [
            {
                "role": "system",
                "content": [
                    {"type": "text", "text": "Be brief."},
                    {"type": "text", "text": "Long shared context."},
                ],
            },
            {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        ],
        "tools": [
            {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}
        ],
    }


def test_a_system_message_among_the_messages_stays_where_it_is():
    out = to_openai(
        messages=[
            {"role": "user", "content": "Hi"},
            {"role": "system", "content": [{"type": "text", "text": "Be formal now."}]},
            {"role": "user", "content": "Who are you?"},
        ]
    )

    assert out["messages"] == [
        {"role": "user", "content": "Hi"},
        {"role": "system", "content": [{"type": "text", "text": "Be formal now."}]},
        {"role": "user", "content": "Who are you?"},
    ]


def test_anthropic_images_become_image_url_parts_in_both_encodings():
    out = to_openai(
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/jpeg",
                            "data": "/9j/4AAQ",
                        },
                    },
                    {
                        "type": "image",
                        "source": {"type": "url", "url": "https://example.com/cat.png"},
                    },
                    {"type": "text", "text": "Same cat?"},
                ],
            }
        ]
    )

    assert out["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "text", "text": "Same cat?"},
    ]


def test_a_pdf_document_becomes_a_file_part_named_by_its_title():
    pdf = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"}
    out = to_openai(
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "document",
                        "source": pdf,
                        "title": "report.pdf",
                        "citations": {"enabled": False},
                    },
                    {"type": "document", "source": pdf},
                ],
            }
        ]
    )

    assert out["messages"][0]["content"] == [
        {
            "type": "file",
            "file": {
                "filename": "report.pdf",
                "file_data": "data:application/pdf;base64,JVBERi0xLjQK",
            },
        },
        {
            "type": "file",
            "file": {
                "filename": "document.pdf",
                "file_data": "data:application/pdf;base64,JVBERi0xLjQK",
            },
        },
    ]


PDF_SOURCE = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"}


@pytest.mark.parametrize(
    ("block", "shown"),
    [
        (
            {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": "hi"},
            },
            "'messages[0].content[0].source.type' text",
        ),
        (
            {"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}},
            "'messages[0].content[0].source.type' url",
        ),
        (
            {"type": "document", "source": {"type": "content", "content": "hi"}},
            "'messages[0].content[0].source.type' content",
        ),
        (
            {"type": "document", "source": {"type": "file", "file_id": "file_1"}},
            "'messages[0].content[0].source.type' file",
        ),
        (
            {"type": "document", "source": PDF_SOURCE, "context": "Q3 figures"},
            "'messages[0].content[0].context'",
        ),
        (
            {"type": "document", "source": PDF_SOURCE, "citations": {"enabled": True}},
            "'messages[0].content[0].citations'",
        ),
        (
            {"type": "image", "source": {"type": "file", "file_id": "file_1"}},
            "'messages[0].content[0].source.type' file",
        ),
        (
            {
                "type": "image",
                "source": {"type": "url", "url": "https://x"},
                "transformations": {"oversized_image": "error"},
            },
            "'messages[0].content[0].transformations'",
        ),
        (
            {"type": "search_result", "source": "s", "title": "t", "content": []},
            "'messages[0].content[0].type' search_result",
        ),
        (
            {"type": "text", "text": "x", "citations": [{"type": "char_location"}]},
            "'messages[0].content[0].citations'",
        ),
    ],
)
def test_user_blocks_openai_cannot_take_are_refused_by_path(block, shown):
    message = refusal(to_openai, messages=[{"role": "user", "content": [block]}])

    assert message == f"{shown} cannot be translated for openai vendors."


ANTHROPIC_WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather of a city",
    "input_schema": WEATHER_SCHEMA,
}
ANTHROPIC_TOOL_LOOP = [
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me check."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C, cloudy"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": [{"type": "text", "text": "24C, sunny"}],
            },
            {"type": "text", "text": "Which is warmer?"},
        ],
    },
    {"role": "assistant", "content": "Rome is warmer."},
]


def test_an_anthropic_tool_loop_becomes_openai_tool_calls_and_tool_messages():
    out = to_openai(
        system="You check the weather.",
        messages=ANTHROPIC_TOOL_LOOP,
        tools=[ANTHROPIC_WEATHER_TOOL],
        tool_choice={"type": "auto"},
    )

    assert out == {
        "messages": [
            {"role": "system", "content": "You check the weather."},
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    {
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "toolu_2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_1", "content": "18C, cloudy"},
            {
                "role": "tool",
                "tool_call_id": "toolu_2",
                "content": [{"type": "text", "text": "24C, sunny"}],
            },
            {"role": "user", "content": [{"type": "text", "text": "Which is warmer?"}]},
            {"role": "assistant", "content": "Rome is warmer."},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "parameters": WEATHER_SCHEMA,
                    "description": "Current weather of a city",
                },
            }
        ],
        "tool_choice": "auto",
    }


def test_tool_results_come_first_even_when_text_precedes_them():
    out = to_openai(
        messages=[
            {"role": "user", "content": "Go"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Here:"},
                    {"type": "tool_result", "tool_use_id": "t1"},
                ],
            },
        ]
    )

    assert out["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": ""},
        {"role": "user", "content": [{"type": "text", "text": "Here:"}]},
    ]


def test_tool_input_with_unicode_is_kept_readable_in_arguments():
    blocks = [{"type": "tool_use", "id": "t1", "name": "f", "input": {"city": "Zürich"}}]

    out = to_openai(
        messages=[{"role": "user", "content": "Go"}, {"role": "assistant", "content": blocks}]
    )

    assert out["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"city":"Zürich"}'


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        (
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "is_error": True,
                        "content": "boom",
                    }
                ],
            },
            "'messages[1].content[0].is_error'",
        ),
        (
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [
                            {"type": "image", "source": {"type": "url", "url": "https://x"}}
                        ],
                    }
                ],
            },
            "'messages[1].content[0].content[0].type' image",
        ),
        (
            {
                "role": "assistant",
                "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}],
            },
            "'messages[1].content[0].type' thinking",
        ),
        (
            {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "xx"}]},
            "'messages[1].content[0].type' redacted_thinking",
        ),
        (
            {
                "role": "assistant",
                "content": [
                    {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}
                ],
            },
            "'messages[1].content[0].type' server_tool_use",
        ),
        (
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t",
                        "name": "f",
                        "input": {},
                        "caller": {"type": "code_execution_20250825", "tool_id": "x"},
                    }
                ],
            },
            "'messages[1].content[0].caller.type' code_execution_20250825",
        ),
    ],
)
def test_anthropic_blocks_openai_cannot_take_are_refused_by_path(message, shown):
    messages = [{"role": "user", "content": "Hi"}, message]

    assert (
        refusal(to_openai, messages=messages) == f"{shown} cannot be translated for openai vendors."
    )


def test_neutral_block_fields_are_accepted():
    blocks = [
        {"type": "tool_use", "id": "t1", "name": "f", "input": {}, "caller": {"type": "direct"}},
    ]
    results = [{"type": "tool_result", "tool_use_id": "t1", "content": "ok", "is_error": False}]
    out = to_openai(
        messages=[
            {"role": "user", "content": "Go"},
            {"role": "assistant", "content": blocks},
            {"role": "user", "content": results},
        ]
    )

    assert out["messages"][2] == {"role": "tool", "tool_call_id": "t1", "content": "ok"}


@pytest.mark.parametrize(
    ("tool", "shown"),
    [
        (
            {"type": "web_search_20250305", "name": "web_search"},
            "'tools[0].type' web_search_20250305",
        ),
        ({"type": "bash_20250124", "name": "bash"}, "'tools[0].type' bash_20250124"),
        (
            {**ANTHROPIC_WEATHER_TOOL, "input_examples": [{"city": "Oslo"}]},
            "'tools[0].input_examples'",
        ),
        ({**ANTHROPIC_WEATHER_TOOL, "defer_loading": True}, "'tools[0].defer_loading'"),
    ],
)
def test_server_tools_and_tool_extras_are_refused(tool, shown):
    assert refusal(to_openai, tools=[tool]) == f"{shown} cannot be translated for openai vendors."


def test_a_custom_typed_strict_tool_becomes_a_strict_function():
    out = to_openai(tools=[{**ANTHROPIC_WEATHER_TOOL, "type": "custom", "strict": True}])

    assert out["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": WEATHER_SCHEMA,
                "description": "Current weather of a city",
                "strict": True,
            },
        }
    ]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, {"tool_choice": "auto"}),
        ({"type": "any"}, {"tool_choice": "required"}),
        ({"type": "none"}, {"tool_choice": "none"}),
        (
            {"type": "tool", "name": "get_weather"},
            {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        ),
        (
            {"type": "auto", "disable_parallel_tool_use": True},
            {"tool_choice": "auto", "parallel_tool_calls": False},
        ),
        ({"type": "any", "disable_parallel_tool_use": False}, {"tool_choice": "required"}),
    ],
)
def test_tool_choice_becomes_openai(choice, expected):
    out = to_openai(tools=[ANTHROPIC_WEATHER_TOOL], tool_choice=choice)

    assert {
        key: out[key] for key in ("tool_choice", "parallel_tool_calls") if key in out
    } == expected


def test_disable_parallel_tool_use_without_tools_means_nothing():
    out = to_openai(tool_choice={"type": "auto", "disable_parallel_tool_use": True})

    assert "parallel_tool_calls" not in out


def test_more_than_four_stop_sequences_are_refused():
    assert to_openai(stop_sequences=["1", "2", "3", "4"])["stop"] == ["1", "2", "3", "4"]

    assert refusal(to_openai, stop_sequences=["1", "2", "3", "4", "5"]) == (
        "'stop_sequences' with more than 4 entries cannot be translated for openai vendors."
    )


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("top_k", 5, "'top_k'"),
        ("thinking", {"type": "enabled", "budget_tokens": 2048}, "'thinking.type' enabled"),
        ("thinking", {"type": "adaptive"}, "'thinking.type' adaptive"),
        ("service_tier", "standard_only", "'service_tier'"),
        ("container", "container_1", "'container'"),
        (
            "mcp_servers",
            [{"type": "url", "url": "https://mcp.example", "name": "x"}],
            "'mcp_servers'",
        ),
        (
            "context_management",
            {"edits": [{"type": "clear_tool_uses_20250919"}]},
            "'context_management'",
        ),
        ("output_config", {"effort": "low"}, "'output_config'"),
        ("output_config", {"format": {"type": "json_schema", "schema": {}}}, "'output_config'"),
        ("inference_geo", "us", "'inference_geo'"),
        ("speed", "fast", "'speed'"),
        ("diagnostics", {"previous_message_id": "msg_1"}, "'diagnostics'"),
        ("user_profile_id", "up_1", "'user_profile_id'"),
        ("a_field_from_the_future", 1, "'a_field_from_the_future'"),
    ],
)
def test_untranslatable_anthropic_fields_are_refused_naming_field_and_vendor(field, value, shown):
    message = refusal(to_openai, vendor_kind="openrouter", **{field: value})

    assert message == f"{shown} cannot be translated for openrouter vendors."


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("top_k", None),
        ("thinking", {"type": "disabled"}),
        ("service_tier", "auto"),
        ("speed", "standard"),
        ("container", None),
        ("mcp_servers", []),
        ("context_management", None),
        ("output_config", {}),
        ("stop_sequences", []),
        ("tools", []),
        ("system", ""),
        ("system", []),
        ("cache_control", {"type": "ephemeral", "ttl": "1h"}),  # dropped: see the module
        ("metadata", {"user_id": None}),
    ],
)
def test_neutral_anthropic_values_are_accepted_and_omitted(field, value):
    assert to_openai(**{field: value}) == {"messages": [{"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"messages": None}, "'messages' must be a list."),
        ({"metadata": "u1"}, "'metadata' must be an object."),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "x"}],
                    }
                ]
            },
            "'messages[0].content[0].input' must be an object.",
        ),
    ],
)
def test_malformed_anthropic_bodies_are_invalid_requests(body, message):
    assert refusal(anthropic_request_to_openai, body, vendor_kind="openai") == message


# ---------------------------------------------------------------- requests: round trips


def test_an_openai_tool_conversation_survives_a_round_trip_through_anthropic():
    original = {
        "messages": [
            {"role": "system", "content": "You check the weather."},
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18C, cloudy"},
            {
                "role": "tool",
                "tool_call_id": "call_2",
                "content": [{"type": "text", "text": "24C, sunny"}],
            },
            {"role": "user", "content": [{"type": "text", "text": "Which is warmer?"}]},
            {"role": "assistant", "content": "Rome is warmer."},
        ],
        "tools": [OPENAI_WEATHER_TOOL],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False,
        "temperature": 0.2,
        "stop": ["END"],
    }

    anthropic = openai_request_to_anthropic({"model": "gpt-x", **original}, vendor_kind="anthropic")
    back = anthropic_request_to_openai(
        {"model": "c", "max_tokens": 9, **anthropic}, vendor_kind="openai"
    )

    assert back == original


def test_a_user_string_merged_with_tool_results_comes_back_as_a_text_part():
    anthropic = openai_request_to_anthropic(
        {"model": "gpt-x", "messages": OPENAI_TOOL_LOOP[1:6]}, vendor_kind="anthropic"
    )
    back = anthropic_request_to_openai(
        {"model": "c", "max_tokens": 9, **anthropic}, vendor_kind="openai"
    )

    assert back["messages"][-1] == {
        "role": "user",
        "content": [{"type": "text", "text": "Which is warmer?"}],
    }


def test_an_anthropic_tool_conversation_survives_a_round_trip_through_openai():
    original = {
        "system": "You check the weather.",
        "messages": ANTHROPIC_TOOL_LOOP,
        "tools": [ANTHROPIC_WEATHER_TOOL],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "stop_sequences": ["END"],
        "top_p": 0.5,
    }

    openai = anthropic_request_to_openai(
        {"model": "c", "max_tokens": 9, **original}, vendor_kind="openai"
    )
    back = openai_request_to_anthropic({"model": "gpt-x", **openai}, vendor_kind="anthropic")

    assert back == original


# ---------------------------------------------------------------- usage


def test_openai_usage_counts_cached_and_cache_written_tokens_in_the_prompt():
    usage = {
        "input_tokens": 100,
        "output_tokens": 50,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 200,
    }

    assert openai_usage_from_anthropic(usage) == {
        "prompt_tokens": 1300,
        "completion_tokens": 50,
        "total_tokens": 1350,
        "prompt_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 200},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def test_openai_usage_treats_missing_anthropic_counts_as_zero():
    assert openai_usage_from_anthropic({"output_tokens": 3, "cache_read_input_tokens": None}) == {
        "prompt_tokens": 0,
        "completion_tokens": 3,
        "total_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def test_anthropic_usage_takes_cached_tokens_out_of_the_input():
    usage = {
        "prompt_tokens": 1300,
        "completion_tokens": 50,
        "total_tokens": 1350,
        "prompt_tokens_details": {"cached_tokens": 1000, "audio_tokens": 0},
    }

    assert anthropic_usage_from_openai(usage) == {
        "input_tokens": 300,
        "output_tokens": 50,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 1000,
    }


def test_anthropic_usage_without_details_has_no_cached_tokens():
    assert anthropic_usage_from_openai({"prompt_tokens": 7, "completion_tokens": 2}) == {
        "input_tokens": 7,
        "output_tokens": 2,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def test_usage_survives_a_round_trip_both_ways():
    anthropic = {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_creation_input_tokens": 20,
        "cache_read_input_tokens": 30,
    }

    assert anthropic_usage_from_openai(openai_usage_from_anthropic(anthropic)) == anthropic


# ---------------------------------------------------------------- whole responses


def anthropic_message(content: list[dict], stop_reason: str = "end_turn", **usage) -> dict:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 8, **usage},
    }


def test_an_anthropic_message_with_tool_use_becomes_a_chat_completion():
    message = anthropic_message(
        [
            {"type": "text", "text": "Let me "},
            {"type": "text", "text": "check."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
        ],
        stop_reason="tool_use",
        cache_read_input_tokens=100,
        cache_creation_input_tokens=0,
    )

    out = anthropic_message_to_openai(message)

    assert_chat_completion(out)
    assert isinstance(out.pop("created"), int)
    assert out == {
        "id": "msg_01",
        "object": "chat.completion",
        "model": "claude-x",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Let me check.",
                    "refusal": None,
                    "tool_calls": [
                        {
                            "id": "toolu_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": 120,
            "completion_tokens": 8,
            "total_tokens": 128,
            "prompt_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    }


def test_message_content_is_none_beside_tool_calls_and_empty_otherwise():
    tool_only = anthropic_message(
        [{"type": "tool_use", "id": "t", "name": "f", "input": {}}], "tool_use"
    )

    assert anthropic_message_to_openai(tool_only)["choices"][0]["message"]["content"] is None
    assert anthropic_message_to_openai(anthropic_message([]))["choices"][0]["message"] == {
        "role": "assistant",
        "content": "",
        "refusal": None,
    }


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("a_reason_from_the_future", "stop"),
    ],
)
def test_stop_reasons_become_finish_reasons(stop_reason, finish_reason):
    out = anthropic_message_to_openai(
        anthropic_message([{"type": "text", "text": "x"}], stop_reason)
    )

    assert out["choices"][0]["finish_reason"] == finish_reason


@pytest.mark.parametrize(
    "block",
    [
        {"type": "thinking", "thinking": "hm", "signature": "s"},
        {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}},
    ],
)
def test_a_block_the_request_refused_cannot_arrive(block):
    with pytest.raises(ValueError):
        anthropic_message_to_openai(anthropic_message([block]))


def json_answer_block(tool_input: dict) -> dict:
    return {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "tollgate_json_answer",
        "input": tool_input,
    }


def test_a_json_tool_call_is_the_answers_content_with_a_stop():
    message = anthropic_message(
        [json_answer_block({"city": "Zürich", "days": 2, "sunny": True})],
        stop_reason="tool_use",
    )

    out = anthropic_message_to_openai(message)

    assert_chat_completion(out)
    assert isinstance(out.pop("created"), int)
    assert out == {
        "id": "msg_01",
        "object": "chat.completion",
        "model": "claude-x",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": '{"city":"Zürich","days":2,"sunny":true}',
                    "refusal": None,
                },
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": 20,
            "completion_tokens": 8,
            "total_tokens": 28,
            "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    }


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [("tool_use", "stop"), ("end_turn", "stop"), ("max_tokens", "length")],
)
def test_a_json_answers_stop_reason_reads_as_an_answers(stop_reason, finish_reason):
    out = anthropic_message_to_openai(anthropic_message([json_answer_block({})], stop_reason))

    assert out["choices"][0]["message"]["content"] == "{}"
    assert out["choices"][0]["finish_reason"] == finish_reason


def test_a_tool_call_not_named_for_json_still_gives_tool_calls():
    block = {"type": "tool_use", "id": "toolu_1", "name": "tollgate_json", "input": {"a": 1}}

    out = anthropic_message_to_openai(anthropic_message([block], "tool_use"))

    choice = out["choices"][0]
    assert (choice["message"]["content"], choice["finish_reason"]) == (None, "tool_calls")
    assert choice["message"]["tool_calls"] == [
        {
            "id": "toolu_1",
            "type": "function",
            "function": {"name": "tollgate_json", "arguments": '{"a":1}'},
        }
    ]


def test_a_second_json_answer_cannot_arrive():
    blocks = [json_answer_block({"a": 1}), {**json_answer_block({"a": 2}), "id": "toolu_2"}]

    with pytest.raises(ValueError):
        anthropic_message_to_openai(anthropic_message(blocks, "tool_use"))


def openai_completion(
    message: dict, finish_reason: str = "stop", usage: dict | None = None
) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-x",
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
        ],
        "usage": usage or {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16},
    }


def test_an_openai_completion_with_tool_calls_becomes_an_anthropic_message():
    completion = openai_completion(
        {
            "role": "assistant",
            "content": "Checking both.",
            "refusal": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": ""}},
            ],
        },
        "tool_calls",
        {
            "prompt_tokens": 1200,
            "completion_tokens": 30,
            "total_tokens": 1230,
            "prompt_tokens_details": {"cached_tokens": 1024},
        },
    )

    out = openai_completion_to_anthropic(completion)

    assert_anthropic_message(out)
    assert out == {
        "id": "chatcmpl-1",
        "type": "message",
        "role": "assistant",
        "model": "gpt-x",
        "content": [
            {"type": "text", "text": "Checking both."},
            {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "call_2", "name": "now", "input": {}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 176,
            "output_tokens": 30,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 1024,
        },
    }


@pytest.mark.parametrize("content", [None, ""])
def test_an_empty_openai_content_gives_no_text_block(content):
    out = openai_completion_to_anthropic(
        openai_completion({"role": "assistant", "content": content})
    )

    assert out["content"] == []


@pytest.mark.parametrize(
    ("finish_reason", "stop_reason"),
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("tool_calls", "tool_use"),
        ("content_filter", "refusal"),
        (None, "end_turn"),
    ],
)
def test_finish_reasons_become_stop_reasons(finish_reason, stop_reason):
    completion = openai_completion({"role": "assistant", "content": "x"}, finish_reason)

    assert openai_completion_to_anthropic(completion)["stop_reason"] == stop_reason


def test_an_openai_refusal_is_text_with_a_refusal_stop():
    completion = openai_completion(
        {"role": "assistant", "content": None, "refusal": "I can't help."}
    )

    out = openai_completion_to_anthropic(completion)

    assert (out["content"], out["stop_reason"]) == (
        [{"type": "text", "text": "I can't help."}],
        "refusal",
    )


@pytest.mark.parametrize("arguments", ['["a"]', "oops"])
def test_openai_tool_arguments_that_are_not_an_object_cannot_become_a_tool_input(arguments):
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
    completion = openai_completion({"role": "assistant", "content": None, "tool_calls": [call]})

    with pytest.raises(ValueError):
        openai_completion_to_anthropic(completion)


def test_a_response_survives_a_round_trip_through_the_other_shape():
    message = anthropic_message(
        [
            {"type": "text", "text": "Checking."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
        ],
        "tool_use",
        cache_creation_input_tokens=5,
        cache_read_input_tokens=7,
    )

    assert openai_completion_to_anthropic(anthropic_message_to_openai(message)) == message


# ---------------------------------------------------------------- streams: Anthropic -> OpenAI


def anthropic_start(**usage) -> dict:
    return {
        "type": "message_start",
        "message": {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 25, "output_tokens": 1, **usage},
        },
    }


ANTHROPIC_TEXT_STREAM = [
    anthropic_start(cache_creation_input_tokens=0, cache_read_input_tokens=10),
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " world"}},
    {"type": "content_block_stop", "index": 0},
    {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 12},
    },
    {"type": "message_stop"},
]


def feed_all(translator: AnthropicStreamToOpenAI, events: list[dict]) -> list[dict]:
    return [chunk for event in events for chunk in translator.feed(event)]


def chunk(delta: dict, finish_reason: str | None = None, **extra) -> dict:
    return {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
        **extra,
    }


def test_an_anthropic_text_stream_becomes_chunks_with_usage_last():
    chunks = feed_all(AnthropicStreamToOpenAI(include_usage=True), ANTHROPIC_TEXT_STREAM)

    assert_openai_chunks(chunks)
    assert chunks == [
        chunk({"role": "assistant", "content": ""}, usage=None),
        chunk({"content": "Hello"}, usage=None),
        chunk({"content": " world"}, usage=None),
        chunk({}, "stop", usage=None),
        {
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": {
                "prompt_tokens": 35,
                "completion_tokens": 12,
                "total_tokens": 47,
                "prompt_tokens_details": {"cached_tokens": 10, "cache_write_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
        },
    ]


def test_without_include_usage_chunks_carry_no_usage_at_all():
    chunks = feed_all(AnthropicStreamToOpenAI(include_usage=False), ANTHROPIC_TEXT_STREAM)

    assert_openai_chunks(chunks)
    assert chunks == [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hello"}),
        chunk({"content": " world"}),
        chunk({}, "stop"),
    ]


def tool_start(index: int, tool_id: str) -> dict:
    block = {"type": "tool_use", "id": tool_id, "name": "get_weather", "input": {}}
    return {"type": "content_block_start", "index": index, "content_block": block}


def json_delta(index: int, partial: str) -> dict:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "input_json_delta", "partial_json": partial},
    }


ANTHROPIC_TOOL_STREAM = [
    anthropic_start(),
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "Checking."},
    },
    {"type": "content_block_stop", "index": 0},
    tool_start(1, "toolu_1"),
    json_delta(1, ""),
    json_delta(1, '{"city": '),
    json_delta(1, '"Paris"}'),
    {"type": "content_block_stop", "index": 1},
    tool_start(2, "toolu_2"),
    json_delta(2, '{"ci'),
    json_delta(2, 'ty":"Rome"}'),
    {"type": "content_block_stop", "index": 2},
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 40},
    },
    {"type": "message_stop"},
]


def tool_fragment(index: int, arguments: str) -> dict:
    return {"tool_calls": [{"index": index, "function": {"arguments": arguments}}]}


def test_an_anthropic_two_tool_stream_numbers_tool_calls_from_zero():
    chunks = feed_all(AnthropicStreamToOpenAI(include_usage=False), ANTHROPIC_TOOL_STREAM)

    assert_openai_chunks(chunks)
    call = {"type": "function", "function": {"name": "get_weather", "arguments": ""}}
    assert chunks == [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Checking."}),
        chunk({"tool_calls": [{"index": 0, "id": "toolu_1", **call}]}),
        chunk(tool_fragment(0, '{"city": ')),
        chunk(tool_fragment(0, '"Paris"}')),
        chunk({"tool_calls": [{"index": 1, "id": "toolu_2", **call}]}),
        chunk(tool_fragment(1, '{"ci')),
        chunk(tool_fragment(1, 'ty":"Rome"}')),
        chunk({}, "tool_calls"),
    ]


def test_the_openai_sdk_accumulates_the_translated_tool_stream():
    state = ChatCompletionStreamState()
    for item in feed_all(AnthropicStreamToOpenAI(include_usage=True), ANTHROPIC_TOOL_STREAM):
        state.handle_chunk(
            ChatCompletionChunk.model_validate({**item, "id": "x", "model": "m", "created": 0})
        )

    final = state.get_final_completion()

    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Checking."
    assert [
        (c.id, c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls
    ] == [
        ("toolu_1", "get_weather", {"city": "Paris"}),
        ("toolu_2", "get_weather", {"city": "Rome"}),
    ]
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (25, 40)


JSON_BLOCK = {"type": "tool_use", "id": "toolu_1", "name": "tollgate_json_answer", "input": {}}
ANTHROPIC_JSON_STREAM = [  # as Anthropic streams a forced tool: input {} first, then pieces
    anthropic_start(cache_creation_input_tokens=0, cache_read_input_tokens=0),
    {"type": "content_block_start", "index": 0, "content_block": JSON_BLOCK},
    {"type": "ping"},
    json_delta(0, ""),
    json_delta(0, '{"city":"stub",'),
    json_delta(0, '"days":1}'),
    {"type": "content_block_stop", "index": 0},
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 5},
    },
    {"type": "message_stop"},
]


def test_an_anthropic_json_tool_stream_becomes_content_chunks_and_a_stop():
    chunks = feed_all(AnthropicStreamToOpenAI(include_usage=True), ANTHROPIC_JSON_STREAM)

    assert_openai_chunks(chunks)
    assert chunks == [
        chunk({"role": "assistant", "content": ""}, usage=None),
        chunk({"content": '{"city":"stub",'}, usage=None),
        chunk({"content": '"days":1}'}, usage=None),
        chunk({}, "stop", usage=None),
        {
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": {
                "prompt_tokens": 25,
                "completion_tokens": 5,
                "total_tokens": 30,
                "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
        },
    ]


def test_the_openai_sdk_parses_the_translated_json_stream():
    class Weather(pydantic.BaseModel):
        city: str
        days: int

    state = ChatCompletionStreamState(response_format=Weather)
    for item in feed_all(AnthropicStreamToOpenAI(include_usage=False), ANTHROPIC_JSON_STREAM):
        state.handle_chunk(
            ChatCompletionChunk.model_validate({**item, "id": "x", "model": "m", "created": 0})
        )

    choice = state.get_final_completion().choices[0]
    assert (choice.finish_reason, choice.message.tool_calls) == ("stop", None)
    assert choice.message.parsed == Weather(city="stub", days=1)


def test_a_json_tool_start_with_its_input_gives_it_as_content():
    translator = AnthropicStreamToOpenAI(include_usage=False)
    translator.feed(anthropic_start())
    start = {**JSON_BLOCK, "input": {"a": "é"}}

    chunks = translator.feed({"type": "content_block_start", "index": 0, "content_block": start})

    assert chunks == [chunk({"content": '{"a":"é"}'})]


def test_a_tool_stream_not_named_for_json_still_ends_in_tool_calls():
    translator = AnthropicStreamToOpenAI(include_usage=False)
    events = [ANTHROPIC_JSON_STREAM[0], tool_start(0, "t"), json_delta(0, "{}")]
    events += ANTHROPIC_JSON_STREAM[-2:]  # message_delta with stop_reason tool_use

    chunks = feed_all(translator, events)

    assert [c["choices"][0]["delta"] for c in chunks[1:-1]] == [
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "t",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        },
        tool_fragment(0, "{}"),
    ]
    assert chunks[-1] == chunk({}, "tool_calls")


def test_a_json_stream_cut_by_max_tokens_ends_in_length():
    events = [*ANTHROPIC_JSON_STREAM[:4], json_delta(0, '{"ci')]
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
        "usage": {"output_tokens": 2},
    }

    chunks = feed_all(AnthropicStreamToOpenAI(include_usage=False), [*events, end])

    assert chunks[-1] == chunk({}, "length")


def test_a_second_json_block_cannot_be_streamed_on():
    translator = AnthropicStreamToOpenAI(include_usage=False)
    feed_all(translator, ANTHROPIC_JSON_STREAM[:7])

    with pytest.raises(ValueError):
        translator.feed({"type": "content_block_start", "index": 1, "content_block": JSON_BLOCK})


def test_stream_usage_merges_start_and_delta_with_later_values_winning():
    translator = AnthropicStreamToOpenAI(include_usage=True)
    translator.feed(anthropic_start(cache_read_input_tokens=5))
    chunks = translator.feed(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
            "usage": {"output_tokens": 30, "input_tokens": 27, "cache_read_input_tokens": None},
        }
    )

    assert chunks[0]["choices"][0]["finish_reason"] == "length"
    assert chunks[1]["usage"] == {
        "prompt_tokens": 32,
        "completion_tokens": 30,
        "total_tokens": 62,
        "prompt_tokens_details": {"cached_tokens": 5, "cache_write_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def test_a_json_delta_for_a_block_that_is_no_tool_cannot_be_streamed_on():
    translator = AnthropicStreamToOpenAI(include_usage=False)
    translator.feed(anthropic_start())
    translator.feed(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    )

    with pytest.raises(ValueError):
        translator.feed(json_delta(0, "{}"))


def test_a_text_block_with_citations_cannot_arrive():
    block = {
        "type": "text",
        "text": "x",
        "citations": [{"type": "char_location", "cited_text": "x"}],
    }

    with pytest.raises(ValueError):
        anthropic_message_to_openai(anthropic_message([block]))


@pytest.mark.parametrize(
    "event_type", ["ping", "content_block_stop", "message_stop", "an_event_from_the_future"]
)
def test_events_without_a_chunk_give_none(event_type):
    assert AnthropicStreamToOpenAI(include_usage=True).feed({"type": event_type, "index": 0}) == []


@pytest.mark.parametrize(
    "event",
    [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "redacted_thinking", "data": "x"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "hm"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "s"},
        },
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    ],
)
def test_thinking_and_error_events_cannot_be_streamed_on(event):
    translator = AnthropicStreamToOpenAI(include_usage=False)
    translator.feed(anthropic_start())

    with pytest.raises(ValueError):
        translator.feed(event)


# ---------------------------------------------------------------- streams: OpenAI -> Anthropic


def openai_chunk(delta: dict | None = None, finish_reason: str | None = None, **extra) -> dict:
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]
    )
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "gpt-x",
        "choices": choices,
        "usage": None,
        **extra,
    }


def translate_openai_stream(chunks: list[dict]) -> list[dict]:
    translator = OpenAIStreamToAnthropic()
    events = [event for item in chunks for event in translator.feed(item)] + translator.finish()
    assert_anthropic_events(events)
    return events


def accumulated(events: list[dict]) -> dict:
    snapshot = None
    buffers: dict[int, bytes] = {}
    for event in events:
        snapshot = accumulate_event(
            event=event,  # type: ignore[arg-type]  # it deserialises a plain dict itself
            current_snapshot=snapshot,
            json_bufs=buffers,
        )
    assert snapshot is not None, "no events"
    return snapshot.to_dict(exclude_none=True)


def message_start(model: str = "gpt-x", message_id: str = "chatcmpl-1") -> dict:
    return {
        "type": "message_start",
        "message": {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        },
    }


def text_delta(index: int, text: str) -> dict:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "text_delta", "text": text},
    }


OPENAI_USAGE = {
    "prompt_tokens": 30,
    "completion_tokens": 5,
    "total_tokens": 35,
    "prompt_tokens_details": {"cached_tokens": 20},
}


def test_an_openai_text_stream_becomes_anthropic_events():
    events = translate_openai_stream(
        [
            openai_chunk({"role": "assistant", "content": ""}),
            openai_chunk({"content": "Hello"}),
            openai_chunk({"content": " world"}),
            openai_chunk({}, "stop"),
            openai_chunk(usage=OPENAI_USAGE),
        ]
    )

    assert events == [
        message_start(),
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        text_delta(0, "Hello"),
        text_delta(0, " world"),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {
                "input_tokens": 10,
                "output_tokens": 5,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 20,
            },
        },
        {"type": "message_stop"},
    ]


def openai_tool_call(index: int, call_id: str | None = None, arguments: str = "", **extra) -> dict:
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id:
        call.update(id=call_id, type="function")
        call["function"]["name"] = "get_weather"
    return {"tool_calls": [{**call, **extra}]}


OPENAI_TOOL_STREAM = [
    openai_chunk({"role": "assistant", "content": "Checking."}),
    openai_chunk(openai_tool_call(0, "call_1")),
    openai_chunk(openai_tool_call(0, arguments='{"ci')),
    openai_chunk(openai_tool_call(0, arguments='ty": "Paris"}')),
    openai_chunk(openai_tool_call(1, "call_2")),
    openai_chunk(openai_tool_call(1, arguments='{"city": ')),
    openai_chunk(openai_tool_call(1, arguments='"Rome"}')),
    openai_chunk({}, "tool_calls"),
    openai_chunk(usage={"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70}),
]


def test_an_openai_two_tool_stream_becomes_one_block_per_call():
    events = translate_openai_stream(OPENAI_TOOL_STREAM)

    def tool_block(index: int, call_id: str) -> dict:
        block = {"type": "tool_use", "id": call_id, "name": "get_weather", "input": {}}
        return {"type": "content_block_start", "index": index, "content_block": block}

    assert events == [
        message_start(),
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        text_delta(0, "Checking."),
        {"type": "content_block_stop", "index": 0},
        tool_block(1, "call_1"),
        json_delta(1, '{"ci'),
        json_delta(1, 'ty": "Paris"}'),
        {"type": "content_block_stop", "index": 1},
        tool_block(2, "call_2"),
        json_delta(2, '{"city": '),
        json_delta(2, '"Rome"}'),
        {"type": "content_block_stop", "index": 2},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {
                "input_tokens": 50,
                "output_tokens": 20,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        },
        {"type": "message_stop"},
    ]


def test_the_anthropic_sdk_accumulates_the_translated_tool_stream():
    message = accumulated(translate_openai_stream(OPENAI_TOOL_STREAM))

    assert message == {
        "id": "chatcmpl-1",
        "type": "message",
        "role": "assistant",
        "model": "gpt-x",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "Rome"}},
        ],
        "stop_reason": "tool_use",
        "usage": {
            "input_tokens": 50,
            "output_tokens": 20,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def test_a_vendor_repeating_the_call_id_on_every_fragment_still_gives_one_block():
    events = translate_openai_stream(
        [
            openai_chunk(openai_tool_call(0, "call_1", '{"city":')),
            openai_chunk(openai_tool_call(0, "call_1", '"Oslo"}')),
            openai_chunk({}, "tool_calls"),
        ]
    )

    assert [event["type"] for event in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert accumulated(events)["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Oslo"}}
    ]


def test_text_after_a_tool_call_opens_a_new_text_block():
    events = translate_openai_stream(
        [openai_chunk(openai_tool_call(0, "call_1", "{}")), openai_chunk({"content": "Done."})]
    )

    assert accumulated(events)["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {}},
        {"type": "text", "text": "Done."},
    ]


@pytest.mark.parametrize(
    ("finish_reason", "stop_reason"),
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("tool_calls", "tool_use"),
        ("content_filter", "refusal"),
    ],
)
def test_the_finish_reason_becomes_the_stop_reason_at_the_end(finish_reason, stop_reason):
    events = translate_openai_stream(
        [openai_chunk({"content": "x"}), openai_chunk({}, finish_reason)]
    )

    assert events[-2]["delta"]["stop_reason"] == stop_reason


def test_a_streamed_refusal_is_text_with_a_refusal_stop():
    message = accumulated(
        translate_openai_stream([openai_chunk({"refusal": "I can't."}), openai_chunk({}, "stop")])
    )

    assert (message["content"], message["stop_reason"]) == (
        [{"type": "text", "text": "I can't."}],
        "refusal",
    )


def test_finish_without_any_chunk_still_gives_a_whole_message():
    translator = OpenAIStreamToAnthropic()

    events = translator.finish()

    assert_anthropic_events(events)
    assert events == [
        message_start(model="", message_id=""),
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        },
        {"type": "message_stop"},
    ]


def test_empty_deltas_give_only_the_message_start():
    translator = OpenAIStreamToAnthropic()

    assert translator.feed(openai_chunk({"role": "assistant", "content": ""})) == [message_start()]
    assert translator.feed(openai_chunk({})) == []


@pytest.mark.parametrize(
    "late",
    [
        openai_chunk(openai_tool_call(0, arguments="}")),  # call 0's fragment after call 1 began
        openai_chunk(openai_tool_call(2)),  # a call without an id
    ],
)
def test_tool_fragments_out_of_order_cannot_be_streamed_on(late):
    translator = OpenAIStreamToAnthropic()
    translator.feed(openai_chunk(openai_tool_call(0, "call_1", "{")))
    translator.feed(openai_chunk(openai_tool_call(1, "call_2", "{}")))

    with pytest.raises(ValueError):
        translator.feed(late)
