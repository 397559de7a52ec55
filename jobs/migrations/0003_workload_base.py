"""TrainingRun on the shared Workload base: honest names for the apply and billing columns.

* ``applied_at`` was set *before* applying: it becomes ``apply_started_at``, and a new
  ``applied_at`` records when an apply succeeded (backfilled for runs that reached the cluster);
* ``billed_units`` (units to bill next) becomes ``open_units`` (units of the open segment);
* ``cost_to_date`` (the ledger's total) becomes ``billed_cost`` — cost to date now adds the open segment.
"""

from django.conf import settings
from django.db import migrations, models
import django.db.models.deletion


def backfill_applied_at(apps, schema_editor):
    TrainingRun = apps.get_model("jobs", "TrainingRun")
    TrainingRun.objects.exclude(state__in=["queued", "admitted"]).filter(apply_started_at__isnull=False).update(
        applied_at=models.F("apply_started_at"))


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0002_cost_to_date_precision"),
        ("portal", "0002_idempotency"),
        ("quotas", "0002_usage_per_hour"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RenameField("trainingrun", "applied_at", "apply_started_at"),
        migrations.AddField("trainingrun", "applied_at", models.DateTimeField(blank=True, null=True)),
        migrations.RunPython(backfill_applied_at, migrations.RunPython.noop),
        migrations.RenameField("trainingrun", "billed_units", "open_units"),
        migrations.RenameField("trainingrun", "cost_to_date", "billed_cost"),
        migrations.AlterField("trainingrun", "apply_started_at", models.DateTimeField(blank=True, null=True)),
        migrations.AlterField(
            "trainingrun", "state",
            models.CharField(choices=[("queued", "Queued"), ("admitted", "Admitted"), ("pending", "Pending"),
                                      ("running", "Running"), ("succeeded", "Succeeded"), ("failed", "Failed"),
                                      ("cancelled", "Cancelled")], db_index=True, default="queued", max_length=16),
        ),
        migrations.AlterField(
            "trainingrun", "team",
            models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="%(class)s_set",
                              to="portal.team"),
        ),
        migrations.AlterField(
            "trainingrun", "created_by",
            models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="%(class)s_set",
                              to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            "trainingrun", "flavor",
            models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="%(class)s_set",
                              to="quotas.gpuflavor"),
        ),
    ]
