"""Revisions (issue 47 point 6): a candidate's granted replicas and what holds it back; every existing
endpoint gets its revision 1 (stable, weight 100) from the serving fields it has now."""

from django.db import migrations, models


def first_revisions(apps, schema_editor):
    Endpoint = apps.get_model("inference", "InferenceEndpoint")
    Revision = apps.get_model("inference", "EndpointRevision")
    have = set(Revision.objects.values_list("endpoint_id", flat=True))
    rows = [Revision(endpoint_id=e.pk, number=1, state="stable", rollout="replace", weight=100,
                     spec={"image": e.image, "command": e.command, "args": e.args, "env": e.env},
                     created_at=e.created_at, created_by_id=e.created_by_id)
            for e in Endpoint.objects.exclude(pk__in=have).iterator()]
    Revision.objects.bulk_create(rows, batch_size=500)


class Migration(migrations.Migration):
    dependencies = [("inference", "0013_api_key_names")]

    operations = [
        migrations.AddField(model_name="endpointrevision", name="replicas",
                            field=models.PositiveSmallIntegerField(default=0)),
        migrations.AddField(model_name="endpointrevision", name="reason",
                            field=models.CharField(blank=True, max_length=500)),
        migrations.RunPython(first_revisions, migrations.RunPython.noop),
    ]
