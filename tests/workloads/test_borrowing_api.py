"""Borrowing as the API shows it (docs/api.md "Borrowing and preemption on workloads"): the dry run
says what would be borrowed, runs and endpoints say what they borrow, usage rows what is
borrowed and borrowable."""

from __future__ import annotations

import pytest

from quotas import services
from quotas.demo import seed_team_quotas
from tests.factories import make_team
from tests.inference.conftest import endpoint_payload
from tests.jobs.conftest import run_payload

pytestmark = pytest.mark.django_db


@pytest.fixture
def cohort(team, quota, staff):
    """ml-research (8× a100-80gb) shares a cohort with a lender of 4× a100-80gb, all idle."""
    lender = make_team("nlp-platform")
    seed_team_quotas(lender, {"a100-80gb": 4})
    services.set_cohort(staff, "research", teams=[team, lender])
    return lender


def test_a_dry_run_says_borrows_and_preemptible_and_the_run_shows_them(api, cohort, published):
    full = api.post("/api/v1/runs/", run_payload(name="own", gpus_per_worker=8), format="json")
    assert full.status_code == 201 and full.json()["borrowed_units"] == 0 and full.json()["preemptible"] is False
    dry = api.post("/api/v1/runs/?dry_run=1", run_payload(gpus_per_worker=2), format="json").json()
    assert (dry["outcome"], dry["borrows"], dry["preemptible"]) == ("admit", 2, True)
    run = api.post("/api/v1/runs/", run_payload(gpus_per_worker=2), format="json").json()
    assert (run["borrowed_units"], run["preemptible"]) == (2, True)
    assert api.get(f"/api/v1/runs/{run['id']}/").json()["borrowed_units"] == 2
    usage = api.get("/api/v1/teams/ml-research/usage/").json()
    row = next(r for r in usage["quotas"] if r["flavor"] == "a100-80gb")
    assert (row["in_use"], row["borrowed"], row["borrowable"]) == (10, 2, 2)


def test_an_endpoints_minimum_never_borrows(api, cohort, published):
    assert api.post("/api/v1/runs/", run_payload(name="own", gpus_per_worker=8), format="json").status_code == 201
    dry = api.post("/api/v1/endpoints/?dry_run=1", endpoint_payload(team="ml-research"), format="json").json()
    assert (dry["outcome"], dry["borrows"], dry["preemptible"]) == ("queue", 0, False)
    assert dry["message"].endswith("the cohort can lend 4 (nlp-platform uses 0 of its 4), "
                                   "but a guaranteed minimum never borrows")
