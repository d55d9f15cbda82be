"""The field toolkit beneath every translation between shapes (requests_to_anthropic,
requests_to_openai, responses_requests, and the answers and streams coming back).

A client speaks one shape and a vendor another; the translators turn the client's request
body into the vendor's, and the vendor's answer (whole, or streamed event by event) back into
the client's. They are pure functions that know nothing of models, keys or limits, and they
share these rules, which the helpers below carry out:

- Nothing is silently dropped. A field, value or content part with no faithful counterpart
  raises `InvalidRequest("'<path>' [<kind>] cannot be translated for <vendor_kind> vendors.")`
  (`untranslatable`): <path> as the client wrote it (`messages[2].content[0].type`), <kind>
  the offending value where it is a type or an enumerated value (`input_audio`, `high`) or a
  short reason (`above 1`). A neutral value (None, False, an empty list or dict, a field's own
  default such as `n: 1` or `service_tier: "auto"`) asks for nothing and is omitted
  (`refuse_rest`).
- Owned fields (model, output cap, streaming switches, end-user id, fallback model) are
  dropped from the request and never translated: the adapter sets them afterwards. The raw
  end-user id never reaches a translated body.
- A response comes from a vendor asked with a translated request, so what cannot arrive
  raises ValueError (`cannot_arrive`): the vendor broke the contract, not the client.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import InvalidRequest

TEXT_PART = frozenset({"type", "text"})  # a text part or block: the same in both chat shapes
PDF = "application/pdf"
# OpenAI's prompt-cache defaults, in chat and Responses bodies alike: sent explicitly they ask
# for nothing another vendor lacks.
PROMPT_CACHE_DEFAULTS: tuple[Any, ...] = (
    {"mode": "implicit"},
    {"ttl": "30m"},
    {"mode": "implicit", "ttl": "30m"},
)
# OpenAI chat's own defaults: sent explicitly they ask for nothing another vendor lacks (a
# translator adds the ones its vendor also lacks, or narrows one its vendor has a say in).
OPENAI_CHAT_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "top_logprobs": (0,),
    "service_tier": ("auto", "default"),
    "modalities": (["text"],),
    "prompt_cache_options": PROMPT_CACHE_DEFAULTS,
    "parallel_tool_calls": (True,),
}


# ---------------------------------------------------------------- refusals and neutral values


def untranslatable(
    path: str, vendor_kind: str, kind: str | None = None, *, why: str | None = None
) -> InvalidRequest:
    """Build the refusal of the client's field at `path`, optionally naming its value's kind
    and saying why."""
    shown = f"'{path}' {kind}" if kind else f"'{path}'"
    reason = f": {why}." if why else "."
    return InvalidRequest(f"{shown} cannot be translated for {vendor_kind} vendors{reason}")


def malformed(path: str, expected: str) -> InvalidRequest:
    return InvalidRequest(f"'{path}' must be {expected}.")


def is_neutral(value: Any) -> bool:
    """Tell whether a value asks for nothing: None, False, an empty list, an all-neutral dict."""
    if value is None or value is False:
        return True
    if isinstance(value, list):
        return not value
    if isinstance(value, dict):
        return all(is_neutral(item) for item in value.values())
    return False


def is_default(value: Any, defaults: tuple[Any, ...]) -> bool:
    # Compared with the type too: `True == 1` and `0 == False` must not pass for each other.
    return any(type(value) is type(default) and value == default for default in defaults)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _refusal_of(path: str, value: Any, vendor: str) -> InvalidRequest:
    # A typed object is named by its type: `'thinking.type' enabled`.
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        return untranslatable(f"{path}.type", vendor, value["type"])
    return untranslatable(path, vendor)


def refuse_rest(
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
        if key in handled or is_neutral(value) or is_default(value, defaults.get(key, ())):
            continue
        raise _refusal_of(_child(path, key), value, vendor)


def as_dict(value: Any, path: str) -> dict:
    if not isinstance(value, dict):
        raise malformed(path, "an object")
    return value


def as_list(value: Any, path: str) -> list:
    if not isinstance(value, list):
        raise malformed(path, "a list")
    return value


def as_text(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise malformed(path, "a string")
    return value


def split_data_url(url: str) -> tuple[str, str] | None:
    """Split `data:<media>[;...];base64,<data>` into (media, data); None for anything else."""
    if not url.startswith("data:"):
        return None
    header, comma, data = url[len("data:") :].partition(",")
    params = header.split(";")
    if not comma or params[-1] != "base64":
        return None
    return params[0], data


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


FieldTranslator = Callable[[Any, str], dict]


def renamed(name: str) -> FieldTranslator:
    """Translate a field whose value both shapes share, under `name`."""
    return lambda value, _vendor: {name: value}


def text_content(
    content: Any, path: str, vendor: str, *, handled: frozenset[str] = TEXT_PART
) -> str | list[dict]:
    """Translate a content that may only hold text: a string stays one; parts or blocks stay
    text parts / blocks (the two shapes write them alike), so no separator is invented."""
    if isinstance(content, str):
        return content
    return [
        text_block(part, f"{path}[{index}]", vendor, handled=handled)
        for index, part in enumerate(as_list(content, path))
    ]


def text_block(part: Any, path: str, vendor: str, *, handled: frozenset[str] = TEXT_PART) -> dict:
    return {"type": "text", "text": text_of_part(part, path, vendor, handled=handled)}


def text_of_part(part: Any, path: str, vendor: str, *, handled: frozenset[str] = TEXT_PART) -> str:
    """Return a text part's (or block's) text; refuse a part of any other type."""
    part = as_dict(part, path)
    if part.get("type") != "text":
        raise untranslatable(f"{path}.type", vendor, str(part.get("type")))
    refuse_rest(part, handled=handled, path=path, vendor=vendor)
    return as_text(part.get("text"), f"{path}.text")


def cannot_arrive(what: str) -> ValueError:
    return ValueError(f"{what} cannot arrive: the translated request does not ask for it.")


# ---------------------------------------------------------------- an OpenAI chat body, read
#
# The pieces every translator out of OpenAI chat (requests_to_anthropic, bedrock, gemini) reads
# alike: checked and refused here once, each vendor then writing them its own way.

SYSTEM_ROLES = ("system", "developer")
# What a message of each role may hold; any other field (`name`, an assistant's `refusal`,
# `audio` or deprecated `function_call`) is refused unless neutral.
MESSAGE_FIELDS: dict[str, frozenset[str]] = {
    "system": frozenset({"role", "content"}),
    "developer": frozenset({"role", "content"}),
    "user": frozenset({"role", "content"}),
    "assistant": frozenset({"role", "content", "tool_calls"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
FUNCTION_WRAPPER = frozenset({"type", "function"})
# `index` is what the SDKs' stream helpers leave on a call; the list order carries it.
TOOL_CALL_FIELDS = frozenset({"id", "type", "function", "index"})
FUNCTION_FIELDS = frozenset({"name", "description", "parameters", "strict"})
JSON_SCHEMA_FIELDS = frozenset({"name", "description", "schema", "strict"})
PDF_BASE64_START = "JVBER"  # "%PDF" in base64: a file_data without a data-URL header


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One chat message, its fields checked for its role; its content as the client wrote
    it (each vendor takes content its own way)."""

    path: str  # where it stands in the body: `messages[2]`
    role: str  # one of MESSAGE_FIELDS
    content: Any
    tool_calls: list  # an assistant's calls, unread (empty for the other roles)
    tool_call_id: str  # the call a tool message answers ("" for the other roles)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """An assistant's function call."""

    id: str
    name: str
    arguments: dict  # held as an object, as every vendor translated to holds them


