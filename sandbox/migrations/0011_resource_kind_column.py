"""A simulated object's Kubernetes kind is ``resource_kind`` (issue 48: plain ``kind`` means a workload kind only)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("sandbox", "0010_simpod_ready_at")]

    operations = [
        migrations.RemoveConstraint(model_name="simobject", name="sandbox_object_unique"),
        migrations.RemoveIndex(model_name="simobject", name="sandbox_sim_cluster_c882f2_idx"),
        migrations.RenameField(model_name="simobject", old_name="kind", new_name="resource_kind"),
        migrations.AddConstraint(
            model_name="simobject",
            constraint=models.UniqueConstraint(fields=("cluster", "resource_kind", "namespace", "name"),
                                               name="sandbox_object_unique")),
        migrations.AddIndex(
            model_name="simobject",
            index=models.Index(fields=["cluster", "done", "resource_kind"], name="sandbox_sim_cluster_c882f2_idx")),
    ]
