"""A budget hold names its request's key whether or not the key has a budget, and says in
`key_held` whether it moved the key's reserved (so its release gives that back).

Until now a hold named its key only when it held on it, so every existing hold that names a
key held on it: the column's database default, TRUE, says exactly that for them, and stays
in place for a gateway of the previous release still writing holds during a deploy (it names
a key only when it holds on it). On PostgreSQL adding a column with a constant default
rewrites no rows, partitions included.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("billing", "0014_request_state_slices")]

    operations = [
        migrations.AddField(
            model_name="spendhold",
            name="key_held",
            field=models.BooleanField(db_default=True, default=True),
        ),
    ]
