"""A workload's flavor is fleet's GpuFlavor now (it moved from quotas, same table): state only."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('fleet', '0002_gpuflavor_from_quotas'),
        ('workloads', '0009_workload_table'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.AlterField(
                model_name='workload',
                name='flavor',
                field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='workloads', to='fleet.gpuflavor'),
            ),
        ], database_operations=[]),
    ]
