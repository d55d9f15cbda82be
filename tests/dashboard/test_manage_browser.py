"""The key's whole life on the dashboard in a real browser, at a desktop and a phone width,
against a real gateway: created with a model list and a budget, used through the OpenAI SDK,
narrowed (the next request is refused at once), revoked after the confirmation (refused)."""

from __future__ import annotations

import csv
import dataclasses
import io
from pathlib import Path

import openai
import pytest
from django.contrib.auth import get_user_model

from accounts import services as account_services
from accounts.models import ApiKey, Group, Membership
from core.money import format_usd
from tests.dashboard.test_browser import sign_in
from tests.support.browser import ARTIFACTS, open_page, requires_chromium
from tests.support.usage import usage_rows

pytestmark = requires_chromium
HELLO = [{"role": "user", "content": "hello"}]


def test_create_use_narrow_and_revoke_a_key(stack, page):
    tenant = stack.tenant()
    sign_in(page, stack, tenant)

    page.click('nav >> text="Keys"')
    if not page.is_visible("#create-key"):
        page.click("#create-key-box summary")
    page.fill("#create-key input[name=name]", "browser")
    page.fill("#create-key input[name=models]", "gpt-4o-mini, claude-3-5-haiku")
    page.fill("#create-key input[name=budget]", "3.00")
    page.fill("#create-key input[name=rpm_limit]", "100")
    page.click("#create-key button[type=submit]")
    secret = page.inner_text("#secret")
    page.shot("1-created")
    key = ApiKey.objects.get(group_id=tenant.group_id, name="browser")
    assert (key.allowed_models, key.budget_max_micro, key.rpm_limit) == (
        ["gpt-4o-mini", "claude-3-5-haiku"],
        3_000_000,
        100,
    )
    client = stack.openai(dataclasses.replace(tenant, api_key=secret))
    client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)

    page.click(f"tr[data-key='{key.pk}'] >> text=Edit")
    page.fill("input[name=models]", "claude-3-5-haiku")
    page.click("#edit-key button[type=submit]")
    page.shot("2-narrowed")
    with pytest.raises(openai.PermissionDeniedError) as narrowed:
        client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    assert narrowed.value.body["code"] == "LM-1003"

    page.click(f"tr[data-key='{key.pk}'] >> text=Revoke")
    assert "stops working at once" in page.inner_text("#revoke-warning")
    page.shot("3-confirm-revoke")
    page.click("#confirm-revoke button[type=submit]")
    page.shot("4-revoked")
    assert "revoked" in page.inner_text(f"tr[data-key='{key.pk}'] .status")
    with pytest.raises(openai.AuthenticationError) as revoked:
        client.chat.completions.create(model="claude-3-5-haiku", messages=HELLO)
    assert revoked.value.body["code"] == "LM-1001"
    assert page.evaluate("document.documentElement.scrollWidth") <= page.viewport_size["width"]


def test_set_a_group_budget_and_invite_a_member_who_signs_in(stack, page, browser, request):
    tenant = stack.tenant()
    sign_in(page, stack, tenant)

    page.click('nav >> text="Groups"')
    page.click("#create-group-box summary")
    page.fill("#create-group input[name=name]", "research")
    page.fill("#create-group input[name=budget]", "0.000001")
    page.click("#create-group button[type=submit]")
    research = Group.objects.get(account_id=tenant.account_id, name="research")
    assert research.budget_max_micro == 1
    assert page.inner_text(f"tr[data-group='{research.pk}'] .budget") == "$0.000001"

    page.click(f"tr[data-group='{tenant.group_id}'] >> text=Edit")
    page.fill("#edit-group input[name=budget]", "12.50")
    page.select_option("#edit-group select[name=budget_period]", "monthly")
    page.click("#edit-group button[type=submit]")
    page.shot("1-group-budget")
    row = f"tr[data-group='{tenant.group_id}']"
    assert page.inner_text(f"{row} .budget") == "$12.50"
    assert page.inner_text(f"{row} .left") == "$12.50"
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.budget_max_micro, group.budget_period) == (12_500_000, "monthly")

    page.click('nav >> text="Members"')
    if not page.is_visible("#invite"):
        page.click("#invite-box summary")
    page.fill("#invite input[name=username]", f"casey-{tenant.account_id}")
    page.select_option("#invite select[name=role]", "viewer")
    page.click("#invite button[type=submit]")
    page.shot("2-invited")
    link = page.inner_text("#link")
    assert "/set-password/" in link

    # The invited person, in their own browser: sets a password through the link, signs in,
    # and as a viewer sees no way to change the account's keys.
    guest = open_page(browser, ARTIFACTS / "dashboard" / f"{request.node.name}-guest")
    try:
        guest.goto(link)
        guest.fill("input[name=new_password1]", "casey-long-password-3")
        guest.fill("input[name=new_password2]", "casey-long-password-3")
        guest.click("button[type=submit]")
        guest.fill("input[name=username]", f"casey-{tenant.account_id}")
        guest.fill("input[name=password]", "casey-long-password-3")
        guest.click("button[type=submit]")
        guest.wait_for_url(f"{stack.url}/dashboard/{tenant.account_id}/")
        guest.click('nav >> text="Keys"')
        guest.shot("3-viewer-keys")
        assert guest.locator("#create-key").count() == 0
        assert guest.locator("text=Revoke").count() == 0
    finally:
        guest.context.close()
    assert page.evaluate("document.documentElement.scrollWidth") <= page.viewport_size["width"]


