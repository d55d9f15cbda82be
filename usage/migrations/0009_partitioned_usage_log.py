"""Partition the usage log and its attempts by month of created_at (PostgreSQL); lean indexes.

The model state, on every database: request_id unique with created_at, not alone (a
partitioned table's unique keys must hold its partition key); the single-column indexes of
account_id, group_id, api_key_id and caller_label replaced by the (..., created_at) ones the
usage queries use, all declared in Meta (a field's db_index / unique adds a varchar_pattern_ops
twin on PostgreSQL); attempts keep their relation to the log without a database constraint
and carry their row's created_at.

SQLite (the embedded mode) gets those changes as plain schema operations. PostgreSQL gets the
two tables rebuilt in this migration's transaction: the old ones renamed; partitioned ones
made LIKE them (columns, defaults and database defaults, identity, checks); a partition for
every month holding rows and for this month through two ahead, and a DEFAULT partition; the
rows copied with their ids (each attempt takes its row's created_at); the id sequences carried
over; the old tables dropped; then the keys and indexes built once, over the loaded rows.
Forward only.
"""

from datetime import UTC, datetime

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

MONTHS_AHEAD = 2


class OffPostgres(migrations.SeparateDatabaseAndState):
    """Operations whose state applies on every database but whose schema changes run only off
    PostgreSQL: there `rebuild` below makes the tables in their final shape at once."""

    def __init__(self, operations):
        super().__init__(database_operations=operations, state_operations=operations)

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)


def _month(moment):
    return datetime(moment.year, moment.month, 1, tzinfo=UTC)


