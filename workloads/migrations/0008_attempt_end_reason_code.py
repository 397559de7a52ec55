"""An attempt's end keeps its reason pair as a workload does: ``end_reason_code`` beside ``end_reason`` (issue 48)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("workloads", "0007_alert_kind_column")]

    operations = [migrations.RenameField(model_name="attempt", old_name="end_code", new_name="end_reason_code")]
