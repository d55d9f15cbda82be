"""The two client shapes, both ways: what a client body becomes, what each vendor is sent,
and how vendor answers come back. Pure functions: no processes needed."""

from __future__ import annotations

import orjson
import pytest

from core.errors import BudgetExhausted, InvalidRequest, RequestRateLimited
from gateway.shapes import anthropic as anthropic_shape
from gateway.shapes import openai as openai_shape
from gateway.types import ANTHROPIC, OPENAI, Completion, Usage

HI = [{"role": "user", "content": "hi"}]

# What a modern OpenAI client sends: every field is documented, none is Tollgate's to drop.
OPENAI_FULL = {
    "model": "gpt-4o-mini,claude-3-5-haiku",
    "messages": [
        {"role": "developer", "content": [{"type": "text", "text": "No lists."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in it?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "look", "arguments": '{"q":"a"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a cat"},
    ],
    "tools": [{"type": "function", "function": {"name": "look", "parameters": {}}}],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "response_format": {"type": "json_object"},
    "n": 2,
    "seed": 7,
    "presence_penalty": 0,
    "frequency_penalty": 0.5,
    "logit_bias": {"50256": -100},
    "logprobs": True,
    "top_logprobs": 2,
    "stop": ["END"],
    "reasoning_effort": "low",
    "metadata": {"team": "x"},
    "temperature": 1.5,
    "top_p": 0.9,
    "max_completion_tokens": 7,
    "stream": True,
    "stream_options": {"include_usage": False, "include_obfuscation": False},
    "user": "end-user-7",
}


def openai_request(**body):
    return openai_shape.parse_request({"model": "m", "messages": HI, **body})


def anthropic_request(**body):
    return anthropic_shape.parse_request({"model": "m", "max_tokens": 10, "messages": HI, **body})


# ---------------------------------------------------------------- client bodies in


def test_openai_body_is_kept_whole_and_read_for_what_tollgate_decides():
    req = openai_shape.parse_request(OPENAI_FULL)
    assert req.body is OPENAI_FULL
    assert (req.shape, req.model, req.chain) == (
        OPENAI,
        "gpt-4o-mini",
        ("gpt-4o-mini", "claude-3-5-haiku"),
    )
    assert (req.max_tokens, req.n, req.stream, req.include_usage, req.caller_id) == (
        7,
        2,
        True,
        False,
        "end-user-7",
    )
    assert (req.media, req.unknown) == (1, ())
    assert req.prompt_parts == 5  # four messages and one tool


def test_prompt_bytes_count_every_text_but_an_image_by_its_bound():
    small = openai_request(messages=[{"role": "user", "content": "hi"}])
    with_image = openai_request(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64," + "A" * 9000},
                    },
                ],
            }
        ]
    )
    assert with_image.media == 1
    assert with_image.prompt_bytes < small.prompt_bytes + 40  # the base64 is not counted


def test_unknown_fields_are_named_for_the_plan_to_judge():
    assert openai_request(vendor_extension=1).unknown == ("vendor_extension",)
    assert anthropic_request(beta_thing={"x": 1}).unknown == ("beta_thing",)


@pytest.mark.parametrize(
    ("body", "surcharged"),
    [
        ({}, None),
        ({"service_tier": "auto"}, None),
        ({"service_tier": "priority"}, "service_tier"),
        ({"web_search_options": {}}, "web_search_options"),
    ],
)
def test_openai_fields_billed_beyond_tokens_are_named(body, surcharged):
    assert openai_request(**body).surcharged == surcharged


@pytest.mark.parametrize(
    ("body", "surcharged"),
    [
        ({"tools": [{"name": "look", "input_schema": {}}]}, None),
        ({"tools": [{"type": "bash_20250124", "name": "bash"}]}, None),  # the client runs it
        (
            {"tools": [{"name": "x", "input_schema": {}}, {"type": "web_search_20250305"}]},
            "tools[1].type",
        ),
        ({"mcp_servers": [{"type": "url", "url": "https://mcp.example"}]}, "mcp_servers"),
    ],
)
def test_anthropic_fields_billed_beyond_tokens_are_named(body, surcharged):
    assert anthropic_request(**body).surcharged == surcharged


