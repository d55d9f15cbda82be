"""The adapter interface: translate one vendor's HTTP and SSE, decide nothing.

An adapter builds the vendor request, parses its answer, and maps failures to
ProviderError. Retries, deadlines, breakers, keys and money belong to the orchestrator.

A vendor's error body is never kept whole. Of a 4xx the adapter keeps the vendor's own
message (`vendor_message`): read from at most ERROR_BODY_MAX_BYTES of the body, taken from
its error JSON (OpenAI, OpenRouter and most compatible servers: `error.message`; Anthropic:
`error.message` under `"type": "error"`; some compatible servers: `error` as a string,
`message`, or FastAPI's `detail`), stripped of control and invisible characters, with the
call's key and anything shaped like a credential replaced, and cut at
VENDOR_MESSAGE_MAX_CHARS. It is kept apart from the error's own text, which is ours and
the only one a log may print.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import orjson
from yarl import URL

from gateway.adapters.client import VendorClient
from gateway.adapters.wire import HttpClientError, VendorResponse
from gateway.tracing import outbound_headers
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
        vendor_message: str | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.retry_after_s = retry_after_s
        self.timeout = timeout
        # What the vendor said about a refused request, cleaned (never in `message`: logs
        # print that one).
        self.vendor_message = vendor_message


@dataclass(frozen=True, slots=True)
class CallTarget:
    """Where, as whom and with what one upstream call goes."""

    upstream_model: str
    api_key: str
    max_tokens: int
    payload: dict = field(repr=False)  # the body in the vendor's shape, owned fields unset
    shape: str = ""  # the shape `payload` is in (which vendor API it goes to); "": its chat
    caller_label: str | None = None


@dataclass(frozen=True, slots=True)
class VendorOptions:
    """What a vendor needs beyond its URL and key (the profile's vendor options)."""

    api_version: str = ""  # Azure OpenAI: the deployment paths' api-version ("": the v1 paths)
    region: str = ""  # AWS Bedrock: the region; Vertex AI: the location
    project: str = ""  # Vertex AI: the project id


NO_OPTIONS = VendorOptions()


class Provider(Protocol):
    shape: str  # the chat shape this vendor speaks (OPENAI / ANTHROPIC): others translate to it
    native: frozenset[str]  # the request shapes it serves as they come (its own APIs)

    def own_payload(self, shape: str, body: dict) -> tuple[str, dict]:
        """Return a body in `shape` (one it serves, or its chat shape) as its API takes it:
        a vendor with an API of its own (Gemini, Bedrock) translates its chat shape here,
        before any call, refusing (InvalidRequest) what it cannot carry, naming the field."""
        ...

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


ERROR_BODY_MAX_BYTES = 64 * 1024
VENDOR_MESSAGE_MAX_CHARS = 500
# Control, format and separator characters (bidi overrides and zero-width ones included).
_UNPRINTABLE = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u00ad\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]"
)
# What a credential looks like in a message: a vendor key's prefix and more, a bearer token.
_CREDENTIAL = re.compile(r"(?i)\b(?:sk|rk|pk|tg)[-_][A-Za-z0-9_\-*.]{6,}|\bbearer\s+\S+")
# A word that may be a piece of a key: 8 or more characters, not only letters.
_KEYLIKE = re.compile(r"^(?=.*[^A-Za-z])\S{8,}$")
REDACTED = "[redacted]"


async def error_from_response(response: VendorResponse, api_key: str) -> ProviderError:
    """Map a vendor's failed answer to a ProviderError; a 4xx keeps the vendor's message
    (bounded, cleaned, credentials out: the module docstring)."""
    error = error_for_status(response.status, response.headers)
    if 400 <= response.status < 500:
        try:
            body = await _read_upto(response, ERROR_BODY_MAX_BYTES)
        except (*TRANSPORT_ERRORS, TimeoutError):
            body = b""  # the status alone still says what happened
        error.vendor_message = vendor_message(body, api_key=api_key)
    return error


