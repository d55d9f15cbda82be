"""Map a provider kind to its adapter class."""

from __future__ import annotations

from typing import Protocol

from gateway.adapters.anthropic import AnthropicProvider
from gateway.adapters.azure import AzureOpenAIProvider
from gateway.adapters.base import NO_OPTIONS, Provider, VendorOptions
from gateway.adapters.bedrock import BedrockProvider
from gateway.adapters.client import VendorClient
from gateway.adapters.fake import FakeProvider
from gateway.adapters.gemini import GeminiProvider
from gateway.adapters.openai import OpenAICompatibleProvider, OpenAIProvider
from gateway.adapters.openrouter import OpenRouterProvider
from gateway.adapters.vertex import VertexProvider
from providers.models import ProviderKind


class AdapterClass(Protocol):
    """What every adapter class is: built from a profile's base URL and the shared client."""

    def __call__(
        self, *, base_url: str, client: VendorClient, options: VendorOptions
    ) -> Provider: ...


ADAPTERS: dict[str, AdapterClass] = {
    ProviderKind.OPENAI: OpenAIProvider,
    ProviderKind.OPENAI_COMPATIBLE: OpenAICompatibleProvider,
    ProviderKind.ANTHROPIC: AnthropicProvider,
    ProviderKind.OPENROUTER: OpenRouterProvider,
    ProviderKind.AZURE: AzureOpenAIProvider,
    ProviderKind.FAKE: FakeProvider,
    ProviderKind.GEMINI: GeminiProvider,
    ProviderKind.VERTEX: VertexProvider,
    ProviderKind.BEDROCK: BedrockProvider,
}


def build_adapter(
    kind: str,
    *,
    base_url: str,
    client: VendorClient,
    options: VendorOptions = NO_OPTIONS,
) -> Provider | None:
    """Return the adapter for a profile, or None for a kind Tollgate cannot serve."""
    adapter_class = ADAPTERS.get(kind)
    if adapter_class is None:
        return None
    return adapter_class(base_url=base_url, client=client, options=options)
