"""Google's Gemini API (`generateContent`), keyed by `x-goog-api-key`.

Inside Tollgate a Gemini profile speaks OpenAI chat: its body is taken into generateContent
at plan time (`own_payload`, gateway/shapes/gemini.py, refusing what Gemini cannot carry
before any call), and its answers come back as OpenAI chat completions and chunks
(gateway/shapes/gemini_answers.py).

- URL: `{base_url}/v1beta/models/{upstream}:generateContent`, or
  `:streamGenerateContent?alt=sse` for a stream (SSE events, each a whole
  GenerateContentResponse; the stream ends with the event where every candidate has its
  finish reason). A base URL that already ends in `/v1beta` is not given it twice; a profile
  without one calls `https://generativelanguage.googleapis.com`.
- Errors are `{"error": {"code", "message", "status"}}` JSON, which base.vendor_message reads;
  Google's HTTP 400 for a bad or expired API key is read as the 401 it means (KEY_REFUSED).
- A prompt Gemini blocks (`promptFeedback.blockReason`: an HTTP 200 without candidates) is
  the vendor refusing the request: ProviderError(status=400, not retryable) with Gemini's
  reason as the vendor's message, as a 4xx refusal of another vendor would be.
"""

from __future__ import annotations

import orjson

from gateway.adapters.base import (
    CallTarget,
    HttpProvider,
    ProviderError,
    clean_vendor_text,
    error_from_response,
)
from gateway.adapters.wire import VendorResponse
from gateway.shapes import gemini as gemini_shape
from gateway.shapes import gemini_answers
from gateway.types import OPENAI, Chunk, Completion, ModelRequest

API_PATH = "/v1beta"
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"  # a profile without a base URL
# Google answers a bad API key with HTTP 400 INVALID_ARGUMENT; these messages (its reasons
# API_KEY_INVALID and API_KEY_EXPIRED) say it is the key, not the request.
KEY_REFUSED = ("API key not valid", "API key expired")


def blocked_error(reason: str) -> ProviderError:
    """Return the refusal of a prompt Gemini blocked, its reason as the vendor's message."""
    return ProviderError(
        "upstream blocked the prompt",
        retryable=False,
        status=400,
        vendor_message=clean_vendor_text(reason),
    )


class GeminiStream:
    """Gemini's SSE events to our chunks, through the shape's translator."""

    def __init__(self, candidates: int) -> None:
        self._translator = gemini_answers.GeminiStreamToOpenAI(candidates=candidates)
        self.done = False

    def feed(self, event: str, data: bytes) -> Chunk | None:
        payload = orjson.loads(data)
        if not isinstance(payload, dict):
            raise ProviderError("upstream sent malformed JSON", retryable=True)
        if isinstance(payload.get("error"), dict):
            # A failure reported inside the stream: worth another try while nothing was sent.
            raise ProviderError("upstream stream error event", retryable=True)
        blocked = gemini_answers.prompt_blocked(payload)
        if blocked is not None:
            raise blocked_error(blocked)
        chunk = self._translator.feed(payload)
        self.done = self._translator.done
        return chunk


class GeminiProvider(HttpProvider):
    shape = OPENAI
    native = frozenset({OPENAI})
    kind = "gemini"  # the vendor kind refusals name

    def url_for(self, base_url: str, shape: str) -> str:
        base_url = base_url or DEFAULT_BASE_URL
        return base_url if base_url.endswith(API_PATH) else base_url + API_PATH

    def own_payload(self, shape: str, body: dict) -> tuple[str, dict]:
        if shape != OPENAI:
            return shape, body
        return gemini_shape.GEMINI, gemini_shape.chat_request_to_gemini(body, vendor_kind=self.kind)

    def model_url(self, target: CallTarget, *, stream: bool) -> str:
        """Return the URL of one call: the API's root, the model, the method."""
        model = target.upstream_model.removeprefix("models/")
        return f"{self._urls[OPENAI]}/models/{model}:{self.method(stream)}"

    @staticmethod
    def method(stream: bool) -> str:
        return "streamGenerateContent?alt=sse" if stream else "generateContent"

    def request(self, req: ModelRequest, target: CallTarget) -> tuple[str, bytes, dict[str, str]]:
        return (
            self.model_url(target, stream=req.stream),
            self.body(req, target),
            self.headers(target.api_key),
        )

    def headers(self, api_key: str) -> dict[str, str]:
        return {"x-goog-api-key": api_key, "Content-Type": "application/json"}

    def body(self, req: ModelRequest, target: CallTarget) -> bytes:
        return gemini_shape.vendor_body(target.payload, max_tokens=target.max_tokens)

    def completion(self, data: dict, req: ModelRequest, target: CallTarget) -> Completion:
        blocked = gemini_answers.prompt_blocked(data)
        if blocked is not None:
            raise blocked_error(blocked)
        if not data.get("candidates"):
            raise ProviderError("upstream sent no candidates", retryable=True)
        return gemini_answers.completion_from_vendor(data, model=req.model)

    async def failure(self, response: VendorResponse, api_key: str) -> ProviderError:
        error = await error_from_response(response, api_key)
        if error.status == 400 and (error.vendor_message or "").startswith(KEY_REFUSED):
            # The key refused: a 401, so a team key is benched and a platform key judged.
            return ProviderError("upstream refused the key (HTTP 400)", retryable=False, status=401)
        return error

    def decoder(self, target: CallTarget) -> GeminiStream:
        return GeminiStream(gemini_shape.candidate_count(target.payload))
