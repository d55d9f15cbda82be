"""The internal routes' shape: an OpenAI-like body naming a group and the caller's request id,
answered as JSON, or as SSE `token` events then `done`."""

from __future__ import annotations

from dataclasses import replace

import orjson

from core.errors import GatewayError
from gateway.shapes import openai as openai_shape
from gateway.shapes.common import split_tags
from gateway.types import Chunk, Completion, ModelRequest, Usage

ENVELOPE_FIELDS = ("group", "request_id")


def parse_request(
    data: dict, *, stream: bool | None = None, fallback_header: str | None = None
) -> ModelRequest:
    """Parse the body without its envelope; `stream`, unless None, is the route's choice.
    `metadata` may carry only `tags` here (the text routes take no other metadata)."""
    body, tags = split_tags({k: v for k, v in data.items() if k not in ENVELOPE_FIELDS})
    req = openai_shape.parse_text_request(body, fallback_header=fallback_header)
    return replace(req, tags=tags, stream=req.stream if stream is None else stream)


def _usage(usage: Usage) -> dict:
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}


def render_completion(c: Completion, *, request_id: str, req: ModelRequest) -> bytes:
    return orjson.dumps(
        {
            "request_id": request_id,
            "model": c.model,
            "content": c.text,
            "finish_reason": c.finish_reason,
            "usage": _usage(c.usage),
        }
    )


class StreamRenderer:
    def __init__(self, *, request_id: str, model: str) -> None:
        self._request_id, self._model = request_id, model

    def chunk(self, chunk: Chunk) -> bytes:
        if not chunk.text:
            return b""
        return b"event: token\ndata: " + orjson.dumps({"text": chunk.text}) + b"\n\n"

    def finish(self, finish_reason: str, usage: Usage) -> bytes:
        done = {
            "request_id": self._request_id,
            "model": self._model,
            "finish_reason": finish_reason,
            "usage": _usage(usage),
        }
        return b"event: done\ndata: " + orjson.dumps(done) + b"\n\n"

    def error(self, exc: GatewayError) -> bytes:
        return b"event: error\ndata: " + exc.body() + b"\n\n"


def stream_renderer(req: ModelRequest, *, request_id: str, model: str) -> StreamRenderer:
    return StreamRenderer(request_id=request_id, model=model)


class InternalShape:
    """The internal routes' shape, as the pipeline uses it (a ClientShape)."""

    parse_request = staticmethod(parse_request)
    render_completion = staticmethod(render_completion)
    stream_renderer = staticmethod(stream_renderer)


INTERNAL_SHAPE = InternalShape()
