"""Google's `generateContent` shape (the Gemini API and Vertex AI), both ways: an OpenAI
chat-completions body in (the vendor's chat shape is OpenAI's: gateway/plan.py translates the
other client shapes into it first), and a Gemini answer, whole or streamed, out as OpenAI chat,
under the rules of gateway/shapes/fields.py (translate, drop only what cannot change the
answer, or refuse naming the field).

Requests, OpenAI -> Gemini:

- `system` and `developer` messages, wherever they stand, become `systemInstruction` (one text
  part per string or text part, in order); `user` turns and `tool` results are `user`
  contents, `assistant` turns `model` contents; neighbouring contents of one role merge.
- Text parts are text parts; an `image_url` or `file` data URL is `inlineData` (its media
  type and base64 data); `input_audio` is `inlineData` `audio/wav` or `audio/mp3`. An http(s)
  image URL is refused: Gemini reads `fileData` only from its own File API or Cloud Storage
  URIs. A file part's `filename` is dropped (a documented exception: Gemini's inline data has
  no name; the model reads the document's content either way).
- Tools are `functionDeclarations` with `parametersJsonSchema`: the OpenAI parameters are JSON
  Schema, which that field takes as it is (the older `parameters` takes an OpenAPI subset that
  would need a lossy conversion). Tool calls are `functionCall` parts (`args` the arguments
  object); a tool result is a `functionResponse` part, `{"name", "response": {"output":
  <its text>}}`: Gemini answers a call by its function's name, found from the earlier
  assistant message that made the call (a result whose call is not in the conversation is
  refused).
- `tool_choice`: `auto` -> mode AUTO (VALIDATED when a tool is `strict`: Gemini's mode that
  keeps calls to their schema while still allowing text), `none` -> NONE, `required` -> ANY,
  a named function -> ANY with `allowedFunctionNames` [name], `allowed_tools` in mode
  `required` -> ANY with its names (mode `auto` is refused: Gemini restricts names only when
  a call is required). `parallel_tool_calls: false` with callable tools is refused (Gemini
  has no switch for one call at a time).
- `generationConfig`: temperature; top_p -> topP; stop -> stopSequences; n -> candidateCount;
  seed; presence/frequency penalties; `response_format` json_object -> responseMimeType
  `application/json`, json_schema -> that and `responseJsonSchema` (JSON Schema as it is, for
  the reason above; the format's `name` labels it for the client and is not sent, `strict`
  is what Gemini does anyway, a `description` is refused: it has no place);
  `reasoning_effort` -> `thinkingConfig.thinkingBudget` (THINKING_BUDGETS: Google's own
  OpenAI-compatible endpoint maps low / medium / high to 1,024 / 8,192 / 24,576 and none to
  0; minimal, which it lacks, is 512). The output cap is Tollgate's (`maxOutputTokens`, set by
  `vendor_body`); the model and streaming are in the URL.
- Dropped, as they cannot change the answer: `prompt_cache_key` (a routing hint for OpenAI's
  cache; Gemini caches implicitly). The caller label is not sent: Gemini has no end-user field.
- Refused unless neutral: logprobs, logit_bias, metadata, store, audio, prediction,
  modalities other than text, verbosity, web search, service tiers, deprecated functions.

Answers, Gemini -> OpenAI chat, whole and streamed: gateway/shapes/gemini_answers.py.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.shapes.common import OPENAI_OWNED
from gateway.shapes.fields import (
    OPENAI_CHAT_DEFAULTS,
    SYSTEM_ROLES,
    ChatMessage,
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
    split_data_url,
    text_of_part,
    translate_parts,
    untranslatable,
)

GEMINI = "gemini"  # the shape of a generateContent body (CallTarget.shape)

# OpenAI's own defaults: sent explicitly they ask for nothing Gemini lacks.
OPENAI_DEFAULTS: dict[str, tuple[Any, ...]] = {**OPENAI_CHAT_DEFAULTS, "verbosity": ("medium",)}
# A routing hint for OpenAI's prompt cache: it cannot change the answer (module docstring).
DROPPED = frozenset({"prompt_cache_key"})

THINKING_BUDGETS = {"none": 0, "minimal": 512, "low": 1024, "medium": 8192, "high": 24576}
AUDIO_FORMATS: dict[Any, str] = {"wav": "audio/wav", "mp3": "audio/mp3"}
TOOL_OUTPUT = "output"  # the key of a functionResponse's response holding the tool's text


# ---------------------------------------------------------------- requests: OpenAI -> Gemini


def chat_request_to_gemini(body: dict, *, vendor_kind: str) -> dict:
    """Return the generateContent body for an OpenAI chat-completions body, owned fields left
    out; raise InvalidRequest for what has no faithful translation."""
    body = as_dict(body, "body")
    refuse_rest(
        body,
        handled=OPENAI_OWNED | DROPPED | GENERATION_FIELDS.keys() | HANDLED,
        path="",
        vendor=vendor_kind,
        defaults=OPENAI_DEFAULTS,
    )
    system, contents = _contents(body.get("messages"), vendor_kind)
    out: dict[str, Any] = {"contents": contents}
    if system:
        out["systemInstruction"] = {"parts": system}
    tools = _tools(body.get("tools"), vendor_kind)
    if tools:
        out["tools"] = [{"functionDeclarations": tools}]
    tool_config = _tool_config(body, tools, vendor_kind)
    if tool_config:
        out["toolConfig"] = {"functionCallingConfig": tool_config}
    config: dict[str, Any] = {}
    for key, translate in GENERATION_FIELDS.items():
        if body.get(key) is not None:
            config.update(translate(body[key], vendor_kind))
    if config:
        out["generationConfig"] = config
    return out


def _contents(messages: Any, vendor: str) -> tuple[list[dict], list[dict]]:
    """Return the system instruction's parts and the contents of a chat's messages."""
    system: list[dict] = []
    contents: list[dict] = []
    call_names: dict[str, str] = {}  # tool call id -> its function, as the history defines it
    for message in chat_messages(messages, vendor):
        if message.role in SYSTEM_ROLES:
            system += _text_parts(message.content, f"{message.path}.content", vendor)
        elif message.role == "user":
            _append(contents, "user", _user_parts(message.content, message.path, vendor))
        elif message.role == "assistant":
            _append(contents, "model", _model_parts(message, vendor, call_names))
        else:
            _append(contents, "user", [_function_response(message, vendor, call_names)])
    return system, contents


def _append(contents: list[dict], role: str, parts: list[dict]) -> None:
    """Append a content, merged into the last one of the same role (Gemini wants turns that
    alternate); a turn with no parts is left out."""
    if not parts:
        return
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"] += parts
    else:
        contents.append({"role": role, "parts": parts})


def _text_parts(content: Any, path: str, vendor: str) -> list[dict]:
    """Translate a content that may only hold text (system, developer)."""
    if isinstance(content, str):
        return [{"text": content}] if content else []
    return [
        {"text": text_of_part(part, f"{path}[{index}]", vendor)}
        for index, part in enumerate(as_list(content, path))
    ]


def _user_parts(content: Any, path: str, vendor: str) -> list[dict]:
    if isinstance(content, str):
        return [{"text": content}]
    return translate_parts(content, f"{path}.content", vendor, USER_PARTS)


def _text_part(part: dict, path: str, vendor: str) -> dict:
    return {"text": text_of_part(part, path, vendor)}


def _image_part(part: dict, path: str, vendor: str) -> dict:
    url = read_image_url(part, path, vendor)
    url_path = f"{path}.image_url.url"
    if url.startswith(("https://", "http://")):
        raise untranslatable(
            url_path,
            vendor,
            "an http(s) URL",
            why="Gemini reads images from inline data or its own file URIs only; send a data URL",
        )
    data_url = split_data_url(url)
    if data_url is None or not data_url[0].startswith("image/"):
        raise untranslatable(url_path, vendor, data_url[0] if data_url else None)
    return {"inlineData": {"mimeType": data_url[0], "data": data_url[1]}}


def _file_part(part: dict, path: str, vendor: str) -> dict:
    # `filename` is dropped (the module docstring).
    media_type, data = read_file_data(part, path, vendor)
    if not media_type:
        raise untranslatable(
            f"{path}.file.file_data", vendor, why="a data URL naming its media type is needed"
        )
    return {"inlineData": {"mimeType": media_type, "data": data}}


def _audio_part(part: dict, path: str, vendor: str) -> dict:
    refuse_rest(part, handled=frozenset({"type", "input_audio"}), path=path, vendor=vendor)
    audio_path = f"{path}.input_audio"
    audio = as_dict(part.get("input_audio"), audio_path)
    refuse_rest(audio, handled=frozenset({"data", "format"}), path=audio_path, vendor=vendor)
    media_type = AUDIO_FORMATS.get(audio.get("format"))
    if media_type is None:
        raise untranslatable(f"{audio_path}.format", vendor, str(audio.get("format")))
    data = as_text(audio.get("data"), f"{audio_path}.data")
    return {"inlineData": {"mimeType": media_type, "data": data}}


USER_PARTS: dict[Any, PartTranslator] = {
    "text": _text_part,
    "image_url": _image_part,
    "file": _file_part,
    "input_audio": _audio_part,
}


def _model_parts(message: ChatMessage, vendor: str, call_names: dict[str, str]) -> list[dict]:
    content, path = message.content, message.path
    parts: list[dict] = []
    if isinstance(content, str):
        parts += [{"text": content}] if content else []
    elif content is not None:
        for index, part in enumerate(as_list(content, f"{path}.content")):
            text = text_of_part(part, f"{path}.content[{index}]", vendor)
            parts += [{"text": text}] if text else []
    for index, raw in enumerate(message.tool_calls):
        call = read_tool_call(raw, f"{path}.tool_calls[{index}]", vendor)
        call_names[call.id] = call.name
        parts.append({"functionCall": {"name": call.name, "args": call.arguments}})
    return parts


def _function_response(message: ChatMessage, vendor: str, call_names: dict[str, str]) -> dict:
    name = call_names.get(message.tool_call_id)
    if name is None:
        raise untranslatable(
            f"{message.path}.tool_call_id",
            vendor,
            why="Gemini answers a call by its function's name, and no earlier assistant "
            "message makes this call",
        )
    content = message.content
    content_path = f"{message.path}.content"
    if isinstance(content, str):
        text = content
    elif is_neutral(content):
        text = ""
    else:
        text = "".join(
            text_of_part(part, f"{content_path}[{index}]", vendor)
            for index, part in enumerate(as_list(content, content_path))
        )
    return {"functionResponse": {"name": name, "response": {TOOL_OUTPUT: text}}}


def _tools(tools: Any, vendor: str) -> list[dict]:
    if tools is None:
        return []
    return [
        _declaration(tool, f"tools[{index}]", vendor)
        for index, tool in enumerate(as_list(tools, "tools"))
    ]


def _declaration(tool: Any, path: str, vendor: str) -> dict:
    # `strict` is read from the body by _strict_tools: it is the calling mode's, not the tool's.
    function = read_function_tool(tool, path, vendor)
    declaration: dict[str, Any] = {"name": function.name}
    if function.description is not None:
        declaration["description"] = function.description
    if function.parameters is not None:
        declaration["parametersJsonSchema"] = function.parameters
    return declaration


def _strict_tools(body: dict) -> bool:
    return any(
        isinstance(tool, dict)
        and isinstance(tool.get("function"), dict)
        and tool["function"].get("strict") is True
        for tool in body.get("tools") or ()
    )


def _tool_config(body: dict, tools: list[dict], vendor: str) -> dict:
    """Translate tool_choice (and a parallel_tool_calls it cannot honour) into Gemini's
    functionCallingConfig; nothing for the default (AUTO without strict tools)."""
    choice = body.get("tool_choice")
    auto = "VALIDATED" if _strict_tools(body) else "AUTO"
    if choice is None or choice == "auto":
        config: dict[str, Any] = {"mode": auto} if auto != "AUTO" else {}
    elif choice == "none":
        config = {"mode": "NONE"}
    elif choice == "required":
        config = {"mode": "ANY"}
    elif isinstance(choice, str):
        raise untranslatable("tool_choice", vendor, choice)
    else:
        config = _named_choice(as_dict(choice, "tool_choice"), vendor)
    parallel = read_parallel_tool_calls(body)
    if parallel is False and tools and config.get("mode") != "NONE":
        raise untranslatable(
            "parallel_tool_calls",
            vendor,
            "false",
            why="Gemini has no switch for one call at a time",
        )
    return config


def _named_choice(choice: dict, vendor: str) -> dict:
    kind = choice.get("type")
    if kind == "function":
        name = read_function_choice(choice, "tool_choice", vendor)
        return {"mode": "ANY", "allowedFunctionNames": [name]}
    if kind != "allowed_tools":
        raise untranslatable("tool_choice.type", vendor, str(kind))
    refuse_rest(
        choice, handled=frozenset({"type", "allowed_tools"}), path="tool_choice", vendor=vendor
    )
    path = "tool_choice.allowed_tools"
    allowed = as_dict(choice.get("allowed_tools"), path)
    refuse_rest(allowed, handled=frozenset({"mode", "tools"}), path=path, vendor=vendor)
    if allowed.get("mode") != "required":
        raise untranslatable(
            f"{path}.mode",
            vendor,
            str(allowed.get("mode")),
            why="Gemini restricts the functions it may call only when a call is required",
        )
    names = [
        read_function_choice(tool, f"{path}.tools[{index}]", vendor)
        for index, tool in enumerate(as_list(allowed.get("tools"), f"{path}.tools"))
    ]
    return {"mode": "ANY", "allowedFunctionNames": names}


def _response_format(response_format: Any, vendor: str) -> dict:
    response_format = as_dict(response_format, "response_format")
    kind = response_format.get("type")
    if kind == "text":
        refuse_rest(
            response_format, handled=frozenset({"type"}), path="response_format", vendor=vendor
        )
        return {}
    if kind == "json_object":
        refuse_rest(
            response_format, handled=frozenset({"type"}), path="response_format", vendor=vendor
        )
        return {"responseMimeType": "application/json"}
    if kind != "json_schema":
        raise untranslatable("response_format.type", vendor, str(kind))
    # `strict`: Gemini keeps an answer to its responseJsonSchema either way; the name labels
    # the format for the client only; a description has no place.
    json_schema = read_json_schema_format(response_format, vendor, described=False)
    return {"responseMimeType": "application/json", "responseJsonSchema": json_schema.schema}


def _reasoning_effort(effort: Any, vendor: str) -> dict:
    budget = THINKING_BUDGETS.get(effort) if isinstance(effort, str) else None
    if budget is None:
        raise untranslatable("reasoning_effort", vendor, str(effort))
    return {"thinkingConfig": {"thinkingBudget": budget}}


def _stop(stop: Any, vendor: str) -> dict:
    sequences = [stop] if isinstance(stop, str) else as_list(stop, "stop")
    return {"stopSequences": sequences} if sequences else {}


def _candidates(n: Any, vendor: str) -> dict:
    return {} if n == 1 else {"candidateCount": n}


def _renamed(name: str, *, default: Any = None):
    def translate(value: Any, vendor: str) -> dict:
        return {} if value == default and default is not None else {name: value}

    return translate


# Each handled into generationConfig; looked up with the client's field name.
GENERATION_FIELDS = {
    "temperature": _renamed("temperature"),
    "top_p": _renamed("topP"),
    "stop": _stop,
    "n": _candidates,
    "seed": _renamed("seed"),
    "presence_penalty": _renamed("presencePenalty", default=0),
    "frequency_penalty": _renamed("frequencyPenalty", default=0),
    "response_format": _response_format,
    "reasoning_effort": _reasoning_effort,
}
HANDLED = frozenset({"messages", "tools", "tool_choice", "parallel_tool_calls"})


def vendor_body(payload: dict, *, max_tokens: int) -> bytes:
    """Build the vendor's body: the translated payload with Tollgate's output cap set."""
    config = {**(payload.get("generationConfig") or {}), "maxOutputTokens": max_tokens}
    return orjson.dumps({**payload, "generationConfig": config})


def candidate_count(payload: dict) -> int:
    """Return how many candidates a translated body asks for."""
    count = (payload.get("generationConfig") or {}).get("candidateCount")
    return count if isinstance(count, int) and count > 1 else 1
