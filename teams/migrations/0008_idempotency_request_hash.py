"""An idempotency record keeps a hash of the request it answered (issue 21): a replay with another body is a 422."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('portal', '0007_team_self_service'),
    ]

    operations = [
        migrations.AddField(
            model_name='idempotencyrecord',
            name='request_hash',
            field=models.CharField(blank=True, default='', max_length=64),
        ),
    ]
