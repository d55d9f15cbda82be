"""The dashboard's and the admin's pages at 1280 and 375 px, in Debian's Chromium, with rows
long enough to crowd a table: each page sends its Content-Security-Policy and breaks none of
it, axe finds no serious or critical violation, the page never scrolls sideways (a table may,
inside its marked box), the key and action columns are in view at 1280, every table at 375 is
cards or says it scrolls, a one-time key has a working Copy button, and times show their ISO
value on hover. Screenshots: $TEST_ARTIFACTS_DIR/dashboard/pages-layout."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from accounts.models import ApiKey, Membership
from tests.support.a11y import summary, violations
from tests.support.browser import ARTIFACTS as BROWSER_ARTIFACTS
from tests.support.browser import DESKTOP, PHONE, open_page, requires_chromium
from tests.support.stacks import Stack
from tests.support.usage import usage_rows

ARTIFACTS = BROWSER_ARTIFACTS / "dashboard" / "pages-layout"
PASSWORD = "layout-tested-password-7"
SIZES = {"desktop": DESKTOP, "phone": PHONE}
MODELS = ["gpt-4o-mini", "gpt-4o", "claude-3-5-haiku", "router-mini"]

pytestmark = requires_chromium

DASHBOARD = [
    "",
    "usage/",
    "keys/",
    "groups/",
    "guardrails/",
    "members/",
    "receipts/",
    "audit/",
    "wallet/",
]
ADMIN = [
    "/django-admin/",
    "/django-admin/usage/usagelog/",
    "/django-admin/billing/wallet/",
    "/django-admin/accounts/account/",
    "/django-admin/audit/auditentry/",
]
DOCS = ["/api/redoc/", "/api/docs/"]

# Collected from the first script on: a violation the page's own scripts or markup cause.
CSP_LISTENER = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) =>
  window.__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`));
"""
# The outermost elements past the window's right edge, outside any scrolling box.
STICKING_OUT = """(width) => {
  const out = (e) => e.getBoundingClientRect().right > width + 0.5;
  const inScroller = (e) => e.closest(".table-wrap, .results, pre");
  return [...document.body.querySelectorAll("*")]
    .filter((e) => out(e) && !inScroller(e) && !(e.parentElement && out(e.parentElement)))
    .map((e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + "." + e.className);
}"""
# Every table box: whether it scrolls, shows that it does, or lays its rows out as cards.
TABLE_BOXES = """() => [...document.querySelectorAll(".table-wrap, .results")].map((w) => ({
  id: (w.querySelector("table") || {}).id,
  scrolls: w.scrollWidth > w.clientWidth + 1,
  cue: getComputedStyle(w, "::before").content,
  cards: !!w.querySelector("table.cards.labelled"),
}))"""


@pytest.fixture
def crowded(tenant):
    """The phone test's tenant (traffic, a team key, a budget alert), its key's every column
    long."""
    ApiKey.objects.filter(pk=tenant.api_key_id).update(
        name="the nightly evaluation pipeline's key",
        allowed_models=MODELS,
        budget_max_micro=12_345_678,
        budget_period="monthly",
        period_ends_at=timezone.now() + timedelta(days=20),
        rpm_limit=12_000,
        tpm_limit=1_500_000,
        expires_at=timezone.now() + timedelta(days=300),
    )
    return tenant


def signed_in(browser, stack: Stack, tenant, size: str):
    owner = Membership.objects.get(account_id=tenant.account_id, role="owner").user
    owner.set_password(PASSWORD)
    owner.save()
    tab = open_page(browser, ARTIFACTS, viewport=SIZES[size])
    tab.add_init_script(CSP_LISTENER)
    tab.goto(f"{stack.url}/login/")
    tab.fill("input[name=username]", owner.username)
    tab.fill("input[name=password]", PASSWORD)
    tab.click("main button[type=submit]")
    tab.wait_for_url(f"{stack.url}/dashboard/{tenant.account_id}/")
    return tab


