"""Validation helpers both client shapes share."""

from __future__ import annotations

from typing import Any

from core.errors import InvalidRequest

TEXT_PART_FIELDS = frozenset({"type", "text"})
# Set by Tollgate on every vendor call, in either shape: the model mapped, the output cap
# the hold assumed, the caller label instead of the end user's id, usage on streams. Never
# forwarded from the client's body, nor translated.
OPENAI_OWNED = frozenset(
    {
        "model",
        "max_tokens",
        "max_completion_tokens",
        "user",
        "safety_identifier",
        "stream",
        "stream_options",
        "fallback_model",
    }
)
ANTHROPIC_OWNED = frozenset({"model", "max_tokens", "metadata", "stream", "fallback_model"})
# The Responses API's: `store` too, always false (Tollgate keeps no responses).
RESPONSES_OWNED = frozenset(
    {
        "model",
        "max_output_tokens",
        "stream",
        "user",
        "safety_identifier",
        "store",
        "fallback_model",
    }
)
# Responses API fields that ask for state kept at the vendor: Tollgate keeps none, so each is
# refused (gateway/shapes/responses.py) before a body is forwarded or translated.
RESPONSES_STATEFUL = ("store", "background", "previous_response_id", "conversation", "prompt")
# Content parts whose cost is not their bytes: an image is a fixed-ish number of tokens
# whatever its encoding; a document is bounded by its decoded bytes.
IMAGE_PARTS = frozenset({"image_url", "image", "input_image"})
DOCUMENT_PARTS = frozenset({"document", "file", "input_file"})
# A message's structure, not its text: covered by the per-message allowance.
STRUCTURE_KEYS = frozenset({"role", "type", "cache_control"})


