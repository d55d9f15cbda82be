"""Usage rollups per hour and per day: kept exactly equal to the usage rows, and audited.

The writer adds each batch of stored rows to its hours' and days' rollups in the batch's own
transaction (`add_to_rollups`), so a rollup can never count a row that is not stored, nor
miss one that is. A range is read from the days it holds whole, the hours it holds whole
around them, and the rows only at its partial hours (usage/selectors.py).

The rows are the truth while they are kept: `reconcile_rollups` compares every closed day's
rollups with its rows (once per day, under a cursor) and rebuilds a day that differs;
`rebuild_rollups` recomputes whole days from the rows (the migration's backfill, a repair).
Retention drops only rows of days audited so (`audited_until`).

Besides the sums of same-named usage columns (ROLLUP_SUMS), a rollup keeps the response
cache's totals (CACHE_COLUMNS): its rows by cache status, and of its hits what they were
charged and what they saved, so hit rates and money saved read as fast as spend.

Upserts take row locks in one order (the unique key's), so concurrent writers never deadlock
on them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.db.models import Aggregate, Count, F, Q, Sum, Value
from django.db.models.expressions import Combinable
from django.db.models.functions import Coalesce, TruncDay, TruncHour

from core.db import values_placeholders
from core.metrics import ROLLUP_DRIFT
from core.usage_record import UsageRecord
from usage.models import (
    ROLLUP_KEY,
    ROLLUP_SUMS,
    UsageCursor,
    UsageDailyRollup,
    UsageLog,
    UsageRollup,
)
from usage.tags import add_to_tag_rollups, rebuild_tag_rollups, tag_rollups_differ

log = logging.getLogger(__name__)

RECONCILE_CURSOR = "rollups"
# A day's rollups are audited this long after it ends: rows journaled late (a dead replica's,
# claimed by the survivors) are stored by then.
CLOSE_AFTER = timedelta(hours=1)
DAYS_PER_RUN = 31
UPSERT_CHUNK = 200  # rollup rows per statement: well under SQLite's parameter limit

HIT, MISS, BYPASS = "hit", "miss", "bypass"  # a usage row's cache_status on the cached routes
# What a rollup keeps of the response cache, each from its rows: how many were hits, misses
# and bypasses; the hits' price (provider_cost_micro); and what the hits saved (the vendor
# call each replayed, uncached_cost_micro, less its price).
CACHE_COLUMNS = (
    "cache_hits",
    "cache_misses",
    "cache_bypasses",
    "cache_hit_cost_micro",
    "cache_saved_micro",
)
TOTAL_COLUMNS = ("requests", "errors", *ROLLUP_SUMS, *CACHE_COLUMNS)
COLUMNS = ("hour", *ROLLUP_KEY, *TOTAL_COLUMNS)  # an hourly rollup's; a daily one has `day`


def cache_sums(record: UsageRecord) -> tuple[int, ...]:
    """One record's share of CACHE_COLUMNS."""
    status = record.cache_status
    if status != HIT:
        return (0, int(status == MISS), int(status == BYPASS), 0, 0)
    cost = record.provider_cost_micro or 0
    return (1, 0, 0, cost, (record.uncached_cost_micro or 0) - cost)


def cache_aggregates() -> dict[str, Aggregate | Combinable]:
    """CACHE_COLUMNS as aggregates over usage rows (each 0 over none)."""
    hit = Q(cache_status=HIT)
    saved = F("uncached_cost_micro") - F("provider_cost_micro")
    return {
        "cache_hits": Count("id", filter=hit),
        "cache_misses": Count("id", filter=Q(cache_status=MISS)),
        "cache_bypasses": Count("id", filter=Q(cache_status=BYPASS)),
        "cache_hit_cost_micro": Coalesce(Sum("provider_cost_micro", filter=hit), Value(0)),
        "cache_saved_micro": Coalesce(Sum(saved, filter=hit), Value(0)),
    }


def _has_field(model, name: str) -> bool:
    return any(field.name == name for field in model._meta.fields)


def _totals_of(model) -> tuple[str, ...]:
    """The TOTAL_COLUMNS a rollup model has: a historical one (an earlier migration's
    backfill) may predate the cache's."""
    return tuple(name for name in TOTAL_COLUMNS if _has_field(model, name))


def hour_of(moment: datetime) -> datetime:
    """The UTC hour holding `moment`."""
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def next_hour(moment: datetime) -> datetime:
    """The first hour boundary at or after `moment`."""
    floor = hour_of(moment)
    return floor if floor == moment else floor + timedelta(hours=1)


def day_of(moment: datetime) -> datetime:
    """The 00:00 UTC of the day holding `moment`."""
    return hour_of(moment).replace(hour=0)