def operator_tab(browser, stack: Stack, size: str):
    get_user_model().objects.create_superuser("ops", "ops@example.invalid", PASSWORD)
    tab = open_page(browser, ARTIFACTS, viewport=SIZES[size])
    tab.add_init_script(CSP_LISTENER)
    tab.goto(f"{stack.url}/django-admin/login/")
    tab.fill("input[name=username]", "ops")
    tab.fill("input[name=password]", PASSWORD)
    tab.click("input[type=submit]")
    tab.wait_for_url(f"{stack.url}/django-admin/")
    return tab


def check(tab, url: str, shot: str, size: str) -> list[str]:
    """Open `url`; return what is wrong with it (nothing: an empty list)."""
    response = tab.goto(url)
    tab.wait_for_load_state("load")
    tab.shot(shot)
    problems = []
    policy = response.headers.get("content-security-policy", "")
    if "default-src 'self'" not in policy or "frame-ancestors 'none'" not in policy:
        problems.append(f"{response.status}, policy {policy!r}")
    blocked = tab.evaluate("window.__csp")
    if blocked:
        problems.append(f"CSP violations: {blocked}")
    wide = tab.evaluate(STICKING_OUT, SIZES[size]["width"])
    if wide:
        problems.append(f"past the right edge: {wide}")
    for box in tab.evaluate(TABLE_BOXES):
        if size == "phone" and box["scrolls"] and box["cue"] in ("none", "normal"):
            problems.append(f"table {box['id']} scrolls without a cue")
        if size == "phone" and box["cards"] and box["scrolls"]:
            problems.append(f"cards of {box['id']} are wider than the screen")
    found = violations(tab)
    if found:
        problems.append("axe:\n" + summary(found))
    return problems


@pytest.mark.parametrize("size", SIZES)
def test_every_page_keeps_its_policy_fits_and_passes_axe(stack, crowded, browser, size):
    tenant = crowded
    tab = signed_in(browser, stack, tenant, size)
    problems = {}
    try:
        for path in DASHBOARD:
            url = f"{stack.url}/dashboard/{tenant.account_id}/{path}"
            name = "dashboard-" + (path.strip("/") or "overview")
            problems[path] = check(tab, url, f"{name}-{size}", size)
    finally:
        tab.context.close()
    tab = operator_tab(browser, stack, size)
    try:
        for path in ADMIN:
            name = "admin-" + (path.strip("/").split("/", 1)[-1].replace("/", "-") or "index")
            problems[path] = check(tab, stack.url + path, f"{name}-{size}", size)
        for path in DOCS:  # their own policy, but no violation of it either
            tab.goto(stack.url + path)
            tab.wait_for_load_state("networkidle")
            tab.shot(f"docs-{path.strip('/').replace('/', '-')}-{size}")
            # Redoc's footer asks its CDN for a logo: the policy refusing it is the rule at
            # work (nothing from a CDN); anything else refused is a fault.
            blocked = [v for v in tab.evaluate("window.__csp") if " https://cdn.redoc.ly/" not in v]
            problems[path] = [f"CSP violations: {blocked}"] if blocked else []
        assert tab.locator("#redoc-container, redoc, .swagger-ui").count() >= 1
    finally:
        tab.context.close()
    assert not {p: found for p, found in problems.items() if found}


def in_view(tab, selector: str) -> list[str]:
    """The elements of `selector` that are not wholly inside the window."""
    return tab.locator(selector).evaluate_all(
        """(els) => els.filter((e) => {
             const r = e.getBoundingClientRect();
             let right = window.innerWidth;  // the window, or a box scrolling sideways
             for (let p = e.parentElement; p; p = p.parentElement) {
               if (["auto", "scroll", "hidden"].includes(getComputedStyle(p).overflowX)) {
                 right = Math.min(right, p.getBoundingClientRect().right);
               }
             }
             return r.width === 0 || r.left < 0 || r.right > right + 0.5;
           }).map((e) => e.outerHTML.slice(0, 80))"""
    )


