# Chain heads are no longer rows that move (the application's role may not update them):
# a chain's head is its last entry, and heads signed for tenants are kept, append-only.

from django.db import migrations, models

REFUSAL = "signed heads are append-only"
TABLE = "audit_signedhead"

POSTGRES_INSTALL = [
    f"""
    CREATE OR REPLACE FUNCTION signed_head_refuse_change() RETURNS trigger AS $$
    BEGIN
        RAISE EXCEPTION USING MESSAGE = '{REFUSAL}: ' || TG_OP || ' refused',
            ERRCODE = 'insufficient_privilege';
    END;
    $$ LANGUAGE plpgsql
    """,
    f"""
    CREATE TRIGGER signed_head_append_only BEFORE UPDATE OR DELETE ON {TABLE}
    FOR EACH ROW EXECUTE FUNCTION signed_head_refuse_change()
    """,
    "DROP FUNCTION IF EXISTS audit_head_forward()",
]
SQLITE_INSTALL = [
    f"""
    CREATE TRIGGER signed_head_no_update BEFORE UPDATE ON {TABLE}
    BEGIN SELECT RAISE(ABORT, '{REFUSAL}: UPDATE refused'); END
    """,
    f"""
    CREATE TRIGGER signed_head_no_delete BEFORE DELETE ON {TABLE}
    WHEN tollgate_audit_flushing() = 0
    BEGIN SELECT RAISE(ABORT, '{REFUSAL}: DELETE refused'); END
    """,
]


def install(apps, schema_editor):
    statements = {"postgresql": POSTGRES_INSTALL, "sqlite": SQLITE_INSTALL}
    for sql in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="SignedHead",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "chain",
                    models.CharField(
                        choices=[("audit", "Audit"), ("receipts", "Receipts")], max_length=8
                    ),
                ),
                (
                    "account_id",
                    models.BigIntegerField(help_text="The account's id; 0: operator-wide."),
                ),
                ("seq", models.PositiveBigIntegerField()),
                ("hash", models.CharField(max_length=64)),
                ("signed_at", models.DateTimeField()),
                ("key_id", models.CharField(max_length=32)),
                ("signature", models.CharField(max_length=128)),
            ],
        ),
        migrations.DeleteModel(name="AuditChain"),
        migrations.AddIndex(
            model_name="signedhead",
            index=models.Index(fields=["chain", "account_id", "-seq"], name="signed_head_newest"),
        ),
        migrations.RunPython(install, migrations.RunPython.noop),
    ]