def test_fallback_header_follows_the_body_chain_without_repeats():
    req = openai_shape.parse_request(
        {"model": "a, b", "messages": [{"role": "user", "content": "x"}]}, fallback_header="b,c"
    )
    assert req.chain == ("a", "b", "c")


def test_anthropic_body_is_kept_whole_with_its_thinking_budget_inside_max_tokens():
    body = {
        "model": "claude-3-5-haiku",
        "fallback_model": "gpt-4o-mini",
        "max_tokens": 2048,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": [{"name": "look", "input_schema": {"type": "object"}}],
        "top_k": 5,
        "metadata": {"user_id": "end-user-7"},
    }
    req = anthropic_shape.parse_request(body)
    assert req.body is body
    assert (req.shape, req.chain, req.max_tokens, req.caller_id, req.unknown) == (
        ANTHROPIC,
        ("claude-3-5-haiku", "gpt-4o-mini"),
        2048,
        "end-user-7",
        (),
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0]: unknown role 'wizard'"),
        ({"messages": []}, "'messages' must be a non-empty list."),
        ({"n": 0}, "'n' must be an integer from 1 to 128."),
        ({"max_tokens": 0}, "'max_tokens' must be a positive integer."),
        ({"max_completion_tokens": "9"}, "'max_completion_tokens' must be a positive integer."),
        ({"stream": "yes"}, "'stream' must be a boolean."),
        ({"stream_options": []}, "'stream_options' must be an object."),
        ({"user": 7}, "'user' must be a string."),
        ({"model": ""}, "'model' is required."),
    ],
)
def test_openai_body_is_refused_naming_what_is_wrong(body, message):
    with pytest.raises(InvalidRequest) as refused:
        openai_request(**body)
    assert refused.value.code == "LM-2001"
    assert refused.value.message.startswith(message)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"messages": [{"role": "system", "content": "x"}]}, "messages[0]: unknown role 'system'"),
        ({"max_tokens": None}, "'max_tokens' is required."),
        ({"stop_sequences": "END"}, "'stop_sequences' must be a list of strings."),
        ({"metadata": {"user_id": 7}}, "'metadata.user_id' must be a string."),
        ({"metadata": {"team": "x"}}, "metadata: 'team' is not supported by Tollgate."),
        (
            {"thinking": {"type": "enabled", "budget_tokens": 10}},
            "'max_tokens' must be greater than 'thinking.budget_tokens'.",
        ),
        (
            {"thinking": {"type": "enabled"}},
            "'thinking.budget_tokens' must be a positive integer.",
        ),
    ],
)
def test_anthropic_body_is_refused_naming_what_is_wrong(body, message):
    with pytest.raises(InvalidRequest) as refused:
        anthropic_request(**body)
    assert refused.value.code == "LM-2001"
    assert refused.value.message.startswith(message)


def test_internal_text_bodies_refuse_what_a_text_answer_cannot_carry():
    with pytest.raises(InvalidRequest) as refused:
        openai_shape.parse_text_request({"model": "m", "messages": HI, "tools": [{}]})
    assert refused.value.message == "'tools' is not supported by Tollgate."


# ---------------------------------------------------------------- vendor bodies out


def test_openai_vendor_gets_every_field_unchanged_but_those_tollgate_owns():
    req = openai_shape.parse_request(OPENAI_FULL)
    sent = orjson.loads(
        openai_shape.vendor_body(
            req.body,
            upstream_model="gpt-4o-mini-2024",
            caller_label="lbl-1",
            max_tokens=7,
            stream=True,
        )
    )
    owned = {"model", "max_completion_tokens", "user", "stream", "stream_options"}
    assert {k: v for k, v in sent.items() if k not in owned} == {
        k: v for k, v in OPENAI_FULL.items() if k not in owned
    }
    assert {k: sent[k] for k in owned} == {
        "model": "gpt-4o-mini-2024",
        "max_completion_tokens": 7,  # the field the client used, at the cap the hold assumed
        "user": "lbl-1",  # the caller label, never the end user's own id
        "stream": True,
        "stream_options": {"include_usage": True, "include_obfuscation": False},
    }


