"""Queue entries remember what admitting them commits per hour (the budget rule of ``quotas.decide.decide``).

Entries queued before are priced at their units and their flavor's price, as a run would be
(an endpoint that scales to zero then counts one replica: the cautious side).
"""

from django.db import migrations, models


def price_queued(apps, schema_editor):
    QueuedRequest = apps.get_model("quotas", "QueuedRequest")
    for entry in QueuedRequest.objects.select_related("flavor").filter(cost_per_hour__isnull=True):
        price = entry.flavor.spot_price_per_hour if entry.spot else entry.flavor.price_per_hour
        QueuedRequest.objects.filter(pk=entry.pk).update(cost_per_hour=price * entry.units)


class Migration(migrations.Migration):

    dependencies = [
        ('quotas', '0005_usage_idle'),
    ]

    operations = [
        migrations.AddField(
            model_name='queuedrequest',
            name='cost_per_hour',
            field=models.DecimalField(blank=True, decimal_places=4, help_text='What admitting it commits per hour, for the budget check.', max_digits=14, null=True),
        ),
        migrations.RunPython(price_queued, migrations.RunPython.noop),
    ]
