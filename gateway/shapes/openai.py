"""The OpenAI chat-completions shape, both ways: client bodies in, vendor bodies out.

A client body is checked for what Tollgate itself reads (model, messages, output cap,
n, stream, end user) and kept whole: to an OpenAI-shaped vendor it goes as it came, with
only the fields Tollgate owns set again (`vendor_body`); answers come back with only the
id and the model name mapped.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

import orjson

from core.errors import GatewayError, InvalidRequest
from gateway.shapes.chat_answers import anthropic_message_to_openai
from gateway.shapes.chat_streams import AnthropicStreamToOpenAI
from gateway.shapes.common import (
    OPENAI_OWNED,
    PromptMeasure,
    checked_bool,
    checked_messages,
    checked_string,
    model_chain,
    optional_max_tokens,
    prompt_parts,
    refuse_unknown,
    split_tags,
    text_of,
    unknown_fields,
)
from gateway.types import OPENAI, Chunk, Completion, ModelRequest, Usage

OWNED = OPENAI_OWNED
# Every other documented request field: forwarded unchanged to OpenAI-shaped vendors.
KNOWN = OWNED | frozenset(
    {
        "messages",
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "metadata",
        "modalities",
        "moderation",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning_effort",
        "response_format",
        "seed",
        "service_tier",
        "stop",
        "store",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "verbosity",
        "web_search_options",
    }
)
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# Service tiers billed at the standard prices a profile lists; another tier costs more.
STANDARD_TIERS = frozenset({None, "auto", "default"})
MAX_CHOICES = 128  # OpenAI's own limit on n

# The internal routes answer text only: their bodies carry plain text turns and these.
TEXT_FIELDS = frozenset(
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
TEXT_ROLES = frozenset({"system", "developer", "user", "assistant"})


def parse_request(body: dict, *, fallback_header: str | None = None) -> ModelRequest:
    """Check a client's chat-completions body and keep it whole as a ModelRequest."""
    body, tags = split_tags(body)
    messages = checked_messages(body, roles=ROLES)
    n = body.get("n")
    if n is None:
        n = 1
    elif isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CHOICES:
        raise InvalidRequest(f"'n' must be an integer from 1 to {MAX_CHOICES}.")
    stream = checked_bool(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise InvalidRequest("'stream_options' must be an object.")
    caller = checked_string(body.get("user"), "user") or checked_string(
        body.get("safety_identifier"), "safety_identifier"
    )
    cap_name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    measure = PromptMeasure()
    measure.add(messages)
    tools = body.get("tools")
    measure.add(tools, keys=True)
    measure.add(body.get("response_format"), keys=True)  # a JSON schema is prompt too
    chain = model_chain(body.get("model"), body.get("fallback_model") or fallback_header)
    return ModelRequest(
        model=chain[0],
        shape=OPENAI,
        body=body,
        tags=tags,
        chain=chain,
        max_tokens=optional_max_tokens(body.get(cap_name), cap_name),
        n=n,
        stream=stream,
        include_usage=bool(options and options.get("include_usage")),
        caller_id=caller,
        prompt_bytes=measure.bytes,
        prompt_parts=prompt_parts(messages, tools),
        media=measure.media,
        unknown=unknown_fields(body, KNOWN),
        surcharged=surcharged(body),
    )


def surcharged(body: dict) -> str | None:
    """Return the first field the vendor bills beyond tokens: web search, a dearer tier."""
    if body.get("web_search_options") is not None:
        return "web_search_options"
    if body.get("service_tier") not in STANDARD_TIERS:
        return "service_tier"
    return None


def parse_text_request(body: dict, *, fallback_header: str | None = None) -> ModelRequest:
    """Parse a body of plain text turns only (the internal routes answer text)."""
    refuse_unknown(body, TEXT_FIELDS)
    if body.get("n") not in (None, 1):
        raise InvalidRequest("'n' other than 1 is not supported: the answer is one text.")
    for index, message in enumerate(checked_messages(body, roles=TEXT_ROLES)):
        refuse_unknown(message, frozenset({"role", "content"}), where=f"messages[{index}]: ")
        text_of(message.get("content"), where=f"messages[{index}]")
    return parse_request(body, fallback_header=fallback_header)


# ---- vendor side: what an OpenAI-shaped upstream is sent and answers ----


# OpenAI's reasoning models refuse `max_tokens`; they take `max_completion_tokens`.
REASONING_MODEL = re.compile(r"^(o\d|gpt-5)")


def output_cap_field(upstream_model: str, payload: dict | None = None) -> str:
    """Return the field that caps an OpenAI model's output: the client's, unless the model
    refuses it."""
    if REASONING_MODEL.match(upstream_model):
        return "max_completion_tokens"
    if payload and "max_completion_tokens" in payload:
        return "max_completion_tokens"
    return "max_tokens"


def vendor_body(
    payload: dict,
    *,
    upstream_model: str,
    caller_label: str | None,
    max_tokens: int,
    stream: bool,
) -> bytes:
    """Build the vendor's body: the payload as it is, and what Tollgate owns set again.

    The output cap is always the one the request's hold assumed, the end user is the
    caller label (or absent), and a stream always reports its usage.
    """
    body = {name: value for name, value in payload.items() if name not in OWNED}
    body["model"] = upstream_model
    body[output_cap_field(upstream_model, payload)] = max_tokens
    if caller_label:
        body["user"] = caller_label
    if stream:
        body["stream"] = True
        body["stream_options"] = {**(payload.get("stream_options") or {}), "include_usage": True}
    return orjson.dumps(body)


FINISH_FROM_VENDOR = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "stop",
}


