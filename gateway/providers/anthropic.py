"""Anthropic's messages API."""

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
from gateway.shapes import anthropic as shape
from gateway.types import ChatRequest, Chunk, Completion


class AnthropicProvider:
    def __init__(self, *, base_url: str, session: aiohttp.ClientSession) -> None:
        base = base_url.rstrip("/")
        self._url = base + ("/messages" if base.endswith("/v1") else "/v1/messages")
        self._session = session

    def _headers(self, api_key: str) -> dict[str, str]:
        return {
            "x-api-key": api_key,
            "anthropic-version": shape.API_VERSION,
            "content-type": "application/json",
        }

    def _body(self, req: ChatRequest, target: CallTarget) -> bytes:
        return shape.vendor_body(
            req,
            upstream_model=target.upstream_model,
            max_tokens=target.max_tokens,
            caller_label=target.caller_label,
        )

    async def complete(self, req: ChatRequest, target: CallTarget) -> Completion:
        try:
            async with self._session.post(
                self._url, data=self._body(req, target), headers=self._headers(target.api_key)
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
                self._url, data=self._body(req, target), headers=self._headers(target.api_key)
            )
        except (*TRANSPORT_ERRORS, TimeoutError) as exc:
            raise connection_error(exc) from None
        try:
            if response.status != 200:
                raise error_for_status(response.status, response.headers)
            state = shape.VendorStreamState()
            finished = False
            async for event, data in sse_events(response):
                if event == "message_stop":
                    finished = True
                    break
                if event == "error":
                    # Mid-stream vendor error (e.g. overloaded): retryable if nothing was sent.
                    raise ProviderError("upstream stream error event", retryable=True, status=529)
                chunk = state.chunk_from_event(event, orjson.loads(data))
                if chunk is not None:
                    yield chunk
            if not finished:
                raise ProviderError("upstream stream ended early", retryable=True)
        finally:
            response.release()
