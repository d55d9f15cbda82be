"""The response cache's hit rate and money saved (GET /api/usage/cache): the caller's own rows
only, under the usage filters, in all and per key, group and model, read from the rollups for
whole days and hours and from the rows at the range's partial hours, exactly as the rows say."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.support.tenants import client_for, make_tenant
from tests.support.usage import journal_row, store

pytestmark = pytest.mark.django_db

# A range cut three ways: 22:30-23:00 and 05:00-05:40 read from the rows, 23:00-00:00 and
# 00:00-05:00 from hourly rollups, the whole of DAY from a daily one.
DAY = datetime(2026, 4, 7, tzinfo=UTC)
START = DAY - timedelta(minutes=90)  # 22:30 the day before
END = DAY + timedelta(days=1, hours=5, minutes=40)
MINI, HAIKU = "gpt-4o-mini", "claude-3-5-haiku"


def row(tenant, at: datetime, status: str, *, cost: int = 0, **fields) -> dict:
    """A journaled row of the tenant's key (else `group_id` / `api_key_id` in `fields`)."""
    owner = {"group_id": tenant.group_id, "api_key_id": tenant.api_key_id}
    return journal_row(
        account_id=tenant.account_id,
        created_at=at,
        cache_status=status,
        provider_cost_micro=cost,
        **{**owner, **fields},
    )


def hit(tenant, at: datetime, *, cost: int, uncached: int, **fields) -> dict:
    return row(tenant, at, "hit", cost=cost, uncached_cost_micro=uncached, **fields)


@pytest.fixture
def cached_usage():
    """My rows over the range's three kinds of span, two keys in two groups, two models; a row
    before the range, rows off the cached routes, and another account's hits."""
    from accounts.models import Group
    from accounts.services import api_key_create, group_create

    mine, theirs = make_tenant(), make_tenant()
    account = Group.objects.get(pk=mine.group_id).account
    second_group = group_create(account=account, name="second")
    second_key, _ = api_key_create(group=second_group, name="second")
    other = {"group_id": second_group.pk, "api_key_id": second_key.pk}
    early = START + timedelta(minutes=10)  # 22:40: a partial hour's rows
    late = END - timedelta(minutes=5)  # 05:35 the day after: a partial hour's rows
    store(
        hit(mine, early, cost=10, uncached=100),
        hit(mine, DAY - timedelta(minutes=30), cost=20, uncached=200, caller_label="alice"),
        hit(mine, DAY + timedelta(hours=9), cost=5, uncached=50, model_served=HAIKU),
        hit(mine, DAY + timedelta(days=1, hours=2), cost=1, uncached=10, **other),
        hit(mine, late, cost=3, uncached=30, caller_label="alice"),
        row(mine, DAY + timedelta(hours=9), "miss", cost=100),
        row(mine, DAY + timedelta(hours=10), "miss", cost=100, **other),
        row(mine, late, "miss", cost=40, model_served=HAIKU),
        row(mine, DAY + timedelta(hours=11), "bypass", cost=70),
        row(mine, DAY + timedelta(hours=12), "", cost=999),  # off the cached routes
        hit(mine, START - timedelta(minutes=1), cost=1, uncached=1000),  # before the range
        hit(theirs, DAY + timedelta(hours=9), cost=1, uncached=5000),
    )
    return mine, theirs, second_group, second_key


def figures(hits, misses, bypasses, hit_rate, saved, spent) -> dict:
    return {
        "hits": hits,
        "misses": misses,
        "bypasses": bypasses,
        "hit_rate": hit_rate,
        "saved_micro": saved,
        "spent_on_hits_micro": spent,
    }


def test_hit_rate_and_money_saved_in_all_and_per_key_group_and_model(cached_usage):
    mine, _, second_group, second_key = cached_usage

    response = client_for(mine).get(
        "/api/usage/cache", {"start": START.isoformat(), "end": END.isoformat()}
    )

    assert response.status_code == 200
    # Hits save 90 + 180 + 45 + 9 + 27 and cost 10 + 20 + 5 + 1 + 3; 5 hits of 8 lookups.
    assert response.json() == {
        "totals": figures(5, 3, 1, 0.625, 351, 39),
        "by_key": [
            {"key": mine.api_key_id, **figures(4, 2, 1, 0.6667, 342, 38)},
            {"key": second_key.pk, **figures(1, 1, 0, 0.5, 9, 1)},
        ],
        "by_group": [
            {"group": mine.group_id, **figures(4, 2, 1, 0.6667, 342, 38)},
            {"group": second_group.pk, **figures(1, 1, 0, 0.5, 9, 1)},
        ],
        "by_model": [
            {"model": HAIKU, **figures(1, 1, 0, 0.5, 45, 5)},
            {"model": MINI, **figures(4, 2, 1, 0.6667, 306, 34)},
        ],
    }