@dataclass(frozen=True, slots=True)
class FunctionTool:
    """A function tool (`tools[i]`)."""

    name: str
    description: str | None
    parameters: dict | None  # its JSON Schema, as given (None: not given)
    strict: bool  # schema-valid inputs asked for (false is the default)


@dataclass(frozen=True, slots=True)
class JsonSchemaFormat:
    """A `json_schema` response format."""

    name: str  # labels the format for the client's own reading
    description: str | None
    schema: dict
    strict: bool


def chat_messages(messages: Any, vendor: str) -> Iterator[ChatMessage]:
    """Yield a chat body's messages in order, read; refuse a role with no counterpart and a
    field the message's role does not take (unless neutral)."""
    for index, raw in enumerate(as_list(messages, "messages")):
        path = f"messages[{index}]"
        message = as_dict(raw, path)
        role = message.get("role")
        if not isinstance(role, str) or role not in MESSAGE_FIELDS:
            raise untranslatable(f"{path}.role", vendor, str(role))
        refuse_rest(message, handled=MESSAGE_FIELDS[role], path=path, vendor=vendor)
        calls = message.get("tool_calls") if role == "assistant" else None
        answered = message.get("tool_call_id") if role == "tool" else ""
        yield ChatMessage(
            path=path,
            role=role,
            content=message.get("content"),
            tool_calls=as_list(calls or [], f"{path}.tool_calls"),
            tool_call_id=as_text(answered, f"{path}.tool_call_id"),
        )


def _function_object(
    value: Any, path: str, vendor: str, *, outer: frozenset[str], inner: frozenset[str]
) -> tuple[dict, dict]:
    """Read a `{"type": "function", "function": {...}}` object (a tool, a call, a named tool
    choice): return it and its function; refuse another type, and fields neither handles."""
    value = as_dict(value, path)
    if value.get("type") != "function":
        raise untranslatable(f"{path}.type", vendor, str(value.get("type")))
    refuse_rest(value, handled=outer, path=path, vendor=vendor)
    function_path = f"{path}.function"
    function = as_dict(value.get("function"), function_path)
    refuse_rest(function, handled=inner, path=function_path, vendor=vendor)
    return value, function


def read_tool_call(call: Any, path: str, vendor: str) -> ToolCall:
    """Read an assistant's `tool_calls[i]`."""
    call, function = _function_object(
        call, path, vendor, outer=TOOL_CALL_FIELDS, inner=frozenset({"name", "arguments"})
    )
    function_path = f"{path}.function"
    return ToolCall(
        id=as_text(call.get("id"), f"{path}.id"),
        name=as_text(function.get("name"), f"{function_path}.name"),
        arguments=arguments_object(function.get("arguments"), f"{function_path}.arguments", vendor),
    )


