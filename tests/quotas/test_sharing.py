"""Who lends to whom in a cohort now (quotas.sharing): pure over the cohort's figures, and the
dashboard's and Team page's section built from it — for members of a cohort only."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from quotas import services
from quotas.admission import admit
from quotas.decide import ResourceRequest
from quotas.demo import seed_team_quotas
from quotas.facts import CohortFigures
from quotas.models import TeamQuota
from quotas.sharing import Flow, flows
from teams.models import Role
from tests.factories import add_member, make_team, make_user


def cohort_of(*members) -> CohortFigures:
    """Members ``(team id, slug, limit, lending limit, in use)`` of one cohort, flavor 1."""
    return CohortFigures(
        slugs={tid: slug for tid, slug, *_ in members},
        quotas={(tid, 1): TeamQuota(team_id=tid, flavor_id=1, limit=limit, lending_limit=lending)
                for tid, _s, limit, lending, _u in members},
        usage={(tid, 1): used for tid, _s, _l, _ll, used in members})


# A borrows 2 above its 4; B leaves 3 of its 4 unused; C lends 1 of its 2 (a private floor of 1), unused.
COHORT = cohort_of((1, "a", 4, None, 6), (2, "b", 4, None, 1), (3, "c", 2, 1, 0))


def test_a_borrower_uses_each_lenders_unused_quota_pro_rata():
    [row] = flows(COHORT, 1)
    assert (row.limit, row.in_use, row.borrowed, row.lent) == (4, 6, 2, 0)
    assert row.borrowed_from == (Flow("b", 1.5), Flow("c", 0.5)) and row.lent_to == ()


def test_a_lender_sees_who_uses_its_unused_quota():
    [row] = flows(COHORT, 2)
    assert (row.borrowed, row.lent, row.lent_to, row.borrowed_from) == (0, 1.5, (Flow("a", 1.5),), ())
    [row] = flows(COHORT, 3)
    assert (row.lent, row.lent_to) == (0.5, (Flow("a", 0.5),))


def test_nobody_borrowing_means_nothing_lent():
    rows = flows(cohort_of((1, "a", 4, None, 4), (2, "b", 4, None, 0)), 2)
    assert [(r.borrowed, r.lent, r.lent_to, r.borrowed_from) for r in rows] == [(0, 0, (), ())]


def test_flavors_the_team_has_no_quota_of_and_does_not_use_are_left_out():
    cohort = cohort_of((1, "a", 4, None, 0))
    cohort.slugs[2] = "b"
    assert flows(cohort, 2) == []


# -- the pages ------------------------------------------------------------------------------


@pytest.fixture
def borrowing(team, quota, staff, flavors):
    """ml-research (8× a100-80gb) borrows 2 of nlp-platform's idle 4, and has a weight of 2."""
    lender = make_team("nlp-platform")
    seed_team_quotas(lender, {"a100-80gb": 4})
    services.set_cohort(staff, "research", teams=[team, lender])
    services.set_team_sharing(staff, team, Decimal(2))
    assert admit(team, ResourceRequest("a100-80gb", 10, 1), "run:1").borrows == 2
    return lender


def section(body: str) -> str:
    return re.search(r'<section class="card" id="sharing">(.*?)</section>', body, re.S).group(1)


@pytest.mark.django_db
def test_the_dashboard_shows_the_teams_share_and_what_it_borrows_and_lends(client, member, borrowing):
    client.force_login(member)
    body = section(client.get("/").content.decode())
    row = re.search(r'<tr data-flavor="a100-80gb">(.*?)</tr>', body, re.S).group(1)
    cells = re.findall(r'<td class="num">(.*?)</td>', row)
    assert cells == ["0.08", "2", "0"]  # 2 borrowed ÷ the 12 its members lend (8 + 4) ÷ its weight of 2
    assert "Cohort research" in body and "weight 2" in body


@pytest.mark.django_db
def test_the_team_page_says_whom_it_borrows_from_and_lends_to(client, member, borrowing, team):
    client.force_login(member)
    body = section(client.get("/teams/ml-research/").content.decode())
    assert re.search(r'class="borrowed-from">nlp-platform \(2\)</td>', body)
    lena = make_user("lena")
    add_member(borrowing, lena, Role.MEMBER)
    client.force_login(lena)
    lender_page = section(client.get("/teams/nlp-platform/").content.decode())
    assert re.search(r'class="lent-to">ml-research \(2\)</td>', lender_page)


@pytest.mark.django_db
def test_a_team_outside_any_cohort_sees_nothing_new_and_outsiders_see_nothing(client, member, outsider, borrowing,
                                                                              other_team):
    client.force_login(outsider)  # vision: no cohort
    assert 'id="sharing"' not in client.get("/").content.decode()
    assert 'id="sharing"' not in client.get("/teams/vision/").content.decode()
    assert client.get("/teams/ml-research/").status_code == 404
