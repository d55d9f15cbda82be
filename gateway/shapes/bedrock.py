"""AWS Bedrock's Converse API, both ways: an OpenAI chat-completions body into a Converse body,
and a Converse answer (whole, or ConverseStream's events) back into the OpenAI chat shape.

A Bedrock profile speaks OpenAI chat inside Tollgate: gateway/plan.py hands it a chat body
(an Anthropic or Responses client's translated first), and `chat_to_converse` takes it into
Converse at plan time, under the rules of gateway/shapes/fields.py: a field is translated,
or dropped only where it cannot change the answer (below), or refused naming it. Answers
come back as OpenAI chat completions and chunks, which every client shape renders.

Translated: system and developer messages into `system` (text blocks, in order, wherever
they stood); user, assistant and tool messages into alternating `messages` (neighbours of
one role merged: Converse wants user and assistant to alternate, and tool results are user
content there); text parts into `{"text"}` blocks (an empty text is left out: Converse
refuses blank text); `data:` image URLs into `{"image": {"format", "source": {"bytes"}}}`;
assistant tool calls into `toolUse` blocks, tool messages into `toolResult` blocks; `tools`
into `toolConfig.tools[].toolSpec` and `tool_choice` into `toolConfig.toolChoice`
(auto / required -> any / a function -> tool); `max_tokens` (owned: the adapter sets the
hold's cap), `temperature`, `top_p` and `stop` into `inferenceConfig`; `response_format`
`json_schema` into `outputConfig.textFormat` (Converse's structured output: the schema as a
JSON string, its name and description; the answer is the JSON text, as OpenAI's is).

Dropped, as they cannot change the answer: `prompt_cache_key` and `prompt_cache_retention`
(OpenAI's cache routing and lifetime hints: cost only; Bedrock caches only at cache points,
which a chat body has no way to ask for) and the owned fields (the raw end-user id never
leaves: Converse has no end-user field). Neutral values (None, false, empty, OpenAI's
defaults such as `n: 1`) ask for nothing.

Refused: `n` above 1 (Converse answers once), image URLs that are not `data:` URLs (Converse
takes image bytes, not links), file parts, `json_object` mode (Converse has a schema mode
only), `tool_choice: "none"` beside tools and `parallel_tool_calls: false` (Converse can
neither forbid calling the tools it is given nor keep calls sequential), `temperature`
above 1, and every other OpenAI field (penalties, logit_bias, logprobs, seed,
reasoning_effort, audio, web search, ...): Converse has no counterpart.

Answers, Converse -> OpenAI chat, whole and streamed: gateway/shapes/bedrock_answers.py.
"""

from __future__ import annotations

from typing import Any

from gateway.shapes.common import OPENAI_OWNED
from gateway.shapes.fields import (
    OPENAI_CHAT_DEFAULTS,
    SYSTEM_ROLES,
    ChatMessage,
    as_dict,
    as_list,
    chat_messages,
    compact_json,
    is_neutral,
    read_function_choice,
    read_function_tool,
    read_image_url,
    read_json_schema_format,
    read_parallel_tool_calls,
    read_tool_call,
    refuse_rest,
    split_data_url,
    text_of_part,
    untranslatable,
)

VENDOR = "bedrock"

# Cost hints that cannot change an answer: dropped (the module docstring).
DROPPED = frozenset({"prompt_cache_key", "prompt_cache_retention"})
HANDLED = frozenset(
    {
        "messages",
        "temperature",
        "top_p",
        "stop",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
    }
)
IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}
TOOL_CHOICES: dict[str, dict[str, dict]] = {"auto": {"auto": {}}, "required": {"any": {}}}
EMPTY_SCHEMA = {"type": "object", "properties": {}}


# ---------------------------------------------------------------- requests: chat -> Converse


