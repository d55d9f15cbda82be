"""The team keys page, through Django's test client: the provider list names what each profile
serves and offers only those a team key may be added for; removing a pool's last key asks
first and says what the next request will do; a key saved where none of the account's recent
models is served says so."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

import pytest

from accounts.models import Group, Membership
from byok.models import KeyPool, TeamKey
from byok.services import pool_set_fallback, team_key_add
from tests.byok.test_byok_api import INELIGIBLE
from tests.dashboard.test_manage import text
from tests.dashboard.test_pages import member, page, signed_in
from tests.support.profiles import install_profiles, stub_profiles
from tests.support.tenants import make_tenant
from tests.support.usage import journal_row, store

pytestmark = pytest.mark.django_db

# Profiles no team key may be added for (platform-only and keyless kinds), and a web one.
PLATFORM_ONLY = [
    *INELIGIBLE,  # azure-east, bedrock
    {
        "name": "gemini",
        "kind": "gemini",
        "base_url": "https://example.invalid",
        "models": [{"name": "gemini-2.5-flash"}],
    },
    {"name": "fake", "kind": "fake", "models": [{"name": "fake-model"}]},
    {"name": "direct", "kind": "direct_http", "units": {"page": 100}},
]
RENDER = {
    "name": "stub-render",
    "kind": "render_api",
    "base_url": "https://example.invalid/web/v1",
    "units": {"rendered_page": 2_000},
}


def words(response) -> str:
    """The page's text, entities read."""
    return html.unescape(text(response))


def profiles(stub, *extra: dict) -> None:
    spec = stub_profiles(stub.url)
    spec[0]["models"][0]["aliases"] = ["gpt-4o-mini-latest"]
    install_profiles(stub.url, spec + list(extra))


def options(page_html: str) -> dict[str, list[tuple[str, str]]]:
    """The provider select's options by optgroup: (value, label)."""
    select = page_html.split('name="provider"')[1].split("</select>")[0]
    groups = {}
    for label, body in re.findall(r'<optgroup label="([^"]+)">(.*?)</optgroup>', select, re.S):
        groups[label] = re.findall(r'<option value="([^"]+)"[^>]*>([^<]+)</option>', body)
    return groups


def add(client, tenant, provider: str, key: str = "sk-team-1111", label: str = "k"):
    return client.post(
        page(tenant, "team-keys/"),
        {"group": tenant.group_id, "provider": provider, "label": label, "key": key},
        follow=True,
    )


def used(tenant, *models: str, days_ago: int = 0) -> None:
    """Store one usage row of the tenant per (requested, served) model pair given."""
    at = datetime.now(UTC) - timedelta(days=days_ago)
    store(
        *(
            journal_row(
                group_id=tenant.group_id,
                account_id=tenant.account_id,
                created_at=at,
                model_requested=requested,
                model_served=served,
            )
            for requested, served in (m.split(">") if ">" in m else (m, m) for m in models)
        )
    )


# ---------------------------------------------------------------- the provider list


def test_the_provider_list_names_each_profiles_models_and_offers_only_team_key_kinds(stub):
    profiles(stub, *PLATFORM_ONLY, RENDER)
    tenant = make_tenant()

    listing = signed_in(tenant).get(page(tenant, "team-keys/")).content.decode()

    assert options(listing) == {
        "Models": [
            ("stub-anthropic", "stub-anthropic — claude-3-5-haiku"),
            ("stub-openai", "stub-openai — gpt-4o, gpt-4o-mini"),
            ("stub-router", "stub-router — router-mini"),
        ],
        "Web": [("stub-render", "stub-render — web: Rendering vendor (JavaScript), no models")],
    }
    listed = [
        re.sub(r"<[^>]+>", "", li).strip()
        for li in re.findall(r'<li data-provider="[^"]+">(.*?)</li>', listing)
    ]
    assert listed == [
        "stub-anthropic — claude-3-5-haiku",
        "stub-openai — gpt-4o, gpt-4o-mini",
        "stub-router — router-mini",
        "stub-render — web: Rendering vendor (JavaScript) (no models)",
    ]
    for platform_only in ("azure-east", "bedrock", "gemini", "fake", "direct"):
        assert f'value="{platform_only}"' not in listing


