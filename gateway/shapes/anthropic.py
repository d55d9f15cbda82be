"""The Anthropic messages shape, both ways: client bodies in, vendor bodies out."""

from __future__ import annotations

from typing import Any

import orjson

from core.errors import InvalidRequest
from gateway.shapes.common import (
    model_chain,
    optional_max_tokens,
    optional_number,
    refuse_unknown,
    text_of,
)
from gateway.types import ChatRequest, Chunk, Completion, Message, Usage

FIELDS = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "metadata",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "fallback_model",
    }
)
MESSAGE_FIELDS = frozenset({"role", "content"})
METADATA_FIELDS = frozenset({"user_id"})
STOP_FROM_VENDOR = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "refusal": "stop",
}
STOP_TO_CLIENT = {"stop": "end_turn", "length": "max_tokens"}
API_VERSION = "2023-06-01"


def parse_request(body: dict, *, fallback_header: str | None = None) -> ChatRequest:
    """Turn a client's messages body into a ChatRequest, refusing what we can't do."""
    refuse_unknown(body, FIELDS)
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise InvalidRequest("'messages' must be a non-empty list.")
    messages = []
    for index, raw in enumerate(raw_messages):
        where = f"messages[{index}]"
        if not isinstance(raw, dict) or raw.get("role") not in ("user", "assistant"):
            raise InvalidRequest(f"{where}: role must be 'user' or 'assistant'.")
        refuse_unknown(raw, MESSAGE_FIELDS, where=f"{where}: ")
        messages.append(Message(role=raw["role"], content=text_of(raw.get("content"), where=where)))
    system = body.get("system")
    system_text = text_of(system, where="system") if system is not None else None
    max_tokens = optional_max_tokens(body.get("max_tokens"), "max_tokens")
    if max_tokens is None:
        raise InvalidRequest("'max_tokens' is required.")
    stop = body.get("stop_sequences") or []
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise InvalidRequest("'stop_sequences' must be a list of strings.")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be a boolean.")
    metadata = body.get("metadata") or {}
    if isinstance(metadata, dict):
        refuse_unknown(metadata, METADATA_FIELDS, where="metadata: ")
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    if user_id is not None and not isinstance(user_id, str):
        raise InvalidRequest("'metadata.user_id' must be a string.")
    chain = model_chain(body.get("model"), body.get("fallback_model") or fallback_header)
    return ChatRequest(
        model=chain[0],
        chain=chain,
        messages=tuple(messages),
        system=system_text or None,
        max_tokens=max_tokens,
        temperature=optional_number(body, "temperature", low=0, high=1),
        top_p=optional_number(body, "top_p", low=0, high=1),
        stop=tuple(stop),
        stream=stream,
        caller_id=user_id or None,
    )


# ---- vendor side ----


def vendor_body(
    req: ChatRequest, *, upstream_model: str, max_tokens: int, caller_label: str | None
) -> bytes:
    # Anthropic wants alternating turns: merge neighbours of the same role.
    merged: list[dict[str, Any]] = []
    for m in req.messages:
        if merged and merged[-1]["role"] == m.role:
            merged[-1]["content"] += "\n\n" + m.content
        else:
            merged.append({"role": m.role, "content": m.content})
    body: dict[str, Any] = {"model": upstream_model, "max_tokens": max_tokens, "messages": merged}
    if req.system:
        body["system"] = req.system
    if req.temperature is not None:
        body["temperature"] = min(req.temperature, 1.0)
    if req.top_p is not None:
        body["top_p"] = req.top_p
    if req.stop:
        body["stop_sequences"] = list(req.stop)
    if caller_label:
        body["metadata"] = {"user_id": caller_label}
    if req.stream:
        body["stream"] = True
    return orjson.dumps(body)


def usage_from(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    return Usage(
        input_tokens=int(raw.get("input_tokens") or 0),
        output_tokens=int(raw.get("output_tokens") or 0),
    )


def completion_from_vendor(data: dict, *, model: str) -> Completion:
    text = "".join(
        block.get("text", "") for block in data.get("content") or [] if block.get("type") == "text"
    )
    return Completion(
        text=text,
        finish_reason=STOP_FROM_VENDOR.get(data.get("stop_reason"), "stop"),
        usage=usage_from(data.get("usage")) or Usage(),
        model=model,
    )


class VendorStreamState:
    """Fold Anthropic stream events into our chunks (usage arrives in two parts)."""

    def __init__(self) -> None:
        self.input_tokens = 0

    def chunk_from_event(self, event: str, data: dict) -> Chunk | None:
        if event == "content_block_delta":
            delta = data.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                return Chunk(text=delta["text"])
            return None
        if event == "message_start":
            usage = usage_from((data.get("message") or {}).get("usage"))
            self.input_tokens = usage.input_tokens if usage else 0
            return None
        if event == "message_delta":
            stop = (data.get("delta") or {}).get("stop_reason")
            output = int((data.get("usage") or {}).get("output_tokens") or 0)
            input_tokens = int((data.get("usage") or {}).get("input_tokens") or 0)
            return Chunk(
                finish_reason=STOP_FROM_VENDOR.get(stop, "stop"),
                usage=Usage(input_tokens=input_tokens or self.input_tokens, output_tokens=output),
            )
        return None


# ---- client side ----


def render_completion(c: Completion, *, request_id: str) -> bytes:
    return orjson.dumps(
        {
            "id": f"msg_{request_id}",
            "type": "message",
            "role": "assistant",
            "model": c.model,
            "content": [{"type": "text", "text": c.text}],
            "stop_reason": STOP_TO_CLIENT.get(c.finish_reason, "end_turn"),
            "stop_sequence": None,
            "usage": {"input_tokens": c.usage.input_tokens, "output_tokens": c.usage.output_tokens},
        }
    )


def _event(name: str, data: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class StreamRenderer:
    """Render our chunks as Anthropic SSE events for one client stream."""

    def __init__(self, *, request_id: str, model: str, input_tokens_estimate: int = 0) -> None:
        self._request_id = request_id
        self._model = model
        self._input_estimate = input_tokens_estimate

    def start(self) -> bytes:
        message = {
            "id": f"msg_{self._request_id}",
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self._input_estimate, "output_tokens": 0},
        }
        return _event("message_start", {"type": "message_start", "message": message}) + _event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        )

    def chunk(self, chunk: Chunk) -> bytes:
        if not chunk.text:
            return b""
        return _event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": chunk.text},
            },
        )

    def finish(self, finish_reason: str, usage: Usage) -> bytes:
        return (
            _event("content_block_stop", {"type": "content_block_stop", "index": 0})
            + _event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": STOP_TO_CLIENT.get(finish_reason, "end_turn"),
                        "stop_sequence": None,
                    },
                    "usage": {
                        "input_tokens": usage.input_tokens,
                        "output_tokens": usage.output_tokens,
                    },
                },
            )
            + _event("message_stop", {"type": "message_stop"})
        )

    def error(self, exc: Exception) -> bytes:
        code = getattr(exc, "code", "LM-5001")
        message = getattr(exc, "message", "stream failed")
        return _event(
            "error",
            {"type": "error", "error": {"type": "api_error", "message": message, "code": code}},
        )


def stream_renderer(req: ChatRequest, *, request_id: str, model: str) -> StreamRenderer:
    return StreamRenderer(request_id=request_id, model=model)
