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

import json
from collections.abc import Callable
from typing import Any

from gateway.shapes.common import OPENAI_OWNED
from gateway.shapes.fields import (
    PDF,
    PROMPT_CACHE_DEFAULTS,
    FieldTranslator,
    as_dict,
    as_list,
    as_text,
    is_neutral,
    malformed,
    refuse_rest,
    renamed,
    split_data_url,
    text_block,
    text_content,
    untranslatable,
)

# ---------------------------------------------------------------- requests: OpenAI -> Anthropic

# OpenAI's own defaults: sent explicitly they ask for nothing an Anthropic vendor lacks.
OPENAI_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "top_logprobs": (0,),
    "service_tier": ("auto",),
    "modalities": (["text"],),
    "prompt_cache_options": PROMPT_CACHE_DEFAULTS,
}

ANTHROPIC_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
PDF_BASE64_START = "JVBER"  # "%PDF" in base64: a file_data without a data-URL header

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
    out = _anthropic_messages(as_list(body.get("messages"), "messages"), vendor_kind)
    for key, translate in OPENAI_FIELDS.items():
        if body.get(key) is not None:
            out.update(translate(body[key], vendor_kind))
    out.update(_anthropic_tool_choice(body, vendor_kind))
    out.update(_anthropic_json_answer(body, vendor_kind))
    return out


def _anthropic_messages(messages: list, vendor: str) -> dict:
    system: list[str | list[dict]] = []
    turns: list[dict] = []
    for index, raw in enumerate(messages):
        path = f"messages[{index}]"
        message = as_dict(raw, path)
        role = message.get("role")
        if role in ("system", "developer"):
            refuse_rest(message, handled=frozenset({"role", "content"}), path=path, vendor=vendor)
            system.append(
                _anthropic_text_content(message.get("content"), f"{path}.content", vendor)
            )
            continue
        translate = OPENAI_TURNS.get(role)
        if translate is None:
            raise untranslatable(f"{path}.role", vendor, str(role))
        _append_turn(turns, translate(message, path, vendor))
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


def _user_turn(message: dict, path: str, vendor: str) -> dict:
    refuse_rest(message, handled=frozenset({"role", "content"}), path=path, vendor=vendor)
    content = message.get("content")
    if isinstance(content, str):
        return {"role": "user", "content": content}
    parts = as_list(content, f"{path}.content")
    blocks = [
        _anthropic_user_block(part, f"{path}.content[{index}]", vendor)
        for index, part in enumerate(parts)
    ]
    return {"role": "user", "content": blocks}


def _anthropic_user_block(part: Any, path: str, vendor: str) -> dict:
    part = as_dict(part, path)
    translate = OPENAI_PARTS.get(part.get("type"))
    if translate is None:
        raise untranslatable(f"{path}.type", vendor, str(part.get("type")))
    return translate(part, path, vendor)


def _anthropic_image_block(part: dict, path: str, vendor: str) -> dict:
    refuse_rest(part, handled=frozenset({"type", "image_url"}), path=path, vendor=vendor)
    image = as_dict(part.get("image_url"), f"{path}.image_url")
    detail = image.get("detail")
    if detail not in (None, "auto"):
        raise untranslatable(f"{path}.image_url.detail", vendor, str(detail))
    refuse_rest(
        image, handled=frozenset({"url", "detail"}), path=f"{path}.image_url", vendor=vendor
    )
    url_path = f"{path}.image_url.url"
    url = as_text(image.get("url"), url_path)
    return {"type": "image", "source": _anthropic_image_source(url, url_path, vendor)}


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
    refuse_rest(part, handled=frozenset({"type", "file"}), path=path, vendor=vendor)
    file_path = f"{path}.file"
    file = as_dict(part.get("file"), file_path)
    # An uploaded file lives at OpenAI: an Anthropic vendor cannot read it.
    refuse_rest(file, handled=frozenset({"file_data", "filename"}), path=file_path, vendor=vendor)
    data_path = f"{file_path}.file_data"
    file_data = as_text(file.get("file_data"), data_path)
    media_type, data = split_data_url(file_data) or (None, file_data)
    if media_type is None and data.startswith(PDF_BASE64_START):
        media_type = PDF
    if media_type != PDF:
        raise untranslatable(data_path, vendor, media_type)
    block: dict[str, Any] = {
        "type": "document",
        "source": {"type": "base64", "media_type": PDF, "data": data},
    }
    if file.get("filename"):
        block["title"] = as_text(file["filename"], f"{file_path}.filename")
    return block


