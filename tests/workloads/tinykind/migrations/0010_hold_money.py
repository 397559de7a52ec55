"""Issue 48: the open segment moves to the quota hold (notebooks' billing columns go; see workloads/migrations/_hold_money.py)."""

from django.db import migrations

from workloads.migrations._hold_money import move_segments

forward, backward = move_segments("tinykind", "notebook", "nb", ("queued", "admitted", "starting", "running"))


class Migration(migrations.Migration):

    dependencies = [
        ("tinykind", "0009_charged_price"),
        ("quotas", "0016_hold_money"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
        migrations.RemoveField(model_name="notebook", name="billed_until"),
        migrations.RemoveField(model_name="notebook", name="charged_price"),
        migrations.RemoveField(model_name="notebook", name="open_idle"),
        migrations.RemoveField(model_name="notebook", name="open_units"),
    ]
