"""Partition the per-request billing tables by month of their time-ordered request ids
(PostgreSQL); the ledger's link to a reservation loses its database constraint.

billing_spendhold, billing_reservation and billing_settledrequest are rebuilt in this
migration's transaction, partitioned by RANGE of request_id in collation "C" (the order of
the ids' hex digits whatever the database's collation): the old tables renamed; partitioned
ones made LIKE them (columns, defaults, identity, checks), request_id in collation "C"; a
partition for this month through two ahead and a DEFAULT partition, where every id minted
before time-ordered ids lands; the rows copied with their ids; the id sequences carried
over; the old tables dropped; then the keys (the primary key becomes (id, request_id): a
partitioned table's unique keys hold its partition key), indexes and foreign keys built
once, over the loaded rows. No partition is made for a month before this one (see
billing/partitions.py). The model state does not change for them.

SQLite (the embedded mode) keeps plain tables. Forward only.
"""

from datetime import UTC, datetime

import django.db.models.deletion
from django.db import migrations, models

MONTHS_AHEAD = 2


def _next_month(month):
    return month.replace(year=month.year + month.month // 12, month=month.month % 12 + 1)


def _prefix(month):
    # core.ids.time_prefix, frozen here: the hex millisecond every id of the month starts with.
    return f"'{int(month.timestamp() * 1000):012x}'"


def _columns(connection, table):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT quote_ident(attname) FROM pg_attribute WHERE attrelid = %s::regclass"
            " AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            [table],
        )
        return ", ".join(name for (name,) in cursor.fetchall())


def rebuild(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    run = schema_editor.execute
    names = ("SpendHold", "Reservation", "SettledRequest")
    models_ = [apps.get_model("billing", name) for name in names]
    tables = [model._meta.db_table for model in models_]
    old = {table: f"{table}_unpartitioned" for table in tables}
    like = "INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS"
    run(f"LOCK TABLE {', '.join(tables)} IN ACCESS EXCLUSIVE MODE")
    this_month = datetime.now(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    for table in tables:
        run(f"ALTER TABLE {table} RENAME TO {old[table]}")
        # The partition key takes its column's collation: set "C" on a template first.
        template = f"{table}_template"
        run(f"CREATE TABLE {template} (LIKE {old[table]} {like})")
        run(f'ALTER TABLE {template} ALTER COLUMN request_id TYPE varchar(64) COLLATE "C"')
        run(f"CREATE TABLE {table} (LIKE {template} {like}) PARTITION BY RANGE (request_id)")
        run(f"DROP TABLE {template}")
        month = this_month
        for _ in range(MONTHS_AHEAD + 1):
            end = _next_month(month)
            run(
                f"CREATE TABLE {table}_p{month:%Y_%m} PARTITION OF {table}"
                f" FOR VALUES FROM ({_prefix(month)}) TO ({_prefix(end)})"
            )
            month = end
        run(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT")
        columns = _columns(connection, old[table])
        run(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {old[table]}")

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
    # The ledger's constraint on reservations went with the AlterField before this.
    run(f"DROP TABLE {', '.join(old[table] for table in reversed(tables))}")
    for new_sequence, name in renames:
        run(f"ALTER SEQUENCE {new_sequence} RENAME TO {name}")

    for model in models_:
        table = model._meta.db_table
        run(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY (id, request_id)")
        for statement in schema_editor._model_indexes_sql(model):
            run(statement)
        for constraint in model._meta.constraints:
            run(constraint.create_sql(model, schema_editor))
        for field in model._meta.local_fields:
            if field.remote_field and field.db_constraint:
                run(schema_editor._create_fk_sql(model, field, "_fk_%(to_table)s_%(to_column)s"))
        run(f"ANALYZE {table}")


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0006_lean_request_indexes'),
    ]

    operations = [
        migrations.AlterField(
            model_name='ledgerentry',
            name='reservation',
            field=models.OneToOneField(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='ledger_entry', to='billing.reservation'),
        ),
        migrations.RunPython(rebuild, elidable=False),
    ]
