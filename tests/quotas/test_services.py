"""Summaries, the ledger, demo data, flavor specs and the quota mirror task."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import services as billing_services
from billing.ledger import cost_by_ref, cost_per_hour, record_usage, spent_month
from billing.models import TeamBudget, flavor_price
from cluster.errors import Transient
from fleet.models import GpuFlavor
from quotas import services
from quotas.admission import admit
from quotas.decide import ResourceRequest
from quotas.demo import seed_flavors, seed_team_quotas
from quotas.models import TeamQuota
from quotas.tasks import sync_team_quota, team_spec
from teams.models import AuditEvent


def test_it_prices_mig_slices_as_sevenths_of_the_a100(flavors):
    a100 = flavors["a100-80gb"].price_per_hour
    assert flavors["a100-1g.10gb"].price_per_hour == Decimal("0.5857")  # 4.10 / 7
    assert flavors["a100-2g.20gb"].price_per_hour == (a100 * 2 / 7).quantize(Decimal("0.0001"))
    assert flavors["a100-3g.40gb"].price_per_hour == (a100 * 3 / 7).quantize(Decimal("0.0001"))
    assert flavors["a100-1g.10gb"].gpu_fraction == Decimal("0.142857")
    assert flavors["a100-3g.40gb"].resource_name == "nvidia.com/mig-3g.40gb"
    assert (flavors["a100-80gb"].max_units_per_node, flavors["l4"].max_units_per_node) == (8, 1)


def test_it_seeds_idempotently(team, flavors):
    seed_flavors()
    seed_team_quotas(team, {"a100-80gb": 4}, Decimal("500"))
    seed_team_quotas(team, {"a100-80gb": 6}, Decimal("600"))
    assert GpuFlavor.objects.count() == 8  # the 3 whole GPUs, 3 MIG slices and 2 shared GPUs of quotas.demo
    assert list(team.quotas.values_list("limit", flat=True)) == [6]
    assert TeamBudget.objects.get(team=team).monthly_limit == Decimal("600")
    with pytest.raises(ValueError, match="unknown flavors: tpu"):
        seed_team_quotas(team, {"tpu": 1})


def test_it_turns_a_flavor_into_a_cluster_spec(flavors):
    spec = flavors["a100-1g.10gb"].to_spec()
    assert spec.resource_name == "nvidia.com/mig-1g.10gb"
    assert spec.mig_profile == "1g.10gb"
    assert spec.node_selector == (("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"),)
    assert spec.tolerations == (("nvidia.com/gpu", "Exists", "", "NoSchedule"),)
    assert spec.gpu_fraction == pytest.approx(1 / 7, abs=1e-6)
    assert flavors["l4"].to_spec().mig_profile is None


def test_it_charges_units_price_and_time(quota_team, member, flavors):
    start = datetime(2026, 11, 3, 10, 0, tzinfo=UTC)
    cost = record_usage(quota_team, "ep:1", flavors["a100-1g.10gb"], member, start, start + timedelta(hours=2), 3,
                        False)
    assert cost == Decimal("3.5142")  # 3 x 0.5857 x 2 h
    spot = record_usage(quota_team, "run:2", "l4", None, start, start + timedelta(minutes=90), 1, True)
    assert spot == Decimal("0.4800")  # 0.32 x 1.5 h
    records = quota_team.usage_records.filter(ref="ep:1").order_by("hour")
    assert [r.hour for r in records] == [start, start + timedelta(hours=1)]  # one row per hour it touched
    assert sum(r.gpu_hours for r in records) == Decimal("0.857142")  # 3 slices x 1/7 GPU x 2 h
    assert cost_by_ref(["ep:1", "run:2", "run:none"]) == {"ep:1": cost, "run:2": spot, "run:none": 0}
    assert spent_month(quota_team, now=start + timedelta(days=5)) == cost + spot
    assert spent_month(quota_team, now=start + timedelta(days=40)) == 0  # next month


def test_it_ignores_empty_intervals(quota_team, flavors):
    now = timezone.now()
    assert record_usage(quota_team, "run:1", "l4", None, now, now, 1, False) == 0
    assert not quota_team.usage_records.exists()


def test_it_estimates_cost_per_hour(flavors):
    assert cost_per_hour(flavor_price(flavors["a100-80gb"], False), 4) == Decimal("16.4000")
    assert cost_per_hour(flavor_price(flavors["h100-80gb"], True), 2) == Decimal("5.5000")


def test_it_summarises_quota_use_per_flavor(quota_team):
    admit(quota_team, ResourceRequest("a100-80gb", 6, 6), "run:1")
    admit(quota_team, ResourceRequest("a100-80gb", 4, 4), "run:2")
    sharing = {"has_quota": True, "borrowing_limit": None, "lending_limit": None}
    assert services.usage_summary(quota_team) == [
        {"flavor": "a100-1g.10gb", "limit": 7, "in_use": 0, "queued": 0, "free": 7, "borrowed": 0, "borrowable": 0,
         **sharing},
        {"flavor": "a100-80gb", "limit": 8, "in_use": 6, "queued": 4, "free": 2, "borrowed": 0, "borrowable": 0,
         **sharing},
        {"flavor": "l4", "limit": 2, "in_use": 0, "queued": 0, "free": 2, "borrowed": 0, "borrowable": 0, **sharing},
    ]


def test_it_summarises_the_budget(budget_team, quota_team, flavors, mid_month):
    now = timezone.now()
    summary = billing_services.budget_summary(budget_team)
    assert (summary["monthly_limit"], summary["spent_month"], summary["alert"]) == (Decimal("100.0000"), 0, False)
    record_usage(budget_team, "run:1", "a100-80gb", None, now - timedelta(hours=20), now, 1, False)  # 82.00
    assert billing_services.budget_summary(budget_team)["alert"] is True  # past the 80 % threshold


def test_it_reports_no_budget_as_unlimited(quota_team):
    assert billing_services.budget_summary(quota_team)["monthly_limit"] is None


def test_it_sums_quotas_per_kubernetes_resource(team, flavors):
    seed_team_quotas(team, {"a100-80gb": 8, "h100-80gb": 4, "a100-1g.10gb": 7})
    spec = team_spec(team)
    assert spec.namespace == "team-ml-research"
    assert spec.quotas == (("nvidia.com/gpu", 12), ("nvidia.com/mig-1g.10gb", 7))


def test_it_mirrors_the_quota_and_admits_waiting_work(quota_team, fake_backend):
    admit(quota_team, ResourceRequest("a100-80gb", 8, 8), "run:1")
    admit(quota_team, ResourceRequest("a100-80gb", 4, 4), "run:2")
    quota_team.quotas.filter(flavor__name="a100-80gb").update(limit=12)
    assert sync_team_quota(quota_team.pk) == ["run:2"]
    [objects] = fake_backend.applied
    quota = next(o for o in objects if o["kind"] == "ResourceQuota")
    assert quota["metadata"]["namespace"] == "team-ml-research"
    assert "requests.nvidia.com/gpu" in quota["spec"]["hard"]


def test_it_retries_the_mirror_on_transient_cluster_errors():
    assert Transient in sync_team_quota.autoretry_for
    assert sync_team_quota.retry_backoff


def test_it_does_nothing_for_a_deleted_team(db, fake_backend):
    assert sync_team_quota(999_999) == []
    assert fake_backend.applied == []


def test_it_audits_and_mirrors_quota_changes_after_commit(quota_team, staff, flavors, monkeypatch,
                                                          django_capture_on_commit_callbacks):
    enqueued = []
    monkeypatch.setattr(sync_team_quota, "delay", lambda team_id: enqueued.append(team_id))
    with django_capture_on_commit_callbacks(execute=True):
        services.set_team_quota(staff, quota_team, flavors["a100-80gb"], 16)
    assert enqueued == [quota_team.pk]
    event = AuditEvent.objects.get(action=AuditEvent.Action.QUOTA_CHANGED)
    assert (event.actor, event.team, event.details) == (staff, quota_team,
                                                        {"flavor": "a100-80gb", "old": 8, "new": 16})
    with django_capture_on_commit_callbacks(execute=True):
        services.set_team_quota(staff, quota_team, flavors["a100-80gb"], 16)  # no change: no event
        services.set_team_quota(staff, quota_team, flavors["l4"], None)
    assert not TeamQuota.objects.filter(team=quota_team, flavor=flavors["l4"]).exists()
    assert AuditEvent.objects.filter(action=AuditEvent.Action.QUOTA_CHANGED).count() == 2


def test_it_audits_budget_and_price_changes(quota_team, staff, flavors, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks():
        services.set_team_budget(staff, quota_team, Decimal("250"))
    billing_services.set_flavor_prices(staff, flavors["l4"], Decimal("0.90"), Decimal("0.35"))
    budget = AuditEvent.objects.get(action=AuditEvent.Action.BUDGET_CHANGED)
    assert budget.details["old"] is None and budget.details["new"]["monthly_limit"] == "250.0000"
    price = AuditEvent.objects.get(action=AuditEvent.Action.PRICE_CHANGED)
    assert price.details["old"] == {"price_per_hour": "0.8000", "spot_price_per_hour": "0.3200"}
    assert price.details["new"] == {"price_per_hour": "0.9000", "spot_price_per_hour": "0.3500"}


def test_a_flavor_is_usable_by_one_rule_for_pickers_the_api_submissions_and_admission(flavors):
    from fleet.models import GpuFlavor
    from quotas.facts import flavor_quota

    retired = flavors["l4"]
    retired.active = False
    retired.save()
    assert not retired.usable
    assert "l4" not in set(GpuFlavor.objects.usable().values_list("name", flat=True))
    assert retired.refusal() == "Flavor l4 is retired and cannot be requested any more."
    assert flavors["a100-80gb"].usable and flavors["a100-80gb"].refusal() == ""
    assert flavor_quota(retired, None).active is False  # decide() refuses it: InactiveFlavor
