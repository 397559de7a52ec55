"""Columns that hold event kinds are named so (issue 48: plain ``kind`` means a workload kind only)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("notifications", "0004_event_kinds_from_the_registry")]

    operations = [
        migrations.RemoveConstraint(model_name="emailsubscription", name="uniq_email_subscription"),
        migrations.RenameField(model_name="event", old_name="kind", new_name="event_kind"),
        migrations.RenameField(model_name="emailsubscription", old_name="kind", new_name="event_kind"),
        migrations.RenameField(model_name="webhook", old_name="kinds", new_name="event_kinds"),
        migrations.AlterField(
            model_name="event", name="event_kind",
            field=models.CharField(help_text="What happened (notifications.vocabulary.event_kinds).", max_length=32)),
        migrations.AlterField(
            model_name="emailsubscription", name="event_kind",
            field=models.CharField(help_text="What it is about (notifications.vocabulary.event_kinds).", max_length=32)),
        migrations.AlterField(
            model_name="webhook", name="event_kinds",
            field=models.JSONField(default=list, help_text="The event kinds it is sent (EventKind values).")),
        migrations.AddConstraint(
            model_name="emailsubscription",
            constraint=models.UniqueConstraint(fields=("user", "team", "event_kind"), name="uniq_email_subscription")),
    ]
