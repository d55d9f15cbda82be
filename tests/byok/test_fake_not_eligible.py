"""The keyless `fake` kind (the built-in fake upstream) takes no team keys: the tenant API and
the dashboard refuse one naming the providers that do, and a pool row for a fake profile
already in the store is not trusted on the request path (the platform serves it)."""

from __future__ import annotations

import re

from django.test import Client

from accounts.models import Membership
from byok.models import KeyPool, TeamKey
from byok.pools import key_binding
from core.sealing import seal
from tests.byok.helpers import Byok
from tests.support.profiles import install_profiles
from tests.support.usage import usage_rows

FAKE_PROFILE = {
    "name": "fake",
    "kind": "fake",
    "models": [
        {"name": "fake-model", "input_micro_per_mtok": 1_000, "output_micro_per_mtok": 2_000}
    ],
}
ELIGIBLE = "Team keys can be added for: stub-anthropic, stub-openai, stub-router."
HELLO = [{"role": "user", "content": "hello there"}]


def with_fake_profile(stack) -> None:
    install_profiles(stack.stub.url, [FAKE_PROFILE])
    stack.gateway.reload()


def stored_pool(tenant, provider: str, secret: str) -> TeamKey:
    """Write a fallback-off pool with one sealed key straight to the store, as a release
    that still let the fake kind take team keys did."""
    pool = KeyPool.objects.create(group_id=tenant.group_id, provider=provider, fallback=False)
    key = TeamKey.objects.create(pool=pool, label="old", sealed=b"", seal_version="", last4="0042")
    key.sealed, key.seal_version = seal(
        secret,
        bound_to=key_binding(group_id=tenant.group_id, provider=provider, key_id=key.pk),
    )
    key.save(update_fields=["sealed", "seal_version"])
    return key


def test_the_tenant_api_refuses_a_team_key_for_the_fake_kind_naming_the_eligible(stack):
    with_fake_profile(stack)
    api = Byok(stack, stack.tenant())

    for refused in (api.add("fake", "k", "sk-team-0042"), api.fallback("fake", True)):
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "LM-2001"
        assert refused.json()["error"]["message"] == (
            "Provider 'fake' is of kind fake, which only the platform serves; team keys are not "
            f"allowed for it. {ELIGIBLE}"
        )
    assert api.list().json()["eligible_providers"] == [
        "stub-anthropic",
        "stub-openai",
        "stub-router",
    ]
    assert (KeyPool.objects.count(), TeamKey.objects.count()) == (0, 0)


def test_the_dashboard_refuses_a_team_key_for_the_fake_kind_naming_the_eligible(stack):
    with_fake_profile(stack)
    tenant = stack.tenant()
    client = Client()
    client.force_login(Membership.objects.get(account_id=tenant.account_id, role="owner").user)
    team_keys = f"/dashboard/{tenant.account_id}/team-keys/"

    listing = client.get(team_keys).content.decode()
    answered = client.post(
        team_keys,
        {"group": tenant.group_id, "provider": "fake", "label": "k", "key": "sk-team-0042"},
    )

    offered = re.findall(r'<li data-provider="([^"]+)">', listing)
    assert offered == ["stub-anthropic", "stub-openai", "stub-router"]
    assert '<option value="fake"' not in listing
    assert answered.status_code == 200
    assert f"Team keys cannot be added for fake. {ELIGIBLE}" in answered.content.decode()
    assert TeamKey.objects.count() == 0


def test_a_stored_pool_of_the_fake_kind_is_not_trusted_and_the_platform_serves(stack):
    with_fake_profile(stack)
    tenant = stack.tenant()
    stored_pool(tenant, "fake", "sk-team-fake-0042")
    stored_pool(tenant, "stub-openai", "sk-team-openai-0042")  # the same rows, eligible
    stack.gateway.reload()
    client = stack.openai(tenant)

    fake = client.chat.completions.with_raw_response.create(model="fake-model", messages=HELLO)
    openai = client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=HELLO)

    assert fake.status_code == openai.status_code == 200
    ids = [fake.headers["x-request-id"], openai.headers["x-request-id"]]
    rows = {row.request_id: row for row in usage_rows(ids, expect=2)}
    fake_row, openai_row = rows[ids[0]], rows[ids[1]]
    # The fake pool's fallback is off: trusted, it would serve as the team (or refuse).
    assert (fake_row.provider, fake_row.served_by, fake_row.byok_tokens_in) == (
        "fake",
        "platform",
        0,
    )
    assert [(a.served_by, a.source) for a in fake_row.attempts] == [
        ("platform", "fake:fake-model:platform")
    ]
    assert (openai_row.provider, openai_row.served_by) == ("stub-openai", "team")
    # The fake vendor is in-process: the stub saw only the eligible pool's team key.
    assert [c["key"] for c in stack.stub.vendor_calls()] == ["sk-team-openai-0042"]
