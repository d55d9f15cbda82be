"""Google's `generateContent` answers (the Gemini API and Vertex AI), whole or streamed, out
as OpenAI chat; the requests' way in is gateway/shapes/gemini.py.

Answers, Gemini -> OpenAI chat: each candidate is a choice; text parts are its content
(thought summaries, never asked for, are skipped); `functionCall` parts are tool calls with
ids `call_<n>` (n counts the candidate's calls from 0: stable, as Gemini gives no ids of its
own); finish reasons: STOP -> stop, MAX_TOKENS -> length, the safety ones (SAFETY, RECITATION,
BLOCKLIST, PROHIBITED_CONTENT, SPII, IMAGE_SAFETY) -> content_filter, a candidate with calls
-> tool_calls, anything else -> stop. Usage (`usageMetadata`): prompt tokens =
promptTokenCount (cached included) + toolUsePromptTokenCount, cached = cachedContentTokenCount,
completion = candidatesTokenCount + thoughtsTokenCount (thoughts are billed as output),
reasoning = thoughtsTokenCount.

A prompt Gemini blocks (`promptFeedback.blockReason`, no candidates, HTTP 200) is read by
`prompt_blocked`: the adapter makes it a vendor refusal.

Streams (`streamGenerateContent?alt=sse`: each event a whole GenerateContentResponse holding
the delta) become chat.completion.chunk objects: the first of each choice carries the role,
each later one its text or calls; the event where every candidate has its finish reason ends
the stream and carries the usage (chat's usage chunk folded into the finishing one).
"""

from __future__ import annotations

import time
from typing import Any

from gateway.shapes import openai as openai_shape
from gateway.shapes.fields import cannot_arrive, compact_json
from gateway.types import OPENAI, Chunk, Completion, Usage

FINISH_FROM_GEMINI: dict[Any, str] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
}
# A reason Gemini adds later (or OTHER, LANGUAGE, MALFORMED_FUNCTION_CALL) reads as a stop.
DEFAULT_FINISH = "stop"


def prompt_blocked(data: Any) -> str | None:
    """Return why Gemini blocked the prompt (its reason and message), or None when it did not:
    a blocked prompt is an HTTP 200 with `promptFeedback.blockReason` and no candidates."""
    if not isinstance(data, dict) or data.get("candidates"):
        return None
    feedback = data.get("promptFeedback")
    reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
    if not reason:
        return None
    assert isinstance(feedback, dict)
    said = feedback.get("blockReasonMessage")
    detail = f": {said}" if isinstance(said, str) and said else ""
    return f"Gemini blocked the prompt ({reason}){detail}"


def openai_usage(metadata: Any) -> dict:
    """Return OpenAI `CompletionUsage` for Gemini's usageMetadata (the module docstring)."""
    metadata = metadata if isinstance(metadata, dict) else {}
    prompt = _count(metadata, "promptTokenCount") + _count(metadata, "toolUsePromptTokenCount")
    thoughts = _count(metadata, "thoughtsTokenCount")
    completion = _count(metadata, "candidatesTokenCount") + thoughts
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": _count(metadata, "cachedContentTokenCount")},
        "completion_tokens_details": {"reasoning_tokens": thoughts},
    }


def _count(metadata: dict, name: str) -> int:
    value = metadata.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _read_parts(candidate: dict) -> tuple[str, list[tuple[str, dict]]]:
    """Return a candidate's text and its calls (name, args), skipping thought summaries."""
    texts: list[str] = []
    calls: list[tuple[str, dict]] = []
    content = candidate.get("content")
    for part in (content.get("parts") or []) if isinstance(content, dict) else []:
        if not isinstance(part, dict) or part.get("thought") is True:
            continue
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif isinstance(part.get("functionCall"), dict):
            call = part["functionCall"]
            calls.append((str(call.get("name") or ""), call.get("args") or {}))
        elif set(part) - {"thoughtSignature"}:
            raise cannot_arrive(f"A Gemini part with {sorted(part)}")
    return "".join(texts), calls


def _openai_call(number: int, name: str, args: dict) -> dict:
    return {
        "id": f"call_{number}",
        "type": "function",
        "function": {"name": name, "arguments": compact_json(args)},
    }


