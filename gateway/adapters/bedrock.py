"""AWS Bedrock through its Converse and ConverseStream APIs, signed with SigV4.

Inside Tollgate a Bedrock profile speaks OpenAI chat: its body is taken into Converse at
plan time (`own_payload`, gateway/shapes/bedrock.py, refusing what Converse cannot carry
before any call), and its answers come back as OpenAI chat completions and chunks
(gateway/shapes/bedrock_answers.py).

- URL: `{base_url}/model/{upstream model id, URL-encoded}/converse` (`/converse-stream` for
  a stream). A profile without a base URL calls `https://bedrock-runtime.{region}.amazonaws.com`.
- Credentials: the profile's platform key is `ACCESS_KEY_ID:SECRET_ACCESS_KEY` or
  `ACCESS_KEY_ID:SECRET_ACCESS_KEY:SESSION_TOKEN` (AWS never puts a colon in any of them).
  Each call is signed with botocore's SigV4 (service `bedrock`, the profile's region); a
  malformed key, or a profile without a region, fails the call without calling (not
  retryable: the operator must fix it), and no message ever carries the key.
- Streams are AWS event-stream frames (not SSE), read with botocore's parser: `event`
  messages carry ConverseStream's events, `exception` messages its errors (throttling,
  internal, unavailable and model-stream errors are worth another try; a validation error
  is the request's own). HTTP errors are `{"message": ...}` JSON, which
  base.vendor_message reads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import quote, urlsplit

import orjson
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer, EventStreamMessage, ParserError
from yarl import URL

from gateway.adapters.base import (
    CallTarget,
    HttpProvider,
    ProviderError,
    clean_vendor_text,
    read_frames,
)
from gateway.adapters.wire import VendorResponse
from gateway.shapes import bedrock as converse
from gateway.shapes import bedrock_answers
from gateway.types import OPENAI, Chunk, Completion, ModelRequest

SIGNING_SERVICE = "bedrock"
EVENT_STREAM = "application/vnd.amazon.eventstream"
MALFORMED_KEY = (
    "the platform key of a bedrock profile must be ACCESS_KEY_ID:SECRET_ACCESS_KEY or "
    "ACCESS_KEY_ID:SECRET_ACCESS_KEY:SESSION_TOKEN"
)


def aws_credentials(api_key: str) -> Credentials:
    """Read a Bedrock platform key; a malformed one is an operator's error, told without it."""
    parts = api_key.split(":")
    if len(parts) not in (2, 3) or not all(part.strip() == part and part for part in parts):
        raise ProviderError(MALFORMED_KEY, retryable=False)
    return Credentials(*parts)


def region_of(region: str, base_url: str) -> str:
    """Return the signing region: the profile's, else the one its AWS host names."""
    if region:
        return region
    host = urlsplit(base_url).hostname or ""
    labels = host.split(".")
    if len(labels) >= 4 and labels[0] == "bedrock-runtime" and host.endswith(".amazonaws.com"):
        return labels[1]
    return ""


class ConverseStream:
    """ConverseStream's events to our chunks, through the shape's translator."""

    def __init__(self) -> None:
        self._translator = bedrock_answers.ConverseStreamToChat()
        self.done = False

    def feed(self, event: str, data: bytes) -> Chunk | None:
        payload = orjson.loads(data) if data else {}
        if not isinstance(payload, dict):
            raise ProviderError("upstream sent malformed JSON", retryable=True)
        chunk = self._translator.feed(event, payload)
        self.done = self._translator.done
        return chunk


class BedrockProvider(HttpProvider):
    shape = OPENAI
    native = frozenset({OPENAI})

    def url_for(self, base_url: str, shape: str) -> str:
        if not base_url and self._options.region:
            return f"https://bedrock-runtime.{self._options.region}.amazonaws.com/model"
        return base_url + "/model"

    def own_payload(self, shape: str, body: dict) -> tuple[str, dict]:
        return OPENAI, converse.chat_to_converse(body)

    def request(self, req: ModelRequest, target: CallTarget) -> tuple[URL, bytes, dict[str, str]]:
        credentials = aws_credentials(target.api_key)
        region = region_of(self._options.region, self._base_url)
        if not region:
            raise ProviderError("the bedrock profile has no region to sign for", retryable=False)
        api = "converse-stream" if req.stream else "converse"
        model = quote(target.upstream_model, safe="")
        url = f"{self._urls[OPENAI]}/{model}/{api}"
        body = orjson.dumps(converse.converse_body(target.payload, max_tokens=target.max_tokens))
        headers = {
            "Content-Type": "application/json",
            "Accept": EVENT_STREAM if req.stream else "application/json",
        }
        signed = AWSRequest(method="POST", url=url, data=body, headers=headers)
        SigV4Auth(credentials, SIGNING_SERVICE, region).add_auth(signed)
        # The path goes as signed: yarl would decode the model id's escapes (`%3A`).
        return URL(url, encoded=True), body, dict(signed.headers.items())

    def completion(self, data: dict, req: ModelRequest, target: CallTarget) -> Completion:
        return bedrock_answers.completion_from_converse(data, model=req.model)

    def decoder(self, target: CallTarget) -> ConverseStream:
        return ConverseStream()

    def events(
        self, response: VendorResponse, target: CallTarget
    ) -> AsyncIterator[list[tuple[str, bytes]]]:
        return converse_events(response, target.api_key)


async def converse_events(
    response: VendorResponse, api_key: str
) -> AsyncIterator[list[tuple[str, bytes]]]:
    """Yield the (event type, payload) pairs of an event-stream body's event messages,
    together as each read brought them; an exception message is raised as the
    ProviderError it is, after the events read before it."""
    async for messages in event_stream_messages(response):
        events: list[tuple[str, bytes]] = []
        for message in messages:
            headers = message.headers
            if headers.get(":message-type") != "event":
                if events:
                    yield events
                raise stream_exception(message, api_key)
            events.append((str(headers.get(":event-type", "")), message.payload))
        if events:
            yield events


def stream_exception(message: EventStreamMessage, api_key: str) -> ProviderError:
    """Return the ProviderError an event-stream exception (or error) message is."""
    headers = message.headers
    try:
        payload = orjson.loads(message.payload) if message.payload else {}
    except orjson.JSONDecodeError:
        return ProviderError("upstream sent malformed JSON", retryable=True)
    name = str(headers.get(":exception-type") or headers.get(":error-code") or "error")
    status, retryable = bedrock_answers.STREAM_EXCEPTIONS.get(name, (None, True))
    said = payload.get("message") if isinstance(payload, dict) else None
    return ProviderError(
        f"upstream stream exception ({clean_vendor_text(name)})",
        retryable=retryable,
        status=status,
        retry_after_s=1.0 if status == 429 else None,
        vendor_message=clean_vendor_text(said, api_key=api_key) if not retryable else None,
    )


def event_stream_messages(
    response: VendorResponse,
) -> AsyncIterator[list[EventStreamMessage]]:
    """Yield an event-stream body's messages, together as each read brought them (as
    sse_events does SSE's: base.read_frames); raise ProviderError if it breaks or is not
    event-stream framing."""
    buffer = EventStreamBuffer()

    def complete_messages(data: bytes) -> list[EventStreamMessage]:
        buffer.add_data(data)
        try:
            return list(buffer)
        except ParserError:
            raise ProviderError("upstream sent a malformed event stream", retryable=True) from None

    return read_frames(response, complete_messages, at_end=b"")
