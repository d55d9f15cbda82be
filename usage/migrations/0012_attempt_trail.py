"""Fold the attempts table into the usage log: each row's trail becomes its `attempt_trail`.

A table of attempts cost ~218 B per usage row (heap, primary key, log_id index) for ~1.03
attempts; packed in the row (usage/trail.py) a trail costs a few dozen bytes. Here each row's
attempts are copied in SQL as a plain JSON array of positional arrays (ATTEMPT_FIELDS order),
which usage.trail.unpack_trail reads as it reads packed ones; the writer packs every new row.
Then the attempts table goes, with its monthly partitions on PostgreSQL. Forward only.
"""

from django.db import migrations

import usage.trail

# An attempt as its trail stores it: ATTEMPT_FIELDS in order.
ATTEMPT = (
    '"order", provider, model, served_by, source, outcome, upstream_status, latency_ms,'
    " reservation_id, key_label"
)


def fill_trails(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        # An attempt carries its row's created_at: the join meets each row in its partition.
        schema_editor.execute(
            "UPDATE usage_usagelog l SET attempt_trail = convert_to(t.trail::text, 'UTF8')"
            f" FROM (SELECT log_id, created_at, json_agg(json_build_array({ATTEMPT})"
            ' ORDER BY "order", id) AS trail FROM usage_usageattempt'
            " GROUP BY log_id, created_at) t"
            " WHERE l.id = t.log_id AND l.created_at = t.created_at"
        )
        return
    # SQLite: json() keeps each array JSON through the subquery, whose order the aggregate
    # follows (a subquery with ORDER BY is not flattened into an aggregate).
    schema_editor.execute(
        "UPDATE usage_usagelog SET attempt_trail = (SELECT CAST(json_group_array(json(a.one))"
        f" AS BLOB) FROM (SELECT json_array({ATTEMPT}) AS one FROM usage_usageattempt"
        ' WHERE log_id = usage_usagelog.id ORDER BY "order", id) a)'
        " WHERE id IN (SELECT log_id FROM usage_usageattempt)"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("usage", "0011_attempt_key_label"),
    ]

    operations = [
        migrations.AddField(
            model_name="usagelog",
            name="attempt_trail",
            field=usage.trail.AttemptTrailField(db_default=b"", default=b""),
        ),
        migrations.RunPython(fill_trails, elidable=False),
        migrations.DeleteModel(
            name="UsageAttempt",
        ),
    ]
