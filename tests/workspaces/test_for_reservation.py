"""A workspace that names the reservation it is for (docs/reservations.md "Open or targeted"): the API keeps it and
refuses what the one rule refuses, the New workspace form offers the team's bookings and says a refusal beside the
field, and its page says which it is for."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.reservations.support import book_for_work, choice_label
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db
URL = "/api/v1/workspaces/"


def test_a_workspace_names_its_teams_booking_through_the_api(api, member, team, ws_quota, published, outsider,
                                                             other_team):
    theirs = book_for_work(outsider, other_team)
    refused = api.post(URL, {"team": team.slug, "name": "explore", "flavor": "a100-80gb",
                             "for_reservation": theirs.pk}, format="json")
    assert refused.status_code == 400
    assert refused.json()["errors"]["for_reservation"] == [f"The team has no reservation #{theirs.pk}."]
    mine = book_for_work(member, team)
    created = api.post(URL, {"team": team.slug, "name": "explore", "flavor": "a100-80gb",
                             "for_reservation": mine.pk}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["for_reservation"] == mine.pk and created.json()["reservation"] is None
    assert Workspace.objects.get().for_reservation == mine.pk


def test_the_new_workspace_form_offers_the_bookings_and_refuses_beside_the_field(client, member, team, ws_quota,
                                                                                 published):
    mine = book_for_work(member, team)
    client.force_login(member)
    url = reverse("workspaces:workspace-new")
    assert choice_label(mine) in client.get(url).content.decode()
    wrong_flavor = client.post(url, {"name": "explore", "flavor": "a100-1g.10gb", "for_reservation": str(mine.pk)})
    assert wrong_flavor.status_code == 400 and f"Reservation #{mine.pk} is for a100-80gb" in wrong_flavor.content.decode()
    created = client.post(url, {"name": "explore", "flavor": "a100-80gb", "for_reservation": str(mine.pk)})
    workspace = Workspace.objects.get()
    assert created.status_code == 302 and workspace.for_reservation == mine.pk
    assert f"For reservation #{mine.pk}" in client.get(workspace.get_absolute_url()).content.decode()
