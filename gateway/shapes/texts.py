"""The texts a client's request carries to the vendor, by shape: what an input guardrail
scans, and rewrites when it redacts.

One walk, `rewrite_texts(shape, body, rewrite)`: every prompt text passes through `rewrite`
in a fixed order, and the body comes back copied along the path of each text that changed
(the client's dict is never changed; a body with nothing changed is the same object).
Scanning alone is the same walk with a `rewrite` that returns its argument.

Texts, per shape (anything else, such as images, tool definitions and ids, is not prompt
text and is left as it is):
- OpenAI chat: each message's `content` (a string, or its `text` parts) and each tool
  call's `function.arguments`.
- Anthropic messages: `system` (a string, or its text blocks); each message's `content` (a
  string, or its text blocks, and each `tool_result` block's content, string or text blocks).
- Responses: `instructions`; `input` (a string, or its items: a message's `content`, a
  string or its `input_text` / `output_text` parts, and a `function_call_output`'s `output`).
- Embeddings: `input` (a string or a list of strings; token arrays are not text).
- Moderations: `input` (a string, a list of strings, or the `text` of its text items).

An answer's texts, what an output guardrail scans (`rewrite_answer_texts` on a vendor's whole
answer, in the shape the adapter read it in): OpenAI chat, each choice's `message.content`;
Anthropic, each `text` block; Responses, each message item's `output_text` parts. Tool-call
arguments and thinking are not answer text. `answer_text` reads the answer's text the way
each shape's `completion_from_vendor` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.types import ANTHROPIC, EMBEDDINGS, MODERATIONS, OPENAI, RESPONSES

Rewrite = Callable[[str], str]
TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


def rewrite_texts(shape: str, body: dict[str, Any], rewrite: Rewrite) -> dict[str, Any]:
    """Return `body` with each prompt text of its shape passed through `rewrite`."""
    walk = WALKS.get(shape)
    return body if walk is None else walk(body, rewrite)


def _field(container: dict, name: str, new: Any) -> dict:
    """`container` with `name` set to `new`: a copy when it changes, else itself."""
    if container.get(name) is new:
        return container
    return {**container, name: new}


def _items(items: list, rewrite_item: Callable[[Any], Any]) -> list:
    """`items` with each rewritten: a copy when one changes, else itself."""
    changed = None
    for index, item in enumerate(items):
        new = rewrite_item(item)
        if new is not item:
            if changed is None:
                changed = list(items)
            changed[index] = new
    return items if changed is None else changed


def _string(value: Any, rewrite: Rewrite) -> Any:
    if isinstance(value, str):
        new = rewrite(value)
        return value if new == value else new
    return value


def _content(value: Any, rewrite: Rewrite) -> Any:
    """A string, or a list of parts whose text parts are texts."""
    if isinstance(value, str):
        return _string(value, rewrite)
    if isinstance(value, list):
        return _items(value, lambda part: _part(part, rewrite))
    return value


def _part(part: Any, rewrite: Rewrite) -> Any:
    if isinstance(part, dict) and part.get("type") in TEXT_PARTS:
        return _field(part, "text", _string(part.get("text"), rewrite))
    return part


def _openai(body: dict, rewrite: Rewrite) -> dict:
    def message(m: Any) -> Any:
        if not isinstance(m, dict):
            return m
        m = _field(m, "content", _content(m.get("content"), rewrite))
        calls = m.get("tool_calls")
        if isinstance(calls, list):
            m = _field(m, "tool_calls", _items(calls, tool_call))
        return m

    def tool_call(call: Any) -> Any:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            return call
        arguments = _string(function.get("arguments"), rewrite)
        return _field(call, "function", _field(function, "arguments", arguments))

    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    return _field(body, "messages", _items(messages, message))


def _anthropic(body: dict, rewrite: Rewrite) -> dict:
    def block(b: Any) -> Any:
        if isinstance(b, dict) and b.get("type") == "tool_result":
            return _field(b, "content", _content(b.get("content"), rewrite))
        return _part(b, rewrite)

    def message(m: Any) -> Any:
        if not isinstance(m, dict):
            return m
        content = m.get("content")
        if isinstance(content, list):
            return _field(m, "content", _items(content, block))
        return _field(m, "content", _string(content, rewrite))

    body = _field(body, "system", _content(body.get("system"), rewrite))
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    return _field(body, "messages", _items(messages, message))


def _responses(body: dict, rewrite: Rewrite) -> dict:
    def item(i: Any) -> Any:
        if not isinstance(i, dict):
            return i
        if i.get("type") == "function_call_output":
            return _field(i, "output", _string(i.get("output"), rewrite))
        if "content" in i:
            return _field(i, "content", _content(i.get("content"), rewrite))
        return i

    body = _field(body, "instructions", _string(body.get("instructions"), rewrite))
    given = body.get("input")
    if isinstance(given, list):
        return _field(body, "input", _items(given, item))
    return _field(body, "input", _string(given, rewrite))


def _embeddings(body: dict, rewrite: Rewrite) -> dict:
    given = body.get("input")
    if isinstance(given, list):
        return _field(body, "input", _items(given, lambda text: _string(text, rewrite)))
    return _field(body, "input", _string(given, rewrite))


def _moderations(body: dict, rewrite: Rewrite) -> dict:
    def item(i: Any) -> Any:  # a string, or a text item
        return _string(i, rewrite) if isinstance(i, str) else _part(i, rewrite)

    given = body.get("input")
    if isinstance(given, list):
        return _field(body, "input", _items(given, item))
    return _field(body, "input", _string(given, rewrite))


WALKS: dict[str, Callable[[dict, Rewrite], dict]] = {
    OPENAI: _openai,
    ANTHROPIC: _anthropic,
    RESPONSES: _responses,
    EMBEDDINGS: _embeddings,
    MODERATIONS: _moderations,
}


def rewrite_answer_texts(shape: str, data: dict[str, Any], rewrite: Rewrite) -> dict[str, Any]:
    """Return a vendor's whole answer with each answer text passed through `rewrite`."""
    walk = ANSWER_WALKS.get(shape)
    return data if walk is None else walk(data, rewrite)


