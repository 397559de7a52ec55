"""Quota as code (docs/api.md "Quota as code"): ``/cohorts/``, ``/teams/{slug}/quotas/`` and ``PATCH
/teams/{slug}/`` — platform staff change them, through the audited services; everyone else gets
404 (cohorts) or reads their own team's (quotas, sharing) and gets 403 changing it; bad input is a
400 that writes nothing; admission goes by what was set."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from quotas.admission import admit
from quotas.decide import ResourceRequest
from quotas.demo import seed_team_quotas
from quotas.models import Cohort, TeamQuota, TeamSharing
from teams.models import AuditEvent, Role
from tests.factories import add_member, make_team, make_user
from tests.jobs.conftest import run_payload

pytestmark = pytest.mark.django_db

COHORTS = "/api/v1/cohorts/"


def cohort_url(name: str) -> str:
    return f"{COHORTS}{name}/"


def quotas_url(slug: str = "ml-research") -> str:
    return f"/api/v1/teams/{slug}/quotas/"


def quota_url(flavor: str, slug: str = "ml-research") -> str:
    return f"/api/v1/teams/{slug}/quotas/{flavor}/"


def team_url(slug: str = "ml-research") -> str:
    return f"/api/v1/teams/{slug}/"


@pytest.fixture
def as_staff(api_client_for, staff):
    return api_client_for(staff)


@pytest.fixture
def lender(flavors):
    """nlp-platform, with 4× a100-80gb of its own."""
    team = make_team("nlp-platform")
    seed_team_quotas(team, {"a100-80gb": 4})
    return team


def quota_events() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=AuditEvent.Action.QUOTA_CHANGED).order_by("pk"))


def state() -> tuple:
    """Everything quota as code may write, to show that a refused call wrote nothing."""
    return (sorted(Cohort.objects.values_list("name", "reclaim", "min_runtime_minutes", "preemption_delay_seconds")),
            sorted(TeamSharing.objects.values_list("team__slug", "cohort__name", "fair_weight",
                                                   "within_team_preemption")),
            sorted(TeamQuota.objects.values_list("team__slug", "flavor__name", "limit", "borrowing_limit",
                                                 "lending_limit")),
            len(quota_events()))


# -- cohorts -------------------------------------------------------------------------------------


def test_staff_create_read_replace_and_delete_a_cohort(as_staff, staff, team, lender):
    created = as_staff.put(cohort_url("research"), {"teams": ["nlp-platform", "ml-research"]}, format="json")
    assert created.status_code == 201
    assert created.json() == {"name": "research", "teams": ["ml-research", "nlp-platform"], "reclaim": "any",
                              "min_runtime_minutes": 10, "preemption_delay_seconds": 30}
    assert TeamSharing.objects.get(team=team).cohort.name == "research"
    assert as_staff.get(cohort_url("research")).json() == created.json()
    listed = as_staff.get(COHORTS).json()
    assert (listed["count"], listed["results"]) == (1, [created.json()])

    replaced = as_staff.put(cohort_url("research"), {"name": "research", "teams": ["ml-research"], "reclaim": "never",
                                                     "min_runtime_minutes": 0, "preemption_delay_seconds": 120},
                            format="json")
    assert replaced.status_code == 200
    assert replaced.json() == {"name": "research", "teams": ["ml-research"], "reclaim": "never",
                               "min_runtime_minutes": 0, "preemption_delay_seconds": 120}
    assert TeamSharing.objects.get(team=lender).cohort is None
    # A PUT is the whole cohort: what it leaves out takes the default again.
    assert as_staff.put(cohort_url("research"), {}, format="json").json() == {
        "name": "research", "teams": [], "reclaim": "any", "min_runtime_minutes": 10, "preemption_delay_seconds": 30}

    assert as_staff.delete(cohort_url("research")).status_code == 204
    assert as_staff.get(cohort_url("research")).status_code == 404
    assert as_staff.delete(cohort_url("research")).status_code == 404
    events = quota_events()
    assert [e.target for e in events] == ["cohort research"] * 4
    assert all(e.actor == staff for e in events)
    assert events[0].details["old"] is None and events[0].details["new"]["teams"] == ["ml-research", "nlp-platform"]
    assert events[1].details["new"]["reclaim"] == "never"
    assert events[-1].details["new"] is None


def test_putting_the_same_cohort_twice_changes_and_audits_once(as_staff, team, lender):
    body = {"teams": ["ml-research", "nlp-platform"], "reclaim": "lower_priority", "min_runtime_minutes": 5}
    first = as_staff.put(cohort_url("research"), body, format="json")
    second = as_staff.put(cohort_url("research"), body, format="json")
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json() == second.json()
    assert len(quota_events()) == 1
    assert Cohort.objects.count() == 1


def test_a_team_put_into_another_cohort_leaves_its_former_one(as_staff, team, lender):
    assert as_staff.put(cohort_url("research"), {"teams": ["ml-research", "nlp-platform"]},
                        format="json").status_code == 201
    moved = as_staff.put(cohort_url("vision.shared"), {"teams": ["nlp-platform"]}, format="json")
    assert moved.status_code == 201 and moved.json()["teams"] == ["nlp-platform"]
    assert as_staff.get(cohort_url("research")).json()["teams"] == ["ml-research"]
    assert TeamSharing.objects.get(team=lender).cohort.name == "vision.shared"
    event = quota_events()[-1]
    assert event.target == "cohort vision.shared" and event.details["moved_from"] == {"nlp-platform": "research"}
    assert as_staff.get(team_url("nlp-platform")).json()["cohort"] == "vision.shared"


@pytest.mark.parametrize("role", [None, Role.VIEWER, Role.MEMBER, Role.ADMIN])
def test_cohorts_answer_404_to_everyone_but_staff(api_client_for, as_staff, team, lender, role):
    assert as_staff.put(cohort_url("research"), {"teams": ["ml-research"]}, format="json").status_code == 201
    user = make_user("someone")
    if role is not None:
        add_member(team, user, role)
    client, before = api_client_for(user), state()
    assert client.get(COHORTS).status_code == 404
    assert client.get(cohort_url("research")).status_code == 404
    assert client.get(cohort_url("nothing")).status_code == 404
    assert client.put(cohort_url("research"), {"teams": []}, format="json").status_code == 404
    assert client.put(cohort_url("new"), {"teams": ["ml-research"]}, format="json").status_code == 404
    assert client.post(COHORTS, {"name": "x"}, format="json").status_code == 405  # as for anyone: no such method
    assert client.delete(cohort_url("research")).status_code == 404
    assert state() == before


def test_cohorts_need_credentials(db):
    assert APIClient().get(COHORTS).status_code == 401
    assert APIClient().put(cohort_url("research"), {}, format="json").status_code == 401


@pytest.mark.parametrize("name, body, field", [
    ("research", {"min_runtime_minutes": -1}, "min_runtime_minutes"),
    ("research", {"preemption_delay_seconds": -5}, "preemption_delay_seconds"),
    ("research", {"preemption_delay_seconds": 2**31}, "preemption_delay_seconds"),
    ("research", {"min_runtime_minutes": "10"}, "min_runtime_minutes"),
    ("research", {"min_runtime_minutes": 1.5}, "min_runtime_minutes"),
    ("research", {"min_runtime_minutes": True}, "min_runtime_minutes"),
    ("research", {"reclaim": "always"}, "reclaim"),
    ("research", {"teams": ["ml-research", "no-such-team"]}, "teams"),
    ("research", {"teams": "ml-research"}, "teams"),
    ("research", {"teams": [7]}, "teams"),
    ("research", {"name": "other"}, "name"),
    ("Research_1", {}, "name"),
    ("-research", {}, "name"),
    ("r" * 64, {}, "name"),
    ("research", ["ml-research"], "non_field_errors"),
    # A misspelt field took its default (min_runtime_minutes 10) and answered 201.
    ("research", {"min_runtime_minute": 30}, "non_field_errors"),
])
def test_bad_cohort_input_is_a_400_that_writes_nothing(as_staff, team, name, body, field):
    before = state()
    response = as_staff.put(cohort_url(name), body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]
    assert state() == before


def test_a_body_that_is_not_json_is_a_400_or_415_that_writes_nothing(as_staff, team):
    before = state()
    broken = as_staff.put(cohort_url("research"), "{not json", content_type="application/json")
    assert broken.status_code == 400 and "non_field_errors" in broken.json()["errors"]
    assert as_staff.put(cohort_url("research"), "teams=ml-research",
                        content_type="application/x-www-form-urlencoded").status_code == 415
    assert state() == before


def test_a_cohort_put_keeps_the_other_members_unknown_team_names_in_the_error(as_staff, team):
    response = as_staff.put(cohort_url("research"), {"teams": ["ghost", "ml-research", "phantom"]}, format="json")
    assert response.json()["errors"]["teams"] == ["Unknown team 'ghost'.", "Unknown team 'phantom'."]


# -- a team's quotas ---------------------------------------------------------------------------------


def test_members_and_staff_read_a_teams_quotas(api_client_for, api, viewer, as_staff, quota, outsider):
    for client in (api, api_client_for(viewer), as_staff):  # staff belong to no team here
        response = client.get(quotas_url())
        assert response.status_code == 200
        body = response.json()
        assert body["count"] == 2
        assert body["results"][0] == {"flavor": "a100-80gb", "limit": 8, "borrowing_limit": None,
                                      "lending_limit": None, "in_use": 0, "borrowed": 0, "queued": 0}
    assert api_client_for(outsider).get(quotas_url()).status_code == 404
    assert as_staff.get(quotas_url("no-such-team")).status_code == 404


def test_staff_put_a_quota_whole_and_it_is_audited(as_staff, staff, quota, flavors):
    response = as_staff.put(quota_url("a100-80gb"), {"limit": 6, "borrowing_limit": 2, "lending_limit": 4},
                            format="json")
    assert response.status_code == 200
    assert response.json() == {"flavor": "a100-80gb", "limit": 6, "borrowing_limit": 2, "lending_limit": 4,
                               "in_use": 0, "borrowed": 0, "queued": 0}
    row = TeamQuota.objects.get(team__slug="ml-research", flavor__name="a100-80gb")
    assert (row.limit, row.borrowing_limit, row.lending_limit) == (6, 2, 4)
    event = quota_events()[-1]
    assert (event.actor, event.team.slug, event.target) == (staff, "ml-research", "quota a100-80gb")
    assert (event.details["old"], event.details["new"]) == (8, 6)
    assert event.details["new_limits"] == {"borrowing_limit": 2, "lending_limit": 4}

    # The same PUT again changes nothing and audits nothing; leaving a limit out is null (any).
    assert as_staff.put(quota_url("a100-80gb"), {"limit": 6, "borrowing_limit": 2, "lending_limit": 4},
                        format="json").status_code == 200
    assert len(quota_events()) == 1
    assert as_staff.put(quota_url("a100-80gb"), {"limit": 6}, format="json").json()["borrowing_limit"] is None

    # A new flavor's quota is created; limit null removes one.
    assert as_staff.put(quota_url("a100-1g.10gb"), {"limit": 7}, format="json").json()["limit"] == 7
    removed = as_staff.put(quota_url("l4"), {"limit": None}, format="json")
    assert removed.status_code == 200 and removed.json()["limit"] is None
    assert not TeamQuota.objects.filter(team__slug="ml-research", flavor__name="l4").exists()
    assert [e.details["new"] for e in quota_events()[-3:]] == [6, 7, None]


def test_staff_put_a_quota_of_a_team_they_do_not_belong_to_and_members_cannot(api_client_for, api, viewer,
                                                                             team_admin, outsider, quota):
    before = state()
    for client in (api, api_client_for(viewer), api_client_for(team_admin)):  # they read it, they may not change it
        assert client.put(quota_url("a100-80gb"), {"limit": 80}, format="json").status_code == 403
    assert api_client_for(outsider).put(quota_url("a100-80gb"), {"limit": 80}, format="json").status_code == 404
    assert api.put(quota_url("a100-80gb", "vision"), {"limit": 80}, format="json").status_code == 404
    assert state() == before


@pytest.mark.parametrize("flavor, body, field", [
    ("a100-80gb", {"limit": -1}, "limit"),
    ("a100-80gb", {"limit": 2**31}, "limit"),
    ("a100-80gb", {"limit": "4"}, "limit"),
    ("a100-80gb", {"limit": 4.5}, "limit"),
    ("a100-80gb", {}, "limit"),
    ("a100-80gb", {"limit": 4, "borrowing_limit": -1}, "borrowing_limit"),
    ("a100-80gb", {"limit": 4, "lending_limit": False}, "lending_limit"),
    ("h200", {"limit": 4}, "flavor"),
    ("a100-80gb", [4], "non_field_errors"),
    # A misspelt field left borrowing unlimited (null) and answered 200.
    ("a100-80gb", {"limit": 4, "borowing_limit": 0}, "non_field_errors"),
    # A quota removed kept no borrowing limit: the 3 was dropped and the answer was 200.
    ("a100-80gb", {"limit": None, "borrowing_limit": 3}, "borrowing_limit"),
    ("a100-80gb", {"limit": None, "lending_limit": 0}, "lending_limit"),
])
def test_bad_quota_input_is_a_400_that_writes_nothing(as_staff, quota, flavor, body, field):
    before = state()
    response = as_staff.put(quota_url(flavor), body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]
    assert state() == before


def test_an_unknown_flavor_and_a_bad_body_are_reported_together(as_staff, quota):
    errors = as_staff.put(quota_url("h200"), {"limit": -1}, format="json").json()["errors"]
    assert errors["flavor"] == ["Unknown flavor 'h200'."] and "limit" in errors


def test_a_quota_body_that_is_not_json_is_a_400(as_staff, quota):
    before = state()
    response = as_staff.put(quota_url("a100-80gb"), b"\xff{", content_type="application/json")
    assert response.status_code == 400 and "non_field_errors" in response.json()["errors"]
    assert state() == before


# -- a team's sharing settings -------------------------------------------------------------------------


def test_staff_patch_a_teams_fair_weight_and_within_team_preemption(as_staff, staff, api, team):
    response = as_staff.patch(team_url(), {"fair_weight": 2.5, "within_team_preemption": True}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert (body["slug"], body["role"], body["fair_weight"], body["within_team_preemption"], body["cohort"]) == (
        "ml-research", None, 2.5, True, None)
    sharing = TeamSharing.objects.get(team=team)
    assert (sharing.fair_weight, sharing.within_team_preemption) == (Decimal("2.5"), True)
    events = quota_events()
    assert [(e.target, e.details["old"], e.details["new"]) for e in events] == [
        ("fair weight", "1.0000", "2.5000"), ("within-team preemption", False, True)]
    assert all(e.actor == staff and e.team == team for e in events)
    # One setting alone keeps the other; the same value again is no change.
    assert as_staff.patch(team_url(), {"fair_weight": 0}, format="json").json()["within_team_preemption"] is True
    assert as_staff.patch(team_url(), {"fair_weight": 0}, format="json").status_code == 200
    assert len(quota_events()) == 3
    # Members read the same fields.
    shown = api.get(team_url()).json()
    assert shown == {"slug": "ml-research", "name": "ML Research", "role": "member", "namespace": team.namespace,
                     "members_may_cancel_teammates_work": True, "fair_weight": 0.0, "within_team_preemption": True,
                     "cohort": None}


def test_a_fair_weight_is_kept_to_three_decimals(as_staff, team):
    assert as_staff.patch(team_url(), {"fair_weight": 99999.99999999999}, format="json").json()["fair_weight"] == 99999.999
    assert as_staff.patch(team_url(), {"fair_weight": 1.2345}, format="json").json()["fair_weight"] == 1.234
    assert TeamSharing.objects.get(team=team).fair_weight == Decimal("1.234")


def test_a_team_without_sharing_settings_shows_the_defaults(api, team):
    body = api.get(team_url()).json()
    assert (body["fair_weight"], body["within_team_preemption"], body["cohort"]) == (1.0, False, None)
    assert not TeamSharing.objects.exists()  # reading writes nothing


def test_only_staff_change_a_teams_sharing(api_client_for, api, viewer, team_admin, outsider, as_staff, team):
    before = state()
    for client in (api, api_client_for(viewer), api_client_for(team_admin)):
        assert client.patch(team_url(), {"fair_weight": 9}, format="json").status_code == 403
    assert api_client_for(outsider).patch(team_url(), {"fair_weight": 9}, format="json").status_code == 404
    assert api_client_for(outsider).get(team_url()).status_code == 404
    assert as_staff.get(team_url("no-such-team")).status_code == 404
    assert as_staff.patch(team_url("no-such-team"), {"fair_weight": 9}, format="json").status_code == 404
    assert state() == before


@pytest.mark.parametrize("body, field", [
    ({"fair_weight": -0.5}, "fair_weight"),
    ({"fair_weight": "2.5"}, "fair_weight"),
    ({"fair_weight": 1e300}, "fair_weight"),
    ({"fair_weight": -1e-300}, "fair_weight"),
    ({"fair_weight": 1.5e-7}, "fair_weight"),  # cut to three decimals it was 0, "borrows last", answered 200
    ({"fair_weight": 0.0009}, "fair_weight"),
    ({"fair_weight": 100000}, "fair_weight"),
    ({"fair_weight": True}, "fair_weight"),
    ({"fair_weight": None}, "fair_weight"),
    ({"within_team_preemption": "yes"}, "within_team_preemption"),
    ({"within_team_preemption": 1}, "within_team_preemption"),
    ({"fair_weight": 2, "within_team_preemption": "true"}, "within_team_preemption"),
    ("fair_weight", "non_field_errors"),
    ({"fairweight": 2}, "non_field_errors"),  # changed nothing and answered 200
])
def test_bad_sharing_input_is_a_400_that_writes_nothing(as_staff, team, body, field):
    before = state()
    response = as_staff.patch(team_url(), json.dumps(body), content_type="application/json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]
    assert state() == before


# -- admission goes by what was set -----------------------------------------------------------------------


def test_admission_borrows_within_the_borrowing_limit_put_through_the_api(as_staff, api, quota, lender, published):
    def dry(gpus: int) -> dict:
        return api.post("/api/v1/runs/?dry_run=1", run_payload(gpus_per_worker=gpus), format="json").json()

    assert api.post("/api/v1/runs/", run_payload(name="own", gpus_per_worker=8), format="json").status_code == 201
    assert (dry(2)["outcome"], dry(2)["borrows"]) == ("queue", 0)  # no cohort: the quota is a wall

    assert as_staff.put(cohort_url("research"), {"teams": ["ml-research", "nlp-platform"]},
                        format="json").status_code == 201
    assert (dry(2)["outcome"], dry(2)["borrows"], dry(2)["preemptible"]) == ("admit", 2, True)

    assert as_staff.put(quota_url("a100-80gb"), {"limit": 8, "borrowing_limit": 1}, format="json").status_code == 200
    assert (dry(2)["outcome"], dry(2)["borrows"]) == ("queue", 0)  # 8 + 2 is over 8 + 1
    assert (dry(1)["outcome"], dry(1)["borrows"]) == ("admit", 1)

    # The lender lends none of its 4 now (all its private floor): nothing is left to borrow.
    assert as_staff.put(quota_url("a100-80gb", "nlp-platform"), {"limit": 4, "lending_limit": 0},
                        format="json").status_code == 200
    assert dry(1)["outcome"] == "queue"
    rows = api.get(quotas_url()).json()["results"]
    assert rows[0] == {"flavor": "a100-80gb", "limit": 8, "borrowing_limit": 1, "lending_limit": None,
                       "in_use": 8, "borrowed": 0, "queued": 0}


def test_a_quota_removed_while_in_use_shows_limit_null_and_what_is_still_used(as_staff, api, quota):
    assert admit(quota[0].team, ResourceRequest("l4", 1, 1), "run:1").admitted
    removed = as_staff.put(quota_url("l4"), {"limit": None}, format="json").json()
    assert (removed["limit"], removed["in_use"]) == (None, 1)
    assert {row["flavor"]: row["limit"] for row in api.get(quotas_url()).json()["results"]} == {
        "a100-80gb": 8, "l4": None}


def test_every_bad_cohort_field_is_reported_at_once(as_staff, team):
    errors = as_staff.put(cohort_url("research"), {"name": "other", "reclaim": "always", "teams": ["ghost"],
                                                   "min_runtime_minutes": -1}, format="json").json()["errors"]
    assert set(errors) == {"name", "reclaim", "teams", "min_runtime_minutes"}
