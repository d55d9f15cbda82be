# Key rotation (accounts/rotation.py): a virtual key's and a tenant token's replaced secret,
# by hash, with the end of its grace period. Hand-written; 0009 depends on this name.

from django.db import migrations, models


def previous_hash() -> models.CharField:
    return models.CharField(editable=False, max_length=64, null=True, blank=True, unique=True)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0007_directory_roles"),
    ]

    operations = [
        migrations.AddField(model_name="apikey", name="previous_hash", field=previous_hash()),
        migrations.AddField(
            model_name="apikey",
            name="previous_valid_until",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="tenanttoken", name="previous_hash", field=previous_hash()
        ),
        migrations.AddField(
            model_name="tenanttoken",
            name="previous_valid_until",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
    ]
