"""Secret env values encrypted at rest: the plain ``values`` JSON becomes the Fernet token ``sealed``.

Forward, every stored value is encrypted under the first key of ``SLIPWAY_SECRET_KEYS`` and the
plain column dropped; backward, the tokens are decrypted into ``values`` again (with the keys
that encrypted them). ``digest`` stays empty for existing rows: their pod templates are not
changed by the upgrade, so no endpoint rolls because of it.
"""

from django.db import migrations, models

from workloads import crypto


def encrypt_values(apps, schema_editor):
    SecretEnv = apps.get_model("workloads", "SecretEnv")
    for row in SecretEnv.objects.only("pk", "values").iterator():
        # An ended workload's values were forgotten ({}): it keeps an empty token.
        SecretEnv.objects.filter(pk=row.pk).update(sealed=crypto.seal(row.values) if row.values else "")


def decrypt_values(apps, schema_editor):
    SecretEnv = apps.get_model("workloads", "SecretEnv")
    for row in SecretEnv.objects.only("pk", "sealed").iterator():
        SecretEnv.objects.filter(pk=row.pk).update(values=crypto.unseal(row.sealed))


class Migration(migrations.Migration):
    dependencies = [
        ("workloads", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="secretenv",
            name="sealed",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.AddField(
            model_name="secretenv",
            name="digest",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.RunPython(encrypt_values, decrypt_values, elidable=False),
        migrations.RemoveField(
            model_name="secretenv",
            name="values",
        ),
    ]
