"""Several independent simulated clusters (issue #25): every row names its cluster, the clock is
one row per cluster, and a cluster can be silenced (SimSilence). 0004 moves existing rows to
the inventory's first cluster.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("sandbox", "0002_graceful_deletion_and_spot"),
    ]

    operations = [
        migrations.CreateModel(
            name="SimSilence",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("cluster", models.CharField(max_length=63, unique=True)),
                ("since", models.DateTimeField()),
            ],
        ),
        migrations.RemoveConstraint(
            model_name="simload",
            name="sandbox_load_unique",
        ),
        migrations.RemoveConstraint(
            model_name="simobject",
            name="sandbox_object_unique",
        ),
        migrations.RemoveConstraint(
            model_name="simpod",
            name="sandbox_pod_unique",
        ),
        migrations.RemoveIndex(
            model_name="simevent",
            name="sandbox_sim_namespa_51a2f6_idx",
        ),
        migrations.RemoveIndex(
            model_name="simobject",
            name="sandbox_sim_namespa_947450_idx",
        ),
        migrations.RemoveIndex(
            model_name="simobject",
            name="sandbox_sim_done_e729a9_idx",
        ),
        migrations.RemoveIndex(
            model_name="simpod",
            name="sandbox_sim_active_2188aa_idx",
        ),
        migrations.RemoveIndex(
            model_name="simpod",
            name="sandbox_sim_namespa_5d74bc_idx",
        ),
        migrations.AddField(
            model_name="simclock",
            name="cluster",
            field=models.CharField(default="default", max_length=63, unique=True),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="simevent",
            name="cluster",
            field=models.CharField(default="default", max_length=63),
        ),
        migrations.AddField(
            model_name="simload",
            name="cluster",
            field=models.CharField(default="default", max_length=63),
        ),
        migrations.AddField(
            model_name="simnodeoutage",
            name="cluster",
            field=models.CharField(default="default", max_length=63),
        ),
        migrations.AddField(
            model_name="simobject",
            name="cluster",
            field=models.CharField(default="default", max_length=63),
        ),
        migrations.AddField(
            model_name="simpod",
            name="cluster",
            field=models.CharField(default="default", max_length=63),
        ),
        migrations.AlterField(
            model_name="simevent",
            name="time",
            field=models.DateTimeField(),
        ),
        migrations.AlterField(
            model_name="simnodeoutage",
            name="node",
            field=models.CharField(max_length=100),
        ),
        migrations.AddIndex(
            model_name="simevent",
            index=models.Index(fields=["cluster", "namespace", "workload", "time"], name="sandbox_sim_cluster_160f2c_idx"),
        ),
        migrations.AddIndex(
            model_name="simevent",
            index=models.Index(fields=["cluster", "time"], name="sandbox_sim_cluster_3c60d7_idx"),
        ),
        migrations.AddIndex(
            model_name="simobject",
            index=models.Index(fields=["cluster", "namespace", "workload"], name="sandbox_sim_cluster_e03c25_idx"),
        ),
        migrations.AddIndex(
            model_name="simobject",
            index=models.Index(fields=["cluster", "done", "kind"], name="sandbox_sim_cluster_c882f2_idx"),
        ),
        migrations.AddIndex(
            model_name="simpod",
            index=models.Index(fields=["cluster", "active"], name="sandbox_sim_cluster_ac7e40_idx"),
        ),
        migrations.AddIndex(
            model_name="simpod",
            index=models.Index(fields=["cluster", "namespace", "workload"], name="sandbox_sim_cluster_b9ce06_idx"),
        ),
        migrations.AddConstraint(
            model_name="simload",
            constraint=models.UniqueConstraint(fields=("cluster", "namespace", "workload"), name="sandbox_load_unique"),
        ),
        migrations.AddConstraint(
            model_name="simnodeoutage",
            constraint=models.UniqueConstraint(fields=("cluster", "node"), name="sandbox_outage_unique"),
        ),
        migrations.AddConstraint(
            model_name="simobject",
            constraint=models.UniqueConstraint(fields=("cluster", "kind", "namespace", "name"), name="sandbox_object_unique"),
        ),
        migrations.AddConstraint(
            model_name="simpod",
            constraint=models.UniqueConstraint(fields=("cluster", "namespace", "name"), name="sandbox_pod_unique"),
        ),
    ]
