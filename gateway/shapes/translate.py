"""Translate between the OpenAI chat-completions shape and the Anthropic messages shape.

A client speaks one shape and a vendor one; when they differ, these pure functions turn the
client's request body into the vendor's, and the vendor's answer (whole, or streamed event by
event) back into the client's. They know nothing of models, keys or limits.

Rules:

- Nothing is silently dropped. A field, value or content part with no faithful counterpart
  raises `InvalidRequest("'<path>' [<kind>] cannot be translated for <vendor_kind> vendors.")`:
  <path> as the client wrote it (`messages[2].content[0].type`), <kind> the offending value
  where it is a type or an enumerated value (`input_audio`, `high`) or a short reason
  (`above 1`). A neutral value (None, False, an empty list or dict, a field's own default
  such as `n: 1` or `service_tier: "auto"`) asks for nothing and is omitted.
- A documented exception: Anthropic `cache_control` (top level, on any block, on a
  tool) is dropped on the way to OpenAI-shaped vendors. Those cache prompt prefixes on their
  own; the hint changes cost, never the answer.
- OpenAI JSON mode (`response_format` `json_object` or `json_schema`) becomes one forced
  Anthropic tool, JSON_TOOL, whose input schema is the format's (`{"type": "object"}` for
  `json_object`; a schema whose root is not an object is refused, as a tool input is an
  object) and whose description is the format's or a fixed one, called once; the other
  documented exception, the format's `name`, labels it for the client and is not sent (the
  tool has ours). The call comes back as the message's content, its input as compact JSON,
  finish reason "stop" (not "tool_calls"). A forced tool excludes the client's: JSON
  mode beside `tools` or a `tool_choice` (other than "none") is refused, and so is a client
  tool named JSON_TOOL, always, so that an answer reads the same without its request.
- Owned fields (model, output cap, streaming switches, end-user id, fallback model) are
  dropped from the request and never translated: the adapter sets them afterwards. The raw
  end-user id (`user`, `safety_identifier`, `metadata.user_id`) never reaches a translated
  body.
- A response comes from a vendor asked with a translated request, so what cannot arrive (a
  thinking block, a server tool's block, a tool input that is not a JSON object, a second
  JSON answer) raises ValueError: the vendor broke the contract, not the client.

What a round trip normalises (and nothing else):

- OpenAI system and developer messages, wherever they stand, become one Anthropic `system`:
  one string (joined with a blank line) when all are strings, else one text block per string
  or part. Back in the OpenAI shape that is one leading system message.
- Neighbouring messages of the same role merge (Anthropic wants alternating roles), so a
  user string after tool results becomes a text block, and a text part back in OpenAI.
- Tool-call arguments are re-serialised compactly (`{"a":1}`); OpenAI `arguments: ""` is `{}`.
  Assistant `content: ""` beside tool calls comes back as None.
- An OpenAI file part's `filename` is the Anthropic document's `title` and back; a document
  without a title is `document.pdf`.
- OpenAI `finish_reason: "stop"` is `end_turn` even when a stop sequence matched: the
  chat-completions shape does not say which.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from core.errors import InvalidRequest
from gateway.shapes.common import ANTHROPIC_OWNED, OPENAI_OWNED

# ---------------------------------------------------------------- refusals and neutral values


def untranslatable(
    path: str, vendor_kind: str, kind: str | None = None, *, why: str | None = None
) -> InvalidRequest:
    """Build the refusal of the client's field at `path`, optionally naming its value's kind
    and saying why."""
    shown = f"'{path}' {kind}" if kind else f"'{path}'"
    reason = f": {why}." if why else "."
    return InvalidRequest(f"{shown} cannot be translated for {vendor_kind} vendors{reason}")


def _malformed(path: str, expected: str) -> InvalidRequest:
    return InvalidRequest(f"'{path}' must be {expected}.")


def _is_neutral(value: Any) -> bool:
    """Tell whether a value asks for nothing: None, False, an empty list, an all-neutral dict."""
    if value is None or value is False:
        return True
    if isinstance(value, list):
        return not value
    if isinstance(value, dict):
        return all(_is_neutral(item) for item in value.values())
    return False


def _is_default(value: Any, defaults: tuple[Any, ...]) -> bool:
    # Compared with the type too: `True == 1` and `0 == False` must not pass for each other.
    return any(type(value) is type(default) and value == default for default in defaults)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _refusal_of(path: str, value: Any, vendor: str) -> InvalidRequest:
    # A typed object is named by its type: `'thinking.type' enabled`.
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        return untranslatable(f"{path}.type", vendor, value["type"])
    return untranslatable(path, vendor)


def _refuse_rest(
    obj: Mapping[str, Any],
    *,
    handled: frozenset[str],
    path: str,
    vendor: str,
    defaults: Mapping[str, tuple[Any, ...]] | None = None,
) -> None:
    """Refuse every field of `obj` the translation does not handle, unless it is neutral."""
    defaults = defaults or {}
    for key, value in obj.items():
        if key in handled or _is_neutral(value) or _is_default(value, defaults.get(key, ())):
            continue
        raise _refusal_of(_child(path, key), value, vendor)


def _as_dict(value: Any, path: str) -> dict:
    if not isinstance(value, dict):
        raise _malformed(path, "an object")
    return value


def _as_list(value: Any, path: str) -> list:
    if not isinstance(value, list):
        raise _malformed(path, "a list")
    return value


def _as_text(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise _malformed(path, "a string")
    return value


def _data_url(url: str) -> tuple[str, str] | None:
    """Split `data:<media>[;...];base64,<data>` into (media, data); None for anything else."""
    if not url.startswith("data:"):
        return None
    header, comma, data = url[len("data:") :].partition(",")
    params = header.split(";")
    if not comma or params[-1] != "base64":
        return None
    return params[0], data


def _compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


FieldTranslator = Callable[[Any, str], dict]


def _renamed(name: str) -> FieldTranslator:
    """Translate a field whose value both shapes share, under `name`."""
    return lambda value, _vendor: {name: value}


# ---------------------------------------------------------------- requests: OpenAI -> Anthropic

# OpenAI's own defaults: sent explicitly they ask for nothing an Anthropic vendor lacks.
OPENAI_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "top_logprobs": (0,),
    "service_tier": ("auto",),
    "modalities": (["text"],),
    "prompt_cache_options": (
        {"mode": "implicit"},
        {"ttl": "30m"},
        {"mode": "implicit", "ttl": "30m"},
    ),
}

ANTHROPIC_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
PDF = "application/pdf"
PDF_BASE64_START = "JVBER"  # "%PDF" in base64: a file_data without a data-URL header
TEXT_PART = frozenset({"type", "text"})

OPENAI_TOOL_CHOICES = {"auto": "auto", "none": "none", "required": "any"}

# JSON mode on Anthropic is this one tool, forced: its input is the answer. The name is
# reserved (a client tool may not take it) so that an answer can be read without the request.
JSON_TOOL = "tollgate_json_answer"
JSON_TOOL_DESCRIPTION = "Give your answer as this tool's input: a JSON object in its schema."
JSON_ANSWER_EXCLUDES = "JSON mode is a forced tool call there, which excludes the client's tools"


def openai_request_to_anthropic(body: dict, *, vendor_kind: str) -> dict:
    """Return the Anthropic messages body for an OpenAI chat-completions body, owned fields left
    out; raise InvalidRequest for what has no faithful translation."""
    body = _as_dict(body, "body")
    _refuse_rest(
        body,
        handled=OPENAI_OWNED
        | OPENAI_FIELDS.keys()
        | {"messages", "tool_choice", "parallel_tool_calls", "response_format"},
        path="",
        vendor=vendor_kind,
        defaults=OPENAI_DEFAULTS,
    )
    out = _anthropic_messages(_as_list(body.get("messages"), "messages"), vendor_kind)
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
        message = _as_dict(raw, path)
        role = message.get("role")
        if role in ("system", "developer"):
            _refuse_rest(message, handled=frozenset({"role", "content"}), path=path, vendor=vendor)
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
    if all(isinstance(content, str) for content in contents):
        return "\n\n".join(content for content in contents if content)
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


def _text_content(
    content: Any, path: str, vendor: str, *, handled: frozenset[str] = TEXT_PART
) -> str | list[dict]:
    """Translate a content that may only hold text: a string stays one; parts or blocks stay
    text parts / blocks (the two shapes write them alike), so no separator is invented."""
    if isinstance(content, str):
        return content
    return [
        _text_block(part, f"{path}[{index}]", vendor, handled=handled)
        for index, part in enumerate(_as_list(content, path))
    ]


def _text_block(part: Any, path: str, vendor: str, *, handled: frozenset[str] = TEXT_PART) -> dict:
    part = _as_dict(part, path)
    if part.get("type") != "text":
        raise untranslatable(f"{path}.type", vendor, str(part.get("type")))
    _refuse_rest(part, handled=handled, path=path, vendor=vendor)
    return {"type": "text", "text": _as_text(part.get("text"), f"{path}.text")}


def _anthropic_text_content(content: Any, path: str, vendor: str) -> str | list[dict]:
    return _text_content(content, path, vendor)


def _anthropic_text_block(part: Any, path: str, vendor: str) -> dict:
    return _text_block(part, path, vendor)


def _user_turn(message: dict, path: str, vendor: str) -> dict:
    _refuse_rest(message, handled=frozenset({"role", "content"}), path=path, vendor=vendor)
    content = message.get("content")
    if isinstance(content, str):
        return {"role": "user", "content": content}
    parts = _as_list(content, f"{path}.content")
    blocks = [
        _anthropic_user_block(part, f"{path}.content[{index}]", vendor)
        for index, part in enumerate(parts)
    ]
    return {"role": "user", "content": blocks}


def _anthropic_user_block(part: Any, path: str, vendor: str) -> dict:
    part = _as_dict(part, path)
    translate = OPENAI_PARTS.get(part.get("type"))
    if translate is None:
        raise untranslatable(f"{path}.type", vendor, str(part.get("type")))
    return translate(part, path, vendor)


def _anthropic_image_block(part: dict, path: str, vendor: str) -> dict:
    _refuse_rest(part, handled=frozenset({"type", "image_url"}), path=path, vendor=vendor)
    image = _as_dict(part.get("image_url"), f"{path}.image_url")
    detail = image.get("detail")
    if detail not in (None, "auto"):
        raise untranslatable(f"{path}.image_url.detail", vendor, str(detail))
    _refuse_rest(
        image, handled=frozenset({"url", "detail"}), path=f"{path}.image_url", vendor=vendor
    )
    url_path = f"{path}.image_url.url"
    url = _as_text(image.get("url"), url_path)
    return {"type": "image", "source": _anthropic_image_source(url, url_path, vendor)}


def _anthropic_image_source(url: str, path: str, vendor: str) -> dict:
    if url.startswith(("https://", "http://")):
        return {"type": "url", "url": url}
    data_url = _data_url(url)
    if data_url is None:
        raise untranslatable(path, vendor)
    media_type, data = data_url
    if media_type not in ANTHROPIC_IMAGE_TYPES:
        raise untranslatable(path, vendor, media_type)
    return {"type": "base64", "media_type": media_type, "data": data}


def _anthropic_document_block(part: dict, path: str, vendor: str) -> dict:
    _refuse_rest(part, handled=frozenset({"type", "file"}), path=path, vendor=vendor)
    file_path = f"{path}.file"
    file = _as_dict(part.get("file"), file_path)
    # An uploaded file lives at OpenAI: an Anthropic vendor cannot read it.
    _refuse_rest(file, handled=frozenset({"file_data", "filename"}), path=file_path, vendor=vendor)
    data_path = f"{file_path}.file_data"
    file_data = _as_text(file.get("file_data"), data_path)
    media_type, data = _data_url(file_data) or (None, file_data)
    if media_type is None and data.startswith(PDF_BASE64_START):
        media_type = PDF
    if media_type != PDF:
        raise untranslatable(data_path, vendor, media_type)
    block: dict[str, Any] = {
        "type": "document",
        "source": {"type": "base64", "media_type": PDF, "data": data},
    }
    if file.get("filename"):
        block["title"] = _as_text(file["filename"], f"{file_path}.filename")
    return block


def _assistant_turn(message: dict, path: str, vendor: str) -> dict:
    # `name`, `refusal`, `audio` and the deprecated `function_call` are refused unless neutral.
    _refuse_rest(
        message, handled=frozenset({"role", "content", "tool_calls"}), path=path, vendor=vendor
    )
    content = message.get("content")
    calls = _as_list(message.get("tool_calls") or [], f"{path}.tool_calls")
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
        for index, part in enumerate(_as_list(content, path))
    ]
    return [block for block in blocks if block["text"]]


def _anthropic_tool_use(call: Any, path: str, vendor: str) -> dict:
    call = _as_dict(call, path)
    if call.get("type") != "function":
        raise untranslatable(f"{path}.type", vendor, str(call.get("type")))
    # `index` is what the SDKs' stream helpers leave on a call; the list order carries it.
    handled = frozenset({"id", "type", "function", "index"})
    _refuse_rest(call, handled=handled, path=path, vendor=vendor)
    function_path = f"{path}.function"
    function = _as_dict(call.get("function"), function_path)
    _refuse_rest(
        function, handled=frozenset({"name", "arguments"}), path=function_path, vendor=vendor
    )
    return {
        "type": "tool_use",
        "id": _as_text(call.get("id"), f"{path}.id"),
        "name": _as_text(function.get("name"), f"{function_path}.name"),
        "input": _arguments_object(function.get("arguments"), f"{function_path}.arguments", vendor),
    }


def _arguments_object(arguments: Any, path: str, vendor: str) -> dict:
    # Anthropic holds a tool's input as an object; an OpenAI string that is not one has no
    # counterpart. An empty string is a call without arguments.
    if arguments == "":
        return {}
    try:
        value = json.loads(_as_text(arguments, path))
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise untranslatable(path, vendor, "not a JSON object")
    return value


def _tool_turn(message: dict, path: str, vendor: str) -> dict:
    _refuse_rest(
        message, handled=frozenset({"role", "content", "tool_call_id"}), path=path, vendor=vendor
    )
    result = {
        "type": "tool_result",
        "tool_use_id": _as_text(message.get("tool_call_id"), f"{path}.tool_call_id"),
        "content": _anthropic_text_content(message.get("content"), f"{path}.content", vendor),
    }
    # A user turn: Anthropic carries tool results in the user's turn, merged with its neighbours.
    return {"role": "user", "content": [result]}


def _anthropic_tools(tools: Any, vendor: str) -> dict:
    translated = [
        _anthropic_tool(tool, f"tools[{index}]", vendor)
        for index, tool in enumerate(_as_list(tools, "tools"))
    ]
    return {"tools": translated} if translated else {}


def _anthropic_tool(tool: Any, path: str, vendor: str) -> dict:
    tool = _as_dict(tool, path)
    if tool.get("type") != "function":
        raise untranslatable(f"{path}.type", vendor, str(tool.get("type")))
    _refuse_rest(tool, handled=frozenset({"type", "function"}), path=path, vendor=vendor)
    function_path = f"{path}.function"
    function = _as_dict(tool.get("function"), function_path)
    _refuse_rest(
        function,
        handled=frozenset({"name", "description", "parameters", "strict"}),
        path=function_path,
        vendor=vendor,
    )
    name = _as_text(function.get("name"), f"{function_path}.name")
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
        raise _malformed("parallel_tool_calls", "a boolean")
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
    choice = _as_dict(choice, "tool_choice")
    if choice.get("type") != "function":
        raise untranslatable("tool_choice.type", vendor, str(choice.get("type")))
    _refuse_rest(choice, handled=frozenset({"type", "function"}), path="tool_choice", vendor=vendor)
    function = _as_dict(choice.get("function"), "tool_choice.function")
    _refuse_rest(function, handled=frozenset({"name"}), path="tool_choice.function", vendor=vendor)
    return {"type": "tool", "name": _as_text(function.get("name"), "tool_choice.function.name")}


def _anthropic_json_answer(body: dict, vendor: str) -> dict:
    """Translate a JSON `response_format` into the forced JSON_TOOL, whose input is the answer
    (an Anthropic tool input is always an object); nothing for text or no format."""
    response_format = body.get("response_format")
    if _is_neutral(response_format) or response_format == {"type": "text"}:
        return {}
    response_format = _as_dict(response_format, "response_format")
    kind = response_format.get("type")
    if kind == "json_object":
        _refuse_rest(
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
    if not _is_neutral(body.get("tools")):
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
    _refuse_rest(
        response_format,
        handled=frozenset({"type", "json_schema"}),
        path="response_format",
        vendor=vendor,
    )
    path = "response_format.json_schema"
    json_schema = _as_dict(response_format.get("json_schema"), path)
    _refuse_rest(
        json_schema,
        handled=frozenset({"name", "description", "schema", "strict"}),
        path=path,
        vendor=vendor,
    )
    # The name labels the format for the client's own reading; the tool has ours.
    _as_text(json_schema.get("name"), f"{path}.name")
    schema = _as_dict(json_schema.get("schema"), f"{path}.schema")
    if schema.get("type") != "object":
        raise untranslatable(f"{path}.schema", vendor, "not an object schema")
    description = json_schema.get("description")
    tool: dict[str, Any] = {
        "name": JSON_TOOL,
        "description": JSON_TOOL_DESCRIPTION
        if description is None
        else _as_text(description, f"{path}.description"),
        "input_schema": schema,
    }
    # Both shapes guarantee a schema-valid answer when asked; false is the default in both.
    if json_schema.get("strict") is True:
        tool["strict"] = True
    return tool


def _anthropic_stop(stop: Any, vendor: str) -> dict:
    sequences = [stop] if isinstance(stop, str) else _as_list(stop, "stop")
    return {"stop_sequences": sequences} if sequences else {}


def _anthropic_temperature(temperature: Any, vendor: str) -> dict:
    # OpenAI samples at 0..2, Anthropic at 0..1: above 1 means nothing there.
    if isinstance(temperature, int | float) and temperature > 1:
        raise untranslatable("temperature", vendor, "above 1")
    return {"temperature": temperature}


OPENAI_TURNS: dict[str, Callable[[dict, str, str], dict]] = {
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
    "top_p": _renamed("top_p"),
    "tools": _anthropic_tools,
}


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
    body = _as_dict(body, "body")
    _refuse_rest(
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
    for index, raw in enumerate(_as_list(body.get("messages"), "messages")):
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
        _refuse_rest(
            _as_dict(metadata, "metadata"),
            handled=frozenset({"user_id"}),
            path="metadata",
            vendor=vendor,
        )


def _openai_system(system: Any, vendor: str) -> list[dict]:
    if _is_neutral(system) or system == "":
        return []
    return [{"role": "system", "content": _openai_text_content(system, "system", vendor)}]


def _openai_text_content(content: Any, path: str, vendor: str) -> str | list[dict]:
    return _text_content(content, path, vendor, handled=TEXT_BLOCK)


def _openai_text_part(block: Any, path: str, vendor: str) -> dict:
    return _text_block(block, path, vendor, handled=TEXT_BLOCK)


def _openai_messages(raw: Any, path: str, vendor: str) -> list[dict]:
    message = _as_dict(raw, path)
    _refuse_rest(message, handled=frozenset({"role", "content"}), path=path, vendor=vendor)
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
    for index, raw in enumerate(_as_list(content, path)):
        where = f"{path}[{index}]"
        block = _as_dict(raw, where)
        kind = block.get("type")
        if kind == "tool_result":
            tool_messages.append(_openai_tool_message(block, where, vendor))
        elif kind in ANTHROPIC_PARTS:
            parts.append(ANTHROPIC_PARTS[kind](block, where, vendor))
        else:
            raise untranslatable(f"{where}.type", vendor, str(kind))
    return tool_messages + ([{"role": "user", "content": parts}] if parts else [])


def _openai_image_part(block: dict, path: str, vendor: str) -> dict:
    _refuse_rest(
        block,
        handled=frozenset({"type", "source", CACHE_HINT}),
        path=path,
        vendor=vendor,
        defaults=ANTHROPIC_BLOCK_DEFAULTS,
    )
    source_path = f"{path}.source"
    source = _as_dict(block.get("source"), source_path)
    kind = source.get("type")
    if kind == "base64":
        _refuse_rest(
            source,
            handled=frozenset({"type", "media_type", "data"}),
            path=source_path,
            vendor=vendor,
        )
        media_type = _as_text(source.get("media_type"), f"{source_path}.media_type")
        data = _as_text(source.get("data"), f"{source_path}.data")
        url = f"data:{media_type};base64,{data}"
    elif kind == "url":
        _refuse_rest(source, handled=frozenset({"type", "url"}), path=source_path, vendor=vendor)
        url = _as_text(source.get("url"), f"{source_path}.url")
    else:
        raise untranslatable(f"{source_path}.type", vendor, str(kind))
    return {"type": "image_url", "image_url": {"url": url}}


def _openai_file_part(block: dict, path: str, vendor: str) -> dict:
    # `citations` and `context` have no counterpart; `title` is the name the model is shown.
    _refuse_rest(
        block, handled=frozenset({"type", "source", "title", CACHE_HINT}), path=path, vendor=vendor
    )
    source_path = f"{path}.source"
    source = _as_dict(block.get("source"), source_path)
    if source.get("type") != "base64":
        raise untranslatable(f"{source_path}.type", vendor, str(source.get("type")))
    _refuse_rest(
        source, handled=frozenset({"type", "media_type", "data"}), path=source_path, vendor=vendor
    )
    if source.get("media_type") != PDF:
        raise untranslatable(f"{source_path}.media_type", vendor, str(source.get("media_type")))
    data = _as_text(source.get("data"), f"{source_path}.data")
    title = block.get("title")
    filename = _as_text(title, f"{path}.title") if title else DOCUMENT_FILENAME
    return {
        "type": "file",
        "file": {"filename": filename, "file_data": f"data:{PDF};base64,{data}"},
    }


def _openai_tool_message(block: dict, path: str, vendor: str) -> dict:
    # `is_error: true` has no counterpart: an OpenAI tool message cannot say it failed.
    _refuse_rest(
        block,
        handled=frozenset({"type", "tool_use_id", "content", CACHE_HINT}),
        path=path,
        vendor=vendor,
    )
    content = block.get("content")
    if not _is_neutral(content):
        content = _openai_text_content(content, f"{path}.content", vendor)
    return {
        "role": "tool",
        "tool_call_id": _as_text(block.get("tool_use_id"), f"{path}.tool_use_id"),
        "content": content or "",
    }


def _openai_assistant_turn(content: Any, path: str, vendor: str) -> list[dict]:
    if isinstance(content, str):
        return [{"role": "assistant", "content": content}]
    texts: list[str] = []
    calls: list[dict] = []
    for index, raw in enumerate(_as_list(content, path)):
        where = f"{path}[{index}]"
        block = _as_dict(raw, where)
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
    _refuse_rest(
        block,
        handled=frozenset({"type", "id", "name", "input", CACHE_HINT}),
        path=path,
        vendor=vendor,
        defaults=ANTHROPIC_BLOCK_DEFAULTS,
    )
    tool_input = block.get("input")
    if not isinstance(tool_input, dict):
        raise _malformed(f"{path}.input", "an object")
    return {
        "id": _as_text(block.get("id"), f"{path}.id"),
        "type": "function",
        "function": {
            "name": _as_text(block.get("name"), f"{path}.name"),
            "arguments": _compact_json(tool_input),
        },
    }


def _openai_tools(tools: Any, vendor: str) -> dict:
    translated = [
        _openai_tool(tool, f"tools[{index}]", vendor)
        for index, tool in enumerate(_as_list(tools, "tools"))
    ]
    return {"tools": translated} if translated else {}


def _openai_tool(tool: Any, path: str, vendor: str) -> dict:
    tool = _as_dict(tool, path)
    # Server tools (web search, code execution, ...) run at Anthropic: no OpenAI counterpart.
    if tool.get("type") not in (None, "custom"):
        raise untranslatable(f"{path}.type", vendor, str(tool.get("type")))
    _refuse_rest(
        tool,
        handled=frozenset({"type", "name", "description", "input_schema", "strict", CACHE_HINT}),
        path=path,
        vendor=vendor,
        defaults=ANTHROPIC_BLOCK_DEFAULTS,
    )
    function: dict[str, Any] = {
        "name": _as_text(tool.get("name"), f"{path}.name"),
        "parameters": _as_dict(tool.get("input_schema"), f"{path}.input_schema"),
    }
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    if tool.get("strict") is True:
        function["strict"] = True
    return {"type": "function", "function": function}


def _openai_tool_choice(choice: Any, has_tools: bool, vendor: str) -> dict:
    if choice is None:
        return {}
    choice = _as_dict(choice, "tool_choice")
    kind = choice.get("type")
    _refuse_rest(
        choice,
        handled=frozenset({"type", "name", "disable_parallel_tool_use"}),
        path="tool_choice",
        vendor=vendor,
    )
    if kind == "tool":
        name = _as_text(choice.get("name"), "tool_choice.name")
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
    sequences = _as_list(sequences, "stop_sequences")
    if len(sequences) > OPENAI_MAX_STOP:
        raise untranslatable("stop_sequences", vendor, f"with more than {OPENAI_MAX_STOP} entries")
    return {"stop": sequences} if sequences else {}


ANTHROPIC_TURNS: dict[str, Callable[[Any, str, str], list[dict]]] = {
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
    "temperature": _renamed("temperature"),
    "top_p": _renamed("top_p"),
    "tools": _openai_tools,
}


# ---------------------------------------------------------------- usage


def openai_usage_from_anthropic(usage: dict) -> dict:
    """Return OpenAI `CompletionUsage` for Anthropic usage: OpenAI's prompt tokens include the
    cached and cache-written ones that Anthropic counts apart."""
    cache_read = usage.get("cache_read_input_tokens") or 0
    cache_write = usage.get("cache_creation_input_tokens") or 0
    prompt = (usage.get("input_tokens") or 0) + cache_read + cache_write
    completion = usage.get("output_tokens") or 0
    thinking = (usage.get("output_tokens_details") or {}).get("thinking_tokens") or 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cache_read, "cache_write_tokens": cache_write},
        "completion_tokens_details": {"reasoning_tokens": thinking},
    }


def anthropic_usage_from_openai(usage: dict) -> dict:
    """Return Anthropic usage for OpenAI `CompletionUsage`: the cached and cache-written prompt
    tokens come out of `input_tokens` into their own counts."""
    details = usage.get("prompt_tokens_details") or {}
    cache_read = details.get("cached_tokens") or 0
    cache_write = details.get("cache_write_tokens") or 0
    return {
        "input_tokens": max((usage.get("prompt_tokens") or 0) - cache_read - cache_write, 0),
        "output_tokens": usage.get("completion_tokens") or 0,
        "cache_creation_input_tokens": cache_write,
        "cache_read_input_tokens": cache_read,
    }


# ---------------------------------------------------------------- whole responses

FINISH_FROM_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",  # the output ran out of room, as with a cap
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
STOP_FROM_FINISH = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}
# A reason either vendor adds later must not break answers: it reads as a plain stop.
DEFAULT_FINISH = "stop"
DEFAULT_STOP = "end_turn"


def _cannot_arrive(what: str) -> ValueError:
    return ValueError(f"{what} cannot arrive: the translated request does not ask for it.")


def _finish_reason(stop_reason: Any, *, json_answer: bool) -> str:
    # A forced JSON_TOOL call ends with "tool_use"; for the client it is the answer, a stop.
    if json_answer and stop_reason == "tool_use":
        return "stop"
    return FINISH_FROM_STOP.get(stop_reason, DEFAULT_FINISH)


def anthropic_message_to_openai(data: dict) -> dict:
    """Return the chat.completion object for an Anthropic Message; raise ValueError for a
    block the translated request cannot have caused (thinking, server tools, a second JSON
    answer). A JSON_TOOL call is the answer's content: its input as compact JSON."""
    texts: list[str] = []
    calls: list[dict] = []
    json_answer = False
    for block in data.get("content") or []:
        kind = block.get("type")
        if kind == "text" and block.get("citations"):
            raise _cannot_arrive("An Anthropic text block with citations")
        if kind == "text":
            texts.append(block.get("text") or "")
        elif kind == "tool_use" and block.get("name") == JSON_TOOL:
            if json_answer:
                raise _cannot_arrive("A second JSON answer")
            json_answer = True
            texts.append(_compact_json(block.get("input") or {}))
        elif kind == "tool_use":
            calls.append(_openai_call_of(block))
        else:
            raise _cannot_arrive(f"An Anthropic {kind!r} block")
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) or (None if calls else ""),
        "refusal": None,
    }
    if calls:
        message["tool_calls"] = calls
    return {
        "id": data.get("id") or "",
        "object": "chat.completion",
        "created": int(time.time()),  # Anthropic does not say when; now is when it arrived
        "model": data.get("model") or "",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _finish_reason(
                    data.get("stop_reason"), json_answer=json_answer and not calls
                ),
                "logprobs": None,
            }
        ],
        "usage": openai_usage_from_anthropic(data.get("usage") or {}),
    }


