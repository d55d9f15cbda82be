"""Turn a cached answer into the other mode: a stored whole answer into a stream, a stored
stream into a whole answer, so a cache hit serves either kind of request.

Both ways stay in the VENDOR's shape the entry was stored in: an OpenAI chat completion
becomes the chat chunks OpenAI would have streamed, an Anthropic message becomes Anthropic's
event sequence, and back. A hit then goes through the same client renderers (and the same
translations between shapes) as a vendor's own answer would, so a client cannot tell it from
a miss. Text and tool arguments go out in pieces of a few words; the last arrival carries
the finish reason and the usage.

Not portable (served only in the mode it was stored in): Responses-API and embedding
entries; OpenAI refusals, logprobs, audio, annotations, legacy function calls, custom tool
calls, content-filter ends and any delta field the chat stream does not define (a vendor's
`reasoning`); Anthropic thinking, redacted thinking, server tools, citations, and stop
reasons other than end_turn, stop_sequence, max_tokens and tool_use.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace
from typing import Any

from gateway.shapes import anthropic as anthropic_shape
from gateway.shapes import openai as openai_shape
from gateway.shapes.fields import compact_json
from gateway.types import ANTHROPIC, OPENAI, Chunk, Completion, ModelRequest, Usage

PIECE_CHARS = 24  # a text piece ends at the first word boundary past this many characters
MAX_PIECE_CHARS = 32  # a longer word (or text without spaces) is cut here
WORDS = re.compile(r"\S+\s*|\s+")

OPENAI_FINISHES = frozenset({"stop", "length", "tool_calls"})
OPENAI_DELTA_FIELDS = frozenset({"role", "content", "tool_calls"})
# Message fields a chat answer may carry only empty: anything in them a stream cannot hold.
OPENAI_EMPTY_FIELDS = ("refusal", "audio", "function_call", "annotations")
OPENAI_CHUNK_FIELDS = ("created", "system_fingerprint", "service_tier")
ANTHROPIC_STOPS = frozenset({"end_turn", "stop_sequence", "max_tokens", "tool_use"})
ANTHROPIC_BLOCKS = frozenset({"text", "tool_use"})
ANTHROPIC_DELTAS = frozenset({"text_delta", "input_json_delta"})


# ---------------------------------------------------------------- portability


def completion_is_portable(c: Completion) -> bool:
    """Say whether a whole answer can be streamed with nothing a client sees lost."""
    if c.shape == OPENAI:
        choices = c.data.get("choices") or []
        return bool(choices) and all(_openai_choice_portable(choice) for choice in choices)
    if c.shape == ANTHROPIC:
        return c.data.get("stop_reason") in ANTHROPIC_STOPS and all(
            _anthropic_block_portable(block) for block in c.data.get("content") or []
        )
    return False


def chunks_are_portable(chunks: list[Chunk]) -> bool:
    """Say whether a finished stream can become a whole answer with nothing lost."""
    shapes = {chunk.shape for chunk in chunks}
    if len(shapes) != 1 or not any(chunk.finish_reason for chunk in chunks):
        return False  # empty, mixed, or cut before its end
    events = [chunk.event for chunk in chunks if chunk.event is not None]
    if shapes == {OPENAI}:
        return all(
            isinstance(event.get("choices"), list)
            and all(_openai_choice_portable(choice) for choice in event["choices"])
            for event in events
        )
    if shapes == {ANTHROPIC}:
        return all(_anthropic_event_portable(event) for event in events)
    return False


def _openai_choice_portable(choice: dict) -> bool:
    message = choice.get("message") or choice.get("delta") or {}
    finish = choice.get("finish_reason")
    extra = set(message) - OPENAI_DELTA_FIELDS - set(OPENAI_EMPTY_FIELDS)
    return (
        choice.get("logprobs") is None
        and (finish is None or finish in OPENAI_FINISHES)
        and not any(message.get(name) for name in (*OPENAI_EMPTY_FIELDS, *extra))
        and all(call.get("type") in (None, "function") for call in message.get("tool_calls") or [])
    )


def _anthropic_block_portable(block: dict) -> bool:
    return block.get("type") in ANTHROPIC_BLOCKS and not block.get("citations")


def _anthropic_event_portable(event: dict) -> bool:
    kind = event.get("type")
    if kind == "content_block_start":
        return _anthropic_block_portable(event.get("content_block") or {})
    if kind == "content_block_delta":
        return (event.get("delta") or {}).get("type") in ANTHROPIC_DELTAS
    if kind == "message_delta":
        return (event.get("delta") or {}).get("stop_reason") in ANTHROPIC_STOPS
    return kind in {"message_start", "content_block_stop", "message_stop", "ping"}


# ---------------------------------------------------------------- whole answer -> stream


def chunks_from_completion(completion: Completion, req: ModelRequest) -> list[list[Chunk]]:
    """Return the arrivals a vendor streaming this answer would have sent, in its shape.

    Call only for a portable completion (`completion_is_portable`); raises ValueError for
    a shape that does not stream here. `req` is the request served (the conversion does not
    depend on it today: the client's renderer reads it).
    """
    if completion.shape == OPENAI:
        return _openai_arrivals(completion.data)
    if completion.shape == ANTHROPIC:
        return _anthropic_arrivals(completion.data)
    raise ValueError(f"A {completion.shape!r} answer is not streamed from the cache.")


def text_pieces(text: str) -> list[str]:
    """Split text into pieces of a few words each (joined, they are the text again)."""
    pieces: list[str] = []
    current = ""
    for word in WORDS.findall(text):
        current += word
        while len(current) > MAX_PIECE_CHARS:
            pieces.append(current[:MAX_PIECE_CHARS])
            current = current[MAX_PIECE_CHARS:]
        if len(current) >= PIECE_CHARS:
            pieces.append(current)
            current = ""
    return [*pieces, current] if current else pieces


def argument_pieces(arguments: str) -> list[str]:
    """Split tool-call arguments as vendors stream them: a few characters at a time."""
    step = PIECE_CHARS
    return [arguments[at : at + step] for at in range(0, len(arguments), step)] or [""]


def _openai_arrivals(data: dict) -> list[list[Chunk]]:
    head = {name: data[name] for name in OPENAI_CHUNK_FIELDS if name in data}
    head = {"id": data.get("id") or "", "object": "chat.completion.chunk", **head}
    head["model"] = data.get("model") or ""

    def event(index: int, delta: dict, finish: str | None = None) -> list[Chunk]:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        return [openai_shape.chunk_from_vendor({**head, "choices": [choice], "usage": None})]

    arrivals: list[list[Chunk]] = []
    for choice in data.get("choices") or []:
        index, message = choice.get("index", 0), choice.get("message") or {}
        arrivals.append(event(index, {"role": "assistant", "content": "", "refusal": None}))
        arrivals += [
            event(index, {"content": piece}) for piece in text_pieces(message.get("content") or "")
        ]
        for number, call in enumerate(message.get("tool_calls") or []):
            function = call.get("function") or {}
            opening = {"index": number, "id": call["id"], "type": "function"}
            opening["function"] = {"name": function.get("name") or "", "arguments": ""}
            arrivals.append(event(index, {"tool_calls": [opening]}))
            arrivals += [
                event(index, {"tool_calls": [{"index": number, "function": {"arguments": piece}}]})
                for piece in argument_pieces(function.get("arguments") or "")
            ]
        arrivals.append(event(index, {}, choice.get("finish_reason") or "stop"))
    if data.get("usage") is not None:  # the usage chunk the gateway always asks vendors for
        usage_event = {**head, "choices": [], "usage": data["usage"]}
        arrivals[-1] = [*arrivals[-1], openai_shape.chunk_from_vendor(usage_event)]
    return arrivals


def _anthropic_arrivals(data: dict) -> list[list[Chunk]]:
    def event(kind: str, **fields: Any) -> list[Chunk]:
        chunk = anthropic_shape.chunk_from_event(kind, {"type": kind, **fields})
        assert chunk is not None  # every event kind sent here reads as a chunk
        return [chunk]

    usage = data.get("usage") or {}
    message = {**data, "content": [], "stop_reason": None, "stop_sequence": None}
    arrivals = [event("message_start", message={**message, "usage": {**usage, "output_tokens": 0}})]
    for index, block in enumerate(data.get("content") or []):
        opening: dict[str, Any]
        if block["type"] == "text":
            opening = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in text_pieces(block["text"])]
        else:
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            arguments = compact_json(block.get("input") or {})
            deltas = [
                {"type": "input_json_delta", "partial_json": p} for p in argument_pieces(arguments)
            ]
        arrivals.append(event("content_block_start", index=index, content_block=opening))
        arrivals += [event("content_block_delta", index=index, delta=delta) for delta in deltas]
        arrivals.append(event("content_block_stop", index=index))
    stop = {"stop_reason": data.get("stop_reason"), "stop_sequence": data.get("stop_sequence")}
    arrivals.append(event("message_delta", delta=stop, usage=usage))
    return arrivals


# ---------------------------------------------------------------- stream -> whole answer


def completion_from_chunks(chunks: list[Chunk], req: ModelRequest, *, model: str) -> Completion:
    """Return the whole answer a stored stream adds up to, in the stream's vendor shape.

    Call only for portable chunks (`chunks_are_portable`).
    """
    usage = Usage()
    for chunk in chunks:  # what the stream said it used, as the pipeline folds it
        if chunk.usage is not None:
            usage = usage.merged(chunk.usage)
    events = [chunk.event for chunk in chunks if chunk.event is not None]
    if chunks and chunks[0].shape == ANTHROPIC:
        return anthropic_shape.completion_from_vendor(_anthropic_message(events), model=model)
    data = _openai_completion(events, usage)
    return replace(openai_shape.completion_from_vendor(data, model=model), usage=usage)


def _openai_completion(events: list[dict], usage: Usage) -> dict:
    first = events[0] if events else {}
    data: dict[str, Any] = {name: first[name] for name in OPENAI_CHUNK_FIELDS if name in first}
    data = {"id": first.get("id") or "", "object": "chat.completion", **data}
    data["model"] = first.get("model") or ""
    choices: dict[int, dict] = {}
    for event in events:
        if event.get("usage"):
            data["usage"] = event["usage"]
        for choice in event.get("choices") or []:
            into = choices.setdefault(
                choice.get("index", 0),
                {"content": [], "calls": {}, "finish_reason": None},
            )
            delta = choice.get("delta") or {}
            into["content"].append(delta.get("content") or "")
            for call in delta.get("tool_calls") or []:
                slot = into["calls"].setdefault(call.get("index", 0), {"arguments": []})
                function = call.get("function") or {}
                slot.setdefault("id", call.get("id"))
                slot["name"] = slot.get("name") or function.get("name")
                slot["arguments"].append(function.get("arguments") or "")
            into["finish_reason"] = choice.get("finish_reason") or into["finish_reason"]
    data["choices"] = [_openai_choice(index, choices[index]) for index in sorted(choices)]
    # A vendor whose usage came outside a chunk's JSON (Gemini's last event): ours, rendered.
    data.setdefault("usage", openai_shape.usage_json(usage))
    return data


def _openai_choice(index: int, into: dict) -> dict:
    calls = [
        {
            "id": slot["id"],
            "type": "function",
            "function": {"name": slot["name"] or "", "arguments": "".join(slot["arguments"])},
        }
        for _, slot in sorted(into["calls"].items())
    ]
    text = "".join(into["content"])
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    message["refusal"] = None
    if calls:
        message["tool_calls"] = calls
    finish = into["finish_reason"] or "stop"
    return {"index": index, "message": message, "logprobs": None, "finish_reason": finish}


def _anthropic_message(events: list[dict]) -> dict:
    message: dict[str, Any] = {}
    blocks: dict[int, dict] = {}
    arguments: dict[int, list[str]] = {}
    for event in events:
        kind = event.get("type")
        if kind == "message_start":
            message = copy.deepcopy(event.get("message") or {})
        elif kind == "content_block_start":
            blocks[event["index"]] = copy.deepcopy(event["content_block"])
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                blocks[event["index"]]["text"] += delta.get("text") or ""
            else:
                arguments.setdefault(event["index"], []).append(delta.get("partial_json") or "")
        elif kind == "message_delta":
            message.update(event.get("delta") or {})
            later = {k: v for k, v in (event.get("usage") or {}).items() if v is not None}
            message["usage"] = {**(message.get("usage") or {}), **later}
    for index, pieces in arguments.items():
        blocks[index]["input"] = json.loads("".join(pieces) or "{}")
    message["content"] = [blocks[index] for index in sorted(blocks)]
    return message