def chat_to_converse(body: dict, *, vendor_kind: str = VENDOR) -> dict:
    """Return the Converse body for an OpenAI chat-completions body, owned fields left out
    (the adapter sets `inferenceConfig.maxTokens`); raise InvalidRequest for what has no
    faithful translation, naming the field."""
    body = as_dict(body, "body")
    refuse_rest(
        body,
        handled=OPENAI_OWNED | HANDLED | DROPPED,
        path="",
        vendor=vendor_kind,
        defaults=OPENAI_CHAT_DEFAULTS,  # OpenAI's own: they ask for nothing Converse lacks
    )
    system, messages = _converse_messages(body.get("messages"), vendor_kind)
    out: dict[str, Any] = {"messages": messages}
    if system:
        out["system"] = system
    inference = _inference_config(body, vendor_kind)
    if inference:
        out["inferenceConfig"] = inference
    tool_config = _tool_config(body, vendor_kind)
    if tool_config:
        out["toolConfig"] = tool_config
    output_config = _output_config(body.get("response_format"), vendor_kind)
    if output_config:
        out["outputConfig"] = output_config
    return out


def converse_body(payload: dict, *, max_tokens: int) -> dict:
    """Return the Converse body a call sends: the plan's payload with the hold's output cap."""
    inference = {**(payload.get("inferenceConfig") or {}), "maxTokens": max_tokens}
    return {**payload, "inferenceConfig": inference}


def _converse_messages(messages: Any, vendor: str) -> tuple[list[dict], list[dict]]:
    system: list[dict] = []
    turns: list[dict] = []
    for message in chat_messages(messages, vendor):
        if message.role in SYSTEM_ROLES:
            system += _text_blocks(message.content, f"{message.path}.content", vendor)
            continue
        if message.role == "user":
            turn = _user_turn(message, vendor)
        elif message.role == "assistant":
            turn = _assistant_turn(message, vendor)
        else:
            turn = _tool_turn(message, vendor)
        if turns and turns[-1]["role"] == turn["role"]:
            turns[-1]["content"] += turn["content"]
        else:
            turns.append(turn)
    return system, turns


def _text_blocks(content: Any, path: str, vendor: str) -> list[dict]:
    """Return a text-only content's blocks: a string, or text parts (blank ones left out)."""
    if isinstance(content, str):
        return [{"text": content}] if content else []
    blocks = []
    for index, raw in enumerate(as_list(content, path)):
        blocks += _text_part(raw, f"{path}[{index}]", vendor)
    return blocks


def _text_part(part: Any, path: str, vendor: str) -> list[dict]:
    text = text_of_part(part, path, vendor)
    return [{"text": text}] if text else []


def _user_turn(message: ChatMessage, vendor: str) -> dict:
    content = message.content
    if isinstance(content, str):
        return {"role": "user", "content": [{"text": content}] if content else []}
    blocks = []
    for index, raw in enumerate(as_list(content, f"{message.path}.content")):
        part_path = f"{message.path}.content[{index}]"
        part = as_dict(raw, part_path)
        kind = part.get("type")
        if kind == "text":
            blocks += _text_part(part, part_path, vendor)
        elif kind == "image_url":
            blocks.append(_image_block(part, part_path, vendor))
        else:
            raise untranslatable(f"{part_path}.type", vendor, str(kind))
    return {"role": "user", "content": blocks}


def _image_block(part: dict, path: str, vendor: str) -> dict:
    url = read_image_url(part, path, vendor)
    url_path = f"{path}.image_url.url"
    data_url = split_data_url(url)
    if data_url is None:
        raise untranslatable(
            url_path, vendor, why="Converse takes image bytes (a base64 data: URL), not links"
        )
    media_type, data = data_url
    if media_type not in IMAGE_FORMATS:
        raise untranslatable(url_path, vendor, media_type)
    return {"image": {"format": IMAGE_FORMATS[media_type], "source": {"bytes": data}}}


def _assistant_turn(message: ChatMessage, vendor: str) -> dict:
    content, path = message.content, message.path
    blocks = [] if content is None else _text_blocks(content, f"{path}.content", vendor)
    blocks += [
        _tool_use(call, f"{path}.tool_calls[{index}]", vendor)
        for index, call in enumerate(message.tool_calls)
    ]
    return {"role": "assistant", "content": blocks}


