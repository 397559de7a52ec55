"""Create the database cache table, so ``migrate`` alone prepares a database.

Without Redis the reconcile cycle's single-flight lock lives in Django's database cache
(``slipway_cache``); a worker started after a plain ``migrate`` crashed every cycle with "no
such table". ``createcachetable`` is idempotent and does nothing when the cache is not a
database cache (Redis in production).
"""

from django.core.management import call_command
from django.db import migrations


def create_cache_table(apps, schema_editor):
    call_command("createcachetable", database=schema_editor.connection.alias, verbosity=0)


class Migration(migrations.Migration):

    dependencies = [("portal", "0002_idempotency")]

    operations = [migrations.RunPython(create_cache_table, migrations.RunPython.noop)]