async def _read_upto(response: VendorResponse, cap: int) -> bytes:
    """Read a body to its end or to `cap` bytes, whichever comes first."""
    parts: list[bytes] = []
    size = 0
    while size < cap:
        part = await response.read(cap - size)
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def vendor_message(body: bytes, *, api_key: str = "") -> str | None:
    """Return the message of a vendor's error body, cleaned and bounded, or None."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return clean_vendor_text(_message_of(data), api_key=api_key)


def _message_of(data: object) -> object:
    """Find the human message in the error JSON of any vendor kind Tollgate speaks to."""
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]  # OpenAI, Anthropic, OpenRouter, vLLM and most others
    if isinstance(error, str):
        return error  # e.g. {"error": "model not found"} (Ollama, llama.cpp)
    if isinstance(data.get("message"), str):
        return data["message"]  # e.g. {"object": "error", "message": ...}
    detail = data.get("detail")
    if isinstance(detail, str):
        return detail  # FastAPI servers
    if isinstance(detail, list):  # FastAPI's validation errors: their `msg`s
        return "; ".join(
            d["msg"] for d in detail[:5] if isinstance(d, dict) and isinstance(d.get("msg"), str)
        )
    return None


def clean_vendor_text(text: object, *, api_key: str = "") -> str | None:
    """Return vendor text fit for a client: printable, one line, no credential, bounded."""
    if not isinstance(text, str):
        return None
    text = " ".join(_UNPRINTABLE.sub(" ", text[: VENDOR_MESSAGE_MAX_CHARS * 4]).split())
    if api_key:
        text = text.replace(api_key, REDACTED)
        # A vendor may echo a piece of the key (its first or last characters around stars).
        text = " ".join(
            REDACTED if _KEYLIKE.match(word) and word.strip(".,:;'\"()*") in api_key else word
            for word in text.split(" ")
        )
    text = _CREDENTIAL.sub(REDACTED, text)
    if len(text) > VENDOR_MESSAGE_MAX_CHARS:
        text = text[: VENDOR_MESSAGE_MAX_CHARS - 1].rstrip() + "\u2026"
    return text or None


def connection_error(exc: BaseException) -> ProviderError:
    if isinstance(exc, asyncio.TimeoutError):
        return ProviderError("upstream timed out", retryable=True, timeout=True)
    return ProviderError(f"upstream connection failed ({type(exc).__name__})", retryable=True)


TRANSPORT_ERRORS = (HttpClientError, ConnectionError, OSError)


Frame = TypeVar("Frame")


async def read_frames(
    response: VendorResponse, frame: Callable[[bytes], list[Frame]], *, at_end: bytes
) -> AsyncIterator[list[Frame]]:
    """Yield the frames `frame` makes of a streamed body's bytes (it keeps an incomplete one
    for the next bytes), together as each read brought them; at the end it is fed `at_end`.
    Raise ProviderError if the connection breaks.

    Frames that arrived together go on together (one write to the client, not one per
    event). When the connection breaks, the bytes received before it come first (the client
    reads them out before it raises), so the last tokens the vendor did send are not lost.
    """
    while True:
        try:
            data = await response.readany()
        except TRANSPORT_ERRORS as exc:
            raise connection_error(exc) from None
        if not data:
            frames = frame(at_end)
            if frames:
                yield frames
            return
        frames = frame(data)
        if frames:
            yield frames


def sse_events(response: VendorResponse) -> AsyncIterator[list[tuple[str, bytes]]]:
    """Yield the (event name, data) pairs of an SSE body, together as each read brought them
    (read_frames); raise ProviderError if it breaks."""
    # At the end, a last line without its newline counts.
    return read_frames(response, _SseParser().feed, at_end=b"\n")


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
    """complete / stream, once, for vendors that speak JSON over HTTP and stream events.

    A vendor module says only what differs: its URLs (one per API it serves natively),
    headers, bodies, answers and events (SSE-framed unless it says otherwise: `events`);
    each is chosen by the target's shape.
    """

    shape: str = ""
    native: frozenset[str] = frozenset()

    def __init__(
        self,
        *,
        base_url: str,
        client: VendorClient,
        options: VendorOptions = NO_OPTIONS,
    ) -> None:
        self._base_url = base_url.rstrip("/")
        self._options = options
        self._urls = {shape: self.url_for(self._base_url, shape) for shape in self.native}
        self._client = client

    def url_for(self, base_url: str, shape: str) -> str:
        raise NotImplementedError

    def own_payload(self, shape: str, body: dict) -> tuple[str, dict]:
        return shape, body

    def request(
        self, req: ModelRequest, target: CallTarget
    ) -> tuple[str | URL, bytes, dict[str, str]]:
        """Return one call's URL, body and headers (a vendor whose URL names the model, or
        that signs each request, says so here; a URL that must go exactly as built, as a
        signed one, is an encoded yarl URL)."""
        return (
            self._urls[self.api(target)],
            self.body(req, target),
            self.headers(target.api_key),
        )

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

    def events(
        self, response: VendorResponse, target: CallTarget
    ) -> AsyncIterator[list[tuple[str, bytes]]]:
        """Return a streamed answer's (event name, data) pairs, together as each read brought
        them: SSE, unless the vendor frames its streams otherwise."""
        return sse_events(response)

    async def failure(self, response: VendorResponse, api_key: str) -> ProviderError:
        """Map a failed answer to a ProviderError (a vendor whose statuses say more or less
        than they mean corrects them here)."""
        return await error_from_response(response, api_key)

    def _post(self, req: ModelRequest, target: CallTarget):
        url, body, headers = self.request(req, target)
        return self._client.post(url, data=body, headers=outbound_headers(headers))

    async def complete(self, req: ModelRequest, target: CallTarget) -> Completion:
        url, body, headers = self.request(req, target)
        data = await self.post_json(url, body, target.api_key, headers=headers)
        return self.completion(data, req, target)

    async def post_json(
        self, url: str | URL, body: bytes, api_key: str, *, headers: dict[str, str] | None = None
    ) -> dict:
        """POST a JSON body and return the vendor's JSON answer; failures as ProviderError."""
        try:
            async with self._client.post(
                url, data=body, headers=outbound_headers(headers or self.headers(api_key))
            ) as response:
                if response.status != 200:
                    raise await self.failure(response, api_key)
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
                raise await self.failure(response, target.api_key)
            decoder = self.decoder(target)
            async for events in self.events(response, target):
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
