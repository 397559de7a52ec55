"""Drains (and degraded or lost clusters) make new work wait, never fail (issue 34, item 1).

``east`` offers A100s and L4s, ``west`` A100s only (scripted clusters, tests/fakes.py): an L4 run
is the issue's "flavor only east offers". With east draining it waits in the queue with the
reason — the API's ``?dry_run=1``, the form's preview and the submission say the same — and
starts on east once east is ready again. A run admitted a moment before the drain goes back to
waiting, at its old place, instead of being retried until it fails.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from billing.models import QuotaHold
from fleet.constants import Health
from fleet.models import Cluster
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.services import submit_run
from quotas.models import QueuedRequest
from teams.models import Role
from tests.backends import use_backends
from tests.factories import add_member, cohort_pair, make_user
from tests.fakes import FakeBackend
from tests.fleet.conftest import node
from tests.jobs.conftest import run_payload
from workloads.cycle import preemption
from workloads.cycle import reconcile as rec
from workloads.models import ReasonCode
from workloads.tasks import apply_workload

pytestmark = pytest.mark.django_db

DRAINED = "waiting: l4 is only offered by east, which is draining"


@pytest.fixture
def fleet(settings, flavors, published):
    """``east`` (2 free A100s, 2 free L4s) and ``west`` (8 free A100s), their nodes read once."""
    backends = use_backends(settings, {
        "east": FakeBackend(nodes=[node("east-a100-0", flavors["a100-80gb"], free=2),
                                   node("east-l4-0", flavors["l4"], free=2, total=2)]),
        "west": FakeBackend(nodes=[node("west-a100-0", flavors["a100-80gb"], free=8)]),
    })
    Cluster.objects.create(name="east", region="us-east")
    Cluster.objects.create(name="west", region="us-west")
    rec.reconcile()  # each cluster's cycle records what its nodes offer
    assert all(c.nodes for c in Cluster.objects.all())
    return backends


def l4_run(name: str = "l4-run") -> dict:
    return run_payload(name=name, flavor="l4", gpus_per_worker=1)


def set_state(api, state: str) -> None:
    response = api.patch("/api/v1/clusters/east/", {"state": state}, format="json")
    assert response.status_code == 200 and response.json()["state"] == state


def test_it_queues_a_run_only_a_draining_cluster_can_take_says_so_everywhere_and_starts_it_when_ready(
        fleet, quota, member, staff, client, api_client_for):
    api, ops = api_client_for(member), api_client_for(staff)
    set_state(ops, "draining")
    # 1. Before submitting: the API's dry run and the form's preview say what will happen.
    dry = api.post("/api/v1/runs/?dry_run=1", l4_run(), format="json").json()
    assert (dry["outcome"], dry["message"]) == ("queue", DRAINED)
    assert dry["estimated_start_at"] is None and dry["start"] == f"start time unknown: {DRAINED}"
    client.force_login(member)
    html = client.post("/runs/preview/", {"flavor": "l4", "gpus_per_worker": "1", "workers": "1"}).content.decode()
    assert f"<strong>Will queue:</strong> {DRAINED}" in html and "Starts now" not in html
    # 2. Submitted: it waits in the queue, holding nothing, with the same words.
    response = api.post("/api/v1/runs/", l4_run(), format="json")
    assert response.status_code == 201
    run = TrainingRun.objects.get(pk=response.json()["id"])
    assert (run.state, run.reason, run.reason_code) == (RunState.QUEUED, DRAINED, ReasonCode.QUEUED)
    assert api.get(f"/api/v1/runs/{run.pk}/").json()["reason"] == DRAINED
    assert not QuotaHold.objects.filter(ref=run.ref).exists()
    # 3. The reconciler does not admit it while east drains (and A100 work still goes to west meanwhile).
    report = rec.reconcile()
    run.refresh_from_db()
    assert run.ref not in report.admitted and (run.state, run.reason) == (RunState.QUEUED, DRAINED)
    a100 = api.post("/api/v1/runs/", run_payload(name="a100-run"), format="json").json()
    assert apply_workload("run", a100["id"]) == "applied"
    assert TrainingRun.objects.get(pk=a100["id"]).cluster.name == "west"
    # 4. East ready again: the next cycle admits it, and it is placed on east.
    set_state(ops, "ready")
    assert run.ref in rec.reconcile().admitted
    assert apply_workload("run", run.pk) == "applied"
    run.refresh_from_db()
    assert (run.state, run.cluster.name) == (RunState.PENDING, "east")
    assert any(k == "Job" and n == run.object_name for (_ns, k, n) in fleet["east"].objects)


def test_a_run_admitted_just_before_a_drain_goes_back_to_waiting_at_its_place_instead_of_failing(
        fleet, quota, member, staff, api_client_for):
    api, ops = api_client_for(member), api_client_for(staff)
    first = TrainingRun.objects.get(pk=api.post("/api/v1/runs/", l4_run("first"), format="json").json()["id"])
    assert first.state == RunState.ADMITTED and QuotaHold.objects.held().filter(ref=first.ref).exists()
    set_state(ops, "draining")  # before a worker applied it
    later = TrainingRun.objects.get(pk=api.post("/api/v1/runs/", l4_run("later"), format="json").json()["id"])
    assert later.state == RunState.QUEUED
    # The apply finds no cluster that takes it: back to the queue, not retried (no Transient), not failed.
    assert apply_workload("run", first.pk) == "queued"
    first.refresh_from_db()
    assert (first.state, first.reason, first.cluster_id) == (RunState.QUEUED, DRAINED, None)
    assert (first.admitted_at, first.apply_attempts, first.attempt) == (None, 0, 1)  # nothing ran: no attempt spent
    assert not QuotaHold.objects.held().filter(ref=first.ref).exists()
    # At its old place: ahead of the run submitted after it.
    assert [q.ref for q in QueuedRequest.objects.order_by(*QueuedRequest.QUEUE_ORDER)] == [first.ref, later.ref]
    assert apply_workload("run", first.pk) == "skipped"  # a replayed task finds it queued
    set_state(ops, "ready")
    assert rec.reconcile().admitted == [first.ref, later.ref]
    assert apply_workload("run", first.pk) == "applied"
    assert TrainingRun.objects.get(pk=first.pk).cluster.name == "east"


@pytest.mark.parametrize("health", [Health.DEGRADED, Health.LOST])
def test_a_degraded_cluster_is_a_lost_one_for_new_work(fleet, quota, member, api_client_for, health):
    api = api_client_for(member)
    Cluster.objects.filter(name="east").update(health=health)
    body = api.post("/api/v1/runs/", l4_run(), format="json").json()
    assert (body["state"], body["reason"]) == ("queued", f"waiting: l4 is only offered by east, which is {health}")
    # Work another cluster offers is admitted and goes there, never to east (cheaper or roomier or not).
    a100 = api.post("/api/v1/runs/", run_payload(name="a100-run", gpus_per_worker=1), format="json").json()
    assert a100["state"] == "admitted" and apply_workload("run", a100["id"]) == "applied"
    placed = TrainingRun.objects.get(pk=a100["id"])
    assert placed.cluster.name == "west" and "east" not in placed.placement_reason


def test_a_reclaim_stops_no_borrower_for_work_that_waits_for_a_cluster(fleet, staff):
    """Units taken back would not start work that no cluster takes: the borrower keeps running until one does."""
    nlp, vision = cohort_pair(staff, min_runtime_minutes=0, preemption_delay_seconds=0)
    alice, noor = make_user("alice"), make_user("noor")
    add_member(vision, alice, Role.MEMBER)
    add_member(nlp, noor, Role.MEMBER)
    spec = {k: v for k, v in run_payload(gpus_per_worker=4).items() if k != "team"}
    submit_run(alice, vision, {**spec, "name": "own"})
    borrowed = submit_run(alice, vision, {**spec, "name": "borrowed"})
    Cluster.objects.update(draining=True)  # every cluster that offers A100s
    claim = submit_run(noor, nlp, {**spec, "name": "mine"})
    assert claim.state == RunState.QUEUED
    assert preemption.reclaim(timezone.now()) == []
    Cluster.objects.update(draining=False)
    assert preemption.reclaim(timezone.now()) == [borrowed.ref]


def flavor_option(html: str, flavor: str) -> str:
    import re
    return re.search(rf'<option value="{re.escape(flavor)}"[^>]*>([^<]*)</option>', html).group(1)


@pytest.mark.parametrize("path", ["/runs/new/", "/endpoints/new/"])
def test_the_forms_flavor_picker_says_new_work_waits_on_a_draining_cluster_not_that_its_units_are_free(
        fleet, quota, member, staff, client, api_client_for, path):
    """Issue 46 F.7: the l4 quota's 2 units are free, but only east offers l4 and east drains: new work would wait
    (admission's rule, :func:`cluster.placement.no_usable_cluster`), so the picker says so in admission's words."""
    client.force_login(member)
    assert flavor_option(client.get(path).content.decode(), "l4").endswith(" · 2 of 2 free")
    set_state(api_client_for(staff), "draining")
    html = client.get(path).content.decode()
    l4 = flavor_option(html, "l4")
    assert l4.endswith(f" · new work waits: {DRAINED.removeprefix('waiting: ')}") and "free" not in l4
    assert flavor_option(html, "a100-80gb").endswith(" · 8 of 8 free")  # west still takes A100 work
