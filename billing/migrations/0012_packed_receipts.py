# Receipts stored compactly (issue 38): the body deflated against a fixed dictionary
# (billing/receipt_codec.py), ~1.4 KB of JSON to ~180 bytes, the previous hash only in it, the
# request id under a hash index; no index by time within an account (a month is found by a
# binary search over seq: billing/statements.py last_before); the cross-account time index
# only over charges without a row.

from django.db import migrations, models

import billing.receipt_codec

BATCH = 5_000


def pack_bodies(apps, schema_editor):
    """Pack every stored body, a batch at a time (the JSON text and its hash unchanged)."""
    connection = schema_editor.connection
    after = 0
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, body FROM billing_receipt WHERE id > %s ORDER BY id LIMIT %s",
                [after, BATCH],
            )
            rows = cursor.fetchall()
            for receipt_id, body in rows:
                cursor.execute(
                    "UPDATE billing_receipt SET packed = %s WHERE id = %s",
                    [billing.receipt_codec.pack(body), receipt_id],
                )
        if len(rows) < BATCH:
            return
        after = rows[-1][0]


def hash_index_on_postgres(apps, schema_editor):
    """Receipts are looked up by request id for equality only: a hash index's entry is a
    quarter of a B-tree's over 32-character ids."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS receipt_request")
        schema_editor.execute(
            "CREATE INDEX receipt_request ON billing_receipt USING hash (request_id)"
        )


def digests_as_bytes(apps, schema_editor):
    """The hash column as its 32 bytes (SQLite keeps the text it has: the field reads both)."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "ALTER TABLE billing_receipt ALTER COLUMN hash TYPE bytea USING decode(hash, 'hex')"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0011_excess_collected"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="receipt", name="receipt_account_time"),
        migrations.RemoveIndex(model_name="receipt", name="receipt_time"),
        migrations.AddField(
            model_name="receipt", name="packed", field=models.BinaryField(null=True)
        ),
        migrations.RunPython(pack_bodies, migrations.RunPython.noop),
        migrations.RemoveField(model_name="receipt", name="body"),
        # The previous receipt's hash is in the body; not stored twice.
        migrations.RemoveField(model_name="receipt", name="prev_hash"),
        migrations.RenameField(model_name="receipt", old_name="packed", new_name="body"),
        migrations.AlterField(
            model_name="receipt",
            name="body",
            field=billing.receipt_codec.PackedJsonField(),
        ),
        migrations.AddIndex(
            model_name="receipt",
            index=models.Index(
                condition=models.Q(("kind__in", ["unmeasured", "trueup"])),
                fields=["settled_at"],
                name="receipt_uncharged_time",
            ),
        ),
        migrations.RunPython(hash_index_on_postgres, migrations.RunPython.noop),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="receipt",
                    name="hash",
                    field=billing.receipt_codec.HexDigestField(),
                )
            ],
            database_operations=[
                migrations.RunPython(digests_as_bytes, migrations.RunPython.noop)
            ],
        ),
    ]
