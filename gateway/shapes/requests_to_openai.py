"""Translate an Anthropic messages request body into an OpenAI chat-completions body, under
the rules of gateway/shapes/fields.py.

- A documented exception: Anthropic `cache_control` (top level, on any block, on a tool) is
  dropped on the way to OpenAI-shaped vendors. Those cache prompt prefixes on their own; the
  hint changes cost, never the answer.
- The raw end-user id (`metadata.user_id`) never reaches a translated body.

What a round trip normalises (and nothing else): tool-call inputs are serialised compactly
(`{"a":1}`); assistant `content: ""` beside tool calls comes back as None; a document without
a title is the file `document.pdf`. (The other direction: requests_to_anthropic.py.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.shapes.common import ANTHROPIC_OWNED
from gateway.shapes.fields import (
    PDF,
    TEXT_PART,
    FieldTranslator,
    as_dict,
    as_list,
    as_text,
    compact_json,
    is_neutral,
    malformed,
    refuse_rest,
    renamed,
    text_block,
    text_content,
    untranslatable,
)

# ---------------------------------------------------------------- requests: Anthropic -> OpenAI

CACHE_HINT = "cache_control"  # dropped on the way to OpenAI: see the module docstring
TEXT_BLOCK = TEXT_PART | {CACHE_HINT}  # an Anthropic text block, as OpenAI can take it

# Anthropic's own defaults: sent explicitly they ask for nothing an OpenAI vendor lacks.
ANTHROPIC_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "thinking": ({"type": "disabled"},),
    "service_tier": ("auto",),
    "speed": ("standard",),
}
ANTHROPIC_BLOCK_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "caller": ({"type": "direct"},),
    "allowed_callers": (["direct"],),
    "transformations": ({"oversized_image": "downsize"},),
}

OPENAI_MAX_STOP = 4  # OpenAI takes at most four stop sequences
DOCUMENT_FILENAME = "document.pdf"  # OpenAI wants a file name; a document may have no title

ANTHROPIC_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


def anthropic_request_to_openai(body: dict, *, vendor_kind: str) -> dict:
    """Return the OpenAI chat-completions body for an Anthropic messages body, owned fields left
    out; raise InvalidRequest for what has no faithful translation."""
    body = as_dict(body, "body")
    refuse_rest(
        body,
        handled=ANTHROPIC_OWNED
        | ANTHROPIC_FIELDS.keys()
        | {"messages", "system", "tool_choice", CACHE_HINT},
        path="",
        vendor=vendor_kind,
        defaults=ANTHROPIC_DEFAULTS,
    )
    _refuse_metadata(body.get("metadata"), vendor_kind)
    messages = _openai_system(body.get("system"), vendor_kind)
    for index, raw in enumerate(as_list(body.get("messages"), "messages")):
        messages += _openai_messages(raw, f"messages[{index}]", vendor_kind)
    out: dict[str, Any] = {"messages": messages}
    for key, translate in ANTHROPIC_FIELDS.items():
        if body.get(key) is not None:
            out.update(translate(body[key], vendor_kind))
    out.update(_openai_tool_choice(body.get("tool_choice"), "tools" in out, vendor_kind))
    return out


def _refuse_metadata(metadata: Any, vendor: str) -> None:
    # `user_id` is the end user's: owned, and never sent on. Anything else has no counterpart.
    if metadata is not None:
        refuse_rest(
            as_dict(metadata, "metadata"),
            handled=frozenset({"user_id"}),
            path="metadata",
            vendor=vendor,
        )


def _openai_system(system: Any, vendor: str) -> list[dict]:
    if is_neutral(system) or system == "":
        return []
    return [{"role": "system", "content": _openai_text_content(system, "system", vendor)}]


def _openai_text_content(content: Any, path: str, vendor: str) -> str | list[dict]:
    return text_content(content, path, vendor, handled=TEXT_BLOCK)


def _openai_text_part(block: Any, path: str, vendor: str) -> dict:
    return text_block(block, path, vendor, handled=TEXT_BLOCK)


def _openai_messages(raw: Any, path: str, vendor: str) -> list[dict]:
    message = as_dict(raw, path)
    refuse_rest(message, handled=frozenset({"role", "content"}), path=path, vendor=vendor)
    translate = ANTHROPIC_TURNS.get(message.get("role"))
    if translate is None:
        raise untranslatable(f"{path}.role", vendor, str(message.get("role")))
    return translate(message.get("content"), f"{path}.content", vendor)


def _openai_system_turn(content: Any, path: str, vendor: str) -> list[dict]:
    return [{"role": "system", "content": _openai_text_content(content, path, vendor)}]


def _openai_user_turn(content: Any, path: str, vendor: str) -> list[dict]:
    """Translate a user turn: its tool results become tool messages, first, then the rest."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    tool_messages: list[dict] = []
    parts: list[dict] = []
    for index, raw in enumerate(as_list(content, path)):
        where = f"{path}[{index}]"
        block = as_dict(raw, where)
        kind = block.get("type")
        if kind == "tool_result":
            tool_messages.append(_openai_tool_message(block, where, vendor))
        elif kind in ANTHROPIC_PARTS:
            parts.append(ANTHROPIC_PARTS[kind](block, where, vendor))
        else:
            raise untranslatable(f"{where}.type", vendor, str(kind))
    return tool_messages + ([{"role": "user", "content": parts}] if parts else [])


