# The usage row is core.usage_record.UsageRecord: `route` is the endpoint (the column keeps its
# name), and the served attempt's wallet reservation is a column of its own.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('usage', '0004_dead_letter'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RenameField(model_name='usagelog', old_name='route', new_name='endpoint'),
                migrations.AlterField(
                    model_name='usagelog',
                    name='endpoint',
                    field=models.CharField(db_column='route', max_length=32),
                ),
            ],
        ),
        migrations.AddField(
            model_name='usagelog',
            name='reservation_id',
            field=models.BigIntegerField(blank=True, null=True),
        ),
    ]
