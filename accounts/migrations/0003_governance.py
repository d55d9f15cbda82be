"""Budget periods and spend alerts; the "member" role becomes "viewer"."""

import accounts.models
from django.db import migrations, models


def member_to_viewer(apps, schema_editor):
    apps.get_model("accounts", "Membership").objects.filter(role="member").update(role="viewer")


def viewer_to_member(apps, schema_editor):
    apps.get_model("accounts", "Membership").objects.filter(role="viewer").update(role="member")


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0002_group_web_units_per_day'),
    ]

    operations = [
        migrations.AddField(
            model_name='account',
            name='budget_alert_pcts',
            field=models.JSONField(blank=True, default=accounts.models.default_alert_pcts, help_text='Percents of a budget that raise an alert, e.g. [50, 80, 100].', validators=[accounts.models.validate_alert_pcts]),
        ),
        migrations.AddField(
            model_name='account',
            name='time_zone',
            field=models.CharField(default='UTC', max_length=64, validators=[accounts.models.validate_time_zone]),
        ),
        migrations.AddField(
            model_name='apikey',
            name='budget_period',
            field=models.CharField(choices=[('none', 'None (the budget never resets)'), ('daily', "Daily (resets at midnight in the account's time zone)"), ('monthly', "Monthly (resets on the 1st, midnight in the account's time zone)")], default='none', max_length=8),
        ),
        migrations.AddField(
            model_name='apikey',
            name='period_ends_at',
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name='apikey',
            name='period_starts_at',
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name='group',
            name='budget_period',
            field=models.CharField(choices=[('none', 'None (the budget never resets)'), ('daily', "Daily (resets at midnight in the account's time zone)"), ('monthly', "Monthly (resets on the 1st, midnight in the account's time zone)")], default='none', max_length=8),
        ),
        migrations.AddField(
            model_name='group',
            name='period_ends_at',
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name='group',
            name='period_starts_at',
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AlterField(
            model_name='membership',
            name='role',
            field=models.CharField(choices=[('owner', 'Owner'), ('admin', 'Admin'), ('viewer', 'Viewer')], default='viewer', max_length=8),
        ),
        migrations.RunPython(member_to_viewer, viewer_to_member),
        migrations.AddIndex(
            model_name='apikey',
            index=models.Index(fields=['period_ends_at'], name='key_period_ends'),
        ),
        migrations.AddIndex(
            model_name='group',
            index=models.Index(fields=['period_ends_at'], name='group_period_ends'),
        ),
    ]
