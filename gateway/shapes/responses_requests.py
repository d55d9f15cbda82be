"""Translate an OpenAI Responses API request body into a chat-completions body, for vendors
that speak chat completions only (an Anthropic vendor then gets it through
requests_to_anthropic.py). The answer comes back through responses_answers.py, or
responses_streams.py.

Rules (those of gateway/shapes/fields.py, with refusals worded alike):

- Nothing is silently dropped: a field, item, part or value with no faithful chat
  counterpart is refused, <path> as the client wrote it (`input[2].type`,
  `tools[0].type`). A neutral value (a field's own default such as `truncation: "disabled"`)
  asks for nothing and is omitted.
- Owned fields (model, output cap, streaming switches, end-user ids, `store`, fallback model)
  are left out: the adapter sets them. The stateful fields (`previous_response_id`,
  `conversation`, `background`, `prompt`) are refused by the caller before it calls us.
- Dropped on purpose, since they ask nothing of the answer:
  - `reasoning` input items. They are a vendor's own hidden state (encrypted, or a summary of
    it) handed back so that vendor can resume its thinking; a chat vendor cannot take them,
    and its answer does not depend on them.
  - The `id`, `status` and `phase` of a replayed item, and the `name` of a
    function_call_output (chat ties a result to its call by the call id alone).
  - `include: ["reasoning.encrypted_content"]`: no reasoning item comes back to carry it.

What the translation normalises:

- `instructions` is a leading system message. Consecutive function_call items, with the
  assistant message right before them, are one chat assistant message with tool_calls.
- A function tool without `strict` goes without it, so with chat's default (not strict) where
  the Responses API defaults to strict: forcing strict would refuse schemas it cannot enforce.
- `include: ["message.output_text.logprobs"]` or a positive `top_logprobs` ask chat for
  `logprobs`; the vendor's token log probabilities come back on the output_text part.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.shapes.common import RESPONSES_OWNED, RESPONSES_STATEFUL
from gateway.shapes.fields import (
    PROMPT_CACHE_DEFAULTS,
    PartTranslator,
    as_dict,
    as_list,
    as_text,
    malformed,
    refuse_rest,
    renamed,
    translate_parts,
    untranslatable,
)

# ---------------------------------------------------------------- requests: Responses -> chat

# How a stream is sent: the chat vendor's own stream options are Tollgate's to set.
STREAM_SWITCHES = frozenset({"stream_options"})

# The Responses API's own defaults: sent explicitly they ask for nothing a chat vendor lacks.
RESPONSES_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "truncation": ("disabled",),
    "image": ({"context_compression": "auto"},),
    "prompt_cache_options": PROMPT_CACHE_DEFAULTS,
}
DIRECT_CALLER: dict[str, tuple[Any, ...]] = {"caller": ({"type": "direct"},)}

CHAT_SERVICE_TIERS = frozenset({"auto", "default", "flex", "scale", "priority", "fast"})
TOOL_CHOICES = frozenset({"auto", "none", "required"})
IMAGE_URL_SCHEMES = ("https://", "http://", "data:")
LOGPROBS_INCLUDE = "message.output_text.logprobs"
NEUTRAL_INCLUDES = frozenset({"reasoning.encrypted_content"})

TOP_LEVEL = frozenset(
    {
        "instructions",
        "input",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "reasoning",
        "include",
        "top_logprobs",
    }
)


def responses_request_to_chat(body: dict, *, vendor_kind: str) -> dict:
    """Return the chat-completions body for a Responses API body, Tollgate's owned fields left
    out; raise InvalidRequest for what has no faithful translation."""
    body = as_dict(body, "body")
    refuse_rest(
        body,
        handled=RESPONSES_OWNED
        | STREAM_SWITCHES
        | frozenset(RESPONSES_STATEFUL)
        | TOP_LEVEL
        | RESPONSES_FIELDS.keys(),
        path="",
        vendor=vendor_kind,
        defaults=RESPONSES_DEFAULTS,
    )
    messages = _instructions(body.get("instructions"))
    messages += _chat_messages(body.get("input"), vendor_kind)
    out: dict[str, Any] = {"messages": messages}
    out.update(_chat_tools(body.get("tools"), vendor_kind))
    out.update(_chat_tool_choice(body, "tools" in out, vendor_kind))
    for key, translate in RESPONSES_FIELDS.items():
        if body.get(key) is not None:
            out.update(translate(body[key], vendor_kind))
    out.update(_chat_text(body.get("text"), vendor_kind))
    out.update(_chat_reasoning(body.get("reasoning"), vendor_kind))
    out.update(_chat_logprobs(body, vendor_kind))
    return out


def _instructions(instructions: Any) -> list[dict]:
    if instructions is None or instructions == "":
        return []
    return [{"role": "system", "content": as_text(instructions, "instructions")}]


def _chat_messages(value: Any, vendor: str) -> list[dict]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise malformed("input", "a string or a list")
    messages: list[dict] = []
    for index, raw in enumerate(value):
        path = f"input[{index}]"
        item = as_dict(raw, path)
        kind = item.get("type") or "message"
        translate = INPUT_ITEMS.get(kind)
        if translate is None:
            raise untranslatable(f"{path}.type", vendor, str(kind))
        translate(messages, item, path, vendor)
    return messages


def _message_item(messages: list[dict], item: dict, path: str, vendor: str) -> None:
    refuse_rest(
        item,
        handled=frozenset({"type", "role", "content", "id", "status", "phase"}),
        path=path,
        vendor=vendor,
    )
    role: Any = item.get("role")  # the client's value; a ROLES key once it translates
    translate = ROLES.get(role)
    if translate is None:
        raise untranslatable(f"{path}.role", vendor, str(role))
    messages.append(translate(role, item.get("content"), f"{path}.content", vendor))


def _instruction_message(role: str, content: Any, path: str, vendor: str) -> dict:
    # Chat system and developer messages hold text only.
    if isinstance(content, str):
        return {"role": role, "content": content}
    parts = [
        _text_part(part, f"{path}[{index}]", vendor)
        for index, part in enumerate(as_list(content, path))
    ]
    return {"role": role, "content": parts}


def _user_message(role: str, content: Any, path: str, vendor: str) -> dict:
    if isinstance(content, str):
        return {"role": "user", "content": content}
    return {"role": "user", "content": translate_parts(content, path, vendor, USER_PARTS)}


def _assistant_message(role: str, content: Any, path: str, vendor: str) -> dict:
    """Translate an assistant turn: its output_text parts are text, its refusal parts the chat
    message's `refusal`."""
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[dict] = []
    refusals: list[str] = []
    for index, raw in enumerate(as_list(content, path)):
        where = f"{path}[{index}]"
        part = as_dict(raw, where)
        kind = part.get("type")
        if kind == "output_text":
            # Logprobs measured the earlier answer and ask nothing of this one; annotations
            # (citations) would be lost, so they are refused unless empty.
            handled = frozenset({"type", "text", "logprobs"})
            refuse_rest(part, handled=handled, path=where, vendor=vendor)
            texts.append({"type": "text", "text": as_text(part.get("text"), f"{where}.text")})
        elif kind == "refusal":
            refuse_rest(part, handled=frozenset({"type", "refusal"}), path=where, vendor=vendor)
            refusals.append(as_text(part.get("refusal"), f"{where}.refusal"))
        else:
            raise untranslatable(f"{where}.type", vendor, str(kind))
    message: dict[str, Any] = {"role": "assistant", "content": texts or None}
    if refusals:
        message["refusal"] = "".join(refusals)
    elif not texts:
        message["content"] = ""
    return message


