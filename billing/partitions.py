"""Partitions of the per-request billing tables by slice of a month, and their retention.

On PostgreSQL billing_spendhold, billing_reservation and billing_settledrequest are
partitioned by RANGE of request_id (migration billing 0007, collation "C"): request ids are
time-ordered (core/ids.py), so a period's partition holds the ids minted in it, from
time_prefix(start) up to time_prefix(end). The partition key is the request id itself, so
the unique keys on it (one hold, one settled marker per request) and every ON CONFLICT
(request_id) in billing/ledger/ hold across partitions: a request is still charged once. A
created_at key could not give that: each inserter stamps its own.

The period is a slice of a month (core/partitions.py: eight, of 4 days but the last, from the
28th), not the month: these rows are working state whose use ends days after the request
(settlement, the reaper, reconciliation), while the request's record of use, its receipt and
its ledger entries stay. With a week of retention a month's partition kept 7 to 38 days of
rows; a slice keeps 7 to 11. Databases partitioned by month before (billing 0007,
0014 split the empty ones) keep their monthly partitions until retention drops them; no
slice is made inside one.

A request's hold, reservations and marker share its id, so they sit in partitions of the
same period and go together. Ids minted before the change (uuid4: random first digits) and
any id outside a partition's range live in <table>_default.

Partitions are only ever made for this slice and later (`ensure_partitions` clamps), so an
old random id that falls in a slice's range sits in a slice later than its own, never an
earlier one: nothing is dropped before it is due.

Beat's billing.ensure_partitions makes them this slice through two months ahead. Retention
(`apply_retention`, TOLLGATE_BILLING_STATE_RETENTION_DAYS, beat's billing.apply_retention)
drops a period's three partitions once it ended before the cutoff and none of its holds or
reservations is still open (a request's tag holds, in a table of their own, go with its
closed hold); the cutoff is never less than MIN_RETENTION back, so a late reconciliation
always finds a request's settled marker. In the default partition, and
on SQLite (no partitions), the closed rows before the cutoff are deleted in batches. Ledger
entries are kept: they are the balances' history (their reservation link has no database
constraint, and may outlive the reservation).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from billing.models import Reservation, SettledRequest, SpendHold, SpendHoldTag
from core import partitions as core_partitions
from core.config import tollgate
from core.ids import time_prefix
from core.partitions import (
    add_months,
    default_partition,
    drop_partition,
    ensure_months,
    lock,
    month_of,
    month_of_partition,
    next_slice,
    partitions_of,
    slice_of,
    slice_partition_name,
    slices_between,
    span_of_partition,
)

log = logging.getLogger(__name__)

# The request path's insert order (hold, then reservation; the marker at settle), so lock
# waits never cross.
TABLES = (
    SpendHold._meta.db_table,
    Reservation._meta.db_table,
    SettledRequest._meta.db_table,
)
# Rows still open, per table: a period holding one is kept whatever its age.
OPEN = {
    SpendHold._meta.db_table: f"status = '{SpendHold.Status.HELD}'",
    Reservation._meta.db_table: f"status = '{Reservation.Status.PENDING}'",
    SettledRequest._meta.db_table: None,
}
MONTHS_AHEAD = 2
# Reconciliation looks back days, not weeks: a marker is kept at least this long.
MIN_RETENTION = timedelta(days=7)
LOCK_KEY = 0x62696C6C_01  # "bill", 1: pg_advisory_xact_lock's key for partition changes
DELETE_BATCH = 5_000  # rows per transaction where rows are deleted one by one


def is_partitioned() -> bool:
    """Whether the billing tables are partitioned here (PostgreSQL, migrated)."""
    return core_partitions.is_partitioned(TABLES[0])


def ensure_partitions(*, start: datetime, end: datetime, now: datetime | None = None) -> list[str]:
    """Create the slices' partitions of the three tables covering [start, end), from this
    slice on (never an earlier one), that are missing and not inside a month's partition
    made before slices; return their names (none on SQLite). Idempotent, and safe to run
    concurrently. Rows of a slice's range in the default partition are moved into it."""
    if not is_partitioned():
        return []
    first = max(slice_of(start), slice_of(now or timezone.now()))
    # What the partitions made already hold (slices, and months made before slices).
    with connection.cursor() as cursor:
        covered = [
            span
            for name in partitions_of(cursor, TABLES[0])
            if (span := span_of_partition(TABLES[0], name)) is not None
        ]
    slices = [
        piece
        for piece in slices_between(first, end)
        if not any(lo <= piece < hi for lo, hi in covered)
    ]
    return ensure_months(
        TABLES,
        slices,
        lock_key=LOCK_KEY,
        column="request_id",
        bounds=_bounds,
        name=slice_partition_name,
    )


def _bounds(start: datetime) -> tuple[str, str]:
    """A slice's request ids: those minted from its first to its last instant."""
    return f"'{time_prefix(start)}'", f"'{time_prefix(next_slice(start))}'"


def ensure_months_ahead(*, months_ahead: int = MONTHS_AHEAD) -> list[str]:
    """Create the partitions of this month's slices through `months_ahead` months after it."""
    this_month = month_of(timezone.now())
    return ensure_partitions(start=this_month, end=add_months(this_month, months_ahead + 1))


