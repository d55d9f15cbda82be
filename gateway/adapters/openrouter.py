"""OpenRouter: the OpenAI shape at its own URL (chat completions and embeddings), with its
attribution headers."""

from __future__ import annotations

from gateway.adapters.openai import OpenAICompatibleProvider
from gateway.types import EMBEDDINGS, OPENAI


class OpenRouterProvider(OpenAICompatibleProvider):
    native = frozenset({OPENAI, EMBEDDINGS})  # no moderations route

    def headers(self, api_key: str) -> dict[str, str]:
        return {**super().headers(api_key), "X-Title": "Tollgate"}