def test_a_pool_warns_when_it_refuses_everything_and_is_removed(stack, page):
    tenant = stack.tenant()
    sign_in(page, stack, tenant)
    page.click('nav >> text="Team keys"')
    page.select_option("#add-team-key select[name=provider]", "stub-openai")
    page.fill("#add-team-key input[name=label]", "only")
    page.fill("#add-team-key input[name=key]", "sk-team-only-7777")
    page.click("#add-team-key button[type=submit]")
    assert page.locator("[data-pool-warning]").count() == 0

    page.click("[data-team-key] >> text=Remove")  # the pool's last key: asked first
    page.click("#confirm-team-key-remove button[type=submit]")
    page.shot("1-pool-refuses")
    assert "every stub-openai request of default is refused (LM-3021)" in page.inner_text(
        "[data-pool-warning]"
    )
    with pytest.raises(openai.RateLimitError) as refused:
        stack.openai(tenant).chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    assert refused.value.body["code"] == "LM-3021"

    page.click("button:has-text('Turn fallback on')")
    assert "paid from your wallet" in page.inner_text(".messages")
    assert page.locator("[data-pool-warning]").count() == 0
    page.click("text=Remove this pool")
    page.shot("2-confirm-pool-removal")
    assert "served on the platform's keys again" in page.inner_text("#pool-remove-warning")
    page.click("#confirm-pool-remove button[type=submit]")
    page.shot("3-pool-removed")
    assert page.locator(".pool").count() == 0
    answer = stack.openai(tenant).chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    assert answer.usage.completion_tokens > 0  # the platform serves the group again


def test_an_owner_changes_a_members_role_and_removes_them(stack, page):
    tenant = stack.tenant()
    sign_in(page, stack, tenant)
    user = get_user_model().objects.create_user(f"robin-{tenant.account_id}")
    seat = Membership.objects.create(account_id=tenant.account_id, user=user, role="admin")

    page.click('nav >> text="Members"')
    page.select_option(f"#role-{seat.pk}", "viewer")
    page.click(f"tr[data-member='{seat.pk}'] button:has-text('Change')")
    assert f"robin-{tenant.account_id} is now viewer." in page.inner_text(".messages")
    seat.refresh_from_db()
    assert seat.role == "viewer"

    page.click(f"tr[data-member='{seat.pk}'] >> text=Remove")
    page.shot("1-confirm-removal")
    page.click("#confirm-remove button[type=submit]")
    page.shot("2-removed")
    assert page.locator(f"tr[data-member='{seat.pk}']").count() == 0
    assert not Membership.objects.filter(pk=seat.pk).exists()


def test_the_request_log_filters_by_key_and_downloads_those_rows(stack, page):
    tenant = stack.tenant()
    other, other_secret = account_services.api_key_create(
        group=Group.objects.get(pk=tenant.group_id), name="other"
    )
    stack.openai(tenant).chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    stack.openai(dataclasses.replace(tenant, api_key=other_secret)).chat.completions.create(
        model="gpt-4o-mini", messages=HELLO
    )
    rows = usage_rows(group_id=tenant.group_id, expect=2)
    mine = next(r for r in rows if r.api_key_id == other.pk)
    sign_in(page, stack, tenant)

    page.click('nav >> text="Usage"')
    if not page.is_visible("#filters"):
        page.click("#filters-box summary")
    page.select_option("#filters select[name=key]", str(other.pk))
    page.click("#filters button[type=submit]")
    page.shot("1-filtered")
    listed = page.locator("[data-request]")
    assert listed.evaluate_all("rows => rows.map(r => r.dataset.request)") == [mine.request_id]
    spend = mine.provider_cost_micro + mine.bandwidth_charge_micro
    assert page.inner_text(f"tr[data-request='{mine.request_id}'] .cost") == format_usd(spend)
    with page.expect_download() as download:
        page.click("#csv")
    lines = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert [(r["request_id"], int(r["provider_cost_micro"])) for r in lines] == [
        (mine.request_id, mine.provider_cost_micro)
    ]
