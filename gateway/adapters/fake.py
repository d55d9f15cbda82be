"""An in-process vendor for first runs and CI: deterministic answers, no network."""

from __future__ import annotations

from collections.abc import AsyncIterator

from gateway.adapters.base import CallTarget
from gateway.types import ChatRequest, Chunk, Completion, Usage

WORDS = ("Hello", "from", "the", "fake", "model", "reply", "ok")


class FakeProvider:
    def __init__(self, **_: object) -> None:
        pass

    def _answer(self, req: ChatRequest, target: CallTarget) -> tuple[list[str], str, Usage]:
        limit = min(target.max_tokens, len(WORDS))
        words = [w if i == 0 else " " + w for i, w in enumerate(WORDS[:limit])]
        finish = "length" if limit < len(WORDS) else "stop"
        usage = Usage(input_tokens=max(1, req.prompt_text_words()), output_tokens=len(words))
        return words, finish, usage

    async def complete(self, req: ChatRequest, target: CallTarget) -> Completion:
        words, finish, usage = self._answer(req, target)
        return Completion(text="".join(words), finish_reason=finish, usage=usage, model=req.model)

    async def stream(self, req: ChatRequest, target: CallTarget) -> AsyncIterator[Chunk]:
        words, finish, usage = self._answer(req, target)
        for word in words:
            yield Chunk(text=word)
        yield Chunk(finish_reason=finish, usage=usage)