def _text_part(part: Any, path: str, vendor: str) -> dict:
    part = as_dict(part, path)
    if part.get("type") != "input_text":
        raise untranslatable(f"{path}.type", vendor, str(part.get("type")))
    refuse_rest(part, handled=frozenset({"type", "text"}), path=path, vendor=vendor)
    return {"type": "text", "text": as_text(part.get("text"), f"{path}.text")}


def _image_part(part: dict, path: str, vendor: str) -> dict:
    # An uploaded `file_id` lives at OpenAI: no other vendor can read it.
    handled = frozenset({"type", "image_url", "detail"})
    refuse_rest(part, handled=handled, path=path, vendor=vendor)
    url_path = f"{path}.image_url"
    url = as_text(part.get("image_url"), url_path)
    if not url.startswith(IMAGE_URL_SCHEMES):
        raise untranslatable(url_path, vendor)
    image = {"url": url}
    if part.get("detail") is not None:
        image["detail"] = part["detail"]
    return {"type": "image_url", "image_url": image}


def _file_part(part: dict, path: str, vendor: str) -> dict:
    # `file_id` and `file_url` point at files a chat vendor cannot fetch; only data travels.
    refuse_rest(
        part,
        handled=frozenset({"type", "file_data", "filename"}),
        path=path,
        vendor=vendor,
        defaults={"detail": ("auto",)},
    )
    file = {"file_data": as_text(part.get("file_data"), f"{path}.file_data")}
    if part.get("filename") is not None:
        file["filename"] = as_text(part["filename"], f"{path}.filename")
    return {"type": "file", "file": file}


