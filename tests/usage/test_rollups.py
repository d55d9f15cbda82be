"""Hourly rollups: always equal to the stored rows (many concurrent requests through a real
gateway included), read by the usage API for whole hours with the rows at partial hours,
audited against the rows per closed day; and the usage list paged by cursor."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.support.tenants import client_for, make_tenant
from tests.support.usage import journal_row, store, usage_rows

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)


def rollups_now(tenant) -> set[tuple]:
    """The tenant's hourly and daily rollups, each as its columns (the grain first)."""
    from usage.models import UsageDailyRollup, UsageRollup
    from usage.rollups import COLUMNS

    mine = {"account_id": tenant.account_id}
    hours = UsageRollup.objects.filter(**mine).values_list(*COLUMNS)
    days = UsageDailyRollup.objects.filter(**mine).values_list("day", *COLUMNS[1:])
    return {("hour", *row) for row in hours} | {("day", *row) for row in days}


def rollups_of_rows(tenant) -> set[tuple]:
    """The rollups the tenant's stored rows make, computed from the rows alone."""
    from usage.rollups import rollups_from_rows

    exact = {
        (grain, *(v if isinstance(v, (str, datetime)) else int(v) for v in row))
        for grain in ("hour", "day")
        for row in rollups_from_rows(grain=grain)
    }
    return {row for row in exact if row[2] == tenant.account_id}


def mixed_rows(tenant, *, start: datetime, count: int, step: timedelta) -> list[dict]:
    """Rows of two models, both payers, some errors, a caller, over several hours."""
    rows = []
    for i in range(count):
        rows.append(
            journal_row(
                group_id=tenant.group_id,
                account_id=tenant.account_id,
                api_key_id=tenant.api_key_id,
                created_at=start + i * step,
                model_requested="gpt-4o-mini" if i % 3 else "claude-3-5-haiku",
                model_served="gpt-4o-mini" if i % 3 else "claude-3-5-haiku",
                served_by="team" if i % 4 == 0 else "platform",
                status=200 if i % 5 else 429,
                caller_label="alice" if i % 2 else "",
                tokens_in=10 + i,
                tokens_out=2 * i,
                byok_tokens_in=i if i % 4 == 0 else 0,
                provider_cost_micro=7 * i,
                bytes_in=100 + i,
                bytes_out=300 + i,
                bandwidth_charge_micro=i % 3,
                web_pages=i % 2,
                latency_ms=20 + i,
            )
        )
    return rows


def test_rollups_equal_the_rows_stored_in_batches_and_replays_add_nothing():
    tenant = make_tenant()
    rows = mixed_rows(tenant, start=T0, count=40, step=timedelta(minutes=7))
    store(*rows[:25])
    store(*rows[15:])  # a replay of ten of them, in a batch with fifteen new ones

    from usage.models import UsageRollup

    assert rollups_now(tenant) == rollups_of_rows(tenant)
    # 40 rows 7 minutes apart from 10:00: 280 minutes, hours 10:00 to 14:00.
    hours = sorted(set(UsageRollup.objects.values_list("hour", flat=True)))
    assert hours == [T0 + timedelta(hours=h) for h in range(5)]
    total = sum(UsageRollup.objects.values_list("requests", flat=True))
    assert total == 40
    assert sum(UsageRollup.objects.values_list("errors", flat=True)) == 8  # i % 5 == 0
    assert sum(UsageRollup.objects.values_list("provider_cost_micro", flat=True)) == 7 * sum(
        range(40)
    )


