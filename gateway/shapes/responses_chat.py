"""Serve the OpenAI Responses API on vendors that speak chat completions.

A client speaks the Responses shape (`POST /v1/responses`); a vendor that only speaks chat
completions (or Anthropic messages, through `translate`) is sent the chat body these pure
functions build, and its answer, whole or chunk by chunk, comes back as a Responses `response`
object or as its stream events. They know nothing of models, keys or limits.

Rules (those of `translate`, with refusals worded alike):

- Nothing is silently dropped. A field, item, part or value with no faithful chat counterpart
  raises `InvalidRequest("'<path>' [<kind>] cannot be translated for <vendor_kind> vendors.")`,
  <path> as the client wrote it (`input[2].type`, `tools[0].type`). A neutral value (None,
  False, an empty list or dict, a field's own default such as `truncation: "disabled"`) asks
  for nothing and is omitted.
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
- An answer comes from a vendor asked with a translated request, so what it cannot hold (a
  custom tool call, a tool call without an id, a fragment of a call already finished) raises
  ValueError: the vendor broke the contract, not the client.

What the translation normalises:

- `instructions` is a leading system message. Consecutive function_call items, with the
  assistant message right before them, are one chat assistant message with tool_calls.
- A function tool without `strict` goes without it, so with chat's default (not strict) where
  the Responses API defaults to strict: forcing strict would refuse schemas it cannot enforce.
- `include: ["message.output_text.logprobs"]` or a positive `top_logprobs` ask chat for
  `logprobs`; the vendor's token log probabilities come back on the output_text part.
- Item ids are made from the response id: `msg_<id>` for the message, `fc_<id>_<n>` for the
  n-th call. An answer is one message (its text, then any refusal) followed by its calls, the
  order chat vendors send them in. A stream sending text after a call gets it in a message
  after the call, `msg_<id>_<output index>` if the answer had a message already.
- `finish_reason: "length"` is status `incomplete` with reason `max_output_tokens`, and
  `content_filter` is `incomplete` with reason `content_filter`; the last output item, the one
  the vendor stopped in, is `incomplete` too. A stream then ends in `response.incomplete`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

from gateway.shapes.common import RESPONSES_OWNED, RESPONSES_STATEFUL
from gateway.shapes.translate import (
    OPENAI_DEFAULTS,
    _as_dict,
    _as_list,
    _as_text,
    _cannot_arrive,
    _malformed,
    _refuse_rest,
    _renamed,
    untranslatable,
)

# ---------------------------------------------------------------- requests: Responses -> chat

# How a stream is sent: the chat vendor's own stream options are Tollgate's to set.
STREAM_SWITCHES = frozenset({"stream_options"})

# The Responses API's own defaults: sent explicitly they ask for nothing a chat vendor lacks.
RESPONSES_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "truncation": ("disabled",),
    "image": ({"context_compression": "auto"},),
    "prompt_cache_options": OPENAI_DEFAULTS["prompt_cache_options"],
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
    body = _as_dict(body, "body")
    _refuse_rest(
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
    return [{"role": "system", "content": _as_text(instructions, "instructions")}]


def _chat_messages(value: Any, vendor: str) -> list[dict]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise _malformed("input", "a string or a list")
    messages: list[dict] = []
    for index, raw in enumerate(value):
        path = f"input[{index}]"
        item = _as_dict(raw, path)
        kind = item.get("type") or "message"
        translate = INPUT_ITEMS.get(kind)
        if translate is None:
            raise untranslatable(f"{path}.type", vendor, str(kind))
        translate(messages, item, path, vendor)
    return messages


def _message_item(messages: list[dict], item: dict, path: str, vendor: str) -> None:
    _refuse_rest(
        item,
        handled=frozenset({"type", "role", "content", "id", "status", "phase"}),
        path=path,
        vendor=vendor,
    )
    role = item.get("role")
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
        for index, part in enumerate(_as_list(content, path))
    ]
    return {"role": role, "content": parts}


def _user_message(role: str, content: Any, path: str, vendor: str) -> dict:
    if isinstance(content, str):
        return {"role": "user", "content": content}
    parts = []
    for index, raw in enumerate(_as_list(content, path)):
        where = f"{path}[{index}]"
        part = _as_dict(raw, where)
        translate = USER_PARTS.get(part.get("type"))
        if translate is None:
            raise untranslatable(f"{where}.type", vendor, str(part.get("type")))
        parts.append(translate(part, where, vendor))
    return {"role": "user", "content": parts}


def _assistant_message(role: str, content: Any, path: str, vendor: str) -> dict:
    """Translate an assistant turn: its output_text parts are text, its refusal parts the chat
    message's `refusal`."""
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[dict] = []
    refusals: list[str] = []
    for index, raw in enumerate(_as_list(content, path)):
        where = f"{path}[{index}]"
        part = _as_dict(raw, where)
        kind = part.get("type")
        if kind == "output_text":
            # Logprobs measured the earlier answer and ask nothing of this one; annotations
            # (citations) would be lost, so they are refused unless empty.
            handled = frozenset({"type", "text", "logprobs"})
            _refuse_rest(part, handled=handled, path=where, vendor=vendor)
            texts.append({"type": "text", "text": _as_text(part.get("text"), f"{where}.text")})
        elif kind == "refusal":
            _refuse_rest(part, handled=frozenset({"type", "refusal"}), path=where, vendor=vendor)
            refusals.append(_as_text(part.get("refusal"), f"{where}.refusal"))
        else:
            raise untranslatable(f"{where}.type", vendor, str(kind))
    message: dict[str, Any] = {"role": "assistant", "content": texts or None}
    if refusals:
        message["refusal"] = "".join(refusals)
    elif not texts:
        message["content"] = ""
    return message


