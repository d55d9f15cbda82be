"""Team keys in a real browser (Debian's Chromium through Playwright) against a real gateway
process: a key added from the provider list that names what each profile serves, a key with
others left removed in one click, the last one only after a confirmation that says what the
next request does, and that request, sent with the official `openai` SDK, doing it.

Screenshots of every step go to $TEST_ARTIFACTS_DIR/dashboard/<test name>.
"""

from __future__ import annotations

import openai
import pytest

from byok.models import KeyPool, TeamKey
from tests.dashboard.test_browser import ARTIFACTS, sign_in
from tests.support.a11y import summary, violations
from tests.support.browser import PHONE, open_page, requires_chromium
from tests.support.profiles import PLATFORM_KEY
from tests.support.usage import usage_rows

pytestmark = requires_chromium

HELLO = [{"role": "user", "content": "hello there"}]


@pytest.fixture
def page(browser, request):
    tab = open_page(browser, ARTIFACTS / request.node.name)
    yield tab
    tab.shot("last")
    tab.context.close()


def add_key(page, provider: str, label: str, secret: str) -> None:
    if not page.is_visible("#add-team-key"):  # folded away once a pool exists
        page.click("#add-team-key-box summary")
    page.select_option("#add-team-key select[name=provider]", provider)
    page.fill("#add-team-key input[name=label]", label)
    page.fill("#add-team-key input[name=key]", secret)
    page.click("#add-team-key button[type=submit]")
    page.wait_for_selector(f"text=Team key {label} (…{secret[-4:]}) added.")


def test_the_last_key_is_removed_after_a_confirmation_and_the_next_request_meets_lm_3021(
    stack, page
):
    tenant = stack.tenant()
    sign_in(page, stack, tenant)
    page.click('nav >> text="Team keys"')
    offered = page.locator("#add-team-key select[name=provider] option").all_inner_texts()
    assert offered == [
        "stub-anthropic — claude-3-5-haiku",
        "stub-openai — gpt-4o, gpt-4o-mini",
        "stub-router — router-mini",
    ]
    add_key(page, "stub-openai", "first", "sk-team-first-1111")
    add_key(page, "stub-openai", "second", "sk-team-second-2222")
    page.shot("3-two-keys")

    # With another key left, one click.
    page.click("[data-team-key]:has-text('first') button:has-text('Remove')")
    page.wait_for_selector("text=Team key first (…1111) removed.")
    assert page.locator("[data-team-key]").count() == 1

    # The last one asks first, and says what the next request will do.
    page.click("[data-team-key]:has-text('second') >> text=Remove")
    page.wait_for_selector("#confirm-team-key-remove")
    page.shot("4-confirm-last-key")
    assert page.inner_text("#next-request") == (
        "The next of default's requests for stub-openai (gpt-4o, gpt-4o-mini) is refused with"
        ' LM-3021 ("No team key for stub-openai: its pool is empty and platform fallback is'
        ' off."); no platform money is spent.'
    )
    assert violations(page) == [], summary(violations(page))
    assert page.get_attribute('nav a:has-text("Team keys")', "aria-current") == "true"
    page.click("text=No, keep it")
    assert page.locator("[data-team-key]").count() == 1  # nothing removed

    page.click("[data-team-key]:has-text('second') >> text=Remove")
    page.click("#confirm-team-key-remove button[type=submit]")
    page.wait_for_selector("text=Team key second (…2222) removed.")
    page.shot("5-last-key-removed")
    assert "The stub-openai pool has no key left." in page.inner_text(".messages")
    assert "is refused (LM-3021)" in page.inner_text("[data-pool-warning]")
    assert not TeamKey.objects.filter(pool__group_id=tenant.group_id).exists()

    with pytest.raises(openai.RateLimitError) as refused:
        stack.openai(tenant).chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    assert refused.value.body["message"] == (
        "No team key for stub-openai: its pool is empty and platform fallback is off."
    )
    assert [c["key"] for c in stack.stub.vendor_calls()] == []


def test_the_last_key_with_fallback_on_is_confirmed_on_a_phone_and_the_platform_serves_next(
    stack, browser, request
):
    tenant = stack.tenant()
    phone = open_page(browser, ARTIFACTS / request.node.name, viewport=PHONE)
    try:
        sign_in(phone, stack, tenant)
        phone.goto(f"{stack.url}/dashboard/{tenant.account_id}/team-keys/")
        add_key(phone, "stub-openai", "only", "sk-team-only-3333")
        phone.click("button:has-text('Turn fallback on')")
        assert KeyPool.objects.get(group_id=tenant.group_id).fallback is True

        phone.click("[data-team-key] >> text=Remove")
        phone.wait_for_selector("#confirm-team-key-remove")
        phone.shot("3-confirm-last-key-phone")
        assert phone.inner_text("#next-request") == (
            "The next of default's requests for stub-openai (gpt-4o, gpt-4o-mini) is served on"
            " the platform's keys and paid from your wallet: platform fallback is on."
        )
        width = phone.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"]
        assert violations(phone) == [], summary(violations(phone))
        phone.click("#confirm-team-key-remove button[type=submit]")
        phone.wait_for_selector("[data-pool-empty]")
        phone.shot("4-emptied-pool-phone")
    finally:
        phone.context.close()

    answer = stack.openai(tenant).chat.completions.create(model="gpt-4o-mini", messages=HELLO)

    assert answer.usage.completion_tokens == 8
    assert [c["key"] for c in stack.stub.vendor_calls()] == [PLATFORM_KEY]
    [row] = usage_rows(group_id=tenant.group_id, expect=1)
    assert (row.served_by, row.provider_cost_micro) == ("platform", 6)