def test_many_concurrent_requests_through_a_gateway_roll_up_exactly(stack):
    tenant = stack.tenant()

    async def one(client: httpx.AsyncClient, i: int) -> int:
        response = await client.post(
            f"{stack.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {tenant.api_key}", "X-Request-Id": f"cc-{i}"},
            json={
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": "word " * (1 + i % 7)}],
                "stream": i % 2 == 0,
            },
        )
        await response.aread()
        return response.status_code

    async def all_of_them() -> list[int]:
        async with httpx.AsyncClient(timeout=30) as client:
            return await asyncio.gather(*(one(client, i) for i in range(60)))

    statuses = asyncio.run(all_of_them())
    assert statuses == [200] * 60
    rows = usage_rows([f"cc-{i}" for i in range(60)], expect=60)

    from usage.models import UsageRollup

    mine = UsageRollup.objects.filter(account_id=tenant.account_id)
    assert sum(mine.values_list("requests", flat=True)) == 60
    assert sum(mine.values_list("tokens_in", flat=True)) == sum(r.tokens_in for r in rows)
    assert sum(mine.values_list("tokens_out", flat=True)) == sum(r.tokens_out for r in rows)
    assert sum(mine.values_list("provider_cost_micro", flat=True)) == sum(
        r.provider_cost_micro for r in rows
    )
    assert sum(mine.values_list("bytes_out", flat=True)) == sum(r.bytes_out for r in rows)
    assert rollups_now(tenant) == rollups_of_rows(tenant)


def test_totals_over_partial_hours_match_the_rows_exactly():
    tenant = make_tenant()
    rows = mixed_rows(tenant, start=T0, count=40, step=timedelta(minutes=7))
    store(*rows)
    api = client_for(tenant)
    # 10:30 to 13:20: half an hour of rows, two whole hours of rollups, twenty minutes of rows.
    start, end = T0 + timedelta(minutes=30), T0 + timedelta(hours=3, minutes=20)
    inside = [r for r in rows if start <= datetime.fromisoformat(r["created_at"]) < end]

    daily = api.get("/api/usage/daily", {"start": start.isoformat(), "end": end.isoformat()})
    models = api.get("/api/usage/models", {"start": start.isoformat(), "end": end.isoformat()})
    listed = api.get("/api/usage", {"start": start.isoformat(), "end": end.isoformat()})

    assert daily.status_code == models.status_code == listed.status_code == 200
    [day] = daily.json()["results"]
    assert day["requests"] == len(inside) == 24
    assert day["errors"] == sum(1 for r in inside if r["status"] != 200)
    assert day["tokens_in"] == sum(r["tokens_in"] for r in inside)
    assert day["provider_cost_micro"] == sum(r["provider_cost_micro"] for r in inside)
    assert day["web_pages"] == sum(r["web_pages"] for r in inside)
    by_model = {m["model"]: m["requests"] for m in models.json()["results"]}
    assert by_model == {
        "claude-3-5-haiku": sum(1 for r in inside if r["model_served"] == "claude-3-5-haiku"),
        "gpt-4o-mini": sum(1 for r in inside if r["model_served"] == "gpt-4o-mini"),
    }
    assert listed.json()["count"] == 24


def test_totals_over_days_hours_and_partial_hours_match_the_rows_exactly():
    tenant = make_tenant()
    rows = mixed_rows(tenant, start=T0, count=80, step=timedelta(minutes=97))  # 5.4 days
    store(*rows)
    api = client_for(tenant)
    # May 4 10:30 to May 8 03:20: rows, then hours, then whole days, then hours, then rows.
    start, end = T0 + timedelta(minutes=30), T0 + timedelta(days=3, hours=17, minutes=20)
    inside = [r for r in rows if start <= datetime.fromisoformat(r["created_at"]) < end]
    when = {"start": start.isoformat(), "end": end.isoformat()}

    daily = api.get("/api/usage/daily", when).json()["results"]
    models = api.get("/api/usage/models", when).json()["results"]
    count = api.get("/api/usage", {**when, "limit": 1}).json()["count"]

    per_day: dict[str, list] = {}
    for r in inside:
        per_day.setdefault(r["created_at"][:10], []).append(r)
    assert [d["day"] for d in daily] == sorted(per_day)
    for d in daily:
        day_rows = per_day[d["day"]]
        assert d["requests"] == len(day_rows)
        assert d["errors"] == sum(r["status"] != 200 for r in day_rows)
        assert d["tokens_out"] == sum(r["tokens_out"] for r in day_rows)
        assert d["byok_tokens_in"] == sum(r["byok_tokens_in"] for r in day_rows)
        assert d["bytes_in"] == sum(r["bytes_in"] for r in day_rows)
        assert d["bandwidth_charge_micro"] == sum(r["bandwidth_charge_micro"] for r in day_rows)
    assert sum(m["provider_cost_micro"] for m in models) == sum(
        r["provider_cost_micro"] for r in inside
    )
    assert count == len(inside) == 55


