"""The response cache on the dashboard's pages: a group's and a key's settings (a key's empty
ones follow its group, named with the group's values), the Cache page's hit rate and money
saved in dollars per key, group and model, and the purge behind its confirmation, for owners
and admins only."""

from __future__ import annotations

import html as html_text
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.conf import settings

from accounts.models import ApiKey, Group
from audit.models import AuditEntry
from core.response_cache import account_prefix
from tests.dashboard.test_pages import member, page, signed_in
from tests.support.tenants import make_tenant
from tests.support.usage import journal_row, store

pytestmark = pytest.mark.django_db


def words_of(markup: str) -> str:
    return html_text.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", markup)))


def text(response) -> str:
    return words_of(response.content.decode())


@pytest.fixture
def cache_redis() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.TOLLGATE["CACHE_REDIS_URL"])
    yield client
    client.close()


def test_a_groups_cache_settings_are_edited_and_a_bad_ttl_is_refused_in_words():
    tenant = make_tenant()
    client = signed_in(tenant)
    url = page(tenant, f"groups/{tenant.group_id}/")

    form = client.get(url).content.decode()
    refused = client.post(url, {"name": "default", "cache_mode": "always", "cache_ttl_s": "0"})
    saved = client.post(
        url,
        {"name": "default", "cache_mode": "always", "cache_ttl_s": "900", "cache_scope": "group"},
    )

    assert '<option value="on_request" selected>' in form
    assert 'name="cache_ttl_s" value="3600"' in form
    assert "Ensure this value is greater than or equal to 1." in text(refused)
    assert saved.status_code == 302
    listed = client.get(page(tenant, "groups/")).content.decode()
    row = listed.split(f'<tr data-group="{tenant.group_id}">')[1].split("</tr>")[0]
    assert words_of(row.split('class="cache">')[1].split("</td>")[0]) == ("always 900 s · group")
    group = Group.objects.get(pk=tenant.group_id)
    assert (group.cache_mode, group.cache_ttl_s, group.cache_scope) == ("always", 900, "group")
    entry = AuditEntry.objects.filter(account_id=tenant.account_id).order_by("-id").first()
    assert (entry.action, entry.after) == (
        "group.update",
        {"cache_mode": "always", "cache_ttl_s": 900, "cache_scope": "group"},
    )


def test_a_group_created_without_cache_settings_gets_the_defaults():
    tenant = make_tenant()

    signed_in(tenant).post(page(tenant, "groups/"), {"name": "batch"})

    group = Group.objects.get(account_id=tenant.account_id, name="batch")
    assert (group.cache_mode, group.cache_ttl_s, group.cache_scope) == (
        "on_request",
        3600,
        "account",
    )


def test_a_key_follows_its_group_by_name_until_it_sets_its_own_and_back():
    tenant = make_tenant()
    Group.objects.filter(pk=tenant.group_id).update(cache_mode="off", cache_ttl_s=120)
    client = signed_in(tenant)
    url = page(tenant, f"keys/{tenant.api_key_id}/")

    form = client.get(url).content.decode()
    own = client.post(
        url, {"name": "ci", "cache_mode": "always", "cache_ttl_s": "60", "cache_scope": "caller"}
    )
    assert own.status_code == 302
    api_key = ApiKey.objects.get(pk=tenant.api_key_id)
    assert (api_key.cache_mode, api_key.cache_ttl_s, api_key.cache_scope) == (
        "always",
        60,
        "caller",
    )
    back = client.post(url, {"name": "ci", "cache_mode": "", "cache_ttl_s": "", "cache_scope": ""})

    assert '<option value="" selected>Follow the group (Off)</option>' in form
    assert '<option value="" selected>Follow the group (the account)</option>' in form
    assert "Empty: the group's (120 s)." in text(client.get(url))
    assert back.status_code == 302
    api_key.refresh_from_db()
    assert (api_key.cache_mode, api_key.cache_ttl_s, api_key.cache_scope) == ("", None, "")


