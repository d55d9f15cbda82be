"""`metadata.tags` in a body (gateway/shapes/common.py split_tags): read into the ModelRequest,
taken out of the body the vendor is sent."""

from __future__ import annotations

import pytest

from core.errors import InvalidRequest
from gateway.shapes import anthropic, embeddings, internal, openai, responses
from gateway.shapes.common import split_tags

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_a_comma_separated_string_is_split_and_blank_items_dropped():
    body, tags = split_tags({**CHAT, "metadata": {"tags": "a, b,,c"}})
    assert tags == ("a", " b", "c")  # the rules (trim, lower-case) are core/tags.py's
    assert "metadata" not in body


def test_a_list_of_strings_is_taken_as_it_is():
    assert split_tags({"metadata": {"tags": ["x", "y"]}})[1] == ("x", "y")


def test_other_metadata_stays_and_the_clients_dict_is_not_changed():
    sent = {**CHAT, "metadata": {"tags": "a", "trace": "t1"}}
    body, tags = split_tags(sent)
    assert body["metadata"] == {"trace": "t1"}
    assert sent["metadata"] == {"tags": "a", "trace": "t1"}
    assert tags == ("a",)


def test_no_metadata_or_no_tags_is_the_same_body():
    body = {**CHAT, "metadata": {"trace": "t1"}}
    assert split_tags(body) == (body, ())
    assert split_tags(CHAT) == (CHAT, ())


@pytest.mark.parametrize("bad", [3, {"a": 1}, ["a", 2], True])
def test_tags_of_another_type_are_refused(bad):
    with pytest.raises(InvalidRequest, match="'metadata.tags' must be"):
        split_tags({"metadata": {"tags": bad}})


def test_every_client_shape_reads_them_and_leaves_them_out_of_the_body():
    chat = openai.parse_request({**CHAT, "metadata": {"tags": "a,b", "k": "v"}})
    assert chat.tags == ("a", "b") and chat.body["metadata"] == {"k": "v"}
    messages = anthropic.parse_request(
        {**CHAT, "max_tokens": 5, "metadata": {"tags": ["a"], "user_id": "u1"}}
    )
    assert messages.tags == ("a",) and messages.body["metadata"] == {"user_id": "u1"}
    assert messages.caller_id == "u1"
    resp = responses.parse_request({"model": "m", "input": "hi", "metadata": {"tags": "a"}})
    assert resp.tags == ("a",) and "metadata" not in resp.body
    emb = embeddings.parse_request({"model": "m", "input": "hi", "metadata": {"tags": "a"}})
    assert emb.tags == ("a",) and "metadata" not in emb.body


def test_anthropic_still_refuses_other_metadata():
    with pytest.raises(InvalidRequest, match="'other' is not supported"):
        anthropic.parse_request({**CHAT, "max_tokens": 5, "metadata": {"tags": "a", "other": 1}})


def test_the_internal_routes_take_metadata_with_tags_only():
    req = internal.parse_request(
        {**CHAT, "group": 1, "request_id": "r1", "metadata": {"tags": "a"}}, stream=True
    )
    assert req.tags == ("a",) and req.stream and "metadata" not in req.body
    with pytest.raises(InvalidRequest, match="'metadata' is not supported"):
        internal.parse_request({**CHAT, "metadata": {"tags": "a", "k": "v"}})


def test_the_vendor_body_never_carries_them():
    req = openai.parse_request({**CHAT, "metadata": {"tags": "secret-tag"}})
    sent = openai.vendor_body(
        req.body, upstream_model="m", max_tokens=5, caller_label=None, stream=False
    )
    assert b"secret-tag" not in sent and b"metadata" not in sent
