"""Translate a whole chat answer between the OpenAI chat-completions shape and the Anthropic
messages shape, and their usage counts (which streams share: chat_streams.py).

A JSON_TOOL call (OpenAI JSON mode on Anthropic: requests_to_anthropic.py) is the answer's
content, its input as compact JSON, finish reason "stop". OpenAI `finish_reason: "stop"` is
`end_turn` even when a stop sequence matched: the chat-completions shape does not say which.
"""

from __future__ import annotations

import json
import time
from typing import Any

from gateway.shapes.fields import cannot_arrive, compact_json
from gateway.shapes.requests_to_anthropic import JSON_TOOL

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


def openai_finish_reason(stop_reason: Any, *, json_answer: bool) -> str:
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
            raise cannot_arrive("An Anthropic text block with citations")
        if kind == "text":
            texts.append(block.get("text") or "")
        elif kind == "tool_use" and block.get("name") == JSON_TOOL:
            if json_answer:
                raise cannot_arrive("A second JSON answer")
            json_answer = True
            texts.append(compact_json(block.get("input") or {}))
        elif kind == "tool_use":
            calls.append(_openai_call_of(block))
        else:
            raise cannot_arrive(f"An Anthropic {kind!r} block")
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
                "finish_reason": openai_finish_reason(
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
        "function": {"name": block["name"], "arguments": compact_json(block.get("input") or {})},
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
        raise cannot_arrive(f"An OpenAI {call.get('type')!r} tool call")
    function = call["function"]
    arguments = function.get("arguments") or "{}"
    tool_input = json.loads(arguments)
    if not isinstance(tool_input, dict):
        raise ValueError("OpenAI tool-call arguments that are not a JSON object.")
    return {"type": "tool_use", "id": call["id"], "name": function["name"], "input": tool_input}