def test_the_cache_page_shows_hit_rate_and_savings_in_dollars_by_key_group_and_model():
    tenant = make_tenant()
    now = datetime.now(UTC)

    def row(status: str, cost: int, uncached: int = 0, minutes: int = 0) -> dict:
        return journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            api_key_id=tenant.api_key_id,
            created_at=now - timedelta(minutes=minutes),
            cache_status=status,
            provider_cost_micro=cost,
            uncached_cost_micro=uncached,
        )

    store(
        row("hit", 250_000, 2_500_000),
        row("hit", 250_000, 2_500_000, minutes=1),
        row("hit", 10_000, 100_000, minutes=2),
        row("miss", 2_500_000, minutes=3),
        row("bypass", 1_000, minutes=4),
    )
    api_key = ApiKey.objects.get(pk=tenant.api_key_id)

    shown = signed_in(tenant).get(page(tenant, "cache/"))
    html = shown.content.decode()

    assert shown.status_code == 200
    words = text(shown)
    assert "Hit rate 75.0% 3 hits, 1 miss" in words
    assert "Money saved $4.59" in words  # 2 × 2.25 + 0.09
    assert "Spent on hits $0.51 1 request bypassed the cache" in words
    by_key = html.split('id="cache-by-key"')[1].split(">", 1)[1].split("</table>")[0]
    assert words_of(by_key).split() == [
        *["Key", "Hit", "rate", "Hits", "Misses", "Bypasses", "Saved", "Spent", "on", "hits"],
        f"{api_key.prefix}…",
        "default",
        *["75.0%", "3", "1", "1", "$4.59", "$0.51"],
    ]
    assert 'id="cache-by-group"' in html and 'id="cache-by-model"' in html
    assert 'id="cache-purge-link"' in html


def test_the_cache_page_without_cache_traffic_says_so():
    tenant = make_tenant()

    words = text(signed_in(tenant).get(page(tenant, "cache/?days=7")))

    assert "No request reached the cache in the last 7 days." in words
    assert "Hit rate – 0 hits, 0 misses" in words


def test_purge_asks_first_then_drops_the_accounts_answers(cache_redis):
    tenant, other = make_tenant(), make_tenant()
    for n in range(2):
        cache_redis.set(f"{account_prefix(tenant.account_id)}d{n}", b"answer")
    cache_redis.set(f"{account_prefix(other.account_id)}d0", b"theirs")
    client = signed_in(tenant)
    url = page(tenant, "cache/purge/")

    asked = client.get(url)
    assert "Purge every cached answer?" in text(asked)
    assert list(cache_redis.scan_iter(match=f"{account_prefix(tenant.account_id)}*")) != []
    purged = client.post(url, follow=True)

    assert "Cache purged on every gateway replica: 2 cached answers dropped." in text(purged)
    assert list(cache_redis.scan_iter(match=f"{account_prefix(tenant.account_id)}*")) == []
    assert cache_redis.get(f"{account_prefix(other.account_id)}d0") == b"theirs"
    entry = AuditEntry.objects.get(account_id=tenant.account_id, action="cache.purge")
    assert entry.after == {"purged": 2}
    cache_redis.delete(f"{account_prefix(other.account_id)}d0")


def test_a_viewer_reads_the_cache_page_but_may_not_purge(cache_redis):
    tenant = make_tenant()
    cache_redis.set(f"{account_prefix(tenant.account_id)}kept", b"answer")
    viewer = member(tenant, "viewer")

    shown = viewer.get(page(tenant, "cache/"))
    asked = viewer.get(page(tenant, "cache/purge/"))
    posted = viewer.post(page(tenant, "cache/purge/"))

    assert shown.status_code == 200 and 'id="cache-purge-link"' not in shown.content.decode()
    assert (asked.status_code, posted.status_code) == (403, 403)
    assert cache_redis.get(f"{account_prefix(tenant.account_id)}kept") == b"answer"
    cache_redis.delete(f"{account_prefix(tenant.account_id)}kept")


def test_another_accounts_cache_page_is_a_404():
    mine, theirs = make_tenant(), make_tenant()

    response = signed_in(mine).get(page(theirs, "cache/"))

    assert response.status_code == 404
