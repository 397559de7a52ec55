"""Budget history: the budget of each month, so a past month's burn-down uses that month's limit.

The history starts with every team's budget of today, recorded for this month; months before
it are drawn against that (the oldest row), as they were before the history existed.
"""

import django.db.models.deletion
from django.utils import timezone
import billing.models
from django.db import migrations, models


def seed_from_budgets(apps, schema_editor):
    TeamBudget = apps.get_model("quotas", "TeamBudget")
    BudgetMonth = apps.get_model("quotas", "BudgetMonth")
    month = timezone.localtime(timezone.now()).date().replace(day=1)
    BudgetMonth.objects.bulk_create(
        [BudgetMonth(team_id=b.team_id, month=month, monthly_limit=b.monthly_limit, currency=b.currency)
         for b in TeamBudget.objects.all()])


class Migration(migrations.Migration):

    dependencies = [
        ('portal', '0008_idempotency_request_hash'),
        ('quotas', '0006_queued_cost_per_hour'),
    ]

    operations = [
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
                'ordering': ['team__slug', '-month'],
                'constraints': [models.UniqueConstraint(fields=('team', 'month'), name='quotas_budget_month_unique')],
            },
        ),
        migrations.RunPython(seed_from_budgets, migrations.RunPython.noop),
    ]