def _next_month(month):
    return month.replace(year=month.year + month.month // 12, month=month.month % 12 + 1)


def _bound(month):
    return f"'{month:%Y-%m-%d} 00:00:00+00'"


def rebuild(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        # The attempts added a column: give each its row's created_at.
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE usage_usageattempt SET created_at = (SELECT l.created_at"
                " FROM usage_usagelog l WHERE l.id = usage_usageattempt.log_id)"
                " WHERE log_id IN (SELECT id FROM usage_usagelog)"
            )
        return
    run = schema_editor.execute
    log, attempt = apps.get_model("usage", "UsageLog"), apps.get_model("usage", "UsageAttempt")
    tables = [log._meta.db_table, attempt._meta.db_table]
    old = {table: f"{table}_unpartitioned" for table in tables}
    run(f"LOCK TABLE {', '.join(tables)} IN ACCESS EXCLUSIVE MODE")
    for table in tables:
        run(f"ALTER TABLE {table} RENAME TO {old[table]}")
    like = "INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS"
    log_table, attempt_table = tables
    run(
        f"CREATE TABLE {log_table} (LIKE {old[log_table]} {like})"
        " PARTITION BY RANGE (created_at)"
    )
    run(
        f"CREATE TABLE {attempt_table} (LIKE {old[attempt_table]} {like},"
        " created_at timestamp with time zone NOT NULL) PARTITION BY RANGE (created_at)"
    )

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT date_trunc('month', created_at AT TIME ZONE 'UTC')"
            f" FROM {old[log_table]}"
        )
        months = {month.replace(tzinfo=UTC) for (month,) in cursor.fetchall()}
    month = _month(datetime.now(UTC))
    for _ in range(MONTHS_AHEAD + 1):
        months.add(month)
        month = _next_month(month)
    for table in tables:
        for month in sorted(months):
            run(
                f"CREATE TABLE {table}_p{month:%Y_%m} PARTITION OF {table}"
                f" FOR VALUES FROM ({_bound(month)}) TO ({_bound(_next_month(month))})"
            )
        # A month with no partition yet lands here rather than failing its insert (a failed
        # insert would be taken for the row's fault); usage/partitions.py moves such rows out.
        run(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT")

    columns = {table: _columns(connection, old[table]) for table in tables}
    log_columns = ", ".join(columns[log_table])
    run(f"INSERT INTO {log_table} ({log_columns}) SELECT {log_columns} FROM {old[log_table]}")
    attempt_columns = ", ".join(columns[attempt_table])
    picked = ", ".join(f"a.{name}" for name in columns[attempt_table])
    run(
        f"INSERT INTO {attempt_table} ({attempt_columns}, created_at)"
        f" SELECT {picked}, l.created_at FROM {old[attempt_table]} a"
        f" JOIN {old[log_table]} l ON l.id = a.log_id"
    )

    # Ids go on from where they were: the new identity sequence takes the old one's place.
    renames = []
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(
                "SELECT pg_get_serial_sequence(%s, 'id'), pg_get_serial_sequence(%s, 'id')",
                [old[table], table],
            )
            old_sequence, new_sequence = cursor.fetchone()
            cursor.execute(f"SELECT last_value, is_called FROM {old_sequence}")
            last_value, is_called = cursor.fetchone()
            cursor.execute("SELECT setval(%s, %s, %s)", [new_sequence, last_value, is_called])
            renames.append((new_sequence, old_sequence.rsplit(".", 1)[-1]))
    run(f"DROP TABLE {old[attempt_table]}, {old[log_table]}")
    for new_sequence, name in renames:
        run(f"ALTER SEQUENCE {new_sequence} RENAME TO {name}")

    for model in (log, attempt):
        table = model._meta.db_table
        run(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY (id, created_at)")
        for statement in schema_editor._model_indexes_sql(model):
            run(statement)
        for constraint in model._meta.constraints:
            run(constraint.create_sql(model, schema_editor))
        run(f"ANALYZE {table}")


def _columns(connection, table):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT quote_ident(attname) FROM pg_attribute WHERE attrelid = %s::regclass"
            " AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            [table],
        )
        return [name for (name,) in cursor.fetchall()]


class Migration(migrations.Migration):

    dependencies = [
        ('usage', '0008_usage_rollup'),
    ]

    operations = [
        OffPostgres(
            [
                migrations.AddField(
                    model_name='usageattempt',
                    name='created_at',
                    field=models.DateTimeField(default=django.utils.timezone.now),
                    preserve_default=False,
                ),
                migrations.AlterField(
                    model_name='usageattempt',
                    name='log',
                    field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='attempts', to='usage.usagelog'),
                ),
                migrations.AlterField(
                    model_name='usagelog',
                    name='account_id',
                    field=models.BigIntegerField(null=True),
                ),
                migrations.AlterField(
                    model_name='usagelog',
                    name='api_key_id',
                    field=models.BigIntegerField(null=True),
                ),
                migrations.AlterField(
                    model_name='usagelog',
                    name='caller_label',
                    field=models.CharField(blank=True, max_length=64),
                ),
                migrations.AlterField(
                    model_name='usagelog',
                    name='group_id',
                    field=models.BigIntegerField(null=True),
                ),
                migrations.AlterField(
                    model_name='usagelog',
                    name='request_id',
                    field=models.CharField(max_length=64),
                ),
                migrations.AddIndex(
                    model_name='usagelog',
                    index=models.Index(fields=['account_id', 'created_at'], name='usage_log_account_time'),
                ),
                migrations.AddIndex(
                    model_name='usagelog',
                    index=models.Index(fields=['api_key_id', 'created_at'], name='usage_log_key_time'),
                ),
                migrations.AddIndex(
                    model_name='usagelog',
                    index=models.Index(fields=['account_id', 'caller_label', 'created_at'], name='usage_log_caller_time'),
                ),
                migrations.AddConstraint(
                    model_name='usagelog',
                    constraint=models.UniqueConstraint(fields=('request_id', 'created_at'), name='usage_log_once'),
                ),
            ]
        ),
        migrations.RunPython(rebuild, elidable=False),
        # Not partitioned: plain schema changes everywhere.
        migrations.AlterField(
            model_name='usagedeadletter',
            name='request_id',
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddIndex(
            model_name='usagedeadletter',
            index=models.Index(fields=['request_id'], name='usage_dead_letter_request'),
        ),
    ]
