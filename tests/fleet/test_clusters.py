"""Several clusters, one ledger: placement, draining, a lost cluster and its recovery, withdrawal.

Two scripted clusters (tests/fakes.py), each its own backend chosen through the setting
(tests/backends.py ``use_backends``); the portal's own code places, applies and reconciles.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, Permission
from django.utils import timezone

from billing.models import QuotaHold, UsageRecord
from cluster.backends.base import WORKLOAD_LABEL
from cluster.errors import Transient
from fleet.models import Cluster
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.services import submit_run
from quotas.models import QueuedRequest
from teams.models import AuditEvent
from tests.factories import make_user
from tests.fleet.conftest import NO_POOLS, _a100, apply, iso, node
from tests.jobs.conftest import run_payload
from workloads import lifecycle
from workloads.cycle import reconcile as rec
from workloads.models import ReasonCode
from workloads.tasks import apply_workload, reconcile_cluster

pytestmark = pytest.mark.django_db
NS = "team-ml-research"


def test_a_run_goes_to_exactly_one_cluster_the_one_with_room_and_says_why(clusters, submit):
    run = apply(submit(gpus_per_worker=4))  # east has 2 free: only west fits
    assert run.cluster.name == "west"
    assert run.placement_reason.startswith("west: the only cluster that can take it now")
    assert [k for (_ns, k, _n) in clusters["west"].objects if k == "Job"] == ["Job"]
    assert not any(k == "Job" for (_ns, k, _n) in clusters["east"].objects)
    both = apply(submit(name="small", gpus_per_worker=2))  # both fit: the most free units wins, east named
    assert both.cluster.name == "west" and "east" in both.placement_reason


def test_the_api_shows_where_a_run_went_and_staff_see_the_clusters(clusters, submit, member, staff, api_client_for):
    run = apply(submit(gpus_per_worker=4))
    body = api_client_for(member).get(f"/api/v1/runs/{run.pk}/").json()
    assert (body["cluster"], body["placement_reason"]) == ("west", run.placement_reason)
    assert api_client_for(member).get("/api/v1/clusters/").status_code == 404  # staff only: not there for members
    listed = api_client_for(staff).get("/api/v1/clusters/").json()
    assert [(c["name"], c["state"], c["region"]) for c in listed] == [("east", "ready", "us-east"),
                                                                       ("west", "ready", "us-west")]
    west = next(c for c in listed if c["name"] == "west")
    assert west["flavors"] == [{"flavor": "a100-80gb", "capacity": 8, "free": 8, "price_per_hour": "4.1000"}]


def test_a_draining_cluster_takes_no_new_work(clusters, submit, staff, api_client_for):
    client = api_client_for(staff)
    response = client.patch("/api/v1/clusters/west/", {"state": "draining"}, format="json")
    assert response.status_code == 200 and response.json()["state"] == "draining"
    assert AuditEvent.objects.filter(action=AuditEvent.Action.CLUSTER_CHANGED, target="cluster:west").exists()
    run = apply(submit(gpus_per_worker=2))
    assert run.cluster.name == "east"
    bad = client.patch("/api/v1/clusters/west/", {"state": "lost"}, format="json")
    assert bad.status_code == 400 and "state" in bad.json()["errors"]
    assert client.patch("/api/v1/clusters/nowhere/", {"state": "ready"}, format="json").status_code == 404


def test_a_cluster_selector_restricts_placement_and_bad_labels_are_a_400(clusters, submit, member, api_client_for):
    run = apply(submit(gpus_per_worker=2, cluster_selector={"site": "onprem"}))
    assert run.cluster.name == "east"  # west has more room, but the selector says on-prem
    response = api_client_for(member).post("/api/v1/runs/", run_payload(name="bad", cluster_selector={"site": ["x"]}),
                                           format="json")
    assert response.status_code == 400 and "cluster_selector" in response.json()["errors"]
    nowhere = api_client_for(member).post("/api/v1/runs/", run_payload(name="nowhere", cluster_selector={"site": "mars"}),
                                          format="json")
    assert nowhere.status_code == 400
    assert nowhere.json()["errors"]["cluster_selector"] == [
        "No cluster carries the labels site=mars: it could never be placed."]
    assert not TrainingRun.objects.filter(name__in=["bad", "nowhere"]).exists()


def test_a_silent_cluster_is_degraded_then_lost_and_the_others_go_on(clusters, submit, settings):
    west_run = apply(submit(gpus_per_worker=4))  # on west
    east_run = apply(submit(name="small", gpus_per_worker=2, cluster_selector={"site": "onprem"}))
    assert (west_run.cluster.name, east_run.cluster.name) == ("west", "east")
    t0 = timezone.now().replace(microsecond=0)
    clusters["west"].set_running(NS, west_run.object_name, units=4, started=iso(t0 - timedelta(minutes=30)))
    assert reconcile_cluster("west").startswith("observed=")
    west_run.refresh_from_db()
    assert west_run.state == RunState.RUNNING
    clusters["west"].observe_error = Transient("connection refused")
    for cycle in range(settings.SLIPWAY_CLUSTER_LOST_AFTER_CYCLES):
        assert reconcile_cluster("west") == "cluster west unavailable: connection refused"
        expected = "lost" if cycle + 1 == settings.SLIPWAY_CLUSTER_LOST_AFTER_CYCLES else "degraded"
        assert Cluster.objects.get(name="west").state == expected
        assert reconcile_cluster("east").startswith("observed=")  # the other cluster is not held up
    west = Cluster.objects.get(name="west")
    west_run.refresh_from_db()
    assert west_run.reason == f"cluster west unreachable since {timezone.localtime(west.silent_since):%H:%M}"
    assert west_run.reason_code == ReasonCode.CLUSTER_LOST
    assert west_run.state == RunState.RUNNING  # without the contract it waits for staff
    # Billing stopped at the last time the cluster was seen, and nothing more is billed while lost.
    assert west_run.billed_until == west.last_seen and west_run.open_units == 0
    billed = sum(r.gpu_hours for r in UsageRecord.objects.filter(ref=west_run.ref))
    assert reconcile_cluster("west").startswith("cluster west unavailable")
    assert sum(r.gpu_hours for r in UsageRecord.objects.filter(ref=west_run.ref)) == billed


def test_a_segment_opened_at_the_last_sighting_is_closed_there_when_the_cluster_is_lost(clusters, submit, settings):
    """The units changed at the last sighting (a second pod started), so the segment open then began
    exactly when the cluster was last seen; it is closed there too, not left open until the work
    is requeued or ended. (The same happens when the last sighting falls on the hour: the roll-over
    opens a segment then; a CI run once met it.)"""
    run = apply(submit(gpus_per_worker=4))
    assert run.cluster.name == "west"
    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    west = clusters["west"]
    west.set_running(NS, run.object_name, units=2, started=iso(t0))
    rec.reconcile_cluster(Cluster.objects.get(name="west"), west, now=t0 + timedelta(minutes=20))
    west.set_running(NS, run.object_name, units=4, started=iso(t0))
    last = t0 + timedelta(minutes=40)
    rec.reconcile_cluster(Cluster.objects.get(name="west"), west, now=last)
    run.refresh_from_db()
    assert (run.billed_until, run.open_units) == (last, 4)  # 4 units open since the last sighting
    west.observe_error = Transient("i/o timeout")
    for minute in range(settings.SLIPWAY_CLUSTER_LOST_AFTER_CYCLES + 20):
        rec.reconcile(now=last + timedelta(minutes=1 + minute))
    run.refresh_from_db()
    assert (run.billed_until, run.open_units) == (last, 0)
    hours = sum(r.gpu_hours for r in UsageRecord.objects.filter(ref=run.ref))
    assert float(hours) == pytest.approx(2 * 40 / 60, abs=1e-6)


def test_a_checkpointing_run_on_a_lost_cluster_resumes_elsewhere_and_is_billed_once(clusters, submit, settings):
    run = apply(submit(gpus_per_worker=4, checkpoint={"grace_seconds": 30}))
    assert run.cluster.name == "west"
    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    clusters["west"].set_running(NS, run.object_name, units=4, started=iso(t0))
    rec.reconcile_cluster(Cluster.objects.get(name="west"), clusters["west"], now=t0 + timedelta(minutes=40))
    clusters["west"].observe_error = Transient("i/o timeout")
    lost_at = t0 + timedelta(minutes=41)
    for minute in range(settings.SLIPWAY_CLUSTER_LOST_AFTER_CYCLES):
        rec.reconcile(now=lost_at + timedelta(minutes=minute))
    run.refresh_from_db()
    assert run.state == RunState.RUNNING  # lost, but not for long enough yet
    later = lost_at + timedelta(minutes=settings.SLIPWAY_LOST_REPLACE_AFTER_MINUTES + 1)
    report = rec.reconcile(now=later)
    run.refresh_from_db()
    assert run.ref in report.requeued
    # Queued again, then admitted again by the same cycle's queue step: attempt 2, placed afresh.
    assert (run.attempt, run.cluster_id, run.state) == (2, None, RunState.ADMITTED)
    # Billed up to the last sighting at 40 min, once; not the silent minutes after it.
    hours = sum(r.gpu_hours for r in UsageRecord.objects.filter(ref=run.ref))
    assert float(hours) == pytest.approx(4 * 40 / 60, abs=1e-6)
    # Resumed on east (west is lost) once east has room; west's copy is deleted when it answers again.
    clusters["east"].nodes = [node("east-a100-0", run.flavor, free=8)]
    assert apply_workload("run", run.pk) == "applied"
    run.refresh_from_db()
    assert run.cluster.name == "east"
    clusters["west"].observe_error = None
    report = rec.reconcile(now=later + timedelta(minutes=2))
    assert Cluster.objects.get(name="west").state == "ready"
    assert run.object_name in report.orphans_deleted
    assert not any(k == "Job" for (_ns, k, _n) in clusters["west"].objects)
    assert QuotaHold.objects.held().filter(ref=run.ref).count() == 1
    assert not QueuedRequest.objects.filter(ref=run.ref).exists()


def _stopping_on_west(clusters, submit, prune: bool):
    """A checkpointing run running on west for 40 min, then stopped by its owner (``prune``: its sweep's pruner)."""
    run = apply(submit(gpus_per_worker=4, checkpoint={"grace_seconds": 30}))
    assert run.cluster.name == "west"
    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    clusters["west"].set_running(NS, run.object_name, units=4, started=iso(t0))
    seen = t0 + timedelta(minutes=40)
    rec.reconcile_cluster(Cluster.objects.get(name="west"), clusters["west"], now=seen)
    run.refresh_from_db()
    words = "pruned by sweep lr (ASHA) at step 300" if prune else "stopped with sweep lr by alice"
    assert lifecycle.stop(run, words, prune, seen)
    run.refresh_from_db()
    assert run.reason_code == (ReasonCode.PRUNING if prune else ReasonCode.STOPPING)
    return run, seen


def _ended_stopped(run, prune: bool, seen) -> None:
    """It ended as its stop said, on its first attempt, its quota released, billed up to the last sighting."""
    run.refresh_from_db()
    assert (run.state, run.attempt) == ((RunState.PRUNED if prune else RunState.CANCELLED), 1)
    assert run.reason_code == (ReasonCode.PRUNED if prune else ReasonCode.ENDED_BY_USER)
    assert run.preempting_since is None
    assert not QuotaHold.objects.held().filter(ref=run.ref).exists()
    assert not QueuedRequest.objects.filter(ref=run.ref).exists()
    hours = sum(r.gpu_hours for r in UsageRecord.objects.filter(ref=run.ref))
    assert float(hours) == pytest.approx(4 * 40 / 60, abs=1e-6)


@pytest.mark.parametrize("prune", [False, True], ids=["stopped", "pruned"])
def test_a_run_being_stopped_on_a_lost_cluster_ends_stopped_and_never_runs_again(clusters, submit, settings, prune):
    """Its owner asked for it to end (a sweep stopped, its pruner): a lost cluster neither queues it again to
    resume elsewhere (it would run and bill a second time) nor leaves it holding its quota: its stop completes."""
    run, seen = _stopping_on_west(clusters, submit, prune)
    clusters["west"].observe_error = Transient("i/o timeout")
    reports = [rec.reconcile(now=seen + timedelta(minutes=1 + minute))
               for minute in range(settings.SLIPWAY_CLUSTER_LOST_AFTER_CYCLES)]
    later = seen + timedelta(minutes=settings.SLIPWAY_LOST_REPLACE_AFTER_MINUTES + 5)
    reports.append(rec.reconcile(now=later))
    assert Cluster.objects.get(name="west").state == "lost"
    assert not any(run.ref in r.requeued for r in reports)
    _ended_stopped(run, prune, seen)
    assert "ended while cluster west was lost" in run.reason
    # West answers again: what it still holds of the run is deleted, and nothing runs it again.
    clusters["west"].observe_error = None
    report = rec.reconcile(now=later + timedelta(minutes=1))
    assert run.object_name in report.orphans_deleted
    assert not any(k == "Job" for (_ns, k, _n) in clusters["west"].objects)
    rec.reconcile(now=later + timedelta(minutes=2))
    _ended_stopped(run, prune, seen)
    # A pruned run's checkpoint claim is kept for "continue"; a cancelled one's goes, as it does for any.
    claims = [n for (_ns, k, n) in clusters["west"].objects if k == "PersistentVolumeClaim"]
    assert claims == ([f"{run.object_name}-checkpoints"] if prune else [])


@pytest.mark.parametrize("prune", [False, True], ids=["stopped", "pruned"])
def test_a_stopping_run_on_a_cluster_lost_for_a_moment_ends_stopped_not_preempted(clusters, submit, settings, prune):
    """Lost for less than the replace window, then back: the lost cluster's words must not replace the stop's
    (the cycle would then take it for a preemption and queue it again, and the stop could never end it)."""
    run, seen = _stopping_on_west(clusters, submit, prune)
    clusters["west"].observe_error = Transient("connection refused")
    for minute in range(settings.SLIPWAY_CLUSTER_LOST_AFTER_CYCLES):
        rec.reconcile(now=seen + timedelta(minutes=1 + minute))
    assert Cluster.objects.get(name="west").state == "lost"
    clusters["west"].observe_error = None
    back = seen + timedelta(minutes=settings.SLIPWAY_CLUSTER_LOST_AFTER_CYCLES + 1)
    reports = [rec.reconcile(now=back + timedelta(minutes=minute)) for minute in range(4)]
    assert Cluster.objects.get(name="west").state == "ready"
    assert not any(run.ref in r.requeued for r in reports)
    _ended_stopped(run, prune, seen)
    assert not any(k == "Job" for (_ns, k, _n) in clusters["west"].objects)


def test_work_waiting_too_long_for_capacity_is_withdrawn_and_placed_where_it_fits(clusters, submit, settings):
    clusters["west"].nodes = [node("west-a100-0", _a100(), free=0)]
    run = apply(submit(gpus_per_worker=2))  # east has 2 free: it fits only there
    assert run.cluster.name == "east"
    clusters["east"].set_pending(NS, run.object_name, "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    clusters["east"].nodes = [node("east-a100-0", _a100(), free=0)]  # someone took east's GPUs meanwhile
    east = Cluster.objects.get(name="east")
    now = timezone.now()
    assert rec.reconcile_cluster(east, clusters["east"], now=now).withdrawn == []  # not waited long enough
    clusters["west"].nodes = [node("west-a100-0", _a100(), free=8)]  # west has room now
    later = now + timedelta(seconds=settings.SLIPWAY_PLACEMENT_TIMEOUT_SECONDS + 1)
    report = rec.reconcile_cluster(east, clusters["east"], now=later)
    assert report.withdrawn == [run.ref] and report.redriven == [run.identity]
    run.refresh_from_db()
    assert (run.cluster.name, run.state) == ("west", RunState.ADMITTED)
    assert "withdrawn from east" in run.placement_reason
    assert not any(k == "Job" for (_ns, k, _n) in clusters["east"].objects)
    assert apply_workload("run", run.pk) == "applied"
    assert any(k == "Job" for (_ns, k, _n) in clusters["west"].objects)


def test_a_continued_trial_waits_on_its_checkpoints_cluster_and_its_claim_is_never_deleted(clusters, submit, member,
                                                                                             team, settings):
    """A sweep's continued trial goes on from a pruned run's checkpoint claim on east (docs/sweeps.md "Continue a
    pruned trial"). Its wait in the queue is no wait for east's capacity, and however long it waits for capacity
    there it is not withdrawn to west: there it would start without its checkpoint, and the claim would go."""
    previous = apply(submit(gpus_per_worker=2, checkpoint={"grace_seconds": 30}, cluster_selector={"site": "onprem"}))
    assert previous.cluster.name == "east"
    claim = (NS, "PersistentVolumeClaim", f"{previous.object_name}-checkpoints")
    assert claim in clusters["east"].objects
    pruned_at = timezone.now()
    TrainingRun.objects.filter(pk=previous.pk).update(
        state=RunState.PRUNED, finished_at=pruned_at, reason_code=ReasonCode.PRUNED, last_checkpoint_at=pruned_at,
        last_checkpoint_step=300, last_checkpoint_path="/checkpoints/step-300")
    lifecycle.release_holdings(previous.ref)
    previous.refresh_from_db()
    fields = {k: v for k, v in run_payload(name="cont", gpus_per_worker=2, checkpoint={"grace_seconds": 30}).items()
              if k != "team"}
    run = submit_run(member, team, fields, resumes=previous)
    assert run.cluster_id == previous.cluster_id
    assert run.placed_at is None  # on east's list, not placed yet: what it waits for now is its team's queue
    before_apply = timezone.now()
    run = apply(run)
    assert run.placed_at >= before_apply  # placed when applied, as any run
    assert clusters["east"].objects[claim]["metadata"]["labels"][WORKLOAD_LABEL] == run.object_name  # its own now
    # East's GPUs are taken meanwhile and it waits for them past the placement timeout; west has room.
    clusters["east"].set_pending(NS, run.object_name, "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    clusters["east"].nodes = [node("east-a100-0", _a100(), free=0)]
    later = timezone.now() + timedelta(seconds=settings.SLIPWAY_PLACEMENT_TIMEOUT_SECONDS + 60)
    report = rec.reconcile_cluster(Cluster.objects.get(name="east"), clusters["east"], now=later)
    assert report.withdrawn == [] and run.ref not in report.withdrawn
    run.refresh_from_db()
    assert (run.cluster.name, run.state) == ("east", RunState.PENDING)
    assert claim in clusters["east"].objects  # the checkpoint it continues is still there
    assert any(k == "Job" and n == run.object_name for (_ns, k, n) in clusters["east"].objects)


def test_work_that_started_is_never_withdrawn(clusters, submit, settings):
    run = apply(submit(gpus_per_worker=2, workers=2))
    home = run.cluster.name
    backend = clusters[home]
    t0 = timezone.now().replace(microsecond=0)
    backend.set_running(NS, run.object_name, units=2, started=iso(t0))
    cluster = Cluster.objects.get(name=home)
    rec.reconcile_cluster(cluster, backend, now=t0 + timedelta(seconds=5))
    backend.set_pending(NS, run.object_name, "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    later = t0 + timedelta(seconds=settings.SLIPWAY_PLACEMENT_TIMEOUT_SECONDS + 60)
    assert rec.reconcile_cluster(cluster, backend, now=later).withdrawn == []
    run.refresh_from_db()
    assert run.cluster.name == home



def test_the_admin_lists_each_clusters_health_and_drains_it(clusters, staff, client):
    client.force_login(staff)
    Cluster.objects.filter(name="west").update(health="degraded", silent_cycles=1, last_error="i/o timeout")
    page = client.get("/admin/fleet/cluster/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "degraded" in text and "i/o timeout" in text
    west = Cluster.objects.get(name="west")
    response = client.post("/admin/fleet/cluster/", {"action": "drain", "_selected_action": [west.pk]})
    assert response.status_code == 302
    assert Cluster.objects.get(name="west").state == "draining"
    assert AuditEvent.objects.filter(action=AuditEvent.Action.CLUSTER_CHANGED, actor=staff).count() == 1


def test_a_staff_user_who_may_only_view_clusters_cannot_drain_one_from_the_list(clusters, client):
    """docs/security.md "Staff roles": draining a cluster needs fleet.change_cluster, in the console as in the API.
    Read-only Support sees the list, and its actions neither offer nor run a drain (nothing written, nothing
    audited)."""
    reader = make_user("sue")
    reader.is_staff = True
    reader.save(update_fields=["is_staff"])
    reader.groups.add(Group.objects.get(name="Support (read-only)"))
    west = Cluster.objects.get(name="west")
    client.force_login(reader)
    page = client.get("/admin/fleet/cluster/")
    assert page.status_code == 200 and 'value="drain"' not in page.content.decode()
    for action, draining in (("drain", False), ("make_ready", True)):
        Cluster.objects.filter(pk=west.pk).update(draining=draining)
        client.post("/admin/fleet/cluster/", {"action": action, "_selected_action": [west.pk]})
        assert Cluster.objects.get(pk=west.pk).draining is draining
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.CLUSTER_CHANGED).exists()


def test_the_capacity_page_adds_up_the_clusters_and_names_each_nodes_cluster(clusters, staff, client):
    Cluster.objects.filter(name="east").update(health="lost", silent_since=timezone.now())
    client.force_login(staff)
    text = client.get("/admin/capacity/").content.decode()
    assert 'data-cluster="west"' in text and 'data-cluster="east"' not in text  # a lost cluster is not asked
    assert "east: lost since" in text
    Cluster.objects.filter(name="east").update(health="ready")
    text = client.get("/admin/capacity/").content.decode()
    assert 'data-node="east-a100-0" data-cluster="east"' in text and 'data-cluster="west"' in text


def test_an_endpoints_cluster_selector_places_it_too(clusters, member, team, quota, published):
    from inference.services import create_endpoint
    from tests.inference.conftest import endpoint_payload

    payload = endpoint_payload(cluster_selector={"site": "onprem"})
    payload.pop("team", None)
    endpoint = create_endpoint(member, team, payload)
    assert apply_workload(endpoint.identity.prefix, endpoint.pk) == "applied"
    endpoint.refresh_from_db()
    assert (endpoint.cluster.name, endpoint.cluster_selector) == ("east", {"site": "onprem"})
    assert any(k == "Deployment" for (_ns, k, _n) in clusters["east"].objects)


def edit_form(cluster: Cluster, **changes) -> dict:
    """The admin change form's fields as posted, with ``changes``."""
    data = {"name": cluster.name, "backend": cluster.backend, "kubeconfig": cluster.kubeconfig,
            "context": cluster.context, "region": cluster.region, "labels": json.dumps(cluster.labels)}
    return {**data, **NO_POOLS, **changes}


EXEC_KUBECONFIG = "users:\n- name: x\n  user:\n    exec: {command: /bin/sh, args: [-c, 'id > /tmp/pwned']}\n"


def test_only_a_superuser_changes_what_runs_code_and_every_edit_is_audited(clusters, client):
    """Security review 4 #10: a kubeconfig's exec and a backend path run code on the portal's host."""
    cluster_staff = make_user("cleo")
    cluster_staff.is_staff = True
    cluster_staff.save(update_fields=["is_staff"])
    cluster_staff.user_permissions.add(*Permission.objects.filter(codename__in=["change_cluster", "view_cluster"]))
    west = Cluster.objects.get(name="west")
    client.force_login(cluster_staff)
    url = f"/admin/fleet/cluster/{west.pk}/change/"
    page = client.get(url).content.decode()
    assert 'name="region"' in page and 'name="kubeconfig"' not in page and 'name="backend"' not in page
    response = client.post(url, edit_form(west, region="us-west2", kubeconfig=EXEC_KUBECONFIG, backend="os.system"))
    assert response.status_code == 302
    west.refresh_from_db()
    assert west.region == "us-west2" and "exec" not in west.kubeconfig and west.backend != "os.system"
    event = AuditEvent.objects.get(action=AuditEvent.Action.CLUSTER_CHANGED, actor=cluster_staff)
    assert event.target == "cluster:west" and "region" in event.details["fields"]
    assert not set(event.details["fields"]) & {"kubeconfig", "backend", "context"}

    root = make_user("root", staff=True)  # a superuser may
    client.force_login(root)
    assert client.post(url, edit_form(west, context="prod")).status_code == 302
    assert Cluster.objects.get(pk=west.pk).context == "prod"
    event = AuditEvent.objects.get(action=AuditEvent.Action.CLUSTER_CHANGED, actor=root)
    assert "context" in event.details["fields"] and "prod" not in json.dumps(event.details)  # names, never values


def test_only_a_superuser_reads_a_kubeconfig_in_the_admin_console(clusters, client):
    """Security review 5 #4: read-only Support staff read a cluster's kubeconfig (the credential Slipway
    reaches it with) on its change page. Others see what it is, never what it says, anywhere in the console."""
    from front.roles import SUPPORT, ensure_staff_groups

    ensure_staff_groups()
    west = Cluster.objects.get(name="west")
    Cluster.objects.filter(pk=west.pk).update(kubeconfig=EXEC_KUBECONFIG, context="prod-ctx")
    support = make_user("sue")
    support.is_staff = True
    support.save(update_fields=["is_staff"])
    support.groups.add(Group.objects.get(name=SUPPORT))
    root = make_user("root", staff=True)
    client.force_login(root)  # a superuser's edit, so the history page has an entry
    assert client.post(f"/admin/fleet/cluster/{west.pk}/change/",
                       edit_form(Cluster.objects.get(pk=west.pk), region="eu-2")).status_code == 302
    assert "id &gt; /tmp/pwned" in client.get(f"/admin/fleet/cluster/{west.pk}/change/").content.decode()

    client.force_login(support)
    pages = [f"/admin/fleet/cluster/{west.pk}/change/", f"/admin/fleet/cluster/{west.pk}/history/",
             "/admin/fleet/cluster/", "/admin/fleet/cluster/?q=west"]
    for url in pages:
        response = client.get(url)
        text = response.content.decode()
        assert response.status_code == 200, url
        assert "pwned" not in text and "exec" not in text, url
    change = client.get(pages[0]).content.decode()
    stored = Cluster.objects.get(pk=west.pk).kubeconfig  # as the superuser's form saved it (stripped)
    assert "exec" in stored and f"set, {len(stored.encode())} bytes, context prod-ctx" in change
    # Filtering the list by the kubeconfig would read it a guess at a time: refused.
    assert client.get("/admin/fleet/cluster/?kubeconfig__contains=pwned").status_code == 400
    client.force_login(root)
    assert client.get("/admin/fleet/cluster/?kubeconfig__contains=pwned").status_code == 200