def _openai_call_of(block: dict) -> dict:
    return {
        "id": block["id"],
        "type": "function",
        "function": {"name": block["name"], "arguments": _compact_json(block.get("input") or {})},
    }


def openai_completion_to_anthropic(data: dict) -> dict:
    """Return the Anthropic Message for a chat.completion object.

    Reads choices[0] only: `n` above 1 is refused on the way in. Raises ValueError for a
    response without choices, a custom tool call, or tool-call arguments that are not a JSON
    object (Anthropic holds a tool input as an object). A `refusal` is kept as text with
    stop_reason "refusal".
    """
    choices = data.get("choices") or []
    if not choices:
        raise ValueError("An OpenAI chat.completion without choices has no Anthropic message.")
    choice = choices[0]
    message = choice.get("message") or {}
    content = [{"type": "text", "text": message["content"]}] if message.get("content") else []
    refusal = message.get("refusal")
    if refusal:
        content.append({"type": "text", "text": refusal})
    content += [_anthropic_call_of(call) for call in message.get("tool_calls") or []]
    stop_reason = STOP_FROM_FINISH.get(choice.get("finish_reason"), DEFAULT_STOP)
    return {
        "id": data.get("id") or "",
        "type": "message",
        "role": "assistant",
        "model": data.get("model") or "",
        "content": content,
        "stop_reason": "refusal" if refusal else stop_reason,
        "stop_sequence": None,
        "usage": anthropic_usage_from_openai(data.get("usage") or {}),
    }


