"""Request tags in the usage books: a tag's rows, and its totals per hour (UsageTagRollup).

A usage row keeps its tags as a JSON list (UsageLog.tags). On PostgreSQL that is jsonb and
a GIN index (jsonb_path_ops, usage 0019) finds a tag's rows by containment (`@>`); the
planner combines it with the (account_id, created_at) index. SQLite (the embedded mode) has
no such index: a tag's rows are found by reading each row's list with json_each.

Totals per tag come from the hourly tag rollups, kept in the writer's transaction beside the
others (usage/rollups.py calls `add_to_tag_rollups`), and from the rows only at a range's
partial hours. A row with several tags counts under each, so the tags' totals do not add up
to the account's, and a row without tags is under none.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.db.models import BooleanField, QuerySet, Sum
from django.db.models.expressions import RawSQL

from core.db import values_placeholders
from core.money import spend_micro
from core.usage_record import UsageRecord
from usage.models import TAG_SUMS, UsageLog, UsageTagRollup

UPSERT_CHUNK = 200  # rollup rows per statement: well under SQLite's parameter limit
TOTAL_COLUMNS = ("requests", "errors", *TAG_SUMS)


def tagged(logs: QuerySet[UsageLog], tag: str) -> QuerySet[UsageLog]:
    """Return the rows of `logs` that carry `tag`."""
    if connection.vendor == "postgresql":
        return logs.filter(tags__contains=[tag])  # jsonb @>, served by the GIN index
    table = connection.ops.quote_name(UsageLog._meta.db_table)
    carries = RawSQL(
        f"EXISTS (SELECT 1 FROM json_each({table}.tags) WHERE json_each.value = %s)",
        [tag],
        output_field=BooleanField(),
    )
    return logs.alias(carries_tag=carries).filter(carries_tag=True)


def hour_of(moment: datetime) -> datetime:
    """The UTC hour holding `moment` (as usage/rollups.py's, which imports this module)."""
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def next_hour(moment: datetime) -> datetime:
    floor = hour_of(moment)
    return floor if floor == moment else floor + timedelta(hours=1)


def add_to_tag_rollups(records: Iterable[UsageRecord], *, sign: int = 1) -> int:
    """Add stored records to their tags' hourly rollups, in the caller's transaction (`sign`
    -1: take deleted ones out). Returns the rollup rows touched."""
    buckets: dict[tuple, list[int]] = {}
    for record in records:
        if not record.tags or record.account_id is None:
            continue
        hour = hour_of(record.created_at)
        for tag in record.tags:
            sums = buckets.setdefault((record.account_id, hour, tag), [0] * len(TOTAL_COLUMNS))
            sums[0] += sign
            sums[1] += sign * (record.status != 200)
            for i, name in enumerate(TAG_SUMS, start=2):
                sums[i] += sign * (getattr(record, name) or 0)
    rows = sorted(buckets.items())  # the unique key's order: writers never deadlock
    for start in range(0, len(rows), UPSERT_CHUNK):
        _upsert(rows[start : start + UPSERT_CHUNK])
    return len(rows)


def _upsert(rows: list[tuple[tuple, list[int]]]) -> None:
    table = UsageTagRollup._meta.db_table
    columns = ("account_id", "hour", "tag", *TOTAL_COLUMNS)
    adapt = connection.ops.adapt_datetimefield_value
    params: list = []
    for (account_id, hour, tag), sums in rows:
        params += [account_id, adapt(hour), tag, *sums]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)})"
            f" VALUES {values_placeholders(len(rows), len(columns))}"
            " ON CONFLICT (account_id, hour, tag) DO UPDATE SET "
            + ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in TOTAL_COLUMNS),
            params,
        )


def rebuild_tag_rollups(*, start: datetime | None, end: datetime | None) -> int:
    """Recompute the tag rollups of the hours in [start, end) from the rows (a repair, and
    usage/rollups.py's rebuild of whole days). Returns the rollup rows written."""
    old = UsageTagRollup.objects.all()
    if start is not None:
        old = old.filter(hour__gte=start)
    if end is not None:
        old = old.filter(hour__lt=end)
    old.delete()
    select, params = _rollups_from_rows(start=start, end=end)
    columns = ", ".join(("account_id", "hour", "tag", *TOTAL_COLUMNS))
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {UsageTagRollup._meta.db_table} ({columns}) {select}", params)
        return cursor.rowcount


def tag_rollups_differ(*, start: datetime, end: datetime) -> bool:
    """Whether the tag rollups of the hours in [start, end) disagree with the rows
    (usage/rollups.py's audit of a closed day)."""
    select, params = _rollups_from_rows(start=start, end=end)
    with connection.cursor() as cursor:
        cursor.execute(select, params)
        expected = {_exact(row) for row in cursor.fetchall()}
    kept = (
        UsageTagRollup.objects.filter(hour__gte=start, hour__lt=end)
        .exclude(requests=0)
        .values_list("account_id", "hour", "tag", *TOTAL_COLUMNS)
    )
    return expected != {_exact(row) for row in kept}


