"""OpenRouter: the OpenAI shape at its own URL, with its attribution headers."""

from __future__ import annotations

from gateway.adapters.openai import OpenAIProvider


class OpenRouterProvider(OpenAIProvider):
    def headers(self, api_key: str) -> dict[str, str]:
        return {**super().headers(api_key), "X-Title": "Tollgate"}
