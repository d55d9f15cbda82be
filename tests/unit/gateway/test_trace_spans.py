"""How a request's route and provider are named in its span (GenAI's names where it has some)."""

from __future__ import annotations

import pytest

from gateway.trace_spans import GENAI_PROVIDERS, operation


@pytest.mark.parametrize(
    ("route", "expected"),
    [
        ("chat", "chat"),
        ("messages", "chat"),
        ("responses", "chat"),
        ("internal.complete", "chat"),
        ("internal.stream", "chat"),
        ("embeddings", "embeddings"),
        ("moderations", "moderations"),
        ("web.scrape", "web.scrape"),
        ("internal.search", "internal.search"),
        ("web.crawl.page", "web.crawl.page"),
    ],
)
def test_the_operation_of_a_route(route, expected):
    assert operation(route) == expected


def test_provider_kinds_take_genai_well_known_names():
    assert GENAI_PROVIDERS["bedrock"] == "aws.bedrock"
    assert GENAI_PROVIDERS["vertex"] == "gcp.vertex_ai"
    assert GENAI_PROVIDERS["azure"] == "azure.ai.openai"
    assert GENAI_PROVIDERS["openai_compatible"] == "openai"
