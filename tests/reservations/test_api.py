"""``/api/v1/reservations/`` as docs/api.md "Reservations" says: book within the policy and the room, see the
free slots, cancel, approve and decline; 400s that name the limit, the instant or the figure; 404 across teams."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import ReservedWindow, TeamBudget
from reservations.models import FlavorPolicy, Reservation, TeamPolicy
from tests.reservations.support import clusters_with, next_week_at

pytestmark = pytest.mark.django_db


@pytest.fixture
def clusters(flavors):
    """east: 16 A100s (8 reservable at the default 50 %), west: 8 (4 reservable), both at the flavor's price."""
    return clusters_with(flavors["a100-80gb"], east=16, west=8)


def booking(**fields) -> dict:
    start = next_week_at(9)
    return {"team": "ml-research", "flavor": "a100-80gb", "cluster": "east", "units": 4, "start": start.isoformat(),
            "end": (start + timedelta(hours=8)).isoformat(), "time_zone": "Europe/Berlin", "name": "release-run",
            **fields}


def test_a_booking_answers_its_id_state_cluster_and_price(api, team, clusters, flavors):
    answer = api.post("/api/v1/reservations/", booking(), format="json")
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert body["state"] == "booked" and body["cluster"] == "east" and body["units"] == 4
    price = flavors["a100-80gb"].price_per_hour
    assert Decimal(body["price"]) == price * 4 * 8
    assert ReservedWindow.objects.filter(ref=f"reservation:{body['id']}").count() == 1


