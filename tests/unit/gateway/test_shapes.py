"""The two client shapes, both ways: what a client body becomes, what each vendor is sent,
and how vendor answers come back. Pure functions: no processes needed."""

from __future__ import annotations

import orjson
import pytest

from core.errors import InvalidRequest
from gateway.shapes import anthropic as anthropic_shape
from gateway.shapes import openai as openai_shape
from gateway.types import ChatRequest, Chunk, Completion, Message, Usage


def openai_request(**body) -> ChatRequest:
    return openai_shape.parse_request(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **body}
    )


def anthropic_request(**body) -> ChatRequest:
    return anthropic_shape.parse_request(
        {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}], **body}
    )


# ---------------------------------------------------------------- client bodies in


def test_openai_body_becomes_a_request_with_system_prompt_and_sampling():
    req = openai_shape.parse_request(
        {
            "model": "gpt-4o-mini,claude-3-5-haiku",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "developer", "content": [{"type": "text", "text": "No lists."}]},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "and "},
                        {"type": "text", "text": "then?"},
                    ],
                },
            ],
            "max_completion_tokens": 7,
            "max_tokens": 99,
            "temperature": 1.5,
            "top_p": 0.9,
            "stop": "END",
            "stream": True,
            "stream_options": {"include_usage": True},
            "user": "end-user-7",
        }
    )

    assert req == ChatRequest(
        model="gpt-4o-mini",
        chain=("gpt-4o-mini", "claude-3-5-haiku"),
        messages=(
            Message("user", "hi"),
            Message("assistant", "hello"),
            Message("user", "and then?"),
        ),
        system="Be brief.\n\nNo lists.",
        max_tokens=7,
        temperature=1.5,
        top_p=0.9,
        stop=("END",),
        stream=True,
        include_usage=True,
        caller_id="end-user-7",
    )


def test_anthropic_body_becomes_the_same_request():
    req = anthropic_shape.parse_request(
        {
            "model": "claude-3-5-haiku",
            "fallback_model": "gpt-4o-mini",
            "max_tokens": 7,
            "system": [{"type": "text", "text": "Be brief."}],
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
            ],
            "temperature": 0.5,
            "top_p": 0.9,
            "stop_sequences": ["END", "STOP"],
            "stream": True,
            "metadata": {"user_id": "end-user-7"},
        }
    )

    assert req == ChatRequest(
        model="claude-3-5-haiku",
        chain=("claude-3-5-haiku", "gpt-4o-mini"),
        messages=(Message("user", "hi"), Message("assistant", "hello")),
        system="Be brief.",
        max_tokens=7,
        temperature=0.5,
        top_p=0.9,
        stop=("END", "STOP"),
        stream=True,
        caller_id="end-user-7",
    )


