"""The adapter interface: translate one vendor's HTTP and SSE, decide nothing.

An adapter builds the vendor request, parses its answer, and maps failures to
ProviderError. Retries, deadlines, breakers, keys and money belong to the orchestrator.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp
import orjson

from gateway.types import Chunk, Completion, ModelRequest


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
    """Where, as whom and with what one upstream call goes."""

    upstream_model: str
    api_key: str
    max_tokens: int
    payload: dict = field(repr=False)  # the body in the vendor's shape, owned fields unset
    shape: str = ""  # the shape `payload` is in (which vendor API it goes to); "": its chat
    caller_label: str | None = None


class Provider(Protocol):
    shape: str  # the chat shape this vendor speaks (OPENAI / ANTHROPIC): others translate to it
    native: frozenset[str]  # the request shapes it serves as they come (its own APIs)

    async def complete(self, req: ModelRequest, target: CallTarget) -> Completion: ...

    def stream(self, req: ModelRequest, target: CallTarget) -> AsyncGenerator[list[Chunk], None]:
        """The answer's chunks, in lists: those that arrived together (never an empty list).
        An async generator: the orchestrator closes it (`aclose`) when it gives up on it."""
        ...


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


async def sse_events(response: aiohttp.ClientResponse) -> AsyncIterator[list[tuple[str, bytes]]]:
    """Yield the (event name, data) pairs of an SSE body, together as each read brought them;
    raise ProviderError if it breaks.

    Events that arrived together go on together (one write to the client, not one per
    event). When the connection breaks, the complete lines already received come first:
    aiohttp raises a broken connection before handing out what it had buffered, so without
    this the last tokens the vendor did send would be lost (and how many, by timing).
    """
    content = response.content
    parser = _SseParser()
    while True:
        try:
            data = await content.readany()
        except TRANSPORT_ERRORS as exc:
            buffer = getattr(content, "_buffer", None)
            if buffer:
                rest = b"".join(buffer)[getattr(content, "_buffer_offset", 0) :]
                events = parser.feed(rest)  # an unterminated last line stays incomplete
                if events:
                    yield events
            raise connection_error(exc) from None
        if not data:
            events = parser.feed(b"\n")  # at the end, a last line without its newline counts
            if events:
                yield events
            return
        events = parser.feed(data)
        if events:
            yield events


class _SseParser:
    """SSE lines to (event, data) pairs, across reads that split lines anywhere."""

    def __init__(self) -> None:
        self._partial = b""
        self._event = ""

    def feed(self, data: bytes) -> list[tuple[str, bytes]]:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        events = []
        for raw_line in lines:
            line = raw_line.rstrip(b"\r")
            if not line:
                self._event = ""
            elif line.startswith(b"data:"):
                events.append((self._event, line[5:].lstrip()))
            elif line.startswith(b"event:"):
                self._event = line[6:].strip().decode()
        return events


class StreamDecoder(Protocol):
    """Turns one vendor's SSE events into our chunks; `done` once the vendor said so."""

    done: bool

    def feed(self, event: str, data: bytes) -> Chunk | None: ...


class HttpProvider:
    """complete / stream, once, for vendors that speak JSON over HTTP and stream SSE.

    A vendor module says only what differs: its URLs (one per API it serves natively),
    headers, bodies, answers and events; each is chosen by the target's shape.
    """

    shape: str = ""
    native: frozenset[str] = frozenset()

    def __init__(self, *, base_url: str, session: aiohttp.ClientSession) -> None:
        base = base_url.rstrip("/")
        self._urls = {shape: self.url_for(base, shape) for shape in self.native}
        self._session = session

    def url_for(self, base_url: str, shape: str) -> str:
        raise NotImplementedError

    def api(self, target: CallTarget) -> str:
        """Return the shape of the vendor API a call goes to: its chat API unless said."""
        return target.shape or self.shape

    def headers(self, api_key: str) -> dict[str, str]:
        raise NotImplementedError

    def body(self, req: ModelRequest, target: CallTarget) -> bytes:
        raise NotImplementedError

    def completion(self, data: dict, req: ModelRequest, target: CallTarget) -> Completion:
        raise NotImplementedError

    def decoder(self, target: CallTarget) -> StreamDecoder:
        raise NotImplementedError

    def _post(self, req: ModelRequest, target: CallTarget):
        return self._session.post(
            self._urls[self.api(target)],
            data=self.body(req, target),
            headers=self.headers(target.api_key),
        )

    async def complete(self, req: ModelRequest, target: CallTarget) -> Completion:
        data = await self.post_json(
            self._urls[self.api(target)], self.body(req, target), target.api_key
        )
        return self.completion(data, req, target)

    async def post_json(self, url: str, body: bytes, api_key: str) -> dict:
        """POST a JSON body and return the vendor's JSON answer; failures as ProviderError."""
        try:
            async with self._session.post(
                url, data=body, headers=self.headers(api_key)
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
        if not isinstance(data, dict):
            raise ProviderError("upstream sent malformed JSON", retryable=True)
        return data

    async def stream(
        self, req: ModelRequest, target: CallTarget
    ) -> AsyncGenerator[list[Chunk], None]:
        try:
            response = await self._post(req, target)
        except (*TRANSPORT_ERRORS, TimeoutError) as exc:
            raise connection_error(exc) from None
        try:
            if response.status != 200:
                raise error_for_status(response.status, response.headers)
            decoder = self.decoder(target)
            async for events in sse_events(response):
                chunks = []
                for event, data in events:
                    try:
                        chunk = decoder.feed(event, data)
                    except orjson.JSONDecodeError:
                        raise ProviderError(
                            "upstream sent malformed JSON", retryable=True
                        ) from None
                    if chunk is not None:  # a vendor's last event may carry its end
                        chunks.append(chunk)
                    if decoder.done:
                        break
                if chunks:
                    yield chunks
                if decoder.done:
                    break
            if not decoder.done:
                raise ProviderError("upstream stream ended early", retryable=True)
        finally:
            response.release()
