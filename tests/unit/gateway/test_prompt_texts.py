"""gateway/shapes/texts.py: every prompt text of each shape is walked in order, rewritten
where it changes, and the client's body is never changed."""

from __future__ import annotations

import copy

import pytest

from gateway.shapes.texts import rewrite_texts
from gateway.types import ANTHROPIC, EMBEDDINGS, MODERATIONS, OPENAI, RESPONSES

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}

CHAT = {
    "model": "gpt-4o-mini",
    "messages": [
        {"role": "system", "content": "sys a"},
        {"role": "user", "content": [{"type": "text", "text": "user b"}, IMAGE]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{c}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "tool d"},
    ],
    "tools": [{"type": "function", "function": {"name": "f", "description": "not a text"}}],
}
MESSAGES = {
    "model": "claude",
    "system": [{"type": "text", "text": "sys a"}],
    "messages": [
        {"role": "user", "content": "user b"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"q": "x"}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "tool c"},
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "content": [{"type": "text", "text": "d"}],
                },
                {"type": "text", "text": "user e"},
            ],
        },
    ],
}
RESPONSES_BODY = {
    "model": "gpt-4o-mini",
    "instructions": "sys a",
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "user b"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "c"}]},
        {"type": "function_call", "call_id": "x", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "x", "output": "tool d"},
        {"role": "user", "content": "user e"},
    ],
}


def seen_texts(shape: str, body: dict) -> list[str]:
    seen: list[str] = []

    def note(text: str) -> str:
        seen.append(text)
        return text

    assert rewrite_texts(shape, body, note) is body  # nothing changed: the same body
    return seen


@pytest.mark.parametrize(
    ("shape", "body", "texts"),
    [
        (OPENAI, CHAT, ["sys a", "user b", "{c}", "tool d"]),
        (ANTHROPIC, MESSAGES, ["sys a", "user b", "tool c", "d", "user e"]),
        (RESPONSES, RESPONSES_BODY, ["sys a", "user b", "c", "tool d", "user e"]),
        (EMBEDDINGS, {"model": "e", "input": ["one", "two"]}, ["one", "two"]),
        (EMBEDDINGS, {"model": "e", "input": "one"}, ["one"]),
        (EMBEDDINGS, {"model": "e", "input": [[1, 2, 3]]}, []),
        (MODERATIONS, {"model": "m", "input": "one"}, ["one"]),
        (MODERATIONS, {"model": "m", "input": ["one", "two"]}, ["one", "two"]),
        (
            MODERATIONS,
            {"model": "m", "input": [{"type": "text", "text": "one"}, {"type": "image_url"}]},
            ["one"],
        ),
        (RESPONSES, {"model": "m", "input": "just this"}, ["just this"]),
        (ANTHROPIC, {"model": "c", "system": "s", "messages": []}, ["s"]),
    ],
)
def test_each_shape_walks_its_prompt_texts_in_order(shape, body, texts):
    assert seen_texts(shape, body) == texts


@pytest.mark.parametrize("shape", [OPENAI, ANTHROPIC, RESPONSES])
def test_a_rewrite_changes_only_its_texts_and_never_the_clients_body(shape):
    body = {OPENAI: CHAT, ANTHROPIC: MESSAGES, RESPONSES: RESPONSES_BODY}[shape]
    before = copy.deepcopy(body)

    rewritten = rewrite_texts(shape, body, lambda text: text.replace("user", "[R]"))

    assert body == before
    assert seen_texts(shape, rewritten) == [
        text.replace("user", "[R]") for text in seen_texts(shape, before)
    ]
    # What holds no text is the client's own objects, untouched and not copied.
    if shape == OPENAI:
        assert rewritten["tools"] is body["tools"]
        assert rewritten["messages"][1]["content"][1] is IMAGE
        assert rewritten["messages"][0] is body["messages"][0]
    if shape == ANTHROPIC:
        assert rewritten["messages"][1] is body["messages"][1]
        assert rewritten["system"] is body["system"]


def test_an_unknown_shape_or_a_malformed_body_is_walked_as_far_as_it_holds_texts():
    assert rewrite_texts("web", {"url": "x"}, str.upper) == {"url": "x"}
    assert seen_texts(OPENAI, {"messages": "not a list"}) == []
    assert seen_texts(OPENAI, {"messages": [None, 3, {"content": 5}]}) == []
    assert rewrite_texts(EMBEDDINGS, {"input": ["a", 7]}, str.upper) == {"input": ["A", 7]}
    assert rewrite_texts(MODERATIONS, {"input": ["a", 7]}, str.upper) == {"input": ["A", 7]}
