"""Hourly usage rollups: kept exactly equal to the usage rows, and audited against them.

The writer adds each batch of stored rows to its hours' rollups in the batch's own
transaction (`add_to_rollups`), so a rollup can never count a row that is not stored, nor
miss one that is. The rows are the truth while they are kept: `reconcile_rollups` compares
every closed day's rollups with its rows (once per day, under a cursor) and rebuilds a day
that differs; `rebuild_rollups` recomputes any range from the rows (the migration's backfill,
a repair, retention's last check before a partition is dropped).

Upserts take row locks in one order (the unique key's), so concurrent writers never deadlock
on them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.db.models import Count, Q, Sum, Value
from django.db.models.functions import Coalesce, TruncHour

from core.db import values_placeholders
from core.metrics import ROLLUP_DRIFT
from core.usage_record import UsageRecord
from usage.models import ROLLUP_KEY, ROLLUP_SUMS, UsageCursor, UsageLog, UsageRollup

log = logging.getLogger(__name__)

RECONCILE_CURSOR = "rollups"
# A day's rollups are audited this long after it ends: rows journaled late (a dead replica's,
# claimed by the survivors) are stored by then.
CLOSE_AFTER = timedelta(hours=1)
DAYS_PER_RUN = 31
UPSERT_CHUNK = 200  # rollup rows per statement: well under SQLite's parameter limit

COLUMNS = ("hour", *ROLLUP_KEY, "requests", "errors", *ROLLUP_SUMS)


def hour_of(moment: datetime) -> datetime:
    """The UTC hour holding `moment`."""
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def next_hour(moment: datetime) -> datetime:
    """The first hour boundary at or after `moment`."""
    floor = hour_of(moment)
    return floor if floor == moment else floor + timedelta(hours=1)


def add_to_rollups(records: Iterable[UsageRecord]) -> int:
    """Add freshly stored records to their hours' rollups, in the caller's transaction.

    Returns the rollup rows touched.
    """
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
            sums = buckets[key] = [0] * (2 + len(ROLLUP_SUMS))
        sums[0] += 1
        sums[1] += record.status != 200
        for i, name in enumerate(ROLLUP_SUMS, start=2):
            sums[i] += getattr(record, name) or 0
    rows = sorted(buckets.items(), key=lambda item: _lock_order(item[0]))
    for start in range(0, len(rows), UPSERT_CHUNK):
        _upsert(rows[start : start + UPSERT_CHUNK])
    return len(rows)


def _lock_order(key: tuple) -> tuple:
    hour, account_id, *rest = key
    return (account_id, hour, *rest)  # the unique index's column order


def _upsert(rows: list[tuple[tuple, list[int]]]) -> None:
    table = UsageRollup._meta.db_table
    quote = connection.ops.quote_name
    columns = [quote(UsageRollup._meta.get_field(name).column) for name in COLUMNS]
    conflict = [
        quote(UsageRollup._meta.get_field(name).column)
        for name in UsageRollup._meta.constraints[0].fields
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
    *, start: datetime | None = None, end: datetime | None = None, log_model=UsageLog
):
    """The rollups the usage rows of hours in [start, end) make, as a values() queryset
    whose columns are COLUMNS in order."""
    rows = log_model.objects.all()
    if start is not None:
        rows = rows.filter(created_at__gte=start)
    if end is not None:
        rows = rows.filter(created_at__lt=end)
    key = {
        "r_hour": TruncHour("created_at", tzinfo=UTC),
        "r_account_id": Coalesce("account_id", Value(0)),
        "r_group_id": Coalesce("group_id", Value(0)),
        "r_api_key_id": Coalesce("api_key_id", Value(0)),
        "r_endpoint": Coalesce("endpoint", Value("")),
        "r_model_requested": Coalesce("model_requested", Value("")),
        "r_model_served": Coalesce("model_served", Value("")),
        "r_served_by": Coalesce("served_by", Value("")),
    }
    sums = {f"r_{name}": Coalesce(Sum(name), Value(0)) for name in ROLLUP_SUMS}
    return (
        rows.order_by()
        .values(**key)
        .annotate(r_requests=Count("id"), r_errors=Count("id", filter=~Q(status=200)), **sums)
        .values_list(*(f"r_{name}" for name in COLUMNS))
    )


def rebuild_rollups(
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    log_model=UsageLog,
    rollup_model=UsageRollup,
) -> int:
    """Recompute the rollups of the hours in [start, end) (on the hour) from the rows, in one
    statement and transaction. Returns the rollup rows written.

    Writers adding rows to those hours meanwhile wait for it (PostgreSQL: a table lock that
    lets readers through), so no row is counted twice or lost.
    """
    select_sql, params = rollups_from_rows(
        start=start, end=end, log_model=log_model
    ).query.sql_with_params()
    table = rollup_model._meta.db_table
    quote = connection.ops.quote_name
    columns = ", ".join(quote(rollup_model._meta.get_field(name).column) for name in COLUMNS)
    old = rollup_model.objects.all()
    if start is not None:
        old = old.filter(hour__gte=start)
    if end is not None:
        old = old.filter(hour__lt=end)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE")
        old.delete()
        with connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO {table} ({columns}) {select_sql}", params)
            return cursor.rowcount


def _day_differs(day: datetime) -> bool:
    end = day + timedelta(days=1)
    expected = set(rollups_from_rows(start=day, end=end))
    kept = set(
        UsageRollup.objects.filter(hour__gte=day, hour__lt=end)
        .exclude(requests=0)
        .values_list(*COLUMNS)
    )
    return expected != kept


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
