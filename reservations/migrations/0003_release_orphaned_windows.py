"""Free the windows of bookings the admin console deleted before it stopped offering *Delete* (466aa4c).

A booking's windows are the billing app's rows, joined to it by its ref (``reservation:12``), not by a foreign key,
so a deleted booking left its windows holding the cluster's share, committing and billing its team's money with
nothing left to cancel. This step ends them as a cancel at the migration's instant would
(:func:`billing.reserved.release`): windows not started and never billed go, one under way ends at the later of now
and where its billing reached, what was billed stays. It is written against the migration's own (historical)
models, as migrations must be, so it is a frozen copy of that rule; ``tests/reservations/test_orphaned_windows.py``
runs both on the same windows and compares them.
"""

from django.db import migrations
from django.db.models import F, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

PREFIX = "reservation:"


def orphaned_refs(reservation_model, window_model) -> list[str]:
    """The refs of windows whose booking no longer exists (a malformed ref is no booking's: left alone)."""
    refs = window_model.objects.filter(ref__startswith=PREFIX).values_list("ref", flat=True).distinct()
    named = {ref: int(ref[len(PREFIX):]) for ref in refs if ref[len(PREFIX):].isdigit()}
    alive = set(reservation_model.objects.filter(pk__in=named.values()).values_list("pk", flat=True))
    return sorted(ref for ref, pk in named.items() if pk not in alive)


def release_orphaned(apps, schema_editor, now=None) -> None:
    now = now or timezone.now()
    windows = apps.get_model("billing", "ReservedWindow")
    orphans = windows.objects.filter(ref__in=orphaned_refs(apps.get_model("reservations", "Reservation"), windows))
    orphans.filter(start__gte=now, billed_until__isnull=True).delete()
    orphans.filter(end__gt=now).update(end=Greatest(Value(now), Coalesce(F("billed_until"), Value(now))))


class Migration(migrations.Migration):

    dependencies = [
        ("reservations", "0002_targeted_bookings"),
        ("billing", "0006_targeted_bookings"),
    ]

    operations = [migrations.RunPython(release_orphaned, migrations.RunPython.noop)]