def answer_text(shape: str, data: dict[str, Any]) -> str:
    """Return the answer's text as Completion.text holds it, for a rewritten answer."""
    texts: list[str] = []

    def keep(text: str) -> str:
        texts.append(text)
        return text

    if shape == OPENAI:  # the first choice's only
        choices = data.get("choices") or [{}]
        return ((choices[0] or {}).get("message") or {}).get("content") or ""
    rewrite_answer_texts(shape, data, keep)
    return "".join(texts)


def _openai_answer(data: dict, rewrite: Rewrite) -> dict:
    def choice(c: Any) -> Any:
        message = c.get("message") if isinstance(c, dict) else None
        if not isinstance(message, dict):
            return c
        return _field(
            c, "message", _field(message, "content", _content(message.get("content"), rewrite))
        )

    choices = data.get("choices")
    if not isinstance(choices, list):
        return data
    return _field(data, "choices", _items(choices, choice))


def _anthropic_answer(data: dict, rewrite: Rewrite) -> dict:
    content = data.get("content")
    if not isinstance(content, list):
        return data
    return _field(data, "content", _items(content, lambda block: _part(block, rewrite)))


def _responses_answer(data: dict, rewrite: Rewrite) -> dict:
    def item(i: Any) -> Any:
        if not isinstance(i, dict) or i.get("type") != "message":
            return i
        return _field(i, "content", _content(i.get("content"), rewrite))

    output = data.get("output")
    if not isinstance(output, list):
        return data
    return _field(data, "output", _items(output, item))


ANSWER_WALKS: dict[str, Callable[[dict, Rewrite], dict]] = {
    OPENAI: _openai_answer,
    ANTHROPIC: _anthropic_answer,
    RESPONSES: _responses_answer,
}
