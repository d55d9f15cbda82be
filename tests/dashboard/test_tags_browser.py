"""Request tags on the dashboard in a real browser, at a desktop and a phone width, against a
real gateway: default tags typed on the group and key pages (a bad one refused naming the
rule), requests tagged through the OpenAI SDK, the usage explorer's tag column and filter,
the CSV link keeping the filter, and the Charts page's "Spend by tag" in dollars."""

from __future__ import annotations

import re

from accounts.models import ApiKey, Group
from dashboard.templatetags.money import usd
from tests.dashboard.test_browser import sign_in
from tests.dashboard.test_cache_browser import fits
from tests.support.browser import requires_chromium
from tests.support.usage import settled

pytestmark = requires_chromium
PROMPT = [{"role": "user", "content": "tagged"}]


def test_default_tags_tagged_usage_and_spend_by_tag(stack, page):
    tenant = stack.tenant()
    sign_in(page, stack, tenant)
    base = f"{stack.url}/dashboard/{tenant.account_id}"

    page.goto(f"{base}/groups/{tenant.group_id}/")
    page.fill("input[name=default_tags]", "Org:Acme, env:prod")
    page.shot("1-group-tags")
    assert fits(page)
    page.click("#edit-group button[type=submit]")
    page.wait_for_url(f"{base}/groups/")
    assert Group.objects.get(pk=tenant.group_id).default_tags == ["org:acme", "env:prod"]

    page.goto(f"{base}/keys/{tenant.api_key_id}/")
    page.fill("input[name=default_tags]", "bad tag")
    page.click("#edit-key button[type=submit]")
    assert "Tag 'bad tag' is not valid" in page.inner_text("#edit-key")
    page.shot("2-key-tag-refused")
    page.fill("input[name=default_tags]", "team:search")
    page.click("#edit-key button[type=submit]")
    page.wait_for_url(f"{base}/keys/")
    assert ApiKey.objects.get(pk=tenant.api_key_id).default_tags == ["team:search"]

    client = stack.openai(tenant)
    client.chat.completions.create(
        model="gpt-4o-mini", messages=PROMPT, metadata={"tags": "customer-42"}
    )
    client.chat.completions.create(model="gpt-4o-mini", messages=PROMPT)
    rows = settled(tenant, 2)
    tagged = next(r for r in rows if "customer-42" in r.tags)
    assert tagged.tags == ["customer-42", "team:search", "org:acme", "env:prod"]

    page.goto(f"{base}/usage/")
    cells = page.locator("#usage tbody td.tags").all_inner_texts()
    assert sorted(cells) == sorted(
        ["customer-42 team:search org:acme env:prod", "team:search org:acme env:prod"]
    )
    page.shot("3-usage-tags")
    page.click('#usage tbody td.tags a:text("customer-42")')
    page.wait_for_url(f"{base}/usage/?tag=customer-42")
    assert page.locator("#usage tbody tr").count() == 1
    assert "tag=customer-42" in page.get_attribute("#csv", "href")
    page.shot("4-usage-filtered")

    page.goto(f"{base}/charts/")
    table = page.locator("#chart-spend-tag table tbody tr").all_text_contents()
    shown = re.sub(r"<[^>]+>", "", usd(sum(r.spend_micro for r in rows)))  # as the page says it
    assert any(line.startswith("env:prod") and shown in line for line in table), table
    page.shot("5-spend-by-tag")
    assert fits(page)
