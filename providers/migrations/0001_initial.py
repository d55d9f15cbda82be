# The profile models move here from the gateway app: state only, the tables stay as they are.

import django.core.validators
import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('gateway', '0003_idempotency_record'),
    ]

    state_operations = [
        migrations.CreateModel(
            name='ProviderProfile',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.SlugField(max_length=64, unique=True)),
                ('kind', models.CharField(choices=[('openai', 'OpenAI'), ('openai_compatible', 'OpenAI-compatible'), ('anthropic', 'Anthropic'), ('openrouter', 'OpenRouter'), ('fake', 'Fake (in-process)'), ('azure', 'Azure OpenAI'), ('bedrock', 'AWS Bedrock'), ('vertex', 'Google Vertex')], max_length=24)),
                ('base_url', models.CharField(blank=True, max_length=500, validators=[django.core.validators.URLValidator()])),
                ('api_key_env', models.CharField(blank=True, max_length=128)),
                ('api_key_sealed', models.BinaryField(blank=True, editable=False, null=True)),
                ('api_key_seal_version', models.CharField(blank=True, editable=False, max_length=16)),
                ('api_key_last4', models.CharField(blank=True, editable=False, max_length=4)),
                ('allows_platform', models.BooleanField(default=True)),
                ('enabled', models.BooleanField(default=True)),
                ('timeout_s', models.PositiveIntegerField(default=60)),
                ('stream_idle_timeout_s', models.PositiveIntegerField(default=30)),
                ('updated_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                'db_table': 'gateway_providerprofile',
            },
        ),
        migrations.CreateModel(
            name='ProviderModel',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(help_text='The model name clients ask for.', max_length=128)),
                ('upstream', models.CharField(help_text='The model name sent to the vendor.', max_length=128)),
                ('input_micro_per_mtok', models.BigIntegerField(default=0)),
                ('output_micro_per_mtok', models.BigIntegerField(default=0)),
                ('max_output_tokens', models.PositiveIntegerField(default=4096)),
                ('profile', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='models', to='providers.providerprofile')),
            ],
            options={
                'db_table': 'gateway_providermodel',
                'constraints': [models.UniqueConstraint(fields=('profile', 'name'), name='profile_model_once')],
            },
        ),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=state_operations),
    ]
