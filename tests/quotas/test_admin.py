"""The admin console's quota pages and the Capacity page: staff only, right figures, audited changes."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from billing.ledger import month_start
from billing.models import BudgetMonth, TeamBudget
from cluster.errors import Transient
from fleet.models import GpuFlavor
from quotas.admission import admit
from quotas.decide import ResourceRequest
from quotas.demo import seed_team_quotas
from quotas.models import TeamQuota
from teams.models import AuditEvent
from tests.factories import make_user

CAPACITY_URL = "/admin/capacity/"
ADMIN_PAGES = [
    "/admin/",
    "/admin/fleet/gpuflavor/",
    "/admin/quotas/teamquota/",
    "/admin/billing/teambudget/",
    "/admin/billing/budgetmonth/",
    "/admin/billing/quotahold/",
    "/admin/quotas/queuedrequest/",
    "/admin/billing/usagerecord/",
    CAPACITY_URL,
]


@pytest.mark.parametrize("url", ADMIN_PAGES)
def test_it_shows_the_quota_pages_to_staff(staff_client, quota_team, fake_backend, url):
    admit(quota_team, ResourceRequest("a100-80gb", 6, 6), "run:1")
    admit(quota_team, ResourceRequest("a100-80gb", 4, 4), "run:2")
    assert staff_client.get(url).status_code == 200


@pytest.mark.parametrize("url", ADMIN_PAGES)
def test_it_sends_non_staff_to_the_login(member, quota_team, fake_backend, url):
    client = Client()
    client.force_login(member)
    response = client.get(url)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert Client().get(url).status_code == 302  # anonymous likewise


def test_it_refuses_other_methods_on_the_capacity_page(staff_client, fake_backend):
    assert staff_client.post(CAPACITY_URL).status_code == 405


def test_it_links_the_capacity_page_from_the_admin_index(staff_client):
    assert f'href="{CAPACITY_URL}"' in staff_client.get("/admin/").content.decode()


def cells(html: str, flavor: str) -> dict[str, str]:
    """The figures of one flavor's row of the capacity table."""
    import re

    row = re.search(rf'<tr data-flavor="{re.escape(flavor)}"[^>]*>(.*?)</tr>', html, re.S).group(1)
    return {name: re.sub(r"<[^>]+>", "", value).strip()
            for name, value in re.findall(r'<td class="([-\w]+)">(.*?)</td>', row, re.S)}


def test_it_shows_capacity_quotas_use_and_queue_per_flavor(staff_client, quota_team, other_team, fake_backend):
    from quotas.demo import seed_team_quotas

    seed_team_quotas(other_team, {"a100-80gb": 12, "h100-80gb": 8})
    admit(quota_team, ResourceRequest("a100-80gb", 6, 6), "run:1")
    admit(quota_team, ResourceRequest("a100-80gb", 4, 4), "run:2")  # queued
    admit(other_team, ResourceRequest("a100-80gb", 2, 2), "run:3")
    html = staff_client.get(CAPACITY_URL).content.decode()
    assert cells(html, "a100-80gb") == {"allocatable": "8", "provisioning": "0", "may-add": "0", "quota-sum": "20",
                                        "overcommit": "2.5\u00d7 over-committed", "in-use": "8", "pending": "0",
                                        "queued": "4"}
    assert '<tr data-flavor="a100-80gb" class="overcommitted">' in html
    # H100 shares nvidia.com/gpu with the A100 and L4: the product label keeps them apart.
    assert cells(html, "h100-80gb")["allocatable"] == "16"
    assert cells(html, "h100-80gb")["overcommit"] == "0.5\u00d7"
    assert cells(html, "l4")["allocatable"] == "2"
    assert cells(html, "a100-1g.10gb") == {"allocatable": "32", "provisioning": "0", "may-add": "0", "quota-sum": "7",
                                           "overcommit": "0.22\u00d7",
                                           "in-use": "0", "pending": "0", "queued": "0"}
    assert '<tr data-flavor="a100-1g.10gb">' in html  # not over-committed: not highlighted


def test_it_still_shows_portal_figures_when_the_cluster_fails(staff_client, quota_team, fake_backend):
    fake_backend.capacity_error = Transient("connection refused")
    response = staff_client.get(CAPACITY_URL)
    html = response.content.decode()
    assert response.status_code == 200
    assert "connection refused" in html
    assert cells(html, "a100-80gb")["allocatable"] == "?"
    assert cells(html, "a100-80gb")["quota-sum"] == "8"


