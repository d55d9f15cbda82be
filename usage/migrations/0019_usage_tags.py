"""Request tags on usage rows, and their hourly totals (usage/tags.py).

The log's `tags` is a JSON list with a database default ([]), so a writer of the release
before, still inserting while this one migrates, stores rows without tags rather than failing.
On PostgreSQL it is jsonb, and a GIN index (jsonb_path_ops: containment only, the smallest
kind) finds a tag's rows; built on the partitioned log, it is built on every partition. No
row had tags before this release, so the tag rollups start empty and need no backfill.
"""

from django.db import migrations, models

GIN = "usage_log_tags_gin"


def add_gin(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"CREATE INDEX {GIN} ON usage_usagelog USING gin (tags jsonb_path_ops)")


def drop_gin(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {GIN}")


class Migration(migrations.Migration):
    dependencies = [("usage", "0018_rollup_cache_totals")]

    operations = [
        migrations.AddField(
            model_name="usagelog",
            name="tags",
            field=models.JSONField(
                blank=True, db_default=models.Value([], models.JSONField()), default=list
            ),
        ),
        migrations.RunPython(add_gin, drop_gin),
        migrations.CreateModel(
            name="UsageTagRollup",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("account_id", models.BigIntegerField()),
                ("tag", models.CharField(max_length=64)),
                ("hour", models.DateTimeField()),
                ("requests", models.BigIntegerField(default=0)),
                ("errors", models.BigIntegerField(default=0)),
                ("tokens_in", models.BigIntegerField(default=0)),
                ("tokens_out", models.BigIntegerField(default=0)),
                ("byok_tokens_in", models.BigIntegerField(default=0)),
                ("byok_tokens_out", models.BigIntegerField(default=0)),
                ("provider_cost_micro", models.BigIntegerField(default=0)),
                ("bandwidth_charge_micro", models.BigIntegerField(default=0)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("account_id", "hour", "tag"), name="tag_rollup_once"
                    )
                ],
            },
        ),
    ]