def _finish(candidate: dict, *, calls: bool) -> str:
    if calls:
        return "tool_calls"
    return FINISH_FROM_GEMINI.get(candidate.get("finishReason"), DEFAULT_FINISH)


def _ordered(candidates: Any) -> list[dict]:
    listed = [c for c in candidates or () if isinstance(c, dict)]
    return sorted(listed, key=lambda c: c.get("index") or 0)


def chat_completion(data: dict) -> dict:
    """Return the chat.completion object for a whole GenerateContentResponse."""
    choices = []
    for position, candidate in enumerate(_ordered(data.get("candidates"))):
        text, calls = _read_parts(candidate)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": text or (None if calls else ""),
            "refusal": None,
        }
        if calls:
            message["tool_calls"] = [_openai_call(n, *call) for n, call in enumerate(calls)]
        choices.append(
            {
                "index": candidate.get("index") or position,
                "message": message,
                "finish_reason": _finish(candidate, calls=bool(calls)),
                "logprobs": None,
            }
        )
    return {
        "id": data.get("responseId") or "",
        "object": "chat.completion",
        "created": int(time.time()),  # Gemini does not say when; now is when it arrived
        "model": data.get("modelVersion") or "",
        "choices": choices,
        "usage": openai_usage(data.get("usageMetadata")),
    }


def completion_from_vendor(data: dict, *, model: str) -> Completion:
    """Read a whole Gemini answer as an OpenAI-shaped Completion (`model`: the client's)."""
    return openai_shape.completion_from_vendor(chat_completion(data), model=model)


def usage_of(metadata: Any) -> Usage | None:
    """Return Tollgate's usage for a usageMetadata, None when there is none."""
    if not isinstance(metadata, dict):
        return None
    return openai_shape.usage_from(openai_usage(metadata))


CHUNK = "chat.completion.chunk"


class GeminiStreamToOpenAI:
    """Turn a streamGenerateContent SSE stream, event by event, into chat-completion chunks.

    `done` once every candidate asked for has its finish reason: that event's chunk carries
    the finish reasons and the usage (the latest usageMetadata seen).
    """

    def __init__(self, *, candidates: int = 1) -> None:
        self.done = False
        self._expected = candidates
        self._started: set[int] = set()
        self._calls: dict[int, int] = {}  # candidate index -> calls so far
        self._finished: set[int] = set()
        self._usage: dict | None = None

    def feed(self, data: dict) -> Chunk:
        """Return the chunk one event becomes (event None when it says nothing to pass on)."""
        if isinstance(data.get("usageMetadata"), dict):
            self._usage = data["usageMetadata"]
        choices = []
        finishes: list[str] = []
        text = ""
        generated = False
        for position, candidate in enumerate(_ordered(data.get("candidates"))):
            index = candidate.get("index") or position
            piece, calls = _read_parts(candidate)
            delta: dict[str, Any] = {}
            if index not in self._started:
                self._started.add(index)
                delta["role"] = "assistant"
            if piece:
                delta["content"] = piece
            if calls:
                first = self._calls.get(index, 0)
                self._calls[index] = first + len(calls)
                delta["tool_calls"] = [
                    {"index": first + n, **_openai_call(first + n, *call)}
                    for n, call in enumerate(calls)
                ]
            finish = None
            if candidate.get("finishReason"):
                self._finished.add(index)
                finish = _finish(candidate, calls=index in self._calls)
                finishes.append(finish)
            if index == 0:
                text = piece
            generated = generated or bool(piece or calls)
            choices.append(
                {"index": index, "delta": delta, "finish_reason": finish, "logprobs": None}
            )
        self.done = len(self._finished) >= self._expected
        usage = usage_of(self._usage) if self._usage is not None else None
        if not choices:
            return Chunk(shape=OPENAI, usage=usage)
        event: dict[str, Any] = {
            "id": data.get("responseId") or "",
            "object": CHUNK,
            "created": int(time.time()),
            "model": data.get("modelVersion") or "",
            "choices": choices,
        }
        finish_reason = None
        if self.done:
            event["usage"] = openai_usage(self._usage)
            finish_reason = openai_shape.FINISH_FROM_VENDOR.get(finishes[0], "stop")
        return Chunk(
            shape=OPENAI,
            event=event,
            text=text,
            generated=generated,
            finish_reason=finish_reason,
            usage=usage,
        )