def test_it_shows_in_use_and_limit_on_the_team_page(staff_client, quota_team):
    admit(quota_team, ResourceRequest("a100-80gb", 6, 6), "run:1")
    html = staff_client.get(f"/admin/portal/team/{quota_team.pk}/change/").content.decode()
    assert "6 / 8" in html and "0 / 2" in html


def test_it_reads_the_quota_list_in_constant_queries(staff_client, quota_team, other_team,
                                                     django_assert_max_num_queries):
    from quotas.demo import seed_team_quotas

    seed_team_quotas(other_team, {"a100-80gb": 12, "h100-80gb": 8, "l4": 1})
    with django_assert_max_num_queries(12):
        response = staff_client.get("/admin/quotas/teamquota/")
    assert response.status_code == 200
    assert "0 / 12" in response.content.decode()


def team_form(team, quotas: list[TeamQuota], new: list[tuple[GpuFlavor, int]] = (), budget: dict | None = None,
              delete: set[int] = frozenset()) -> dict:
    """POST data of the team change page with its three inlines."""
    data = {"slug": team.slug, "name": team.name, "namespace": team.namespace,
            "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0",
            "memberships-MIN_NUM_FORMS": "0", "memberships-MAX_NUM_FORMS": "1000"}
    rows = [(q.pk, q.flavor_id, q.limit) for q in quotas] + [(None, f.pk, limit) for f, limit in new]
    data.update({"quotas-TOTAL_FORMS": str(len(rows)), "quotas-INITIAL_FORMS": str(len(quotas)),
                 "quotas-MIN_NUM_FORMS": "0", "quotas-MAX_NUM_FORMS": "1000"})
    for i, (pk, flavor_id, limit) in enumerate(rows):
        data.update({f"quotas-{i}-id": pk or "", f"quotas-{i}-team": team.pk, f"quotas-{i}-flavor": flavor_id,
                     f"quotas-{i}-limit": limit})
        if pk in delete:
            data[f"quotas-{i}-DELETE"] = "on"
    existing = TeamBudget.objects.filter(team=team).first()
    data.update({"budget-TOTAL_FORMS": "1" if budget or existing else "0",
                 "budget-INITIAL_FORMS": "1" if existing else "0",
                 "budget-MIN_NUM_FORMS": "0", "budget-MAX_NUM_FORMS": "1"})
    if budget or existing:
        values = budget or {"monthly_limit": existing.monthly_limit, "currency": existing.currency,
                            "alert_threshold_percent": existing.alert_threshold_percent, "policy": existing.policy}
        data.update({"budget-0-id": existing.pk if existing else "", "budget-0-team": team.pk,
                     **{f"budget-0-{k}": v for k, v in values.items()}})
    return data


def test_it_audits_quota_changes_made_on_the_team_page(staff_client, staff, quota_team, flavors, no_broker,
                                                       django_capture_on_commit_callbacks):
    quotas = list(quota_team.quotas.order_by("pk"))
    a100 = next(q for q in quotas if q.flavor.name == "a100-80gb")
    l4 = next(q for q in quotas if q.flavor.name == "l4")
    a100.limit = 16
    with django_capture_on_commit_callbacks(execute=True):
        response = staff_client.post(f"/admin/portal/team/{quota_team.pk}/change/",
                                     team_form(quota_team, quotas, new=[(flavors["h100-80gb"], 4)],
                                               budget={"monthly_limit": "500.00", "currency": "USD",
                                                       "alert_threshold_percent": 90, "policy": "stop"},
                                               delete={l4.pk}))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert dict(quota_team.quotas.values_list("flavor__name", "limit")) == {"a100-80gb": 16, "a100-1g.10gb": 7,
                                                                            "h100-80gb": 4}
    events = AuditEvent.objects.filter(action=AuditEvent.Action.QUOTA_CHANGED)
    assert sorted((e.details["flavor"], e.details["old"], e.details["new"]) for e in events) == [
        ("a100-80gb", 8, 16), ("h100-80gb", None, 4), ("l4", 2, None)]
    assert {e.actor for e in events} == {staff}
    budget = AuditEvent.objects.get(action=AuditEvent.Action.BUDGET_CHANGED)
    assert budget.details["new"] == {"monthly_limit": "500.0000", "currency": "USD", "alert_threshold_percent": 90,
                                     "policy": "stop"}
    # The change is this month's budget in the history, which staff read and never edit.
    assert list(BudgetMonth.objects.filter(team=quota_team).values_list("month", "monthly_limit")) == [
        (month_start().date(), Decimal("500"))]
    history = staff_client.get("/admin/billing/budgetmonth/").content.decode()
    assert f"{month_start():%Y-%m}" in history and "500.00 USD" in history and "Add budget month" not in history
    assert quota_team.pk in no_broker  # mirrored into the ResourceQuota after commit