def _openai_image_part(block: dict, path: str, vendor: str) -> dict:
    refuse_rest(
        block,
        handled=frozenset({"type", "source", CACHE_HINT}),
        path=path,
        vendor=vendor,
        defaults=ANTHROPIC_BLOCK_DEFAULTS,
    )
    source_path = f"{path}.source"
    source = as_dict(block.get("source"), source_path)
    kind = source.get("type")
    if kind == "base64":
        refuse_rest(
            source,
            handled=frozenset({"type", "media_type", "data"}),
            path=source_path,
            vendor=vendor,
        )
        media_type = as_text(source.get("media_type"), f"{source_path}.media_type")
        data = as_text(source.get("data"), f"{source_path}.data")
        url = f"data:{media_type};base64,{data}"
    elif kind == "url":
        refuse_rest(source, handled=frozenset({"type", "url"}), path=source_path, vendor=vendor)
        url = as_text(source.get("url"), f"{source_path}.url")
    else:
        raise untranslatable(f"{source_path}.type", vendor, str(kind))
    return {"type": "image_url", "image_url": {"url": url}}


def _openai_file_part(block: dict, path: str, vendor: str) -> dict:
    # `citations` and `context` have no counterpart; `title` is the name the model is shown.
    refuse_rest(
        block, handled=frozenset({"type", "source", "title", CACHE_HINT}), path=path, vendor=vendor
    )
    source_path = f"{path}.source"
    source = as_dict(block.get("source"), source_path)
    if source.get("type") != "base64":
        raise untranslatable(f"{source_path}.type", vendor, str(source.get("type")))
    refuse_rest(
        source, handled=frozenset({"type", "media_type", "data"}), path=source_path, vendor=vendor
    )
    if source.get("media_type") != PDF:
        raise untranslatable(f"{source_path}.media_type", vendor, str(source.get("media_type")))
    data = as_text(source.get("data"), f"{source_path}.data")
    title = block.get("title")
    filename = as_text(title, f"{path}.title") if title else DOCUMENT_FILENAME
    return {
        "type": "file",
        "file": {"filename": filename, "file_data": f"data:{PDF};base64,{data}"},
    }


def _openai_tool_message(block: dict, path: str, vendor: str) -> dict:
    # `is_error: true` has no counterpart: an OpenAI tool message cannot say it failed.
    refuse_rest(
        block,
        handled=frozenset({"type", "tool_use_id", "content", CACHE_HINT}),
        path=path,
        vendor=vendor,
    )
    content = block.get("content")
    if not is_neutral(content):
        content = _openai_text_content(content, f"{path}.content", vendor)
    return {
        "role": "tool",
        "tool_call_id": as_text(block.get("tool_use_id"), f"{path}.tool_use_id"),
        "content": content or "",
    }


