"""The tenant dashboard in a real browser: headless Chromium (Debian's) driven by Playwright,
against a real gateway process serving the pages, the stub behind it.

Screenshots of every step go to $TEST_ARTIFACTS_DIR (default var/test-artifacts/dashboard),
which is not committed, so a failure can be seen.
"""

from __future__ import annotations

import dataclasses
import re

import httpx
import pytest

from accounts.logins import password_link_issue
from accounts.models import Membership
from byok.models import TeamKey
from tests.support.browser import ARTIFACTS as BROWSER_ARTIFACTS
from tests.support.browser import open_page, requires_chromium
from tests.support.stacks import Stack
from tests.support.tenants import make_tenant
from tests.support.usage import usage_rows

ARTIFACTS = BROWSER_ARTIFACTS / "dashboard"
PASSWORD = "browser-tested-password-7"

pytestmark = requires_chromium


@pytest.fixture
def page(browser, request):
    tab = open_page(browser, ARTIFACTS / request.node.name)
    yield tab
    tab.shot("last")
    tab.context.close()


def sign_in(page, stack: Stack, tenant) -> str:
    """Set the owner's password through its one-time link, then sign in; return the owner."""
    owner = Membership.objects.get(account_id=tenant.account_id, role="owner").user
    page.goto(stack.url + password_link_issue(user=owner))
    page.fill("input[name=new_password1]", PASSWORD)
    page.fill("input[name=new_password2]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{stack.url}/login/")
    page.shot("1-password-set")
    page.fill("input[name=username]", owner.username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{stack.url}/dashboard/{tenant.account_id}/")
    page.shot("2-overview")
    return owner.username


def test_login_create_a_key_and_use_it_against_v1(stack, page):
    tenant = stack.tenant(wallet_micro=50_000_000)
    sign_in(page, stack, tenant)
    assert page.inner_text("#wallet-balance .big") == "$50.00"

    page.click('nav >> text="Keys"')
    page.click("#create-key-box summary")  # the form folds away once the account has keys
    page.fill("#create-key input[name=name]", "from the browser")
    page.click("#create-key button[type=submit]")
    secret = page.inner_text("#secret")
    page.shot("3-key-created")
    assert secret.startswith("tg-")

    # The secret is shown once: the next visit of the page does not carry it.
    page.click('nav >> text="Keys"')
    assert secret not in page.content()

    reply = stack.openai(dataclasses.replace(tenant, api_key=secret))
    answer = reply.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}]
    )
    assert answer.choices[0].message.content


def test_add_and_remove_a_team_key(stack, page):
    tenant = stack.tenant()
    sign_in(page, stack, tenant)
    page.click("text=Team keys")
    assert "stub-openai" in page.inner_text("#eligible")

    if not page.is_visible("#add-team-key"):  # folded away once a pool exists
        page.click("#add-team-key-box summary")

    page.select_option("#add-team-key select[name=provider]", "stub-openai")
    page.fill("#add-team-key input[name=label]", "browser key")
    page.fill("#add-team-key input[name=key]", "sk-browser-4242")
    page.click("#add-team-key button[type=submit]")
    # The form posts and the page comes back with the key: counting before it has come back
    # found none (a CI run on a loaded host).
    page.wait_for_selector("[data-team-key]")
    page.shot("3-team-key-added")
    row = page.locator("[data-team-key]")
    assert row.count() == 1
    assert "…4242" in row.inner_text() and "browser key" in row.inner_text()
    assert "sk-browser-4242" not in page.content()
    team_key = TeamKey.objects.get(pool__group_id=tenant.group_id)
    assert team_key.last4 == "4242"

    row.locator("text=Remove").click()  # the pool's last key: asked first
    assert "is refused with LM-3021" in page.inner_text("#next-request")
    page.click("#confirm-team-key-remove button[type=submit]")
    page.wait_for_selector("text=removed")
    page.shot("4-team-key-removed")
    assert page.locator("[data-team-key]").count() == 0
    assert not TeamKey.objects.filter(pk=team_key.pk).exists()


