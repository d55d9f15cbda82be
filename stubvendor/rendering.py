"""The OpenAI and Anthropic bodies of an answer, whole and streamed.

The rules (part of the stub's contract, stubvendor/server.py):

Responses
---------
* OpenAI: ``{"id": "chatcmpl-stub-<n>", "object": "chat.completion",
  "created", "model", "choices": [{"index": i, "message": {"role":
  "assistant", "content": text}, "finish_reason": fr}], "usage":
  {"prompt_tokens": P, "completion_tokens": C, "total_tokens": P + C,
  "prompt_tokens_details": {"cached_tokens": K}, "completion_tokens_details":
  {"reasoning_tokens": R}}}``; a tool-call message is ``{"role": "assistant",
  "content": null, "tool_calls": [{"id", "type": "function", "function":
  {"name", "arguments"}}]}``; a choice has ``logprobs`` as above.
  Stream (``"stream": true``): ``data: <chunk>\\n\\n`` lines of
  ``chat.completion.chunk`` objects.  For each choice in turn: a first chunk
  with delta ``{"role": "assistant", "content": ""}`` (tool calls: ``"content":
  null``), then one chunk per piece: delta ``{"content": token}`` for words
  and JSON pieces; for each tool call i a chunk with delta ``{"tool_calls":
  [{"index": i, "id", "type": "function", "function": {"name", "arguments":
  ""}}]}`` and two with ``{"tool_calls": [{"index": i, "function":
  {"arguments": half}}]}`` (the arguments split at len // 2).  Then one chunk
  per choice with empty delta and ``finish_reason``.  Each chunk's choice
  carries its ``index`` (and, when the request has ``logprobs``, ``logprobs``:
  the piece's entry on content chunks, else null).  With
  ``stream_options.include_usage`` every chunk so far carries ``"usage":
  null`` and one more chunk follows with ``"choices": []`` and the usage;
  finally ``data: [DONE]\\n\\n``.
* Anthropic: ``{"id": "msg_stub_<n>", "type": "message", "role": "assistant",
  "model", "content": [...], "stop_reason", "stop_sequence", "usage":
  {"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
  "output_tokens"}}``; content is the thinking block (if on), then either
  ``{"type": "text", "text": text}`` or one ``{"type": "tool_use", "id",
  "name", "input"}`` per call.  Stream: ``event: <name>\\ndata: <json>\\n\\n``
  for ``message_start`` (the usage with output 1), then per content block at
  index 0, 1, ...: ``content_block_start``, (after the first one only)
  ``ping``, its ``content_block_delta``s, ``content_block_stop``; then
  ``message_delta`` (stop_reason, stop_sequence, ``usage: {"output_tokens":
  C}``), ``message_stop``.  Blocks: thinking starts as ``{"type": "thinking",
  "thinking": "", "signature": ""}`` with one ``thinking_delta`` per word
  (``"Stub"``, ``" thinking"``, ...) and one ``signature_delta``; text starts
  as ``{"type": "text", "text": ""}`` with one ``text_delta`` per token;
  tool_use starts as ``{"type": "tool_use", "id", "name", "input": {}}`` with
  two ``input_json_delta``s (``partial_json``: the compact input JSON split
  at len // 2).
* ``<n>`` is a process-wide counter (never reset).
* Errors: OpenAI ``{"error": {"message", "type", "param", "code"}}`` (param
  null unless said above), Anthropic ``{"type": "error", "error": {"type",
  "message"}}``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from aiohttp import web

from stubvendor.answers import (
    THINKING_SIGNATURE,
    THINKING_WORDS,
    Answer,
    _halves,
    _piece_count,
    _spaced,
)
from stubvendor.prompt import PromptUsage
from stubvendor.wire import _include_usage, _is_int

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


LOGPROB = -0.5
TOP_LOGPROB = -1.5


# --------------------------------------------------------------------------- OpenAI


_OPENAI_FINISH = {
    "stop": "stop",
    "length": "length",
    "stop_sequence": "stop",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",  # Azure's filtered answer (stubvendor/azure.py)
}


@dataclass(frozen=True)
class OpenAIOptions:
    n: int = 1
    logprobs: bool | None = None  # None: the request has no ``logprobs`` field
    top_logprobs: int = 0
    include_usage: bool = False

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> OpenAIOptions:
        n, top = body.get("n"), body.get("top_logprobs")
        return cls(
            n=n if _is_int(n) and n >= 1 else 1,
            logprobs=(body.get("logprobs") is True) if "logprobs" in body else None,
            top_logprobs=top if _is_int(top) and top >= 0 else 0,
            include_usage=_include_usage(body),
        )


def _openai_usage(prompt: PromptUsage, answer: Answer, n: int) -> dict[str, Any]:
    completion = n * answer.output_tokens
    return {
        "prompt_tokens": prompt.total,
        "completion_tokens": completion,
        "total_tokens": prompt.total + completion,
        "prompt_tokens_details": {"cached_tokens": prompt.cached},
        "completion_tokens_details": {"reasoning_tokens": n * answer.reasoning_tokens},
    }


def _token_logprob(token: str, top: int) -> dict[str, Any]:
    utf8 = list(token.encode())
    alternative = {"token": token, "logprob": TOP_LOGPROB, "bytes": utf8}
    return {"token": token, "logprob": LOGPROB, "bytes": utf8, "top_logprobs": [alternative] * top}


def _openai_tool_calls(answer: Answer) -> list[dict[str, Any]]:
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in answer.calls
    ]


def openai_completion(
    seq: int, model: str, answer: Answer, prompt: PromptUsage, options: OpenAIOptions
) -> dict[str, Any]:
    """The non-streamed ``chat.completion`` object."""
    if answer.calls:
        message = {"role": "assistant", "content": None, "tool_calls": _openai_tool_calls(answer)}
    else:
        message = {"role": "assistant", "content": "".join(answer.pieces)}
    choice: dict[str, Any] = {"message": message}
    if options.logprobs is not None:
        content = [_token_logprob(p, options.top_logprobs) for p in answer.pieces]
        choice["logprobs"] = {"content": content, "refusal": None} if options.logprobs else None
    choice["finish_reason"] = _OPENAI_FINISH[answer.finish]
    return {
        "id": f"chatcmpl-stub-{seq}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": i, **choice} for i in range(options.n)],
        "usage": _openai_usage(prompt, answer, options.n),
    }


def _data_line(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


Frames = tuple[list[tuple[bytes, bool]], list[bytes]]
"""A stream: (body frames, each flagged when it is a piece; tail frames that end it)."""


def _openai_deltas(answer: Answer, options: OpenAIOptions) -> list[tuple[dict[str, Any], Any]]:
    """(delta, logprobs) of each streamed piece of one choice."""
    out: list[tuple[dict[str, Any], Any]] = []
    for i, call in enumerate(answer.calls):
        function = {"name": call.name, "arguments": ""}
        header = {"index": i, "id": call.id, "type": "function", "function": function}
        out.append(({"tool_calls": [header]}, None))
        out.extend(
            ({"tool_calls": [{"index": i, "function": {"arguments": half}}]}, None)
            for half in _halves(call.arguments)
        )
    for piece in answer.pieces:
        lp = None
        if options.logprobs:
            lp = {"content": [_token_logprob(piece, options.top_logprobs)], "refusal": None}
        out.append(({"content": piece}, lp))
    return out


def openai_stream_frames(
    seq: int, model: str, answer: Answer, prompt: PromptUsage, options: OpenAIOptions
) -> Frames:
    """The ``chat.completion.chunk`` stream of the answer."""
    head = {
        "id": f"chatcmpl-stub-{seq}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def chunk(
        index: int, delta: dict[str, Any], finish: str | None = None, lp: Any = None
    ) -> bytes:
        choice: dict[str, Any] = {"index": index, "delta": delta}
        if options.logprobs is not None:
            choice["logprobs"] = lp
        choice["finish_reason"] = finish
        data: dict[str, Any] = {**head, "choices": [choice]}
        if options.include_usage:
            data["usage"] = None
        return _data_line(data)

    deltas = _openai_deltas(answer, options)
    body: list[tuple[bytes, bool]] = []
    for index in range(options.n):
        role = {"role": "assistant", "content": None if answer.calls else ""}
        body.append((chunk(index, role), False))
        body.extend((chunk(index, delta, lp=lp), True) for delta, lp in deltas)
    finish = _OPENAI_FINISH[answer.finish]
    tail = [chunk(index, {}, finish) for index in range(options.n)]
    if options.include_usage:
        usage = _openai_usage(prompt, answer, options.n)
        tail.append(_data_line({**head, "choices": [], "usage": usage}))
    tail.append(b"data: [DONE]\n\n")
    return body, tail


# --------------------------------------------------------------------------- Anthropic


_ANTHROPIC_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "stop_sequence": "stop_sequence",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}


def _anthropic_usage(prompt: PromptUsage, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": prompt.total - prompt.cache_creation - prompt.cache_read,
        "cache_creation_input_tokens": prompt.cache_creation,
        "cache_read_input_tokens": prompt.cache_read,
        "output_tokens": output_tokens,
    }


def _anthropic_blocks(answer: Answer) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if answer.thinking:
        thinking = " ".join(THINKING_WORDS)
        blocks.append({"type": "thinking", "thinking": thinking, "signature": THINKING_SIGNATURE})
    if answer.calls:
        blocks.extend(
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in answer.calls
        )
    else:
        blocks.append({"type": "text", "text": "".join(answer.pieces)})
    return blocks


def anthropic_message(seq: int, model: str, answer: Answer, prompt: PromptUsage) -> dict[str, Any]:
    """The non-streamed ``message`` object."""
    return {
        "id": f"msg_stub_{seq}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _anthropic_blocks(answer),
        "stop_reason": _ANTHROPIC_STOP[answer.finish],
        "stop_sequence": answer.stop_sequence,
        "usage": _anthropic_usage(prompt, answer.output_tokens),
    }


def _anthropic_stream_blocks(answer: Answer) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(content_block_start's block, its deltas) for every block of the answer."""
    blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    if answer.thinking:
        deltas = [{"type": "thinking_delta", "thinking": t} for t in _spaced(THINKING_WORDS)]
        deltas.append({"type": "signature_delta", "signature": THINKING_SIGNATURE})
        blocks.append(({"type": "thinking", "thinking": "", "signature": ""}, deltas))
    for call in answer.calls:
        start = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        halves = _halves(call.arguments)
        blocks.append((start, [{"type": "input_json_delta", "partial_json": h} for h in halves]))
    if not answer.calls:
        deltas = [{"type": "text_delta", "text": t} for t in answer.pieces]
        blocks.append(({"type": "text", "text": ""}, deltas))
    return blocks