def next_day(moment: datetime) -> datetime:
    """The first UTC midnight at or after `moment`."""
    floor = day_of(moment)
    return floor if floor == moment else floor + timedelta(days=1)


def add_to_rollups(records: Iterable[UsageRecord], *, sign: int = 1) -> int:
    """Add freshly stored records to their hours' rollups, in the caller's transaction
    (`sign` -1: take deleted ones out).

    Returns the rollup rows touched.
    """
    records = list(records)
    buckets: dict[tuple, list[int]] = {}
    for record in records:
        key = (
            hour_of(record.created_at),
            record.account_id or 0,
            record.group_id or 0,
            record.api_key_id or 0,
            record.endpoint,
            record.model_requested,
            record.model_served,
            record.served_by,
        )
        sums = buckets.get(key)
        if sums is None:
            sums = buckets[key] = [0] * len(TOTAL_COLUMNS)
        sums[0] += sign
        sums[1] += sign * (record.status != 200)
        for i, name in enumerate(ROLLUP_SUMS, start=2):
            sums[i] += sign * (getattr(record, name) or 0)
        for i, value in enumerate(cache_sums(record), start=2 + len(ROLLUP_SUMS)):
            sums[i] += sign * value
    days: dict[tuple, list[int]] = {}
    for (hour, *rest), sums in buckets.items():
        day = days.setdefault((hour.replace(hour=0), *rest), [0] * len(sums))
        for i, value in enumerate(sums):
            day[i] += value
    touched = 0
    for model, grain in ((UsageRollup, buckets), (UsageDailyRollup, days)):
        rows = sorted(grain.items(), key=lambda item: _lock_order(item[0]))
        for start in range(0, len(rows), UPSERT_CHUNK):
            _upsert(model, rows[start : start + UPSERT_CHUNK])
        touched += len(rows)
    # After the others: a rebuild (which locks those tables first) never waits on these.
    return touched + add_to_tag_rollups(records, sign=sign)


def _lock_order(key: tuple) -> tuple:
    hour, account_id, *rest = key
    return (account_id, hour, *rest)  # the unique index's column order


def time_field(model) -> str:
    """The rollup model's time column: "hour" or "day" (historical models in migrations too)."""
    return "hour" if _has_field(model, "hour") else "day"


def _columns(model) -> tuple[str, ...]:
    return (time_field(model), *ROLLUP_KEY, *_totals_of(model))


def _upsert(model, rows: list[tuple[tuple, list[int]]]) -> None:
    table = model._meta.db_table
    quote = connection.ops.quote_name
    columns = [quote(model._meta.get_field(name).column) for name in _columns(model)]
    conflict = [
        quote(model._meta.get_field(name).column) for name in model._meta.constraints[0].fields
    ]
    added = columns[1 + len(ROLLUP_KEY) :]
    adapt = connection.ops.adapt_datetimefield_value
    params: list = []
    for (hour, *key), sums in rows:
        params += [adapt(hour), *key, *sums]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)})"
            f" VALUES {values_placeholders(len(rows), len(columns))}"
            f" ON CONFLICT ({', '.join(conflict)}) DO UPDATE SET "
            + ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in added),
            params,
        )


def rollups_from_rows(
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    grain: str = "hour",
    log_model=UsageLog,
):
    """The rollups (per "hour" or "day") the usage rows in [start, end) make, as a values
    queryset whose columns are COLUMNS in order (the time first, whatever the grain; without
    CACHE_COLUMNS for a historical log model from before the cache)."""
    rows = log_model.objects.all()
    if start is not None:
        rows = rows.filter(created_at__gte=start)
    if end is not None:
        rows = rows.filter(created_at__lt=end)
    truncate = TruncHour if grain == "hour" else TruncDay
    key = {
        "r_time": truncate("created_at", tzinfo=UTC),
        "r_account_id": Coalesce("account_id", Value(0)),
        "r_group_id": Coalesce("group_id", Value(0)),
        "r_api_key_id": Coalesce("api_key_id", Value(0)),
        **{f"r_{name}": F(name) for name in ROLLUP_KEY[3:]},
    }
    sums: dict[str, Aggregate | Combinable] = {
        f"r_{name}": Coalesce(Sum(name), Value(0)) for name in ROLLUP_SUMS
    }
    names: tuple[str, ...] = COLUMNS[1:]
    if _has_field(log_model, "cache_status"):
        sums |= {f"r_{name}": aggregate for name, aggregate in cache_aggregates().items()}
    else:
        names = names[: -len(CACHE_COLUMNS)]
    return (
        rows.order_by()
        .values(**key)
        .annotate(r_requests=Count("id"), r_errors=Count("id", filter=~Q(status=200)), **sums)
        .values_list("r_time", *(f"r_{name}" for name in names))
    )


