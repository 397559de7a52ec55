"""Graceful deletion (deadline per object), pod annotations and notice time, disruptions, and
reclaimed (spot) nodes: the sandbox half of preemption that loses no work (issue #24)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("sandbox", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="simobject",
            name="delete_at",
            field=models.DateTimeField(blank=True, db_index=True, null=True),
        ),
        migrations.AddField(
            model_name="simobject",
            name="delete_grace",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="simpod",
            name="annotations",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="simpod",
            name="notice_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="simpod",
            name="disruption",
            field=models.CharField(blank=True, max_length=40),
        ),
        migrations.CreateModel(
            name="SimNodeOutage",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("node", models.CharField(max_length=100, unique=True)),
                ("since", models.DateTimeField()),
                ("reason", models.CharField(default="TerminationByKubelet", max_length=40)),
            ],
        ),
    ]
