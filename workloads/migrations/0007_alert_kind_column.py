"""An alert episode's kind of alert is ``alert_kind`` (issue 48: plain ``kind`` means a workload kind only)."""

from django.db import migrations, models
from django.db.models import Q


class Migration(migrations.Migration):
    dependencies = [("workloads", "0006_alerts")]

    operations = [
        migrations.RemoveConstraint(model_name="alertepisode", name="uniq_active_alert_episode"),
        migrations.RenameField(model_name="alertepisode", old_name="kind", new_name="alert_kind"),
        migrations.AddConstraint(
            model_name="alertepisode",
            constraint=models.UniqueConstraint(condition=~Q(state="closed"), fields=("ref", "alert_kind"),
                                               name="uniq_active_alert_episode")),
    ]