def text_of(content: Any, *, where: str) -> str:
    """Return the text of a message content (a string, or a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise InvalidRequest(f"{where}: content part type {kind!r} is not supported.")
            refuse_unknown(part, TEXT_PART_FIELDS, where=f"{where}: ")
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidRequest(f"{where}: a text part needs a string 'text'.")
            texts.append(text)
        return "".join(texts)
    raise InvalidRequest(f"{where}: content must be a string or a list of text parts.")


def optional_number(body: dict, name: str, *, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise InvalidRequest(f"'{name}' must be a number from {low} to {high}.")
    return float(value)


def optional_max_tokens(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidRequest(f"'{name}' must be a positive integer.")
    return value


def refuse_unknown(body: dict, allowed: frozenset[str], *, where: str = "") -> None:
    """Refuse fields we cannot honour on every vendor: never drop one silently."""
    for name, value in body.items():
        if name not in allowed and value not in (None, [], {}):
            raise InvalidRequest(f"{where}'{name}' is not supported by Tollgate.")


def split_tags(body: dict) -> tuple[dict, tuple[str, ...]]:
    """Return the body without `metadata.tags`, and the tags it carried, unchecked (the
    rules are core/tags.py's, applied with the header's: gateway/tags.py).

    `metadata.tags` is Tollgate's: a comma-separated string (OpenAI's `metadata` values are
    strings) or a list of strings (LiteLLM's clients send one). It never reaches a vendor: a
    `metadata` left empty goes too. The client's dict is not changed.
    """
    metadata = body.get("metadata")
    if not isinstance(metadata, dict) or "tags" not in metadata:
        return body, ()
    raw = metadata["tags"]
    if isinstance(raw, str):
        tags = tuple(item for item in raw.split(",") if item.strip())
    elif isinstance(raw, list) and all(isinstance(item, str) for item in raw):
        tags = tuple(raw)
    elif raw is None:
        tags = ()
    else:
        raise InvalidRequest(
            "'metadata.tags' must be a comma-separated string or a list of strings."
        )
    rest = {name: value for name, value in metadata.items() if name != "tags"}
    body = {name: value for name, value in body.items() if name != "metadata"}
    if rest:
        body["metadata"] = rest
    return body, tags


def unknown_fields(body: dict, known: frozenset[str]) -> tuple[str, ...]:
    """Return the top-level fields neither owned nor known (forwarded only on passthrough)."""
    return tuple(name for name in body if name not in known)


def checked_messages(body: dict, *, roles: frozenset[str]) -> list[dict]:
    """Return the body's messages: a non-empty list of objects with a known role."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty list.")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequest(f"messages[{index}] must be an object.")
        if message.get("role") not in roles:
            raise InvalidRequest(
                f"messages[{index}]: unknown role {message.get('role')!r} "
                f"(one of {', '.join(sorted(roles))})."
            )
    return messages


def checked_bool(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequest(f"'{name}' must be a boolean.")
    return value


def checked_string(value: Any, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidRequest(f"'{name}' must be a string.")
    return value or None


class PromptMeasure:
    """Bytes of every text a prompt carries, and its images and documents.

    A BPE token covers at least one byte, so text bytes bound text tokens; an image counts
    a fixed bound instead of its bytes (its URL is short, its base64 long, its tokens
    neither); a document counts its decoded bytes. Messages count their texts (a role or a
    part's type is the per-message allowance of prompt_tokens_bound); schemas (tools, a
    response format) count their keys too, as the vendor reads them as text.

    A part naming a file kept at the vendor (`file_id`, of its Files API) is refused: Tollgate
    serves no Files API, so the id could only name a file of the serving key's own account
    (the platform's, on a platform key), and its size is unknown to the hold.
    """

    __slots__ = ("bytes", "media")

    def __init__(self) -> None:
        self.bytes = 0
        self.media = 0

    def add(self, value: Any, *, keys: bool = False) -> None:
        if isinstance(value, str):
            self.bytes += len(value.encode())
        elif isinstance(value, dict):
            kind = value.get("type")
            if (kind in IMAGE_PARTS or kind in DOCUMENT_PARTS) and _names_vendor_file(value):
                raise InvalidRequest(
                    f"A {kind} part names a vendor file ('file_id'): Tollgate keeps no files. "
                    "Send the file's data instead."
                )
            if kind in IMAGE_PARTS:
                self.media += 1
                return
            if kind in DOCUMENT_PARTS:
                self.media += 1
                self.bytes += _decoded_bytes(value)
                return
            for key, item in value.items():
                if keys:
                    self.bytes += len(key)
                elif key in STRUCTURE_KEYS:
                    continue
                self.add(item, keys=keys)
        elif isinstance(value, list):
            for item in value:
                self.add(item, keys=keys)
        elif value is not None and not isinstance(value, bool):
            self.bytes += 8  # a number: a token or two


def prompt_parts(messages: list, tools: Any) -> int:
    """Count the prompt's pieces that each cost a few tokens beyond their text: its turns
    and its tool definitions."""
    return len(messages) + (len(tools) if isinstance(tools, list) else 0)


def _names_vendor_file(part: dict) -> bool:
    """Say whether a part names a file kept at the vendor instead of carrying its data."""
    return any(
        isinstance(holder, dict) and holder.get("file_id") is not None
        for holder in (part, part.get("file"), part.get("source"))
    )


def _decoded_bytes(part: dict) -> int:
    """Return the decoded size of a document part's data (base64: 3 bytes per 4)."""
    source = part.get("source") or part.get("file") or part
    if not isinstance(source, dict):
        return 0
    data = source.get("data") or source.get("file_data") or ""
    return len(data) * 3 // 4 if isinstance(data, str) else 0


def model_chain(model: Any, fallback: Any) -> tuple[str, ...]:
    """Return the client's chain: `"a,b"` in order, then the fallback model(s), each named
    once (how long a chain may be is the plan's rule: gateway/plan.py)."""
    if not isinstance(model, str) or not model.strip():
        raise InvalidRequest("'model' is required.")
    chain = [name.strip() for name in model.split(",") if name.strip()]
    if fallback:
        if not isinstance(fallback, str):
            raise InvalidRequest("The fallback model must be a string.")
        chain.extend(name.strip() for name in fallback.split(",") if name.strip())
    if not chain:
        raise InvalidRequest("'model' is required.")
    return tuple(dict.fromkeys(chain))
