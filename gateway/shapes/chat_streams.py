"""Translate a streamed chat answer, event by event, between the OpenAI chat-completions
shape and the Anthropic messages shape (whole answers: chat_answers.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.shapes.chat_answers import (
    DEFAULT_STOP,
    STOP_FROM_FINISH,
    anthropic_usage_from_openai,
    openai_finish_reason,
    openai_usage_from_anthropic,
)
from gateway.shapes.fields import cannot_arrive, compact_json
from gateway.shapes.requests_to_anthropic import JSON_TOOL

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
            raise cannot_arrive(f"An Anthropic {kind!r} block")
        if block.get("name") == JSON_TOOL:
            return self._on_json_start(event["index"], block)
        tool_index = self._tool_index[event["index"]] = len(self._tool_index)
        call = {
            "index": tool_index,
            "id": block["id"],
            "type": "function",
            "function": {
                "name": block["name"],
                "arguments": compact_json(block["input"]) if block.get("input") else "",
            },
        }
        return [self._chunk({"tool_calls": [call]})]

    def _on_json_start(self, index: int, block: dict) -> list[dict]:
        if self._json_index is not None:
            raise cannot_arrive("A second JSON answer")
        self._json_index = index
        return (
            [self._chunk({"content": compact_json(block["input"])})] if block.get("input") else []
        )

    def _on_block_delta(self, event: dict) -> list[dict]:
        delta = event.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta":
            return [self._chunk({"content": delta["text"]})] if delta.get("text") else []
        if kind != "input_json_delta":
            raise cannot_arrive(f"An Anthropic {kind!r}")
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
        chunks = [self._chunk({}, openai_finish_reason(reason, json_answer=json_answer))]
        if self._include_usage:
            usage = openai_usage_from_anthropic(self._usage)
            chunks.append({"object": CHUNK, "choices": [], "usage": usage})
        return chunks

    def _on_error(self, event: dict) -> list[dict]:
        kind = (event.get("error") or {}).get("type")
        raise ValueError(f"The Anthropic stream ended in an error event ({kind}).")

    # Looked up with the event's `type`, whatever the vendor sent.
    _HANDLERS: dict[Any, Callable[[AnthropicStreamToOpenAI, dict], list[dict]]] = {
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
        message: dict[str, Any] = {
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