def test_a_dry_run_answers_what_booking_would_give_and_writes_nothing(api, team, clusters, flavors):
    """``?dry_run=1``, as every create of the API previews: the cluster, windows, price and state a booking would
    have now, checked as a booking is (a refusal is the booking's 400); a dry_run that is no yes/no is a 400 on it.
    None of them writes a reservation or holds a window."""
    answer = api.post("/api/v1/reservations/?dry_run=1", booking(cluster="any"), format="json")
    assert answer.status_code == 200, answer.json()
    start = next_week_at(9)
    price = flavors["a100-80gb"].price_per_hour
    assert answer.json() == {
        "flavor": "a100-80gb", "cluster": "east", "units": 4, "time_zone": "Europe/Berlin", "state": "booked",
        "unit_hours": "32.00",
        "windows": [{"start": start.astimezone(UTC).isoformat().replace("+00:00", "Z"),
                     "end": (start + timedelta(hours=8)).astimezone(UTC).isoformat().replace("+00:00", "Z")}],
        "price_per_unit_hour": f"{price:.4f}", "price": f"{price * 32:.4f}", "currency": "USD"}
    refused = api.post("/api/v1/reservations/?dry_run=true", booking(units=9), format="json")
    booked = api.post("/api/v1/reservations/?dry_run=0", booking(units=9), format="json")
    assert refused.status_code == booked.status_code == 400 and refused.json() == booked.json()
    typo = api.post("/api/v1/reservations/?dry_run=ture", booking(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert typo.status_code == 400 and typo.json() == {"errors": {"dry_run": ["Must be true or false."]}}
    assert not Reservation.objects.exists() and not ReservedWindow.objects.exists()


def test_any_cluster_is_picked_at_booking_and_named(api, team, clusters):
    first = api.post("/api/v1/reservations/", booking(cluster="any", units=8), format="json").json()
    assert first["cluster"] == "east"  # the only one with 8 reservable
    second = api.post("/api/v1/reservations/", booking(cluster=None, units=4, name="second"), format="json").json()
    assert second["cluster"] == "west"  # east's share is taken for that window


def test_a_slot_that_is_not_free_is_refused_with_the_first_conflicting_instant(api, team, clusters):
    assert api.post("/api/v1/reservations/", booking(units=6), format="json").status_code == 201
    later = next_week_at(13)
    answer = api.post("/api/v1/reservations/", booking(units=4, start=(later - timedelta(hours=6)).isoformat(),
                                                        end=(later + timedelta(hours=2)).isoformat(), name="b"),
                      format="json")
    assert answer.status_code == 400
    [message] = answer.json()["errors"]["start"]
    assert "4 units are not free on east from" in message and "08:00" in message  # 09:00 Berlin, in UTC


def test_outside_the_policy_is_a_400_that_names_each_limit(api, team, clusters, flavors, staff):
    FlavorPolicy.objects.create(flavor=flavors["a100-80gb"], max_units=2, max_hours=4, max_days_ahead=30)
    answer = api.post("/api/v1/reservations/", booking(), format="json")
    assert answer.status_code == 400
    errors = answer.json()["errors"]
    assert errors["units"] == ["at most 2 units of a100-80gb per booking"]
    assert errors["end"] == ["a window may last at most 4 h; this one lasts 8 h"]
    assert not Reservation.objects.exists() and not ReservedWindow.objects.exists()


def test_a_team_override_replaces_the_flavors_limit_for_that_team_only(api, team, clusters, flavors):
    FlavorPolicy.objects.create(flavor=flavors["a100-80gb"], max_units=2)
    TeamPolicy.objects.create(team=team, flavor=flavors["a100-80gb"], max_units=6)
    assert api.post("/api/v1/reservations/", booking(units=6), format="json").status_code == 201


def test_the_weekly_cap_counts_the_teams_bookings_of_the_week(api, team, clusters, flavors):
    FlavorPolicy.objects.create(flavor=flavors["a100-80gb"], weekly_unit_hours=40)
    assert api.post("/api/v1/reservations/", booking(units=4), format="json").status_code == 201  # 32 unit-hours
    answer = api.post("/api/v1/reservations/", booking(units=2, cluster="west", name="more"), format="json")
    assert answer.status_code == 400
    assert "40 unit-hours of a100-80gb a week" in answer.json()["errors"]["units"][0]
    assert "48" in answer.json()["errors"]["units"][0]


def test_a_booking_past_the_budget_is_refused_with_the_figure(api, team, clusters, flavors):
    TeamBudget.objects.create(team=team, monthly_limit=Decimal("10"))
    answer = api.post("/api/v1/reservations/", booking(), format="json")
    assert answer.status_code == 400
    assert "would pass the budget" in answer.json()["errors"]["units"][0]


def test_availability_gives_free_units_per_half_hour_slot_and_follows_bookings(api, team, clusters):
    start = next_week_at(9)
    query = {"flavor": "a100-80gb", "cluster": "east", "from": start.isoformat(),
             "to": (start + timedelta(hours=2)).isoformat()}
    before = api.get("/api/v1/reservations/availability/", query).json()
    assert [s["free_units"] for s in before] == [8, 8, 8, 8]
    assert api.post("/api/v1/reservations/", booking(units=3, end=(start + timedelta(hours=1)).isoformat()),
                    format="json").status_code == 201
    after = api.get("/api/v1/reservations/availability/", query).json()
    assert [(s["cluster"], s["free_units"]) for s in after] == [("east", 5), ("east", 5), ("east", 8), ("east", 8)]


def test_cancelling_frees_the_future_windows_and_twice_is_a_409(api, team, clusters):
    rid = api.post("/api/v1/reservations/", booking(recurrence={"frequency": "daily", "count": 3}),
                   format="json").json()["id"]
    assert ReservedWindow.objects.filter(ref=f"reservation:{rid}").count() == 3
    assert api.delete(f"/api/v1/reservations/{rid}/").status_code == 204
    assert not ReservedWindow.objects.filter(ref=f"reservation:{rid}").exists()
    assert api.get(f"/api/v1/reservations/{rid}/").json()["state"] == "cancelled"
    assert api.delete(f"/api/v1/reservations/{rid}/").status_code == 409


def test_a_booking_that_needs_approval_waits_and_staff_approve_or_decline_it(api, team, clusters, flavors,
                                                                             api_client_for, staff):
    FlavorPolicy.objects.create(flavor=flavors["a100-80gb"], needs_approval=True)
    first = api.post("/api/v1/reservations/", booking(), format="json").json()
    second = api.post("/api/v1/reservations/", booking(name="other", cluster="west"), format="json").json()
    assert first["state"] == second["state"] == "pending"
    assert api.post(f"/api/v1/reservations/{first['id']}/approve/").status_code == 403  # members do not approve
    desk = api_client_for(staff)
    assert desk.post(f"/api/v1/reservations/{first['id']}/approve/").json()["state"] == "booked"
    declined = desk.post(f"/api/v1/reservations/{second['id']}/decline/", {"reason": "release freeze"}, format="json")
    assert declined.json()["state"] == "declined" and declined.json()["decline_reason"] == "release freeze"
    assert not ReservedWindow.objects.filter(ref=f"reservation:{second['id']}").exists()
    assert desk.post(f"/api/v1/reservations/{second['id']}/approve/").status_code == 409


def test_another_teams_reservations_are_404_and_a_viewer_may_not_book(api, team, clusters, api_client_for, outsider,
                                                                      viewer):
    rid = api.post("/api/v1/reservations/", booking(), format="json").json()["id"]
    stranger = api_client_for(outsider)
    assert stranger.get(f"/api/v1/reservations/{rid}/").status_code == 404
    assert stranger.delete(f"/api/v1/reservations/{rid}/").status_code == 404
    assert stranger.get("/api/v1/reservations/").json()["count"] == 0
    assert stranger.post("/api/v1/reservations/", booking(name="x"), format="json").status_code == 404
    assert api_client_for(viewer).post("/api/v1/reservations/", booking(name="y"), format="json").status_code == 403
    assert Reservation.objects.filter(pk=rid, state="booked").exists()


@pytest.mark.parametrize(("fields", "field"), [
    ({"units": 0}, "units"), ({"flavor": "h9000"}, "flavor"), ({"cluster": "mars"}, "cluster"),
    ({"time_zone": "Mars/Olympus"}, "time_zone"), ({"start": "tomorrow"}, "start"),
    ({"recurrence": {"frequency": "weekly"}}, "recurrence"), ({"recurrence": {"frequency": "hourly", "count": 2}}, "recurrence"),
])
def test_bad_input_is_a_400_on_its_field(api, team, clusters, fields, field):
    answer = api.post("/api/v1/reservations/", booking(**fields), format="json")
    assert answer.status_code == 400 and field in answer.json()["errors"], answer.json()


def test_a_bookings_money_is_committed_against_the_month_and_a_second_booking_counts_it(api, team, clusters, flavors):
    """The windows commit their money used or not: the team's committed money (what budgets and admission read)
    grows by the part ahead this month, and the budget check of the next booking counts it."""
    from billing.ledger import committed, month_end

    now = timezone.now()
    start = now + timedelta(minutes=10)
    end = min(start + timedelta(hours=2), month_end(now))  # within this month whatever the date
    before = committed(team.pk, timezone.now())
    body = booking(start=start.isoformat(), end=end.isoformat(), time_zone="UTC")
    answer = api.post("/api/v1/reservations/", body, format="json")
    assert answer.status_code == 201, answer.json()
    price = Decimal(answer.json()["price"])
    assert committed(team.pk, timezone.now()) - before == pytest.approx(price, abs=Decimal("0.01"))
    TeamBudget.objects.create(team=team, monthly_limit=price + before + Decimal("1"))
    again = api.post("/api/v1/reservations/", {**body, "cluster": "west", "name": "again"}, format="json")
    assert again.status_code == 400 and "would pass the budget" in again.json()["errors"]["units"][0]


def test_the_teams_time_zone_is_the_default_and_the_answer_says_which(api, team, clusters):
    team.time_zone = "America/New_York"
    team.save(update_fields=["time_zone"])
    start = next_week_at(9)
    naive = {"start": start.replace(tzinfo=None).isoformat(), "end": start.replace(tzinfo=None, hour=11).isoformat()}
    body = booking(**naive)
    body.pop("time_zone")
    answer = api.post("/api/v1/reservations/", body, format="json").json()
    assert answer["time_zone"] == "America/New_York"
    [window] = answer["windows"]
    assert datetime.fromisoformat(window["start"]).astimezone(UTC).hour in (13, 14)  # 09:00 EST / EDT


def test_a_list_filtered_by_another_team_is_a_404_and_a_bad_state_a_400(api, team, clusters, other_team):
    assert api.get("/api/v1/reservations/", {"team": other_team.slug}).status_code == 404
    assert api.get("/api/v1/reservations/", {"team": team.slug}).status_code == 200
    assert api.get("/api/v1/reservations/", {"state": "sunk"}).status_code == 400
    # Left empty, it is no state either (the schema's enum has none): a 400 on the field, not every reservation.
    empty = api.get("/api/v1/reservations/?state=")
    assert empty.status_code == 400 and empty.json()["errors"]["state"][0].startswith("Must be one of: ")


@pytest.mark.parametrize(("fields", "field"), [
    ({"time_zone": "Europe"}, "time_zone"),  # a directory of tzdata, not a zone
    ({"time_zone": "../../etc/localtime"}, "time_zone"),
    # After the last instant a datetime holds once made UTC (10000-01-01 03:00 UTC), before the policy is asked.
    ({"start": "9999-12-31T22:00", "end": "9999-12-31T23:00", "time_zone": "America/New_York"}, "start"),
    ({"start": "0001-01-01T00:00", "end": "0001-01-01T01:00", "time_zone": "Asia/Tokyo"}, "start"),  # before year 1
    ({"start": "9999-12-31T20:00+09:00", "end": "9999-12-31T21:00+09:00", "time_zone": "America/New_York"}, "start"),
])
def test_input_the_calendar_cannot_compute_with_is_a_400_on_its_field_and_writes_nothing(api, team, clusters, fields,
                                                                                         field):
    answer = api.post("/api/v1/reservations/", booking(**fields), format="json")
    assert answer.status_code == 400 and field in answer.json()["errors"], answer.json()
    assert not Reservation.objects.exists() and not ReservedWindow.objects.exists()


def test_a_rule_whose_last_date_is_before_its_first_window_is_a_400_on_its_until(api, team, clusters):
    start = next_week_at(9)
    until = start.date() - timedelta(days=3)
    for frequency in ("daily", "weekly"):
        answer = api.post("/api/v1/reservations/",
                          booking(recurrence={"frequency": frequency, "until": until.isoformat()}), format="json")
        assert answer.status_code == 400, answer.json()
        assert answer.json()["errors"]["recurrence"]["until"] == [
            f"{until} is before the first window's date, {start.date()}: the last date must be on or after it"]
    assert not Reservation.objects.exists() and not ReservedWindow.objects.exists()
    # The first window's own date as the last: the one window.
    same_day = api.post("/api/v1/reservations/",
                        booking(recurrence={"frequency": "daily", "until": start.date().isoformat()}), format="json")
    assert same_day.status_code == 201 and len(same_day.json()["windows"]) == 1


def test_the_service_refuses_a_rule_that_gives_no_window_itself(member, team, clusters, flavors):
    """Whoever calls the service (not only the API and the form, which refuse it first): a refusal, not an
    IndexError on the first of no windows."""
    from reservations import services
    from reservations import windows as calendar
    from tests.reservations.support import booking_of

    start = next_week_at(9)
    rule = calendar.Recurrence(calendar.DAILY, until=start.date() - timedelta(days=1))
    with pytest.raises(services.BookingRefused) as refused:
        services.book(member, booking_of(team, flavors["a100-80gb"], units=4, name="none", recurrence=rule))
    assert "is before the first window's date" in refused.value.errors["recurrence"][0]
    assert not Reservation.objects.exists() and not ReservedWindow.objects.exists()


@pytest.mark.parametrize(("query", "field"), [
    ({"from": "9999-12-30T00:00:00Z"}, "from"),  # from + the default 14 days is past year 9999
    ({"from": "9999-12-31T00:00:00Z", "to": "9999-12-31T23:59:00Z"}, "to"),  # its last slot ends past year 9999
    ({"from": "0001-01-01T00:00:00Z", "to": "0001-01-02T00:00:00Z"}, "from"),
])
def test_availability_of_times_the_calendar_cannot_compute_with_is_a_400_on_its_field(api, team, clusters, query,
                                                                                      field):
    answer = api.get("/api/v1/reservations/availability/", {"flavor": "a100-80gb", **query})
    assert answer.status_code == 400 and field in answer.json()["errors"], answer.json()
