from django.db import migrations, models


class Migration(migrations.Migration):
    """The message an error told the client, kept with its code (issue 39). A database default
    for writers of the release before, which insert rows without it."""

    dependencies = [
        ("usage", "0015_usage_measurement"),
    ]

    operations = [
        migrations.AddField(
            model_name="usagelog",
            name="error_message",
            field=models.CharField(blank=True, db_default="", default="", max_length=1000),
        ),
    ]
