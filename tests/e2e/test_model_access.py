"""Model access groups through a real gateway and the official SDKs: models.list() is exactly
what the key may call, a call outside it is LM-1003 naming the allowed set, patterns reach
by name, profile and provider kind, and a change made through the tenant API is live on the
running gateway when the write answers (no reload)."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest
from rest_framework.test import APIClient

from tests.support.processes import INTERNAL_TOKEN
from tests.support.stacks import Stack
from tests.support.tenants import Tenant

HELLO = [{"role": "user", "content": "Say hello"}]
EVERY_MODEL = ["claude-3-5-haiku", "gpt-4o", "gpt-4o-mini", "router-mini"]


def api(tenant: Tenant) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {tenant.api_token}")
    return client


def access_group(tenant: Tenant, name: str, entries: list[str]) -> int:
    created = api(tenant).post(
        "/api/access-groups", {"name": name, "entries": entries}, format="json"
    )
    assert created.status_code == 201, created.json()
    return created.json()["id"]


def patch(tenant: Tenant, path: str, body: dict) -> None:
    response = api(tenant).patch(path, body, format="json")
    assert response.status_code == 200, response.json()


def listed(stack, tenant: Tenant) -> list[str]:
    return [m.id for m in stack.openai(tenant).models.list()]


def outcome(stack, tenant: Tenant, model: str) -> str:
    """Return "served", or the refusal's code and message."""
    try:
        stack.openai(tenant).chat.completions.create(model=model, messages=HELLO, max_tokens=8)
    except openai.APIStatusError as refused:
        assert isinstance(refused.body, dict), refused.body
        return f"{refused.body['code']}: {refused.body['message']}"
    return "served"


def callable_models(stack, tenant: Tenant) -> list[str]:
    return [m for m in EVERY_MODEL if outcome(stack, tenant, m) == "served"]


def test_models_list_is_exactly_what_the_key_may_call_and_a_refusal_names_it(stack):
    tenant = stack.tenant()
    cheap = access_group(tenant, "cheap", ["gpt-4o-mini", "claude-*"])
    patch(tenant, f"/api/keys/{tenant.api_key_id}", {"access_groups": [cheap]})

    assert listed(stack, tenant) == ["claude-3-5-haiku", "gpt-4o-mini"]
    assert callable_models(stack, tenant) == ["claude-3-5-haiku", "gpt-4o-mini"]
    # The Anthropic SDK reads the same list in its own shape.
    page = stack.anthropic(tenant).models.list()
    assert [(m.id, m.type, m.display_name) for m in page.data] == [
        ("claude-3-5-haiku", "model", "claude-3-5-haiku"),
        ("gpt-4o-mini", "model", "gpt-4o-mini"),
    ]
    assert (page.has_more, page.first_id, page.last_id) == (
        False,
        "claude-3-5-haiku",
        "gpt-4o-mini",
    )
    stack.stub.clear()
    assert outcome(stack, tenant, "gpt-4o") == (
        "LM-1003: This key may not use model 'gpt-4o'. It may use: claude-3-5-haiku, "
        "gpt-4o-mini (GET /v1/models lists them)."
    )
    with pytest.raises(anthropic.PermissionDeniedError) as refused:
        stack.anthropic(tenant).messages.create(model="router-mini", max_tokens=8, messages=HELLO)
    assert refused.value.body["error"]["code"] == "LM-1003"
    assert stack.stub.vendor_calls() == []  # a refusal never reaches a vendor


def test_profile_and_provider_patterns_and_the_groups_bound(stack):
    tenant = stack.tenant()
    key = f"/api/keys/{tenant.api_key_id}"

    # A profile's models, and one more by name.
    patch(tenant, key, {"allowed_models": ["stub-router/*", "claude-3-5-haiku"]})
    assert listed(stack, tenant) == ["claude-3-5-haiku", "router-mini"]
    assert callable_models(stack, tenant) == ["claude-3-5-haiku", "router-mini"]

    # A provider kind's models (stub-openai is an openai-kind profile; stub-router is not).
    patch(tenant, key, {"allowed_models": ["openai/*"]})
    assert listed(stack, tenant) == ["gpt-4o", "gpt-4o-mini"]
    assert callable_models(stack, tenant) == ["gpt-4o", "gpt-4o-mini"]

    # The group's access group bounds the key: "*mini" meets "openai/*" in gpt-4o-mini only.
    bound = access_group(tenant, "openai-only", ["openai/*"])
    patch(tenant, f"/api/groups/{tenant.group_id}", {"access_groups": [bound]})
    patch(tenant, key, {"allowed_models": ["*mini"]})
    assert listed(stack, tenant) == ["gpt-4o-mini"]
    assert callable_models(stack, tenant) == ["gpt-4o-mini"]
    assert outcome(stack, tenant, "router-mini") == (
        "LM-1003: This key may not use model 'router-mini'. It may use: gpt-4o-mini "
        "(GET /v1/models lists them)."
    )


def test_an_access_groups_change_is_live_on_every_gateway_when_the_write_answers(
    stack, spawn_gateway
):
    other = Stack(gateway=spawn_gateway(), stub=stack.stub)
    other.gateway.reload()
    tenant = stack.tenant()
    cheap = access_group(tenant, "cheap", ["gpt-4o-mini"])
    patch(tenant, f"/api/keys/{tenant.api_key_id}", {"access_groups": [cheap]})
    for replica in (stack, other):  # the key's policy is in each one's memory now
        assert listed(replica, tenant) == ["gpt-4o-mini"]
        assert outcome(replica, tenant, "gpt-4o").startswith("LM-1003")

    patch(tenant, f"/api/access-groups/{cheap}", {"entries": ["gpt-4o"]})

    # No reload, no wait: the write answered once every replica dropped the account's keys.
    for replica in (stack, other):
        assert listed(replica, tenant) == ["gpt-4o"]
        assert outcome(replica, tenant, "gpt-4o") == "served"
        assert outcome(replica, tenant, "gpt-4o-mini").startswith("LM-1003")

    # Deleted, the key has no access groups and no names of its own: unrestricted.
    assert api(tenant).delete(f"/api/access-groups/{cheap}").status_code == 204
    assert listed(stack, tenant) == EVERY_MODEL


def test_a_service_acting_for_a_group_is_bounded_by_the_groups_access_groups(stack):
    tenant = stack.tenant()
    bound = access_group(tenant, "openai-only", ["openai/*"])
    patch(tenant, f"/api/groups/{tenant.group_id}", {"access_groups": [bound]})

    def decide(model: str) -> httpx.Response:
        body = {"group": tenant.group_id, "request_id": f"r-{model}", "model": model}
        return httpx.post(
            f"{stack.url}/internal/decide",
            json={**body, "messages": HELLO},
            headers={"Authorization": f"Bearer {INTERNAL_TOKEN}"},
            timeout=20,
        )

    assert decide("gpt-4o").status_code == 200
    refused = decide("claude-3-5-haiku")
    assert (refused.status_code, refused.json()["error"]["message"]) == (
        403,
        "This key may not use model 'claude-3-5-haiku'. It may use: gpt-4o, gpt-4o-mini "
        "(GET /v1/models lists them).",
    )