def test_fallback_header_follows_the_body_chain_without_repeats(settings):
    settings.TOLLGATE = {**settings.TOLLGATE, "MAX_ROUTE": 3}  # the default allows two
    req = openai_shape.parse_request(
        {"model": "a, b", "messages": [{"role": "user", "content": "x"}]}, fallback_header="b,c"
    )
    assert req.chain == ("a", "b", "c")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"tools": [{"type": "function"}]}, "'tools' is not supported by Tollgate."),
        ({"tool_choice": "auto"}, "'tool_choice' is not supported by Tollgate."),
        ({"parallel_tool_calls": True}, "'parallel_tool_calls' is not supported by Tollgate."),
        ({"logprobs": True}, "'logprobs' is not supported by Tollgate."),
        (
            {"messages": [{"role": "tool", "content": "42", "tool_call_id": "c"}]},
            "messages[0]: tool calls are not supported by Tollgate.",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "messages[0]: content part type 'image_url' is not supported.",
        ),
        (
            {"messages": [{"role": "system", "content": "only a system prompt"}]},
            "'messages' needs at least one user message.",
        ),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0]: unknown role 'wizard'."),
        ({"temperature": 2.5}, "'temperature' must be a number from 0 to 2."),
        ({"top_p": -0.1}, "'top_p' must be a number from 0 to 1."),
        ({"max_tokens": 0}, "'max_tokens' must be a positive integer."),
        ({"stop": [1]}, "'stop' must be a string or a list of strings."),
        ({"stream": "yes"}, "'stream' must be a boolean."),
        ({"model": ""}, "'model' is required."),
    ],
)
def test_openai_body_is_refused_naming_what_is_wrong(body, message):
    with pytest.raises(InvalidRequest) as refused:
        openai_request(**body)
    assert (refused.value.code, refused.value.message) == ("LM-2001", message)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"tools": [{"name": "x"}]}, "'tools' is not supported by Tollgate."),
        ({"thinking": {"type": "enabled"}}, "'thinking' is not supported by Tollgate."),
        ({"top_k": 3}, "'top_k' is not supported by Tollgate."),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]},
            "messages[0]: content part type 'tool_result' is not supported.",
        ),
        (
            {"messages": [{"role": "system", "content": "x"}]},
            "messages[0]: role must be 'user' or 'assistant'.",
        ),
        ({"max_tokens": None}, "'max_tokens' is required."),
        ({"temperature": 1.5}, "'temperature' must be a number from 0 to 1."),
        ({"stop_sequences": "END"}, "'stop_sequences' must be a list of strings."),
        ({"metadata": {"user_id": 7}}, "'metadata.user_id' must be a string."),
    ],
)
def test_anthropic_body_is_refused_naming_what_is_wrong(body, message):
    with pytest.raises(InvalidRequest) as refused:
        anthropic_request(**body)
    assert (refused.value.code, refused.value.message) == ("LM-2001", message)


# ---------------------------------------------------------------- vendor bodies out


FULL = ChatRequest(
    model="m",
    chain=("m",),
    system="Be brief.",
    messages=(
        Message("user", "hi"),
        Message("user", "again"),
        Message("assistant", "yes"),
        Message("user", "go"),
    ),
    max_tokens=50,
    temperature=1.5,
    top_p=0.9,
    stop=("END",),
    stream=True,
)


def test_openai_vendor_is_sent_the_system_prompt_first_and_asked_for_streamed_usage():
    sent = orjson.loads(
        openai_shape.vendor_body(
            FULL, upstream_model="gpt-4o-mini", caller_label="lbl-1", max_tokens=50
        )
    )
    assert sent == {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
            {"role": "user", "content": "again"},
            {"role": "assistant", "content": "yes"},
            {"role": "user", "content": "go"},
        ],
        "max_tokens": 50,
        "temperature": 1.5,
        "top_p": 0.9,
        "stop": ["END"],
        "user": "lbl-1",
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_openai_vendor_body_leaves_out_what_the_client_did_not_set_but_the_output_cap():
    req = ChatRequest(model="m", chain=("m",), messages=(Message("user", "hi"),))
    sent = openai_shape.vendor_body(req, upstream_model="x", caller_label=None, max_tokens=4096)
    assert orjson.loads(sent) == {
        "model": "x",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4096,  # the cap the hold assumed: the vendor can never bill past it
    }


@pytest.mark.parametrize(
    ("upstream", "field"),
    [
        ("o1-mini", "max_completion_tokens"),
        ("o3", "max_completion_tokens"),
        ("o4-mini", "max_completion_tokens"),
        ("gpt-5-mini", "max_completion_tokens"),
        ("gpt-4o-mini", "max_tokens"),
        ("openai/o3", "max_tokens"),  # OpenRouter takes max_tokens for every model
    ],
)
def test_openai_reasoning_models_are_capped_with_max_completion_tokens(upstream, field):
    req = ChatRequest(model="m", chain=("m",), messages=(Message("user", "hi"),))
    sent = orjson.loads(
        openai_shape.vendor_body(req, upstream_model=upstream, caller_label=None, max_tokens=77)
    )
    assert {k: v for k, v in sent.items() if k.startswith("max_")} == {field: 77}


