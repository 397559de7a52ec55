"""A run's training API is fixed when its attempt's apply begins (``applied_training_api``; docs/training.md
"Moving a cluster from v1 to v2"), no longer read from its cluster every time it is asked.

What existing runs were applied as the database never kept: each apply rendered its cluster's API of that moment.
The data step gives every run whose current attempt's apply began (applied, or being applied) its cluster's API
now — what the portal took it for the moment before this migration, so nothing changes for it today, and a move
of its cluster from now on no longer does. A run whose cluster moved before the upgrade while it ran was already
taken for the new API, and stays so: no record says what it was applied as. Runs whose apply has not begun keep ""
and are fixed by their apply, as new runs are.
"""

from django.db import migrations, models
from django.db.models import Q

from cluster.training import effective


def fix_applied_runs(apps, schema_editor):
    cluster_model = apps.get_model("fleet", "Cluster")
    run_model = apps.get_model("jobs", "TrainingRun")
    began = Q(applied_at__isnull=False) | Q(apply_attempts__gt=0)  # TrainingRun.apply_began
    for cluster in cluster_model.objects.all():
        run_model.objects.filter(began, cluster_id=cluster.pk).update(
            applied_training_api=effective(cluster.training_api, cluster.training_api_override))


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0018_framework_trainer_status'),
        ('fleet', '0004_node_pools'),
    ]

    operations = [
        migrations.AddField(
            model_name='trainingrun',
            name='applied_training_api',
            field=models.CharField(blank=True, choices=[('trainjob', 'trainjob'), ('pytorchjob', 'pytorchjob'), ('none', 'none')], default='', max_length=20),
        ),
        migrations.RunPython(fix_applied_runs, migrations.RunPython.noop),
    ]
