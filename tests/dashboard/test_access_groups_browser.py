"""Model access groups on the dashboard in a real browser, at a desktop and a phone width,
against a real gateway: defined on the Model access page, assigned on the key's and the
group's edit pages, changed and deleted; after each save the official SDK's models.list()
is what the pages say the key may call. The pages keep their policy, fit and pass axe."""

from __future__ import annotations

from accounts.models import AccessGroup
from tests.dashboard.test_browser import sign_in
from tests.dashboard.test_pages_layout import check
from tests.support.browser import DESKTOP, requires_chromium

pytestmark = requires_chromium


def listed(stack, tenant) -> list[str]:
    return [m.id for m in stack.openai(tenant).models.list()]


def create(page, name: str, entries: str) -> None:
    if not page.is_visible("#create-access-group"):
        page.click("#create-access-group-box summary")
    page.fill("#create-access-group input[name=name]", name)
    page.fill("#create-access-group textarea[name=entries]", entries)
    page.click("#create-access-group button[type=submit]")


def assign(page, *names: str) -> None:
    for box in page.query_selector_all("#assign-access-groups input[type=checkbox]"):
        label = box.evaluate("b => b.parentElement.textContent")
        if any(label.strip().startswith(name + " ") for name in names) != box.is_checked():
            box.click()
    page.click("#assign-access-groups button[type=submit]")


def test_define_assign_change_and_delete_access_groups(stack, page):
    tenant = stack.tenant()
    sign_in(page, stack, tenant)
    base = f"{stack.url}/dashboard/{tenant.account_id}"
    size = "desktop" if page.viewport_size == DESKTOP else "phone"

    page.click('nav >> text="Model access"')
    create(page, "cheap", "gpt-4o-mini\nclaude-*")
    create(page, "openai-only", "openai/*")
    page.shot("1-defined")
    cheap = AccessGroup.objects.get(name="cheap")
    assert cheap.entries == ["gpt-4o-mini", "claude-*"]
    assert "gpt-4o-mini, claude-*" in page.inner_text(f"tr[data-access-group='{cheap.pk}']")
    create(page, "bad", "gpt 4o")
    assert "has a character outside letters" in page.inner_text("#create-access-group")

    page.goto(f"{base}/keys/{tenant.api_key_id}/")
    assign(page, "cheap")
    page.shot("2-key-assigned")
    assert listed(stack, tenant) == ["claude-3-5-haiku", "gpt-4o-mini"]
    page.goto(f"{base}/keys/")
    assert page.inner_text(f"tr[data-key='{tenant.api_key_id}'] td.models") == "group cheap"

    page.goto(f"{base}/groups/{tenant.group_id}/")
    assign(page, "openai-only")
    page.shot("3-group-bound")
    assert listed(stack, tenant) == ["gpt-4o-mini"]

    page.goto(f"{base}/access/{cheap.pk}/")
    page.fill("#edit-access-group textarea[name=entries]", "gpt-4o, claude-*")
    page.click("#edit-access-group button[type=submit]")
    assert listed(stack, tenant) == ["gpt-4o"]

    page.click(f"tr[data-access-group='{cheap.pk}'] >> text=Delete")
    assert "taken off every key and group" in page.inner_text("#delete-warning")
    page.click("#confirm-delete button[type=submit]")
    page.shot("4-deleted")
    # No names of its own and no access groups: the key's side is open, the group bounds it.
    assert listed(stack, tenant) == ["gpt-4o", "gpt-4o-mini"]

    for path, shot in [
        ("access/", "5-access"),
        (f"access/{AccessGroup.objects.get(name='openai-only').pk}/", "6-edit"),
        (f"keys/{tenant.api_key_id}/", "7-key"),
        (f"groups/{tenant.group_id}/", "8-group"),
    ]:
        assert check(page, f"{base}/{path}", shot, size) == [], path
