"""The moderations shape: what a client body becomes, what the vendor is sent, how its answer
is read and rendered. Pure functions: no processes needed."""

from __future__ import annotations

import orjson
import pytest

from core.errors import InvalidRequest
from gateway.plan import kind_mismatch_message
from gateway.shapes import moderations as shape
from gateway.types import MODERATIONS, Completion, Usage

VERDICT = {"flagged": False, "categories": {"hate": False}, "category_scores": {"hate": 0.1}}


def test_a_moderations_body_is_bounded_by_its_texts_and_never_streams():
    req = shape.parse_request({"model": "m,n", "input": ["héllo", "two words"], "user": "u-1"})

    assert (req.shape, req.moderates, req.embeds, req.outputs) == (MODERATIONS, True, False, False)
    assert (req.model, req.chain, req.stream, req.max_tokens) == ("m", ("m", "n"), False, None)
    assert (req.prompt_bytes, req.prompt_parts) == (6 + 9, 2)  # UTF-8 bytes
    assert req.caller_id == "u-1"


def test_text_items_are_measured_by_their_text():
    items = [{"type": "text", "text": "abc"}, {"type": "text", "text": "de"}]
    req = shape.parse_request({"model": "m", "input": items})

    assert (req.prompt_bytes, req.prompt_parts, req.unknown) == (5, 2, ())


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ([], "'input' must be a string, a list of strings or a list of text items."),
        (None, "'input' must be a string, a list of strings or a list of text items."),
        (["a", ""], "input[1] must be a non-empty string."),
        (["a", 7], "'input' must be a string, a list of strings or a list of text items."),
        (
            [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "u"}}],
            "input[1] is an image: Tollgate's moderations take text items only.",
        ),
        ([{"type": "text", "text": ""}], "input[0] must be a text item with a non-empty 'text'."),
        (["a"] * 2049, "'input' holds 2049 items; at most 2048."),
    ],
)
def test_a_malformed_input_is_refused_naming_what_is_wrong(given, message):
    with pytest.raises(InvalidRequest) as refused:
        shape.parse_request({"model": "m", "input": given})

    assert refused.value.message == message


def test_the_vendor_gets_the_body_without_owned_fields_and_no_end_user():
    body = {"model": "m", "input": "a", "user": "raw-id", "fallback_model": "f", "extra": 1}

    sent = orjson.loads(
        shape.vendor_body(body, upstream_model="up", caller_label="lbl", max_tokens=0, stream=False)
    )

    assert sent == {"model": "up", "input": "a", "extra": 1}


@pytest.mark.parametrize(
    ("usage", "tokens"),
    [
        (None, 0),  # OpenAI's own answer: free, no usage
        ({"prompt_tokens": 7, "total_tokens": 7}, 7),
        ({"input_tokens": 4}, 4),
    ],
)
def test_the_answer_is_billed_by_the_usage_the_vendor_reports(usage, tokens):
    data = {"id": "modr-1", "model": "up", "results": [VERDICT]}
    if usage is not None:
        data["usage"] = usage

    c = shape.completion_from_vendor(data, model="m")

    assert c == Completion(
        shape=MODERATIONS,
        data=data,
        text="",
        finish_reason="stop",
        usage=Usage(input_tokens=tokens),
        model="m",
    )


def test_the_answer_is_the_vendors_with_only_the_model_mapped():
    data = {"id": "modr-1", "model": "up", "results": [VERDICT]}
    c = shape.completion_from_vendor(data, model="m")
    req = shape.parse_request({"model": "m", "input": "x"})

    rendered = orjson.loads(shape.render_completion(c, request_id="r", req=req))

    assert rendered == {"id": "modr-1", "model": "m", "results": [VERDICT]}
    with pytest.raises(ValueError, match="never streamed"):
        shape.stream_renderer(req, request_id="r", model="m")


@pytest.mark.parametrize(
    ("asked", "found", "message"),
    [
        ("moderation", "chat", "Model 'x' is not a moderation model."),
        ("moderation", "embedding", "Model 'x' is not a moderation model."),
        ("embedding", "moderation", "Model 'x' is not an embedding model."),
        ("chat", "moderation", "Model 'x' is a moderation model: ask POST /v1/moderations."),
        ("chat", "embedding", "Model 'x' is an embedding model: ask POST /v1/embeddings."),
    ],
)
def test_a_model_of_another_kind_is_refused_saying_where_it_is_served(asked, found, message):
    assert kind_mismatch_message("x", asked=asked, found=found) == message
