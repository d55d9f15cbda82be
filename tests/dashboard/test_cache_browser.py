"""The response cache on the dashboard in a real browser, at a desktop and a phone width,
against a real gateway: a group set to cache always and a key following it with a TTL of its
own, the same request twice through the OpenAI SDK (a miss, then a hit), the Cache page's hit
rate and money saved in dollars, and the purge after its confirmation (the request is a miss
again)."""

from __future__ import annotations

import pytest

from accounts.models import ApiKey, Group
from audit.models import AuditEntry
from core.money import format_usd
from tests.dashboard.test_browser import sign_in
from tests.support.a11y import summary, violations
from tests.support.browser import requires_chromium
from tests.support.profiles import install_profiles, stub_profiles
from tests.support.usage import settled

pytestmark = requires_chromium
PROMPT = [{"role": "user", "content": "an answer worth keeping"}]


@pytest.fixture
def cached(stack):
    """The stack with its models cacheable, a hit priced at 10% of the call it replays."""
    spec = stub_profiles(stack.stub.url)
    for profile in spec:
        for model in profile.get("models", ()):
            model.update(cacheable=True, cache_hit_price_pct=10)
    install_profiles(stack.stub.url, spec)
    stack.gateway.reload()
    return stack


def ask(client) -> str:
    """Send the prompt; return what the gateway said of the cache (X-Tollgate-Cache)."""
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=PROMPT)
    return raw.headers["x-tollgate-cache"]


def fits(page) -> bool:
    """Whether the page neither scrolls sideways nor has a serious or critical axe finding."""
    found = violations(page)
    assert not found, summary(found)
    return page.evaluate("document.documentElement.scrollWidth") <= page.viewport_size["width"]


def test_set_the_cache_read_its_savings_and_purge_it(cached, page):
    tenant = cached.tenant()
    client = cached.openai(tenant)
    sign_in(page, cached, tenant)

    page.goto(f"{cached.url}/dashboard/{tenant.account_id}/groups/{tenant.group_id}/")
    assert page.input_value("select[name=cache_mode]") == "on_request"
    page.select_option("select[name=cache_mode]", "always")
    page.fill("input[name=cache_ttl_s]", "600")
    page.select_option("select[name=cache_scope]", "key")
    page.shot("1-group-cache")
    assert fits(page)
    page.click("#edit-group button[type=submit]")
    page.wait_for_url(f"{cached.url}/dashboard/{tenant.account_id}/groups/")
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.cache_mode, group.cache_ttl_s, group.cache_scope) == ("always", 600, "key")

    page.goto(f"{cached.url}/dashboard/{tenant.account_id}/keys/{tenant.api_key_id}/")
    follow = page.locator("select[name=cache_mode] option:checked").inner_text()
    assert follow == "Follow the group (Always)"
    assert page.input_value("input[name=cache_ttl_s]") == ""
    page.fill("input[name=cache_ttl_s]", "300")
    page.shot("2-key-cache")
    assert fits(page)
    page.click("#edit-key button[type=submit]")
    page.wait_for_url(f"{cached.url}/dashboard/{tenant.account_id}/keys/")
    api_key = ApiKey.objects.get(pk=tenant.api_key_id)
    assert (api_key.cache_mode, api_key.cache_ttl_s, api_key.cache_scope) == ("", 300, "")

    assert [ask(client), ask(client)] == ["miss", "hit"]
    miss, hit = sorted(settled(tenant, 2), key=lambda row: row.cache_status != "miss")
    assert (miss.cache_status, hit.cache_status) == ("miss", "hit")
    saved = hit.uncached_cost_micro - hit.provider_cost_micro

    page.click('nav >> text="Cache"')
    page.wait_for_url(f"{cached.url}/dashboard/{tenant.account_id}/cache/")
    assert page.inner_text("#cache-hit-rate .big") == "50.0%"
    assert page.inner_text("#cache-saved .big") == format_usd(saved)
    assert page.inner_text("#cache-spent .big") == format_usd(hit.provider_cost_micro)
    key_row = page.locator("#cache-by-key tbody tr").all_inner_texts()
    assert len(key_row) == 1 and api_key.prefix in key_row[0] and "50.0%" in key_row[0]
    assert page.locator("#cache-by-model tbody tr td").first.inner_text() == "gpt-4o-mini"
    page.shot("3-cache-page")
    assert fits(page)

    page.click("#cache-purge-link")
    assert "cannot be undone" in page.inner_text("#purge-warning")
    page.shot("4-confirm-purge")
    assert fits(page)
    page.click("#confirm-purge button[type=submit]")
    page.wait_for_url(f"{cached.url}/dashboard/{tenant.account_id}/cache/")
    assert "Cache purged on every gateway replica: 1 cached answer dropped." in page.inner_text(
        ".messages"
    )
    page.shot("5-purged")
    assert ask(client) == "miss"
    purges = AuditEntry.objects.filter(account_id=tenant.account_id, action="cache.purge")
    assert list(purges.values_list("after", flat=True)) == [{"purged": 1}]