def _text_part(part: Any, path: str, vendor: str) -> dict:
    part = _as_dict(part, path)
    if part.get("type") != "input_text":
        raise untranslatable(f"{path}.type", vendor, str(part.get("type")))
    _refuse_rest(part, handled=frozenset({"type", "text"}), path=path, vendor=vendor)
    return {"type": "text", "text": _as_text(part.get("text"), f"{path}.text")}


def _image_part(part: dict, path: str, vendor: str) -> dict:
    # An uploaded `file_id` lives at OpenAI: no other vendor can read it.
    handled = frozenset({"type", "image_url", "detail"})
    _refuse_rest(part, handled=handled, path=path, vendor=vendor)
    url_path = f"{path}.image_url"
    url = _as_text(part.get("image_url"), url_path)
    if not url.startswith(IMAGE_URL_SCHEMES):
        raise untranslatable(url_path, vendor)
    image = {"url": url}
    if part.get("detail") is not None:
        image["detail"] = part["detail"]
    return {"type": "image_url", "image_url": image}


def _file_part(part: dict, path: str, vendor: str) -> dict:
    # `file_id` and `file_url` point at files a chat vendor cannot fetch; only data travels.
    _refuse_rest(
        part,
        handled=frozenset({"type", "file_data", "filename"}),
        path=path,
        vendor=vendor,
        defaults={"detail": ("auto",)},
    )
    file = {"file_data": _as_text(part.get("file_data"), f"{path}.file_data")}
    if part.get("filename") is not None:
        file["filename"] = _as_text(part["filename"], f"{path}.filename")
    return {"type": "file", "file": file}