def _assistant_turn(message: dict, path: str, vendor: str) -> dict:
    # `name`, `refusal`, `audio` and the deprecated `function_call` are refused unless neutral.
    refuse_rest(
        message, handled=frozenset({"role", "content", "tool_calls"}), path=path, vendor=vendor
    )
    content = message.get("content")
    calls = as_list(message.get("tool_calls") or [], f"{path}.tool_calls")
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
    call = as_dict(call, path)
    if call.get("type") != "function":
        raise untranslatable(f"{path}.type", vendor, str(call.get("type")))
    # `index` is what the SDKs' stream helpers leave on a call; the list order carries it.
    handled = frozenset({"id", "type", "function", "index"})
    refuse_rest(call, handled=handled, path=path, vendor=vendor)
    function_path = f"{path}.function"
    function = as_dict(call.get("function"), function_path)
    refuse_rest(
        function, handled=frozenset({"name", "arguments"}), path=function_path, vendor=vendor
    )
    return {
        "type": "tool_use",
        "id": as_text(call.get("id"), f"{path}.id"),
        "name": as_text(function.get("name"), f"{function_path}.name"),
        "input": _arguments_object(function.get("arguments"), f"{function_path}.arguments", vendor),
    }


def _arguments_object(arguments: Any, path: str, vendor: str) -> dict:
    # Anthropic holds a tool's input as an object; an OpenAI string that is not one has no
    # counterpart. An empty string is a call without arguments.
    if arguments == "":
        return {}
    try:
        value = json.loads(as_text(arguments, path))
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise untranslatable(path, vendor, "not a JSON object")
    return value


def _tool_turn(message: dict, path: str, vendor: str) -> dict:
    refuse_rest(
        message, handled=frozenset({"role", "content", "tool_call_id"}), path=path, vendor=vendor
    )
    result = {
        "type": "tool_result",
        "tool_use_id": as_text(message.get("tool_call_id"), f"{path}.tool_call_id"),
        "content": _anthropic_text_content(message.get("content"), f"{path}.content", vendor),
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
    tool = as_dict(tool, path)
    if tool.get("type") != "function":
        raise untranslatable(f"{path}.type", vendor, str(tool.get("type")))
    refuse_rest(tool, handled=frozenset({"type", "function"}), path=path, vendor=vendor)
    function_path = f"{path}.function"
    function = as_dict(tool.get("function"), function_path)
    refuse_rest(
        function,
        handled=frozenset({"name", "description", "parameters", "strict"}),
        path=function_path,
        vendor=vendor,
    )
    name = as_text(function.get("name"), f"{function_path}.name")
    if name == JSON_TOOL:
        raise untranslatable(
            f"{function_path}.name", vendor, name, why="the name is reserved for JSON answers"
        )
    out: dict[str, Any] = {
        "name": name,
        "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
    }
    if function.get("description") is not None:
        out["description"] = function["description"]
    # Both shapes guarantee schema-valid tool inputs when asked; false is the default in both.
    if function.get("strict") is True:
        out["strict"] = True
    return out


def _anthropic_tool_choice(body: dict, vendor: str) -> dict:
    choice = body.get("tool_choice")
    translated = None if choice is None else _anthropic_tool_choice_of(choice, vendor)
    parallel = body.get("parallel_tool_calls")
    if parallel not in (None, True, False):
        raise malformed("parallel_tool_calls", "a boolean")
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
    choice = as_dict(choice, "tool_choice")
    if choice.get("type") != "function":
        raise untranslatable("tool_choice.type", vendor, str(choice.get("type")))
    refuse_rest(choice, handled=frozenset({"type", "function"}), path="tool_choice", vendor=vendor)
    function = as_dict(choice.get("function"), "tool_choice.function")
    refuse_rest(function, handled=frozenset({"name"}), path="tool_choice.function", vendor=vendor)
    return {"type": "tool", "name": as_text(function.get("name"), "tool_choice.function.name")}


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
    refuse_rest(
        response_format,
        handled=frozenset({"type", "json_schema"}),
        path="response_format",
        vendor=vendor,
    )
    path = "response_format.json_schema"
    json_schema = as_dict(response_format.get("json_schema"), path)
    refuse_rest(
        json_schema,
        handled=frozenset({"name", "description", "schema", "strict"}),
        path=path,
        vendor=vendor,
    )
    # The name labels the format for the client's own reading; the tool has ours.
    as_text(json_schema.get("name"), f"{path}.name")
    schema = as_dict(json_schema.get("schema"), f"{path}.schema")
    if schema.get("type") != "object":
        raise untranslatable(f"{path}.schema", vendor, "not an object schema")
    description = json_schema.get("description")
    tool: dict[str, Any] = {
        "name": JSON_TOOL,
        "description": JSON_TOOL_DESCRIPTION
        if description is None
        else as_text(description, f"{path}.description"),
        "input_schema": schema,
    }
    # Both shapes guarantee a schema-valid answer when asked; false is the default in both.
    if json_schema.get("strict") is True:
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


# Looked up with the client's value, of any JSON type.
OPENAI_TURNS: dict[Any, Callable[[dict, str, str], dict]] = {
    "user": _user_turn,
    "assistant": _assistant_turn,
    "tool": _tool_turn,
}

OPENAI_PARTS: dict[str, Callable[[dict, str, str], dict]] = {
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
