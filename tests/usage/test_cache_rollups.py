"""The rollups keep the response cache's totals exactly as the rows say: as rows are stored,
when rebuilt from the rows, and when migration 0018 fills the columns it adds."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta

import pytest
from django.apps import apps

from tests.support.tenants import make_tenant
from tests.support.usage import journal_row, store

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 2, 3, 10, 15, tzinfo=UTC)
CACHE_TOTALS = (
    "cache_hits",
    "cache_misses",
    "cache_bypasses",
    "cache_hit_cost_micro",
    "cache_saved_micro",
)


def rows_of(tenant) -> list[dict]:
    def row(minutes: int, status: str, cost: int, uncached: int = 0) -> dict:
        return journal_row(
            group_id=tenant.group_id,
            account_id=tenant.account_id,
            api_key_id=tenant.api_key_id,
            created_at=T0 + timedelta(minutes=minutes),
            cache_status=status,
            provider_cost_micro=cost,
            uncached_cost_micro=uncached,
        )

    return [
        row(0, "hit", 12, 120),
        row(5, "hit", 3, 30),
        row(70, "hit", 7, 70),  # the next hour
        row(10, "miss", 120),
        row(15, "bypass", 40),
        row(20, "", 9),
    ]


def cache_rollups(tenant) -> dict[str, set[tuple]]:
    from usage.models import UsageDailyRollup, UsageRollup

    mine = {"account_id": tenant.account_id}
    return {
        "hours": set(UsageRollup.objects.filter(**mine).values_list("hour", *CACHE_TOTALS)),
        "days": set(UsageDailyRollup.objects.filter(**mine).values_list("day", *CACHE_TOTALS)),
    }


EXPECTED = {
    "hours": {
        (T0.replace(minute=0), 2, 1, 1, 15, 135),
        (T0.replace(minute=0) + timedelta(hours=1), 1, 0, 0, 7, 63),
    },
    "days": {(T0.replace(hour=0, minute=0), 3, 1, 1, 22, 198)},
}


def test_stored_rows_add_their_cache_totals_to_their_hours_and_days():
    tenant = make_tenant()

    store(*rows_of(tenant))

    assert cache_rollups(tenant) == EXPECTED


def test_a_rebuild_from_the_rows_gives_the_same_cache_totals():
    from usage.rollups import rebuild_rollups

    tenant = make_tenant()
    store(*rows_of(tenant))

    rebuild_rollups(start=T0, end=T0 + timedelta(hours=2))

    assert cache_rollups(tenant) == EXPECTED


def test_migration_0018_fills_the_cache_totals_of_rows_stored_before_it():
    from usage.models import UsageDailyRollup, UsageRollup

    tenant = make_tenant()
    store(*rows_of(tenant))
    # As the rollups were before 0018 added the columns: zero.
    for model in (UsageRollup, UsageDailyRollup):
        model.objects.update(**dict.fromkeys(CACHE_TOTALS, 0))
    migration = importlib.import_module("usage.migrations.0018_rollup_cache_totals")

    migration.backfill(apps, None)

    assert cache_rollups(tenant) == EXPECTED