def _days_from_hours(*, start: datetime | None, end: datetime | None, hourly_model):
    """The daily rollups the hourly ones of [start, end) (whole days) add up to."""
    hours = hourly_model.objects.all()
    if start is not None:
        hours = hours.filter(hour__gte=start)
    if end is not None:
        hours = hours.filter(hour__lt=end)
    totals = _totals_of(hourly_model)
    sums = {f"r_{name}": Sum(name) for name in totals}
    return (
        hours.order_by()
        .values(r_time=TruncDay("hour", tzinfo=UTC), **{f"r_{n}": F(n) for n in ROLLUP_KEY})
        .annotate(**sums)
        .values_list("r_time", *(f"r_{name}" for name in (*ROLLUP_KEY, *totals)))
    )


def _insert_select(model, select) -> int:
    sql, params = select.query.sql_with_params()
    quote = connection.ops.quote_name
    columns = ", ".join(quote(model._meta.get_field(name).column) for name in _columns(model))
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {model._meta.db_table} ({columns}) {sql}", params)
        return cursor.rowcount


def rebuild_rollups(
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    log_model=UsageLog,
    hourly_model=UsageRollup,
    daily_model=UsageDailyRollup,
) -> int:
    """Recompute the rollups of the UTC days holding [start, end) from the rows: the hours
    from the rows, the days from the hours, in one transaction. Returns the hourly rollup
    rows written.

    Writers adding rows to those days meanwhile wait for it (PostgreSQL: table locks that
    let readers through), so no row is counted twice or lost.
    """
    start = day_of(start) if start is not None else None
    end = next_day(end) if end is not None else None
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                for model in (hourly_model, daily_model):
                    cursor.execute(f"LOCK TABLE {model._meta.db_table} IN SHARE ROW EXCLUSIVE MODE")
        for model in (hourly_model, daily_model):
            old = model.objects.all()
            time = time_field(model)
            if start is not None:
                old = old.filter(**{f"{time}__gte": start})
            if end is not None:
                old = old.filter(**{f"{time}__lt": end})
            old.delete()
        written = _insert_select(
            hourly_model, rollups_from_rows(start=start, end=end, log_model=log_model)
        )
        _insert_select(
            daily_model, _days_from_hours(start=start, end=end, hourly_model=hourly_model)
        )
        if log_model is UsageLog:  # a migration's historical log may predate tags
            rebuild_tag_rollups(start=start, end=end)
        return written


def _exact(rows) -> set[tuple]:
    """Rollup tuples compared by value (PostgreSQL sums bigints as numerics)."""
    return {tuple(v if isinstance(v, (str, datetime)) else int(v) for v in row) for row in rows}


def _day_differs(day: datetime) -> bool:
    end = day + timedelta(days=1)
    for model, grain in ((UsageRollup, "hour"), (UsageDailyRollup, "day")):
        time = time_field(model)
        expected = _exact(rollups_from_rows(start=day, end=end, grain=grain))
        kept = _exact(
            model.objects.filter(**{f"{time}__gte": day, f"{time}__lt": end})
            .exclude(requests=0)
            .values_list(*_columns(model))
        )
        if expected != kept:
            return True
    return tag_rollups_differ(start=day, end=end)


def reconcile_rollups(*, now: datetime | None = None) -> list[datetime]:
    """Audit each closed day not audited yet: its rollups against its rows, rebuilding a day
    that differs. Returns the days rebuilt (each counted on tollgate_usage_rollup_drift_days).
    """
    now = now or datetime.now(UTC)
    UsageCursor.objects.get_or_create(name=RECONCILE_CURSOR)
    rebuilt: list[datetime] = []
    for _ in range(DAYS_PER_RUN):
        with transaction.atomic():
            cursor = UsageCursor.objects.select_for_update().get(name=RECONCILE_CURSOR)
            day = cursor.position or _first_day()
            if day is None or day + timedelta(days=1) + CLOSE_AFTER > now:
                return rebuilt
            if _day_differs(day):
                rebuild_rollups(start=day, end=day + timedelta(days=1))
                log.warning("usage rollups of %s differed from the rows: rebuilt", day.date())
                ROLLUP_DRIFT.inc()
                rebuilt.append(day)
            cursor.position = day + timedelta(days=1)
            cursor.save(update_fields=["position"])
    return rebuilt


def _first_day() -> datetime | None:
    first = UsageLog.objects.order_by("created_at").values_list("created_at", flat=True).first()
    if first is None:
        return None
    return hour_of(first).replace(hour=0)


def audited_until() -> datetime | None:
    """The end of the last day whose rollups were audited against its rows (None: none yet).

    Retention drops only rows older than this: their hours' rollups are known to be exact.
    """
    cursor = UsageCursor.objects.filter(name=RECONCILE_CURSOR).first()
    return cursor.position if cursor else None
