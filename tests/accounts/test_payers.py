"""A key's payer map against what a real gateway does: for each model, the payer the map names
(a team key, the platform, or a refusal) is the one the official SDK's request meets, read
through the tenant API and the dashboard page alike; another account's key is a 404."""

from __future__ import annotations

import re

import httpx
import openai
import pytest
from django.test import Client

from accounts.models import ApiKey, Membership
from tests.byok.helpers import Byok, team_keys
from tests.support.processes import INTERNAL_TOKEN
from tests.support.profiles import PLATFORM_KEY
from tests.support.usage import usage_rows

HELLO = [{"role": "user", "content": "hello there"}]


def payers_api(stack, tenant, key_id: int | None = None) -> httpx.Response:
    return httpx.get(
        f"{stack.url}/api/keys/{key_id or tenant.api_key_id}/payers",
        headers={"Authorization": f"Token {tenant.api_token}"},
    )


def by_model(body: dict) -> dict[str, dict]:
    return {m["model"]: m for m in body["models"]}


def dashboard(tenant, *, role: str = "owner") -> Client:
    client = Client()
    if role == "owner":
        user = Membership.objects.get(account_id=tenant.account_id, role="owner").user
    else:
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.create_user(username=f"{role}-{tenant.account_id}")
        Membership.objects.create(account_id=tenant.account_id, user=user, role=role)
    client.force_login(user)
    return client


def page_rows(html: str) -> dict[str, str]:
    """Return each row's model and the payer the page names (its data attributes)."""
    return dict(re.findall(r'<tr data-model="([^"]+)" data-payer="([^"]+)">', html))


def ask(stack, tenant, model: str):
    return stack.openai(tenant).chat.completions.create(model=model, messages=HELLO)


def a_mixed_tenant(stack):
    """A tenant whose three profiles each have another payer: a fallback-off team pool
    (stub-openai), no pool (stub-anthropic: the platform), an emptied fallback-off pool
    (stub-router: refused)."""
    tenant = stack.tenant()
    team_keys(stack, tenant, "stub-openai", ["sk-team-a"])
    [emptied] = team_keys(stack, tenant, "stub-router", ["sk-router-gone"])
    assert Byok(stack, tenant).delete(emptied).status_code == 204
    stack.gateway.reload()
    return tenant


def test_the_map_names_the_payer_each_request_meets(stack):
    tenant = a_mixed_tenant(stack)

    response = payers_api(stack, tenant)

    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["key"], body["group"]) == (tenant.api_key_id, tenant.group_id)
    models = by_model(body)
    assert sorted(models) == ["claude-3-5-haiku", "gpt-4o", "gpt-4o-mini", "router-mini"]
    team = models["gpt-4o-mini"]
    assert (team["payer"], team["provider"], team["then"], team["price"], team["refusal"]) == (
        "team_key",
        "stub-openai",
        None,
        None,
        None,
    )
    assert (team["team_keys"], team["team_keys_usable"]) == (1, 1)
    assert team["attempts"] == [{"payer": "team_key", "provider": "stub-openai"}]
    platform = models["claude-3-5-haiku"]
    assert (platform["payer"], platform["provider"], platform["then"]) == (
        "platform",
        "stub-anthropic",
        None,
    )
    assert platform["price"] == {
        "input_micro_per_mtok": 800_000,
        "output_micro_per_mtok": 4_000_000,
        "cached_input_micro_per_mtok": 800_000,
        "cache_write_micro_per_mtok": 800_000,
    }
    refused = models["router-mini"]
    assert (refused["payer"], refused["provider"], refused["attempts"], refused["price"]) == (
        "refused",
        None,
        [],
        None,
    )
    assert refused["refusal"] == {
        "code": "LM-3021",
        "message": "No team key for stub-router: its pool is empty and platform fallback is off.",
    }

    # What happens: the team key serves gpt-4o-mini, the platform claude, router-mini is
    # refused with the map's code and message before any vendor call.
    assert ask(stack, tenant, "gpt-4o-mini").usage.completion_tokens == 8
    assert ask(stack, tenant, "claude-3-5-haiku").usage.completion_tokens == 8
    with pytest.raises(openai.RateLimitError) as refusal:
        ask(stack, tenant, "router-mini")
    assert refusal.value.body["code"] == refused["refusal"]["code"]
    assert refusal.value.body["message"] == refused["refusal"]["message"]
    assert [c["key"] for c in stack.stub.vendor_calls()] == ["sk-team-a", PLATFORM_KEY]
    rows = usage_rows(group_id=tenant.group_id, expect=3)
    assert [(r.model_requested, r.served_by, r.error_code, r.upstream_sent) for r in rows] == [
        ("gpt-4o-mini", "team", "", True),
        ("claude-3-5-haiku", "platform", "", True),
        ("router-mini", "", "LM-3021", False),
    ]
    assert [a.key_label for a in rows[0].attempts] == ["key-0"]


