"""The OpenAI chat-completions shape, both ways: client bodies in, vendor bodies out."""

from __future__ import annotations

import re
import time
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
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "stream",
        "stream_options",
        "user",
        "n",
        "fallback_model",
    }
)
MESSAGE_FIELDS = frozenset({"role", "content"})


def parse_request(body: dict, *, fallback_header: str | None = None) -> ChatRequest:
    """Turn a client's chat-completions body into a ChatRequest, refusing what we can't do."""
    refuse_unknown(body, FIELDS)
    if body.get("n") not in (None, 1):
        raise InvalidRequest("'n' other than 1 is not supported.")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise InvalidRequest("'messages' must be a non-empty list.")
    system_parts: list[str] = []
    messages: list[Message] = []
    for index, raw in enumerate(raw_messages):
        if not isinstance(raw, dict):
            raise InvalidRequest(f"messages[{index}] must be an object.")
        role = raw.get("role")
        where = f"messages[{index}]"
        if raw.get("tool_calls") or role in ("tool", "function"):
            raise InvalidRequest(f"{where}: tool calls are not supported by Tollgate.")
        refuse_unknown(raw, MESSAGE_FIELDS, where=f"{where}: ")
        content = text_of(raw.get("content"), where=where)
        if role in ("system", "developer"):
            system_parts.append(content)
        elif role in ("user", "assistant"):
            messages.append(Message(role=role, content=content))
        else:
            raise InvalidRequest(f"{where}: unknown role {role!r}.")
    if not messages:
        raise InvalidRequest("'messages' needs at least one user message.")
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and (
        not isinstance(stop, list) or not all(isinstance(s, str) for s in stop)
    ):
        raise InvalidRequest("'stop' must be a string or a list of strings.")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be a boolean.")
    options = body.get("stream_options") or {}
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise InvalidRequest("'user' must be a string.")
    chain = model_chain(body.get("model"), body.get("fallback_model") or fallback_header)
    max_tokens = optional_max_tokens(
        body.get("max_completion_tokens", body.get("max_tokens")), "max_tokens"
    )
    return ChatRequest(
        model=chain[0],
        chain=chain,
        messages=tuple(messages),
        system="\n\n".join(system_parts) or None,
        max_tokens=max_tokens,
        temperature=optional_number(body, "temperature", low=0, high=2),
        top_p=optional_number(body, "top_p", low=0, high=1),
        stop=tuple(stop or ()),
        stream=stream,
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        caller_id=user or None,
    )


# ---- vendor side: what an OpenAI-compatible upstream is sent and answers ----


# OpenAI's reasoning models refuse `max_tokens`; they take `max_completion_tokens`.
REASONING_MODEL = re.compile(r"^(o\d|gpt-5)")


def output_cap_field(upstream_model: str) -> str:
    """Return the field that caps an OpenAI model's output tokens."""
    return "max_completion_tokens" if REASONING_MODEL.match(upstream_model) else "max_tokens"


def vendor_body(
    req: ChatRequest, *, upstream_model: str, caller_label: str | None, max_tokens: int
) -> bytes:
    """Build the vendor's body; it always carries the output cap the request's hold assumed."""
    messages: list[dict[str, Any]] = []
    if req.system:
        messages.append({"role": "system", "content": req.system})
    messages.extend({"role": m.role, "content": m.content} for m in req.messages)
    body: dict[str, Any] = {"model": upstream_model, "messages": messages}
    body[output_cap_field(upstream_model)] = max_tokens
    if req.temperature is not None:
        body["temperature"] = req.temperature
    if req.top_p is not None:
        body["top_p"] = req.top_p
    if req.stop:
        body["stop"] = list(req.stop)
    if caller_label:
        body["user"] = caller_label
    if req.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


FINISH_FROM_VENDOR = {"stop": "stop", "length": "length", "content_filter": "stop"}


def usage_from(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    return Usage(
        input_tokens=int(raw.get("prompt_tokens") or 0),
        output_tokens=int(raw.get("completion_tokens") or 0),
    )


def completion_from_vendor(data: dict, *, model: str) -> Completion:
    choice = (data.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    return Completion(
        text=message.get("content") or "",
        finish_reason=FINISH_FROM_VENDOR.get(choice.get("finish_reason"), "stop"),
        usage=usage_from(data.get("usage")) or Usage(),
        model=model,
    )


def chunk_from_vendor(data: dict) -> Chunk | None:
    usage = usage_from(data.get("usage"))
    choices = data.get("choices") or []
    if choices:
        choice = choices[0]
        text = (choice.get("delta") or {}).get("content") or ""
        finish = choice.get("finish_reason")
        if text or finish or usage:
            return Chunk(
                text=text,
                finish_reason=FINISH_FROM_VENDOR.get(finish, "stop") if finish else None,
                usage=usage,
            )
        return None
    return Chunk(usage=usage) if usage else None


# ---- client side: what a Tollgate client in the OpenAI shape receives ----


def render_completion(c: Completion, *, request_id: str) -> bytes:
    return orjson.dumps(
        {
            "id": f"chatcmpl-{request_id}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": c.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": c.text},
                    "finish_reason": c.finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": c.usage.input_tokens,
                "completion_tokens": c.usage.output_tokens,
                "total_tokens": c.usage.total_tokens,
            },
        }
    )


class StreamRenderer:
    """Render our chunks as OpenAI SSE for one client stream."""

    def __init__(self, *, request_id: str, model: str, include_usage: bool) -> None:
        self._head = {
            "id": f"chatcmpl-{request_id}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }
        self._include_usage = include_usage
        self._extra = {"usage": None} if include_usage else {}

    def _event(self, choices: list, **extra: Any) -> bytes:
        return b"data: " + orjson.dumps({**self._head, "choices": choices, **extra}) + b"\n\n"

    def start(self) -> bytes:
        delta = {"role": "assistant", "content": ""}
        choice = {"index": 0, "delta": delta, "finish_reason": None}
        return self._event([choice], **self._extra)

    def chunk(self, chunk: Chunk) -> bytes:
        if not chunk.text:
            return b""
        choice = {"index": 0, "delta": {"content": chunk.text}, "finish_reason": None}
        return self._event([choice], **self._extra)

    def finish(self, finish_reason: str, usage: Usage) -> bytes:
        out = self._event(
            [{"index": 0, "delta": {}, "finish_reason": finish_reason}], **self._extra
        )
        if self._include_usage:
            out += self._event(
                [],
                usage={
                    "prompt_tokens": usage.input_tokens,
                    "completion_tokens": usage.output_tokens,
                    "total_tokens": usage.total_tokens,
                },
            )
        return out + b"data: [DONE]\n\n"

    def error(self, exc: Exception) -> bytes:
        body = exc.body() if hasattr(exc, "body") else b'{"error":{"message":"stream failed"}}'
        return b"data: " + body + b"\n\n"


def stream_renderer(req: ChatRequest, *, request_id: str, model: str) -> StreamRenderer:
    return StreamRenderer(request_id=request_id, model=model, include_usage=req.include_usage)
