"""Replica samples: the observed counts the replicas chart plots, beside the scaling log of decisions.

Existing endpoints keep the history they had: each scaling log row's counts become a sample.
"""

import django.db.models.deletion
from django.db import migrations, models


def copy_the_scaling_log(apps, schema_editor):
    ScalingEvent = apps.get_model("inference", "ScalingEvent")
    ReplicaSample = apps.get_model("inference", "ReplicaSample")
    rows = ScalingEvent.objects.order_by("endpoint_id", "at", "pk").values_list(
        "endpoint_id", "at", "replicas", "desired_replicas", "replica_ceiling")
    ReplicaSample.objects.bulk_create(
        (ReplicaSample(endpoint_id=endpoint, at=at, ready=ready, desired=desired, ceiling=ceiling)
         for endpoint, at, ready, desired, ceiling in rows.iterator()), batch_size=1000)


class Migration(migrations.Migration):

    dependencies = [
        ('inference', '0003_scope_autoscale_queries'),
    ]

    operations = [
        migrations.CreateModel(
            name='ReplicaSample',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('at', models.DateTimeField()),
                ('ready', models.PositiveIntegerField()),
                ('desired', models.PositiveIntegerField()),
                ('ceiling', models.PositiveIntegerField()),
                ('endpoint', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='replica_samples', to='inference.inferenceendpoint')),
            ],
            options={
                'ordering': ['-at', '-pk'],
                'indexes': [models.Index(fields=['endpoint', '-at'], name='inference_r_endpoin_13a43c_idx')],
            },
        ),
        migrations.RunPython(copy_the_scaling_log, migrations.RunPython.noop),
    ]