def test_fallback_on_names_the_platform_after_the_team_key_and_it_pays(stack):
    tenant = stack.tenant()
    team_keys(stack, tenant, "stub-openai", ["sk-team-a"], fallback=True)

    entry = by_model(payers_api(stack, tenant).json())["gpt-4o-mini"]

    assert (entry["payer"], entry["then"]) == ("team_key", "platform")
    assert entry["attempts"] == [
        {"payer": "team_key", "provider": "stub-openai"},
        {"payer": "platform", "provider": "stub-openai"},
    ]
    assert entry["price"]["input_micro_per_mtok"] == 150_000
    # The team key refuses (429): the platform pays, as `then` said, at the map's prices.
    stack.stub.faults({"kind": "429", "match": {"key": "sk-team-a"}})
    ask(stack, tenant, "gpt-4o-mini")
    [row] = usage_rows(group_id=tenant.group_id, expect=1)
    assert (row.served_by, row.tokens_in, row.tokens_out, row.provider_cost_micro) == (
        "platform",
        2,
        8,
        6,  # 2 x 0.15 + 8 x 0.6 = 5.1 micro-USD, rounded up
    )


def test_an_emptied_pool_with_fallback_on_is_paid_by_the_platform(stack):
    tenant = stack.tenant()
    [gone] = team_keys(stack, tenant, "stub-openai", ["sk-team-gone"], fallback=True)
    assert Byok(stack, tenant).delete(gone).status_code == 204
    stack.gateway.reload()

    entry = by_model(payers_api(stack, tenant).json())["gpt-4o-mini"]

    assert (entry["payer"], entry["provider"], entry["team_keys"]) == ("platform", "stub-openai", 0)
    ask(stack, tenant, "gpt-4o-mini")
    assert [c["key"] for c in stack.stub.vendor_calls()] == [PLATFORM_KEY]
    [row] = usage_rows(group_id=tenant.group_id, expect=1)
    assert row.served_by == "platform"


def test_a_model_the_key_may_not_use_is_refused_lm_1003(stack):
    tenant = stack.tenant()
    ApiKey.objects.filter(pk=tenant.api_key_id).update(allowed_models=["gpt-4o-mini"])
    stack.gateway.reload()

    models = by_model(payers_api(stack, tenant).json())

    assert models["gpt-4o-mini"]["payer"] == "platform"
    assert models["gpt-4o"]["refusal"] == {
        "code": "LM-1003",
        "message": "This key may not use model 'gpt-4o'. It may use: gpt-4o-mini"
        " (GET /v1/models lists them).",
    }
    with pytest.raises(openai.PermissionDeniedError) as refusal:
        ask(stack, tenant, "gpt-4o")
    assert refusal.value.body["code"] == "LM-1003"
    assert refusal.value.body["message"] == models["gpt-4o"]["refusal"]["message"]


def test_the_dashboard_page_shows_the_same_payers(stack):
    tenant = a_mixed_tenant(stack)
    page = f"/dashboard/{tenant.account_id}/keys/{tenant.api_key_id}/payers/"

    for role in ("owner", "viewer"):
        response = dashboard(tenant, role=role).get(page)
        assert response.status_code == 200
        html = response.content.decode()
        assert page_rows(html) == {
            m["model"]: m["payer"] for m in payers_api(stack, tenant).json()["models"]
        }
        assert page_rows(html) == {
            "claude-3-5-haiku": "platform",
            "gpt-4o": "team_key",
            "gpt-4o-mini": "team_key",
            "router-mini": "refused",
        }
        assert "Team key, pool stub-openai (1 of 1 usable now)" in html
        assert "<code>LM-3021</code> No team key for stub-router" in html
        assert "$0.80" in html and "$4.00" in html  # claude on the platform, per Mtok
    keys_page = dashboard(tenant).get(f"/dashboard/{tenant.account_id}/keys/")
    assert f'href="{page}"' in keys_page.content.decode()


def test_another_accounts_key_map_is_a_404(stack):
    mine, theirs = stack.tenant(), stack.tenant()

    assert payers_api(stack, theirs, key_id=mine.api_key_id).status_code == 404
    assert payers_api(stack, mine, key_id=10**9).status_code == 404
    client = dashboard(theirs)
    own_account = f"/dashboard/{theirs.account_id}/keys/{mine.api_key_id}/payers/"
    other_account = f"/dashboard/{mine.account_id}/keys/{mine.api_key_id}/payers/"
    assert client.get(own_account).status_code == 404
    assert client.get(other_account).status_code == 404


