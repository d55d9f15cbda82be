# Receipt archives (issue 38, retention): a signed manifest per archived (account, month), and
# the one way archived receipts leave PostgreSQL. The application's role may not DELETE
# receipts (core/db_roles.py); this function, owned by the role that migrates and run with
# its rights (SECURITY DEFINER, its search_path fixed so no object of the caller's is found
# first), deletes only receipts a manifest covers, and never an account's last receipt (the
# chain's head). grant_app_role grants the application EXECUTE on it; PUBLIC has none.

from django.db import migrations, models

DROP_ARCHIVED = """
CREATE OR REPLACE FUNCTION tollgate_drop_archived_receipts(account bigint, through_seq bigint)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    covered bigint;
    head bigint;
    dropped bigint;
BEGIN
    SELECT max(a.last_seq) INTO covered FROM public.billing_receiptarchive a
        WHERE a.account_id = account AND a.sha256 <> '' AND a.size_bytes > 0;
    IF covered IS NULL OR covered < through_seq THEN
        RAISE EXCEPTION 'receipts of account % through seq % are not archived', account,
            through_seq USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT max(r.seq) INTO head FROM public.billing_receipt r WHERE r.account_id = account;
    DELETE FROM public.billing_receipt r
        WHERE r.account_id = account AND r.seq <= through_seq AND r.seq < head
        AND EXISTS (
            SELECT 1 FROM public.billing_receiptarchive a
            WHERE a.account_id = account AND r.seq BETWEEN a.first_seq AND a.last_seq
        );
    GET DIAGNOSTICS dropped = ROW_COUNT;
    RETURN dropped;
END
$$;
REVOKE ALL ON FUNCTION tollgate_drop_archived_receipts(bigint, bigint) FROM PUBLIC;
"""


def create_drop_function(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        # Without parameters: the function's RAISE has '%' placeholders of its own.
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(DROP_ARCHIVED)


def remove_drop_function(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "DROP FUNCTION IF EXISTS tollgate_drop_archived_receipts(bigint, bigint)"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0012_packed_receipts"),
    ]

    operations = [
        migrations.CreateModel(
            name="ReceiptArchive",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("account_id", models.BigIntegerField()),
                ("period", models.CharField(max_length=7)),
                ("time_zone", models.CharField(max_length=64)),
                ("starts_at", models.DateTimeField()),
                ("ends_at", models.DateTimeField()),
                ("first_seq", models.BigIntegerField()),
                ("last_seq", models.BigIntegerField()),
                ("prev", models.CharField(max_length=64)),
                ("last_hash", models.CharField(max_length=64)),
                ("receipts", models.BigIntegerField()),
                ("totals", models.JSONField()),
                ("running", models.JSONField()),
                ("head", models.JSONField()),
                ("ledger_last_entry", models.BigIntegerField(null=True)),
                ("sha256", models.CharField(max_length=64)),
                ("size_bytes", models.BigIntegerField()),
                ("created_at", models.DateTimeField()),
                ("key_id", models.CharField(max_length=32)),
                ("signature", models.CharField(max_length=128)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("account_id", "period"), name="receipt_archive_once"
                    ),
                    models.UniqueConstraint(
                        fields=("account_id", "first_seq"), name="receipt_archive_seq_once"
                    ),
                ],
            },
        ),
        migrations.RunPython(create_drop_function, remove_drop_function),
    ]