def test_openai_vendor_body_drops_the_end_user_when_there_is_no_label():
    body = {"model": "m", "messages": HI, "user": "raw-id", "safety_identifier": "raw-id"}
    sent = orjson.loads(
        openai_shape.vendor_body(
            body, upstream_model="x", caller_label=None, max_tokens=4096, stream=False
        )
    )
    assert sent == {"model": "x", "messages": HI, "max_tokens": 4096}


@pytest.mark.parametrize(
    ("upstream", "client_field", "field"),
    [
        ("o1-mini", "max_tokens", "max_completion_tokens"),
        ("o3", "max_tokens", "max_completion_tokens"),
        ("gpt-5-mini", "max_tokens", "max_completion_tokens"),
        ("gpt-4o-mini", "max_tokens", "max_tokens"),
        ("gpt-4o-mini", "max_completion_tokens", "max_completion_tokens"),
        ("openai/o3", "max_tokens", "max_tokens"),  # OpenRouter takes max_tokens for every model
    ],
)
def test_openai_reasoning_models_are_capped_with_max_completion_tokens(
    upstream, client_field, field
):
    body = {"model": "m", "messages": HI, client_field: 50}
    sent = orjson.loads(
        openai_shape.vendor_body(
            body, upstream_model=upstream, caller_label=None, max_tokens=77, stream=False
        )
    )
    assert {k: v for k, v in sent.items() if k.startswith("max_")} == {field: 77}


def test_anthropic_vendor_gets_every_field_unchanged_but_those_tollgate_owns():
    body = {
        "model": "claude-3-5-haiku",
        "max_tokens": 100,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "again"}],
        "thinking": {"type": "enabled", "budget_tokens": 50},
        "top_k": 5,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "raw-id"},
        "fallback_model": "x",
    }
    sent = orjson.loads(
        anthropic_shape.vendor_body(
            body,
            upstream_model="claude-3-5-haiku-latest",
            max_tokens=80,
            caller_label="lbl-1",
            stream=True,
        )
    )
    assert sent == {
        **{k: v for k, v in body.items() if k != "fallback_model"},
        "model": "claude-3-5-haiku-latest",
        "max_tokens": 80,
        "metadata": {"user_id": "lbl-1"},
        "stream": True,
    }


# ---------------------------------------------------------------- vendor answers back


def test_openai_answer_usage_reads_cached_and_reasoning_tokens():
    data = {
        "choices": [{"message": {"content": "ok"}, "finish_reason": "tool_calls"}],
        "usage": {
            "prompt_tokens": 30,
            "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": 12},
            "completion_tokens_details": {"reasoning_tokens": 16},
        },
    }
    completion = openai_shape.completion_from_vendor(data, model="m")
    assert completion == Completion(
        shape=OPENAI,
        data=data,
        text="ok",
        finish_reason="tool_calls",
        usage=Usage(30, 20, cache_read_tokens=12, reasoning_tokens=16),
        model="m",
    )


def test_openai_chunks_say_what_they_generated():
    role = openai_shape.chunk_from_vendor({"choices": [{"delta": {"role": "assistant"}}]})
    assert (role.text, role.generated, role.finish_reason) == ("", False, None)
    tool = openai_shape.chunk_from_vendor(
        {"choices": [{"delta": {"tool_calls": [{"index": 0}]}, "finish_reason": None}]}
    )
    assert (tool.text, tool.generated) == ("", True)
    end = openai_shape.chunk_from_vendor({"choices": [{"delta": {}, "finish_reason": "length"}]})
    assert end.finish_reason == "length"
    usage = openai_shape.chunk_from_vendor(
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    )
    assert usage.usage == Usage(3, 2)


