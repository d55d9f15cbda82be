"""OpenAI's Responses API shape (`POST /v1/responses`): client bodies in, vendor bodies out.

Served natively by OpenAI-kind vendors: the body goes as it came but for the fields
Tollgate owns (the model mapped, the output cap the hold assumed, the caller label as the
safety identifier, `store` false), and the answer and its typed events come back with only
the response's id and model mapped. On vendors that speak chat completions only, and on
Anthropic's, it is translated (gateway/shapes/responses_requests.py, then
requests_to_anthropic.py; answers back through responses_answers.py and responses_streams.py).

Tollgate keeps no responses. `store` goes to every vendor as false: a response kept at the
vendor under the platform's key would be another tenant's to read. So a client asking to
store (`store: true`, `background`) or to continue what was stored (`previous_response_id`,
`conversation`, a stored `prompt` template) is refused with LM-2001, saying to send the
conversation in `input`, as stateless Responses clients do; `GET /v1/responses/{id}` is a
404 for every id.
"""

from __future__ import annotations

from typing import Any

import orjson

from core.errors import GatewayError, InvalidRequest
from gateway.shapes.chat_answers import anthropic_message_to_openai
from gateway.shapes.chat_streams import AnthropicStreamToOpenAI
from gateway.shapes.common import (
    RESPONSES_OWNED,
    RESPONSES_STATEFUL,
    PromptMeasure,
    checked_bool,
    checked_string,
    model_chain,
    optional_max_tokens,
    split_tags,
    unknown_fields,
)
from gateway.shapes.responses_answers import chat_completion_to_response
from gateway.shapes.responses_streams import ChatStreamToResponses
from gateway.types import ANTHROPIC, OPENAI, RESPONSES, Chunk, Completion, ModelRequest, Usage

OWNED = RESPONSES_OWNED
# Every other documented request field: forwarded unchanged to OpenAI's Responses API.
KNOWN = OWNED | frozenset(
    {
        "access_programs",
        "background",
        "context_management",
        "conversation",
        "image",
        "include",
        "input",
        "instructions",
        "max_tool_calls",
        "metadata",
        "moderation",
        "parallel_tool_calls",
        "previous_response_id",
        "prompt",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning",
        "service_tier",
        "stream_options",
        "temperature",
        "text",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "truncation",
    }
)
# Tools the vendor runs and bills beyond tokens: no price of ours covers them.
SERVER_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_2025_08_26",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "image_generation",
        "computer_use",
        "computer_use_preview",
        "mcp",
    }
)
STANDARD_TIERS = frozenset({None, "auto", "default"})
# Events that end a stream as a failure; `chunk_from_vendor` never sees them.
FAILED_EVENTS = frozenset({"error", "response.failed"})
# Events carrying generated output: the first one commits the stream (no fallback after).
GENERATED_EVENTS = frozenset(
    {
        "response.output_text.delta",
        "response.refusal.delta",
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
    }
)
ENDED_EVENTS = frozenset({"response.completed", "response.incomplete"})