def _openai_assistant_turn(content: Any, path: str, vendor: str) -> list[dict]:
    if isinstance(content, str):
        return [{"role": "assistant", "content": content}]
    texts: list[str] = []
    calls: list[dict] = []
    for index, raw in enumerate(as_list(content, path)):
        where = f"{path}[{index}]"
        block = as_dict(raw, where)
        kind = block.get("type")
        if kind == "text":
            texts.append(_openai_text_part(block, where, vendor)["text"])
        elif kind == "tool_use":
            calls.append(_openai_tool_call(block, where, vendor))
        else:
            raise untranslatable(f"{where}.type", vendor, str(kind))
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) or (None if calls else ""),
    }
    if calls:
        message["tool_calls"] = calls
    return [message]


def _openai_tool_call(block: dict, path: str, vendor: str) -> dict:
    refuse_rest(
        block,
        handled=frozenset({"type", "id", "name", "input", CACHE_HINT}),
        path=path,
        vendor=vendor,
        defaults=ANTHROPIC_BLOCK_DEFAULTS,
    )
    tool_input = block.get("input")
    if not isinstance(tool_input, dict):
        raise malformed(f"{path}.input", "an object")
    return {
        "id": as_text(block.get("id"), f"{path}.id"),
        "type": "function",
        "function": {
            "name": as_text(block.get("name"), f"{path}.name"),
            "arguments": compact_json(tool_input),
        },
    }


def _openai_tools(tools: Any, vendor: str) -> dict:
    translated = [
        _openai_tool(tool, f"tools[{index}]", vendor)
        for index, tool in enumerate(as_list(tools, "tools"))
    ]
    return {"tools": translated} if translated else {}


def _openai_tool(tool: Any, path: str, vendor: str) -> dict:
    tool = as_dict(tool, path)
    # Server tools (web search, code execution, ...) run at Anthropic: no OpenAI counterpart.
    if tool.get("type") not in (None, "custom"):
        raise untranslatable(f"{path}.type", vendor, str(tool.get("type")))
    refuse_rest(
        tool,
        handled=frozenset({"type", "name", "description", "input_schema", "strict", CACHE_HINT}),
        path=path,
        vendor=vendor,
        defaults=ANTHROPIC_BLOCK_DEFAULTS,
    )
    function: dict[str, Any] = {
        "name": as_text(tool.get("name"), f"{path}.name"),
        "parameters": as_dict(tool.get("input_schema"), f"{path}.input_schema"),
    }
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    if tool.get("strict") is True:
        function["strict"] = True
    return {"type": "function", "function": function}


def _openai_tool_choice(choice: Any, has_tools: bool, vendor: str) -> dict:
    if choice is None:
        return {}
    choice = as_dict(choice, "tool_choice")
    kind = choice.get("type")
    refuse_rest(
        choice,
        handled=frozenset({"type", "name", "disable_parallel_tool_use"}),
        path="tool_choice",
        vendor=vendor,
    )
    if kind == "tool":
        name = as_text(choice.get("name"), "tool_choice.name")
        out: dict[str, Any] = {"tool_choice": {"type": "function", "function": {"name": name}}}
    elif kind in ANTHROPIC_TOOL_CHOICES:
        out = {"tool_choice": ANTHROPIC_TOOL_CHOICES[kind]}
    else:
        raise untranslatable("tool_choice.type", vendor, str(kind))
    # OpenAI refuses `parallel_tool_calls` without tools; without tools it means nothing.
    if choice.get("disable_parallel_tool_use") is True and has_tools:
        out["parallel_tool_calls"] = False
    return out


def _openai_stop(sequences: Any, vendor: str) -> dict:
    sequences = as_list(sequences, "stop_sequences")
    if len(sequences) > OPENAI_MAX_STOP:
        raise untranslatable("stop_sequences", vendor, f"with more than {OPENAI_MAX_STOP} entries")
    return {"stop": sequences} if sequences else {}


# Looked up with the client's value, of any JSON type.
ANTHROPIC_TURNS: dict[Any, Callable[[Any, str, str], list[dict]]] = {
    "user": _openai_user_turn,
    "assistant": _openai_assistant_turn,
    "system": _openai_system_turn,
}

ANTHROPIC_PARTS: dict[str, Callable[[dict, str, str], dict]] = {
    "text": _openai_text_part,
    "image": _openai_image_part,
    "document": _openai_file_part,
}

ANTHROPIC_FIELDS: dict[str, FieldTranslator] = {
    "stop_sequences": _openai_stop,
    "temperature": renamed("temperature"),
    "top_p": renamed("top_p"),
    "tools": _openai_tools,
}
