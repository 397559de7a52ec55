"""Cohorts in the admin console: a cohort's page with its teams, the team page's sharing limits."""

from __future__ import annotations

import pytest

from quotas.models import Cohort, TeamQuota, TeamSharing
from teams.models import AuditEvent
from tests.factories import make_team
from tests.quotas.test_admin import team_form

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_broker")]  # quota changes enqueue the mirror task


def test_staff_create_a_cohort_with_its_teams_audited(staff_client, staff, quota_team):
    other = make_team("nlp-platform")
    response = staff_client.post("/admin/quotas/cohort/add/", {
        "name": "research", "reclaim": "lower_priority", "min_runtime_minutes": 15,
        "preemption_delay_seconds": 60, "teams": [quota_team.pk, other.pk]})
    assert response.status_code == 302, response.content.decode()[:2000]
    cohort = Cohort.objects.get(name="research")
    assert (cohort.reclaim, cohort.min_runtime_minutes, cohort.preemption_delay_seconds) == ("lower_priority", 15, 60)
    assert set(TeamSharing.objects.filter(cohort=cohort).values_list("team__slug", flat=True)) == {
        "ml-research", "nlp-platform"}
    event = AuditEvent.objects.get(target="cohort research")
    assert event.actor == staff and event.details["new"]["teams"] == ["ml-research", "nlp-platform"]
    page = staff_client.get("/admin/quotas/cohort/").content.decode()
    assert "ml-research, nlp-platform" in page
    # Leaving a team out of the cohort's teams takes it out.
    response = staff_client.post(f"/admin/quotas/cohort/{cohort.pk}/change/", {
        "reclaim": "any", "min_runtime_minutes": 15, "preemption_delay_seconds": 60, "teams": [other.pk]})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert TeamSharing.objects.get(team=quota_team).cohort is None


def test_the_team_pages_quota_rows_set_borrowing_and_lending_limits(staff_client, quota_team):
    quotas = list(quota_team.quotas.order_by("pk"))
    data = team_form(quota_team, quotas)
    index = next(i for i, q in enumerate(quotas) if q.flavor.name == "a100-80gb")
    data[f"quotas-{index}-borrowing_limit"] = "4"
    data[f"quotas-{index}-lending_limit"] = "2"
    response = staff_client.post(f"/admin/portal/team/{quota_team.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    row = TeamQuota.objects.get(team=quota_team, flavor__name="a100-80gb")
    assert (row.limit, row.borrowing_limit, row.lending_limit) == (8, 4, 2)
    event = AuditEvent.objects.get(action=AuditEvent.Action.QUOTA_CHANGED)
    assert event.details["new_limits"] == {"borrowing_limit": 4, "lending_limit": 2}


def test_the_team_sharing_page_sets_fair_weight_and_within_team_preemption_audited(staff_client, staff, quota_team):
    response = staff_client.post("/admin/quotas/teamsharing/add/", {
        "team": quota_team.pk, "fair_weight": "2.5", "within_team_preemption": "on"})
    assert response.status_code == 302, response.content.decode()[:2000]
    sharing = TeamSharing.objects.get(team=quota_team)
    assert (str(sharing.fair_weight), sharing.within_team_preemption) == ("2.500", True)
    assert sorted(AuditEvent.objects.filter(actor=staff, team=quota_team).values_list("target", flat=True)) == [
        "fair weight", "within-team preemption"]