def test_a_profile_with_many_models_names_six_and_counts_the_rest(stub):
    spec = stub_profiles(stub.url)
    spec[0]["models"] = [
        {"name": f"m{n}", "input_micro_per_mtok": 1, "output_micro_per_mtok": 1} for n in range(9)
    ]
    install_profiles(stub.url, spec)
    tenant = make_tenant()

    listing = signed_in(tenant).get(page(tenant, "team-keys/")).content.decode()

    assert ("stub-openai", "stub-openai — m0, m1, m2, m3, m4, m5 and 3 more") in options(listing)[
        "Models"
    ]


def test_a_platform_only_profile_posted_anyway_is_refused_naming_the_valid_ones(stub):
    profiles(stub, *PLATFORM_ONLY)
    tenant = make_tenant()

    refused = add(signed_in(tenant), tenant, "azure-east")

    assert "Team keys cannot be added for azure-east. Team keys can be added for: " in text(refused)
    assert not TeamKey.objects.filter(pool__group_id=tenant.group_id).exists()


# ---------------------------------------------------------------- recent models


def test_a_key_for_a_provider_serving_none_of_the_recent_models_says_so_at_save(stub):
    profiles(stub)
    tenant = make_tenant()
    used(tenant, "gpt-4o-mini", "gpt-4o-mini-latest>gpt-4o-mini", "gpt-4o")
    used(tenant, "router-mini", days_ago=31)  # older than 30 days: not recent
    used(tenant, "gpt-4o-mni>")  # misspelt, refused: not a model

    saved = add(signed_in(tenant), tenant, "stub-anthropic")

    [warning] = re.findall(r'<li class="warning">([^<]*)</li>', saved.content.decode())
    assert html.unescape(warning) == (
        "stub-anthropic serves claude-3-5-haiku; none of your account's models of the last 30"
        " days (gpt-4o, gpt-4o-mini, gpt-4o-mini-latest) is among them, so this key serves none"
        " of those requests. Add the key where those models are served, or ask for one of this"
        " provider's models."
    )
    assert "Team key k (…1111) added." in text(saved)
    assert TeamKey.objects.filter(pool__provider="stub-anthropic").count() == 1


def test_a_key_for_a_provider_serving_a_recent_model_or_an_alias_of_one_saves_quietly(stub):
    profiles(stub)
    tenant = make_tenant()
    other = make_tenant()
    used(tenant, "gpt-4o-mini-latest>")  # asked for by an alias of gpt-4o-mini, refused
    used(other, "claude-3-5-haiku")

    quiet = add(signed_in(tenant), tenant, "stub-openai")
    also_quiet = add(signed_in(other), other, "stub-anthropic")
    warned = add(signed_in(tenant), tenant, "stub-anthropic")

    for saved in (quiet, also_quiet):
        assert saved.status_code == 200 and 'class="warning"' not in saved.content.decode()
    # Only the account's own traffic counts: the other account's claude-3-5-haiku does not.
    assert "models of the last 30 days (gpt-4o-mini-latest) is among them" in words(warned)


def test_without_recent_traffic_a_key_saves_without_a_warning(stub):
    profiles(stub)
    tenant = make_tenant()

    saved = add(signed_in(tenant), tenant, "stub-router")

    assert "Team key k (…1111) added." in text(saved)
    assert 'class="warning"' not in saved.content.decode()


# ---------------------------------------------------------------- removing keys


def pool_with(tenant, *secrets: str, fallback: bool = False) -> list[TeamKey]:
    group = Group.objects.get(pk=tenant.group_id)
    keys = [
        team_key_add(group=group, provider="stub-openai", label=f"key-{n}", key=secret)
        for n, secret in enumerate(secrets)
    ]
    pool_set_fallback(group=group, provider="stub-openai", fallback=fallback)
    return keys


def test_a_key_with_others_left_in_its_pool_is_removed_in_one_click(stub):
    profiles(stub)
    tenant = make_tenant()
    first, second = pool_with(tenant, "sk-team-aaaa", "sk-team-bbbb")
    client = signed_in(tenant)

    listing = client.get(page(tenant, "team-keys/")).content.decode()
    assert listing.count("data-last-key") == 0  # two keys: each a one-click form

    removed = client.post(page(tenant, f"team-keys/{first.pk}/remove/"), follow=True)

    assert "Team key key-0 (…aaaa) removed." in text(removed)
    assert list(TeamKey.objects.filter(pool__group_id=tenant.group_id)) == [second]
    # Now the last one: offered as a link to its confirmation, not a one-click form.
    assert f'href="/dashboard/{tenant.account_id}/team-keys/{second.pk}/remove/"' in (
        removed.content.decode()
    )


