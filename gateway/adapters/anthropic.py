"""Anthropic's messages API."""

from __future__ import annotations

import orjson

from gateway.adapters.base import CallTarget, HttpProvider, ProviderError
from gateway.shapes import anthropic as anthropic_shape
from gateway.shapes.anthropic import ANTHROPIC_SHAPE
from gateway.types import ANTHROPIC, Chunk, Completion, ModelRequest


class AnthropicStream:
    def __init__(self) -> None:
        self.done = False

    def feed(self, event: str, data: bytes) -> Chunk | None:
        if event == "message_stop":
            self.done = True
            return None
        if event == "error":
            # Mid-stream vendor error (e.g. overloaded): retryable if nothing was sent yet.
            raise ProviderError("upstream stream error event", retryable=True, status=529)
        if event == "ping":
            return None  # a keep-alive: ours are the bytes we send
        return anthropic_shape.chunk_from_event(event, orjson.loads(data))


class AnthropicProvider(HttpProvider):
    shape = ANTHROPIC
    native = frozenset({ANTHROPIC})

    def url_for(self, base_url: str, shape: str) -> str:
        return base_url + ("/messages" if base_url.endswith("/v1") else "/v1/messages")

    def headers(self, api_key: str) -> dict[str, str]:
        return {
            "x-api-key": api_key,
            "anthropic-version": anthropic_shape.API_VERSION,
            "content-type": "application/json",
        }

    def body(self, req: ModelRequest, target: CallTarget) -> bytes:
        return ANTHROPIC_SHAPE.vendor_body(
            target.payload,
            upstream_model=target.upstream_model,
            max_tokens=target.max_tokens,
            caller_label=target.caller_label,
            stream=req.stream,
        )

    def completion(self, data: dict, req: ModelRequest, target: CallTarget) -> Completion:
        return ANTHROPIC_SHAPE.completion_from_vendor(data, model=req.model)

    def decoder(self, target: CallTarget) -> AnthropicStream:
        return AnthropicStream()

    async def count_tokens(self, body: dict, api_key: str) -> int:
        """Ask the vendor's count-tokens API how many input tokens `body` holds.

        `body` goes as given (the caller names the upstream model). Failures raise
        ProviderError, mapped as `complete` maps them; the vendor's body is never kept.
        """
        data = await self.post_json(
            self._urls[ANTHROPIC] + "/count_tokens", orjson.dumps(body), api_key
        )
        tokens = data.get("input_tokens")
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            raise ProviderError("upstream sent no input_tokens", retryable=True)
        return tokens