def test_it_writes_no_audit_event_when_nothing_changed(staff_client, quota_team, no_broker):
    quotas = list(quota_team.quotas.order_by("pk"))
    response = staff_client.post(f"/admin/portal/team/{quota_team.pk}/change/", team_form(quota_team, quotas))
    assert response.status_code == 302
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.QUOTA_CHANGED).exists()


def test_it_audits_price_changes(staff_client, flavors):
    flavor = flavors["l4"]
    data = {"name": flavor.name, "description": flavor.description, "active": "on",
            "resource_name": flavor.resource_name, "gpu_model": flavor.gpu_model, "mig_profile": "",
            "gpu_memory_gb": flavor.gpu_memory_gb, "gpu_fraction": "1", "max_units_per_node": 1,
            "node_labels": '{"nvidia.com/gpu.product": "NVIDIA-L4"}', "tolerations": "[]",
            "sharing": "none", "replicas": "1", "training": "on",
            "price_per_hour": "0.95", "spot_price_per_hour": "0.32",
            # The form's inline of prices on clusters, left empty (tests/fleet/test_prices.py fills it).
            "cluster_prices-TOTAL_FORMS": "0", "cluster_prices-INITIAL_FORMS": "0"}
    response = staff_client.post(f"/admin/fleet/gpuflavor/{flavor.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    event = AuditEvent.objects.get(action=AuditEvent.Action.PRICE_CHANGED)
    assert event.details["old"] == {"price_per_hour": "0.8000", "spot_price_per_hour": "0.3200"}
    assert event.details["new"] == {"price_per_hour": "0.9500", "spot_price_per_hour": "0.3200"}
    # Editing something else (not a price) writes no price event.
    data["description"] = "cheap inference GPU"
    staff_client.post(f"/admin/fleet/gpuflavor/{flavor.pk}/change/", data)
    assert AuditEvent.objects.filter(action=AuditEvent.Action.PRICE_CHANGED).count() == 1


def test_it_audits_quota_edits_on_the_quota_list(staff_client, quota_team, no_broker,
                                                  django_capture_on_commit_callbacks):
    quota = quota_team.quotas.get(flavor__name="l4")
    with django_capture_on_commit_callbacks(execute=True):
        response = staff_client.post(f"/admin/quotas/teamquota/{quota.pk}/change/",
                                     {"team": quota_team.pk, "flavor": quota.flavor_id, "limit": 3})
    assert response.status_code == 302
    event = AuditEvent.objects.get(action=AuditEvent.Action.QUOTA_CHANGED)
    assert (event.details["old"], event.details["new"]) == (2, 3)
    assert no_broker == [quota_team.pk]


def test_delete_selected_budgets_is_all_or_nothing(staff_client, budget_team, other_team, monkeypatch):
    """Review: "Delete selected" deleted budgets one by one outside a transaction, so a failure on the second
    left the first deleted and audited (core.admin.DeletesOneByOne)."""
    from quotas import services

    seed_team_quotas(other_team, {}, monthly_budget=Decimal("50.00"))
    real, calls = services.set_team_budget, []

    def second_fails(*args, **kwargs):
        calls.append(args[1].slug)
        if len(calls) == 2:
            raise RuntimeError("the database went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(services, "set_team_budget", second_fails)
    chosen = list(TeamBudget.objects.values_list("pk", flat=True))
    with pytest.raises(RuntimeError):
        staff_client.post("/admin/billing/teambudget/", {"action": "delete_selected", "_selected_action": chosen,
                                                          "post": "yes"})
    assert len(calls) == 2
    assert TeamBudget.objects.filter(pk__in=chosen).count() == 2
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.BUDGET_CHANGED).exists()


def test_it_keeps_holds_read_only(staff_client, quota_team):
    admit(quota_team, ResourceRequest("l4", 1, 1), "run:1")
    hold = quota_team.quota_holds.get()
    assert staff_client.get("/admin/billing/quotahold/add/").status_code == 403
    response = staff_client.post(f"/admin/billing/quotahold/{hold.pk}/change/", {"units": 0})
    assert response.status_code == 403
    assert staff_client.post(f"/admin/billing/quotahold/{hold.pk}/delete/", {"post": "yes"}).status_code == 403


def test_it_filters_holds_by_state(staff_client, quota_team):
    from quotas.admission import release

    admit(quota_team, ResourceRequest("l4", 1, 1), "run:live")
    admit(quota_team, ResourceRequest("l4", 1, 1), "run:done")
    release("run:done")
    html = staff_client.get("/admin/billing/quotahold/?state=active").content.decode()
    assert "run:live" in html and "run:done" not in html
    html = staff_client.get("/admin/billing/quotahold/?q=done").content.decode()
    assert "run:done" in html and "run:live" not in html


def test_it_makes_a_plain_staff_user_without_permissions_see_nothing(quota_team):
    # Staff without the superuser flag need explicit model permissions (Django's default).
    user = make_user("clerk")
    user.is_staff = True
    user.save()
    client = Client()
    client.force_login(user)
    assert client.get("/admin/quotas/teamquota/").status_code == 403


def test_it_audits_moving_a_quota_row_to_another_flavor(staff_client, quota_team, flavors, no_broker):
    quotas = list(quota_team.quotas.order_by("pk"))
    l4 = next(q for q in quotas if q.flavor.name == "l4")
    data = team_form(quota_team, quotas)
    index = quotas.index(l4)
    data[f"quotas-{index}-flavor"] = flavors["h100-80gb"].pk
    response = staff_client.post(f"/admin/portal/team/{quota_team.pk}/change/", data)
    assert response.status_code == 302
    events = AuditEvent.objects.filter(action=AuditEvent.Action.QUOTA_CHANGED)
    assert sorted((e.details["flavor"], e.details["old"], e.details["new"]) for e in events) == [
        ("h100-80gb", None, 2), ("l4", 2, None)]


def test_it_shows_every_node_and_the_work_waiting_for_cluster_capacity(staff_client, quota_team, fake_backend):
    import re

    from jobs.models import TrainingRun

    user = make_user("wanda")
    reason = "waiting for capacity: needs 4\u00d7 a100-80gb on one node; the largest free block is 2 (node gpu-a100-0)"
    TrainingRun.objects.create(team=quota_team, created_by=user, name="big-one", flavor=GpuFlavor.objects.get(
        name="a100-80gb"), state="pending", reason=reason, reason_code="waiting_for_capacity", image="r.example.com/t:1",
        command=["python"],
        gpus_per_worker=4, workers=2)
    TrainingRun.objects.create(team=quota_team, created_by=user, name="fine", flavor=GpuFlavor.objects.get(
        name="a100-80gb"), state="running", image="r.example.com/t:1", command=["python"])
    html = staff_client.get(CAPACITY_URL).content.decode()
    assert cells(html, "a100-80gb")["pending"] == "8"
    waiting = re.search(r'<table id="waiting">(.*?)</table>', html, re.S).group(1)
    assert "big-one" in waiting and "fine" not in waiting and "the largest free block is 2" in waiting
    node = re.search(r'<tr data-node="gpu-a100-0"[^>]*>(.*?)</tr>', html, re.S).group(1)
    assert re.findall(r"<td[^>]*>([^<]*)</td>", node) == ["default", "nvidia.com/gpu", "a100-80gb", "8", "3", "5"]
    assert '<tr data-node="gpu-l4-0" data-cluster="default">' in html


def test_the_capacity_page_and_the_waiting_reason_agree_on_a_node_without_labels(staff_client, quota_team,
                                                                                 fake_backend):
    """One rule (cluster.capacity.offers) for both: a node reporting no labels offers no flavor.

    Before, the Capacity page counted such a node for every flavor of its resource while the
    waiting reason (rightly: the pods' nodeSelector cannot match it) said no node offers them.
    """
    from cluster.backends.base import NodeCapacity
    from cluster.capacity import capacity_reason
    from fleet.models import GpuFlavor

    fake_backend.nodes = [NodeCapacity("bare-0", "nvidia.com/gpu", 8, 0)]
    html = staff_client.get(CAPACITY_URL).content.decode()
    assert cells(html, "a100-80gb")["allocatable"] == "0"
    reason = capacity_reason(GpuFlavor.objects.get(name="a100-80gb").to_spec(), 1, fake_backend.nodes)
    assert reason.endswith("no node offers a100-80gb")
