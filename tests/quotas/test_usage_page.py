"""The team Usage page: this month's spend by flavor, person, run and day; CSV from the API."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from quotas.demo import seed_flavors, seed_team_quotas
from quotas.ledger import month_start, record_usage

pytestmark = pytest.mark.django_db


@pytest.fixture
def spend(team, member):
    flavors = {f.name: f for f in seed_flavors()}
    seed_team_quotas(team, {"a100-80gb": 8}, Decimal("1000"))
    start = month_start()  # inside this month whatever the day the test runs
    record_usage(team, "run:1", flavors["a100-80gb"], member, start, start + timedelta(hours=1), 2, False)
    return start


def test_it_shows_the_current_teams_spend(client, member, spend):
    client.force_login(member)
    response = client.get("/usage/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "8.20 USD" in body  # 2 GPUs × 1 h × 4.10
    assert "run:1" in body and "mia" in body and "a100-80gb" in body
    assert "group_by=flavor&amp;format=csv" in body


def test_it_serves_the_linked_csv_to_the_session(client, member, spend):
    client.force_login(member)
    response = client.get("/api/v1/usage/?team=ml-research&group_by=flavor&format=csv")
    assert response.status_code == 200
    assert response.content.decode().splitlines()[1] == "a100-80gb,2.0000,8.20,0.0000,0.00,USD"


def test_it_shows_nothing_of_other_teams(client, outsider, spend):
    client.force_login(outsider)
    body = client.get("/usage/").content.decode()
    assert "run:1" not in body
    assert "Nothing used yet this month." in body


def test_it_asks_anonymous_users_to_log_in_and_refuses_other_methods(client, member):
    assert client.get("/usage/").status_code == 302
    client.force_login(member)
    assert client.post("/usage/").status_code == 405
