"""Which providers a team key can be added for: live (enabled) profiles of eligible kinds."""

from __future__ import annotations

import pytest

from byok.selectors import eligible_providers, eligible_providers_hint
from providers.models import ProviderProfile
from tests.support.profiles import install_profiles

pytestmark = pytest.mark.django_db

URL = "https://example.invalid"


def test_eligible_providers_are_sorted_enabled_plain_key_kinds():
    install_profiles(
        URL,
        [
            {"name": "openai-main", "kind": "openai", "base_url": URL},
            {"name": "anthropic-main", "kind": "anthropic", "base_url": URL},
            {"name": "compat", "kind": "openai_compatible", "base_url": URL},
            {"name": "azure-east", "kind": "azure", "base_url": URL},
            {"name": "bedrock", "kind": "bedrock", "base_url": URL},
            {"name": "vertex", "kind": "vertex", "base_url": URL},
            {"name": "openai-old", "kind": "openai", "base_url": URL, "enabled": False},
        ],
    )

    assert eligible_providers() == ["anthropic-main", "compat", "openai-main"]
    assert eligible_providers_hint() == (
        "Team keys can be added for: anthropic-main, compat, openai-main."
    )


def test_without_eligible_providers_the_hint_says_so():
    assert ProviderProfile.objects.count() == 0
    assert eligible_providers() == []
    assert eligible_providers_hint() == "No provider in the live config takes team keys."
