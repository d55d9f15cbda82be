"""What the tenant API can do, from the dashboard: keys with their models, budget, limits and
expiry (edit, revoke with a confirmation), groups and their budgets, team key pools (the
fallback said in words, a warning when a pool refuses everything, removal), members and
roles, and a request log that reads like one. Each change behind the role that may make it."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import ApiKey, Group, Membership
from byok.models import KeyPool
from tests.dashboard.test_pages import member, page, signed_in
from tests.support.profiles import install_profiles
from tests.support.tenants import make_tenant
from tests.support.usage import journal_row, store

pytestmark = pytest.mark.django_db


def text(response) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


def test_a_key_is_created_with_models_budget_limits_and_expiry_typed_as_people_do():
    tenant = make_tenant()

    created = signed_in(tenant).post(
        page(tenant, "keys/"),
        {
            "group": tenant.group_id,
            "name": "batch jobs",
            "models": "gpt-4o-mini, claude-3-5-haiku, gpt-4o-mini",
            "budget": "2.50",
            "budget_period": "monthly",
            "rpm_limit": "60",
            "tpm_limit": "90000",
            "expires_at": "2027-01-31T18:00",
        },
    )

    assert created.status_code == 200 and 'id="secret"' in created.content.decode()
    key = ApiKey.objects.get(group_id=tenant.group_id, name="batch jobs")
    assert (key.allowed_models, key.budget_max_micro, key.budget_period) == (
        ["gpt-4o-mini", "claude-3-5-haiku"],
        2_500_000,
        "monthly",
    )
    assert (key.rpm_limit, key.tpm_limit) == (60, 90_000)
    assert key.expires_at == datetime(2027, 1, 31, 18, 0, tzinfo=UTC)  # the account's zone: UTC
    row = created.content.decode().split(f'<tr data-key="{key.pk}">')[1].split("</tr>")[0]
    assert "gpt-4o-mini, claude-3-5-haiku" in row and "$2.50 monthly" in row
    assert "60 req/min, 90,000 tokens/min" in row


def test_a_key_is_edited_and_a_budget_with_seven_decimals_is_refused_in_words():
    tenant = make_tenant()
    client = signed_in(tenant)
    url = page(tenant, f"keys/{tenant.api_key_id}/")

    form = client.get(url).content.decode()
    assert 'name="budget"' in form and 'name="models"' in form
    refused = client.post(url, {"name": "x", "budget": "1.0000001"})
    assert "An amount has at most six decimals (one micro-dollar)." in refused.content.decode()
    saved = client.post(url, {"name": "ci", "models": "gpt-4o", "budget": "0.75", "rpm_limit": "5"})

    assert saved.status_code == 302
    key = ApiKey.objects.get(pk=tenant.api_key_id)
    assert (key.name, key.allowed_models, key.budget_max_micro, key.rpm_limit) == (
        "ci",
        ["gpt-4o"],
        750_000,
        5,
    )


def test_revoking_asks_first_and_says_what_happens():
    tenant = make_tenant()
    client = signed_in(tenant)
    url = page(tenant, f"keys/{tenant.api_key_id}/revoke/")

    asked = client.get(url)
    assert asked.status_code == 200
    assert "stops working at once" in text(asked)
    assert ApiKey.objects.get(pk=tenant.api_key_id).revoked_at is None

    assert client.post(url).status_code == 302
    assert ApiKey.objects.get(pk=tenant.api_key_id).revoked_at is not None


def test_groups_are_created_and_their_budgets_set_in_dollars():
    tenant = make_tenant()
    client = signed_in(tenant)

    client.post(page(tenant, "groups/"), {"name": "research", "budget": "100", "rpm_limit": ""})
    research = Group.objects.get(account_id=tenant.account_id, name="research")
    assert research.budget_max_micro == 100_000_000
    edited = client.post(
        page(tenant, f"groups/{research.pk}/"),
        {"name": "research", "budget": "12.345678", "budget_period": "daily", "tpm_limit": "1000"},
    )
    assert edited.status_code == 302
    research.refresh_from_db()
    assert (research.budget_max_micro, research.budget_period, research.tpm_limit) == (
        12_345_678,
        "daily",
        1_000,
    )
    listing = client.get(page(tenant, "groups/")).content.decode()
    row = listing.split(f'<tr data-group="{research.pk}">')[1].split("</tr>")[0]
    assert '<span title="$12.345678">$12.35</span>' in row


def test_a_viewer_reads_groups_and_members_but_changes_nothing():
    tenant = make_tenant()
    viewer = member(tenant, Membership.Role.VIEWER)

    assert viewer.get(page(tenant, "groups/")).status_code == 200
    assert viewer.post(page(tenant, "groups/"), {"name": "sneaky"}).status_code == 403
    assert viewer.post(page(tenant, f"groups/{tenant.group_id}/"), {"name": "x"}).status_code == 403
    assert viewer.post(page(tenant, "members/"), {"username": "friend"}).status_code == 403
    assert not Group.objects.filter(name="sneaky").exists()
    assert not get_user_model().objects.filter(username="friend").exists()


def test_members_are_invited_by_a_one_time_link_their_role_changed_and_removed():
    tenant = make_tenant()
    owner = signed_in(tenant)

    invited = owner.post(
        page(tenant, "members/"), {"username": "dana", "email": "d@example.com", "role": "admin"}
    )
    link = re.search(
        r'<code id="link">http://testserver(/set-password/[^<]+)</code>', invited.content.decode()
    )
    assert link is not None
    dana = Membership.objects.get(account_id=tenant.account_id, user__username="dana")
    assert dana.role == "admin" and not dana.user.has_usable_password()
    # The link sets a password once (the view moves the token into the session first).
    person = Client()
    form_url = person.get(link.group(1), follow=True).redirect_chain[-1][0]
    done = person.post(
        form_url,
        {"new_password1": "dana-long-password-9", "new_password2": "dana-long-password-9"},
    )
    assert done.status_code == 302
    dana.user.refresh_from_db()
    assert dana.user.check_password("dana-long-password-9")
    assert link.group(1) not in owner.get(page(tenant, "members/")).content.decode()

    owner.post(page(tenant, f"members/{dana.pk}/role/"), {"role": "viewer"})
    dana.refresh_from_db()
    assert dana.role == "viewer"
    asked = owner.get(page(tenant, f"members/{dana.pk}/remove/"))
    assert "no longer see or change anything" in text(asked)
    owner.post(page(tenant, f"members/{dana.pk}/remove/"))
    assert not Membership.objects.filter(pk=dana.pk).exists()


def test_the_last_owner_stays_and_an_admin_may_not_manage_members():
    tenant = make_tenant()
    owner_seat = Membership.objects.get(account_id=tenant.account_id, role="owner")
    owner = signed_in(tenant)

    demoted = owner.post(
        page(tenant, f"members/{owner_seat.pk}/role/"), {"role": "viewer"}, follow=True
    )
    assert "An account keeps at least one owner." in demoted.content.decode()
    owner.post(page(tenant, f"members/{owner_seat.pk}/remove/"))
    assert Membership.objects.get(pk=owner_seat.pk).role == "owner"

    admin = member(tenant, Membership.Role.ADMIN)
    assert (
        admin.post(page(tenant, "members/"), {"username": "x", "role": "owner"}).status_code == 403
    )
    assert (
        admin.post(page(tenant, f"members/{owner_seat.pk}/role/"), {"role": "viewer"}).status_code
        == 403
    )


def test_a_pool_that_refuses_everything_is_flagged_and_can_be_removed(stub):
    install_profiles(stub.url)
    tenant = make_tenant()
    client = signed_in(tenant)
    client.post(
        page(tenant, "team-keys/"),
        {"group": tenant.group_id, "provider": "stub-openai", "label": "k", "key": "sk-team-1111"},
    )
    listing = client.get(page(tenant, "team-keys/")).content.decode()
    assert "data-pool-warning" not in listing
    assert "refused (LM-3021): platform money is never spent" in text(
        client.get(page(tenant, "team-keys/"))
    )

    key_id = re.search(r'data-team-key="(\d+)"', listing).group(1)
    client.post(page(tenant, f"team-keys/{key_id}/remove/"), {"confirm": "1"})  # the last key
    emptied = client.get(page(tenant, "team-keys/"))
    assert (
        "No usable key and fallback is off: every stub-openai request of default is refused"
        " (LM-3021)." in text(emptied)
    )

    turned_on = client.post(
        page(tenant, "team-keys/fallback/"),
        {"group": tenant.group_id, "provider": "stub-openai", "fallback": "on"},
        follow=True,
    )
    assert "requests are served on the platform's keys and paid from your wallet" in text(turned_on)
    pool = KeyPool.objects.get(group_id=tenant.group_id)
    assert "Its 0 team key(s) are deleted" in text(
        client.get(page(tenant, f"team-keys/pools/{pool.pk}/remove/"))
    )
    client.post(page(tenant, f"team-keys/pools/{pool.pk}/remove/"))
    assert not KeyPool.objects.filter(pk=pool.pk).exists()


def test_the_request_log_names_key_and_group_latency_cost_and_what_an_error_means():
    tenant = make_tenant()
    store(
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            api_key_id=tenant.api_key_id,
            request_id="req-ok",
            latency_ms=1234,
            provider_cost_micro=2_520,
        ),
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            api_key_id=tenant.api_key_id,
            request_id="req-refused",
            status=402,
            error_code="LM-4001",
            upstream_sent=False,
        ),
    )
    html = signed_in(tenant).get(page(tenant, "usage/")).content.decode()
    key = ApiKey.objects.get(pk=tenant.api_key_id)

    ok = html.split('<tr data-request="req-ok"')[1].split("</tr>")[0]
    assert f"{key.prefix}… {key.name}" in ok and '<td class="group">default</td>' in ok
    assert '<td class="num latency">1,234 ms</td>' in ok
    assert '<td class="num cost">$0.00252</td>' in ok
    refused = html.split('<tr data-request="req-refused"')[1].split("</tr>")[0]
    assert "402" in refused and ": Budget exhausted.</span>" in refused


def test_a_requests_detail_shows_the_url_it_fetched_and_what_its_error_means():
    tenant = make_tenant()
    store(
        journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            request_id="req-scrape",
            endpoint="web.scrape",
            web_url="https://example.com/pricing?plan=team",
            status=429,
            error_code="LM-3004",
        )
    )

    html = signed_in(tenant).get(page(tenant, "usage/req-scrape/")).content.decode()

    assert '<dd id="web-url" class="id">https://example.com/pricing?plan=team</dd>' in html
    # A row from before messages were kept reads the code's meaning.
    meaning = "The group&#x27;s daily web unit budget is exhausted."
    assert f'429 LM-3004: <span id="error-message" title="{meaning}">{meaning}</span>' in html
    listing = signed_in(tenant).get(page(tenant, "usage/")).content.decode()
    assert 'title="https://example.com/pricing?plan=team"' in listing


def test_inviting_an_existing_username_is_refused_and_issues_no_link_for_it():
    """A set-password link for somebody else's user would be their sign-in: never issued."""
    mine, theirs = make_tenant(), make_tenant()
    their_owner = Membership.objects.get(account_id=theirs.account_id, role="owner").user

    refused = signed_in(mine).post(
        page(mine, "members/"), {"username": their_owner.username.upper(), "role": "owner"}
    )

    assert refused.status_code == 200
    assert "is taken: choose another." in refused.content.decode()
    assert 'id="link"' not in refused.content.decode()
    assert not Membership.objects.filter(account_id=mine.account_id, user=their_owner).exists()
