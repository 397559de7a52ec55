"""The calendar page: the next 14 days as a heatmap, the team's bookings named and others' only reserved; the
booking form with its price preview; cancelling (issue 49, points 3 and 7). The admin console's bookings."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db.models import Sum
from django.test import Client
from django.utils import timezone

from billing.models import ReservedWindow, UsageRecord
from reservations import services
from reservations import windows as calendar
from reservations.models import FlavorPolicy, Reservation
from teams.models import AuditEvent
from tests.factories import make_user
from tests.reservations.support import booking_of, clusters_with, next_week_at
from workloads.cycle import windows as cycle

pytestmark = pytest.mark.django_db


@pytest.fixture
def east(flavors):
    return clusters_with(flavors["a100-80gb"], east=16)["east"]


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def form(**fields) -> dict:
    start = next_week_at(9).replace(tzinfo=None)
    return {"flavor": "a100-80gb", "cluster": "east", "units": "4", "start": start.isoformat(timespec="minutes"),
            "end": (start + timedelta(hours=8)).isoformat(timespec="minutes"), "time_zone": "Europe/Berlin",
            "repeat": "", "name": "release-run", "purpose": "", **fields}


def test_the_calendar_names_the_teams_bookings_and_shows_others_as_reserved(member, team, other_team, outsider,
                                                                             east, flavors):
    flavor = flavors["a100-80gb"]
    services.book(member, booking_of(team, flavor, units=4, name="release-run"))
    services.book(outsider, booking_of(other_team, flavor, units=2, name="secret-project"))
    page = signed_in(member).get("/reservations/", {"flavor": "a100-80gb", "cluster": "east"})
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="reservation-calendar"' in html and html.count("<tr><th scope=\"row\">") == 14
    assert "yours: release-run" in html and "reserved by others: 2" in html
    assert "secret-project" not in html  # another team's booking is only "reserved"
    assert "2 of 8 free" in html  # 4 + 2 of east's 8 reservable units, next Monday 09:00–17:00 Berlin


def test_booking_through_the_form_previews_its_price_and_refuses_beside_the_field(member, team, east, flavors):
    client = signed_in(member)
    preview = client.post("/reservations/preview/", form())
    assert preview.status_code == 200 and "on <strong>east</strong>, 1 window" in preview.content.decode()
    assert "32.0 unit-hours at 4.10 USD per unit-hour): <strong>131.20 USD</strong>" in preview.content.decode()
    assert not Reservation.objects.exists()
    booked = client.post("/reservations/book/", form())
    assert booked.status_code == 302 and Reservation.objects.get().name == "release-run"
    FlavorPolicy.objects.create(flavor=flavors["a100-80gb"], max_units=2)
    refused = client.post("/reservations/book/", form(name="too-big"))
    assert refused.status_code == 400 and "at most 2 units of a100-80gb per booking" in refused.content.decode()
    assert Reservation.objects.count() == 1
    said = client.post("/reservations/preview/", form(name="too-big")).content.decode()
    assert "at most 2 units of a100-80gb per booking" in said


def test_a_viewer_sees_the_calendar_but_cannot_book_and_a_member_cancels(member, viewer, team, east, flavors):
    reservation = services.book(member, booking_of(team, flavors["a100-80gb"], units=1, name="mine"))
    looking = signed_in(viewer)
    assert "Viewers can't book" in looking.get("/reservations/").content.decode()
    assert looking.post("/reservations/book/", form(name="v")).status_code == 403
    assert looking.post(f"/reservations/{reservation.pk}/cancel/").status_code == 403
    assert signed_in(member).post(f"/reservations/{reservation.pk}/cancel/").status_code == 302
    assert Reservation.objects.get().state == "cancelled"


def test_without_a_team_the_page_says_so(db):
    page = signed_in(make_user("loner")).get("/reservations/")
    assert page.status_code == 200 and 'id="no-team"' in page.content.decode()


@pytest.mark.parametrize(("fields", "field"), [
    ({"time_zone": "Europe"}, "time_zone"),  # a directory of tzdata, not a zone
    ({"start": "9999-12-31T22:00", "end": "9999-12-31T23:00", "time_zone": "America/New_York"}, "start"),
    ({"repeat": "daily", "until": "2000-01-03"}, "until"),  # the last date before the first window's
])
def test_input_the_calendar_cannot_compute_with_is_a_form_error_beside_its_field(member, team, east, fields, field):
    client = signed_in(member)
    refused = client.post("/reservations/book/", form(**fields))
    assert refused.status_code == 400 and field in refused.context["form"].errors, refused.context["form"].errors
    assert not Reservation.objects.exists()
    said = client.post("/reservations/preview/", form(**fields))
    assert said.status_code == 200 and f"{field}: " in said.content.decode()


def next_change(month: int) -> date:
    """The next last Sunday of ``month`` (3 or 10), when Berlin's clocks change at 02:00/03:00, from the day after
    tomorrow on (a window that night is ahead whatever the time of day now)."""
    soonest = timezone.now().date() + timedelta(days=2)
    for year in (soonest.year, soonest.year + 1):
        last = date(year, month, 31)
        sunday = last - timedelta(days=(last.weekday() + 1) % 7)
        if sunday >= soonest:
            return sunday
    raise AssertionError("a last Sunday every year")


@pytest.mark.parametrize("month", [3, 10])
def test_a_time_the_portals_zone_skips_or_repeats_is_booked_as_typed_in_the_bookings_zone(member, team, east,
                                                                                          flavors, settings, month):
    """The form reads the typed times in the booking's zone only: 02:30 on the night Berlin's clocks change is
    a time Berlin skips (March) or has twice (October), and an ordinary one in UTC."""
    settings.TIME_ZONE = "Europe/Berlin"  # the portal's zone
    day = next_change(month)
    typed = datetime.combine(day, time(2, 30))
    berlin = ZoneInfo("Europe/Berlin")
    assert typed.replace(tzinfo=berlin).utcoffset() != typed.replace(tzinfo=berlin, fold=1).utcoffset()
    FlavorPolicy.objects.create(flavor=flavors["a100-80gb"], max_days_ahead=400)  # the night may be months ahead
    booked = signed_in(member).post("/reservations/book/", form(start=f"{day}T02:30", end=f"{day}T04:30",
                                                                time_zone="UTC"))
    assert booked.status_code == 302, booked.context["form"].errors
    reservation = Reservation.objects.get()
    assert (reservation.start, reservation.end) == (typed.replace(tzinfo=UTC), typed.replace(hour=4, tzinfo=UTC))


# -- the admin console's bookings ---------------------------------------------------------------------------------

CHANGELIST = "/admin/reservations/reservation/"


def test_the_admins_approve_says_why_a_booking_whose_windows_all_passed_is_not_approved(member, team, east, flavors,
                                                                                         staff_client):
    FlavorPolicy.objects.create(flavor=flavors["a100-80gb"], needs_approval=True)
    waited = services.book(member, booking_of(team, flavors["a100-80gb"], units=2, name="waited"))
    now = timezone.now()
    ReservedWindow.objects.filter(ref=waited.ref).update(start=now - timedelta(hours=9), end=now - timedelta(hours=1))
    page = staff_client.post(CHANGELIST, {"action": "approve", "_selected_action": [waited.pk]}, follow=True)
    assert page.status_code == 200
    said = page.content.decode()
    assert f"Waited (#{waited.pk}): Nothing is left to approve" in said  # the admin capitalizes messages
    assert "Approved 0 reservation(s)." in said
    assert Reservation.objects.get(pk=waited.pk).state == "pending"


def test_the_admin_deletes_no_booking_and_staff_cancel_it_through_the_service_keeping_what_was_billed(
        member, team, east, flavors, staff_client):
    """Django's delete (the change page's, the list's "delete selected") took the booking and left its windows, linked
    by ref alone, holding the share, committing and billing the team's money with nothing left to cancel. Staff cancel
    it instead: the window under way ends now, the next one is freed, and what was billed stays on the ledger."""
    booked = services.book(member, booking_of(team, flavors["a100-80gb"], units=2, name="unwanted", hours=4,
                                              recurrence=calendar.Recurrence(calendar.DAILY, count=2)))
    now = timezone.now()
    under_way, ahead = ReservedWindow.objects.filter(ref=booked.ref).order_by("start")
    ReservedWindow.objects.filter(pk=under_way.pk).update(start=now - timedelta(hours=1), end=now + timedelta(hours=3))
    assert cycle.bill(now) == 1
    billed = UsageRecord.objects.filter(ref=booked.ref).aggregate(cost=Sum("cost"))["cost"]
    assert billed > 0

    assert staff_client.post(f"{CHANGELIST}{booked.pk}/delete/", {"post": "yes"}).status_code == 403
    chosen = staff_client.post(CHANGELIST, {"action": "delete_selected", "_selected_action": [booked.pk], "post": "yes"},
                               follow=True)
    assert "No action selected." in chosen.content.decode()
    assert f"{booked.pk}/delete/" not in staff_client.get(f"{CHANGELIST}{booked.pk}/change/").content.decode()
    assert 'value="delete_selected"' not in staff_client.get(CHANGELIST).content.decode()
    assert Reservation.objects.get(pk=booked.pk).state == "booked"
    assert ReservedWindow.objects.filter(ref=booked.ref).count() == 2

    page = staff_client.post(CHANGELIST, {"action": "cancel", "_selected_action": [booked.pk]}, follow=True)
    assert "Cancelled 1 reservation(s)." in page.content.decode()
    cancelled = Reservation.objects.get(pk=booked.pk)
    assert cancelled.state == "cancelled"
    assert [w.pk for w in ReservedWindow.objects.filter(ref=booked.ref)] == [under_way.pk]  # the next one freed
    assert ReservedWindow.objects.get(pk=under_way.pk).end == cancelled.cancelled_at  # under way: ends at the cancel
    assert not ReservedWindow.objects.filter(pk=ahead.pk).exists()
    assert UsageRecord.objects.filter(ref=booked.ref).aggregate(cost=Sum("cost"))["cost"] == billed  # stays billed
    assert AuditEvent.objects.filter(action="reservation_cancelled", actor__username="sam",
                                     target=booked.ref).exists()
