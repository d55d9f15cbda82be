"""OpenRouter: the OpenAI shape at its own URL (chat completions and embeddings), with its
attribution headers."""

from __future__ import annotations

from gateway.adapters.openai import OpenAICompatibleProvider


class OpenRouterProvider(OpenAICompatibleProvider):
    def headers(self, api_key: str) -> dict[str, str]:
        return {**super().headers(api_key), "X-Title": "Tollgate"}
