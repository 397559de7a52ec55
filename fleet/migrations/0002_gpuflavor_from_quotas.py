"""GpuFlavor moves from quotas to fleet (issue 48, apps by domain): state only, its table keeps its name (quotas_gpuflavor)."""

import django.core.validators
from decimal import Decimal
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('quotas', '0016_hold_money'),
        ('fleet', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.CreateModel(
                name='GpuFlavor',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.CharField(help_text='What users pick, e.g. a100-80gb or a100-1g.10gb.', max_length=40, unique=True, validators=[django.core.validators.RegexValidator('^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$', "Use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit.")])),
                    ('resource_name', models.CharField(help_text='nvidia.com/gpu or nvidia.com/mig-<profile>.', max_length=100)),
                    ('gpu_model', models.CharField(help_text='Node label value of nvidia.com/gpu.product.', max_length=100)),
                    ('mig_profile', models.CharField(blank=True, help_text='e.g. 1g.10gb; empty for a full GPU.', max_length=20)),
                    ('gpu_memory_gb', models.PositiveIntegerField()),
                    ('gpu_fraction', models.DecimalField(decimal_places=6, default=Decimal('1'), help_text='Share of a physical GPU one unit is (a MIG 1g slice of an A100 is 1/7).', max_digits=7, validators=[django.core.validators.MinValueValidator(Decimal('0.000001')), django.core.validators.MaxValueValidator(Decimal('1'))])),
                    ('node_labels', models.JSONField(blank=True, default=dict, help_text='Node selector, a JSON object.')),
                    ('tolerations', models.JSONField(blank=True, default=list, help_text='JSON list of {"key", "operator", "value", "effect"} objects.')),
                    ('max_units_per_node', models.PositiveIntegerField(default=1, help_text='Units of this resource on the largest node: no worker may ask for more.', validators=[django.core.validators.MinValueValidator(1)])),
                    ('price_per_hour', models.DecimalField(decimal_places=4, help_text='On-demand price of one unit per hour.', max_digits=12, validators=[django.core.validators.MinValueValidator(Decimal('0'))])),
                    ('spot_price_per_hour', models.DecimalField(decimal_places=4, help_text='Spot price of one unit per hour.', max_digits=12, validators=[django.core.validators.MinValueValidator(Decimal('0'))])),
                    ('active', models.BooleanField(default=True, help_text='Inactive flavors cannot be requested any more.')),
                    ('description', models.CharField(blank=True, max_length=200)),
                    ('sharing', models.CharField(choices=[('none', 'Whole GPU'), ('mig', 'MIG slice'), ('time-slicing', 'Time-sliced'), ('mps', 'MPS')], default='none', help_text="How one physical GPU is shared: whole, MIG slices, time-sliced (no isolation: every pod sees the whole memory) or MPS (a memory limit per pod; one team's work).", max_length=20)),
                    ('replicas', models.PositiveSmallIntegerField(default=1, help_text="Time-sliced and MPS flavors: how many units one GPU is cut into (each unit is 1/replicas of a GPU, and its price is usually the GPU's price / replicas). 1 otherwise.", validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(48)])),
                    ('training', models.BooleanField(default=True, help_text='Whether training runs may use it (shared flavors never take distributed runs or more than one unit per pod).')),
                    ('one_team_per_gpu', models.BooleanField(default=True, help_text="MPS only: pods of different teams are never placed on one node's MPS GPUs (MPS limits memory per pod but does not isolate faults).")),
                ],
                options={
                    'verbose_name': 'GPU flavor',
                    'verbose_name_plural': 'GPU flavors',
                    'db_table': 'quotas_gpuflavor',
                    'ordering': ['name'],
                },
            ),
        ], database_operations=[]),
    ]