def _function_call_item(messages: list[dict], item: dict, path: str, vendor: str) -> None:
    """Add a call to the assistant message before it: chat holds all of a turn's calls, and
    the text said with them, in one message."""
    refuse_rest(
        item,
        handled=frozenset({"type", "call_id", "name", "arguments", "id", "status"}),
        path=path,
        vendor=vendor,
        defaults=DIRECT_CALLER,
    )
    call = {
        "id": as_text(item.get("call_id"), f"{path}.call_id"),
        "type": "function",
        "function": {
            "name": as_text(item.get("name"), f"{path}.name"),
            "arguments": as_text(item.get("arguments"), f"{path}.arguments"),
        },
    }
    if messages and messages[-1]["role"] == "assistant":
        messages[-1].setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _function_call_output_item(messages: list[dict], item: dict, path: str, vendor: str) -> None:
    refuse_rest(
        item,
        handled=frozenset({"type", "call_id", "output", "id", "status", "name"}),
        path=path,
        vendor=vendor,
        defaults=DIRECT_CALLER,
    )
    output = item.get("output")
    output_path = f"{path}.output"
    if isinstance(output, str):
        content: str | list[dict] = output
    else:
        # A chat tool message holds text only: an image or file result has no counterpart.
        content = [
            _text_part(part, f"{output_path}[{index}]", vendor)
            for index, part in enumerate(as_list(output, output_path))
        ]
    messages.append(
        {
            "role": "tool",
            "tool_call_id": as_text(item.get("call_id"), f"{path}.call_id"),
            "content": content,
        }
    )


def _reasoning_item(messages: list[dict], item: dict, path: str, vendor: str) -> None:
    """Drop a reasoning item: see the module docstring."""


def _chat_tools(tools: Any, vendor: str) -> dict:
    if tools is None:
        return {}
    translated = [
        _chat_tool(tool, f"tools[{index}]", vendor)
        for index, tool in enumerate(as_list(tools, "tools"))
    ]
    return {"tools": translated} if translated else {}


def _chat_tool(tool: Any, path: str, vendor: str) -> dict:
    tool = as_dict(tool, path)
    # Built-in tools (web search, file search, computer, MCP, ...) run at OpenAI.
    if tool.get("type") != "function":
        raise untranslatable(f"{path}.type", vendor, str(tool.get("type")))
    refuse_rest(
        tool,
        handled=frozenset({"type", "name", "description", "parameters", "strict"}),
        path=path,
        vendor=vendor,
        defaults={"allowed_callers": (["direct"],)},
    )
    function: dict[str, Any] = {"name": as_text(tool.get("name"), f"{path}.name")}
    if tool.get("description") is not None:
        function["description"] = as_text(tool["description"], f"{path}.description")
    if tool.get("parameters") is not None:
        function["parameters"] = as_dict(tool["parameters"], f"{path}.parameters")
    if tool.get("strict") is not None:
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _chat_tool_choice(body: dict, has_tools: bool, vendor: str) -> dict:
    choice = body.get("tool_choice")
    out: dict[str, Any] = {}
    if isinstance(choice, str):
        if choice not in TOOL_CHOICES:
            raise untranslatable("tool_choice", vendor, choice)
        # Chat refuses a tool_choice without tools; "auto" and "none" then ask for nothing.
        if has_tools or choice == "required":
            out["tool_choice"] = choice
    elif choice is not None:
        choice = as_dict(choice, "tool_choice")
        if choice.get("type") != "function":
            raise untranslatable("tool_choice.type", vendor, str(choice.get("type")))
        refuse_rest(choice, handled=frozenset({"type", "name"}), path="tool_choice", vendor=vendor)
        name = as_text(choice.get("name"), "tool_choice.name")
        out["tool_choice"] = {"type": "function", "function": {"name": name}}
    parallel = body.get("parallel_tool_calls")
    if parallel not in (None, True, False):
        raise malformed("parallel_tool_calls", "a boolean")
    # Chat refuses parallel_tool_calls without tools, where it means nothing anyway.
    if parallel is not None and has_tools:
        out["parallel_tool_calls"] = parallel
    return out


