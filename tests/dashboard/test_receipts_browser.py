"""The dashboard's receipts in a real browser: a month's receipts under its statement, each
request's receipt with its verification material, and the downloads, which verify.

Headless Chromium (Debian's) through Playwright against a real gateway process serving the
pages, after real requests through it (the official SDKs, the stub vendor behind). At a
desktop's and a phone's width; screenshots under $TEST_ARTIFACTS_DIR/dashboard/receipts.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from billing.models import Receipt
from billing.receipt_keys import receipt_keys
from billing.receipts import verify_chain, verify_statement
from billing.statements import month_of
from core.money import format_usd
from tests.billing.test_receipts_api import send_three
from tests.dashboard.test_phone_and_a11y import STICKING_OUT, sign_in
from tests.support.a11y import summary, violations
from tests.support.browser import ARTIFACTS as BROWSER_ARTIFACTS
from tests.support.browser import DESKTOP, PHONE, open_page, requires_chromium
from tests.support.usage import set_bandwidth_rate, settled

ARTIFACTS = BROWSER_ARTIFACTS / "dashboard" / "receipts"

pytestmark = [requires_chromium, pytest.mark.timeout(180)]


@pytest.fixture
def tenant(stack):
    """A prepaid tenant with three requests settled (bandwidth charged: 1 micro-USD a byte)."""
    tenant = stack.tenant(wallet_micro=50_000_000)
    set_bandwidth_rate(tenant)
    send_three(stack, tenant)
    settled(tenant, 3)
    return tenant


def test_a_months_receipts_their_statement_and_the_downloads_verify(stack, tenant, browser):
    receipts = list(Receipt.objects.filter(account_id=tenant.account_id).order_by("-seq"))
    period = month_of(receipts[0].settled_at, time_zone="UTC")
    total = sum(r.cost_micro + r.bandwidth_micro for r in receipts)
    keys = receipt_keys().public()
    tab = open_page(browser, ARTIFACTS, viewport=DESKTOP)
    try:
        sign_in(tab, stack, tenant)
        tab.click('nav >> text="Receipts"')
        tab.wait_for_selector("#receipts")
        tab.shot("receipts-desktop")

        # Newest first, each with its request, kind, model, payer and amount in dollars.
        rows = tab.locator("#receipts tbody tr")
        assert [rows.nth(i).get_attribute("data-seq") for i in range(rows.count())] == [
            "3",
            "2",
            "1",
        ]
        for i, receipt in enumerate(receipts):
            row = rows.nth(i)
            assert row.get_attribute("data-request") == receipt.request_id
            assert row.locator(".kind").inner_text() == "charge"
            assert row.locator(".paid-by").inner_text() == "platform"
            assert row.locator(".amount").inner_text() == format_usd(
                receipt.cost_micro + receipt.bandwidth_micro
            )
        assert tab.inner_text("#period") == period
        assert tab.inner_text("#statement-receipts") == "3"
        assert tab.inner_text("#statement-total") == format_usd(total)
        assert tab.inner_text("#statement-head").startswith(
            f"signed head: receipt 3 ({receipt_keys().newest})"
        )

        # The month's statement and its receipts, downloaded, verify offline.
        with tab.expect_download() as got:
            tab.click("#statement-download")
        statement = json.loads(Path(got.value.path()).read_text())
        assert (statement["period"], statement["receipts"]) == (period, 3)
        assert statement["totals"]["total_micro"] == total
        assert verify_statement(statement, keys) == []
        with tab.expect_download() as got:
            tab.click("#receipts-download")
        lines = [json.loads(line) for line in Path(got.value.path()).read_text().splitlines()]
        assert [line["seq"] for line in lines] == [1, 2, 3]
        assert verify_chain(lines, keys, head=(3, receipts[0].hash)) == []

        # One request's receipt: what it says and how to check it.
        first = receipts[-1]
        tab.click('#receipts tr[data-seq="1"] a')
        tab.wait_for_selector("#receipt-1")
        tab.shot("receipt-detail-desktop")
        assert first.request_id in tab.inner_text("h1")
        assert tab.inner_text("#receipt-1 .hash") == first.hash
        assert tab.inner_text("#receipt-1 .prev") == first.prev_hash
        body = json.loads(first.body)
        assert tab.inner_text("#receipt-1 .total") == format_usd(body["amounts"]["total_micro"])
        assert tab.locator("#receipt-1 table.attempts tbody tr").count() == 1
        assert tab.inner_text("#receipt-1 .attempts .served-by") == "platform"
        assert "input, per million tokens" in tab.inner_text("#receipt-1 table.prices")
        with tab.expect_download() as got:
            tab.click("#download")
        downloaded = json.loads(Path(got.value.path()).read_text())
        api = httpx.get(
            f"{stack.url}/api/receipts/{first.request_id}",
            headers={"Authorization": f"Token {tenant.api_token}"},
            timeout=30,
        ).json()
        assert downloaded == api
        [receipt] = downloaded["results"]
        assert verify_chain([receipt, *receipt["proof"]], keys) == []

        # Another month through the picker: nothing settled then.
        tab.click('nav >> text="Receipts"')
        tab.fill("#month input[name=period]", "2020-01")
        tab.click("#month button[type=submit]")
        tab.wait_for_url("**/receipts/?period=2020-01")
        assert tab.inner_text("#statement-receipts") == "0"
        assert tab.inner_text("#receipts tbody") == "No receipt this month."
        tab.shot("receipts-empty-month")
    finally:
        tab.context.close()


def test_another_accounts_receipts_are_404s(stack, tenant, browser):
    other = stack.tenant()
    theirs = Receipt.objects.filter(account_id=tenant.account_id).first()
    tab = open_page(browser, ARTIFACTS, viewport=DESKTOP)
    try:
        sign_in(tab, stack, other)
        base = f"{stack.url}/dashboard"
        assert tab.goto(f"{base}/{other.account_id}/receipts/{theirs.request_id}/").status == 404
        assert tab.goto(f"{base}/{tenant.account_id}/receipts/").status == 404
        assert (
            tab.goto(f"{base}/{tenant.account_id}/receipts/{theirs.request_id}/json").status == 404
        )
        assert tab.goto(f"{base}/{other.account_id}/receipts/?period=2026-13").status == 200
        assert "must be a month" in tab.inner_text("[role=alert]")
    finally:
        tab.context.close()


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_receipt_pages_fit_the_screen_and_have_no_serious_violation(stack, tenant, browser, size):
    viewport = {"desktop": DESKTOP, "phone": PHONE}[size]
    request_id = Receipt.objects.filter(account_id=tenant.account_id).first().request_id
    tab = open_page(browser, ARTIFACTS, viewport=viewport)
    try:
        sign_in(tab, stack, tenant)
        problems = []
        for name, path in [
            ("receipts", "receipts/"),
            ("receipt-detail", f"receipts/{request_id}/"),
        ]:
            response = tab.goto(f"{stack.url}/dashboard/{tenant.account_id}/{path}")
            assert response.status == 200
            if name == "receipt-detail":  # its body unfolded, the longest line there is
                tab.locator("details.body summary").first.click()
            tab.shot(f"{name}-{size}")
            current = tab.locator("header nav a[aria-current]").all_inner_texts()
            if current != ["Receipts"]:
                problems.append(f"{name}: nav marks {current}")
            width = tab.evaluate("document.documentElement.scrollWidth")
            if width > viewport["width"]:
                wide = ", ".join(tab.evaluate(STICKING_OUT, viewport["width"]))
                problems.append(f"{name}: {width}px wide at {size}; too wide: {wide}")
            found = violations(tab)
            if found:
                problems.append(f"{name} axe:\n" + summary(found))
        assert not problems, "\n".join(problems)
    finally:
        tab.context.close()
