"""Rows of an existing sandbox move to the inventory's first cluster: the one a
``SandboxBackend()`` without a name sees, so a running demo carries on where it was.
"""

from pathlib import Path

import yaml
from django.conf import settings
from django.db import migrations

TABLES = ("SimObject", "SimPod", "SimEvent", "SimLoad", "SimClock", "SimNodeOutage")


def first_cluster() -> str:
    """The first cluster the inventory names (read here, not imported: migrations outlive code)."""
    with Path(settings.SLIPWAY_SANDBOX_INVENTORY).open() as handle:
        data = yaml.safe_load(handle) or {}
    listed = data.get("clusters") if isinstance(data, dict) else None
    if isinstance(listed, list) and listed and isinstance(listed[0], dict) and listed[0].get("name"):
        return str(listed[0]["name"])
    return "default"


def to_first_cluster(apps, schema_editor) -> None:
    name = first_cluster()
    if name != "default":
        for table in TABLES:
            apps.get_model("sandbox", table).objects.update(cluster=name)


class Migration(migrations.Migration):
    """Its own migration: the update must not share a transaction with 0003's ALTER TABLEs
    (PostgreSQL refuses those while the pods' deferred foreign key checks are pending)."""

    dependencies = [
        ("sandbox", "0003_clusters"),
    ]

    operations = [
        migrations.RunPython(to_first_cluster, migrations.RunPython.noop),
    ]