def _chat_text(text: Any, vendor: str) -> dict:
    if text is None:
        return {}
    text = as_dict(text, "text")
    refuse_rest(text, handled=frozenset({"format", "verbosity"}), path="text", vendor=vendor)
    out: dict[str, Any] = {}
    if text.get("format") is not None:
        out.update(_chat_response_format(as_dict(text["format"], "text.format"), vendor))
    if text.get("verbosity") is not None:
        out["verbosity"] = text["verbosity"]
    return out


def _chat_response_format(form: dict, vendor: str) -> dict:
    kind = form.get("type")
    path = "text.format"
    if kind in ("text", "json_object"):
        refuse_rest(form, handled=frozenset({"type"}), path=path, vendor=vendor)
        return {} if kind == "text" else {"response_format": {"type": "json_object"}}
    if kind != "json_schema":
        raise untranslatable(f"{path}.type", vendor, str(kind))
    refuse_rest(
        form,
        handled=frozenset({"type", "name", "schema", "strict", "description"}),
        path=path,
        vendor=vendor,
    )
    schema: dict[str, Any] = {
        "name": as_text(form.get("name"), f"{path}.name"),
        "schema": as_dict(form.get("schema"), f"{path}.schema"),
    }
    for key in ("strict", "description"):
        if form.get(key) is not None:
            schema[key] = form[key]
    return {"response_format": {"type": "json_schema", "json_schema": schema}}


def _chat_reasoning(reasoning: Any, vendor: str) -> dict:
    if reasoning is None:
        return {}
    reasoning = as_dict(reasoning, "reasoning")
    # Chat answers carry no reasoning summary: asking for one has no counterpart.
    for key in ("summary", "generate_summary"):
        if reasoning.get(key) is not None:
            raise untranslatable(f"reasoning.{key}", vendor, str(reasoning[key]))
    refuse_rest(
        reasoning,
        handled=frozenset({"effort", "summary", "generate_summary"}),
        path="reasoning",
        vendor=vendor,
        defaults={"context": ("auto",), "mode": ("standard",)},
    )
    effort = reasoning.get("effort")
    return {"reasoning_effort": effort} if effort is not None else {}


def _chat_logprobs(body: dict, vendor: str) -> dict:
    wanted = False
    for index, entry in enumerate(as_list(body.get("include") or [], "include")):
        if entry == LOGPROBS_INCLUDE:
            wanted = True
        elif entry not in NEUTRAL_INCLUDES:
            raise untranslatable(f"include[{index}]", vendor, str(entry))
    top = body.get("top_logprobs")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int)):
        raise malformed("top_logprobs", "an integer")
    if not wanted and not top:
        return {}
    out: dict[str, Any] = {"logprobs": True}
    if top is not None:
        out["top_logprobs"] = top
    return out


def _chat_service_tier(tier: Any, vendor: str) -> dict:
    if tier not in CHAT_SERVICE_TIERS:
        raise untranslatable("service_tier", vendor, str(tier))
    return {"service_tier": tier}


def _chat_truncation(truncation: Any, vendor: str) -> dict:
    # "auto" lets OpenAI drop the conversation's middle to fit: chat vendors refuse instead.
    if truncation != "disabled":
        raise untranslatable("truncation", vendor, str(truncation))
    return {}


ItemTranslator = Callable[[list[dict], dict, str, str], None]

INPUT_ITEMS: dict[str, ItemTranslator] = {
    "message": _message_item,
    "function_call": _function_call_item,
    "function_call_output": _function_call_output_item,
    "reasoning": _reasoning_item,
}

ROLES: dict[Any, Callable[[str, Any, str, str], dict]] = {
    "user": _user_message,
    "system": _instruction_message,
    "developer": _instruction_message,
    "assistant": _assistant_message,
}

USER_PARTS: dict[Any, PartTranslator] = {
    "input_text": _text_part,
    "input_image": _image_part,
    "input_file": _file_part,
}

RESPONSES_FIELDS: dict[str, Callable[[Any, str], dict]] = {
    "temperature": renamed("temperature"),
    "top_p": renamed("top_p"),
    "metadata": renamed("metadata"),
    "prompt_cache_key": renamed("prompt_cache_key"),
    "prompt_cache_retention": renamed("prompt_cache_retention"),
    "service_tier": _chat_service_tier,
    "truncation": _chat_truncation,
}
