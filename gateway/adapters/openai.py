"""OpenAI and any OpenAI-compatible vendor at its own base URL."""

from __future__ import annotations

import orjson

from gateway.adapters.base import CallTarget, HttpProvider
from gateway.shapes import openai as shape
from gateway.types import OPENAI, Chunk, Completion, ModelRequest


class OpenAIStream:
    def __init__(self) -> None:
        self.done = False

    def feed(self, event: str, data: bytes) -> Chunk | None:
        if data == b"[DONE]":
            self.done = True
            return None
        return shape.chunk_from_vendor(orjson.loads(data))


class OpenAIProvider(HttpProvider):
    shape = OPENAI

    def url_for(self, base_url: str) -> str:
        return base_url + "/chat/completions"

    def headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}

    def body(self, req: ModelRequest, target: CallTarget) -> bytes:
        return shape.vendor_body(
            target.payload,
            upstream_model=target.upstream_model,
            caller_label=target.caller_label,
            max_tokens=target.max_tokens,
            stream=req.stream,
        )

    def completion(self, data: dict, req: ModelRequest) -> Completion:
        return shape.completion_from_vendor(data, model=req.model)

    def decoder(self) -> OpenAIStream:
        return OpenAIStream()
