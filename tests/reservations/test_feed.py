"""A team's iCalendar feed: a secret URL shows its bookings' windows in people's calendars (issue 49, point 7)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from icalendar import Calendar

from reservations import services
from reservations.models import FlavorPolicy
from tests.reservations.support import booking_of, clusters_with, next_week_at

pytestmark = pytest.mark.django_db


@pytest.fixture
def booked(member, team, flavors):
    clusters_with(flavors["a100-80gb"], east=16)
    flavor = flavors["a100-80gb"]
    services.book(member, booking_of(team, flavor, units=4, name="release-run", recurrence=None))
    FlavorPolicy.objects.create(flavor=flavor, needs_approval=True)
    services.book(member, booking_of(team, flavor, units=2, name="tentative", hours=2,
                                     start=next_week_at(9) + timedelta(days=1)))


def test_the_feed_lists_each_window_and_only_its_secret_url_answers(api, booked, team):
    made = api.post("/api/v1/reservations/feed/", {"team": team.slug}, format="json")
    assert made.status_code == 201
    url = made.json()["url"]
    path = url[url.index("/reservations/feed/"):]
    answer = Client().get(path)  # no session, no token: the URL is the credential
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/calendar")
    events = {str(e["summary"]): e for e in Calendar.from_ical(answer.content).walk("VEVENT")}
    assert set(events) == {"release-run: 4\u00d7 a100-80gb on east", "tentative: 2\u00d7 a100-80gb on east"}
    release = events["release-run: 4\u00d7 a100-80gb on east"]
    assert release.decoded("dtstart") == next_week_at(9) and release.decoded("dtend") == next_week_at(17)
    assert str(release["status"]) == "CONFIRMED" and str(events["tentative: 2\u00d7 a100-80gb on east"]["status"]) == "TENTATIVE"
    # A new URL replaces the old one.
    again = api.post("/api/v1/reservations/feed/", {"team": team.slug}, format="json").json()["url"]
    assert Client().get(path).status_code == 404
    assert Client().get(again[again.index("/reservations/feed/"):]).status_code == 200


def test_only_the_teams_members_make_its_feed(api_client_for, outsider, viewer, team):
    assert api_client_for(outsider).post("/api/v1/reservations/feed/", {"team": team.slug}, format="json").status_code == 404
    assert api_client_for(viewer).post("/api/v1/reservations/feed/", {"team": team.slug}, format="json").status_code == 403
    assert Client().get("/reservations/feed/not-a-token.ics").status_code == 404
