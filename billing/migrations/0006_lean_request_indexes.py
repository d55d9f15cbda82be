"""Lean per-request indexes: request ids indexed without PostgreSQL's varchar_pattern_ops twin
(a field's db_index / unique adds one; Meta.indexes / Meta.constraints do not), and the
reaper's expiry indexes only over the rows still open."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0005_budget_periods_and_alerts'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='reservation',
            name='billing_res_status_8ea263_idx',
        ),
        migrations.RemoveIndex(
            model_name='spendhold',
            name='billing_spe_status_a52968_idx',
        ),
        # Each drops the field's index (or unique constraint) and its _like twin ...
        migrations.AlterField(
            model_name='reservation',
            name='request_id',
            field=models.CharField(max_length=64),
        ),
        migrations.AlterField(
            model_name='settledrequest',
            name='request_id',
            field=models.CharField(max_length=64),
        ),
        migrations.AlterField(
            model_name='spendhold',
            name='request_id',
            field=models.CharField(max_length=64),
        ),
        # ... and these put back the one index each query uses (same transaction).
        migrations.AddIndex(
            model_name='reservation',
            index=models.Index(fields=['request_id'], name='reservation_request'),
        ),
        migrations.AddConstraint(
            model_name='settledrequest',
            constraint=models.UniqueConstraint(fields=('request_id',), name='settled_request_once'),
        ),
        migrations.AddConstraint(
            model_name='spendhold',
            constraint=models.UniqueConstraint(fields=('request_id',), name='spend_hold_once'),
        ),
        migrations.AddIndex(
            model_name='reservation',
            index=models.Index(condition=models.Q(('status', 'pending')), fields=['expires_at'], name='reservation_open_expiry'),
        ),
        migrations.AddIndex(
            model_name='spendhold',
            index=models.Index(condition=models.Q(('status', 'held')), fields=['expires_at'], name='spend_hold_open_expiry'),
        ),
    ]