def test_key_and_action_columns_are_in_view_at_1280(stack, crowded, browser):
    tenant = crowded
    tab = signed_in(browser, stack, tenant, "desktop")
    base = f"{stack.url}/dashboard/{tenant.account_id}"
    try:
        tab.goto(f"{base}/keys/")
        row = f"tr[data-key='{tenant.api_key_id}']"
        assert tab.inner_text(f"{row} .models") == ", ".join(MODELS)
        assert in_view(tab, f"{row} .status, {row} .actions a, #keys th") == []
        tab.goto(f"{base}/usage/")
        rows = usage_rows(group_id=tenant.group_id)
        assert tab.locator("#usage tbody tr a").count() == len(rows) >= 2
        assert in_view(tab, "#usage tbody tr a, #usage .cost, #usage .status, #usage th") == []
        tab.goto(f"{base}/members/")
        assert in_view(tab, "#members .role select, #members th") == []
    finally:
        tab.context.close()
    tab = operator_tab(browser, stack, "desktop")
    try:
        tab.goto(f"{stack.url}/django-admin/usage/usagelog/")
        heads = ["model_requested", "status", "provider_cost_micro_usd", "request_id"]
        assert in_view(tab, ", ".join(f"#result_list th.column-{h}" for h in heads)) == []
        assert tab.locator("#result_list th.column-status").count() == 1
    finally:
        tab.context.close()


def test_a_new_key_is_copied_with_its_button(stack, crowded, browser):
    tenant = crowded
    tab = signed_in(browser, stack, tenant, "phone")
    tab.context.grant_permissions(["clipboard-read", "clipboard-write"])
    try:
        tab.goto(f"{stack.url}/dashboard/{tenant.account_id}/keys/")
        tab.click("#create-key-box summary")
        tab.fill("#create-key input[name=name]", "copied")
        tab.click("#create-key button[type=submit]")
        secret = tab.inner_text("#secret")
        assert secret.startswith("tg-")
        tab.click("#new-key button.copy")
        tab.wait_for_selector("#new-key .copy-status:text('Copied')")
        tab.shot("key-copied-phone")
        assert tab.evaluate("navigator.clipboard.readText()") == secret
        assert tab.evaluate("window.__csp") == []
    finally:
        tab.context.close()


def test_times_read_as_local_times_with_the_iso_value_on_hover(stack, crowded, browser):
    tenant = crowded
    tab = signed_in(browser, stack, tenant, "desktop")
    try:
        tab.goto(f"{stack.url}/dashboard/{tenant.account_id}/usage/")
        first = tab.locator("#usage tbody time").first
        shown, iso = first.inner_text(), first.get_attribute("title")
        assert first.get_attribute("datetime") == iso
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", shown), shown
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?[+-]\d\d:\d\d", iso), iso
        assert iso.replace("T", " ").startswith(shown)
        tab.goto(f"{stack.url}/dashboard/{tenant.account_id}/keys/")
        expires = tab.locator(f"tr[data-key='{tenant.api_key_id}'] time")
        assert expires.count() == 1 and expires.get_attribute("title").startswith(
            expires.inner_text().replace(" ", "T")
        )
    finally:
        tab.context.close()


def test_an_operators_password_link_is_copied_with_its_button(stack, crowded, browser):
    tenant = crowded
    membership = Membership.objects.get(account_id=tenant.account_id, role="owner")
    tab = operator_tab(browser, stack, "desktop")
    tab.context.grant_permissions(["clipboard-read", "clipboard-write"])
    try:
        tab.goto(f"{stack.url}/django-admin/accounts/membership/")
        tab.check(f"input[name=_selected_action][value='{membership.pk}']")
        tab.select_option("select[name=action]", "issue_password_link")
        tab.click("button[name=index]")
        link = tab.inner_text(".messagelist code[data-copy]")
        assert re.fullmatch(rf"{re.escape(stack.url)}/set-password/\S+/", link), link
        tab.click(".messagelist button.copy")
        tab.wait_for_selector(".messagelist .copy-status:text('Copied')")
        tab.shot("admin-password-link-copied-desktop")
        assert tab.evaluate("navigator.clipboard.readText()") == link
        assert tab.evaluate("window.__csp") == []
    finally:
        tab.context.close()
