"""An endpoint that names the reservation it is for (docs/reservations.md "Open or targeted"): the API keeps it and
refuses what the one rule refuses (its guaranteed replicas' units), the New endpoint form offers the team's
bookings, and its page says which it is for."""

from __future__ import annotations

import pytest

from inference.models import InferenceEndpoint
from tests.inference.conftest import endpoint_payload
from tests.inference.test_views import FORM
from tests.reservations.support import book_for_work, choice_label

pytestmark = pytest.mark.django_db


def post(api, query: str = "", **fields):
    return api.post(f"/api/v1/endpoints/{query}", {"team": "ml-research", **endpoint_payload(**fields)}, format="json")


def test_an_endpoint_names_its_teams_booking_and_its_minimum_must_fit_a_window(api, member, team, ep_quota,
                                                                               published):
    mine = book_for_work(member, team)
    too_big = post(api, for_reservation=mine.pk, min_replicas=3)  # 3 replicas of one unit: 3 > 2
    assert too_big.status_code == 400
    assert too_big.json()["errors"]["for_reservation"] == [
        f"Reservation #{mine.pk} holds 2 units a window; this asks for 3: it could never go in."]
    spot = post(api, "?dry_run=1", for_reservation=mine.pk, spot=True)
    assert spot.status_code == 400 and "Spot work" in spot.json()["errors"]["for_reservation"][0]
    assert not InferenceEndpoint.objects.exists()
    created = post(api, for_reservation=mine.pk, min_replicas=2)
    assert created.status_code == 201, created.json()
    assert created.json()["for_reservation"] == mine.pk and created.json()["state"] == "queued"
    assert InferenceEndpoint.objects.get().for_reservation == mine.pk
    patched = api.patch(f"/api/v1/endpoints/{created.json()['id']}/", {"for_reservation": None}, format="json")
    assert patched.status_code == 400  # named at creation only


def test_the_new_endpoint_form_offers_the_bookings_and_the_page_names_it(client, member, team, ep_quota, published):
    mine = book_for_work(member, team, matching="targeted")
    client.force_login(member)
    assert choice_label(mine) in client.get("/endpoints/new/").content.decode()
    wrong_flavor = client.post("/endpoints/new/", {**FORM, "for_reservation": str(mine.pk)})  # FORM: a MIG slice
    assert wrong_flavor.status_code == 400
    assert f"Reservation #{mine.pk} is for a100-80gb" in wrong_flavor.content.decode()
    created = client.post("/endpoints/new/", {**FORM, "flavor": "a100-80gb", "for_reservation": str(mine.pk)})
    endpoint = InferenceEndpoint.objects.get()
    assert created.status_code == 302 and endpoint.for_reservation == mine.pk
    assert f"For reservation #{mine.pk}" in client.get(f"/endpoints/{endpoint.pk}/").content.decode()