def _rollups_from_rows(*, start: datetime | None, end: datetime | None) -> tuple[str, list]:
    """The SELECT of the tag rollups of [start, end) as the rows say: (account_id, hour, tag,
    *TOTAL_COLUMNS) each."""
    sums = ", ".join(f"COALESCE(SUM(u.{name}), 0)" for name in TAG_SUMS)
    select, params = _rows_per_tag(
        accounts=None, start=start, end=end, extra=("u.account_id", _hour_sql())
    )
    return (
        f"SELECT u.account_id, {_hour_sql()}, {_tag_sql()}, COUNT(*),"
        f" SUM(CASE WHEN u.status <> 200 THEN 1 ELSE 0 END), {sums} {select}",
        params,
    )


def _exact(row: Sequence) -> tuple:
    """A rollup tuple compared by value: the hour as an aware UTC datetime (SQLite's
    expression gives text), the sums as ints (PostgreSQL sums bigints as numerics)."""
    account_id, hour, tag, *totals = row
    if isinstance(hour, str):
        hour = datetime.fromisoformat(hour)
    hour = hour.replace(tzinfo=UTC) if hour.tzinfo is None else hour.astimezone(UTC)
    return (account_id, hour, tag, *(int(total) for total in totals))


def _tag_sql() -> str:
    """One of a row's tags, as `_rows_per_tag` unpacks them."""
    return "t.tag" if connection.vendor == "postgresql" else "t.value"


def _hour_sql() -> str:
    if connection.vendor == "postgresql":
        return "date_trunc('hour', u.created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
    return "strftime('%%Y-%%m-%%d %%H:00:00', u.created_at)"


def _rows_per_tag(
    *,
    accounts: Sequence[int] | None,
    start: datetime | None,
    end: datetime | None,
    extra: tuple[str, ...] = (),
) -> tuple[str, list]:
    """`FROM ... WHERE ... GROUP BY` of the rows in [start, end), one per (row, tag): each
    row's tags unpacked (`_tag_sql`), grouped by tag (and `extra`)."""
    table = connection.ops.quote_name(UsageLog._meta.db_table)
    if connection.vendor == "postgresql":
        source = f"{table} u CROSS JOIN LATERAL jsonb_array_elements_text(u.tags) AS t(tag)"
    else:
        source = f"{table} u, json_each(u.tags) t"
    where: list[str] = ["u.account_id IS NOT NULL"]
    params: list[object] = []
    if accounts is not None:
        where.append(f"u.account_id IN ({', '.join(['%s'] * len(accounts))})")
        params += list(accounts)
    adapt = connection.ops.adapt_datetimefield_value
    if start is not None:
        where.append("u.created_at >= %s")
        params.append(adapt(start))
    if end is not None:
        where.append("u.created_at < %s")
        params.append(adapt(end))
    group = ", ".join((_tag_sql(), *extra))
    return f"FROM {source} WHERE {' AND '.join(where)} GROUP BY {group}", params


def _from_rows(accounts: Sequence[int], start: datetime | None, end: datetime | None) -> list:
    sums = ", ".join(f"COALESCE(SUM(u.{name}), 0)" for name in TAG_SUMS)
    select, params = _rows_per_tag(accounts=accounts, start=start, end=end)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {_tag_sql()}, COUNT(*),"
            f" SUM(CASE WHEN u.status <> 200 THEN 1 ELSE 0 END), {sums} {select}",
            params,
        )
        return cursor.fetchall()


def _from_rollups(accounts: Sequence[int], start: datetime | None, end: datetime | None) -> list:
    rollups = UsageTagRollup.objects.filter(account_id__in=list(accounts))
    if start is not None:
        rollups = rollups.filter(hour__gte=start)
    if end is not None:
        rollups = rollups.filter(hour__lt=end)
    return list(
        rollups.order_by()
        .values("tag")
        .annotate(**{f"t_{name}": Sum(name) for name in TOTAL_COLUMNS})
        .values_list("tag", *(f"t_{name}" for name in TOTAL_COLUMNS))
    )


def tag_totals(
    *, accounts: Sequence[int], start: datetime | None = None, end: datetime | None = None
) -> list[dict]:
    """Return the accounts' totals per tag over [start, end) (open bounds: all), by tag:
    whole hours from the tag rollups, partial hours at either end from the rows. Each
    dict: tag, requests, errors, TAG_SUMS, and spend_micro (cost plus bandwidth)."""
    if not accounts:
        return []
    lo = next_hour(start) if start is not None else None
    hi = hour_of(end) if end is not None else None
    parts: list = []
    if lo is not None and hi is not None and lo >= hi:
        parts += _from_rows(accounts, start, end)
    else:
        if start is not None and start != lo:
            parts += _from_rows(accounts, start, lo)
        if end is not None and end != hi:
            parts += _from_rows(accounts, hi, end)
        parts += _from_rollups(accounts, lo, hi)
    merged: dict[str, list[int]] = {}
    for tag, *sums in parts:
        into = merged.setdefault(tag, [0] * len(TOTAL_COLUMNS))
        for i, value in enumerate(sums):
            into[i] += int(value or 0)
    out = []
    for tag in sorted(merged):
        totals = dict(zip(TOTAL_COLUMNS, merged[tag], strict=True))
        if not totals["requests"]:
            continue
        totals["spend_micro"] = spend_micro(
            cost_micro=totals["provider_cost_micro"],
            bandwidth_micro=totals["bandwidth_charge_micro"],
        )
        out.append({"tag": tag, **totals})
    return out
