"""The per-request billing tables go from monthly partitions to slices of a month
(billing/partitions.py): each empty monthly partition of this month or later is replaced by
its slices (from this slice on). A month holding rows keeps its partition until retention
drops it; slices are never made inside one. PostgreSQL only; nothing to do on SQLite.

The partition arithmetic is frozen here (core/partitions.py, core/ids.py), as migrations do.
"""

from datetime import UTC, datetime

from django.db import migrations

TABLES = ("billing_spendhold", "billing_reservation", "billing_settledrequest")
SLICE_DAYS = (1, 5, 9, 13, 17, 21, 25, 28)


def _next_month(month):
    return month.replace(year=month.year + month.month // 12, month=month.month % 12 + 1)


def _next_slice(start):
    later = [day for day in SLICE_DAYS if day > start.day]
    return start.replace(day=later[0]) if later else _next_month(start.replace(day=1))


def _prefix(moment):
    return f"'{int(moment.timestamp() * 1000):012x}'"


def split(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    now = datetime.now(UTC)
    this_month = datetime(now.year, now.month, 1, tzinfo=UTC)
    this_slice = this_month.replace(day=max(day for day in SLICE_DAYS if day <= now.day))
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                " WHERE i.inhparent = %s::regclass",
                [table],
            )
            for (name,) in sorted(cursor.fetchall()):
                try:
                    month = datetime.strptime(name.removeprefix(f"{table}_p"), "%Y_%m")
                except ValueError:
                    continue
                month = month.replace(tzinfo=UTC)
                if month < this_month:
                    continue
                cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {name})")
                if cursor.fetchone()[0]:
                    continue
                cursor.execute(f"DROP TABLE {name}")
                start, end = max(month, this_slice), _next_month(month)
                while start < end:
                    cursor.execute(
                        f"CREATE TABLE {table}_p{start:%Y_%m_%d} PARTITION OF {table}"
                        f" FOR VALUES FROM ({_prefix(start)}) TO ({_prefix(_next_slice(start))})"
                    )
                    start = _next_slice(start)


class Migration(migrations.Migration):
    dependencies = [("billing", "0013_receipt_archives")]

    operations = [migrations.RunPython(split, migrations.RunPython.noop)]