def _tool_use(call: Any, path: str, vendor: str) -> dict:
    read = read_tool_call(call, path, vendor)
    return {"toolUse": {"toolUseId": read.id, "name": read.name, "input": read.arguments}}


def _tool_turn(message: ChatMessage, vendor: str) -> dict:
    result = {
        "toolUseId": message.tool_call_id,
        # A toolResult needs content: an empty result is one empty text.
        "content": _text_blocks(message.content, f"{message.path}.content", vendor)
        or [{"text": ""}],
    }
    return {"role": "user", "content": [{"toolResult": result}]}


def _inference_config(body: dict, vendor: str) -> dict:
    config: dict[str, Any] = {}
    temperature = body.get("temperature")
    if temperature is not None:
        # OpenAI samples at 0..2, Converse at 0..1: above 1 means nothing there.
        if isinstance(temperature, int | float) and temperature > 1:
            raise untranslatable("temperature", vendor, "above 1")
        config["temperature"] = temperature
    if body.get("top_p") is not None:
        config["topP"] = body["top_p"]
    stop = body.get("stop")
    if stop is not None:
        sequences = [stop] if isinstance(stop, str) else as_list(stop, "stop")
        if sequences:
            config["stopSequences"] = sequences
    return config


def _tool_config(body: dict, vendor: str) -> dict:
    tools = [
        _tool_spec(tool, f"tools[{index}]", vendor)
        for index, tool in enumerate(as_list(body.get("tools") or [], "tools"))
    ]
    choice = body.get("tool_choice")
    parallel = read_parallel_tool_calls(body)
    if not tools:
        # Without tools a choice asks for nothing, but for a tool that is not there.
        if isinstance(choice, dict):
            raise untranslatable(
                "tool_choice", vendor, why="it names a tool, and no tools are given"
            )
        return {}
    if choice == "none":
        raise untranslatable(
            "tool_choice",
            vendor,
            "none",
            why="Converse cannot forbid calling the tools it is given",
        )
    if parallel is False:
        raise untranslatable(
            "parallel_tool_calls", vendor, "false", why="Converse cannot keep tool calls sequential"
        )
    config: dict[str, Any] = {"tools": tools}
    if choice is not None:
        config["toolChoice"] = _tool_choice(choice, vendor)
    return config


def _tool_spec(tool: Any, path: str, vendor: str) -> dict:
    function = read_function_tool(tool, path, vendor)
    spec: dict[str, Any] = {
        "name": function.name,
        "inputSchema": {"json": function.parameters or EMPTY_SCHEMA},
    }
    if function.description:  # Converse refuses an empty description
        spec["description"] = function.description
    # Both guarantee schema-valid tool inputs when asked; false is the default in both.
    if function.strict:
        spec["strict"] = True
    return {"toolSpec": spec}


def _tool_choice(choice: Any, vendor: str) -> dict:
    if isinstance(choice, str):
        if choice not in TOOL_CHOICES:
            raise untranslatable("tool_choice", vendor, choice)
        return TOOL_CHOICES[choice]
    return {"tool": {"name": read_function_choice(choice, "tool_choice", vendor)}}


def _output_config(response_format: Any, vendor: str) -> dict:
    """Translate a `json_schema` response format into Converse's structured output."""
    if is_neutral(response_format) or response_format == {"type": "text"}:
        return {}
    response_format = as_dict(response_format, "response_format")
    kind = response_format.get("type")
    if kind != "json_schema":
        raise untranslatable(
            "response_format.type", vendor, str(kind), why="Converse has a JSON schema mode only"
        )
    # `strict`: Converse always holds the answer to the schema, which strict asks and
    # non-strict allows.
    json_schema = read_json_schema_format(response_format, vendor)
    definition: dict[str, Any] = {
        "schema": compact_json(json_schema.schema),
        "name": json_schema.name,
    }
    if json_schema.description is not None:
        definition["description"] = json_schema.description
    structure = {"jsonSchema": definition}
    return {"textFormat": {"type": "json_schema", "structure": structure}}
