"""Partitions by time on PostgreSQL: the periods, the names, and the moves every partitioned
table shares (the usage log's in usage/partitions.py, the billing tables' in
billing/partitions.py).

A table partitioned here has one partition per UTC month, named <table>_pYYYY_MM, or per
slice of a month, named <table>_pYYYY_MM_DD after its first day: a month has eight slices,
starting on the 1st, 5th, 9th, 13th, 17th, 21st, 25th and 28th (every month has a 28th, so
the last is 1 to 4 days), so slices never straddle a month and a table can
go from months to slices without a partition overlapping another. <table>_default takes a
row whose period has no partition yet, so its insert never fails. What a period's bounds are
(a time range, a range of time-ordered ids) is the caller's to say.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from django.db import connection, transaction

log = logging.getLogger(__name__)

# Attaching and detaching wait for readers of the parent, and writers queue behind the wait:
# give up instead (the task retries), so a long report never stalls the writers for long.
LOCK_TIMEOUT = "5s"


def month_of(moment: datetime) -> datetime:
    """The first instant of the UTC month holding `moment` (naive: taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    return datetime(moment.year, moment.month, 1, tzinfo=UTC)


def add_months(month: datetime, count: int) -> datetime:
    """The month `count` months after `month` (a first of the month)."""
    index = month.year * 12 + month.month - 1 + count
    return month.replace(year=index // 12, month=index % 12 + 1)


def months_between(start: datetime, end: datetime) -> list[datetime]:
    """The UTC months overlapping [start, end)."""
    end = end if end.tzinfo else end.replace(tzinfo=UTC)
    months = []
    month = month_of(start)
    while month < end:
        months.append(month)
        month = add_months(month, 1)
    return months


# The days a month's slices start on: the last runs from the 28th to the month's end.
SLICE_DAYS = (1, 5, 9, 13, 17, 21, 25, 28)


def slice_of(moment: datetime) -> datetime:
    """The first instant of the UTC slice holding `moment` (naive: taken as UTC)."""
    month = month_of(moment)
    day = moment.astimezone(UTC).day if moment.tzinfo else moment.day
    return month.replace(day=max(d for d in SLICE_DAYS if d <= day))


def next_slice(start: datetime) -> datetime:
    """The slice after the one starting at `start` (a slice's first instant)."""
    later = [d for d in SLICE_DAYS if d > start.day]
    return start.replace(day=later[0]) if later else add_months(start.replace(day=1), 1)


def slices_between(start: datetime, end: datetime) -> list[datetime]:
    """The UTC slices overlapping [start, end)."""
    end = end if end.tzinfo else end.replace(tzinfo=UTC)
    slices = []
    piece = slice_of(start)
    while piece < end:
        slices.append(piece)
        piece = next_slice(piece)
    return slices


def partition_name(table: str, month: datetime) -> str:
    return f"{table}_p{month:%Y_%m}"


def slice_partition_name(table: str, start: datetime) -> str:
    return f"{table}_p{start:%Y_%m_%d}"


def span_of_partition(table: str, name: str) -> tuple[datetime, datetime] | None:
    """The [start, end) a month's or a slice's partition holds, by its name (None: the
    default, or a table someone else attached)."""
    if (month := month_of_partition(table, name)) is not None:
        return month, add_months(month, 1)
    try:
        start = datetime.strptime(name.removeprefix(f"{table}_p"), "%Y_%m_%d").replace(tzinfo=UTC)
    except ValueError:
        return None
    if start.day not in SLICE_DAYS or name != slice_partition_name(table, start):
        return None
    return start, next_slice(start)


def default_partition(table: str) -> str:
    return f"{table}_default"


def month_of_partition(table: str, name: str) -> datetime | None:
    """The month a partition named by partition_name holds (None: the default, or a table
    someone else attached)."""
    try:
        moment = datetime.strptime(name.removeprefix(f"{table}_p"), "%Y_%m")
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if name == partition_name(table, moment) else None


def is_partitioned(table: str) -> bool:
    """Whether `table` is a partitioned table here (PostgreSQL, migrated)."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [table])
        row = cursor.fetchone()
    return row is not None and row[0] == "p"


def lock(cursor, key: int) -> None:
    """Take the transaction-level advisory lock `key` (runs on several workers take turns),
    and give up on a table lock not granted within LOCK_TIMEOUT."""
    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])
    cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")


def partitions_of(cursor, table: str) -> set[str]:
    cursor.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = %s::regclass",
        [table],
    )
    return {name for (name,) in cursor.fetchall()}


def columns_of(cursor, table: str) -> str:
    """The table's columns, quoted, comma-separated, in their order."""
    cursor.execute(
        "SELECT quote_ident(attname) FROM pg_attribute WHERE attrelid = %s::regclass"
        " AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        [table],
    )
    return ", ".join(name for (name,) in cursor.fetchall())


def create_partition(
    cursor, table: str, month: datetime, *, column: str, start: str, end: str, name: str = ""
) -> int:
    """Create the month's partition of `table` (named `name`, default partition_name's)
    holding `column` in [start, end) (SQL literals), moving the rows of that range out of the
    default partition into it first; return how many moved.

    The table is made on its own and then attached: attaching takes a lighter lock on the
    parent than CREATE TABLE ... PARTITION OF, so writers go on meanwhile; the default
    partition stays locked from the move to the attach, so no row of the range lands there in
    between.
    """
    name, default = name or partition_name(table, month), default_partition(table)
    cursor.execute(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
    moved = 0
    if default in partitions_of(cursor, table):
        cursor.execute(f"LOCK TABLE {default} IN ACCESS EXCLUSIVE MODE")
        columns = columns_of(cursor, table)
        cursor.execute(
            f"WITH moved AS (DELETE FROM {default} WHERE {column} >= {start}"
            f" AND {column} < {end} RETURNING {columns})"
            f" INSERT INTO {name} ({columns}) SELECT {columns} FROM moved"
        )
        moved = max(cursor.rowcount, 0)
    cursor.execute(
        f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM ({start}) TO ({end})"
    )
    return moved


def drop_partition(cursor, table: str, name: str) -> None:
    cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {name}")
    cursor.execute(f"DROP TABLE {name}")


def ensure_months(
    tables: tuple[str, ...],
    months: list[datetime],
    *,
    lock_key: int,
    column: str,
    bounds: Callable[[datetime], tuple[str, str]],
    name: Callable[[str, datetime], str] = partition_name,
) -> list[str]:
    """Create each table's partitions of `months` (or of slices, given their `name`) that are
    missing, under the tables' advisory lock; return their names. `bounds(month)`: the
    period's [start, end) as SQL literals of `column`. Idempotent, and safe to run
    concurrently."""
    created: list[str] = []
    with transaction.atomic(), connection.cursor() as cursor:
        lock(cursor, lock_key)
        for table in tables:
            existing = partitions_of(cursor, table)
            for month in months:
                partition = name(table, month)
                if partition in existing:
                    continue
                start, end = bounds(month)
                moved = create_partition(
                    cursor, table, month, column=column, start=start, end=end, name=partition
                )
                if moved:
                    log.warning(
                        "moved %d row(s) of %s out of its default partition", moved, partition
                    )
                created.append(partition)
    if created:
        log.info("created partitions %s", ", ".join(created))
    return created
