"""The quotas app splits by domain (issue 48): GpuFlavor moves to fleet, the money tables to billing.

State only: every table keeps its name and its rows (the new apps' models say ``db_table``), the
foreign keys of the quotas that stay point at fleet's GpuFlavor (the same table). The content types
move with the models, so staff permissions on them (``billing.change_teambudget``, the admin's
history) keep their rows: renamed, not created anew.
"""

import django.db.models.deletion
from django.db import migrations, models

#: (model, its new app) of every model that leaves quotas.
MOVED = [("gpuflavor", "fleet"), ("clusterprice", "billing"), ("teambudget", "billing"), ("budgetmonth", "billing"),
         ("quotahold", "billing"), ("usagerecord", "billing"), ("preemptionevent", "billing")]


def _move_content_types(apps, pairs):
    content_type = apps.get_model("contenttypes", "ContentType")
    for model, old_app, new_app in pairs:
        if not content_type.objects.filter(app_label=new_app, model=model).exists():
            content_type.objects.filter(app_label=old_app, model=model).update(app_label=new_app)


def forward(apps, schema_editor):
    _move_content_types(apps, [(model, "quotas", app) for model, app in MOVED])


def backward(apps, schema_editor):
    _move_content_types(apps, [(model, app, "quotas") for model, app in MOVED])


class Migration(migrations.Migration):

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("quotas", "0016_hold_money"),
        ("fleet", "0002_gpuflavor_from_quotas"),
        ("billing", "0001_initial"),
        ("workloads", "0010_flavor_in_fleet"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.AlterField(
                model_name="teamquota",
                name="flavor",
                field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="quotas",
                                        to="fleet.gpuflavor"),
            ),
            migrations.AlterField(
                model_name="queuedrequest",
                name="flavor",
                field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="queued_requests",
                                        to="fleet.gpuflavor"),
            ),
            migrations.DeleteModel(name="ClusterPrice"),
            migrations.DeleteModel(name="TeamBudget"),
            migrations.DeleteModel(name="BudgetMonth"),
            migrations.DeleteModel(name="QuotaHold"),
            migrations.DeleteModel(name="UsageRecord"),
            migrations.DeleteModel(name="PreemptionEvent"),
            migrations.DeleteModel(name="GpuFlavor"),
        ], database_operations=[]),
        migrations.RunPython(forward, backward),
    ]
