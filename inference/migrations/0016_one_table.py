"""Issue 48, point 1: endpoints move to the one Workload table (workloads/migrations/_one_table.py)."""

from django.db import migrations

from workloads.migrations._one_table import move_to_workload_table


class Migration(migrations.Migration):

    # This kind's history names quotas' GpuFlavor and holds, which quotas hands to fleet and billing in
    # its migration 0017 (issue 48, apps by domain): what names them runs first.
    run_before = [("quotas", "0017_flavors_to_fleet_money_to_billing")]

    dependencies = [
        ("inference", "0015_hold_money"),
        ("workloads", "0009_workload_table"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="inferenceendpoint", name="uniq_live_endpoint_name"),
        migrations.RemoveIndex(model_name="inferenceendpoint", name="inference_i_team_id_1277ed_idx"),
        *move_to_workload_table("inferenceendpoint", "ep", ("deleted", "failed"), "uniq_live_endpoint_name"),
    ]