@dataclass(frozen=True)
class RetentionReport:
    """What one retention run removed. `cutoff`: closed rows older were due (None: retention
    is off)."""

    cutoff: datetime | None = None
    dropped: list[str] = field(default_factory=list)  # partitions (PostgreSQL)
    # Periods due but holding open rows: "2025-02" (a month's partition), "2025-02-09" (a slice's).
    kept_open: list[str] = field(default_factory=list)
    deleted_rows: int = 0  # rows deleted one by one (SQLite; PostgreSQL's default partitions)


def apply_retention(*, now: datetime | None = None, days: int | None = None) -> RetentionReport:
    """Remove the closed per-request billing rows older than `days`
    (TOLLGATE_BILLING_STATE_RETENTION_DAYS; 0 keeps everything), never fewer than
    MIN_RETENTION.

    On PostgreSQL a period's partitions go together once it ended at or before the cutoff
    and none of its rows is open; the default partitions, and SQLite's tables, lose their
    closed rows created before the cutoff.
    """
    days = tollgate().billing_state_retention_days if days is None else days
    if days <= 0:
        return RetentionReport()
    now = now or timezone.now()
    cutoff = now - max(timedelta(days=days), MIN_RETENTION)
    deleted = _delete_tag_holds(before=cutoff)
    if is_partitioned():
        dropped, kept_open = _drop_ended(before=cutoff)
        deleted += sum(_delete_closed(default_partition(t), t, before=cutoff) for t in TABLES)
        report = RetentionReport(cutoff, dropped, kept_open, deleted)
    else:
        deleted += sum(_delete_closed(t, t, before=cutoff) for t in TABLES)
        report = RetentionReport(cutoff, deleted_rows=deleted)
    if report.dropped or report.deleted_rows or report.kept_open:
        log.info(
            "billing retention before %s: dropped %s, deleted %d row(s), kept %s (open rows)",
            cutoff.isoformat(),
            ", ".join(report.dropped) or "no partition",
            report.deleted_rows,
            ", ".join(report.kept_open) or "none",
        )
    return report


def _drop_ended(*, before: datetime) -> tuple[list[str], list[str]]:
    """Drop the three tables' partitions of each period (a month's, a slice's) ending at or
    before `before` with no open row; return (dropped partitions, periods kept for their
    open rows)."""
    dropped: list[str] = []
    kept: list[str] = []
    with transaction.atomic(), connection.cursor() as cursor:
        lock(cursor, LOCK_KEY)
        ended = sorted(
            (span, name.removeprefix(TABLES[0]))
            for name in partitions_of(cursor, TABLES[0])
            if (span := span_of_partition(TABLES[0], name)) is not None and span[1] <= before
        )
        for (start, _), suffix in ended:
            names = {table: f"{table}{suffix}" for table in TABLES}
            present = {t: n for t, n in names.items() if n in partitions_of(cursor, t)}
            # Writers wait from here to the drop, so no row of the period opens meanwhile.
            cursor.execute(f"LOCK TABLE {', '.join(present.values())} IN ACCESS EXCLUSIVE MODE")
            if any(_has_open_rows(cursor, t, n) for t, n in present.items()):
                monthly = month_of_partition(TABLES[0], f"{TABLES[0]}{suffix}") is not None
                kept.append(f"{start:%Y-%m}" if monthly else f"{start:%Y-%m-%d}")
                continue
            for table, name in present.items():
                drop_partition(cursor, table, name)
                dropped.append(name)
    return dropped, kept


def _delete_tag_holds(*, before: datetime) -> int:
    """Delete the tag holds (billing.models.SpendHoldTag: not partitioned) of requests minted
    before `before` whose hold is closed or gone; return how many went."""
    tag_holds, holds = SpendHoldTag._meta.db_table, TABLES[0]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {tag_holds} WHERE request_id < %s AND NOT EXISTS (SELECT 1 FROM"
            f" {holds} h WHERE h.request_id = {tag_holds}.request_id AND {OPEN[holds]})",
            [time_prefix(before)],
        )
        return cursor.rowcount


def _has_open_rows(cursor, table: str, relation: str) -> bool:
    if OPEN[table] is None:
        return False
    cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {relation} WHERE {OPEN[table]})")
    return cursor.fetchone()[0]


def _delete_closed(relation: str, table: str, *, before: datetime) -> int:
    """Delete `relation`'s closed rows created before `before`; return how many went.

    PostgreSQL's default partition (rows minted before time-ordered ids, mostly) in one
    statement: batches would each walk the dead rows of the ones before. SQLite's tables a
    batch per transaction, so the writer waits for one batch at most.
    """
    closed = f" AND NOT ({OPEN[table]})" if OPEN[table] else ""
    if connection.vendor == "postgresql":
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass(%s)", [relation])
            if cursor.fetchone()[0] is None:
                return 0
            cursor.execute(f"DELETE FROM {relation} WHERE created_at < %s{closed}", [before])
            return cursor.rowcount
    deleted = 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {relation} WHERE id IN (SELECT id FROM {relation}"
                f" WHERE created_at < %s{closed} ORDER BY id LIMIT %s)",
                [before, DELETE_BATCH],
            )
            count = cursor.rowcount
        deleted += count
        if count < DELETE_BATCH:
            return deleted
