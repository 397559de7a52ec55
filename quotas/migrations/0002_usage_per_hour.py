"""One ledger row per (workload, hour) instead of one per reconcile interval; ten decimals for amounts;
the (team, start) index covers the cost, so the budget check's monthly sum is index-only.

Existing rows keep ``hour = start``: each is unique per (ref, start) already, and later
intervals of the same workload go to the row of their (truncated) hour.
"""

from django.db import migrations, models


def copy_start(apps, schema_editor):
    UsageRecord = apps.get_model("quotas", "UsageRecord")
    UsageRecord.objects.update(hour=models.F("start"))


class Migration(migrations.Migration):
    dependencies = [("quotas", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="usagerecord",
            name="hour",
            field=models.DateTimeField(null=True,
                                       help_text="The hour (in the portal's time zone) this row accumulates."),
        ),
        migrations.RunPython(copy_start, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="usagerecord",
            name="hour",
            field=models.DateTimeField(help_text="The hour (in the portal's time zone) this row accumulates."),
        ),
        migrations.RemoveConstraint(model_name="usagerecord", name="uniq_usage_per_interval"),
        migrations.AddConstraint(
            model_name="usagerecord",
            constraint=models.UniqueConstraint(fields=("ref", "hour"), name="uniq_usage_per_hour"),
        ),
        migrations.RemoveIndex(model_name="usagerecord", name="usage_team_start_idx"),
        migrations.AddIndex(
            model_name="usagerecord",
            index=models.Index(fields=["team", "start"], include=("cost",), name="usage_team_start_cost_idx"),
        ),
        migrations.AlterField(model_name="usagerecord", name="gpu_hours",
                              field=models.DecimalField(decimal_places=10, max_digits=20)),
        migrations.AlterField(model_name="usagerecord", name="cost",
                              field=models.DecimalField(decimal_places=10, max_digits=20)),
    ]
