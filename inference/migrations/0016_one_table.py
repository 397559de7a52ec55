"""Issue 48, point 1: endpoints move to the one Workload table (workloads/migrations/_one_table.py)."""

from django.db import migrations

from workloads.migrations._one_table import move_to_workload_table


class Migration(migrations.Migration):

    dependencies = [
        ("inference", "0015_hold_money"),
        ("workloads", "0009_workload_table"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="inferenceendpoint", name="uniq_live_endpoint_name"),
        migrations.RemoveIndex(model_name="inferenceendpoint", name="inference_i_team_id_1277ed_idx"),
        *move_to_workload_table("inferenceendpoint", "ep", ("deleted", "failed"), "uniq_live_endpoint_name"),
    ]