def _function_call_item(messages: list[dict], item: dict, path: str, vendor: str) -> None:
    """Add a call to the assistant message before it: chat holds all of a turn's calls, and
    the text said with them, in one message."""
    _refuse_rest(
        item,
        handled=frozenset({"type", "call_id", "name", "arguments", "id", "status"}),
        path=path,
        vendor=vendor,
        defaults=DIRECT_CALLER,
    )
    call = {
        "id": _as_text(item.get("call_id"), f"{path}.call_id"),
        "type": "function",
        "function": {
            "name": _as_text(item.get("name"), f"{path}.name"),
            "arguments": _as_text(item.get("arguments"), f"{path}.arguments"),
        },
    }
    if messages and messages[-1]["role"] == "assistant":
        messages[-1].setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _function_call_output_item(messages: list[dict], item: dict, path: str, vendor: str) -> None:
    _refuse_rest(
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
            for index, part in enumerate(_as_list(output, output_path))
        ]
    messages.append(
        {
            "role": "tool",
            "tool_call_id": _as_text(item.get("call_id"), f"{path}.call_id"),
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
        for index, tool in enumerate(_as_list(tools, "tools"))
    ]
    return {"tools": translated} if translated else {}


def _chat_tool(tool: Any, path: str, vendor: str) -> dict:
    tool = _as_dict(tool, path)
    # Built-in tools (web search, file search, computer, MCP, ...) run at OpenAI.
    if tool.get("type") != "function":
        raise untranslatable(f"{path}.type", vendor, str(tool.get("type")))
    _refuse_rest(
        tool,
        handled=frozenset({"type", "name", "description", "parameters", "strict"}),
        path=path,
        vendor=vendor,
        defaults={"allowed_callers": (["direct"],)},
    )
    function: dict[str, Any] = {"name": _as_text(tool.get("name"), f"{path}.name")}
    if tool.get("description") is not None:
        function["description"] = _as_text(tool["description"], f"{path}.description")
    if tool.get("parameters") is not None:
        function["parameters"] = _as_dict(tool["parameters"], f"{path}.parameters")
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
        choice = _as_dict(choice, "tool_choice")
        if choice.get("type") != "function":
            raise untranslatable("tool_choice.type", vendor, str(choice.get("type")))
        _refuse_rest(choice, handled=frozenset({"type", "name"}), path="tool_choice", vendor=vendor)
        name = _as_text(choice.get("name"), "tool_choice.name")
        out["tool_choice"] = {"type": "function", "function": {"name": name}}
    parallel = body.get("parallel_tool_calls")
    if parallel not in (None, True, False):
        raise _malformed("parallel_tool_calls", "a boolean")
    # Chat refuses parallel_tool_calls without tools, where it means nothing anyway.
    if parallel is not None and has_tools:
        out["parallel_tool_calls"] = parallel
    return out


def _chat_text(text: Any, vendor: str) -> dict:
    if text is None:
        return {}
    text = _as_dict(text, "text")
    _refuse_rest(text, handled=frozenset({"format", "verbosity"}), path="text", vendor=vendor)
    out: dict[str, Any] = {}
    if text.get("format") is not None:
        out.update(_chat_response_format(_as_dict(text["format"], "text.format"), vendor))
    if text.get("verbosity") is not None:
        out["verbosity"] = text["verbosity"]
    return out


def _chat_response_format(form: dict, vendor: str) -> dict:
    kind = form.get("type")
    path = "text.format"
    if kind in ("text", "json_object"):
        _refuse_rest(form, handled=frozenset({"type"}), path=path, vendor=vendor)
        return {} if kind == "text" else {"response_format": {"type": "json_object"}}
    if kind != "json_schema":
        raise untranslatable(f"{path}.type", vendor, str(kind))
    _refuse_rest(
        form,
        handled=frozenset({"type", "name", "schema", "strict", "description"}),
        path=path,
        vendor=vendor,
    )
    schema: dict[str, Any] = {
        "name": _as_text(form.get("name"), f"{path}.name"),
        "schema": _as_dict(form.get("schema"), f"{path}.schema"),
    }
    for key in ("strict", "description"):
        if form.get(key) is not None:
            schema[key] = form[key]
    return {"response_format": {"type": "json_schema", "json_schema": schema}}


def _chat_reasoning(reasoning: Any, vendor: str) -> dict:
    if reasoning is None:
        return {}
    reasoning = _as_dict(reasoning, "reasoning")
    # Chat answers carry no reasoning summary: asking for one has no counterpart.
    for key in ("summary", "generate_summary"):
        if reasoning.get(key) is not None:
            raise untranslatable(f"reasoning.{key}", vendor, str(reasoning[key]))
    _refuse_rest(
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
    for index, entry in enumerate(_as_list(body.get("include") or [], "include")):
        if entry == LOGPROBS_INCLUDE:
            wanted = True
        elif entry not in NEUTRAL_INCLUDES:
            raise untranslatable(f"include[{index}]", vendor, str(entry))
    top = body.get("top_logprobs")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int)):
        raise _malformed("top_logprobs", "an integer")
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

USER_PARTS: dict[Any, Callable[[dict, str, str], dict]] = {
    "input_text": _text_part,
    "input_image": _image_part,
    "input_file": _file_part,
}

RESPONSES_FIELDS: dict[str, Callable[[Any, str], dict]] = {
    "temperature": _renamed("temperature"),
    "top_p": _renamed("top_p"),
    "metadata": _renamed("metadata"),
    "prompt_cache_key": _renamed("prompt_cache_key"),
    "prompt_cache_retention": _renamed("prompt_cache_retention"),
    "service_tier": _chat_service_tier,
    "truncation": _chat_truncation,
}


