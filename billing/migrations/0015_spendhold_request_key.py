"""A budget hold names its request's key in `request_key`, whether or not the key has a
budget, so a crash charge the reaper makes with it reaches the key.

Compatible both ways during a deploy. `api_key` keeps its meaning (the key the hold reserved
on, NULL for a key without a budget), so a previous release's process releasing a hold this
release wrote gives back exactly what it reserved; it reads no `request_key`. This release
charges a hold to `coalesce(request_key, api_key)`, which for a hold the previous release
wrote (no `request_key`) is the key it named, as before. A nullable column without a default
rewrites no rows, partitions included; its index and foreign key read the holds kept once.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("billing", "0014_request_state_slices")]

    operations = [
        migrations.AddField(
            model_name="spendhold",
            name="request_key",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="accounts.apikey",
            ),
        ),
    ]