def test_charts_render_the_tenants_traffic(stack, page):
    from core.money import format_usd, format_usd_exact
    from tests.dashboard.test_charts import chart_data, hover, values

    tenant = stack.tenant()
    client = stack.openai(tenant)
    for _ in range(3):
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "count me"}]
        )
    rows = usage_rows(group_id=tenant.group_id, expect=3)
    spend = sum(r.provider_cost_micro + r.bandwidth_charge_micro for r in rows)
    tokens = sum(r.tokens_in + r.tokens_out for r in rows)
    assert spend > 0

    sign_in(page, stack, tenant)
    page.click("text=Charts")
    page.wait_for_function("() => window.TollgateCharts?.drawn['spend-day'] !== undefined")
    page.shot("3-charts")
    charts = chart_data(page.content())
    assert values(charts["spend-day"]) == {"Platform": [0] * 29 + [spend], "Team keys": [0] * 30}
    assert values(charts["tokens-day"])["Platform"][-1] == tokens
    assert (charts["spend-model"]["labels"], values(charts["spend-model"])) == (
        ["gpt-4o-mini"],
        {"Spend": [spend]},
    )
    # The chart is drawn: a canvas of real size, summarised for screen readers.
    canvas = page.locator("canvas[data-chart=spend-day]")
    box = canvas.bounding_box()
    assert box is not None and box["width"] > 600 and box["height"] > 200
    assert canvas.get_attribute("role") == "img"
    assert format_usd(spend) in canvas.get_attribute("aria-label")
    # Hovering today's bar shows the day's spend as people read dollars.
    tip = hover(page, "spend-day", index=29)
    page.shot("4-tooltip")
    shown, exact = format_usd(spend), format_usd_exact(spend)
    every_digit = [f"  exactly {exact}"] if exact != shown else []
    assert tip["lines"] == [f"Platform: {shown}", *every_digit, "Team keys: $0.00"]
    assert tip["footer"] == [f"Total: {shown}"]

    page.click("text=Usage")
    request_ids = [r.request_id for r in rows]
    listed = page.locator("[data-request]")
    assert sorted(listed.evaluate_all("rows => rows.map(r => r.dataset.request)")) == sorted(
        request_ids
    )
    listed.first.locator("a").click()
    page.shot("5-request-detail")
    assert page.inner_text("#paid-by") == "platform"
    assert page.locator("#attempts .served-by").all_inner_texts() == ["platform"]


def test_a_foreign_object_is_404(stack, page):
    mine, theirs = stack.tenant(), make_tenant()
    sign_in(page, stack, mine)
    for path in (
        f"/dashboard/{theirs.account_id}/",
        f"/dashboard/{theirs.account_id}/keys/",
        f"/dashboard/{mine.account_id}/usage/?key={theirs.api_key_id}",
    ):
        response = page.goto(stack.url + path)
        assert response.status == 404, path
    page.shot("3-foreign-404")
    page.goto(f"{stack.url}/dashboard/{mine.account_id}/keys/")
    assert re.findall(r'data-key="(\d+)"', page.content()) == [str(mine.api_key_id)]


def test_api_docs_render_every_operation_from_local_assets(stack, page):
    """Swagger UI at /api/docs/ draws the tenant API's operations with nothing off this host."""
    foreign: list[str] = []
    page.on(
        "request",
        lambda r: None if r.url.startswith((stack.url, "data:")) else foreign.append(r.url),
    )
    page.goto(f"{stack.url}/api/docs/")
    page.wait_for_selector(".opblock")
    page.shot("1-api-docs")
    schema = httpx.get(f"{stack.url}/api/schema?format=json", timeout=10).json()
    operations = sum(
        1 for item in schema["paths"].values() for method in item if method != "parameters"
    )
    assert page.locator(".opblock").count() == operations
    assert foreign == []