def test_the_last_key_with_fallback_off_asks_first_and_says_requests_will_be_lm_3021(stub):
    profiles(stub)
    tenant = make_tenant()
    [only] = pool_with(tenant, "sk-team-cccc", fallback=False)
    client = signed_in(tenant)
    url = page(tenant, f"team-keys/{only.pk}/remove/")

    asked = client.get(url)
    # A one-click POST (a stale page's form) asks too, and removes nothing.
    posted = client.post(url)

    for answer in (asked, posted):
        assert answer.status_code == 200
        assert "Remove team key key-0 ( …cccc )?" in text(answer)
        assert (
            "This is the last key of the stub-openai pool of default. The pool stays, empty,"
            " with platform fallback off ." in text(answer)
        )
        assert (
            "The next of default's requests for stub-openai (gpt-4o, gpt-4o-mini) is refused"
            ' with LM-3021 ("No team key for stub-openai: its pool is empty and platform'
            ' fallback is off."); no platform money is spent.'
        ) in words(answer)
        assert 'data-next="refused"' in answer.content.decode()
    assert TeamKey.objects.filter(pk=only.pk).exists()

    removed = client.post(url, {"confirm": "1"}, follow=True)

    assert not TeamKey.objects.filter(pk=only.pk).exists()
    assert KeyPool.objects.get(group_id=tenant.group_id).fallback is False  # the pool stays
    assert "The stub-openai pool has no key left. The next of default's requests" in words(removed)
    assert "data-pool-warning" in removed.content.decode()


def test_the_last_key_with_fallback_on_says_the_platform_serves_and_the_wallet_pays(stub):
    profiles(stub)
    tenant = make_tenant()
    [only] = pool_with(tenant, "sk-team-dddd", fallback=True)
    client = signed_in(tenant)

    asked = client.get(page(tenant, f"team-keys/{only.pk}/remove/"))

    assert 'data-next="platform"' in asked.content.decode()
    assert (
        "The next of default's requests for stub-openai (gpt-4o, gpt-4o-mini) is served on the"
        " platform's keys and paid from your wallet: platform fallback is on."
    ) in words(asked)
    removed = client.post(page(tenant, f"team-keys/{only.pk}/remove/"), {"confirm": "1"})
    assert removed.status_code == 302
    listing = words(client.get(page(tenant, "team-keys/")))
    assert (
        "No key in this pool and fallback is on: default's stub-openai requests are served on"
        " the platform's keys and paid from your wallet, as with no pool." in listing
    )


def test_the_last_key_with_platform_serving_off_says_lm_3021_even_with_fallback_on(stub, settings):
    settings.GATEWAY_PTB_ENABLED = False
    profiles(stub)
    tenant = make_tenant()
    [only] = pool_with(tenant, "sk-team-eeee", fallback=True)

    asked = signed_in(tenant).get(page(tenant, f"team-keys/{only.pk}/remove/"))

    assert (
        'is refused with LM-3021 ("No team key for stub-openai: platform serving is off.")'
    ) in words(asked)


def test_a_viewer_cannot_remove_a_key_nor_see_its_confirmation(stub):
    profiles(stub)
    tenant = make_tenant()
    [only] = pool_with(tenant, "sk-team-ffff")
    viewer = member(tenant, Membership.Role.VIEWER)
    url = page(tenant, f"team-keys/{only.pk}/remove/")

    assert viewer.get(url).status_code == 403
    assert viewer.post(url, {"confirm": "1"}).status_code == 403
    assert TeamKey.objects.filter(pk=only.pk).exists()
    other = make_tenant()
    assert signed_in(other).get(page(other, f"team-keys/{only.pk}/remove/")).status_code == 404


def test_the_last_key_of_a_web_profile_names_the_provider_not_models(stub):
    profiles(stub, {**RENDER, "allows_platform": True})
    tenant = make_tenant()
    group = Group.objects.get(pk=tenant.group_id)
    only = team_key_add(group=group, provider="stub-render", label="web", key="sk-render-7777")
    pool_set_fallback(group=group, provider="stub-render", fallback=True)

    asked = signed_in(tenant).get(page(tenant, f"team-keys/{only.pk}/remove/"))

    assert (
        "The next of default's requests for stub-render is served on the platform's keys and"
        " paid from your wallet: platform fallback is on."
    ) in words(asked)
