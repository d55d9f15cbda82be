"""How many prompt tokens a call counts, and which of them its prompt cache holds.

The rules (part of the stub's contract, stubvendor/server.py):

Prompt tokens
-------------
* Words (``str.split()``) over every text: OpenAI ``messages[].content``
  (tool results, role ``tool``, included); Anthropic ``system`` plus
  ``messages[].content``.  A content/system value is a string or a list of
  parts/blocks: ``text`` parts count their words; an Anthropic
  ``tool_result`` block counts its ``content`` the same way (string, or text /
  image / document blocks); other parts (tool_use, thinking, input_audio, ...)
  count 0.
* Each OpenAI ``image_url`` part and Anthropic ``image`` block: +85.  Each
  OpenAI ``file`` part and Anthropic ``document`` block: +100.
* Each entry of ``tools``: +10.
* Minimum 1.  This total (P) is what OpenAI reports as ``prompt_tokens``
  (cached tokens included) and what Anthropic splits into ``input_tokens`` +
  ``cache_creation_input_tokens`` + ``cache_read_input_tokens``.

Prompt caching
--------------
* Anthropic (explicit): a ``cache_control`` key (not null) on an entry of
  ``tools``, a ``system`` block or a top-level ``messages[].content`` block
  marks a prefix: everything in the order tools -> system -> messages up to and
  including the LAST marked block.  Its key is (model, canonical JSON of that
  prefix with those blocks' ``cache_control`` removed; a message block carries
  its message's index and role).  First time: ``cache_creation_input_tokens``
  = the prefix's prompt tokens, and the key is remembered; later:
  ``cache_read_input_tokens`` = those tokens.  ``input_tokens`` = P minus the
  prefix's tokens.  No marked block: both fields 0, ``input_tokens`` = P.
* OpenAI (automatic): for every k >= 1 with k < len(messages), if the first k
  messages are the same (canonical JSON) as the first k messages of an earlier
  call to the same model and carry >= 64 prompt tokens (tools not counted),
  ``prompt_tokens_details.cached_tokens`` = the prompt tokens of the longest
  such prefix, else 0.  Every call's prefixes (k = 1..len, the whole list
  included) are remembered.
* The caches belong to the app (one per stub process); ``DELETE /_stub/calls``
  clears them.  A call answered by a status fault or ``hang``, or refused with
  400/401, neither reads nor writes them (a call dropped by ``fail_*`` does).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, NamedTuple

from stubvendor.state import StubState
from stubvendor.wire import _as_list, _canonical

# Token accounting (see the module docstring).
IMAGE_TOKENS = 85
DOCUMENT_TOKENS = 100
TOOL_DEFINITION_TOKENS = 10


OPENAI_CACHE_MIN_TOKENS = 64


# Per content dialect ("responses": the Responses API's input parts): the part types
# whose ``text`` counts its words, and the part types with a fixed count.
_TEXT_PART_TYPES = {
    "openai": frozenset({"text"}),
    "anthropic": frozenset({"text"}),
    "responses": frozenset({"input_text", "output_text"}),
}
_FIXED_PART_TOKENS = {
    "openai": {"image_url": IMAGE_TOKENS, "file": DOCUMENT_TOKENS},
    "anthropic": {"image": IMAGE_TOKENS, "document": DOCUMENT_TOKENS},
    "responses": {"input_image": IMAGE_TOKENS, "input_file": DOCUMENT_TOKENS},
}


def _words(text: Any) -> int:
    return len(text.split()) if isinstance(text, str) else 0


def _part_tokens(part: Any, shape: str) -> int:
    """Tokens of one content part / block: text words, a fixed count for media, else 0."""
    if not isinstance(part, dict):
        return 0
    kind = part.get("type")
    if kind in _TEXT_PART_TYPES[shape]:
        return _words(part.get("text"))
    if shape == "anthropic" and kind == "tool_result":
        return _content_tokens(part.get("content"), shape)
    return _FIXED_PART_TOKENS[shape].get(kind, 0) if isinstance(kind, str) else 0


def _content_tokens(content: Any, shape: str) -> int:
    """Tokens of a content value: a string (its words) or a list of parts."""
    if isinstance(content, str):
        return _words(content)
    return sum(_part_tokens(part, shape) for part in _as_list(content))


def _message_tokens(message: Any, shape: str) -> int:
    return _content_tokens(message.get("content"), shape) if isinstance(message, dict) else 0


class _Unit(NamedTuple):
    """One piece of an Anthropic prompt, in cache-prefix order (tools, system, messages)."""

    item: Any  # what identifies it in a cache key (cache_control removed)
    tokens: int
    marked: bool  # carries cache_control


def _without_cache_control(block: Any) -> Any:
    if not isinstance(block, dict):
        return block
    return {k: v for k, v in block.items() if k != "cache_control"}


def _marked(block: Any) -> bool:
    return isinstance(block, dict) and block.get("cache_control") is not None


def _anthropic_units(body: dict[str, Any]) -> list[_Unit]:
    units = [
        _Unit({"tool": _without_cache_control(t)}, TOOL_DEFINITION_TOKENS, _marked(t))
        for t in _as_list(body.get("tools"))
    ]
    system = body.get("system")
    if isinstance(system, str):
        units.append(_Unit({"system": system}, _words(system), False))
    for block in _as_list(system):
        units.append(
            _Unit(
                {"system": _without_cache_control(block)},
                _part_tokens(block, "anthropic"),
                _marked(block),
            )
        )
    for i, message in enumerate(_as_list(body.get("messages"))):
        if not isinstance(message, dict):
            continue
        role, content = message.get("role"), message.get("content")
        if not isinstance(content, list):
            units.append(
                _Unit({"message": i, "role": role, "content": content}, _words(content), False)
            )
            continue
        for block in content:
            item = {"message": i, "role": role, "block": _without_cache_control(block)}
            units.append(_Unit(item, _part_tokens(block, "anthropic"), _marked(block)))
    return units


def count_prompt_tokens(body: dict[str, Any], shape: str) -> int:
    """Count the request's prompt tokens (cached ones included; minimum 1).

    Words over every text (message contents, Anthropic ``system``, tool
    results), plus fixed counts for images, documents and tool definitions.
    """
    if shape == "anthropic":
        return max(sum(unit.tokens for unit in _anthropic_units(body)), 1)
    messages = sum(_message_tokens(m, shape) for m in _as_list(body.get("messages")))
    tools = TOOL_DEFINITION_TOKENS * len(_as_list(body.get("tools")))
    return max(messages + tools, 1)


@dataclass(frozen=True)
class PromptUsage:
    """A call's prompt tokens: ``total`` includes every cached token."""

    total: int
    cached: int = 0  # OpenAI prompt_tokens_details.cached_tokens
    cache_creation: int = 0  # Anthropic cache_creation_input_tokens
    cache_read: int = 0  # Anthropic cache_read_input_tokens


