"""The admin console's runs and endpoints sections: every team's work, filtered, with actions through the services."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client

from billing.ledger import record_usage
from billing.models import PreemptionEvent, QuotaHold, TeamBudget, UsageRecord
from inference import services as endpoints
from inference.models import InferenceEndpoint
from jobs.models import TrainingRun
from jobs.services import submit_run
from quotas.models import QueuedRequest
from sandbox.models import SimEvent, SimObject
from teams.models import ApiToken, AuditEvent, Membership, Team
from teams.services import create_api_token
from tests.inference.conftest import endpoint_payload
from tests.jobs.conftest import run_payload

pytestmark = pytest.mark.django_db


def test_staff_see_every_teams_runs_and_cancel_them(staff_client, member, team, quota, published):
    run = submit_run(member, team, {k: v for k, v in run_payload().items() if k != "team"})
    page = staff_client.get("/admin/jobs/trainingrun/?state__exact=admitted&o=-7")  # sorted by cost
    assert page.status_code == 200 and "bert-finetune" in page.content.decode()
    chosen = {"action": "end_selected", "_selected_action": [run.pk]}
    # Choosing the action only asks: a page names the run and its team, nothing is cancelled yet.
    asked = staff_client.post("/admin/jobs/trainingrun/", chosen)
    html = asked.content.decode()
    assert asked.status_code == 200 and f"run bert-finetune (#{run.pk}) of team ml-research" in html
    assert 'id="confirm-action"' in html
    run.refresh_from_db()
    assert run.state == "admitted"
    response = staff_client.post("/admin/jobs/trainingrun/", {**chosen, "confirmed": "yes"}, follow=True)
    assert f"Cancelled: run bert-finetune (#{run.pk}) of team ml-research." in response.content.decode()
    run.refresh_from_db()
    assert run.state == "cancelled" and run.reason == "cancelled by sam"
    assert not QuotaHold.objects.held().filter(ref=run.ref).exists()
    assert AuditEvent.objects.filter(action="run_cancelled", actor_name="sam").exists()


def test_staff_scale_an_endpoint_to_its_minimum(staff_client, member, team, ep_quota, published):
    endpoint = endpoints.create_endpoint(member, team, endpoint_payload(max_replicas=4))
    QuotaHold.objects.filter(ref=endpoint.ref).update(units=3)
    type(endpoint).objects.filter(pk=endpoint.pk).update(replica_ceiling=3, state="ready")
    chosen = {"action": "scale_to_minimum", "_selected_action": [endpoint.pk]}
    assert staff_client.post("/admin/inference/inferenceendpoint/", chosen).status_code == 200  # asks first
    endpoint.refresh_from_db()
    assert endpoint.replica_ceiling == 3
    response = staff_client.post("/admin/inference/inferenceendpoint/", {**chosen, "confirmed": "yes"})
    assert response.status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.replica_ceiling == 1 and QuotaHold.objects.held().get(ref=endpoint.ref).units == 1
    assert endpoint.scaling_events.first().reason == "scaled to its minimum by sam"


def test_deleting_endpoints_asks_first_and_names_their_teams(staff_client, member, team, ep_quota, published):
    endpoint = endpoints.create_endpoint(member, team, endpoint_payload())
    chosen = {"action": "end_selected", "_selected_action": [endpoint.pk]}
    asked = staff_client.post("/admin/inference/inferenceendpoint/", chosen).content.decode()
    assert f"endpoint llama-chat (#{endpoint.pk}) of team ml-research" in asked and "cannot be undone" in asked
    assert InferenceEndpoint.objects.get(pk=endpoint.pk).state != "deleting"
    done = staff_client.post("/admin/inference/inferenceendpoint/", {**chosen, "confirmed": "yes"}, follow=True)
    assert f"Deleted: endpoint llama-chat (#{endpoint.pk}) of team ml-research." in done.content.decode()
    assert InferenceEndpoint.objects.get(pk=endpoint.pk).state == "deleting"


def test_the_sections_are_staff_only_and_read_only(member, staff_client, team, quota, published):
    run = submit_run(member, team, {k: v for k, v in run_payload().items() if k != "team"})
    other = Client()
    other.force_login(member)
    assert other.get("/admin/jobs/trainingrun/").status_code == 302  # to the admin login
    assert staff_client.get(f"/admin/jobs/trainingrun/{run.pk}/change/").status_code == 200  # a view, no form
    assert staff_client.post(f"/admin/jobs/trainingrun/{run.pk}/change/", {"name": "x"}).status_code == 403
    assert TrainingRun.objects.get(pk=run.pk).name == "bert-finetune"


def test_staff_in_no_team_land_on_the_capacity_page(staff_client):
    response = staff_client.get("/")
    assert response.status_code == 302 and response["Location"] == "/admin/capacity/"


def test_the_lists_show_billed_money_to_the_cent_and_sort_by_it(staff_client, member, team, quota, published):
    cheap = submit_run(member, team, {**{k: v for k, v in run_payload().items() if k != "team"}, "name": "cheap"})
    dear = submit_run(member, team, {**{k: v for k, v in run_payload().items() if k != "team"}, "name": "dear"})
    TrainingRun.objects.filter(pk=cheap.pk).update(billed_cost=Decimal("2.5"))
    TrainingRun.objects.filter(pk=dear.pk).update(billed_cost=Decimal("12.3456789012"))
    html = staff_client.get("/admin/jobs/trainingrun/?o=-7").content.decode()  # column 7: billed, dearest first
    assert "12.35" in html and "2.50" in html and "12.3456789012" not in html
    assert html.index(">dear<") < html.index(">cheap<")
    html = staff_client.get("/admin/jobs/trainingrun/?o=7").content.decode()
    assert html.index(">cheap<") < html.index(">dear<")


def test_every_admin_list_writes_times_and_money_as_the_portal_does(staff_client, member, team, quota, published):
    """Issue 20: the console wrote "Nov. 23, 2026, 2:05 p.m." and bare decimals; the portal writes
    2026-11-23 14:05 UTC and 12,345.68 USD (core.formatting) — the console now too."""
    moment = datetime(2026, 11, 23, 14, 5, 7, tzinfo=UTC)
    run = submit_run(member, team, {k: v for k, v in run_payload().items() if k != "team"})
    TrainingRun.objects.filter(pk=run.pk).update(created_at=moment, billed_cost=Decimal("12345.678"))
    endpoint = endpoints.create_endpoint(member, team, endpoint_payload())
    InferenceEndpoint.objects.filter(pk=endpoint.pk).update(created_at=moment, billed_cost=Decimal("0.125"))
    record_usage(team, run.ref, "a100-80gb", member, moment, moment + timedelta(minutes=30), 2, False)
    QuotaHold.objects.filter(ref=run.ref).update(created_at=moment)
    AuditEvent.objects.update(created_at=moment)
    TeamBudget.objects.filter(team=team).update(monthly_limit=Decimal("20000"))
    expected = {
        "/admin/jobs/trainingrun/": ["2026-11-23 14:05 UTC", "12,345.68 USD"],
        "/admin/inference/inferenceendpoint/": ["2026-11-23 14:05 UTC", "0.13 USD"],
        "/admin/billing/usagerecord/": ["2026-11-23 14:00 UTC", "2026-11-23 14:05:07 UTC", "2026-11-23 14:35:07 UTC",
                                       "4.10 USD", "1.0000"],
        "/admin/billing/teambudget/": ["20,000.00 USD"],
        "/admin/billing/quotahold/": ["2026-11-23 14:05 UTC"],
        "/admin/portal/auditevent/": ["2026-11-23 14:05:07 UTC"],
        "/admin/fleet/gpuflavor/": ["4.10 USD", "0.5857 USD"],
    }
    for path, texts in expected.items():
        html = staff_client.get(path).content.decode()
        for text in texts:
            assert text in html, (path, text)
        assert "Nov. 23, 2026" not in html and "p.m." not in html, path


def test_the_rest_of_the_console_writes_them_so_too_lists_and_detail_pages(staff_client, member, team, quota,
                                                                           published):
    """Team and membership lists, the sandbox's rows and every read-only detail page wrote Django's
    "Nov. 23, 2026, 2:05 p.m." and ten-decimal amounts ("12345.6780000000")."""
    moment = datetime(2026, 11, 23, 14, 5, 7, tzinfo=UTC)
    run = submit_run(member, team, {k: v for k, v in run_payload().items() if k != "team"})
    TrainingRun.objects.filter(pk=run.pk).update(admitted_at=moment, billed_cost=Decimal("12345.678"))
    submit_run(member, team, {**{k: v for k, v in run_payload().items() if k != "team"}, "name": "waits",
                              "gpus_per_worker": 8, "max_runtime_minutes": 90})
    queued = QueuedRequest.objects.get()
    record_usage(team, run.ref, "a100-80gb", member, moment, moment + timedelta(minutes=30), 2, False)
    token, _raw = create_api_token(member, "ci", expires_days=30)
    ApiToken.objects.filter(pk=token.pk).update(created_at=moment, expires_at=moment, last_used_at=moment)
    Team.objects.update(created_at=moment)
    Membership.objects.update(created_at=moment)
    SimObject.objects.create(resource_kind="Job", namespace="team-x", name="run-1", workload="run-1", created_at=moment,
                             manifest={}, plan={})
    SimEvent.objects.create(namespace="team-x", workload="run-1", object="Job/run-1", type="Normal",
                            reason="SuccessfulCreate", message="Created pod", time=moment)
    preempted = PreemptionEvent.objects.create(
        ref=run.ref, team=team, by_team=team, user=member, flavor=run.flavor, units=2, reason="preempted: test",
        grace_seconds=30, lost_gpu_hours=Decimal("1.2345678901"), lost_cost=Decimal("5.0612345678"), at=moment)
    expected = {
        "/admin/portal/team/": ["2026-11-23 14:05 UTC"],
        "/admin/portal/membership/": ["2026-11-23 14:05 UTC"],
        "/admin/portal/apitoken/": ["2026-11-23 14:05 UTC"],
        "/admin/sandbox/simobject/": ["2026-11-23 14:05 UTC"],
        "/admin/sandbox/simevent/": ["2026-11-23 14:05 UTC"],
        f"/admin/jobs/trainingrun/{run.pk}/change/": ["2026-11-23 14:05 UTC", "12,345.68 USD"],
        f"/admin/billing/usagerecord/{UsageRecord.objects.get().pk}/change/": ["2026-11-23 14:05 UTC", "4.10 USD"],
        f"/admin/quotas/queuedrequest/{queued.pk}/change/": ["USD"],
        "/admin/billing/preemptionevent/": ["2026-11-23 14:05:07 UTC", "5.06 USD", "1.2346"],
        f"/admin/billing/preemptionevent/{preempted.pk}/change/": ["5.06 USD", "1.2346"],
        f"/admin/portal/apitoken/{token.pk}/change/": ["2026-11-23 14:05 UTC"],
    }
    for path, texts in expected.items():
        response = staff_client.get(path)
        assert response.status_code == 200, path
        html = response.content.decode()
        for text in texts:
            assert text in html, (path, text)
        assert "Nov. 23, 2026" not in html and "p.m." not in html, path
        assert "0000000" not in html, path  # no ten-decimal amounts


def test_the_queue_list_shows_what_each_entry_commits(staff_client, member, team, quota, published):
    submit_run(member, team, {**{k: v for k, v in run_payload().items() if k != "team"}, "name": "hog",
                              "gpus_per_worker": 8})
    submit_run(member, team, {**{k: v for k, v in run_payload().items() if k != "team"}, "name": "waits",
                              "gpus_per_worker": 2, "max_runtime_minutes": 90})
    html = staff_client.get("/admin/quotas/queuedrequest/").content.decode()
    assert "8.20 USD" in html and "12.30 USD" in html  # per hour; in all with its 90-minute limit
