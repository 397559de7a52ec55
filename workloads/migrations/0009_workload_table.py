"""Issue 48, point 1: the one Workload table (each kind app's next migration moves its rows here: _one_table.py)."""

import django.db.models.deletion
from decimal import Decimal
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    # Only what the table refers to: a later migration of those apps is not this one's to wait for (the
    # migration tests move apps back and forth across their own later migrations).

    dependencies = [
        ('fleet', '0001_initial'),
        ('portal', '0001_initial'),
        ('quotas', '0001_initial'),
        ('workloads', '0008_attempt_end_reason_code'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Workload',
            fields=[
                ('uid', models.BigAutoField(primary_key=True, serialize=False)),
                ('kind', models.CharField(editable=False, max_length=16)),
                ('number', models.PositiveBigIntegerField(editable=False, null=True)),
                ('name', models.CharField(max_length=40)),
                ('spot', models.BooleanField(default=False)),
                ('state', models.CharField(db_index=True, max_length=16)),
                ('reason', models.CharField(blank=True, max_length=500)),
                ('reason_code', models.CharField(blank=True, choices=[('', 'Nothing to say'), ('queued', "Waiting in the team's queue (quota or budget)"), ('waiting_for_worker', 'Admitted, waiting for a worker'), ('submitted', 'Submitted to the cluster'), ('cluster', "The cluster's own words"), ('waiting_for_capacity', 'Waiting for cluster capacity'), ('burst_capped', 'Burst capped (quota or budget)'), ('ended_by_user', 'Cancelled or deleted by a user'), ('stopped_by_budget', 'Stopped by the budget policy'), ('cluster_rejected', 'The cluster rejected it'), ('cluster_unreachable', 'The cluster could not be reached'), ('objects_vanished', 'Its cluster objects disappeared'), ('preempting', 'Being preempted: its pods are stopping'), ('preempted', 'Preempted and queued again'), ('cluster_lost', 'Its cluster does not answer')], default='', max_length=32)),
                ('created_at', models.DateTimeField(auto_now_add=True, db_index=True)),
                ('admitted_at', models.DateTimeField(blank=True, null=True)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('apply_attempts', models.PositiveSmallIntegerField(default=0)),
                ('apply_started_at', models.DateTimeField(blank=True, null=True)),
                ('applied_at', models.DateTimeField(blank=True, null=True)),
                ('billed_cost', models.DecimalField(decimal_places=10, default=Decimal('0'), max_digits=20)),
                ('idle_since', models.DateTimeField(blank=True, null=True)),
                ('preemptions', models.PositiveSmallIntegerField(db_default=0, default=0)),
                ('last_preempted_at', models.DateTimeField(blank=True, null=True)),
                ('preempting_since', models.DateTimeField(blank=True, null=True)),
                ('attempt', models.PositiveIntegerField(db_default=1, default=1)),
                ('attempt_started_at', models.DateTimeField(blank=True, null=True)),
                ('placement_reason', models.CharField(blank=True, max_length=300)),
                ('placed_at', models.DateTimeField(blank=True, null=True)),
                ('cluster_selector', models.JSONField(blank=True, default=dict)),
                ('gpu_memory_gb', models.FloatField(blank=True, null=True)),
                ('cluster', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='fleet.cluster')),
                ('created_by', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='workloads', to=settings.AUTH_USER_MODEL)),
                ('flavor', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='workloads', to='quotas.gpuflavor')),
                ('parent', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='children', to='workloads.workload')),
                ('team', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='workloads', to='portal.team')),
            ],
            options={
                'ordering': ['-created_at', '-pk'],
                'indexes': [models.Index(fields=['team', 'state'], name='workload_team_state_idx'), models.Index(fields=['kind', 'state'], name='workload_kind_state_idx')],
                'constraints': [models.UniqueConstraint(fields=('kind', 'number'), name='uniq_workload_kind_number')],
            },
        ),
    ]
