"""On PostgreSQL, index the usage log's stored_at with BRIN instead of a B-tree.

stored_at is the time a row reached the database and rows are appended in that order, so
each block range of a partition holds a narrow band of it: the events' and reconciliation's
windows (a minute of stored_at, `usage/services.py`) read a few ranges. Measured at 200k
rows the B-tree cost ~23 B per usage row; the BRIN index is a few pages per partition.
`autosummarize` summarises each range as it fills; a range not yet summarised is read
whole, which is the newest one, where the next window's rows are anyway.

SQLite (the embedded mode) has no BRIN: its B-tree stays, outside the model state.
"""

import django.utils.timezone
from django.db import migrations, models

BTREE = "usage_usagelog_stored_at_cc5407f9"  # Django's name for the field's db_index
BRIN = "usage_log_stored_brin"


def to_brin(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP INDEX IF EXISTS {BTREE}")
    schema_editor.execute(
        f"CREATE INDEX {BRIN} ON usage_usagelog USING brin (stored_at) WITH (autosummarize = on)"
    )


def to_btree(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP INDEX IF EXISTS {BRIN}")
    schema_editor.execute(f"CREATE INDEX {BTREE} ON usage_usagelog (stored_at)")


class Migration(migrations.Migration):
    dependencies = [("usage", "0013_partial_label_indexes")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="usagelog",
                    name="stored_at",
                    field=models.DateTimeField(default=django.utils.timezone.now),
                )
            ],
            database_operations=[migrations.RunPython(to_brin, to_btree)],
        )
    ]
