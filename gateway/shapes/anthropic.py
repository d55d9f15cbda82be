"""The Anthropic messages shape, both ways: client bodies in, vendor bodies out.

As for the OpenAI shape: the client's body is checked for what Tollgate reads and kept
whole; to an Anthropic vendor it goes as it came but for the fields Tollgate owns.
Refusals on these routes come back in Anthropic's error shape, carrying our code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from core.errors import GatewayError, InvalidRequest
from gateway.shapes.chat_answers import openai_completion_to_anthropic
from gateway.shapes.chat_streams import OpenAIStreamToAnthropic
from gateway.shapes.common import (
    ANTHROPIC_OWNED,
    PromptMeasure,
    checked_bool,
    checked_messages,
    model_chain,
    optional_max_tokens,
    prompt_parts,
    refuse_unknown,
    split_tags,
    unknown_fields,
)
from gateway.types import ANTHROPIC, Chunk, Completion, ModelRequest, Usage

# Metadata carries only the end user: Tollgate sets it to the label.
OWNED = ANTHROPIC_OWNED
KNOWN = OWNED | frozenset(
    {
        "messages",
        "system",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "tools",
        "tool_choice",
        "thinking",
        "service_tier",
        "container",
        "mcp_servers",
        "context_management",
        "cache_control",
        "output_config",
        "output_format",
        "inference_geo",
        "speed",
    }
)
ROLES = frozenset({"user", "assistant"})
# Server tools the vendor runs and bills per use (searches, fetches, container hours), and
# request fields that start such work: no token price covers them.
SURCHARGED_TOOLS = ("web_search", "web_fetch", "code_execution")
SURCHARGED_FIELDS = ("mcp_servers", "container")
METADATA_FIELDS = frozenset({"user_id"})
# Looked up with the vendor's `stop_reason`, which may be null.
STOP_FROM_VENDOR: dict[str | None, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "refusal": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}
API_VERSION = "2023-06-01"
# Anthropic's error types by our HTTP status: what its SDK expects to read.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    413: "request_too_large",
    422: "invalid_request_error",  # a vendor's refusal passed on (LM-2002); Anthropic sends none
    429: "rate_limit_error",
    503: "overloaded_error",
}


def parse_request(body: dict, *, fallback_header: str | None = None) -> ModelRequest:
    """Check a client's messages body and keep it whole as a ModelRequest."""
    body, tags = split_tags(body)
    messages = checked_messages(body, roles=ROLES)
    max_tokens = optional_max_tokens(body.get("max_tokens"), "max_tokens")
    if max_tokens is None:
        raise InvalidRequest("'max_tokens' is required.")
    _check_thinking(body.get("thinking"), max_tokens)
    stop = body.get("stop_sequences")
    if stop is not None and (
        not isinstance(stop, list) or not all(isinstance(s, str) for s in stop)
    ):
        raise InvalidRequest("'stop_sequences' must be a list of strings.")
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise InvalidRequest("'metadata' must be an object.")
    refuse_unknown(metadata, METADATA_FIELDS, where="metadata: ")
    user_id = metadata.get("user_id")
    if user_id is not None and not isinstance(user_id, str):
        raise InvalidRequest("'metadata.user_id' must be a string.")
    measure = PromptMeasure()
    measure.add(body.get("system"))
    measure.add(messages)
    tools = body.get("tools")
    measure.add(tools, keys=True)
    chain = model_chain(body.get("model"), body.get("fallback_model") or fallback_header)
    return ModelRequest(
        model=chain[0],
        shape=ANTHROPIC,
        body=body,
        tags=tags,
        chain=chain,
        max_tokens=max_tokens,
        stream=checked_bool(body, "stream"),
        caller_id=user_id or None,
        prompt_bytes=measure.bytes,
        prompt_parts=prompt_parts(messages, tools),
        media=measure.media,
        unknown=unknown_fields(body, KNOWN),
        surcharged=surcharged(body),
    )


def surcharged(body: dict) -> str | None:
    """Return the first field the vendor bills beyond tokens (a server tool, MCP servers)."""
    for name in SURCHARGED_FIELDS:
        if body.get(name):
            return name
    for index, tool in enumerate(body.get("tools") or ()):
        if isinstance(tool, dict) and str(tool.get("type", "")).startswith(SURCHARGED_TOOLS):
            return f"tools[{index}].type"
    return None


def _check_thinking(thinking: Any, max_tokens: int) -> None:
    """Thinking spends from max_tokens, so the hold on max_tokens covers its budget."""
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return
    budget = thinking.get("budget_tokens")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise InvalidRequest("'thinking.budget_tokens' must be a positive integer.")
    if budget >= max_tokens:
        raise InvalidRequest("'max_tokens' must be greater than 'thinking.budget_tokens'.")


# ---- vendor side ----


def vendor_body(
    payload: dict,
    *,
    upstream_model: str,
    max_tokens: int,
    caller_label: str | None,
    stream: bool,
) -> bytes:
    """Build the vendor's body: the payload as it is, and what Tollgate owns set again."""
    body = {name: value for name, value in payload.items() if name not in OWNED}
    body["model"] = upstream_model
    body["max_tokens"] = max_tokens
    if caller_label:
        body["metadata"] = {"user_id": caller_label}
    if stream:
        body["stream"] = True
    return orjson.dumps(body)


