"""A run that names the reservation it is for (docs/reservations.md "Open or targeted"), in the portal: the New run
form offers the team's bookings not over, refuses what the one rule refuses beside the field, and the run's page
says which booking it is for."""

from __future__ import annotations

import pytest

from jobs.models import TrainingRun
from tests.jobs.test_views import form_data
from tests.reservations.support import book_for_work, choice_label

pytestmark = pytest.mark.django_db


def test_the_new_run_form_offers_the_teams_bookings_and_submits_for_one(client, member, team, quota, published,
                                                                        outsider, other_team):
    mine = book_for_work(member, team, matching="targeted")
    theirs = book_for_work(outsider, other_team)
    client.force_login(member)
    page = client.get("/runs/new/").content.decode()
    assert choice_label(mine) in page and "\u00b7 targeted" in choice_label(mine)
    assert f"#{theirs.pk} " not in page  # another team's booking is not offered
    created = client.post("/runs/new/", form_data(for_reservation=str(mine.pk)))
    run = TrainingRun.objects.get()
    assert created.status_code == 302 and run.for_reservation == mine.pk
    assert run.state == "queued"  # it waits for its window, though the quota has room
    detail = client.get(f"/runs/{run.pk}/").content.decode()
    assert f"For reservation #{mine.pk}" in detail


def test_a_booking_the_run_may_not_name_is_a_form_error(client, member, team, quota, published, outsider, other_team):
    theirs = book_for_work(outsider, other_team)
    client.force_login(member)
    refused = client.post("/runs/new/", form_data(for_reservation=str(theirs.pk)))
    assert refused.status_code == 400
    assert f"The team has no reservation #{theirs.pk}." in refused.content.decode()
    mine = book_for_work(member, team)
    too_big = client.post("/runs/new/", form_data(for_reservation=str(mine.pk), gpus_per_worker="4"))
    assert too_big.status_code == 400 and "holds 2 units a window; this asks for 4" in too_big.content.decode()
    assert not TrainingRun.objects.exists()


def test_the_preview_of_a_run_for_a_booking_says_it_waits_for_the_window(client, member, team, quota):
    mine = book_for_work(member, team)
    client.force_login(member)
    preview = client.post("/runs/preview/", form_data(for_reservation=str(mine.pk)), HTTP_HX_REQUEST="true")
    assert "waiting for a window of the reservation it names" in preview.content.decode()
