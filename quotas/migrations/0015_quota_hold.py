"""The units an admitted workload holds are a quota hold (``QuotaHold``), not a "reservation": that word is the
calendar's (issue 48, point 6). The table, its related names, its constraint and its index are renamed; no row
changes."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("quotas", "0014_usage_unit_hours"),
    ]

    operations = [
        migrations.RenameModel(old_name="Reservation", new_name="QuotaHold"),
        migrations.AlterField(
            model_name="quotahold",
            name="flavor",
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="quota_holds",
                                    to="quotas.gpuflavor"),
        ),
        migrations.AlterField(
            model_name="quotahold",
            name="team",
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="quota_holds",
                                    to="portal.team"),
        ),
        migrations.RemoveConstraint(model_name="quotahold", name="uniq_active_reservation_per_ref"),
        migrations.AddConstraint(
            model_name="quotahold",
            constraint=models.UniqueConstraint(condition=models.Q(("released_at__isnull", True)), fields=("ref",),
                                               name="uniq_active_hold_per_ref"),
        ),
        migrations.RenameIndex(model_name="quotahold", new_name="active_holds_idx", old_name="active_reservations_idx"),
    ]
