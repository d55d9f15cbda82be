"""Tag budgets on the dashboard in a real browser, at a desktop and a phone width, against a
real gateway: a budget is given to a tag on the Tag budgets page, the official SDK's request
carrying the tag is refused LM-4001 naming it while the budget is $0.00 and served once the
edit page raises it, the page then shows what the tag spent; the budget is removed after a
confirmation. Every change is on the audit trail; the pages fit and pass axe."""

from __future__ import annotations

import openai
import pytest

from audit.models import AuditEntry
from billing.models import TagBudget
from tests.dashboard.test_browser import sign_in
from tests.dashboard.test_pages_layout import check
from tests.support.browser import DESKTOP, requires_chromium
from tests.support.usage import settled

pytestmark = requires_chromium
HELLO = [{"role": "user", "content": "hello there"}]  # the stub bills 2 tokens in, 8 out


def ask(stack, tenant):
    return stack.openai(tenant).chat.completions.create(
        model="gpt-4o-mini",
        messages=HELLO,
        max_tokens=100,
        extra_headers={"X-Tollgate-Tags": "customer-42"},
    )


def create(page, tag: str, budget: str, period: str) -> None:
    if not page.is_visible("#create-tag-budget"):
        page.click("#create-tag-budget-box summary")
    page.fill("#create-tag-budget input[name=tag]", tag)
    page.fill("#create-tag-budget input[name=budget]", budget)
    page.select_option("#create-tag-budget select[name=budget_period]", period)
    page.click("#create-tag-budget button[type=submit]")


def test_give_a_tag_a_budget_see_it_refuse_and_serve_then_remove_it(stack, page):
    tenant = stack.tenant()
    sign_in(page, stack, tenant)
    base = f"{stack.url}/dashboard/{tenant.account_id}"
    size = "desktop" if page.viewport_size == DESKTOP else "phone"

    page.click('nav >> text="Tag budgets"')
    create(page, "Customer-42", "0.00", "daily")
    page.shot("2-created")
    row = TagBudget.objects.get(account_id=tenant.account_id)
    assert (row.tag, row.budget_max_micro, row.budget_period) == ("customer-42", 0, "daily")
    create(page, "no spaces", "1.00", "monthly")
    assert "Tag 'no spaces' is not valid" in page.inner_text("#create-tag-budget")
    create(page, "customer-42", "1.00", "monthly")
    assert "has a budget already" in page.inner_text("#create-tag-budget")

    with pytest.raises(openai.APIStatusError) as refused:
        ask(stack, tenant)
    assert refused.value.body["code"] == "LM-4001"
    assert "tag 'customer-42' has used its budget" in refused.value.body["message"]

    page.goto(f"{base}/tag-budgets/{row.pk}/")
    page.fill("#edit-tag-budget input[name=budget]", "1.00")
    page.click("#edit-tag-budget button[type=submit]")
    assert ask(stack, tenant).usage.completion_tokens == 8
    settled(tenant, 2)
    page.goto(f"{base}/tag-budgets/")
    page.shot("3-spent")
    cells = page.locator(f"tr[data-tag-budget='{row.pk}']")
    assert cells.locator("td.budget").inner_text() == "$1.00"
    assert cells.locator("td.spent").inner_text() == "$0.000006"  # 6 micro-USD
    assert cells.locator("td.held").inner_text() == "$0.00"

    assert check(page, f"{base}/tag-budgets/", "4-list", size) == []
    assert check(page, f"{base}/tag-budgets/{row.pk}/", "5-edit", size) == []
    assert check(page, f"{base}/tag-budgets/{row.pk}/remove/", "6-remove", size) == []
    assert "no longer bounded" in page.inner_text("#delete-warning")
    page.click("#confirm-delete button[type=submit]")
    page.shot("7-removed")
    assert not TagBudget.objects.filter(account_id=tenant.account_id).exists()
    assert "No tag budgets yet." in page.inner_text("#tag-budgets")
    assert list(
        AuditEntry.objects.filter(account_id=tenant.account_id, target_type="tag_budget")
        .order_by("seq")
        .values_list("action", flat=True)
    ) == ["tag_budget.create", "tag_budget.update", "tag_budget.delete"]