def test_a_filter_only_the_rows_know_is_summed_from_the_rows(monkeypatch):
    tenant = make_tenant()
    rows = mixed_rows(tenant, start=T0, count=40, step=timedelta(minutes=7))
    store(*rows)
    api = client_for(tenant)

    daily = api.get("/api/usage/daily", {"caller": "alice"}).json()["results"]
    listed = api.get("/api/usage", {"caller": "alice", "limit": 5}).json()

    assert sum(d["requests"] for d in daily) == 20
    assert sum(d["tokens_out"] for d in daily) == sum(
        r["tokens_out"] for r in rows if r["caller_label"] == "alice"
    )
    assert listed["count"] == 20  # counted from the rows: few enough
    assert len(listed["results"]) == 5 and listed["next"]
    monkeypatch.setattr("accounts.api.pagination.COUNT_CAP", 19)  # more than that: no count
    assert api.get("/api/usage", {"caller": "alice"}).json()["count"] is None


def test_the_list_pages_by_cursor_through_every_row_once_newest_first():
    tenant = make_tenant()
    # Rows sharing created_at in pairs: the cursor must settle ties.
    rows = mixed_rows(tenant, start=T0, count=30, step=timedelta(0))
    for i, row in enumerate(rows):
        row["created_at"] = (T0 + timedelta(seconds=i // 2)).isoformat()
        row["request_id"] = f"page-{i:02d}"
    store(*rows)
    api = client_for(tenant)

    seen, url, pages = [], "/api/usage?limit=7", 0
    while url:
        page = api.get(url).json()
        assert page["count"] == 30
        seen += [r["request_id"] for r in page["results"]]
        url, pages = page["next"], pages + 1
    assert pages == 5
    assert len(seen) == 30 and set(seen) == {f"page-{i:02d}" for i in range(30)}
    # Newest first: row i was stored at T0 + i // 2 seconds.
    seconds = [int(request_id[5:]) // 2 for request_id in seen]
    assert seconds == sorted(seconds, reverse=True)
    # The earlier contract, by offset, still answers with the same rows and count.
    legacy = api.get("/api/usage", {"limit": 7, "offset": 28}).json()
    assert legacy["count"] == 30 and len(legacy["results"]) == 2


def test_reconciliation_rebuilds_a_closed_day_that_differs_once():
    from usage.models import UsageCursor, UsageRollup
    from usage.rollups import RECONCILE_CURSOR, reconcile_rollups

    tenant = make_tenant()
    day = datetime(2026, 5, 1, tzinfo=UTC)
    UsageCursor.objects.update_or_create(name=RECONCILE_CURSOR, defaults={"position": day})
    store(*mixed_rows(tenant, start=day + timedelta(hours=3), count=10, step=timedelta(hours=1)))
    store(*mixed_rows(tenant, start=day + timedelta(days=1), count=5, step=timedelta(hours=1)))
    good = rollups_now(tenant)
    damaged = UsageRollup.objects.get(account_id=tenant.account_id, hour=day + timedelta(hours=5))
    UsageRollup.objects.filter(pk=damaged.pk).update(requests=99, provider_cost_micro=1)

    # At 00:30 on May 3, May 2 is not closed yet: only May 1 is audited.
    rebuilt = reconcile_rollups(now=datetime(2026, 5, 3, 0, 30, tzinfo=UTC))

    assert rebuilt == [day]
    assert rollups_now(tenant) == good
    UsageRollup.objects.filter(pk=damaged.pk).update(requests=5)
    # A day once audited is not read again; May 2 is audited once closed, and is exact.
    assert reconcile_rollups(now=datetime(2026, 5, 3, 1, 30, tzinfo=UTC)) == []
    assert reconcile_rollups(now=datetime(2026, 5, 4, 12, tzinfo=UTC)) == []


def test_reconciliation_rebuilds_a_closed_day_whose_tag_rollups_differ():
    from usage.models import UsageCursor, UsageTagRollup
    from usage.rollups import RECONCILE_CURSOR, reconcile_rollups

    tenant = make_tenant()
    day = datetime(2026, 5, 1, tzinfo=UTC)
    UsageCursor.objects.update_or_create(name=RECONCILE_CURSOR, defaults={"position": day})
    rows = mixed_rows(tenant, start=day + timedelta(hours=3), count=6, step=timedelta(hours=1))
    for i, row in enumerate(rows):
        row["tags"] = ["team-a", "customer-42"] if i % 2 else ["team-a"]
    store(*rows)

    def tag_rollups() -> set[tuple]:
        return set(
            UsageTagRollup.objects.filter(account_id=tenant.account_id).values_list(
                "hour", "tag", "requests", "provider_cost_micro"
            )
        )

    good = tag_rollups()
    assert len(good) == 9  # six hours of team-a, three of customer-42
    damaged = UsageTagRollup.objects.get(tag="customer-42", hour=day + timedelta(hours=4))
    UsageTagRollup.objects.filter(pk=damaged.pk).update(provider_cost_micro=1)

    assert reconcile_rollups(now=datetime(2026, 5, 3, 0, 30, tzinfo=UTC)) == [day]
    assert tag_rollups() == good
    # Exact again: the next day's audit finds nothing to rebuild.
    assert reconcile_rollups(now=datetime(2026, 5, 4, 12, tzinfo=UTC)) == []


def test_a_rebuild_recomputes_the_whole_days_of_its_range_and_nothing_else():
    from usage.models import UsageDailyRollup, UsageRollup
    from usage.rollups import rebuild_rollups

    tenant = make_tenant()
    store(*mixed_rows(tenant, start=T0, count=40, step=timedelta(minutes=7)))  # May 4
    later = T0 + timedelta(days=3)  # May 7
    store(*mixed_rows(tenant, start=later, count=3, step=timedelta(hours=1)))
    good = rollups_now(tenant)
    for model in (UsageRollup, UsageDailyRollup):
        model.objects.filter(account_id=tenant.account_id).update(requests=0)

    written = rebuild_rollups(start=T0 + timedelta(hours=1), end=T0 + timedelta(hours=3))

    after = rollups_now(tenant)
    may_4 = {r for r in good if r[1].date() == T0.date()}
    assert written == len([r for r in may_4 if r[0] == "hour"])
    assert may_4 <= after  # the whole day holding the range is exact again
    assert {r[9] for r in after if r[1].date() == later.date()} == {0}  # May 7 left as it was


def test_the_rebuild_command_recomputes_the_days_it_is_given():
    import io

    from django.core.management import call_command

    from usage.models import UsageDailyRollup

    tenant = make_tenant()
    store(*mixed_rows(tenant, start=T0, count=40, step=timedelta(minutes=7)))
    good = rollups_now(tenant)
    UsageDailyRollup.objects.filter(account_id=tenant.account_id).update(tokens_out=0)
    out = io.StringIO()

    call_command("rebuild_usage_rollups", "--from", "2026-05-04", "--to", "2026-05-05", stdout=out)

    assert rollups_now(tenant) == good
    assert (
        out.getvalue().strip()
        == f"{len([r for r in good if r[0] == 'hour'])} hourly rollup rows written"
    )