def usage_from(raw: Any) -> Usage | None:
    """Read Anthropic's usage: its input_tokens leave out cache reads and writes; ours count
    every prompt token."""
    if not isinstance(raw, dict):
        return None
    cache_read = int(raw.get("cache_read_input_tokens") or 0)
    cache_write = int(raw.get("cache_creation_input_tokens") or 0)
    return Usage(
        input_tokens=int(raw.get("input_tokens") or 0) + cache_read + cache_write,
        output_tokens=int(raw.get("output_tokens") or 0),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


def usage_json(usage: Usage) -> dict:
    """Render our usage as Anthropic reports it."""
    return {
        "input_tokens": usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens,
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
    }


def completion_from_vendor(data: dict, *, model: str) -> Completion:
    text = "".join(
        block.get("text", "") for block in data.get("content") or [] if block.get("type") == "text"
    )
    return Completion(
        shape=ANTHROPIC,
        data=data,
        text=text,
        finish_reason=STOP_FROM_VENDOR.get(data.get("stop_reason"), "stop"),
        usage=usage_from(data.get("usage")) or Usage(),
        model=model,
    )


GENERATED_DELTAS = frozenset({"text_delta", "input_json_delta", "thinking_delta"})


def chunk_from_event(event: str, data: dict) -> Chunk | None:
    """Read one Anthropic stream event (message_stop, ping and error are the adapter's)."""
    if event == "content_block_delta":
        delta = data.get("delta") or {}
        kind = delta.get("type")
        return Chunk(
            shape=ANTHROPIC,
            event=data,
            text=delta.get("text") or "" if kind == "text_delta" else "",
            generated=kind in GENERATED_DELTAS,
        )
    if event == "message_start":
        usage = usage_from((data.get("message") or {}).get("usage"))
        return Chunk(shape=ANTHROPIC, event=data, usage=usage)
    if event == "message_delta":
        stop = (data.get("delta") or {}).get("stop_reason")
        return Chunk(
            shape=ANTHROPIC,
            event=data,
            finish_reason=STOP_FROM_VENDOR.get(stop, "stop"),
            usage=usage_from(data.get("usage")),
        )
    return Chunk(shape=ANTHROPIC, event=data)


# ---- client side ----


def render_completion(c: Completion, *, request_id: str, req: ModelRequest) -> bytes:
    data = c.data if c.shape == ANTHROPIC else openai_completion_to_anthropic(c.data)
    return orjson.dumps({**data, "id": f"msg_{request_id}", "model": c.model})


def error_json(exc: GatewayError) -> dict:
    """Return our refusal in Anthropic's error shape, our code kept beside its type."""
    return {
        "type": "error",
        "error": {
            "type": ERROR_TYPES.get(exc.status, "api_error"),
            "message": exc.message,
            "code": exc.code,
        },
    }


def error_body(exc: GatewayError) -> bytes:
    return orjson.dumps(error_json(exc))


def _event(data: dict) -> bytes:
    return b"event: " + data["type"].encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class StreamRenderer:
    """Render a stream's events as Anthropic SSE for one client stream: the vendor's own
    events with the message id and model mapped, or an OpenAI vendor's chunks translated."""

    def __init__(self, *, request_id: str, model: str) -> None:
        self._ids = {"id": f"msg_{request_id}", "model": model}
        self._translator: OpenAIStreamToAnthropic | None = None

    def chunk(self, chunk: Chunk) -> bytes:
        if chunk.event is None:
            return b""
        events: Sequence[dict]
        if chunk.shape == ANTHROPIC:
            events = (chunk.event,)
        else:
            if self._translator is None:
                self._translator = OpenAIStreamToAnthropic()
            events = self._translator.feed(chunk.event)
        return b"".join(_event(self._named(event)) for event in events)

    def _named(self, event: dict) -> dict:
        if event.get("type") != "message_start":
            return event
        return {**event, "message": {**event.get("message", {}), **self._ids}}

    def finish(self, finish_reason: str, usage: Usage) -> bytes:
        if self._translator is None:  # the vendor's own end, bar its last event
            return _event({"type": "message_stop"})
        return b"".join(_event(self._named(event)) for event in self._translator.finish())

    def error(self, exc: GatewayError) -> bytes:
        return _event(error_json(exc))


def stream_renderer(req: ModelRequest, *, request_id: str, model: str) -> StreamRenderer:
    return StreamRenderer(request_id=request_id, model=model)


class AnthropicShape:
    """The messages shape, as the pipeline (ClientShape) and the adapters (VendorShape) use it."""

    parse_request = staticmethod(parse_request)
    render_completion = staticmethod(render_completion)
    stream_renderer = staticmethod(stream_renderer)
    vendor_body = staticmethod(vendor_body)
    completion_from_vendor = staticmethod(completion_from_vendor)


ANTHROPIC_SHAPE = AnthropicShape()