def parse_request(body: dict, *, fallback_header: str | None = None) -> ModelRequest:
    """Check a Responses API body for what Tollgate reads and keep it whole."""
    body, tags = split_tags(body)
    items = body.get("input")
    if not (isinstance(items, str) and items) and not (isinstance(items, list) and items):
        raise InvalidRequest("'input' must be a non-empty string or a non-empty list of items.")
    for name in RESPONSES_STATEFUL:
        if body.get(name) not in (None, False):
            why = (
                "'store' must be false: Tollgate keeps no responses."
                if name == "store"
                else f"'{name}' needs state kept at the vendor: Tollgate keeps none."
            )
            raise InvalidRequest(f"{why} Send the whole conversation in 'input'.")
    instructions = checked_string(body.get("instructions"), "instructions")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise InvalidRequest("'tools' must be a list.")
    text = body.get("text")
    if text is not None and not isinstance(text, dict):
        raise InvalidRequest("'text' must be an object.")
    measure = PromptMeasure()
    measure.add(instructions)
    measure.add(items)
    measure.add(tools, keys=True)
    measure.add((text or {}).get("format"), keys=True)  # a JSON schema is prompt too
    caller = checked_string(body.get("user"), "user") or checked_string(
        body.get("safety_identifier"), "safety_identifier"
    )
    chain = model_chain(body.get("model"), body.get("fallback_model") or fallback_header)
    return ModelRequest(
        model=chain[0],
        shape=RESPONSES,
        body=body,
        tags=tags,
        chain=chain,
        max_tokens=optional_max_tokens(body.get("max_output_tokens"), "max_output_tokens"),
        stream=checked_bool(body, "stream"),
        caller_id=caller,
        prompt_bytes=measure.bytes,
        prompt_parts=(1 if isinstance(items, str) else len(items))
        + (len(tools) if tools else 0)
        + (1 if instructions else 0),
        media=measure.media,
        unknown=unknown_fields(body, KNOWN),
        surcharged=surcharged(body),
    )


def surcharged(body: dict) -> str | None:
    """Return the first field the vendor bills beyond tokens: a server tool, a dearer tier."""
    for index, tool in enumerate(body.get("tools") or ()):
        if isinstance(tool, dict) and tool.get("type") in SERVER_TOOLS:
            return f"tools[{index}]"
    if body.get("service_tier") not in STANDARD_TIERS:
        return "service_tier"
    return None


# ---- vendor side: what OpenAI's Responses API is sent and answers ----


def vendor_body(
    payload: dict,
    *,
    upstream_model: str,
    caller_label: str | None,
    max_tokens: int,
    stream: bool,
) -> bytes:
    """Build the vendor's body: the payload as it is, and what Tollgate owns set again."""
    body = {name: value for name, value in payload.items() if name not in OWNED}
    body["model"] = upstream_model
    body["max_output_tokens"] = max_tokens
    body["store"] = False
    if caller_label:
        body["safety_identifier"] = caller_label
    if stream:
        body["stream"] = True
    return orjson.dumps(body)