# ---------------------------------------------------------------- answers: chat -> Responses

INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


def usage_from_chat(usage: dict) -> dict:
    """Return Responses usage for chat `CompletionUsage`; a count the vendor left out is 0."""
    prompt = usage.get("prompt_tokens") or 0
    completion = usage.get("completion_tokens") or 0
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": prompt_details.get("cached_tokens") or 0,
            # The SDK's type requires it; OpenAI-compatible vendors report it in the details.
            "cache_write_tokens": prompt_details.get("cache_write_tokens") or 0,
        },
        "output_tokens": completion,
        "output_tokens_details": {
            "reasoning_tokens": completion_details.get("reasoning_tokens") or 0
        },
        "total_tokens": usage.get("total_tokens") or prompt + completion,
    }


def chat_completion_to_response(data: dict, *, response_id: str, model: str, request: dict) -> dict:
    """Return the Responses API `response` object for a chat.completion (choices[0] only: the
    translated request asks for one); raise ValueError for what it cannot hold."""
    choices = data.get("choices") or []
    if not choices:
        raise ValueError("A chat.completion without choices has no Responses output.")
    choice = choices[0]
    message = choice.get("message") or {}
    content: list[dict] = []
    if message.get("content"):
        logprobs = _output_logprobs((choice.get("logprobs") or {}).get("content"))
        content.append(_output_text(message["content"], logprobs))
    if message.get("refusal"):
        content.append(_refusal_part(message["refusal"]))
    output = [_message(f"msg_{response_id}", content, "completed")] if content else []
    for index, call in enumerate(message.get("tool_calls") or []):
        if call.get("type", "function") != "function":
            raise _cannot_arrive(f"A chat {call.get('type')!r} tool call")
        function = call.get("function") or {}
        output.append(
            _function_call(
                f"fc_{response_id}_{index}",
                call_id=_call_id(call),
                name=function.get("name") or "",
                arguments=function.get("arguments") or "",
                status="completed",
            )
        )
    status, incomplete = _outcome(choice.get("finish_reason"))
    if output and status == "incomplete":
        output[-1]["status"] = "incomplete"  # the item the vendor stopped in
    return _response(
        response_id=response_id,
        model=model,
        request=request,
        created_at=data.get("created") or int(time.time()),
        status=status,
        output=output,
        usage=usage_from_chat(data.get("usage") or {}),
        incomplete_details=incomplete,
    )


def _outcome(finish_reason: str | None) -> tuple[str, dict | None]:
    reason = INCOMPLETE_REASONS.get(finish_reason or "")
    return ("incomplete", {"reason": reason}) if reason else ("completed", None)


def _call_id(call: dict) -> str:
    if not call.get("id"):
        raise ValueError("A chat tool call without an id cannot become a function_call.")
    return call["id"]


