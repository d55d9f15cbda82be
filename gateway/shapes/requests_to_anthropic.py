"""Translate an OpenAI chat-completions request body into an Anthropic messages body, under
the rules of gateway/shapes/fields.py.

- OpenAI JSON mode (`response_format` `json_object` or `json_schema`) becomes one forced
  Anthropic tool, JSON_TOOL, whose input schema is the format's (`{"type": "object"}` for
  `json_object`; a schema whose root is not an object is refused, as a tool input is an
  object) and whose description is the format's or a fixed one, called once; the format's
  `name`, a documented exception, labels it for the client and is not sent (the tool has
  ours). The call comes back as the message's content, its input as compact JSON, finish
  reason "stop" (not "tool_calls"): see chat_answers.py. A forced tool excludes the client's:
  JSON mode beside `tools` or a `tool_choice` (other than "none") is refused, and so is a
  client tool named JSON_TOOL, always, so that an answer reads the same without its request.
- The raw end-user id (`user`, `safety_identifier`) never reaches a translated body.

What a round trip normalises (and nothing else):

- OpenAI system and developer messages, wherever they stand, become one Anthropic `system`:
  one string (joined with a blank line) when all are strings, else one text block per string
  or part. Back in the OpenAI shape that is one leading system message.
- Neighbouring messages of the same role merge (Anthropic wants alternating roles), so a
  user string after tool results becomes a text block, and a text part back in OpenAI.
- Tool-call arguments are re-serialised compactly (`{"a":1}`); OpenAI `arguments: ""` is `{}`.
- An OpenAI file part's `filename` is the Anthropic document's `title` and back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.shapes.common import OPENAI_OWNED
from gateway.shapes.fields import (
    OPENAI_CHAT_DEFAULTS,
    PDF,
    SYSTEM_ROLES,
    ChatMessage,
    FieldTranslator,
    PartTranslator,
    as_dict,
    as_list,
    as_text,
    chat_messages,
    is_neutral,
    read_file_data,
    read_function_choice,
    read_function_tool,
    read_image_url,
    read_json_schema_format,
    read_parallel_tool_calls,
    read_tool_call,
    refuse_rest,
    renamed,
    split_data_url,
    text_block,
    text_content,
    translate_parts,
    untranslatable,
)

# ---------------------------------------------------------------- requests: OpenAI -> Anthropic

# OpenAI's own defaults: sent explicitly they ask for nothing an Anthropic vendor lacks. But
# for `service_tier: "default"`: OpenAI's standard tier, where Anthropic's default may use
# its priority tier.
OPENAI_DEFAULTS: dict[str, tuple[Any, ...]] = {**OPENAI_CHAT_DEFAULTS, "service_tier": ("auto",)}

ANTHROPIC_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})

OPENAI_TOOL_CHOICES = {"auto": "auto", "none": "none", "required": "any"}

# JSON mode on Anthropic is this one tool, forced: its input is the answer. The name is
# reserved (a client tool may not take it) so that an answer can be read without the request.
JSON_TOOL = "tollgate_json_answer"
JSON_TOOL_DESCRIPTION = "Give your answer as this tool's input: a JSON object in its schema."
JSON_ANSWER_EXCLUDES = "JSON mode is a forced tool call there, which excludes the client's tools"


def openai_request_to_anthropic(body: dict, *, vendor_kind: str) -> dict:
    """Return the Anthropic messages body for an OpenAI chat-completions body, owned fields left
    out; raise InvalidRequest for what has no faithful translation."""
    body = as_dict(body, "body")
    refuse_rest(
        body,
        handled=OPENAI_OWNED
        | OPENAI_FIELDS.keys()
        | {"messages", "tool_choice", "parallel_tool_calls", "response_format"},
        path="",
        vendor=vendor_kind,
        defaults=OPENAI_DEFAULTS,
    )
    out = _anthropic_messages(body.get("messages"), vendor_kind)
    for key, translate in OPENAI_FIELDS.items():
        if body.get(key) is not None:
            out.update(translate(body[key], vendor_kind))
    out.update(_anthropic_tool_choice(body, vendor_kind))
    out.update(_anthropic_json_answer(body, vendor_kind))
    return out


def _anthropic_messages(messages: Any, vendor: str) -> dict:
    system: list[str | list[dict]] = []
    turns: list[dict] = []
    for message in chat_messages(messages, vendor):
        if message.role in SYSTEM_ROLES:
            content_path = f"{message.path}.content"
            system.append(_anthropic_text_content(message.content, content_path, vendor))
        else:
            _append_turn(turns, OPENAI_TURNS[message.role](message, vendor))
    out: dict[str, Any] = {"messages": turns}
    if system:
        out["system"] = _anthropic_system(system)
    return out


def _anthropic_system(contents: list[str | list[dict]]) -> str | list[dict]:
    """Join all system and developer contents: one string if all are strings, else text blocks."""
    texts = [content for content in contents if isinstance(content, str)]
    if len(texts) == len(contents):
        return "\n\n".join(text for text in texts if text)
    return [block for content in contents for block in _as_blocks(content)]


def _as_blocks(content: str | list[dict]) -> list[dict]:
    # Anthropic refuses empty text blocks; an empty string says nothing anyway.
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return content


def _append_turn(turns: list[dict], turn: dict) -> None:
    """Append a turn, merged into the last one when both have the same role: Anthropic wants
    user and assistant to alternate."""
    if turns and turns[-1]["role"] == turn["role"]:
        turns[-1]["content"] = _as_blocks(turns[-1]["content"]) + _as_blocks(turn["content"])
    else:
        turns.append(turn)


def _anthropic_text_content(content: Any, path: str, vendor: str) -> str | list[dict]:
    return text_content(content, path, vendor)


def _anthropic_text_block(part: Any, path: str, vendor: str) -> dict:
    return text_block(part, path, vendor)


def _user_turn(message: ChatMessage, vendor: str) -> dict:
    content = message.content
    if isinstance(content, str):
        return {"role": "user", "content": content}
    blocks = translate_parts(content, f"{message.path}.content", vendor, OPENAI_PARTS)
    return {"role": "user", "content": blocks}


def _anthropic_image_block(part: dict, path: str, vendor: str) -> dict:
    url = read_image_url(part, path, vendor)
    source = _anthropic_image_source(url, f"{path}.image_url.url", vendor)
    return {"type": "image", "source": source}


def _anthropic_image_source(url: str, path: str, vendor: str) -> dict:
    if url.startswith(("https://", "http://")):
        return {"type": "url", "url": url}
    data_url = split_data_url(url)
    if data_url is None:
        raise untranslatable(path, vendor)
    media_type, data = data_url
    if media_type not in ANTHROPIC_IMAGE_TYPES:
        raise untranslatable(path, vendor, media_type)
    return {"type": "base64", "media_type": media_type, "data": data}


def _anthropic_document_block(part: dict, path: str, vendor: str) -> dict:
    media_type, data = read_file_data(part, path, vendor)
    if media_type != PDF:
        raise untranslatable(f"{path}.file.file_data", vendor, media_type)
    block: dict[str, Any] = {
        "type": "document",
        "source": {"type": "base64", "media_type": PDF, "data": data},
    }
    filename = part["file"].get("filename")
    if filename:
        block["title"] = as_text(filename, f"{path}.file.filename")
    return block


def _assistant_turn(message: ChatMessage, vendor: str) -> dict:
    content, calls, path = message.content, message.tool_calls, message.path
    if isinstance(content, str) and not calls:
        return {"role": "assistant", "content": content}
    blocks = _assistant_text_blocks(content, f"{path}.content", vendor)
    blocks += [
        _anthropic_tool_use(call, f"{path}.tool_calls[{index}]", vendor)
        for index, call in enumerate(calls)
    ]
    return {"role": "assistant", "content": blocks}


def _assistant_text_blocks(content: Any, path: str, vendor: str) -> list[dict]:
    if content is None:
        return []
    if isinstance(content, str):
        return _as_blocks(content)
    blocks = [
        _anthropic_text_block(part, f"{path}[{index}]", vendor)
        for index, part in enumerate(as_list(content, path))
    ]
    return [block for block in blocks if block["text"]]


def _anthropic_tool_use(call: Any, path: str, vendor: str) -> dict:
    read = read_tool_call(call, path, vendor)
    return {"type": "tool_use", "id": read.id, "name": read.name, "input": read.arguments}


def _tool_turn(message: ChatMessage, vendor: str) -> dict:
    result = {
        "type": "tool_result",
        "tool_use_id": message.tool_call_id,
        "content": _anthropic_text_content(message.content, f"{message.path}.content", vendor),
    }
    # A user turn: Anthropic carries tool results in the user's turn, merged with its neighbours.
    return {"role": "user", "content": [result]}


def _anthropic_tools(tools: Any, vendor: str) -> dict:
    translated = [
        _anthropic_tool(tool, f"tools[{index}]", vendor)
        for index, tool in enumerate(as_list(tools, "tools"))
    ]
    return {"tools": translated} if translated else {}


def _anthropic_tool(tool: Any, path: str, vendor: str) -> dict:
    function = read_function_tool(tool, path, vendor)
    if function.name == JSON_TOOL:
        raise untranslatable(
            f"{path}.function.name", vendor, JSON_TOOL, why="the name is reserved for JSON answers"
        )
    out: dict[str, Any] = {
        "name": function.name,
        "input_schema": function.parameters or {"type": "object", "properties": {}},
    }
    if function.description is not None:
        out["description"] = function.description
    # Both shapes guarantee schema-valid tool inputs when asked; false is the default in both.
    if function.strict:
        out["strict"] = True
    return out


def _anthropic_tool_choice(body: dict, vendor: str) -> dict:
    choice = body.get("tool_choice")
    translated = None if choice is None else _anthropic_tool_choice_of(choice, vendor)
    parallel = read_parallel_tool_calls(body)
    # Sequential calls only mean something when tools may be called at all.
    may_call = (translated or {}).get("type") != "none" and bool(translated or body.get("tools"))
    if parallel is False and may_call:
        translated = {**(translated or {"type": "auto"}), "disable_parallel_tool_use": True}
    return {"tool_choice": translated} if translated else {}


def _anthropic_tool_choice_of(choice: Any, vendor: str) -> dict:
    if isinstance(choice, str):
        if choice not in OPENAI_TOOL_CHOICES:
            raise untranslatable("tool_choice", vendor, choice)
        return {"type": OPENAI_TOOL_CHOICES[choice]}
    return {"type": "tool", "name": read_function_choice(choice, "tool_choice", vendor)}


def _anthropic_json_answer(body: dict, vendor: str) -> dict:
    """Translate a JSON `response_format` into the forced JSON_TOOL, whose input is the answer
    (an Anthropic tool input is always an object); nothing for text or no format."""
    response_format = body.get("response_format")
    if is_neutral(response_format) or response_format == {"type": "text"}:
        return {}
    response_format = as_dict(response_format, "response_format")
    kind = response_format.get("type")
    if kind == "json_object":
        refuse_rest(
            response_format, handled=frozenset({"type"}), path="response_format", vendor=vendor
        )
        tool: dict[str, Any] = {
            "name": JSON_TOOL,
            "description": JSON_TOOL_DESCRIPTION,
            "input_schema": {"type": "object"},
        }
    elif kind == "json_schema":
        tool = _json_schema_tool(response_format, vendor)
    else:
        raise untranslatable("response_format.type", vendor, str(kind))
    if not is_neutral(body.get("tools")):
        raise untranslatable(
            "response_format", vendor, f"{kind} beside tools", why=JSON_ANSWER_EXCLUDES
        )
    if body.get("tool_choice") not in (None, "none"):
        raise untranslatable(
            "response_format", vendor, f"{kind} beside tool_choice", why=JSON_ANSWER_EXCLUDES
        )
    # One call only: two JSON inputs would not make one JSON answer.
    choice = {"type": "tool", "name": JSON_TOOL, "disable_parallel_tool_use": True}
    return {"tools": [tool], "tool_choice": choice}


def _json_schema_tool(response_format: dict, vendor: str) -> dict:
    # The format's name labels it for the client's own reading; the tool has ours.
    json_schema = read_json_schema_format(response_format, vendor)
    if json_schema.schema.get("type") != "object":
        raise untranslatable("response_format.json_schema.schema", vendor, "not an object schema")
    tool: dict[str, Any] = {
        "name": JSON_TOOL,
        "description": JSON_TOOL_DESCRIPTION
        if json_schema.description is None
        else json_schema.description,
        "input_schema": json_schema.schema,
    }
    # Both shapes guarantee a schema-valid answer when asked; false is the default in both.
    if json_schema.strict:
        tool["strict"] = True
    return tool


def _anthropic_stop(stop: Any, vendor: str) -> dict:
    sequences = [stop] if isinstance(stop, str) else as_list(stop, "stop")
    return {"stop_sequences": sequences} if sequences else {}


def _anthropic_temperature(temperature: Any, vendor: str) -> dict:
    # OpenAI samples at 0..2, Anthropic at 0..1: above 1 means nothing there.
    if isinstance(temperature, int | float) and temperature > 1:
        raise untranslatable("temperature", vendor, "above 1")
    return {"temperature": temperature}


# By the role chat_messages read (system and developer messages are the `system`).
OPENAI_TURNS: dict[str, Callable[[ChatMessage, str], dict]] = {
    "user": _user_turn,
    "assistant": _assistant_turn,
    "tool": _tool_turn,
}

OPENAI_PARTS: dict[str, PartTranslator] = {
    "text": _anthropic_text_block,
    "image_url": _anthropic_image_block,
    "file": _anthropic_document_block,
}

OPENAI_FIELDS: dict[str, FieldTranslator] = {
    "stop": _anthropic_stop,
    "temperature": _anthropic_temperature,
    "top_p": renamed("top_p"),
    "tools": _anthropic_tools,
}
