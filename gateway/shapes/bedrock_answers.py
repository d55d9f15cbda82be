"""AWS Bedrock's Converse answers, whole or ConverseStream's events, back into the OpenAI chat
shape (the requests' way in is gateway/shapes/bedrock.py).

Answers: text blocks are the content, `toolUse` blocks the tool calls (the `toolUseId` their
id, the input as compact JSON); `reasoningContent` blocks are left out, as OpenAI chat hides
reasoning too. `stopReason`: end_turn / stop_sequence -> stop, max_tokens and
model_context_window_exceeded -> length, tool_use -> tool_calls, guardrail_intervened /
content_filtered -> content_filter. Usage: Bedrock's `inputTokens` leaves out the tokens read
from and written to its prompt cache (`cacheReadInputTokens`, `cacheWriteInputTokens`);
ours, and OpenAI's `prompt_tokens`, count every prompt token, so they are added.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.shapes.fields import cannot_arrive, compact_json
from gateway.types import OPENAI, Chunk, Completion, Usage

FINISH_FROM_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",  # the output ran out of room, as with a cap
    "tool_use": "tool_calls",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}
# A reason Bedrock adds later (or a malformed model output) must not break answers.
DEFAULT_FINISH = "stop"
# Our finish reasons ("stop" | "length" | "tool_calls"): a filtered answer stopped.
OUR_FINISH = {"content_filter": "stop"}
CHUNK = "chat.completion.chunk"


def finish_reason(stop_reason: Any) -> str:
    """Return the OpenAI finish reason for a Converse `stopReason`."""
    return FINISH_FROM_STOP.get(stop_reason, DEFAULT_FINISH)


def usage_from_converse(raw: Any) -> Usage:
    """Read Converse's usage: its inputTokens leave out cache reads and writes; ours count
    every prompt token."""
    raw = raw if isinstance(raw, dict) else {}
    cache_read = int(raw.get("cacheReadInputTokens") or 0)
    cache_write = int(raw.get("cacheWriteInputTokens") or 0)
    return Usage(
        input_tokens=int(raw.get("inputTokens") or 0) + cache_read + cache_write,
        output_tokens=int(raw.get("outputTokens") or 0),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


def openai_usage(usage: Usage) -> dict:
    """Render our usage as OpenAI `CompletionUsage` (the cache writes beside the reads, as
    chat_answers.py reads them back for an Anthropic client)."""
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {
            "cached_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def converse_to_chat(data: dict) -> tuple[dict, str]:
    """Return the chat.completion object for a Converse answer, and its text; raise
    ValueError for a block the translated request cannot have caused."""
    message = ((data.get("output") or {}).get("message")) or {}
    texts: list[str] = []
    calls: list[dict] = []
    for block in message.get("content") or []:
        if "text" in block:
            texts.append(block["text"] or "")
        elif "toolUse" in block:
            use = block["toolUse"]
            calls.append(
                {
                    "id": use["toolUseId"],
                    "type": "function",
                    "function": {"name": use["name"], "arguments": compact_json(use.get("input"))},
                }
            )
        elif "reasoningContent" not in block:  # reasoning: hidden, as OpenAI chat hides it
            raise cannot_arrive(f"A Converse {next(iter(block), 'empty')!r} block")
    text = "".join(texts)
    chat_message: dict[str, Any] = {
        "role": "assistant",
        "content": text or (None if calls else ""),
        "refusal": None,
    }
    if calls:
        chat_message["tool_calls"] = calls
    chat = {
        "id": "",
        "object": "chat.completion",
        "created": int(time.time()),  # Converse does not say when; now is when it arrived
        "model": "",
        "choices": [
            {
                "index": 0,
                "message": chat_message,
                "finish_reason": finish_reason(data.get("stopReason")),
                "logprobs": None,
            }
        ],
        "usage": openai_usage(usage_from_converse(data.get("usage"))),
    }
    return chat, text


def completion_from_converse(data: dict, *, model: str) -> Completion:
    """Read a Converse answer as a Completion in the OpenAI chat shape."""
    chat, text = converse_to_chat(data)
    finish = chat["choices"][0]["finish_reason"]
    return Completion(
        shape=OPENAI,
        data=chat,
        text=text,
        finish_reason=OUR_FINISH.get(finish, finish),
        usage=usage_from_converse(data.get("usage")),
        model=model,
    )


# ---------------------------------------------------------------- streams: ConverseStream -> chat

# ConverseStream's exception events, and whether the call is worth another try.
STREAM_EXCEPTIONS: dict[str, tuple[int | None, bool]] = {
    "throttlingException": (429, True),
    "internalServerException": (500, True),
    "serviceUnavailableException": (503, True),
    "modelStreamErrorException": (None, True),  # the model broke off: a new call may not
    "validationException": (400, False),
}


class ConverseStreamToChat:
    """Turn ConverseStream's events, one by one, into chat-completion chunks.

    The stream is done once it said both how it stopped (`messageStop`) and what it used
    (`metadata`): Bedrock sends them in that order, last.
    """

    def __init__(self) -> None:
        self.stopped = False
        self.metered = False
        # OpenAI numbers tool calls from 0; Converse numbers all blocks, text ones included.
        self._tool_index: dict[int, int] = {}

    @property
    def done(self) -> bool:
        return self.stopped and self.metered

    def feed(self, event_type: str, payload: dict) -> Chunk | None:
        """Return the chunk one event becomes; None for those that say nothing to pass on
        (contentBlockStop, reasoning, event types Bedrock may add later)."""
        if event_type == "messageStart":
            return _chunk({"role": "assistant", "content": ""})
        if event_type == "contentBlockStart":
            return self._on_block_start(payload)
        if event_type == "contentBlockDelta":
            return self._on_block_delta(payload)
        if event_type == "messageStop":
            self.stopped = True
            finish = finish_reason(payload.get("stopReason"))
            return _chunk({}, finish_reason=finish)
        if event_type == "metadata":
            self.metered = True
            usage = usage_from_converse(payload.get("usage"))
            event = {"object": CHUNK, "choices": [], "usage": openai_usage(usage)}
            return Chunk(shape=OPENAI, event=event, usage=usage)
        return None

    def _on_block_start(self, payload: dict) -> Chunk | None:
        use = (payload.get("start") or {}).get("toolUse")
        if use is None:
            return None
        block = payload.get("contentBlockIndex", 0)
        tool = self._tool_index[block] = len(self._tool_index)
        call = {
            "index": tool,
            "id": use["toolUseId"],
            "type": "function",
            "function": {"name": use["name"], "arguments": ""},
        }
        return _chunk({"tool_calls": [call]}, generated=True)

    def _on_block_delta(self, payload: dict) -> Chunk | None:
        delta = payload.get("delta") or {}
        if "text" in delta:
            text = delta["text"] or ""
            return _chunk({"content": text}, text=text, generated=bool(text)) if text else None
        use = delta.get("toolUse")
        if use is None:
            return None  # reasoning: hidden, as OpenAI chat hides it
        block = payload.get("contentBlockIndex", 0)
        if block not in self._tool_index:
            raise ValueError("A Converse toolUse delta for a block that is not a toolUse.")
        fragment = use.get("input") or ""
        if not fragment:
            return None
        call = {"index": self._tool_index[block], "function": {"arguments": fragment}}
        return _chunk({"tool_calls": [call]}, generated=True)


def _chunk(
    delta: dict, *, finish_reason: str | None = None, text: str = "", generated: bool = False
) -> Chunk:
    event = {
        "object": CHUNK,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
    }
    ours = OUR_FINISH.get(finish_reason, finish_reason) if finish_reason else None
    return Chunk(shape=OPENAI, event=event, text=text, generated=generated, finish_reason=ours)
