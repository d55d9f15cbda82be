"""Provider profiles pointing at the stub, with their platform key."""

from __future__ import annotations

from contextlib import nullcontext

from tests.support.services import HAS_REDIS

PLATFORM_KEY = "sk-platform-test-key-9f8e"


def stub_profiles(stub_url: str) -> list[dict]:
    return [
        {
            "name": "stub-openai",
            "kind": "openai",
            "base_url": f"{stub_url}/v1",
            "timeout_s": 5,
            "stream_idle_timeout_s": 2,
            "models": [
                {
                    "name": "gpt-4o-mini",
                    "input_micro_per_mtok": 150_000,
                    "output_micro_per_mtok": 600_000,
                },
                {
                    "name": "gpt-4o",
                    "input_micro_per_mtok": 2_500_000,
                    "output_micro_per_mtok": 10_000_000,
                },
            ],
        },
        {
            "name": "stub-anthropic",
            "kind": "anthropic",
            "base_url": stub_url,
            "timeout_s": 5,
            "stream_idle_timeout_s": 2,
            "models": [
                {
                    "name": "claude-3-5-haiku",
                    "upstream": "claude-3-5-haiku-latest",
                    "input_micro_per_mtok": 800_000,
                    "output_micro_per_mtok": 4_000_000,
                }
            ],
        },
        {
            "name": "stub-router",
            "kind": "openrouter",
            "base_url": f"{stub_url}/api/v1",
            "timeout_s": 5,
            "stream_idle_timeout_s": 2,
            "models": [
                {
                    "name": "router-mini",
                    "upstream": "openai/gpt-4o-mini",
                    "input_micro_per_mtok": 200_000,
                    "output_micro_per_mtok": 800_000,
                }
            ],
        },
    ]


def fast_profiles(stub_url: str, *, timeout_s: int = 1, idle_s: int = 1) -> list[dict]:
    """The stub profiles with short deadlines, for hang / slow / timeout tests."""
    spec = stub_profiles(stub_url)
    for profile in spec:
        profile["timeout_s"] = timeout_s
        profile["stream_idle_timeout_s"] = idle_s
    return spec


def install_profiles(stub_url: str, spec: list[dict] | None = None) -> None:
    """Install stub profiles with their platform key; announce once the keys are saved.

    One transaction, so the bus message (sent on commit) never makes a replica reload a
    profile whose key is not stored yet. (Without Redis there is no bus to race, and SQLite
    is better off with short transactions.)
    """
    from django.db import transaction

    from providers.models import ProviderProfile
    from providers.services import profile_set_platform_key
    from providers.spec import profiles_bootstrap

    with transaction.atomic() if HAS_REDIS else nullcontext():
        for profile in profiles_bootstrap(spec=spec or stub_profiles(stub_url)):
            profile_set_platform_key(profile=profile, api_key=PLATFORM_KEY)
            profile.save()
    assert ProviderProfile.objects.count() >= 1


# Embedding models on the stub's OpenAI profile, priced per input token only.
EMBEDDING_PRICES = {"text-embedding-3-small": 20_000, "text-embedding-3-large": 130_000}
# A moderation model on the stub's OpenAI profile: OpenAI's is free, but the stub reports
# usage, so a price tests the billing (per input token only).
MODERATION_MODEL = "omni-moderation-latest"
MODERATION_PRICE = 1_000_000


def api_profiles(stub_url: str) -> list[dict]:
    """The stub profiles with embedding models, a moderation model, a reasoning model, and a
    chat-only OpenAI-compatible profile (a Responses request reaches it as chat
    completions)."""
    spec = stub_profiles(stub_url)
    spec[0]["models"] += [
        {
            "name": name,
            "kind": "embedding",
            "input_micro_per_mtok": price,
            "output_micro_per_mtok": 0,
        }
        for name, price in EMBEDDING_PRICES.items()
    ]
    spec[0]["models"].append(
        {
            "name": MODERATION_MODEL,
            "kind": "moderation",
            "input_micro_per_mtok": MODERATION_PRICE,
            "output_micro_per_mtok": 0,
        }
    )
    spec[0]["models"].append(
        {"name": "o4-mini", "input_micro_per_mtok": 1_100_000, "output_micro_per_mtok": 4_400_000}
    )
    spec.append(
        {
            "name": "stub-compat",
            "kind": "openai_compatible",
            "base_url": f"{stub_url}/compat/v1",
            "timeout_s": 5,
            "stream_idle_timeout_s": 2,
            "models": [
                {
                    "name": "compat-mini",
                    "upstream": "local-mini",
                    "input_micro_per_mtok": 100_000,
                    "output_micro_per_mtok": 400_000,
                },
                {
                    "name": "compat-embed",
                    "kind": "embedding",
                    "upstream": "local-embed",
                    "input_micro_per_mtok": 10_000,
                    "output_micro_per_mtok": 0,
                },
                {
                    "name": "compat-moderation",
                    "kind": "moderation",
                    "upstream": "local-moderation",
                    "input_micro_per_mtok": 20_000,
                    "output_micro_per_mtok": 0,
                },
            ],
        }
    )
    return spec