def _sse(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _event(name: str, **fields: Any) -> bytes:
    return _sse(name, {"type": name, **fields})


def anthropic_stream_frames(seq: int, model: str, answer: Answer, prompt: PromptUsage) -> Frames:
    """The messages event stream of the answer."""
    message: dict[str, Any] = {
        "id": f"msg_stub_{seq}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _anthropic_usage(prompt, 1),
    }
    body: list[tuple[bytes, bool]] = [(_event("message_start", message=message), False)]
    blocks = _anthropic_stream_blocks(answer)
    for index, (start, deltas) in enumerate(blocks):
        body.append((_event("content_block_start", index=index, content_block=start), False))
        if index == 0:
            body.append((_event("ping"), False))
        body.extend((_event("content_block_delta", index=index, delta=d), True) for d in deltas)
        if index < len(blocks) - 1:
            body.append((_event("content_block_stop", index=index), False))
    delta = {"stop_reason": _ANTHROPIC_STOP[answer.finish], "stop_sequence": answer.stop_sequence}
    tail = [
        _event("content_block_stop", index=len(blocks) - 1),
        _event("message_delta", delta=delta, usage={"output_tokens": answer.output_tokens}),
        _event("message_stop"),
    ]
    return body, tail


async def _write_stream(
    resp: web.StreamResponse, frames: Frames, delay: float, limit: int | None, drop: bool
) -> None:
    """Write the frames: ``delay`` before each piece, at most ``limit`` pieces, no tail on drop."""
    body, tail = frames
    sent = 0
    for data, piece in body:
        if piece:
            if sent == limit:
                return
            if delay:
                await asyncio.sleep(delay)
        await resp.write(data)
        if piece:
            sent += 1
            if sent == limit:
                return
    if not drop:
        await resp.write(b"".join(tail))


class Rendered(Protocol):
    """Render an answer whole or streamed (what faults count and cut)."""

    def message(self) -> dict[str, Any]: ...

    def frames(self) -> Frames: ...

    def pieces(self) -> int: ...


@dataclass(frozen=True)
class Reply:
    """Everything a completion answer is rendered from, in either shape."""

    shape: str
    seq: int
    model: str
    answer: Answer
    prompt: PromptUsage
    options: OpenAIOptions

    def message(self) -> dict[str, Any]:
        if self.shape == "openai":
            return openai_completion(self.seq, self.model, self.answer, self.prompt, self.options)
        return anthropic_message(self.seq, self.model, self.answer, self.prompt)

    def frames(self) -> Frames:
        if self.shape == "openai":
            return openai_stream_frames(
                self.seq, self.model, self.answer, self.prompt, self.options
            )
        return anthropic_stream_frames(self.seq, self.model, self.answer, self.prompt)

    def pieces(self) -> int:
        return _piece_count(self.answer, self.shape, self.options.n)
