"""Issue 48: the open segment moves to the quota hold (workspaces' billing columns go; see workloads/migrations/_hold_money.py)."""

from django.db import migrations

from workloads.migrations._hold_money import move_segments

forward, backward = move_segments("workspaces", "workspace", "ws", ("queued", "admitted", "starting", "running"), committed=("gpus",))


class Migration(migrations.Migration):

    dependencies = [
        ("workspaces", "0002_charged_price"),
        ("quotas", "0016_hold_money"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
        migrations.RemoveField(model_name="workspace", name="billed_until"),
        migrations.RemoveField(model_name="workspace", name="charged_price"),
        migrations.RemoveField(model_name="workspace", name="open_idle"),
        migrations.RemoveField(model_name="workspace", name="open_units"),
    ]