def usage_from(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    return Usage(
        input_tokens=int(raw.get("input_tokens") or 0),
        output_tokens=int(raw.get("output_tokens") or 0),
        cache_read_tokens=int((raw.get("input_tokens_details") or {}).get("cached_tokens") or 0),
        reasoning_tokens=int((raw.get("output_tokens_details") or {}).get("reasoning_tokens") or 0),
    )


def finish_reason_of(response: dict) -> str:
    """Say how a response ended, in our words: "length" when its output cap cut it."""
    details = response.get("incomplete_details") or {}
    if response.get("status") == "incomplete" and details.get("reason") == "max_output_tokens":
        return "length"
    if any(item.get("type") == "function_call" for item in response.get("output") or ()):
        return "tool_calls"
    return "stop"


def output_text(response: dict) -> str:
    return "".join(
        part.get("text") or ""
        for item in response.get("output") or ()
        if item.get("type") == "message"
        for part in item.get("content") or ()
        if part.get("type") == "output_text"
    )


def completion_from_vendor(data: dict, *, model: str) -> Completion:
    return Completion(
        shape=RESPONSES,
        data=data,
        text=output_text(data),
        finish_reason=finish_reason_of(data),
        usage=usage_from(data.get("usage")) or Usage(),
        model=model,
    )


def chunk_from_vendor(event: dict) -> Chunk:
    """Read one typed event: its text, whether it generated output, how the answer ended."""
    kind = event.get("type")
    if kind in ENDED_EVENTS:
        response = event.get("response") or {}
        return Chunk(
            shape=RESPONSES,
            event=event,
            finish_reason=finish_reason_of(response),
            usage=usage_from(response.get("usage")),
        )
    return Chunk(
        shape=RESPONSES,
        event=event,
        text=(event.get("delta") or "") if kind == "response.output_text.delta" else "",
        generated=kind in GENERATED_EVENTS,
    )


# ---- client side: what a Responses client of Tollgate receives ----


def response_id(request_id: str) -> str:
    return f"resp_{request_id}"


def render_completion(c: Completion, *, request_id: str, req: ModelRequest) -> bytes:
    rid = response_id(request_id)
    if c.shape == RESPONSES:
        return orjson.dumps({**c.data, "id": rid, "model": c.model})
    chat = c.data if c.shape == OPENAI else anthropic_message_to_openai(c.data)
    return orjson.dumps(
        chat_completion_to_response(chat, response_id=rid, model=c.model, request=req.body)
    )


class StreamRenderer:
    """Render a stream as the Responses API's typed SSE events for one client stream: a
    native vendor's events with the response's id and model mapped, or a chat vendor's
    chunks (an Anthropic vendor's events through chat chunks) translated."""

    def __init__(self, *, request_id: str, model: str, request: dict) -> None:
        self._id = response_id(request_id)
        self._model = model
        self._request = request
        self._next_sequence = 0
        self._to_responses: ChatStreamToResponses | None = None
        self._to_chat: AnthropicStreamToOpenAI | None = None

    def chunk(self, chunk: Chunk) -> bytes:
        if chunk.event is None:
            return b""
        if chunk.shape == RESPONSES:
            return self._events([self._named(chunk.event)])
        chats = [chunk.event]
        if chunk.shape == ANTHROPIC:
            if self._to_chat is None:
                self._to_chat = AnthropicStreamToOpenAI(include_usage=True)
            chats = self._to_chat.feed(chunk.event)
        translator = self._translator()
        return self._events([event for chat in chats for event in translator.feed(chat)])

    def _translator(self) -> ChatStreamToResponses:
        if self._to_responses is None:
            self._to_responses = ChatStreamToResponses(
                response_id=self._id, model=self._model, request=self._request
            )
        return self._to_responses

    def _named(self, event: dict) -> dict:
        response = event.get("response")
        if not isinstance(response, dict):
            return event
        return {**event, "response": {**response, "id": self._id, "model": self._model}}

    def _events(self, events: list[dict]) -> bytes:
        out = []
        for event in events:
            # Numbered in the order the client gets them: an output guardrail may hold back
            # a vendor's event or send one twice (gateway/guard_output.py).
            if event.get("sequence_number", self._next_sequence) != self._next_sequence:
                event = {**event, "sequence_number": self._next_sequence}
            self._next_sequence += 1
            out.append(
                b"event: "
                + str(event.get("type", "")).encode()
                + b"\ndata: "
                + orjson.dumps(event)
                + b"\n\n"
            )
        return b"".join(out)

    def finish(self, finish_reason: str, usage: Usage) -> bytes:
        # A native vendor's own `response.completed` already went on.
        if self._to_responses is None:
            return b""
        return self._events(self._to_responses.finish())

    def error(self, exc: GatewayError) -> bytes:
        """Return the `error` event that ends a broken stream (our code in its `error`, which
        the SDK raises as an APIError)."""
        return self._events(
            [
                {
                    "type": "error",
                    "sequence_number": self._next_sequence,
                    "code": exc.code,
                    "message": exc.message,
                    "param": None,
                    **orjson.loads(exc.body()),
                }
            ]
        )


def stream_renderer(req: ModelRequest, *, request_id: str, model: str) -> StreamRenderer:
    return StreamRenderer(request_id=request_id, model=model, request=req.body)


class ResponsesShape:
    """The Responses API's shape, as the pipeline (ClientShape) and the adapters (VendorShape)
    use it."""

    parse_request = staticmethod(parse_request)
    render_completion = staticmethod(render_completion)
    stream_renderer = staticmethod(stream_renderer)
    vendor_body = staticmethod(vendor_body)
    completion_from_vendor = staticmethod(completion_from_vendor)


RESPONSES_SHAPE = ResponsesShape()