def cached_prefix_tokens(
    seen: set[tuple[str, bytes]], model: str, items: list[Any], tokens: list[int]
) -> int:
    """OpenAI's automatic caching over ``items`` (each with its ``tokens``).

    Return the tokens of the longest proper prefix of >= 64 tokens that ``seen``
    holds for ``model``, else 0; then remember every prefix in ``seen``.
    """
    cached = running = 0
    digest = b""
    keys = []
    for k, (item, item_tokens) in enumerate(zip(items, tokens, strict=True), 1):
        running += item_tokens
        digest = hashlib.sha256(digest + _canonical(item)).digest()
        key = (model, digest)
        if k < len(items) and running >= OPENAI_CACHE_MIN_TOKENS and key in seen:
            cached = running
        keys.append(key)
    seen.update(keys)
    return cached


def _openai_prompt(state: StubState, model: str, body: dict[str, Any]) -> PromptUsage:
    """Automatic caching: the longest earlier-seen proper message prefix of >= 64 tokens."""
    messages = _as_list(body.get("messages"))
    tokens = [_message_tokens(m, "openai") for m in messages]
    cached = cached_prefix_tokens(state.openai_prefixes, model, messages, tokens)
    return PromptUsage(count_prompt_tokens(body, "openai"), cached=cached)


def _anthropic_prompt(state: StubState, model: str, body: dict[str, Any]) -> PromptUsage:
    """Explicit caching: the prefix up to the last block carrying ``cache_control``."""
    units = _anthropic_units(body)
    total = max(sum(unit.tokens for unit in units), 1)
    marks = [i for i, unit in enumerate(units) if unit.marked]
    if not marks:
        return PromptUsage(total)
    prefix = units[: marks[-1] + 1]
    tokens = sum(unit.tokens for unit in prefix)
    key = (model, hashlib.sha256(_canonical([unit.item for unit in prefix])).digest())
    if key in state.anthropic_prefixes:
        return PromptUsage(total, cache_read=tokens)
    state.anthropic_prefixes.add(key)
    return PromptUsage(total, cache_creation=tokens)
