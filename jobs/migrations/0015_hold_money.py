"""Issue 48: the open segment moves to the quota hold (runs' billing columns go; see workloads/migrations/_hold_money.py)."""

from django.db import migrations

from workloads.migrations._hold_money import move_segments

forward, backward = move_segments("jobs", "trainingrun", "run", ("queued", "admitted", "pending", "running"), committed=("gpus_per_worker", "workers"), limit="max_runtime_minutes")


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0014_charged_price"),
        ("quotas", "0016_hold_money"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
        migrations.RemoveField(model_name="trainingrun", name="billed_until"),
        migrations.RemoveField(model_name="trainingrun", name="charged_price"),
        migrations.RemoveField(model_name="trainingrun", name="open_idle"),
        migrations.RemoveField(model_name="trainingrun", name="open_units"),
    ]
