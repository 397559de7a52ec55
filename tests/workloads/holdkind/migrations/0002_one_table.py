"""Issue 48, point 1: blocks move to the one Workload table (workloads/migrations/_one_table.py)."""

from django.db import migrations

from workloads.migrations._one_table import move_to_workload_table


class Migration(migrations.Migration):

    # This kind's history names quotas' GpuFlavor and holds, which quotas hands to fleet and billing in
    # its migration 0017 (issue 48, apps by domain): what names them runs first.
    run_before = [("quotas", "0017_flavors_to_fleet_money_to_billing")]

    dependencies = [
        ("holdkind", "0001_initial"),
        ("workloads", "0009_workload_table"),
    ]

    operations = move_to_workload_table("unitblock", "blk")