def _response(
    *,
    response_id: str,
    model: str,
    request: dict,
    created_at: int,
    status: str,
    output: list[dict],
    usage: dict | None,
    incomplete_details: dict | None = None,
    error: dict | None = None,
) -> dict:
    """Build a response object: the answer, and the request's settings echoed as the SDK's
    `Response` type expects them (with the API's defaults for those not sent)."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": error,
        "incomplete_details": incomplete_details,
        "model": model,
        "output": output,
        "usage": usage,
        "instructions": request.get("instructions"),
        "tools": request.get("tools") or [],
        "tool_choice": request.get("tool_choice") or "auto",
        "parallel_tool_calls": request.get("parallel_tool_calls") is not False,
        "temperature": request.get("temperature"),
        "top_p": request.get("top_p"),
        "max_output_tokens": request.get("max_output_tokens"),
        "metadata": request.get("metadata") or {},
        "text": {"format": {"type": "text"}, **(request.get("text") or {})},
        "reasoning": {"effort": None, "summary": None, **(request.get("reasoning") or {})},
        "store": False,
        "truncation": "disabled",
        "previous_response_id": None,
        "user": None,
    }


def _message(item_id: str, content: list[dict], status: str) -> dict:
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _output_text(text: str, logprobs: list[dict]) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}


def _refusal_part(refusal: str) -> dict:
    return {"type": "refusal", "refusal": refusal}


def _function_call(item_id: str, *, call_id: str, name: str, arguments: str, status: str) -> dict:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def _token_bytes(entry: dict) -> list[int]:
    # Chat may leave `bytes` out; the Responses part requires it, and it is the token's UTF-8.
    value = entry.get("bytes")
    return value if value is not None else list(entry["token"].encode())


def _output_logprobs(entries: list[dict] | None) -> list[dict]:
    """Return chat token logprobs as an output_text part holds them (bytes included)."""
    return [
        {
            "token": entry["token"],
            "bytes": _token_bytes(entry),
            "logprob": entry["logprob"],
            "top_logprobs": [
                {"token": top["token"], "bytes": _token_bytes(top), "logprob": top["logprob"]}
                for top in entry.get("top_logprobs") or []
            ],
        }
        for entry in entries or []
    ]


def _event_logprobs(entries: list[dict]) -> list[dict]:
    """Return token logprobs as the text delta and done events hold them (no bytes)."""
    return [
        {
            "token": entry["token"],
            "logprob": entry["logprob"],
            "top_logprobs": [
                {"token": top["token"], "logprob": top["logprob"]}
                for top in entry.get("top_logprobs") or []
            ],
        }
        for entry in entries
    ]


# ---------------------------------------------------------------- streams


class ChatStreamToResponses:
    """Turn a chat-completion chunk stream, chunk by chunk, into Responses stream events.

    Items open and close in order, one at a time, as the official SDK's accumulator wants:
    an item's events carry its `output_index` and `item_id`, and the final response holds
    every item under the same identity. The final response is what chat_completion_to_response
    returns for the same answer (but for `created_at`).
    """

    def __init__(self, *, response_id: str, model: str, request: dict) -> None:
        self._response_id = response_id
        self._model = model
        self._request = request
        self._sequence = 0
        self._created_at: int | None = None
        self._output: list[dict] = []  # every item so far, as the final response holds it
        self._open: dict | None = None  # the last item of _output while it is still open
        self._part: dict | None = None  # the open content part of the open message
        self._messages = 0
        self._call_ids: dict[int, str] = {}  # chat tool index -> call id
        self._open_tool: int | None = None  # the chat tool index the open item carries
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] = {}

    def feed(self, chunk: dict) -> list[dict]:
        """Return the Responses stream events one chat.completion.chunk becomes; the first
        chunk also starts the response."""
        events = self._start(chunk)
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                logprobs = (choice.get("logprobs") or {}).get("content") or []
                events += self._on_text(delta["content"], logprobs)
            if delta.get("refusal"):
                events += self._on_refusal(delta["refusal"])
            for call in delta.get("tool_calls") or []:
                events += self._on_tool_call(call)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
        return events

    def finish(self) -> list[dict]:
        """Return the closing events once the chat stream ended: the open part and item done,
        then `response.completed`, or `response.incomplete`, with the whole response."""
        events = self._start({})
        status, incomplete = _outcome(self._finish_reason)
        events += self._close_item(status)
        response = self._snapshot(status, usage=usage_from_chat(self._usage))
        response["incomplete_details"] = incomplete
        events.append(self._event(f"response.{status}", response=response))
        return events

    def _event(self, kind: str, **fields: Any) -> dict:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def _snapshot(self, status: str, *, usage: dict | None) -> dict:
        return _response(
            response_id=self._response_id,
            model=self._model,
            request=self._request,
            created_at=self._created_at or int(time.time()),
            status=status,
            output=copy.deepcopy(self._output),
            usage=usage,
        )

    def _start(self, chunk: dict) -> list[dict]:
        if self._created_at is not None:
            return []
        self._created_at = chunk.get("created") or int(time.time())
        return [
            self._event("response.created", response=self._snapshot("in_progress", usage=None)),
            self._event("response.in_progress", response=self._snapshot("in_progress", usage=None)),
        ]

    def _where(self) -> dict[str, Any]:
        """Return the fields naming the open item in its events."""
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": len(self._output) - 1}

    def _add_item(self, item: dict) -> list[dict]:
        events = self._close_item("completed")
        self._output.append(item)
        self._open = item
        events.append(
            self._event(
                "response.output_item.added",
                output_index=len(self._output) - 1,
                item=copy.deepcopy(item),
            )
        )
        return events

    def _close_item(self, status: str) -> list[dict]:
        item = self._open
        if item is None:
            return []
        events = self._close_part()
        if item["type"] == "function_call":
            # `name` is not in the SDK's type, but the API sends it and the SDK keeps extras.
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    **self._where(),
                    arguments=item["arguments"],
                    name=item["name"],
                )
            )
        item["status"] = status
        events.append(
            self._event(
                "response.output_item.done",
                output_index=len(self._output) - 1,
                item=copy.deepcopy(item),
            )
        )
        self._open = self._part = self._open_tool = None
        return events

    def _open_part(self, part: dict) -> list[dict]:
        """Open a content part of `part`'s type, in the open message or in a new one, unless
        one of that type is open already."""
        events: list[dict] = []
        if self._open is None or self._open["type"] != "message":
            index = len(self._output)
            suffix = f"_{index}" if self._messages else ""
            self._messages += 1
            events += self._add_item(
                _message(f"msg_{self._response_id}{suffix}", [], "in_progress")
            )
        elif self._part is not None and self._part["type"] == part["type"]:
            return events
        events += self._close_part()
        assert self._open is not None
        self._open["content"].append(part)
        self._part = part
        events.append(
            self._event(
                "response.content_part.added",
                **self._where(),
                content_index=len(self._open["content"]) - 1,
                part=copy.deepcopy(part),
            )
        )
        return events

    def _close_part(self) -> list[dict]:
        part = self._part
        if part is None or self._open is None:
            return []
        where = {**self._where(), "content_index": len(self._open["content"]) - 1}
        if part["type"] == "output_text":
            done = self._event(
                "response.output_text.done",
                **where,
                text=part["text"],
                logprobs=_event_logprobs(part["logprobs"]),
            )
        else:
            done = self._event("response.refusal.done", **where, refusal=part["refusal"])
        self._part = None
        return [
            done,
            self._event("response.content_part.done", **where, part=copy.deepcopy(part)),
        ]

    def _on_text(self, text: str, logprobs: list[dict]) -> list[dict]:
        events = self._open_part(_output_text("", []))
        assert self._open is not None and self._part is not None
        self._part["text"] += text
        self._part["logprobs"] += _output_logprobs(logprobs)
        events.append(
            self._event(
                "response.output_text.delta",
                **self._where(),
                content_index=len(self._open["content"]) - 1,
                delta=text,
                logprobs=_event_logprobs(logprobs),
            )
        )
        return events

    def _on_refusal(self, refusal: str) -> list[dict]:
        events = self._open_part(_refusal_part(""))
        assert self._open is not None and self._part is not None
        self._part["refusal"] += refusal
        events.append(
            self._event(
                "response.refusal.delta",
                **self._where(),
                content_index=len(self._open["content"]) - 1,
                delta=refusal,
            )
        )
        return events

    def _on_tool_call(self, call: dict) -> list[dict]:
        """Return the events of one tool-call fragment: the first opens a function_call item
        (closing what was open), the others add to its arguments.

        Raises ValueError for a call without an id, one of another type than function, or a
        fragment of a call that is no longer the open one (chat sends one after the other).
        """
        tool = call.get("index", 0)
        function = call.get("function") or {}
        call_id = call.get("id")
        # Some OpenAI-compatible vendors repeat the id on every fragment: a new call is a new
        # index, or a new id at a known one.
        starts = tool not in self._call_ids or (call_id and call_id != self._call_ids[tool])
        events: list[dict] = []
        if starts:
            if call.get("type", "function") not in (None, "function"):
                raise _cannot_arrive(f"A chat {call.get('type')!r} tool call")
            self._call_ids[tool] = _call_id(call)
            calls = sum(item["type"] == "function_call" for item in self._output)
            item = _function_call(
                f"fc_{self._response_id}_{calls}",
                call_id=self._call_ids[tool],
                name=function.get("name") or "",
                arguments="",
                status="in_progress",
            )
            events += self._add_item(item)
            self._open_tool = tool
        elif tool != self._open_tool:
            raise ValueError("A chat tool call's fragment arrived after another item began.")
        assert self._open is not None
        if not self._open["name"] and function.get("name"):
            self._open["name"] = function["name"]
        if function.get("arguments"):
            self._open["arguments"] += function["arguments"]
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    **self._where(),
                    delta=function["arguments"],
                )
            )
        return events
