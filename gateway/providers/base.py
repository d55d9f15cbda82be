"""The adapter interface: translate one vendor's HTTP and SSE, decide nothing.

An adapter builds the vendor request, parses its answer, and maps failures to
ProviderError. Retries, deadlines, breakers, keys and money belong to the orchestrator.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from gateway.types import ChatRequest, Chunk, Completion


class ProviderError(Exception):
    """A vendor call failed. `status` is None for connection failures and timeouts."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after_s: float | None = None,
        timeout: bool = False,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.retry_after_s = retry_after_s
        self.timeout = timeout


@dataclass(frozen=True, slots=True)
class CallTarget:
    """Where and as whom one upstream call goes."""

    upstream_model: str
    api_key: str
    max_tokens: int
    caller_label: str | None = None


class Provider(Protocol):
    async def complete(self, req: ChatRequest, target: CallTarget) -> Completion: ...

    def stream(self, req: ChatRequest, target: CallTarget) -> AsyncIterator[Chunk]: ...


def error_for_status(status: int, headers) -> ProviderError:
    """Map a vendor HTTP status to a ProviderError; the vendor's body is never kept."""
    retry_after = None
    if status == 429:
        try:
            retry_after = float(headers.get("retry-after", ""))
        except ValueError:
            retry_after = None
    # 408, 409 (Anthropic lock), 429 and 5xx (incl. Anthropic's 529 overload) are worth one retry.
    retryable = status in (408, 409, 429) or status >= 500
    return ProviderError(
        f"upstream answered HTTP {status}",
        retryable=retryable,
        status=status,
        retry_after_s=retry_after,
    )


def connection_error(exc: BaseException) -> ProviderError:
    if isinstance(exc, asyncio.TimeoutError):
        return ProviderError("upstream timed out", retryable=True, timeout=True)
    return ProviderError(f"upstream connection failed ({type(exc).__name__})", retryable=True)


TRANSPORT_ERRORS = (aiohttp.ClientError, ConnectionError, OSError)


async def sse_events(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, bytes]]:
    """Yield (event name, data) pairs of an SSE body; raise ProviderError if it breaks."""
    event = ""
    async for raw_line in _lines(response.content):
        line = raw_line.rstrip(b"\r\n")
        if not line:
            event = ""
            continue
        if line.startswith(b"data:"):
            yield event, line[5:].lstrip()
        elif line.startswith(b"event:"):
            event = line[6:].strip().decode()


async def _lines(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """Yield the body's lines; when the connection breaks, first the complete lines received.

    aiohttp raises a broken connection before handing out what it had already buffered, so
    without this the last tokens the vendor did send would be lost (and how many depended on
    timing).
    """
    try:
        async for raw_line in content:
            yield raw_line
    except TRANSPORT_ERRORS as exc:
        buffer = getattr(content, "_buffer", None)
        if buffer:
            data = b"".join(buffer)[getattr(content, "_buffer_offset", 0) :]
            for line in data.split(b"\n")[:-1]:  # an unterminated last line is incomplete
                yield line + b"\n"
        raise connection_error(exc) from None