def test_anthropic_vendor_gets_alternating_turns_stop_sequences_and_a_clamped_temperature():
    sent = orjson.loads(
        anthropic_shape.vendor_body(
            FULL, upstream_model="claude-3-5-haiku-latest", max_tokens=50, caller_label="lbl-1"
        )
    )
    assert sent == {
        "model": "claude-3-5-haiku-latest",
        "max_tokens": 50,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "hi\n\nagain"},
            {"role": "assistant", "content": "yes"},
            {"role": "user", "content": "go"},
        ],
        "temperature": 1.0,
        "top_p": 0.9,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "lbl-1"},
        "stream": True,
    }


# ---------------------------------------------------------------- vendor answers back


def test_openai_answer_and_stream_chunks_carry_text_finish_and_usage():
    completion = openai_shape.completion_from_vendor(
        {
            "choices": [{"message": {"content": "ok"}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        },
        model="m",
    )
    assert completion == Completion(text="ok", finish_reason="length", usage=Usage(3, 1), model="m")
    assert (
        openai_shape.chunk_from_vendor(
            {"choices": [{"delta": {"role": "assistant", "content": ""}}]}
        )
        is None
    )
    assert openai_shape.chunk_from_vendor(
        {"choices": [{"delta": {"content": "Hi"}, "finish_reason": None}]}
    ) == Chunk(text="Hi")
    assert openai_shape.chunk_from_vendor(
        {"choices": [{"delta": {}, "finish_reason": "content_filter"}]}
    ) == Chunk(finish_reason="stop")
    assert openai_shape.chunk_from_vendor(
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    ) == Chunk(usage=Usage(3, 2))


def test_anthropic_stream_usage_is_assembled_from_message_start_and_message_delta():
    state = anthropic_shape.VendorStreamState()
    events = [
        ("message_start", {"message": {"usage": {"input_tokens": 12, "output_tokens": 1}}}),
        ("content_block_start", {"index": 0}),
        ("content_block_delta", {"delta": {"type": "text_delta", "text": "Hi"}}),
        ("content_block_delta", {"delta": {"type": "input_json_delta", "partial_json": "{"}}),
        ("message_delta", {"delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 5}}),
    ]
    chunks = [state.chunk_from_event(name, data) for name, data in events]
    assert chunks == [
        None,
        None,
        Chunk(text="Hi"),
        None,
        Chunk(finish_reason="length", usage=Usage(12, 5)),
    ]


def test_anthropic_answer_joins_its_text_blocks():
    completion = anthropic_shape.completion_from_vendor(
        {
            "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 4, "output_tokens": 2},
        },
        model="m",
    )
    assert completion == Completion(
        text="Hello", finish_reason="stop", usage=Usage(4, 2), model="m"
    )


# ---------------------------------------------------------------- client renderings


def test_openai_stream_rendering_ends_with_finish_usage_and_done():
    renderer = openai_shape.StreamRenderer(request_id="r1", model="m", include_usage=True)
    body = (
        renderer.start() + renderer.chunk(Chunk(text="Hi")) + renderer.finish("stop", Usage(3, 1))
    ).decode()
    events = [line[6:] for line in body.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    assert [c["choices"] for c in chunks] == [
        [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
        [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}],
        [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        [],
    ]
    assert chunks[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    assert all(c["id"] == "chatcmpl-r1" and c["model"] == "m" for c in chunks)


def test_anthropic_rendering_maps_finish_reasons_back():
    body = orjson.loads(
        anthropic_shape.render_completion(
            Completion(text="x", finish_reason="length", usage=Usage(2, 1), model="m"),
            request_id="r1",
        )
    )
    assert (body["id"], body["stop_reason"], body["usage"]) == (
        "msg_r1",
        "max_tokens",
        {"input_tokens": 2, "output_tokens": 1},
    )
