"""The dashboard's usage list and request page mark a crash-charged request, readably.

A request holds its budget and wallet and its call is sent; its gateway dies before the row
(the ledger's own steps, as the request path takes them). The reaper charges it at its hold
and gives it an `unmeasured` usage row. In headless Chromium against a real gateway process
serving the pages, on a desktop and on a phone, the row's status cell and the request page
carry the `unmeasured` badge, the page does not scroll sideways, and axe-core finds no
serious or critical WCAG A/AA violation. Screenshots go to
$TEST_ARTIFACTS_DIR/dashboard/crash-usage-badge.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from billing.ledger.holds import Hold, take_hold
from billing.reaper import expire_stale_holds
from core.sqlexec import run_sync
from tests.dashboard.test_phone_and_a11y import sign_in
from tests.support.a11y import summary, violations
from tests.support.browser import ARTIFACTS as BROWSER_ARTIFACTS
from tests.support.browser import (
    DESKTOP,
    PHONE,
    browser,  # noqa: F401  (a fixture)
    open_page,
    requires_chromium,
)
from tests.support.usage import usage_rows

pytestmark = requires_chromium
ARTIFACTS = BROWSER_ARTIFACTS / "dashboard" / "crash-usage-badge"
HOLD = 1_000


def crash_charged(tenant) -> str:
    """A request whose gateway died after sending its call, charged by the reaper."""
    request_id = f"req-{uuid.uuid4().hex}"
    now = timezone.now()
    hold = Hold(request_id, tenant.group_id, tenant.api_key_id, False, HOLD)
    run_sync(take_hold(hold, now=now, ttl_s=4, call_sent=True))
    assert expire_stale_holds(now=now + timedelta(seconds=8)) == (0, 1)
    return request_id


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_usage_pages_badge_an_unmeasured_request(stack, browser, viewport):  # noqa: F811
    tenant = stack.tenant(invoiced=True, budget_micro=1_000_000)
    stack.openai(tenant).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "a measured one"}]
    )
    crashed = crash_charged(tenant)
    rows = usage_rows(group_id=tenant.group_id, expect=2)
    assert sorted((r.measurement, r.provider_cost_micro) for r in rows)[1] == (
        "unmeasured",
        HOLD,
    )
    size = "desktop" if viewport is DESKTOP else "phone"
    tab = open_page(browser, ARTIFACTS, viewport=viewport)
    try:
        sign_in(tab, stack, tenant)
        base = f"{stack.url}/dashboard/{tenant.account_id}"
        for name, path, badge in (
            ("usage", "usage/", f'tr[data-request="{crashed}"] .badge.measurement'),
            ("usage-detail", f"usage/{crashed}/", "#status .badge.measurement"),
        ):
            assert tab.goto(f"{base}/{path}").status == 200
            tab.shot(f"{name}-{size}")
            assert tab.locator(badge).inner_text() == "unmeasured"
            assert tab.locator(".badge.measurement").count() == 1  # the measured row has none
            assert tab.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
            found = violations(tab)
            assert not found, f"{name} at {size}:\n{summary(found)}"
    finally:
        tab.context.close()
