"""The run form warns when a run going into one of its team's reserved windows may outlast it (issue 49, point 5:
"the form warns when a run's limit runs past the window") — past the window's end the run is on the team's quota,
borrowed where the quota is full — and says nothing when its limit ends inside the window."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import reserved
from core.formatting import format_when
from quotas.demo import seed_team_quotas
from tests.reservations.support import clusters_with

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def east(flavors):
    return clusters_with(flavors["a100-80gb"], east=8)["east"]


def book(team, flavor, cluster, start, end) -> None:
    reserved.hold(f"reservation:{team.pk}", team, flavor, cluster, 4, [(start, end)], Decimal("2"))


def preview(client, limit: str = "") -> str:
    data = {"flavor": "a100-80gb", "gpus_per_worker": "4", "workers": "1", "max_runtime_minutes": limit}
    response = client.post("/runs/preview/", data, **HTMX)
    assert response.status_code == 200
    return response.content.decode()


def test_a_run_going_into_an_open_window_is_warned_when_its_limit_runs_past_the_end(client, member, team, quota,
                                                                                     flavors, east):
    now = timezone.now()
    end = now + timedelta(hours=1)
    book(team, flavors["a100-80gb"], east, now - timedelta(minutes=10), end)
    client.force_login(member)
    html = preview(client, "120")
    assert "admitted into the team&#x27;s reservation" in html
    assert (f"its runtime limit (2 h 00 min) runs past the end of the team&#x27;s reservation at {format_when(end)}: from "
            "then it runs on the team&#x27;s quota — borrowed, and preemptible, where the quota is full") in html
    assert "it has no runtime limit, and the team&#x27;s reservation ends at" in preview(client)
    inside = preview(client, "45")
    assert "admitted into the team&#x27;s reservation" in inside and 'id="preview-window"' not in inside


def test_a_run_waiting_for_its_teams_window_is_warned_from_the_windows_start(client, member, team, flavors, east):
    seed_team_quotas(team, {"l4": 2}, Decimal("100000"))  # no A100 quota: only the window holds the run
    now = timezone.now()
    start, end = now + timedelta(hours=1), now + timedelta(hours=3)
    book(team, flavors["a100-80gb"], east, start, end)
    client.force_login(member)
    # Two hours from the window's start ends at its end: inside. Three do not, though from now they would not
    # reach the window's end either way — the run starts when the window does.
    inside = preview(client, "120")
    assert "waiting for the team&#x27;s reservation of 4\u00d7 a100-80gb" in inside
    assert 'id="preview-window"' not in inside
    assert (f"its runtime limit (3 h 00 min) runs past the end of the team&#x27;s reservation at {format_when(end)}"
            in preview(client, "180"))


def test_a_run_on_the_quota_alone_is_not_warned(client, member, team, quota):
    client.force_login(member)
    html = preview(client, "600")
    assert "Starts now" in html and 'id="preview-window"' not in html
