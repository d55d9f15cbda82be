"""Model aliases through a real gateway: listed by /v1/models, served as the canonical model.

An alias is another name a profile gives one of its models (`"aliases"` in the profile
JSON). A key's allow-list admits an alias when it names the alias or its model; the answer
is served, and its usage row recorded, as the canonical model.
"""

from __future__ import annotations

import httpx
import pytest

from tests.support.profiles import PLATFORM_KEY, install_profiles, stub_profiles
from tests.support.usage import usage_rows

HAIKU_UPSTREAM = "claude-3-5-haiku-20241022"


def aliased_profiles(stub_url: str) -> list[dict]:
    spec = stub_profiles(stub_url)
    [haiku] = spec[1]["models"]
    haiku.update(upstream=HAIKU_UPSTREAM, aliases=["claude-3-5-haiku-latest", "haiku"])
    spec[0]["models"][0]["aliases"] = ["mini"]
    return spec


@pytest.fixture
def aliased(stack):
    install_profiles(stack.stub.url, aliased_profiles(stack.stub.url))
    stack.gateway.reload()
    return stack


def models(stack, tenant) -> list[dict]:
    response = httpx.get(
        f"{stack.url}/v1/models", headers={"Authorization": f"Bearer {tenant.api_key}"}
    )
    assert response.status_code == 200, response.text
    return response.json()["data"]


def allow(stack, tenant, *names: str) -> None:
    from accounts.models import ApiKey

    ApiKey.objects.filter(pk=tenant.api_key_id).update(allowed_models=list(names))
    stack.gateway.reload()


def test_models_lists_canonical_names_and_aliases_naming_their_model(aliased):
    tenant = aliased.tenant()

    listed = models(aliased, tenant)

    def entry(name: str, **extra: str) -> dict:
        return {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": "tollgate",
            "kind": "chat",
            **extra,
        }

    assert listed == [
        entry("claude-3-5-haiku"),
        entry("claude-3-5-haiku-latest", alias_of="claude-3-5-haiku"),
        entry("gpt-4o"),
        entry("gpt-4o-mini"),
        entry("haiku", alias_of="claude-3-5-haiku"),
        entry("mini", alias_of="gpt-4o-mini"),
        entry("router-mini"),
    ]
    # The official SDK reads the list as it is.
    assert [m.id for m in aliased.openai(tenant).models.list()] == [m["id"] for m in listed]


def test_an_alias_and_its_model_are_listed_when_the_key_may_use_either(aliased):
    tenant = aliased.tenant()

    allow(aliased, tenant, "claude-3-5-haiku")
    assert [m["id"] for m in models(aliased, tenant)] == [
        "claude-3-5-haiku",
        "claude-3-5-haiku-latest",
        "haiku",
    ]

    # An alias allowed is its model allowed (accounts/model_access.py): the same offers serve
    # both, so the model and its other aliases are listed too.
    allow(aliased, tenant, "haiku", "gpt-4o")
    assert [m["id"] for m in models(aliased, tenant)] == [
        "claude-3-5-haiku",
        "claude-3-5-haiku-latest",
        "gpt-4o",
        "haiku",
    ]


def test_a_chat_by_alias_is_served_and_recorded_as_the_canonical_model(aliased):
    tenant = aliased.tenant()
    allow(aliased, tenant, "claude-3-5-haiku")

    response = aliased.anthropic(tenant).messages.with_raw_response.create(
        model="claude-3-5-haiku-latest",
        max_tokens=32,
        messages=[{"role": "user", "content": "Say hello"}],
    )

    assert (
        response.parse().content[0].text == f"Hello from the stub model {HAIKU_UPSTREAM} reply ok"
    )
    [call] = aliased.stub.vendor_calls()
    assert (call["path"], call["model"], call["key"]) == (
        "/v1/messages",
        HAIKU_UPSTREAM,
        PLATFORM_KEY,
    )
    [row] = usage_rows([response.headers["x-tollgate-request-id"]], expect=1)
    assert (row.model_requested, row.model_served, row.provider, row.status) == (
        "claude-3-5-haiku-latest",
        "claude-3-5-haiku",
        "stub-anthropic",
        200,
    )


def test_a_pinned_alias_is_served_by_its_profile(aliased):
    tenant = aliased.tenant()

    completion = aliased.openai(tenant).chat.completions.create(
        model="stub-openai/mini", messages=[{"role": "user", "content": "hi"}]
    )

    assert completion.choices[0].message.content == "Hello from the stub model gpt-4o-mini reply ok"
    assert [c["model"] for c in aliased.stub.vendor_calls()] == ["gpt-4o-mini"]


def test_an_alias_of_a_model_the_key_may_not_use_is_refused(aliased):
    import openai

    tenant = aliased.tenant()
    allow(aliased, tenant, "gpt-4o")

    with pytest.raises(openai.PermissionDeniedError) as refused:
        aliased.openai(tenant).chat.completions.create(
            model="mini", messages=[{"role": "user", "content": "hi"}]
        )

    assert refused.value.body["code"] == "LM-1003"
    assert aliased.stub.vendor_calls() == []
