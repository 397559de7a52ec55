"""``/metrics``: scraped and parsed with Prometheus' text parser; who may read it; several processes summed.

The figures of events (admissions, reconcile cycles) are summed from every process's files in
the multiprocess directory, which outlives one test: those are compared before and after what
a test does. The database figures (units, queues, budgets, preemptions) are exact.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import timedelta
from decimal import Decimal

import pytest
from django.conf import settings as django_settings
from django.db import transaction
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from billing import services as billing_services
from billing.ledger import month_start
from billing.models import PreemptionEvent, QuotaHold, UsageRecord
from quotas.admission import admit
from quotas.decide import ResourceRequest
from quotas.demo import seed_team_quotas
from tests.factories import cohort_pair, make_team
from workloads.tasks import reconcile_cluster

pytestmark = pytest.mark.django_db

Samples = dict[tuple[str, frozenset], float]


def parse(text: str) -> Samples:
    """``{(sample name, labels): value}`` of a scrape, through Prometheus' own text parser."""
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def scrape(client, **extra) -> Samples:
    response = client.get("/metrics", **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return parse(response.content.decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def a100(units: int) -> ResourceRequest:
    return ResourceRequest("a100-80gb", units, 1)


def test_it_counts_each_admission_by_its_decision_and_times_it(client, flavors, staff,
                                                              django_capture_on_commit_callbacks):
    nlp, vision = cohort_pair(staff, units=4)
    before = scrape(client)
    with django_capture_on_commit_callbacks(execute=True):  # counted as each decision's transaction commits
        assert admit(nlp, a100(2), "run:n1").label == "admitted"
        assert admit(vision, a100(6), "run:v1").label == "borrowed"  # 2 units lent by nlp-platform
        assert admit(vision, a100(1), "run:v2").label == "queued"
        assert admit(vision, a100(9), "run:v3").label == "rejected"
        admit(vision, a100(6), "run:v1")  # a replay of a decided ref is not a decision
    after = scrape(client)
    for decision in ("admitted", "borrowed", "queued", "rejected"):
        name = "slipway_admissions_total"
        assert value(after, name, decision=decision) - value(before, name, decision=decision) == 1, decision
    count = "slipway_admission_latency_seconds_count"
    assert value(after, count) - value(before, count) == 4
    assert value(after, "slipway_admission_latency_seconds_bucket", le="+Inf") == value(after, count)


@pytest.mark.django_db(transaction=True)
def test_a_decision_rolled_back_with_its_request_is_not_counted(client, flavors, staff):
    """The admission's transaction really commits or rolls back here (no test transaction around it)."""
    nlp, _vision = cohort_pair(staff, units=4)
    name = "slipway_admissions_total"
    before = value(scrape(client), name, decision="admitted")
    with pytest.raises(RuntimeError), transaction.atomic():
        assert admit(nlp, a100(2), "run:gone").label == "admitted"
        raise RuntimeError("the submission failed after its admission")
    assert not QuotaHold.objects.filter(ref="run:gone").exists()
    assert value(scrape(client), name, decision="admitted") == before
    assert admit(nlp, a100(2), "run:kept").label == "admitted"  # autocommit: counted at once
    assert value(scrape(client), name, decision="admitted") == before + 1


def test_it_reports_units_and_queues_per_team_and_flavor_from_the_database(client, flavors, staff):
    nlp, vision = cohort_pair(staff, units=4)
    admit(nlp, a100(2), "run:n1")
    admit(vision, a100(6), "run:v1")
    admit(vision, a100(1), "run:v2")
    samples = scrape(client)
    vision_a100 = {"team": "vision", "flavor": "a100-80gb"}
    assert value(samples, "slipway_units_in_use", **vision_a100) == 6
    assert value(samples, "slipway_units_borrowed", **vision_a100) == 2
    assert value(samples, "slipway_units_nominal", **vision_a100) == 4
    assert value(samples, "slipway_queue_depth", **vision_a100) == 1
    assert 0 <= value(samples, "slipway_queue_oldest_age_seconds", **vision_a100) < 60
    nlp_a100 = {"team": "nlp-platform", "flavor": "a100-80gb"}
    assert (value(samples, "slipway_units_in_use", **nlp_a100), value(samples, "slipway_units_borrowed", **nlp_a100),
            value(samples, "slipway_queue_depth", **nlp_a100)) == (2, 0, 0)
    # Nothing queued is a value, not a missing series; no oldest age without a queue.
    assert ("slipway_queue_depth", frozenset(nlp_a100.items())) in samples
    assert ("slipway_queue_oldest_age_seconds", frozenset(nlp_a100.items())) not in samples


def test_it_reports_the_months_spend_against_each_budget(client, flavors, team, member):
    seed_team_quotas(team, {"a100-80gb": 8}, Decimal("1000"))
    seed_team_quotas(make_team("no-budget"), {"a100-80gb": 1})
    now = timezone.now()
    start = max(month_start(now), now - timedelta(minutes=30))
    UsageRecord.objects.create(team=team, ref="run:1", flavor=flavors["a100-80gb"], user=member, hour=start,
                               start=start, end=now, units=1, gpu_hours=Decimal("0.5"), cost=Decimal("250"))
    samples = scrape(client)
    summary = billing_services.budget_summary(team)
    assert value(samples, "slipway_budget_spent", team="ml-research", currency="USD") == float(summary["spent_month"]) == 250
    assert value(samples, "slipway_budget_limit", team="ml-research", currency="USD") == 1000
    assert value(samples, "slipway_budget_burn_ratio", team="ml-research") == 0.25
    assert not [key for key in samples if dict(key[1]).get("team") == "no-budget" and key[0].startswith("slipway_budget")]


def test_it_counts_preemptions_by_cause(client, flavors):
    team = make_team("vision")
    for ref, cause in (("run:1", PreemptionEvent.Cause.SPOT), ("run:2", PreemptionEvent.Cause.SPOT),
                       ("run:3", PreemptionEvent.Cause.RECLAIM)):
        PreemptionEvent.objects.create(ref=ref, cause=cause, team=team, flavor=flavors["a100-80gb"], units=1,
                                       reason="preempted")
    samples = scrape(client)
    assert {cause: value(samples, "slipway_preemptions_total", cause=cause)
            for cause in PreemptionEvent.Cause.values} == {"spot": 2, "reclaim": 1, "within_team": 0, "reservation": 0,
                                                            "disruption": 0}


@pytest.mark.parametrize("teams", [1, 4])
def test_a_scrape_reads_the_database_in_a_fixed_number_of_statements(client, flavors, staff, teams,
                                                                   django_assert_num_queries):
    for index in range(teams):
        team = make_team(f"team-{index}")
        seed_team_quotas(team, {"a100-80gb": 4, "l4": 1}, Decimal("1000"))
        admit(team, a100(2), f"run:{index}")
        admit(team, a100(3), f"run:q{index}")
    # Team and flavor names, quotas, units held, queues, budgets, the month's spend (closed
    # ledger rows, open segments), preemptions.
    with django_assert_num_queries(9):
        assert client.get("/metrics").status_code == 200


# -- who may read it ---------------------------------------------------------------------------


def test_it_answers_only_local_clients_by_default(client):
    assert client.get("/metrics").status_code == 200  # the test client comes from 127.0.0.1
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200
    response = client.get("/metrics", REMOTE_ADDR="10.2.3.4")
    assert response.status_code == 403 and b"slipway_" not in response.content
    # A forwarded address is whatever the client wrote: never believed.
    assert client.get("/metrics", REMOTE_ADDR="10.2.3.4", HTTP_X_FORWARDED_FOR="127.0.0.1").status_code == 403


def test_a_bearer_token_lets_a_scraper_in_from_anywhere(client, settings):
    settings.SLIPWAY_METRICS_TOKEN = "s3cret-scrape-token"
    settings.SLIPWAY_METRICS_ALLOW = ()
    elsewhere = {"REMOTE_ADDR": "10.2.3.4"}
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-scrape-token", **elsewhere).status_code == 200
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong", **elsewhere).status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Basic s3cret-scrape-token", **elsewhere).status_code == 403
    assert client.get("/metrics", **elsewhere).status_code == 403
    assert client.get("/metrics").status_code == 403  # not even from 127.0.0.1 once the list is empty


def test_an_allowed_network_needs_no_token(client, settings):
    settings.SLIPWAY_METRICS_ALLOW = ("10.0.0.0/8",)
    assert client.get("/metrics", REMOTE_ADDR="10.2.3.4").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.168.1.2").status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="::ffff:10.2.3.4").status_code == 200  # IPv4 on a dual-stack socket
    assert client.get("/metrics", REMOTE_ADDR="not-an-address").status_code == 403


def test_it_is_never_cached_and_only_read(client):
    response = client.get("/metrics")
    assert "no-store" in response["Cache-Control"] and "max-age=0" in response["Cache-Control"]
    assert client.post("/metrics").status_code == 405


def test_a_scrape_by_pod_ip_over_plain_http_is_answered(client, settings):
    # In production: DEBUG off, only the public host allowed, HTTPS enforced. Prometheus scrapes
    # the pod IP over plain HTTP, as the kubelet probes it.
    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["slipway.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    response = client.get("/metrics", HTTP_HOST="10.4.0.17:8000")
    assert response.status_code == 200 and b"slipway_units_in_use" in response.content


def test_it_is_not_part_of_the_apis_schema(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    # The scrape endpoint; a run's training metrics (/api/v1/runs/{id}/metrics/) are the API's.
    assert schema["paths"] and not [path for path in schema["paths"] if path.strip("/") == "metrics"]


# -- several processes, one scrape -------------------------------------------------------------

CHILD = textwrap.dedent("""
    import django
    django.setup()
    from core import metrics
    metrics.count_admission("admitted", 0.02)
    metrics.record_reconcile(metrics.cluster_label(), 1.5, observed=True)
    metrics.record_reconcile(metrics.cluster_label(), 0.5, observed={observed})
""")


def test_one_scrape_sums_the_figures_of_every_process(client, settings, tmp_path):
    """Two real processes (as two gunicorn or Celery pool processes) write into one directory;
    the web's scrape sums their counters and histograms and takes the latest cluster state."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "tests.settings"}
    for observed in (True, False):  # the second process's last cycle could not reach the cluster
        subprocess.run([sys.executable, "-c", CHILD.format(observed=observed)], env=env, check=True,
                       cwd=django_settings.BASE_DIR, timeout=60)
    assert len(list(tmp_path.glob("counter_*.db"))) == 2  # one file per process
    settings.PROMETHEUS_MULTIPROC_DIR = str(tmp_path)
    samples = scrape(client)
    assert value(samples, "slipway_admissions_total", decision="admitted") == 2
    assert value(samples, "slipway_admission_latency_seconds_count") == 2
    assert value(samples, "slipway_reconcile_duration_seconds_count", cluster="default") == 4
    assert value(samples, "slipway_reconcile_duration_seconds_sum", cluster="default") == 4.0
    assert value(samples, "slipway_cluster_up", cluster="default") == 0  # the most recent write wins
    assert value(samples, "slipway_reconcile_last_success_timestamp_seconds", cluster="default") > 0


def test_each_of_the_demos_clusters_is_labelled_by_its_name(client, settings, published):
    """README, "Monitoring Slipway": the demo's figures carry cluster="east" and cluster="west"."""
    settings.SLIPWAY_SANDBOX_INVENTORY = str(django_settings.BASE_DIR / "sandbox" / "inventory.yaml")
    settings.SLIPWAY_CLUSTER_BACKEND = "sandbox"
    before = scrape(client)
    for name in ("east", "west"):
        assert reconcile_cluster(name).startswith("observed="), name
    after = scrape(client)
    for name in ("east", "west"):
        cycles = "slipway_reconcile_duration_seconds_count"
        assert value(after, cycles, cluster=name) == value(before, cycles, cluster=name) + 1, name
        assert value(after, "slipway_cluster_up", cluster=name) == 1, name
