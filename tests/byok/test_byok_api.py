"""The BYOK admin routes: exact shapes, limits, eligibility and account scoping."""

from __future__ import annotations

import httpx

from byok.models import KeyPool, TeamKey
from providers.models import ProviderProfile
from tests.byok.helpers import Byok
from tests.support.profiles import install_profiles


def test_add_list_and_fallback_never_return_the_key(stack):
    tenant = stack.tenant()
    api = Byok(stack, tenant)

    added = api.add("stub-openai", "prod", "sk-team-secret-abcd")

    assert added.status_code == 201
    body = added.json()
    assert set(body) == {"id", "label", "last4", "status", "benched_until", "created_at"}
    assert (body["label"], body["last4"], body["status"]) == ("prod", "abcd", "active")
    listed = api.list()
    assert listed.status_code == 200
    assert listed.json()["providers"] == [
        {"provider": "stub-openai", "fallback": False, "keys": [body]}
    ]
    assert "sk-team-secret" not in listed.text and "sk-team-secret" not in added.text
    flipped = api.fallback("stub-openai", True)
    assert flipped.status_code == 200 and flipped.json()["fallback"] is True
    assert KeyPool.objects.get(group_id=tenant.group_id).fallback is True


def test_fallback_defaults_off():
    assert KeyPool._meta.get_field("fallback").default is False


def test_eleventh_key_is_a_409(stack):
    api = Byok(stack, stack.tenant())
    for index in range(10):
        assert api.add("stub-openai", f"k{index}", f"sk-{index}-xxxx").status_code == 201

    refused = api.add("stub-openai", "k10", "sk-10-xxxx")

    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "LM-2009"
    assert TeamKey.objects.count() == 10


def test_labels_must_have_1_to_64_characters(stack):
    api = Byok(stack, stack.tenant())
    for label in ("", "x" * 65):
        refused = api.add("stub-openai", label, "sk-aaaa")
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "LM-2001"
    assert api.add("stub-openai", "x" * 64, "sk-aaaa").status_code == 201


def test_ineligible_and_unknown_providers_are_refused_at_creation(stack):
    install_profiles(
        stack.stub.url,
        [
            {
                "name": "azure-east",
                "kind": "azure",
                "base_url": "https://example.invalid",
                "models": [{"name": "azure-gpt"}],
            },
            {"name": "bedrock", "kind": "bedrock", "base_url": "https://example.invalid"},
            {"name": "vertex", "kind": "vertex", "base_url": "https://example.invalid"},
            {"name": "gemini", "kind": "gemini", "base_url": "https://example.invalid"},
        ],
    )
    api = Byok(stack, stack.tenant())
    for provider in ("azure-east", "bedrock", "vertex", "gemini", "no-such-provider"):
        refused = api.add(provider, "k", "sk-aaaa")
        assert refused.status_code == 400, provider
        assert refused.json()["error"]["code"] == "LM-2001"
        assert api.fallback(provider, True).status_code == 400
    assert TeamKey.objects.count() == 0


INELIGIBLE = [
    {
        "name": "azure-east",
        "kind": "azure",
        "base_url": "https://example.invalid",
        "models": [{"name": "azure-gpt"}],
    },
    {"name": "bedrock", "kind": "bedrock", "base_url": "https://example.invalid"},
]
VALID = "Team keys can be added for: stub-anthropic, stub-openai, stub-router."


def test_list_names_the_eligible_providers_beside_the_pools(stack):
    install_profiles(stack.stub.url, INELIGIBLE)
    tenant = stack.tenant()
    api = Byok(stack, tenant)
    added = api.add("stub-anthropic", "prod", "sk-ant-team-wxyz").json()

    body = api.list().json()

    assert body == {
        "group": tenant.group_id,
        "providers": [{"provider": "stub-anthropic", "fallback": False, "keys": [added]}],
        "eligible_providers": ["stub-anthropic", "stub-openai", "stub-router"],
    }


def test_a_disabled_profile_is_neither_listed_nor_accepted(stack):
    ProviderProfile.objects.filter(name="stub-router").update(enabled=False)
    api = Byok(stack, stack.tenant())

    assert api.list().json()["eligible_providers"] == ["stub-anthropic", "stub-openai"]
    refused = api.add("stub-router", "k", "sk-aaaa")
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (
        "Unknown provider 'stub-router'. Team keys can be added for: stub-anthropic, stub-openai."
    )


def test_unknown_provider_error_names_the_valid_ones(stack):
    api = Byok(stack, stack.tenant())

    for refused in (api.fallback("openai", True), api.add("openai", "k", "sk-aaaa")):
        assert refused.status_code == 400
        assert refused.json()["error"] == {
            "message": f"Unknown provider 'openai'. {VALID}",
            "type": "invalid_request_error",
            "code": "LM-2001",
        }
    assert KeyPool.objects.count() == 0


def test_ineligible_provider_error_names_the_valid_ones(stack):
    install_profiles(stack.stub.url, INELIGIBLE)
    api = Byok(stack, stack.tenant())

    for refused in (api.fallback("azure-east", True), api.add("azure-east", "k", "sk-aaaa")):
        assert refused.status_code == 400
        assert refused.json()["error"]["message"] == (
            "Provider 'azure-east' is of kind azure, which only the platform serves; team keys "
            f"are not allowed for it. {VALID}"
        )
    assert KeyPool.objects.count() == 0


def test_another_accounts_group_and_key_are_404(stack):
    mine, theirs = stack.tenant(), stack.tenant()
    their_key = Byok(stack, theirs).add("stub-openai", "theirs", "sk-their-1234").json()["id"]
    headers = {"Authorization": f"Token {mine.api_token}"}
    base = f"{stack.url}/admin/groups"

    assert httpx.get(f"{base}/{theirs.group_id}/byok", headers=headers).status_code == 404
    assert (
        httpx.put(
            f"{base}/{theirs.group_id}/byok/stub-openai", headers=headers, json={"fallback": True}
        ).status_code
        == 404
    )
    assert (
        httpx.post(
            f"{base}/{theirs.group_id}/byok/stub-openai/keys",
            headers=headers,
            json={"label": "x", "key": "sk-x"},
        ).status_code
        == 404
    )
    assert (
        httpx.delete(f"{base}/{mine.group_id}/byok/keys/{their_key}", headers=headers).status_code
        == 404
    )
    assert (
        httpx.delete(f"{base}/{theirs.group_id}/byok/keys/{their_key}", headers=headers).status_code
        == 404
    )
    assert TeamKey.objects.filter(pk=their_key).exists()


def test_delete_removes_the_key(stack):
    tenant = stack.tenant()
    api = Byok(stack, tenant)
    key_id = api.add("stub-openai", "gone", "sk-gone-1111").json()["id"]

    assert api.delete(key_id).status_code == 204
    assert not TeamKey.objects.filter(pk=key_id).exists()
    assert api.list().json()["providers"][0]["keys"] == []
