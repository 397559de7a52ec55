"""The ledger keeps unit-hours beside (physical) GPU-hours (issue 37.6).

Rows written before have their unit-hours from their GPU-hours and their flavor's fraction
(units × fraction × hours ÷ fraction): exact, since a flavor's fraction could not change before
sharing came with this release's flavors.
"""

from decimal import Decimal

from django.db import migrations, models
from django.db.models import F


def backfill(apps, schema_editor):
    flavors = apps.get_model("quotas", "GpuFlavor")
    records = apps.get_model("quotas", "UsageRecord")
    for flavor_id, fraction in flavors.objects.values_list("pk", "gpu_fraction"):
        records.objects.filter(flavor_id=flavor_id).update(unit_hours=F("gpu_hours") / fraction)


class Migration(migrations.Migration):

    dependencies = [
        ("quotas", "0013_flavor_sharing"),
    ]

    operations = [
        migrations.AddField(
            model_name="usagerecord",
            name="unit_hours",
            field=models.DecimalField(db_default=Decimal("0"), decimal_places=10, default=Decimal("0"), max_digits=20),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
