"""Billing's tables move from quotas (issue 48, apps by domain): state only, each keeps its name (quotas_*); no row moves."""

import billing.models
import django.core.validators
import django.db.models.deletion
import django.utils.timezone
from decimal import Decimal
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('quotas', '0016_hold_money'),
        ('fleet', '0002_gpuflavor_from_quotas'),
        ('portal', '0016_audit_actions_from_the_registry'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.CreateModel(
                name='TeamBudget',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('monthly_limit', models.DecimalField(decimal_places=4, max_digits=12, validators=[django.core.validators.MinValueValidator(Decimal('0'))])),
                    ('currency', models.CharField(default=billing.models._default_currency, max_length=3)),
                    ('alert_threshold_percent', models.PositiveSmallIntegerField(default=80, help_text='Warn the team once this share of the budget is spent.', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(100)])),
                    ('policy', models.CharField(choices=[('notify', 'Notify: banner and audit, running work continues'), ('stop', 'Stop: running runs are stopped, endpoints fall back to their minimum')], default='notify', help_text="What happens to running work once the month's budget is spent.", max_length=10)),
                    ('team', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='budget', to='portal.team')),
                ],
                options={
                    'db_table': 'quotas_teambudget',
                    'ordering': ['team__slug'],
                },
            ),
            migrations.CreateModel(
                name='BudgetMonth',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('month', models.DateField(help_text="The month's first day (in the portal's time zone).")),
                    ('monthly_limit', models.DecimalField(blank=True, decimal_places=4, max_digits=12, null=True)),
                    ('currency', models.CharField(default=billing.models._default_currency, max_length=3)),
                    ('team', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='budget_months', to='portal.team')),
                ],
                options={
                    'db_table': 'quotas_budgetmonth',
                    'ordering': ['team__slug', '-month'],
                    'constraints': [models.UniqueConstraint(fields=('team', 'month'), name='quotas_budget_month_unique')],
                },
            ),
            migrations.CreateModel(
                name='ClusterPrice',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('price_per_hour', models.DecimalField(decimal_places=4, help_text='Per unit and hour on this cluster.', max_digits=12, validators=[django.core.validators.MinValueValidator(Decimal('0'))])),
                    ('spot_price_per_hour', models.DecimalField(blank=True, decimal_places=4, help_text="Spot, per unit and hour on this cluster; empty: the flavor's.", max_digits=12, null=True, validators=[django.core.validators.MinValueValidator(Decimal('0'))])),
                    ('cluster', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='prices', to='fleet.cluster')),
                    ('flavor', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='cluster_prices', to='fleet.gpuflavor')),
                ],
                options={
                    'db_table': 'quotas_clusterprice',
                    'ordering': ['cluster__name', 'flavor__name'],
                    'constraints': [models.UniqueConstraint(fields=('cluster', 'flavor'), name='uniq_cluster_price')],
                },
            ),
            migrations.CreateModel(
                name='PreemptionEvent',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('ref', models.CharField(db_index=True, help_text='The preempted workload, e.g. "run:42".', max_length=100)),
                    ('cause', models.CharField(choices=[('reclaim', "Quota reclaimed by its cohort's lender"), ('spot', 'Spot capacity reclaimed by the provider'), ('within_team', "Its team's high-priority work (within-team priority)")], db_default='reclaim', default='reclaim', max_length=16)),
                    ('for_ref', models.CharField(blank=True, max_length=100)),
                    ('units', models.PositiveIntegerField(help_text='Units taken back.')),
                    ('reason', models.CharField(max_length=500)),
                    ('grace_seconds', models.PositiveIntegerField(default=0)),
                    ('lost_gpu_hours', models.DecimalField(decimal_places=10, default=Decimal('0'), max_digits=20)),
                    ('lost_cost', models.DecimalField(decimal_places=10, default=Decimal('0'), max_digits=20)),
                    ('currency', models.CharField(default=billing.models._default_currency, max_length=3)),
                    ('at', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                    ('by_team', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='preemptions_made', to='portal.team')),
                    ('flavor', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='fleet.gpuflavor')),
                    ('team', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='preemptions_suffered', to='portal.team')),
                    ('user', models.ForeignKey(blank=True, help_text="The victim's owner (usage reports group by user).", null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ],
                options={
                    'db_table': 'quotas_preemptionevent',
                    'ordering': ['-at', '-pk'],
                    'indexes': [models.Index(fields=['team', 'at'], name='preemption_team_at_idx')],
                },
            ),
            migrations.CreateModel(
                name='QuotaHold',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('ref', models.CharField(help_text='The workload, e.g. "run:42".', max_length=100)),
                    ('units', models.PositiveIntegerField()),
                    ('units_per_node', models.PositiveIntegerField(default=1)),
                    ('priority', models.PositiveSmallIntegerField(choices=[(0, 'low'), (1, 'normal'), (2, 'high')], default=1)),
                    ('spot', models.BooleanField(default=False)),
                    ('description', models.CharField(blank=True, max_length=200)),
                    ('borrowed_units', models.PositiveIntegerField(db_default=0, default=0)),
                    ('created_at', models.DateTimeField(auto_now_add=True)),
                    ('released_at', models.DateTimeField(blank=True, null=True)),
                    ('committed_units', models.PositiveIntegerField(db_default=0, default=0)),
                    ('limit_minutes', models.PositiveIntegerField(blank=True, null=True)),
                    ('started_at', models.DateTimeField(blank=True, null=True)),
                    ('billed_until', models.DateTimeField(blank=True, null=True)),
                    ('open_units', models.PositiveIntegerField(db_default=0, default=0)),
                    ('open_idle', models.BooleanField(db_default=False, default=False)),
                    ('charged_price', models.DecimalField(blank=True, decimal_places=4, max_digits=12, null=True)),
                    ('cluster', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='fleet.cluster')),
                    ('flavor', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='quota_holds', to='fleet.gpuflavor')),
                    ('team', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='quota_holds', to='portal.team')),
                    ('user', models.ForeignKey(blank=True, help_text='Who asked: its cost is reported under them.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ],
                options={
                    'db_table': 'quotas_quotahold',
                    'ordering': ['-created_at'],
                    'indexes': [models.Index(condition=models.Q(('released_at__isnull', True)), fields=['team', 'flavor'], name='active_holds_idx'), models.Index(fields=['ref', '-created_at'], name='holds_by_ref_idx'), models.Index(condition=models.Q(('open_units__gt', 0), ('released_at__isnull', True)), fields=['team'], name='open_segments_idx')],
                    'constraints': [models.UniqueConstraint(condition=models.Q(('released_at__isnull', True)), fields=('ref',), name='uniq_active_hold_per_ref')],
                },
            ),
            migrations.CreateModel(
                name='UsageRecord',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('ref', models.CharField(max_length=100)),
                    ('hour', models.DateTimeField(help_text="The hour (in the portal's time zone) this row accumulates.")),
                    ('start', models.DateTimeField()),
                    ('end', models.DateTimeField()),
                    ('units', models.PositiveIntegerField()),
                    ('spot', models.BooleanField(default=False)),
                    ('gpu_hours', models.DecimalField(decimal_places=10, max_digits=20)),
                    ('cost', models.DecimalField(decimal_places=10, max_digits=20)),
                    ('idle_gpu_hours', models.DecimalField(decimal_places=10, default=Decimal('0'), max_digits=20)),
                    ('idle_cost', models.DecimalField(decimal_places=10, default=Decimal('0'), max_digits=20)),
                    ('borrowed_gpu_hours', models.DecimalField(db_default=Decimal('0'), decimal_places=10, default=Decimal('0'), max_digits=20)),
                    ('unit_hours', models.DecimalField(db_default=Decimal('0'), decimal_places=10, default=Decimal('0'), max_digits=20)),
                    ('currency', models.CharField(default=billing.models._default_currency, max_length=3)),
                    ('flavor', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='usage_records', to='fleet.gpuflavor')),
                    ('team', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='usage_records', to='portal.team')),
                    ('user', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ],
                options={
                    'db_table': 'quotas_usagerecord',
                    'ordering': ['-start'],
                    'indexes': [models.Index(fields=['team', 'start'], include=('cost',), name='usage_team_start_cost_idx')],
                    'constraints': [models.UniqueConstraint(fields=('ref', 'hour'), name='uniq_usage_per_hour'), models.CheckConstraint(condition=models.Q(('end__gt', models.F('start'))), name='usage_end_after_start')],
                },
            ),
        ], database_operations=[]),
    ]
