"""Issue 48, point 1: notebooks move to the one Workload table (workloads/migrations/_one_table.py)."""

from django.db import migrations

from workloads.migrations._one_table import move_to_workload_table


class Migration(migrations.Migration):

    dependencies = [
        ("tinykind", "0010_hold_money"),
        ("workloads", "0009_workload_table"),
    ]

    operations = move_to_workload_table("notebook", "nb")
