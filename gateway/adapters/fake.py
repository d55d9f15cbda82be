"""An in-process vendor for first runs, CI and the fast tests: deterministic answers, no network.

Like the stub vendor's control routes, it can be told what its next calls do
(`FakeProvider.script`): a 429 with Retry-After, a 401 / 403 / 500, a refusal of the request
(400 / 404 / 413 / 422, with the vendor's message), a hang, a failure before the first token
or after N tokens, slow tokens. It records every call it receives.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from gateway.adapters.base import CallTarget, ProviderError, clean_vendor_text, error_for_status
from gateway.shapes import openai as openai_shape
from gateway.types import OPENAI, Chunk, Completion, ModelRequest, Usage, texts_of

WORDS = ("Hello", "from", "the", "fake", "model", "reply", "ok")
STATUS_FAULTS = {
    "400": 400,
    "401": 401,
    "403": 403,
    "404": 404,
    "413": 413,
    "422": 422,
    "429": 429,
    "500": 500,
}


@dataclass(frozen=True, slots=True)
class Fault:
    """What one scripted call does instead of answering at once."""

    kind: str  # "400" | "401" | "403" | "404" | "413" | "422" | "429" | "500" | "hang"
    # | "fail_before_first_token" | "fail_after_tokens" | "slow"
    retry_after_s: float | None = None  # with "429"
    after_tokens: int = 0  # with "fail_after_tokens"
    delay_ms: int = 0  # with "slow": before each token
    key: str | None = None  # only for calls carrying this API key
    message: str | None = None  # the vendor's message of a refusal (a 4xx)


@dataclass(frozen=True, slots=True)
class Call:
    api_key: str
    model: str  # the upstream model asked for
    stream: bool


class FakeProvider:
    """Speaks the OpenAI shape (an Anthropic client's body reaches it translated) and
    answers text only: fixed words, whatever tools or formats the body asks for."""

    shape = OPENAI
    native = frozenset({OPENAI})

    def __init__(self, **_: object) -> None:
        self.calls: list[Call] = []
        self._faults: list[Fault] = []

    def own_payload(self, shape: str, body: dict) -> tuple[str, dict]:
        return shape, body

    def script(self, *faults: Fault) -> None:
        """Queue faults for the next matching calls, in order."""
        self._faults.extend(faults)

    def _take_fault(self, target: CallTarget) -> Fault | None:
        for index, fault in enumerate(self._faults):
            if fault.key is None or fault.key == target.api_key:
                return self._faults.pop(index)
        return None

    def _answer(self, req: ModelRequest, target: CallTarget) -> tuple[list[str], str, Usage]:
        limit = min(target.max_tokens, len(WORDS))
        words = [w if i == 0 else " " + w for i, w in enumerate(WORDS[:limit])]
        finish = "length" if limit < len(WORDS) else "stop"
        # The words of what it was sent: a Responses request arrives as chat completions.
        prompt_words = sum(len(text.split()) for text in texts_of(target.payload))
        usage = Usage(input_tokens=max(1, prompt_words), output_tokens=len(words))
        return words, finish, usage

    async def _before_answer(self, fault: Fault | None) -> None:
        if fault is None:
            return
        if fault.kind in STATUS_FAULTS:
            retry_after = {"retry-after": str(fault.retry_after_s)} if fault.retry_after_s else {}
            error = error_for_status(STATUS_FAULTS[fault.kind], retry_after)
            error.vendor_message = clean_vendor_text(fault.message)
            raise error
        if fault.kind == "hang":
            await asyncio.Event().wait()  # until the caller's deadline cancels it
        if fault.kind == "fail_before_first_token":
            raise ProviderError("the fake vendor failed before its first token", retryable=True)

    async def complete(self, req: ModelRequest, target: CallTarget) -> Completion:
        self.calls.append(Call(target.api_key, target.upstream_model, stream=False))
        fault = self._take_fault(target)
        await self._before_answer(fault)
        words, finish, usage = self._answer(req, target)
        text = "".join(words)
        data = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": target.upstream_model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish,
                    "logprobs": None,
                }
            ],
            "usage": openai_shape.usage_json(usage),
        }
        return Completion(
            shape=OPENAI, data=data, text=text, finish_reason=finish, usage=usage, model=req.model
        )

    async def stream(
        self, req: ModelRequest, target: CallTarget
    ) -> AsyncGenerator[list[Chunk], None]:
        self.calls.append(Call(target.api_key, target.upstream_model, stream=True))
        fault = self._take_fault(target)
        await self._before_answer(fault)
        words, finish, usage = self._answer(req, target)
        yield [_chunk({"role": "assistant", "content": ""})]
        for sent, word in enumerate(words):
            if (
                fault is not None
                and fault.kind == "fail_after_tokens"
                and sent == fault.after_tokens
            ):
                raise ProviderError("the fake vendor's stream broke", retryable=False)
            if fault is not None and fault.kind == "slow":
                await asyncio.sleep(fault.delay_ms / 1000)
            yield [_chunk({"content": word}, text=word)]
        done = _chunk({}, finish=finish)
        usage_event = {
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": openai_shape.usage_json(usage),
        }
        yield [done, Chunk(shape=OPENAI, event=usage_event, usage=usage)]


def _chunk(delta: dict, *, text: str = "", finish: str | None = None) -> Chunk:
    """Return one streamed chunk of the fake's answer, in the OpenAI shape."""
    event = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        "usage": None,
    }
    return Chunk(shape=OPENAI, event=event, text=text, generated=bool(text), finish_reason=finish)
