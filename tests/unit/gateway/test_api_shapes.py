"""The embeddings and Responses API shapes: what a client body becomes, what the vendor is
sent, how its answers and events are read. Pure functions: no processes needed."""

from __future__ import annotations

import orjson
import pytest

from core.errors import InvalidRequest
from gateway.shapes import anthropic as anthropic_shape
from gateway.shapes import embeddings as embeddings_shape
from gateway.shapes import openai as openai_shape
from gateway.shapes import responses as responses_shape
from gateway.types import EMBEDDINGS, RESPONSES, Usage

PDF_DATA = "JVBERi0xLjQK" * 100  # 1,200 base64 characters: 900 bytes decoded


def test_an_embeddings_body_is_bounded_by_its_texts_and_token_arrays():
    req = embeddings_shape.parse_request(
        {"model": "e", "input": ["héllo", [1, 2, 3]], "dimensions": 4, "user": "u-1"}
    )

    assert (req.shape, req.embeds, req.stream, req.max_tokens) == (EMBEDDINGS, True, False, None)
    assert (req.prompt_bytes, req.prompt_parts) == (6 + 3, 2)  # UTF-8 bytes; one per token id
    assert req.caller_id == "u-1"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"input": []}, "'input' must be a string, a list of strings, a token array or a list"),
        ({"input": ["a", ""]}, "input[1] must be a non-empty string or a non-empty token array."),
        ({"input": [[1, -2]]}, "input[0] must be a non-empty string"),
        ({"input": "a", "dimensions": 0}, "'dimensions' must be a positive integer."),
        ({"input": "a", "encoding_format": "int8"}, "'encoding_format' must be 'float' or"),
        ({"input": ["a"] * 2049}, "'input' holds 2049 items; at most 2048."),
    ],
)
def test_a_malformed_embeddings_body_is_refused_naming_what_is_wrong(body, message):
    with pytest.raises(InvalidRequest, match=message.replace("[", r"\[").replace("]", r"\]")):
        embeddings_shape.parse_request({"model": "e", **body})


def test_the_embeddings_vendor_gets_the_body_with_only_owned_fields_set():
    body = {"model": "e", "input": "a", "user": "raw-id", "fallback_model": "f", "dimensions": 3}

    sent = orjson.loads(
        embeddings_shape.vendor_body(
            body, upstream_model="up", caller_label="lbl", max_tokens=0, stream=False
        )
    )

    assert sent == {"model": "up", "input": "a", "dimensions": 3, "user": "lbl"}


def test_a_responses_body_is_measured_over_instructions_items_tools_and_its_schema():
    body = {
        "model": "m,n",
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "input_image", "image_url": "https://example.com/a.png"},
            {"type": "input_file", "filename": "a.pdf", "file_data": PDF_DATA},
        ],
        "tools": [{"type": "function", "name": "f", "parameters": {}}],
        "max_output_tokens": 30,
        "stream": True,
        "safety_identifier": "alice",
    }

    req = responses_shape.parse_request(body)

    assert (req.shape, req.chain, req.max_tokens, req.stream) == (RESPONSES, ("m", "n"), 30, True)
    assert (req.media, req.prompt_parts, req.caller_id) == (2, 3 + 1 + 1, "alice")
    # The text, the tool's schema with its keys, the PDF at its decoded size.
    assert req.prompt_bytes >= len("Be brief.hi") + 900
    assert req.prompt_bytes < len("Be brief.hi") + 900 + 120


@pytest.mark.parametrize(
    ("body", "surcharged"),
    [
        ({}, None),
        ({"tools": [{"type": "function", "name": "f"}, {"type": "web_search"}]}, "tools[1]"),
        ({"service_tier": "flex"}, "service_tier"),
    ],
)
def test_responses_fields_billed_beyond_tokens_are_named(body, surcharged):
    assert responses_shape.parse_request({"model": "m", "input": "x", **body}).surcharged == (
        surcharged
    )


@pytest.mark.parametrize(
    "part",
    [
        {"type": "input_file", "file_id": "file-abc"},
        {"type": "input_image", "file_id": "file-abc"},
    ],
)
def test_a_part_naming_a_vendor_file_is_refused_in_every_shape(part):
    with pytest.raises(InvalidRequest, match="names a vendor file"):
        responses_shape.parse_request(
            {"model": "m", "input": [{"role": "user", "content": [part]}]}
        )
    with pytest.raises(InvalidRequest, match="A file part names a vendor file"):
        openai_shape.parse_request(
            {
                "model": "m",
                "messages": [
                    {"role": "user", "content": [{"type": "file", "file": {"file_id": "f-1"}}]}
                ],
            }
        )
    with pytest.raises(InvalidRequest, match="A document part names a vendor file"):
        anthropic_shape.parse_request(
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "document", "source": {"type": "file", "file_id": "f-1"}}
                        ],
                    }
                ],
            }
        )


def test_the_native_vendor_gets_store_false_the_cap_and_the_label():
    body = {
        "model": "m",
        "input": "x",
        "store": False,
        "user": "raw",
        "safety_identifier": "raw",
        "max_output_tokens": 9,
        "reasoning": {"effort": "low"},
    }

    sent = orjson.loads(
        responses_shape.vendor_body(
            body, upstream_model="up", caller_label="lbl", max_tokens=9, stream=True
        )
    )

    assert sent == {
        "model": "up",
        "input": "x",
        "max_output_tokens": 9,
        "store": False,
        "reasoning": {"effort": "low"},
        "safety_identifier": "lbl",
        "stream": True,
    }


def test_native_events_say_what_they_generate_and_how_the_answer_ended():
    delta = responses_shape.chunk_from_vendor(
        {"type": "response.output_text.delta", "delta": "Hi", "sequence_number": 4}
    )
    added = responses_shape.chunk_from_vendor({"type": "response.output_item.added"})
    done = responses_shape.chunk_from_vendor(
        {
            "type": "response.incomplete",
            "response": {
                "status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"},
                "output": [],
                "usage": {
                    "input_tokens": 7,
                    "input_tokens_details": {"cached_tokens": 2},
                    "output_tokens": 3,
                    "output_tokens_details": {"reasoning_tokens": 1},
                },
            },
        }
    )

    assert (delta.text, delta.generated, delta.finish_reason) == ("Hi", True, None)
    assert (added.generated, added.finish_reason) == (False, None)
    assert done.finish_reason == "length"
    assert done.usage == Usage(7, 3, cache_read_tokens=2, reasoning_tokens=1)


def test_native_stream_events_name_our_response_id_and_model():
    renderer = responses_shape.StreamRenderer(request_id="r1", model="m", request={})
    event = {
        "type": "response.created",
        "sequence_number": 0,
        "response": {"id": "resp_vendor", "model": "up", "status": "in_progress"},
    }

    out = renderer.chunk(responses_shape.chunk_from_vendor(event))

    assert out == (
        b"event: response.created\ndata: "
        + orjson.dumps({**event, "response": {**event["response"], "id": "resp_r1", "model": "m"}})
        + b"\n\n"
    )
    error = renderer.error(InvalidRequest("bad"))
    assert orjson.loads(error.split(b"data: ", 1)[1]) == {
        "type": "error",
        "sequence_number": 1,
        "code": "LM-2001",
        "message": "bad",
        "param": None,
        "error": {"message": "bad", "type": "invalid_request_error", "code": "LM-2001"},
    }
