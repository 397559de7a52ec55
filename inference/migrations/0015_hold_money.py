"""Issue 48: the open segment moves to the quota hold (endpoints' billing columns go; see workloads/migrations/_hold_money.py)."""

from django.db import migrations

from workloads.migrations._hold_money import move_segments

forward, backward = move_segments("inference", "inferenceendpoint", "ep", ("queued", "deploying", "ready", "scaled_to_zero", "degraded"), committed=("min_replicas", "gpus_per_replica"))


class Migration(migrations.Migration):

    dependencies = [
        ("inference", "0014_revisions"),
        ("quotas", "0016_hold_money"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
        migrations.RemoveField(model_name="inferenceendpoint", name="billed_until"),
        migrations.RemoveField(model_name="inferenceendpoint", name="charged_price"),
        migrations.RemoveField(model_name="inferenceendpoint", name="open_idle"),
        migrations.RemoveField(model_name="inferenceendpoint", name="open_units"),
    ]