def test_with_platform_serving_off_the_map_and_the_gateway_refuse_alike(
    transactional_db, spawn_gateway, stub
):
    from tests.support.stacks import own_stack

    stack = own_stack(spawn_gateway(GATEWAY_PTB_ENABLED="false"), stub)
    tenant = stack.tenant()
    team_keys(stack, tenant, "stub-anthropic", ["sk-ant-team"])

    # Served by this gateway process, so read with its settings.
    models = by_model(payers_api(stack, tenant).json())

    assert models["claude-3-5-haiku"]["payer"] == "team_key"
    refusal = models["gpt-4o-mini"]["refusal"]
    assert refusal == {
        "code": "LM-3021",
        "message": "No team key for stub-openai: platform serving is off.",
    }
    with pytest.raises(openai.RateLimitError) as refused:
        ask(stack, tenant, "gpt-4o-mini")
    assert (refused.value.body["code"], refused.value.body["message"]) == (
        refusal["code"],
        refusal["message"],
    )
    assert ask(stack, tenant, "claude-3-5-haiku").usage.completion_tokens == 8
    assert [c["key"] for c in stack.stub.vendor_calls()] == ["sk-ant-team"]


def test_the_map_and_the_gateways_plan_agree_on_offers_ranked_keys_and_clashing_kinds(stack):
    """Four profiles offer gpt-4o-mini: the catalog's rules (providers.catalog) decide which
    offers count, in which order they are tried and which have a platform key; the map and
    the gateway's plan (/internal/decide, no vendor call) read them alike."""
    from providers.models import PlatformKey
    from providers.services import platform_key_add, profile_set_platform_key
    from providers.spec import profiles_bootstrap

    def profile(name: str, kind: str, upstream: str, prices: tuple[int, int], model_kind="chat"):
        return {
            "name": name,
            "kind": kind,
            "base_url": f"{stack.stub.url}/v1",
            "models": [
                {
                    "name": "gpt-4o-mini",
                    "kind": model_kind,
                    "upstream": upstream,
                    "input_micro_per_mtok": prices[0],
                    "output_micro_per_mtok": prices[1],
                }
            ],
        }

    # Tried cheapest first (input + output per Mtok): stub-cheap 500_000, stub-pooled 620_000,
    # stub-openai 750_000; by name stub-openai would come before stub-pooled.
    _cheap, pooled, embed = profiles_bootstrap(
        spec=[
            profile("stub-cheap", "openai_compatible", "cheap-mini", (100_000, 400_000)),
            profile("stub-pooled", "openai", "pooled-mini", (120_000, 500_000)),
            # Cheapest of all, but stub-cheap (first by name) offers the name as chat: ignored.
            profile("stub-zembed", "openai", "embed-mini", (1, 0), model_kind="embedding"),
        ]
    )
    profile_set_platform_key(profile=embed, api_key=PLATFORM_KEY)
    embed.save()
    # No platform key: stub-cheap has none; stub-pooled's only one is a row the vendor
    # refused (failing), so neither falls back to the platform after its team key.
    failed = platform_key_add(profile=pooled, label="pk-1", api_key="sk-platform-refused")
    PlatformKey.objects.filter(pk=failed.pk).update(status=PlatformKey.Status.FAILING)
    tenant = stack.tenant()
    team_keys(stack, tenant, "stub-cheap", ["sk-team-cheap"], fallback=True)
    team_keys(stack, tenant, "stub-pooled", ["sk-team-pooled"], fallback=True)

    entry = by_model(payers_api(stack, tenant).json())["gpt-4o-mini"]
    plan = httpx.post(
        f"{stack.url}/internal/decide",
        headers={"Authorization": f"Bearer {INTERNAL_TOKEN}"},
        json={
            "group": tenant.group_id,
            "request_id": "payers-1",
            "model": "gpt-4o-mini",
            "messages": HELLO,
        },
    ).json()

    expected = [
        {"payer": "team_key", "provider": "stub-cheap"},
        {"payer": "team_key", "provider": "stub-pooled"},
        {"payer": "platform", "provider": "stub-openai"},
    ]
    assert entry["attempts"] == expected
    assert [
        {
            "payer": "team_key" if a["served_by"] == "team" else "platform",
            "provider": link["provider"],
        }
        for link in plan["links"]
        for a in link["attempts"]
    ] == expected
    assert [link["provider"] for link in plan["links"]] == [
        "stub-cheap",
        "stub-pooled",
        "stub-openai",
    ]
    assert (entry["payer"], entry["provider"], entry["then"]) == (
        "team_key",
        "stub-cheap",
        "team_key",
    )
    assert entry["price"]["input_micro_per_mtok"] == 150_000  # the platform's, on stub-openai
    assert stack.stub.vendor_calls() == []

    # What a request meets: each team key refuses (429), then the platform pays on stub-openai.
    stack.stub.faults(
        {"kind": "429", "match": {"key": "sk-team-cheap"}},
        {"kind": "429", "match": {"key": "sk-team-pooled"}},
    )
    assert ask(stack, tenant, "gpt-4o-mini").usage.completion_tokens == 8
    assert [(c["key"], c["model"]) for c in stack.stub.vendor_calls()] == [
        ("sk-team-cheap", "cheap-mini"),
        ("sk-team-pooled", "pooled-mini"),
        (PLATFORM_KEY, "gpt-4o-mini"),
    ]
