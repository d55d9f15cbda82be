"""The dashboard's audit trail page in headless Chromium, served by a real gateway process:
the changes a token made over HTTP listed newest first with who, from where and the change
in dollars, the fallback's consent in words, the action filter, the CSV and JSON lines
downloads equal to the API's exports; on a desktop and a phone, nothing wider than the
screen, and no serious or critical WCAG A/AA violation (axe-core).

Screenshots: /tmp/audit-shots/ (TEST_AUDIT_SHOTS to move them)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from accounts.models import Membership
from audit.models import AuditEntry
from tests.audit.helpers import trail
from tests.support.a11y import summary, violations
from tests.support.browser import DESKTOP, PHONE, open_page, requires_chromium
from tests.support.stacks import Stack

pytestmark = requires_chromium

SHOTS = Path(os.environ.get("TEST_AUDIT_SHOTS", "/tmp/audit-shots"))
PASSWORD = "audit-browser-password-7"
VIEWPORTS = {"desktop": DESKTOP, "phone": PHONE}
TEAM_SECRET = "sk-team-browser-secret-9090"

STICKING_OUT = """(width) => [...document.body.querySelectorAll("*")]
  .filter((e) => e.getBoundingClientRect().right > width + 0.5
    && !(e.parentElement && e.parentElement.getBoundingClientRect().right > width + 0.5))
  .map((e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : ""))"""


@pytest.fixture
def changed(stack: Stack):
    """A tenant whose token made four changes over HTTP: a key, a budget, a team key and
    platform fallback on."""
    tenant = stack.tenant(wallet_micro=20_000_000, budget_micro=5_000_000)
    http = httpx.Client(
        base_url=stack.url, headers={"Authorization": f"Token {tenant.api_token}"}, timeout=10
    )
    byok = f"/admin/groups/{tenant.group_id}/byok/stub-openai"
    answers = [
        http.post("/api/keys", json={"group": tenant.group_id, "name": "batch"}),
        http.patch(f"/api/groups/{tenant.group_id}", json={"budget_max_micro": 7_500_000}),
        http.post(f"{byok}/keys", json={"label": "ci", "key": TEAM_SECRET}),
        http.put(byok, json={"fallback": True}),
    ]
    assert [a.status_code for a in answers] == [201, 200, 201, 200], [a.text for a in answers]
    http.close()
    return tenant


def sign_in(tab, stack: Stack, tenant) -> None:
    owner = Membership.objects.get(account_id=tenant.account_id, role="owner").user
    owner.set_password(PASSWORD)
    owner.save()
    tab.goto(f"{stack.url}/login/")
    tab.fill("input[name=username]", owner.username)
    tab.fill("input[name=password]", PASSWORD)
    tab.click("main button[type=submit]")
    tab.wait_for_url(f"{stack.url}/dashboard/{tenant.account_id}/")


@pytest.mark.parametrize("size", VIEWPORTS)
def test_the_trail_page_lists_changes_fits_the_screen_and_passes_axe(stack, changed, browser, size):
    viewport = VIEWPORTS[size]
    tab = open_page(browser, SHOTS, viewport=viewport)
    try:
        sign_in(tab, stack, changed)
        tab.click("header nav a:text-is('Audit')")
        tab.wait_for_url(f"{stack.url}/dashboard/{changed.account_id}/audit/")
        tab.shot(f"audit-{size}")

        entries = list(reversed(trail(changed.account_id)))
        rows = tab.locator("#audit > li")
        assert rows.count() == len(entries) == 10  # 6 from provisioning, 4 over HTTP
        assert [int(r) for r in rows.evaluate_all("rs => rs.map(r => r.dataset.entry)")] == [
            e.pk for e in entries
        ]
        fallback = tab.locator(f"li[data-entry='{entries[0].pk}']")
        assert fallback.locator(".action").inner_text() == "pool.fallback.enable"
        assert fallback.locator(".address").inner_text() == "127.0.0.1"
        assert fallback.locator(".change").inner_text() == "fallback: off → on"
        assert fallback.locator(".consent").inner_text() == (
            "Consent: Platform fallback on for stub-openai in group default: the account"
            " agrees to pay platform prices for requests its team keys cannot serve (from its"
            " wallet when prepaid, on its invoice otherwise)."
        )
        budget = tab.locator(f"li[data-entry='{entries[2].pk}'] .change").inner_text()
        assert budget == "budget max: $5.00 → $7.50"
        owner = Membership.objects.get(account_id=changed.account_id, role="owner").user
        actor = tab.locator(f"li[data-entry='{entries[2].pk}'] .actor").inner_text()
        assert (
            actor.startswith(f"{owner.username} via token tgt_") and "(tenant API token)" in actor
        )
        assert TEAM_SECRET not in tab.content()

        problems = []
        if tab.title() != f"Audit trail · {tab.locator('.account').inner_text()} · Tollgate":
            problems.append(f"title {tab.title()!r}")
        current = tab.locator("header nav a[aria-current]").all_inner_texts()
        if current != ["Audit"]:
            problems.append(f"nav marks {current}")
        width = tab.evaluate("document.documentElement.scrollWidth")
        if width > viewport["width"]:
            problems.append(f"{width}px wide: {tab.evaluate(STICKING_OUT, viewport['width'])}")
        found = violations(tab)
        if found:
            problems.append("axe:\n" + summary(found))
        assert not problems, f"audit at {size}:\n" + "\n".join(problems)

        # The action filter: only the team keys' entries.
        tab.select_option("select[name=action]", "teamkey.add")
        tab.click("#audit-filter button[type=submit]")
        tab.wait_for_url("**/audit/?action=teamkey.add")
        assert tab.locator("#audit > li .action").all_inner_texts() == ["teamkey.add"]
        tab.shot(f"audit-filtered-{size}")
    finally:
        tab.context.close()


def test_the_pages_downloads_equal_the_api_exports(stack, changed, browser):
    tab = open_page(browser, SHOTS, viewport=DESKTOP)
    headers = {"Authorization": f"Token {changed.api_token}"}
    try:
        sign_in(tab, stack, changed)
        tab.goto(f"{stack.url}/dashboard/{changed.account_id}/audit/")
        for link, route in (("#audit-csv", "export.csv"), ("#audit-jsonl", "export.jsonl")):
            with tab.expect_download() as download:
                tab.click(link)
            got = Path(download.value.path()).read_bytes().decode()  # CSV lines end \r\n
            assert got == httpx.get(f"{stack.url}/api/audit/{route}", headers=headers).text
        lines = [json.loads(line) for line in got.splitlines()]
        assert lines == [
            e.as_record()
            for e in AuditEntry.objects.filter(account_id=changed.account_id).order_by("-id")
        ]
    finally:
        tab.context.close()
