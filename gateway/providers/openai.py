"""OpenAI and any OpenAI-compatible vendor at its own base URL."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import orjson

from gateway.providers.base import (
    TRANSPORT_ERRORS,
    CallTarget,
    ProviderError,
    connection_error,
    error_for_status,
    sse_events,
)
from gateway.shapes import openai as shape
from gateway.types import ChatRequest, Chunk, Completion


class OpenAIProvider:
    path = "/chat/completions"

    def __init__(self, *, base_url: str, session: aiohttp.ClientSession) -> None:
        self._url = base_url.rstrip("/") + self.path
        self._session = session

    def headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}

    def _body(self, req: ChatRequest, target: CallTarget) -> bytes:
        return shape.vendor_body(
            req, upstream_model=target.upstream_model, caller_label=target.caller_label
        )

    async def complete(self, req: ChatRequest, target: CallTarget) -> Completion:
        try:
            async with self._session.post(
                self._url, data=self._body(req, target), headers=self.headers(target.api_key)
            ) as response:
                if response.status != 200:
                    raise error_for_status(response.status, response.headers)
                data = orjson.loads(await response.read())
        except ProviderError:
            raise
        except (*TRANSPORT_ERRORS, TimeoutError) as exc:
            raise connection_error(exc) from None
        except orjson.JSONDecodeError:
            raise ProviderError("upstream sent malformed JSON", retryable=True) from None
        return shape.completion_from_vendor(data, model=req.model)

    async def stream(self, req: ChatRequest, target: CallTarget) -> AsyncIterator[Chunk]:
        try:
            response = await self._session.post(
                self._url, data=self._body(req, target), headers=self.headers(target.api_key)
            )
        except (*TRANSPORT_ERRORS, TimeoutError) as exc:
            raise connection_error(exc) from None
        try:
            if response.status != 200:
                raise error_for_status(response.status, response.headers)
            finished = False
            async for _, data in sse_events(response):
                if data == b"[DONE]":
                    finished = True
                    break
                chunk = shape.chunk_from_vendor(orjson.loads(data))
                if chunk is not None:
                    yield chunk
            if not finished:
                raise ProviderError("upstream stream ended early", retryable=True)
        finally:
            response.release()
