# The profile models now belong to the providers app: state only, the tables stay.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('gateway', '0003_idempotency_record'),
        ('providers', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='ProviderModel'),
                migrations.DeleteModel(name='ProviderProfile'),
            ],
        ),
    ]
