"""Issue 48, point 1: blocks move to the one Workload table (workloads/migrations/_one_table.py)."""

from django.db import migrations

from workloads.migrations._one_table import move_to_workload_table


class Migration(migrations.Migration):

    dependencies = [
        ("holdkind", "0001_initial"),
        ("workloads", "0009_workload_table"),
    ]

    operations = move_to_workload_table("unitblock", "blk")
