"""Open or targeted bookings and work that names its reservation, on every surface (docs/reservations.md "Open or
targeted"): ``matching`` in the reservations API, its pages and admin; ``for_reservation`` on a run's create and dry
run — the one rule's refusals as 400s on the field, another team's booking refused as one that does not exist —
and the admission story through the API: a targeted window takes only the run that names it, an open one takes
the named run ahead of older work."""

from __future__ import annotations

from datetime import timedelta

import pytest
import yaml
from django.urls import reverse
from django.utils import timezone

from jobs.models import TrainingRun
from quotas import admission
from quotas.demo import seed_team_quotas
from reservations import services
from reservations.models import Reservation
from tests.jobs.conftest import run_payload
from tests.reservations.support import booking_of, clusters_with, next_week_at

pytestmark = pytest.mark.django_db


@pytest.fixture
def east(flavors):
    """16 A100s on east: 8 reservable at the default share."""
    return clusters_with(flavors["a100-80gb"], east=16)["east"]


def booking(**fields) -> dict:
    start = next_week_at(9)
    return {"team": "ml-research", "flavor": "a100-80gb", "cluster": "east", "units": 4, "start": start.isoformat(),
            "end": (start + timedelta(hours=8)).isoformat(), "time_zone": "Europe/Berlin", "name": "release-run",
            **fields}


def book(api, **fields) -> dict:
    answer = api.post("/api/v1/reservations/", booking(**fields), format="json")
    assert answer.status_code == 201, answer.json()
    return answer.json()


def post_run(api, query: str = "", **fields):
    return api.post(f"/api/v1/runs/{query}", run_payload(**fields), format="json")


def at(monkeypatch, moment) -> None:
    """The clock at ``moment`` for everything that reads it (admission, the rule, the estimates)."""
    monkeypatch.setattr(timezone, "now", lambda: moment)


# -- the booking's matching ------------------------------------------------------------------------------------


def test_matching_is_open_by_default_targeted_when_asked_and_a_bad_value_is_a_400(api, team, east):
    assert book(api)["matching"] == "open"
    targeted = book(api, name="only-named", matching="targeted", units=2)
    assert targeted["matching"] == "targeted"
    assert Reservation.objects.get(pk=targeted["id"]).matching == "targeted"
    assert api.get(f"/api/v1/reservations/{targeted['id']}/").json()["matching"] == "targeted"
    assert {r["matching"] for r in api.get("/api/v1/reservations/").json()["results"]} == {"open", "targeted"}
    bad = api.post("/api/v1/reservations/", booking(name="bad", matching="closed"), format="json")
    assert bad.status_code == 400 and "matching" in bad.json()["errors"]
    assert Reservation.objects.count() == 2


def test_the_schema_has_matching_and_for_reservation(client):
    schemas = yaml.safe_load(client.get("/api/schema/").content)["components"]["schemas"]
    assert "matching" in schemas["Reservation"]["properties"]
    assert "matching" in schemas["ReservationCreateRequest"]["properties"]
    for name in ("Run", "Endpoint", "Workspace"):  # answers, beside the window it was admitted into, and bodies
        assert {"for_reservation", "reservation"} <= set(schemas[name]["properties"]), name
        assert schemas[name]["properties"]["for_reservation"]["readOnly"] is True
        assert "for_reservation" in schemas[f"{name}CreateRequest"]["properties"], name


def test_the_calendar_page_shows_a_targeted_booking_and_books_one(client, member, team, east, flavors):
    services.book(member, booking_of(team, flavors["a100-80gb"], units=2, name="plain"))
    client.force_login(member)
    page = client.get(reverse("reservations:calendar") + "?flavor=a100-80gb&cluster=east").content.decode()
    assert "plain" in page and ">targeted<" not in page
    assert 'name="matching"' in page  # the form's choice
    start = next_week_at(13).replace(tzinfo=None)
    answer = client.post(reverse("reservations:book"), {
        "flavor": "a100-80gb", "cluster": "east", "units": 2, "start": start.isoformat(timespec="minutes"),
        "end": (start + timedelta(hours=2)).isoformat(timespec="minutes"), "time_zone": "Europe/Berlin",
        "name": "eval", "matching": "targeted"})
    assert answer.status_code == 302, answer.content.decode()[:500]
    assert Reservation.objects.get(name="eval").matching == "targeted"
    page = client.get(reverse("reservations:calendar") + "?flavor=a100-80gb&cluster=east").content.decode()
    assert ">targeted<" in page and "eval (targeted)" in page  # the list's badge, the heatmap's cell


def test_the_admin_lists_and_filters_by_matching(admin_client, member, team, east, flavors):
    services.book(member, booking_of(team, flavors["a100-80gb"], units=2, name="plain"))
    targeted = services.book(member, booking_of(team, flavors["a100-80gb"], units=2, name="aimed",
                                                start=next_week_at(18), hours=2))
    Reservation.objects.filter(pk=targeted.pk).update(matching="targeted")
    page = admin_client.get("/admin/reservations/reservation/?matching__exact=targeted").content.decode()
    assert "aimed" in page and "plain" not in page


# -- naming a reservation: the one rule ---------------------------------------------------------------------------


