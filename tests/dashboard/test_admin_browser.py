"""The operator's admin in a real browser (Debian's Chromium), at a desktop and a phone width:
sign in, read an account's page in dollars, top up its wallet through the confirmation, and
suspend it. Screenshots under $TEST_ARTIFACTS_DIR/admin."""

from __future__ import annotations

import openai
import pytest
from django.contrib.auth import get_user_model

from accounts.models import ApiKey
from billing.models import LedgerEntry, Wallet
from tests.support.a11y import summary, violations
from tests.support.browser import ARTIFACTS, DESKTOP, PHONE, open_page, requires_chromium

pytestmark = requires_chromium
PASSWORD = "an-operator-password-for-the-browser"


@pytest.fixture(params=[DESKTOP, PHONE], ids=["desktop", "phone"])
def admin_page(browser, stack, request):
    get_user_model().objects.create_superuser("ops", "ops@example.invalid", PASSWORD)
    tab = open_page(browser, ARTIFACTS / "admin" / request.node.name, viewport=request.param)
    tab.goto(f"{stack.url}/django-admin/login/")
    tab.fill("input[name=username]", "ops")
    tab.fill("input[name=password]", PASSWORD)
    tab.click("input[type=submit]")
    tab.wait_for_url(f"{stack.url}/django-admin/")
    yield tab
    tab.shot("last")
    tab.context.close()


def test_top_up_a_wallet_in_dollars_through_the_confirmation(stack, admin_page):
    page = admin_page
    tenant = stack.tenant(wallet_micro=1_234_567)
    wallet = Wallet.objects.get(account_id=tenant.account_id)

    page.goto(f"{stack.url}/django-admin/accounts/account/{tenant.account_id}/change/")
    page.shot("1-account")
    assert "balance $1.23, held by requests in flight $0.00, available $1.23" in page.inner_text(
        ".field-wallet_now"
    )
    assert page.get_attribute(".field-wallet_now span[title]", "title") == "$1.234567"

    page.goto(f"{stack.url}/django-admin/billing/wallet/")
    page.check(f"input[name=_selected_action][value='{wallet.pk}']")
    page.select_option("select[name=action]", "credit")
    page.click("button[name=index]")
    page.fill("input[name=amount]", "5.00")
    page.fill("input[name=reason]", "invoice 7 paid")
    page.shot("2-form")
    page.click("input[name=preview]")
    page.shot("3-confirm")
    # Every digit, as the message after it says the balance (not "$1.23" -> "$6.23").
    assert page.inner_text(f"tr[data-wallet='{wallet.pk}']").split("\t")[1:] == [
        "$1.234567",
        "$6.234567",
    ]
    page.click("input[name=apply]")
    page.shot("4-done")

    assert "balance now $6.234567" in page.inner_text(".messagelist")
    entry = LedgerEntry.objects.filter(wallet=wallet).order_by("-id").first()
    assert (entry.amount_micro, entry.actor, entry.reason) == (5_000_000, "ops", "invoice 7 paid")
    no_page_scroll(page)


def test_suspend_an_account_and_its_key_is_refused(stack, admin_page):
    page = admin_page
    tenant = stack.tenant()

    page.goto(f"{stack.url}/django-admin/accounts/account/?q={tenant_name(tenant)}")
    page.check("input[name=_selected_action]")
    page.select_option("select[name=action]", "suspend")
    page.click("button[name=index]")
    page.fill("input[name=reason]", "card declined")
    page.shot("1-confirm")
    page.click("input[name=apply]")
    page.shot("2-suspended")
    assert "its keys are refused (LM-1004)" in page.inner_text(".messagelist")

    with pytest.raises(openai.PermissionDeniedError) as refused:
        stack.openai(tenant).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
        )
    assert refused.value.body["code"] == "LM-1004"

    page.goto(f"{stack.url}/django-admin/accounts/account/?state=suspended&q={tenant_name(tenant)}")
    page.check("input[name=_selected_action]")
    page.select_option("select[name=action]", "resume")
    page.click("button[name=index]")
    page.shot("3-resumed")
    assert "its keys are served again" in page.inner_text(".messagelist")
    answer = stack.openai(tenant).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
    )
    assert answer.usage.completion_tokens > 0


def tenant_name(tenant) -> str:
    from accounts.models import Account

    return Account.objects.get(pk=tenant.account_id).name


def no_page_scroll(page) -> None:
    """The page itself never scrolls sideways (tables may, inside their own box)."""
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], width


def test_revoke_a_key_from_the_admin_and_find_a_wallet_by_what_it_has(stack, admin_page):
    page = admin_page
    tenant = stack.tenant()
    empty = stack.tenant(wallet_micro=0)
    key = ApiKey.objects.get(pk=tenant.api_key_id)

    page.goto(f"{stack.url}/django-admin/accounts/apikey/?q={key.prefix}")
    page.check("input[name=_selected_action]")
    page.select_option("select[name=action]", "revoke")
    page.click("button[name=index]")
    page.shot("1-revoked")
    assert f"Revoked {key.prefix}…: refused on every replica now." in page.inner_text(
        ".messagelist"
    )
    key.refresh_from_db()
    assert key.revoked_at is not None
    with pytest.raises(openai.AuthenticationError):
        stack.openai(tenant).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
        )

    page.goto(f"{stack.url}/django-admin/billing/wallet/?available=none")
    page.shot("2-empty-wallets")
    listed = page.locator("input[name=_selected_action]").evaluate_all(
        "boxes => boxes.map(b => b.value)"
    )
    assert str(Wallet.objects.get(account_id=empty.account_id).pk) in listed
    assert str(Wallet.objects.get(account_id=tenant.account_id).pk) not in listed


OPERATOR_PAGES = [
    "/django-admin/",
    "/django-admin/accounts/account/",
    "/django-admin/accounts/account/{account}/change/",
    "/django-admin/billing/wallet/",
    "/django-admin/billing/ledgerentry/",
    "/django-admin/usage/usagelog/",
]


def test_the_operators_pages_have_no_serious_accessibility_violation(stack, admin_page):
    """Every page on one sign-in (a sign-in cost as much as a page's checks): each page's
    problems are collected, so one failing page does not hide another's."""
    tenant = stack.tenant()
    problems = {}
    for path in OPERATOR_PAGES:
        admin_page.goto(stack.url + path.format(account=tenant.account_id))
        admin_page.shot("page-" + path.strip("/").replace("/", "-").replace("{account}", "id"))

        found = violations(admin_page)

        width = admin_page.evaluate("document.documentElement.scrollWidth")
        problems[path] = [
            *(["axe:\n" + summary(found)] if found else []),
            *([f"scrollWidth {width}"] if width > admin_page.viewport_size["width"] else []),
        ]
    assert not {path: found for path, found in problems.items() if found}