def arguments_object(arguments: Any, path: str, vendor: str) -> dict:
    """Read a call's JSON arguments as the object the vendors hold them as: a string that is
    not one has no counterpart there; an empty string is a call without arguments."""
    if arguments == "":
        return {}
    try:
        value = json.loads(as_text(arguments, path))
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise untranslatable(path, vendor, "not a JSON object")
    return value


def read_function_tool(tool: Any, path: str, vendor: str) -> FunctionTool:
    """Read a `tools[i]`: a function tool, or refused naming its type."""
    _, function = _function_object(
        tool, path, vendor, outer=FUNCTION_WRAPPER, inner=FUNCTION_FIELDS
    )
    function_path = f"{path}.function"
    name = as_text(function.get("name"), f"{function_path}.name")
    description = function.get("description")
    if description is not None:
        description = as_text(description, f"{function_path}.description")
    parameters = function.get("parameters")
    if parameters is not None:
        parameters = as_dict(parameters, f"{function_path}.parameters")
    return FunctionTool(name, description, parameters, strict=function.get("strict") is True)


def read_function_choice(choice: Any, path: str, vendor: str) -> str:
    """Return the function a `{"type": "function", "function": {"name"}}` names (a
    `tool_choice`, an allowed tool)."""
    _, function = _function_object(
        choice, path, vendor, outer=FUNCTION_WRAPPER, inner=frozenset({"name"})
    )
    return as_text(function.get("name"), f"{path}.function.name")


def read_parallel_tool_calls(body: dict) -> bool | None:
    """Return the body's `parallel_tool_calls` (None: not given)."""
    parallel = body.get("parallel_tool_calls")
    if parallel not in (None, True, False):
        raise malformed("parallel_tool_calls", "a boolean")
    return parallel


PartTranslator = Callable[[dict, str, str], dict]  # (part, its path, vendor kind) -> translated


def translate_parts(
    parts: Any, path: str, vendor: str, translators: Mapping[Any, PartTranslator]
) -> list[dict]:
    """Translate a list of content parts, each by its type's translator; refuse a type that
    has none."""
    translated = []
    for index, raw in enumerate(as_list(parts, path)):
        where = f"{path}[{index}]"
        part = as_dict(raw, where)
        translate = translators.get(part.get("type"))
        if translate is None:
            raise untranslatable(f"{where}.type", vendor, str(part.get("type")))
        translated.append(translate(part, where, vendor))
    return translated


def read_image_url(part: dict, path: str, vendor: str) -> str:
    """Return an `image_url` part's URL, as given; a `detail` other than auto is refused."""
    refuse_rest(part, handled=frozenset({"type", "image_url"}), path=path, vendor=vendor)
    image_path = f"{path}.image_url"
    image = as_dict(part.get("image_url"), image_path)
    detail = image.get("detail")
    if detail not in (None, "auto"):
        raise untranslatable(f"{image_path}.detail", vendor, str(detail))
    refuse_rest(image, handled=frozenset({"url", "detail"}), path=image_path, vendor=vendor)
    return as_text(image.get("url"), f"{image_path}.url")


def read_file_data(part: dict, path: str, vendor: str) -> tuple[str | None, str]:
    """Return a `file` part's inline data as (media type, base64 data): the data URL's type,
    else PDF for bare base64 that starts as one, else None. An uploaded file (`file_id`)
    lives at OpenAI, where no other vendor reads it: refused."""
    refuse_rest(part, handled=frozenset({"type", "file"}), path=path, vendor=vendor)
    file_path = f"{path}.file"
    file = as_dict(part.get("file"), file_path)
    refuse_rest(file, handled=frozenset({"file_data", "filename"}), path=file_path, vendor=vendor)
    file_data = as_text(file.get("file_data"), f"{file_path}.file_data")
    media_type, data = split_data_url(file_data) or (None, file_data)
    if media_type is None and data.startswith(PDF_BASE64_START):
        media_type = PDF
    return media_type, data


def read_json_schema_format(
    response_format: dict, vendor: str, *, described: bool = True
) -> JsonSchemaFormat:
    """Read a `json_schema` response format (its `type` read already); `described=False`
    for a vendor with no place for its description, which is then refused."""
    refuse_rest(
        response_format,
        handled=frozenset({"type", "json_schema"}),
        path="response_format",
        vendor=vendor,
    )
    path = "response_format.json_schema"
    spec = as_dict(response_format.get("json_schema"), path)
    handled = JSON_SCHEMA_FIELDS if described else JSON_SCHEMA_FIELDS - {"description"}
    refuse_rest(spec, handled=handled, path=path, vendor=vendor)
    description = spec.get("description") if described else None
    return JsonSchemaFormat(
        name=as_text(spec.get("name"), f"{path}.name"),
        description=None if description is None else as_text(description, f"{path}.description"),
        schema=as_dict(spec.get("schema"), f"{path}.schema"),
        strict=spec.get("strict") is True,
    )