def test_a_run_names_its_teams_booking_and_the_answer_keeps_it(api, team, quota, east, published):
    mine = book(api, matching="targeted")
    created = post_run(api, for_reservation=mine["id"])
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["for_reservation"] == mine["id"] and body["reservation"] is None  # waiting for its window
    assert body["state"] == "queued" and "waiting for a window of the reservation it names" in body["reason"]
    assert TrainingRun.objects.get().for_reservation == mine["id"]
    assert api.get(f"/api/v1/runs/{body['id']}/").json()["for_reservation"] == mine["id"]
    assert post_run(api, name="plain").json()["for_reservation"] is None


@pytest.mark.parametrize(("fields", "words"), [
    ({"gpus_per_worker": 8}, "holds 4 units a window; this asks for 8"),
    ({"spot": True}, "Spot work cannot be for a reservation"),
    ({"flavor": "l4", "gpus_per_worker": 1}, "is for a100-80gb: choose that flavor"),
    ({"for_reservation": "twelve"}, "Must be a whole number."),
    ({"for_reservation": 0}, "Must be between 1 and"),
])
def test_what_a_reservation_does_not_take_is_a_400_on_the_field_and_nothing_written(api, team, quota, east, published,
                                                                                    fields, words):
    mine = book(api)
    for query in ("", "?dry_run=1"):
        answer = post_run(api, query, **{"for_reservation": mine["id"], **fields})
        assert answer.status_code == 400, answer.json()
        [message] = answer.json()["errors"]["for_reservation"]
        assert words in message
    assert not TrainingRun.objects.exists()


def test_another_teams_booking_is_refused_as_one_that_does_not_exist(api, team, quota, east, published, outsider,
                                                                     other_team, flavors):
    theirs = services.book(outsider, booking_of(other_team, flavors["a100-80gb"], units=4, name="theirs"))
    unknown = theirs.pk + 1000
    refused = {number: post_run(api, for_reservation=number).json()["errors"]["for_reservation"]
               for number in (theirs.pk, unknown)}
    assert refused[theirs.pk] == [f"The team has no reservation #{theirs.pk}."]
    assert refused[unknown] == [f"The team has no reservation #{unknown}."]
    assert not TrainingRun.objects.exists()


def test_a_booking_that_is_over_or_cancelled_may_not_be_named(api, team, quota, east, published, monkeypatch):
    mine = book(api)
    at(monkeypatch, next_week_at(18))  # an hour after its only window ended
    answer = post_run(api, for_reservation=mine["id"])
    assert answer.status_code == 400
    assert answer.json()["errors"]["for_reservation"] == [f"Reservation #{mine['id']} is over: it has no window ahead."]


def test_a_dry_run_of_named_work_says_it_waits_for_its_window(api, team, quota, east, published):
    mine = book(api)
    preview = post_run(api, "?dry_run=1", for_reservation=mine["id"])
    assert preview.status_code == 200, preview.json()
    assert preview.json()["outcome"] == "queue"
    assert "waiting for a window of the reservation it names" in preview.json()["message"]
    plain = post_run(api, "?dry_run=1")
    assert plain.json()["outcome"] == "admit"  # the quota has room: naming none, it would start now
    assert not TrainingRun.objects.exists()


# -- the admission story through the API --------------------------------------------------------------------------


def test_a_targeted_window_takes_the_run_that_names_it_not_the_holders_other_work(api, team, east, published,
                                                                                 monkeypatch, flavors):
    seed_team_quotas(team, {"a100-80gb": 2}, None)
    mine = book(api, matching="targeted")
    at(monkeypatch, next_week_at(9) + timedelta(minutes=1))  # its window open
    plain = post_run(api, name="plain", gpus_per_worker=2)
    named = post_run(api, name="named", gpus_per_worker=2, for_reservation=mine["id"])
    assert plain.status_code == named.status_code == 201
    assert (plain.json()["state"], plain.json()["reservation"]) == ("admitted", None)  # the quota's
    assert named.json()["reservation"] == mine["id"] and named.json()["state"] == "admitted"
    # The quota full: more work naming none waits, though the window has 2 of its 4 units idle.
    more = post_run(api, name="more", gpus_per_worker=2)
    assert more.json()["state"] == "queued" and more.json()["reservation"] is None


def test_an_open_window_takes_the_named_run_ahead_of_older_queued_work(api, team, east, published, monkeypatch):
    seed_team_quotas(team, {"a100-80gb": 4}, None)
    mine = book(api)  # open, 4 units
    opens = next_week_at(9)  # read before the clock moves: "next week" is the clock's
    at(monkeypatch, opens - timedelta(hours=1))
    assert post_run(api, name="first", gpus_per_worker=4).json()["state"] == "admitted"  # the quota full now
    older = post_run(api, name="older", gpus_per_worker=4).json()
    named = post_run(api, name="named", gpus_per_worker=2, for_reservation=mine["id"]).json()
    assert older["state"] == named["state"] == "queued"
    assert named["reason"].startswith("waiting for a window of the reservation it names")
    assert named["estimated_start_latest"] is not None  # by its window's start, at the latest
    at(monkeypatch, opens + timedelta(minutes=1))
    admission.admit_waiting(team)  # what the queue's cycle does
    assert api.get(f"/api/v1/runs/{named['id']}/").json()["reservation"] == mine["id"]
    still = api.get(f"/api/v1/runs/{older['id']}/").json()
    assert still["state"] == "queued" and still["reservation"] is None
