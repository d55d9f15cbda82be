"""OpenAI and any OpenAI-compatible vendor at its own base URL.

OpenAI itself serves chat completions, the Responses API, embeddings and moderations; a
compatible vendor is trusted with chat completions, embeddings and moderations only, so a
Responses request reaches it translated into chat completions. OpenRouter has no
moderations route (providers.models.MODERATION_KINDS keeps moderation models off it).
"""

from __future__ import annotations

import orjson

from gateway.adapters.base import CallTarget, HttpProvider, ProviderError
from gateway.shapes import openai as chat_shape
from gateway.shapes import responses as responses_shape
from gateway.shapes.embeddings import EMBEDDINGS_SHAPE
from gateway.shapes.moderations import MODERATIONS_SHAPE
from gateway.shapes.openai import OPENAI_SHAPE
from gateway.shapes.protocols import VendorShape
from gateway.shapes.responses import RESPONSES_SHAPE
from gateway.types import (
    EMBEDDINGS,
    MODERATIONS,
    OPENAI,
    RESPONSES,
    Chunk,
    Completion,
    ModelRequest,
)

# Each API: its path under the base URL, and the shape that speaks its bodies.
APIS: dict[str, tuple[str, VendorShape]] = {
    OPENAI: ("/chat/completions", OPENAI_SHAPE),
    RESPONSES: ("/responses", RESPONSES_SHAPE),
    EMBEDDINGS: ("/embeddings", EMBEDDINGS_SHAPE),
    MODERATIONS: ("/moderations", MODERATIONS_SHAPE),
}


class ChatStream:
    def __init__(self) -> None:
        self.done = False

    def feed(self, event: str, data: bytes) -> Chunk | None:
        if data == b"[DONE]":
            self.done = True
            return None
        return chat_shape.chunk_from_vendor(orjson.loads(data))


class ResponsesStream:
    """The Responses API's typed events: it ends with its `response.completed` (or
    `.incomplete`) event, which carries the usage; an `error` or `response.failed` event
    is a vendor failure (retryable while nothing was sent on)."""

    def __init__(self) -> None:
        self.done = False

    def feed(self, event: str, data: bytes) -> Chunk | None:
        payload = orjson.loads(data)
        kind = payload.get("type") if isinstance(payload, dict) else None
        if kind in responses_shape.FAILED_EVENTS:
            raise ProviderError("upstream stream error event", retryable=True)
        chunk = responses_shape.chunk_from_vendor(payload)
        self.done = chunk.finish_reason is not None
        return chunk


class OpenAICompatibleProvider(HttpProvider):
    shape = OPENAI
    native = frozenset({OPENAI, EMBEDDINGS, MODERATIONS})

    def url_for(self, base_url: str, shape: str) -> str:
        return base_url + APIS[shape][0]

    def headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}

    def body(self, req: ModelRequest, target: CallTarget) -> bytes:
        return APIS[self.api(target)][1].vendor_body(
            target.payload,
            upstream_model=target.upstream_model,
            caller_label=target.caller_label,
            max_tokens=target.max_tokens,
            stream=req.stream,
        )

    def completion(self, data: dict, req: ModelRequest, target: CallTarget) -> Completion:
        return APIS[self.api(target)][1].completion_from_vendor(data, model=req.model)

    def decoder(self, target: CallTarget) -> ChatStream | ResponsesStream:
        return ResponsesStream() if self.api(target) == RESPONSES else ChatStream()


class OpenAIProvider(OpenAICompatibleProvider):
    native = frozenset({OPENAI, RESPONSES, EMBEDDINGS, MODERATIONS})
