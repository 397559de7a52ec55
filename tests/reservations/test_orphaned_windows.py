"""Windows left by bookings the admin console deleted (before it stopped offering *Delete*) are released by the
migration ``reservations/0003_release_orphaned_windows`` as a cancel would release them (docs/reservations.md
"Staff cancel; nobody deletes"): the migration's frozen copy of :func:`billing.reserved.release` is run beside the
rule itself on the same windows."""

from __future__ import annotations

import importlib
from datetime import timedelta

from django.apps import apps
from django.utils import timezone

from billing import reserved
from billing.models import ReservedWindow
from reservations import services
from reservations import windows as calendar
from reservations.models import Reservation
from tests.reservations.support import booking_of, clusters_with
from workloads.cycle import windows

step = importlib.import_module("reservations.migrations.0003_release_orphaned_windows")

SHOWN = ("ref", "start", "end", "billed_until", "units")


def book(member, team, flavor, name, spans) -> Reservation:
    """A booking whose windows are moved to ``spans``."""
    repeat = calendar.Recurrence("daily", count=len(spans)) if len(spans) > 1 else None
    booking = services.book(member, booking_of(team, flavor, units=2, name=name, hours=8, recurrence=repeat))
    for window, (start, end) in zip(reserved.of_ref(booking.ref), spans, strict=True):
        ReservedWindow.objects.filter(pk=window.pk).update(start=start, end=end)
    return booking


def state() -> list[tuple]:
    return list(ReservedWindow.objects.order_by("ref", "start").values_list(*SHOWN))


def test_a_deleted_bookings_windows_are_released_as_a_cancel_releases_them_and_a_live_ones_are_kept(
        team, member, flavors):
    a100 = flavors["a100-80gb"]
    clusters_with(a100, east=16)
    now = timezone.now()
    spans = [(now - timedelta(hours=2), now + timedelta(hours=6)),      # under way, billed ahead of the clock
             (now + timedelta(days=1), now + timedelta(days=1, hours=8))]  # not started
    deleted = book(member, team, a100, "deleted", spans)
    kept = book(member, team, a100, "kept", spans)
    windows.bill(now + timedelta(seconds=30))
    Reservation.objects.filter(pk=deleted.pk).delete()  # what the admin console's Delete did
    assert step.orphaned_refs(Reservation, ReservedWindow) == [deleted.ref]
    before = list(ReservedWindow.objects.filter(ref=deleted.ref).order_by("start"))
    untouched = list(ReservedWindow.objects.filter(ref=kept.ref).values_list(*SHOWN))

    step.release_orphaned(apps, None, now=now)
    by_migration = state()

    ReservedWindow.objects.filter(ref=deleted.ref).delete()
    ReservedWindow.objects.bulk_create(before)
    reserved.release(deleted.ref, now)
    assert by_migration == state()
    assert [(end, billed) for _ref, _start, end, billed, _units in by_migration if _ref == deleted.ref] == [
        (now + timedelta(seconds=30), now + timedelta(seconds=30))]  # the future window freed, the billed one ended
    assert list(ReservedWindow.objects.filter(ref=kept.ref).values_list(*SHOWN)) == untouched
    step.release_orphaned(apps, None, now=now + timedelta(minutes=1))  # again: nothing more to do
    assert by_migration == state()


def test_a_ref_that_names_no_booking_number_is_left_alone(team, member, flavors):
    a100 = flavors["a100-80gb"]
    clusters_with(a100, east=16)
    now = timezone.now()
    booking = book(member, team, a100, "odd", [(now + timedelta(days=1), now + timedelta(days=1, hours=8))])
    ReservedWindow.objects.filter(ref=booking.ref).update(ref="reservation:x1")
    assert step.orphaned_refs(Reservation, ReservedWindow) == []
