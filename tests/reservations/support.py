"""What the reservations tests share: clusters whose nodes offer a flavor, and a booking next week."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from django.utils import timezone

import fleet.services as fleet
from cluster.backends.base import NodeCapacity
from cluster.manifests.common import node_selector
from fleet.models import Cluster, GpuFlavor
from reservations import services
from reservations.models import Reservation

BERLIN = ZoneInfo("Europe/Berlin")


def clusters_with(flavor, **units) -> dict[str, Cluster]:
    """Clusters named by ``units`` (``east=16``), each with nodes of 8 units of ``flavor`` (the last one smaller)
    recorded as the reconcile cycle records them; created if they do not exist."""
    made = {}
    for name, total in units.items():
        cluster, _ = Cluster.objects.get_or_create(name=name)
        nodes, left, index = [], total, 0
        while left > 0:
            size = min(8, left)
            nodes.append(NodeCapacity(f"{name}-{flavor.name}-{index}", flavor.resource_name, size, 0,
                                      node_selector(flavor.to_spec())))
            left, index = left - size, index + 1
        fleet.record_nodes(cluster, nodes, timezone.now())
        made[name] = cluster
    return made


def next_week_at(hour: int, zone: ZoneInfo = BERLIN) -> datetime:
    """Monday of next week at ``hour`` in ``zone`` (aware): a window the default policy takes (28 days ahead)."""
    today = timezone.now().astimezone(zone).date()
    monday = today + timedelta(days=7 - today.weekday())
    return datetime(monday.year, monday.month, monday.day, hour, tzinfo=zone)


def booking_of(team, flavor, *, units: int, name: str, cluster=None, hours: int = 8, start: datetime | None = None,
               recurrence=None) -> services.Booking:
    """The service's booking of ``units`` × ``flavor`` next Monday 09:00 Berlin for ``hours`` (on east by default)."""
    start = (start or next_week_at(9)).astimezone(BERLIN).replace(tzinfo=None)
    return services.Booking(team=team, flavor=flavor, cluster=cluster or Cluster.objects.get(name="east"),
                            units=units, start=start, end=start + timedelta(hours=hours), zone=BERLIN,
                            recurrence=recurrence, name=name)


def book_matrix_reservation(member, team) -> Reservation:
    """A booking of ``team`` by ``member`` (1 A100 next Monday on the install's first cluster, whose nodes are
    recorded here): the isolation matrix's object."""
    flavor = GpuFlavor.objects.get(name="a100-80gb")
    cluster = fleet.clusters()[0]
    clusters_with(flavor, **{cluster.name: 16})
    return services.book(member, booking_of(team, flavor, units=1, name="matrix", cluster=cluster))


def book_for_work(member, team, *, units: int = 2, matching: str = "open") -> Reservation:
    """A booking of ``team`` by ``member`` that work may name: ``units`` A100s on east next Monday 09:00–11:00
    Berlin (east's nodes recorded here), ``matching`` open or targeted."""
    flavor = GpuFlavor.objects.get(name="a100-80gb")
    clusters_with(flavor, east=16)
    booking = booking_of(team, flavor, units=units, name="for-work", hours=2)
    return services.book(member, dataclasses.replace(booking, matching=matching))


def choice_label(reservation: Reservation) -> str:
    """How the New forms offer ``reservation`` (its one window, in UTC)."""
    start, end = reservation.start.astimezone(UTC), reservation.end.astimezone(UTC)
    return (f"#{reservation.pk} \u00b7 {reservation.units}\u00d7 {reservation.flavor.name} \u00b7 next window "
            f"{start:%a %H:%M}\u2013{end:%H:%M} UTC{' · targeted' if reservation.matching == 'targeted' else ''}")
