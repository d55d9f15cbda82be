# Model access groups (accounts/model_access.py): named sets of model names and patterns,
# assigned to keys and budget groups. Hand-written; depends on 0008_key_rotation by name.

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

import accounts.models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0008_key_rotation"),
    ]

    operations = [
        migrations.CreateModel(
            name="AccessGroup",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "name",
                    models.CharField(
                        max_length=64, validators=[accounts.models.validate_access_group_name]
                    ),
                ),
                ("description", models.CharField(blank=True, max_length=200)),
                (
                    "entries",
                    models.JSONField(
                        default=list,
                        help_text='Model names and patterns, e.g. ["gpt-4o-mini", "claude-*", '
                        '"anthropic/*"].',
                        validators=[accounts.models.validate_access_entries],
                    ),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "account",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="access_groups",
                        to="accounts.account",
                    ),
                ),
                (
                    "groups",
                    models.ManyToManyField(
                        blank=True, related_name="access_groups", to="accounts.group"
                    ),
                ),
                (
                    "keys",
                    models.ManyToManyField(
                        blank=True, related_name="access_groups", to="accounts.apikey"
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("account", "name"), name="access_group_name_once"
                    )
                ],
            },
        ),
    ]