def _anthropic_call_of(call: dict) -> dict:
    if call.get("type") != "function":
        raise _cannot_arrive(f"An OpenAI {call.get('type')!r} tool call")
    function = call["function"]
    arguments = function.get("arguments") or "{}"
    tool_input = json.loads(arguments)
    if not isinstance(tool_input, dict):
        raise ValueError("OpenAI tool-call arguments that are not a JSON object.")
    return {"type": "tool_use", "id": call["id"], "name": function["name"], "input": tool_input}


# ---------------------------------------------------------------- streams

CHUNK = "chat.completion.chunk"


class AnthropicStreamToOpenAI:
    """Turn an Anthropic messages SSE stream, event by event, into chat-completion chunks.

    A JSON_TOOL block is the answer's content: its start shows nothing, its input fragments
    are content text.
    """

    def __init__(self, *, include_usage: bool) -> None:
        self._include_usage = include_usage
        self._usage: dict[str, Any] = {}
        # OpenAI numbers tool calls from 0; Anthropic numbers all blocks, text ones included.
        self._tool_index: dict[int, int] = {}
        self._json_index: int | None = None  # the Anthropic index of the JSON_TOOL block

    def feed(self, event: dict) -> list[dict]:
        """Return the chunks one event's data becomes: none for `ping`, `content_block_stop`,
        `message_stop` and event types Anthropic may add later."""
        handler = self._HANDLERS.get(event.get("type"))
        return handler(self, event) if handler else []

    def _chunk(self, delta: dict, finish_reason: str | None = None) -> dict:
        chunk: dict[str, Any] = {
            "object": CHUNK,
            "choices": [
                {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
            ],
        }
        if self._include_usage:
            chunk["usage"] = None  # what OpenAI sends on every chunk but the usage one
        return chunk

    def _merge_usage(self, usage: dict | None) -> None:
        # message_start has the input counts, message_delta the final output ones.
        self._usage.update({k: v for k, v in (usage or {}).items() if v is not None})

    def _on_message_start(self, event: dict) -> list[dict]:
        self._merge_usage((event.get("message") or {}).get("usage"))
        return [self._chunk({"role": "assistant", "content": ""})]

    def _on_block_start(self, event: dict) -> list[dict]:
        block = event.get("content_block") or {}
        kind = block.get("type")
        if kind == "text":
            return [self._chunk({"content": block["text"]})] if block.get("text") else []
        if kind != "tool_use":
            raise _cannot_arrive(f"An Anthropic {kind!r} block")
        if block.get("name") == JSON_TOOL:
            return self._on_json_start(event["index"], block)
        tool_index = self._tool_index[event["index"]] = len(self._tool_index)
        call = {
            "index": tool_index,
            "id": block["id"],
            "type": "function",
            "function": {
                "name": block["name"],
                "arguments": _compact_json(block["input"]) if block.get("input") else "",
            },
        }
        return [self._chunk({"tool_calls": [call]})]

    def _on_json_start(self, index: int, block: dict) -> list[dict]:
        if self._json_index is not None:
            raise _cannot_arrive("A second JSON answer")
        self._json_index = index
        return (
            [self._chunk({"content": _compact_json(block["input"])})] if block.get("input") else []
        )

    def _on_block_delta(self, event: dict) -> list[dict]:
        delta = event.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta":
            return [self._chunk({"content": delta["text"]})] if delta.get("text") else []
        if kind != "input_json_delta":
            raise _cannot_arrive(f"An Anthropic {kind!r}")
        if not delta.get("partial_json"):
            return []
        if self._json_index is not None and event.get("index") == self._json_index:
            return [self._chunk({"content": delta["partial_json"]})]
        if event.get("index") not in self._tool_index:
            raise ValueError("An Anthropic input_json_delta for a block that is not a tool_use.")
        call = {
            "index": self._tool_index[event["index"]],
            "function": {"arguments": delta["partial_json"]},
        }
        return [self._chunk({"tool_calls": [call]})]

    def _on_message_delta(self, event: dict) -> list[dict]:
        self._merge_usage(event.get("usage"))
        reason = (event.get("delta") or {}).get("stop_reason")
        json_answer = self._json_index is not None and not self._tool_index
        chunks = [self._chunk({}, _finish_reason(reason, json_answer=json_answer))]
        if self._include_usage:
            usage = openai_usage_from_anthropic(self._usage)
            chunks.append({"object": CHUNK, "choices": [], "usage": usage})
        return chunks

    def _on_error(self, event: dict) -> list[dict]:
        kind = (event.get("error") or {}).get("type")
        raise ValueError(f"The Anthropic stream ended in an error event ({kind}).")

    _HANDLERS: dict[str, Callable[[AnthropicStreamToOpenAI, dict], list[dict]]] = {
        "message_start": _on_message_start,
        "content_block_start": _on_block_start,
        "content_block_delta": _on_block_delta,
        "message_delta": _on_message_delta,
        "error": _on_error,
    }


EMPTY_ANTHROPIC_USAGE = {
    "input_tokens": 0,
    "output_tokens": 0,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}


class OpenAIStreamToAnthropic:
    """Turn a chat-completion chunk stream, chunk by chunk, into Anthropic SSE events.

    Reads what the OpenAI shape defines (content, refusal, tool calls, finish reason, usage);
    extras some compatible vendors add outside it (a `reasoning` delta) are not read: the
    translated request did not ask for them.
    """

    def __init__(self) -> None:
        self._started = False
        self._next_index = 0
        self._open_index: int | None = None  # the Anthropic index of the open block
        self._open_tool: int | None = None  # the OpenAI tool index it carries; None for text
        self._tool_ids: dict[int, str] = {}
        self._stop_reason = DEFAULT_STOP
        self._refused = False
        self._usage: dict[str, Any] = {}

    def feed(self, chunk: dict) -> list[dict]:
        """Return the events one chunk becomes; the first chunk also starts the message.

        Raises ValueError for a tool call's fragment after another call began (OpenAI sends
        one call after the other) or a call that starts without an id.
        """
        events = self._start(chunk)
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            events += self._on_text(delta.get("content"))
            if delta.get("refusal"):
                self._refused = True
                events += self._on_text(delta["refusal"])
            for call in delta.get("tool_calls") or []:
                events += self._on_tool_call(call)
            if choice.get("finish_reason"):
                self._stop_reason = STOP_FROM_FINISH.get(choice["finish_reason"], DEFAULT_STOP)
        return events

    def finish(self) -> list[dict]:
        """Return the closing events: the open block's stop, message_delta, message_stop."""
        events = self._start({}) + self._close()
        events.append(
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": "refusal" if self._refused else self._stop_reason,
                    "stop_sequence": None,
                },
                "usage": anthropic_usage_from_openai(self._usage),
            }
        )
        events.append({"type": "message_stop"})
        return events

    def _start(self, chunk: dict) -> list[dict]:
        if self._started:
            return []
        self._started = True
        message = {
            "id": chunk.get("id") or "",
            "type": "message",
            "role": "assistant",
            "model": chunk.get("model") or "",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": dict(EMPTY_ANTHROPIC_USAGE),
        }
        return [{"type": "message_start", "message": message}]

    def _open(self, content_block: dict, *, tool: int | None) -> list[dict]:
        events = self._close()
        self._open_index, self._open_tool = self._next_index, tool
        self._next_index += 1
        events.append(
            {
                "type": "content_block_start",
                "index": self._open_index,
                "content_block": content_block,
            }
        )
        return events

    def _close(self) -> list[dict]:
        if self._open_index is None:
            return []
        events = [{"type": "content_block_stop", "index": self._open_index}]
        self._open_index = self._open_tool = None
        return events

    def _on_text(self, text: str | None) -> list[dict]:
        if not text:
            return []
        text_open = self._open_index is not None and self._open_tool is None
        events = [] if text_open else self._open({"type": "text", "text": ""}, tool=None)
        delta = {"type": "text_delta", "text": text}
        events.append({"type": "content_block_delta", "index": self._open_index, "delta": delta})
        return events

    def _on_tool_call(self, call: dict) -> list[dict]:
        tool = call.get("index", 0)
        function = call.get("function") or {}
        call_id = call.get("id")
        # Some OpenAI-compatible vendors repeat the id on every fragment: a new call is a new
        # index, or a new id at a known one.
        starts = tool not in self._tool_ids or (call_id and call_id != self._tool_ids[tool])
        events: list[dict] = []
        if starts:
            if not call_id:
                raise ValueError("An OpenAI tool call started without an id.")
            self._tool_ids[tool] = call_id
            block = {
                "type": "tool_use",
                "id": call_id,
                "name": function.get("name") or "",
                "input": {},
            }
            events += self._open(block, tool=tool)
        elif tool != self._open_tool:
            raise ValueError("An OpenAI tool call's fragment arrived after another call began.")
        if function.get("arguments"):
            delta = {"type": "input_json_delta", "partial_json": function["arguments"]}
            events.append(
                {"type": "content_block_delta", "index": self._open_index, "delta": delta}
            )
        return events