def usage_from(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    prompt_details = raw.get("prompt_tokens_details") or {}
    output_details = raw.get("completion_tokens_details") or {}
    return Usage(
        input_tokens=int(raw.get("prompt_tokens") or 0),
        output_tokens=int(raw.get("completion_tokens") or 0),
        cache_read_tokens=int(prompt_details.get("cached_tokens") or 0),
        reasoning_tokens=int(output_details.get("reasoning_tokens") or 0),
    )


def usage_json(usage: Usage) -> dict:
    """Render our usage as OpenAI reports it."""
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def completion_from_vendor(data: dict, *, model: str) -> Completion:
    choice = (data.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    return Completion(
        shape=OPENAI,
        data=data,
        text=message.get("content") or "",
        finish_reason=FINISH_FROM_VENDOR.get(choice.get("finish_reason"), "stop"),
        usage=usage_from(data.get("usage")) or Usage(),
        model=model,
    )


_NO_DELTA: dict = {}  # read only


def chunk_from_vendor(data: dict) -> Chunk:
    # Once per streamed event: each lookup is done once (a stream's events are most of its
    # work per token).
    text = ""
    generated = False
    finish = None
    for choice in data.get("choices") or ():
        delta = choice.get("delta") or _NO_DELTA
        content = delta.get("content")
        if content:
            generated = True
            if choice.get("index", 0) == 0:
                text = content
        elif delta.get("tool_calls") or delta.get("refusal"):
            generated = True
        reason = choice.get("finish_reason")
        if reason:
            finish = FINISH_FROM_VENDOR.get(reason, "stop")
    usage = data.get("usage")
    return Chunk(
        shape=OPENAI,
        event=data,
        text=text,
        generated=generated,
        finish_reason=finish,
        usage=None if usage is None else usage_from(usage),
    )


# ---- client side: what a Tollgate client in the OpenAI shape receives ----


def render_completion(c: Completion, *, request_id: str, req: ModelRequest) -> bytes:
    data = c.data if c.shape == OPENAI else anthropic_message_to_openai(c.data)
    return orjson.dumps({**data, "id": f"chatcmpl-{request_id}", "model": c.model})


class StreamRenderer:
    """Render a stream's events as OpenAI SSE for one client stream: the vendor's own
    chunks with id and model mapped, or an Anthropic vendor's events translated."""

    def __init__(self, *, request_id: str, model: str, include_usage: bool) -> None:
        self._head = {
            "id": f"chatcmpl-{request_id}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }
        self._ids = {"id": self._head["id"], "model": model}  # over the vendor's own
        self._include_usage = include_usage
        self._translator: AnthropicStreamToOpenAI | None = None

    def chunk(self, chunk: Chunk) -> bytes:
        if chunk.event is None:
            return b""
        events: Sequence[dict]
        if chunk.shape == OPENAI:
            events = (chunk.event,)
        else:
            if self._translator is None:
                self._translator = AnthropicStreamToOpenAI(include_usage=self._include_usage)
            events = self._translator.feed(chunk.event)
        out = []
        for event in events:
            if not self._include_usage and "usage" in event:
                if not event.get("choices"):
                    continue  # the usage chunk Tollgate asked for, not the client
                event = {name: value for name, value in event.items() if name != "usage"}
            out.append(b"data: " + orjson.dumps({**self._head, **event, **self._ids}) + b"\n\n")
        return b"".join(out)

    def finish(self, finish_reason: str, usage: Usage) -> bytes:
        return b"data: [DONE]\n\n"

    def error(self, exc: GatewayError) -> bytes:
        return b"data: " + exc.body() + b"\n\n"


def stream_renderer(req: ModelRequest, *, request_id: str, model: str) -> StreamRenderer:
    return StreamRenderer(request_id=request_id, model=model, include_usage=req.include_usage)


class OpenAIShape:
    """The chat-completions shape, as the pipeline (ClientShape) and the adapters (VendorShape)
    use it."""

    parse_request = staticmethod(parse_request)
    render_completion = staticmethod(render_completion)
    stream_renderer = staticmethod(stream_renderer)
    vendor_body = staticmethod(vendor_body)
    completion_from_vendor = staticmethod(completion_from_vendor)


OPENAI_SHAPE = OpenAIShape()
