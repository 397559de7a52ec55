"""A team hears of its reservations (issue 49, point 7): booked, waiting for approval, approved, declined with
the reason, cancelled; and each window 15 minutes before it starts and once it has started — each once."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from notifications import events
from notifications.constants import EventKind
from notifications.models import Event
from reservations import services
from reservations.models import FlavorPolicy
from tests.reservations.support import BERLIN, booking_of, clusters_with

pytestmark = pytest.mark.django_db


@pytest.fixture
def flavor(flavors):
    clusters_with(flavors["a100-80gb"], east=16)
    return flavors["a100-80gb"]


def test_each_move_of_a_booking_is_one_event_with_its_words(member, team, staff, flavor, published):
    booked = services.book(member, booking_of(team, flavor, units=4, name="release-run"))
    FlavorPolicy.objects.create(flavor=flavor, needs_approval=True)
    waiting = services.book(member, booking_of(team, flavor, units=2, name="asked", hours=2))
    declined = services.book(member, booking_of(team, flavor, units=1, name="refused", hours=1))
    services.approve(staff, waiting)
    services.decline(staff, declined, "release freeze")
    services.cancel(member, booked)
    titles = list(Event.objects.filter(event_kind=EventKind.RESERVATION).order_by("pk").values_list("title", flat=True))
    assert titles == ["Reservation release-run of team ml-research booked",
                      "Reservation asked of team ml-research waits for approval",
                      "Reservation refused of team ml-research waits for approval",
                      "Reservation asked of team ml-research approved",
                      "Reservation refused of team ml-research declined",
                      "Reservation release-run of team ml-research cancelled"]
    text = Event.objects.get(key=f"{EventKind.RESERVATION}:{declined.ref}:declined").text
    assert "1\u00d7 a100-80gb on east" in text and text.endswith("Why: release freeze")


def test_a_window_is_told_15_minutes_before_and_at_its_start_once_each(member, team, flavor):
    start = timezone.now().replace(microsecond=0) + timedelta(minutes=20)
    services.book(member, booking_of(team, flavor, units=4, name="soon", hours=1, start=start.astimezone(BERLIN)))
    assert events.reservation_windows(start - timedelta(minutes=16)) == []  # not yet
    first = events.reservation_windows(start - timedelta(minutes=14))
    assert len(first) == 1 and first[0].endswith(":soon")
    assert events.reservation_windows(start - timedelta(minutes=5)) == []  # told once
    started = events.reservation_windows(start + timedelta(minutes=1))
    assert len(started) == 1 and started[0].endswith(":started")
    assert events.reservation_windows(start + timedelta(minutes=2)) == []
    title = Event.objects.get(key=started[0]).title
    assert title == "Reservation soon of team ml-research has started"


def test_a_window_unused_30_minutes_in_is_told_once_and_its_end_with_its_use_and_money(member, team, flavor):
    from billing.models import QuotaHold, ReservedWindow
    from workloads.cycle import windows

    start = timezone.now().replace(microsecond=0) + timedelta(minutes=20)
    booked = services.book(member, booking_of(team, flavor, units=4, name="eval", hours=1, start=start.astimezone(BERLIN)))
    window = ReservedWindow.objects.get(ref=booked.ref)
    windows.bill(start + timedelta(minutes=31))  # nothing ran on it
    unused = events.reservation_windows(start + timedelta(minutes=31))
    assert [key.rsplit(":", 1)[1] for key in unused] == ["unused"]  # "started" goes at most 10 min late
    assert Event.objects.get(key=unused[0]).title == "Reservation eval of team ml-research is still unused"
    assert events.reservation_windows(start + timedelta(minutes=32)) == []  # once
    # The team's work runs on 2 of its 4 units for the rest of the hour; the window ends.
    QuotaHold.objects.create(team=team, ref="run:1", flavor=flavor, units=2, window=window, open_units=2,
                             cluster=booked.cluster)
    windows.bill(start + timedelta(hours=1))
    ended = events.reservation_windows(start + timedelta(hours=1, minutes=1))
    assert [key.rsplit(":", 1)[1] for key in ended] == ["ended"]
    event = Event.objects.get(key=ended[0])
    # 31 min × 4 idle, then 29 min × 2 used and 2 idle: 0.97 of 4 unit-hours used (24 %), 3.03 idle.
    assert event.details["used_percent"] == 24 and event.details["lent_percent"] == 0
    assert event.text.startswith("Reservation eval of team ml-research ended: used 24 % of its 4 unit-hours, 0 % lent")
    window.refresh_from_db()
    assert event.details["idle_cost"] == str((window.idle_unit_hours * window.price_per_unit_hour).quantize(
        Decimal("0.01")))


def test_a_decline_reason_typed_on_several_lines_is_one_line_in_the_events_text(member, team, staff, flavor):
    """docs/notifications.md: ``text`` is one line (Slack shows it as it is); a reason is typed in a text area."""
    FlavorPolicy.objects.create(flavor=flavor, needs_approval=True)
    declined = services.book(member, booking_of(team, flavor, units=1, name="refused", hours=1))
    services.decline(staff, declined, "release freeze\r\nuntil Friday;\n\n  ask again then")
    event = Event.objects.get(key=f"{EventKind.RESERVATION}:{declined.ref}:declined")
    assert event.text.endswith("Why: release freeze until Friday; ask again then")
    assert "\n" not in event.text and "\r" not in event.text
    assert event.details["move"] == "declined"
