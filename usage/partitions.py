"""Monthly partitions of the usage log, and retention.

On PostgreSQL usage_usagelog is partitioned by RANGE of created_at (migration usage 0009):
one partition per UTC month, named <table>_pYYYY_MM, and <table>_default for a row whose
month has no partition yet, so its insert never fails. A row's attempt trail is a column of
it (usage/trail.py), so it goes with its month. `ensure_partitions` creates months ahead (the
beat task usage.ensure_partitions, the command ensure_usage_partitions); `apply_retention`
drops whole months past TOLLGATE_USAGE_RETENTION_DAYS whose rollups were audited
(usage.apply_retention).

SQLite (the embedded mode) keeps a plain table: there `ensure_partitions` does nothing and
retention deletes old rows in batches.

Both take one transaction-level advisory lock, so runs on several workers take turns.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from core import partitions as core_partitions
from core.config import tollgate
from core.partitions import (
    add_months,
    default_partition,
    drop_partition,
    ensure_months,
    lock,
    month_of,
    month_of_partition,
    months_between,
    partitions_of,
)
from usage.models import UsageLog
from usage.rollups import audited_until, reconcile_rollups

log = logging.getLogger(__name__)

TABLES = (UsageLog._meta.db_table,)
MONTHS_AHEAD = 2
# pg_advisory_xact_lock's key for partition changes: any constant no other lock uses.
LOCK_KEY = 0x7573616765_01  # "usage", 1
DELETE_BATCH = 1_000  # SQLite retention: rows per transaction


def is_partitioned() -> bool:
    """Whether the usage log is a partitioned table here (PostgreSQL, migrated)."""
    return core_partitions.is_partitioned(TABLES[0])


def ensure_partitions(*, start: datetime, end: datetime) -> list[str]:
    """Create the monthly partitions of the log covering [start, end) that are missing;
    return their names (none on SQLite). Idempotent, and safe to run concurrently.

    A row already in the default partition for a month created here is moved into it.
    """
    if not is_partitioned():
        return []
    return ensure_months(
        TABLES,
        months_between(start, end),
        lock_key=LOCK_KEY,
        column="created_at",
        bounds=lambda month: (_bound(month), _bound(add_months(month, 1))),
    )


def ensure_months_ahead(
    *, start: datetime | None = None, months_ahead: int = MONTHS_AHEAD
) -> list[str]:
    """Create the partitions from `start`'s month (now's by default) through `months_ahead`
    months after the current one."""
    now = timezone.now()
    start = start or now
    return ensure_partitions(
        start=start, end=add_months(month_of(max(month_of(start), now)), months_ahead + 1)
    )


@dataclass(frozen=True)
class RetentionReport:
    """What one retention run removed. `cutoff`: rows created before it were due (None:
    retention is off, or no rollup was audited yet, so nothing was)."""

    cutoff: datetime | None = None
    dropped: list[str] = field(default_factory=list)  # partitions (PostgreSQL)
    deleted_rows: int = 0  # log rows deleted one by one (SQLite; PostgreSQL's default partition)


def apply_retention(*, now: datetime | None = None, days: int | None = None) -> RetentionReport:
    """Remove usage rows (with their attempt trails) older than `days`
    (TOLLGATE_USAGE_RETENTION_DAYS; 0 keeps everything) whose hours' rollups were audited
    against them.

    The rollups are audited first (usage.rollups.reconcile_rollups), so a row goes only once
    its rollups are known to count it. On PostgreSQL whole months go: a month's partition is
    detached and dropped when the month ended at or before the cutoff. On SQLite the rows
    before the cutoff are deleted in batches.
    """
    days = tollgate().usage_retention_days if days is None else days
    if days <= 0:
        return RetentionReport()
    now = now or timezone.now()
    reconcile_rollups(now=now)
    audited = audited_until()
    if audited is None:
        return RetentionReport()
    cutoff = min(now - timedelta(days=days), audited)
    if is_partitioned():
        # Whole months only: the month holding the cutoff stays until it is all past.
        cutoff = month_of(cutoff)
        dropped = _drop_months(before=cutoff)
        report = RetentionReport(
            cutoff=cutoff, dropped=dropped, deleted_rows=_delete_from_defaults(before=cutoff)
        )
    else:
        report = RetentionReport(cutoff=cutoff, deleted_rows=_delete_rows(before=cutoff))
    if report.dropped or report.deleted_rows:
        log.info(
            "usage retention before %s: dropped %s, deleted %d row(s)",
            cutoff.isoformat(),
            ", ".join(report.dropped) or "no partition",
            report.deleted_rows,
        )
    return report


def _bound(month: datetime) -> str:
    return f"'{month:%Y-%m-%d} 00:00:00+00'"


def _drop_months(*, before: datetime) -> list[str]:
    """Detach and drop the partitions of the months ending at or before `before`."""
    dropped: list[str] = []
    with transaction.atomic(), connection.cursor() as cursor:
        lock(cursor, LOCK_KEY)
        for table in TABLES:
            for name in sorted(partitions_of(cursor, table)):
                month = month_of_partition(table, name)
                if month is None or add_months(month, 1) > before:
                    continue
                drop_partition(cursor, table, name)
                dropped.append(name)
    return dropped


def _delete_from_defaults(*, before: datetime) -> int:
    """Delete the rows before `before` that sit in the default partitions (a late row of a
    month dropped already, say). Returns the log rows deleted."""
    deleted = {}
    with transaction.atomic(), connection.cursor() as cursor:
        lock(cursor, LOCK_KEY)
        for table in TABLES:
            default = default_partition(table)
            if default in partitions_of(cursor, table):
                cursor.execute(f"DELETE FROM {default} WHERE created_at < %s", [before])
                deleted[table] = cursor.rowcount
    return deleted.get(TABLES[0], 0)


def _delete_rows(*, before: datetime) -> int:
    """Delete the log rows created before `before`, a batch per transaction; return the rows
    deleted."""
    deleted = 0
    while True:
        with transaction.atomic():
            ids = list(
                UsageLog.objects.filter(created_at__lt=before)
                .order_by("id")
                .values_list("id", flat=True)[:DELETE_BATCH]
            )
            if not ids:
                return deleted
            UsageLog.objects.filter(id__in=ids).delete()
        deleted += len(ids)