def test_anthropic_usage_counts_cache_reads_and_writes_in_the_prompt():
    start = anthropic_shape.chunk_from_event(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "usage": {
                    "input_tokens": 5,
                    "cache_read_input_tokens": 100,
                    "cache_creation_input_tokens": 20,
                    "output_tokens": 1,
                }
            },
        },
    )
    assert start.usage == Usage(125, 1, cache_read_tokens=100, cache_write_tokens=20)
    delta = anthropic_shape.chunk_from_event(
        "content_block_delta",
        {"type": "content_block_delta", "delta": {"type": "input_json_delta", "partial_json": "{"}},
    )
    assert (delta.text, delta.generated) == ("", True)
    end = anthropic_shape.chunk_from_event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 9},
        },
    )
    assert (end.finish_reason, Usage().merged(start.usage).merged(end.usage)) == (
        "tool_calls",
        Usage(125, 9, cache_read_tokens=100, cache_write_tokens=20),
    )
    assert anthropic_shape.usage_json(Usage(125, 9, 100, 20)) == {
        "input_tokens": 5,
        "output_tokens": 9,
        "cache_creation_input_tokens": 20,
        "cache_read_input_tokens": 100,
    }


# ---------------------------------------------------------------- client renderings


def _sse_data(body: bytes) -> list:
    lines = [line for line in body.decode().split("\n") if line.startswith("data: ")]
    return [line[6:] if line == "data: [DONE]" else orjson.loads(line[6:]) for line in lines]


def test_openai_stream_passes_the_vendors_chunks_with_id_and_model_mapped():
    vendor = [
        {
            "id": "v",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "up",
            "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}],
            "usage": None,
            "system_fingerprint": "fp",
        },
        {
            "id": "v",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "up",
            "choices": [],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        },
    ]
    for include_usage in (True, False):
        renderer = openai_shape.StreamRenderer(
            request_id="r1", model="m", include_usage=include_usage
        )
        out = b"".join(renderer.chunk(openai_shape.chunk_from_vendor(e)) for e in vendor)
        events = _sse_data(out + renderer.finish("stop", Usage(3, 1)))
        expected = [{**vendor[0], "id": "chatcmpl-r1", "model": "m"}]
        if include_usage:
            expected.append({**vendor[1], "id": "chatcmpl-r1", "model": "m"})
        else:  # the usage Tollgate asked for is not the client's
            del expected[0]["usage"]
        assert events == [*expected, "[DONE]"]


def test_answers_keep_the_vendors_fields_with_id_and_model_mapped():
    data = {"id": "v", "object": "chat.completion", "model": "up", "choices": [], "x": 1}
    out = orjson.loads(
        openai_shape.render_completion(
            Completion(OPENAI, data, "", "stop", Usage(), model="m"),
            request_id="r1",
            req=openai_shape.parse_request(
                {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            ),
        )
    )
    assert out == {**data, "id": "chatcmpl-r1", "model": "m"}
    message = {"id": "v", "type": "message", "model": "up", "content": [], "stop_reason": None}
    out = orjson.loads(
        anthropic_shape.render_completion(
            Completion(ANTHROPIC, message, "", "stop", Usage(), model="m"),
            request_id="r1",
            req=anthropic_shape.parse_request(
                {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
            ),
        )
    )
    assert out == {**message, "id": "msg_r1", "model": "m"}


def test_anthropic_stream_maps_the_message_id_and_ends_with_message_stop():
    renderer = anthropic_shape.StreamRenderer(request_id="r1", model="m")
    start = anthropic_shape.chunk_from_event(
        "message_start",
        {"type": "message_start", "message": {"id": "v", "model": "up", "usage": {}}},
    )
    out = (renderer.chunk(start) + renderer.finish("stop", Usage())).decode()
    assert out == (
        'event: message_start\ndata: {"type":"message_start","message":'
        '{"id":"msg_r1","model":"m","usage":{}}}\n\n'
        'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (InvalidRequest("bad"), "invalid_request_error"),
        (RequestRateLimited("slow down", retry_after_s=3), "rate_limit_error"),
        (BudgetExhausted(), "billing_error"),
    ],
)
def test_anthropic_refusals_take_its_error_shape_with_our_code(error, kind):
    assert orjson.loads(anthropic_shape.error_body(error)) == {
        "type": "error",
        "error": {"type": kind, "message": error.message, "code": error.code},
    }