def test_the_rollups_answer_what_the_rows_alone_answer(cached_usage):
    from usage.models import UsageLog
    from usage.selectors import CACHE_KIND, usage_totals

    mine = cached_usage[0]
    in_range = UsageLog.objects.filter(
        account_id=mine.account_id, created_at__gte=START, created_at__lt=END
    )
    _, row_aggregates = CACHE_KIND

    [from_rollups] = usage_totals(accounts=[mine.account_id], kind=CACHE_KIND, start=START, end=END)

    assert from_rollups == {k: int(v) for k, v in in_range.aggregate(**row_aggregates()).items()}
    assert from_rollups == {
        "cache_hits": 5,
        "cache_misses": 3,
        "cache_bypasses": 1,
        "cache_hit_cost_micro": 39,
        "cache_saved_micro": 351,
    }


def test_filters_narrow_it_as_they_narrow_the_other_usage_totals(cached_usage):
    mine, _, second_group, _ = cached_usage
    client = client_for(mine)
    period = {"start": START.isoformat(), "end": END.isoformat()}

    by_group = client.get("/api/usage/cache", {**period, "group": second_group.pk}).json()
    by_caller = client.get("/api/usage/cache", {**period, "caller": "alice"}).json()
    by_model = client.get("/api/usage/cache", {**period, "model": HAIKU}).json()
    everything = client.get("/api/usage/cache").json()

    assert by_group["totals"] == figures(1, 1, 0, 0.5, 9, 1)
    assert [r["group"] for r in by_group["by_group"]] == [second_group.pk]
    assert by_caller["totals"] == figures(2, 0, 0, 1.0, 207, 23)  # read from the rows
    assert by_model["totals"] == figures(1, 1, 0, 0.5, 45, 5)
    # No range: the hit before START counts too (saving 999 at a price of 1).
    assert everything["totals"] == figures(6, 3, 1, 0.6667, 1350, 40)


def test_no_cache_activity_is_zeros_and_no_hit_rate():
    tenant = make_tenant()

    response = client_for(tenant).get("/api/usage/cache")

    assert response.json() == {
        "totals": figures(0, 0, 0, None, 0, 0),
        "by_key": [],
        "by_group": [],
        "by_model": [],
    }


def test_another_accounts_hits_and_filters_are_not_the_callers(cached_usage):
    mine, theirs, _, _ = cached_usage

    theirs_seen = client_for(theirs).get("/api/usage/cache").json()
    foreign_key = client_for(mine).get("/api/usage/cache", {"key": theirs.api_key_id})
    bad_range = client_for(mine).get(
        "/api/usage/cache", {"start": END.isoformat(), "end": START.isoformat()}
    )

    assert theirs_seen["totals"] == figures(1, 0, 0, 1.0, 4999, 1)
    assert (foreign_key.status_code, foreign_key.json()["error"]["code"]) == (404, "LM-2004")
    assert bad_range.status_code == 400
    assert bad_range.json()["error"]["message"] == "start must be before end."


def test_whole_days_are_read_from_the_rollups_alone_never_the_rows(cached_usage):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from usage.models import UsageLog

    mine = cached_usage[0]
    whole_days = {"start": DAY.isoformat(), "end": (DAY + timedelta(days=2)).isoformat()}

    with CaptureQueriesContext(connection) as queries:
        response = client_for(mine).get("/api/usage/cache", whole_days)

    with CaptureQueriesContext(connection) as partial:
        client_for(mine).get("/api/usage/cache", {**whole_days, "end": END.isoformat()})

    assert response.json()["totals"] == figures(3, 3, 1, 0.5, 81, 9)
    log_table = UsageLog._meta.db_table
    assert [q["sql"] for q in queries if log_table in q["sql"]] == []
    # Its partial last hour (05:00-05:40) is read from the rows: totals, then each split.
    assert sum(log_table in q["sql"] for q in partial) == 4
