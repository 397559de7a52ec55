"""Each cluster says which training API it has (issue 51, point 1; docs/training.md).

Discovery runs through the product's seams: the real Kubernetes backend over HTTP against the API fake
(tests/cluster/fakeapi.py), chosen through the setting (tests/backends.py), at a cluster's registration
(the admin console's add form) and on its heartbeat (the reconcile cycle); staff read it and override it in
the admin console and the clusters API, audited.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

import fleet.services as fleet
from cluster.backends.kubernetes import KubernetesBackend
from cluster.training import NONE, PYTORCHJOB, TRAINJOB
from fleet.models import Cluster
from teams.models import AuditEvent
from tests.backends import use_backend
from tests.cluster.fakeapi import FakeKubeAPI
from tests.cluster.test_training import install_trainer, runtime
from tests.factories import make_user
from tests.fleet.conftest import NO_POOLS
from workloads.cycle import reconcile as rec
from workloads.registry import resource_kinds

pytestmark = pytest.mark.django_db


@pytest.fixture
def kube_api(settings):
    """One API server with Slipway's kinds' CRDs (only PyTorchJob's training API), a cluster's backend on it."""
    api = FakeKubeAPI().start()
    for resource in resource_kinds():  # a CRD a kind declares, installed as a cluster admin would
        if resource.plural not in api.resources and resource.plural != "trainjobs":  # Trainer v2: a test's to install
            api.install(resource)
    use_backend(settings, KubernetesBackend(host=api.url, qps=1000, burst=1000, timeout=1.0))
    yield api
    api.stop()


def heartbeat(cluster: Cluster, at) -> Cluster:
    """One reconcile cycle of ``cluster`` at ``at`` (its observation is the heartbeat)."""
    rec.reconcile_cluster(cluster, fleet.backend(cluster), now=at)
    cluster.refresh_from_db()
    return cluster


def test_registration_in_the_admin_console_finds_trainer_v2_and_its_runtimes(kube_api, client):
    install_trainer(
        kube_api, runtime("torch-distributed", "torch"), runtime("deepspeed-distributed", "deepspeed", "mpi")
    )
    client.force_login(make_user("root", staff=True))
    response = client.post(
        "/admin/fleet/cluster/add/",
        {"name": "gpu-east", "region": "east", "labels": "{}", "backend": "", "kubeconfig": "", "context": "",
         **NO_POOLS},
    )
    assert response.status_code == 302
    cluster = Cluster.objects.get(name="gpu-east")
    assert (cluster.training_api, cluster.effective_training_api) == (TRAINJOB, TRAINJOB)
    assert cluster.training_runtimes == [
        {"name": "deepspeed-distributed", "framework": "deepspeed"},
        {"name": "torch-distributed", "framework": "pytorch"},
    ]
    assert cluster.frameworks == ("deepspeed", "pytorch")
    assert cluster.training_checked_at is not None and cluster.training_error == ""
    page = client.get(f"/admin/fleet/cluster/{cluster.pk}/change/").content.decode()
    assert "Trainer v2 (TrainJob)" in page and "deepspeed, pytorch" in page
    assert "trainjob" in client.get("/admin/fleet/cluster/").content.decode()  # the list's column


def test_the_heartbeat_asks_again_every_period_and_follows_the_cluster(kube_api, settings):
    cluster = Cluster.objects.create(name="east")
    t0 = timezone.now().replace(microsecond=0)
    assert heartbeat(cluster, t0).training_api == PYTORCHJOB  # never asked: the first heartbeat asks
    kube_api.uninstalled.add("pytorchjobs")  # staff remove the v1 operator
    period = timedelta(seconds=settings.SLIPWAY_TRAINING_DISCOVERY_SECONDS)
    assert heartbeat(cluster, t0 + period - timedelta(seconds=5)).training_api == PYTORCHJOB  # not due yet
    assert heartbeat(cluster, t0 + period).training_api == NONE
    install_trainer(kube_api, runtime("torch-distributed", "torch"))
    later = heartbeat(cluster, t0 + 2 * period)
    assert (later.training_api, later.frameworks, later.training_checked_at) == (
        TRAINJOB,
        ("pytorch",),
        t0 + 2 * period,
    )


def test_a_cluster_whose_discovery_fails_keeps_what_it_had_and_its_heartbeat_goes_on(kube_api, settings):
    cluster = Cluster.objects.create(name="east")
    t0 = timezone.now().replace(microsecond=0)
    assert heartbeat(cluster, t0).training_api == PYTORCHJOB
    # The discovery endpoints fail (the observation's LISTs do not): 503s, many of them.
    kube_api.fail(503, times=50, path_contains="/apis/trainer.kubeflow.org", path_excludes="/trainjobs",
                  message="etcd leader changed")
    later = t0 + timedelta(seconds=settings.SLIPWAY_TRAINING_DISCOVERY_SECONDS)
    report = rec.reconcile_cluster(cluster, fleet.backend(cluster), now=later)
    assert report is not None
    cluster.refresh_from_db()
    assert (cluster.training_api, cluster.state, cluster.last_seen) == (PYTORCHJOB, "ready", later)
    assert cluster.training_error == "etcd leader changed" and cluster.training_checked_at == later
    # Asked again after the period, not every cycle; once it answers, the error goes.
    kube_api.faults.clear()
    kube_api.reset_requests()
    heartbeat(cluster, later + timedelta(seconds=5))
    assert not [r for r in kube_api.requests if r.path.startswith("/apis/trainer.kubeflow.org") and "/trainjobs" not in r.path]
    cluster = heartbeat(cluster, later + timedelta(seconds=settings.SLIPWAY_TRAINING_DISCOVERY_SECONDS))
    assert (cluster.training_api, cluster.training_error) == (PYTORCHJOB, "")


def test_a_registration_whose_cluster_does_not_answer_keeps_the_assumption(kube_api):
    kube_api.fail(503, times=10)
    cluster = Cluster.objects.create(name="east")
    fleet.registered(cluster)
    cluster.refresh_from_db()
    assert (cluster.training_api, cluster.effective_training_api) == ("", PYTORCHJOB)  # as before discovery
    assert cluster.training_error and cluster.training_checked_at is not None


def test_the_override_wins_over_discovery_and_goes_with_null(kube_api, staff, api_client_for):
    cluster = Cluster.objects.create(name="east", training_api=NONE)
    client = api_client_for(staff)
    response = client.patch("/api/v1/clusters/east/", {"training_api_override": PYTORCHJOB}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert (body["training_api"], body["training_api_discovered"], body["training_api_override"]) == (
        PYTORCHJOB,
        NONE,
        PYTORCHJOB,
    )
    assert body["frameworks"] == ["pytorch"] and body["state"] == "ready"  # the state untouched
    cluster.refresh_from_db()
    assert cluster.effective_training_api == PYTORCHJOB
    event = AuditEvent.objects.get(action=AuditEvent.Action.CLUSTER_CHANGED, target="cluster:east")
    assert event.details == {"training_api_override": PYTORCHJOB} and event.actor == staff
    # The same again changes nothing and audits nothing; null gives discovery its word back.
    assert (
        client.patch("/api/v1/clusters/east/", {"training_api_override": PYTORCHJOB}, format="json").status_code == 200
    )
    cleared = client.patch("/api/v1/clusters/east/", {"training_api_override": None}, format="json").json()
    assert (cleared["training_api"], cleared["training_api_override"], cleared["frameworks"]) == (NONE, None, [])
    assert AuditEvent.objects.filter(action=AuditEvent.Action.CLUSTER_CHANGED).count() == 2
    bad = client.patch("/api/v1/clusters/east/", {"training_api_override": "tfjob"}, format="json")
    assert bad.status_code == 400 and "training_api_override" in bad.json()["errors"]
    # Discovery's next answer does not undo it.
    client.patch("/api/v1/clusters/east/", {"training_api_override": TRAINJOB}, format="json")
    fleet.discover_training(cluster, fleet.backend(cluster), timezone.now())
    cluster.refresh_from_db()
    assert (cluster.training_api, cluster.effective_training_api) == (PYTORCHJOB, TRAINJOB)


def test_the_clusters_api_shows_each_clusters_training_api_to_staff_only(kube_api, member, staff, api_client_for):
    install_trainer(kube_api, runtime("torch-distributed", "torch"))
    fleet.registered(Cluster.objects.create(name="east"))
    Cluster.objects.create(name="west")  # never asked yet
    assert api_client_for(member).get("/api/v1/clusters/").status_code == 404  # staff only, as before
    listed = {c["name"]: c for c in api_client_for(staff).get("/api/v1/clusters/").json()}
    east, west = listed["east"], listed["west"]
    assert (east["training_api"], east["training_api_discovered"], east["training_api_override"]) == (
        TRAINJOB,
        TRAINJOB,
        None,
    )
    assert east["frameworks"] == ["pytorch"]
    assert east["training_runtimes"] == [{"name": "torch-distributed", "framework": "pytorch"}]
    assert east["training_checked_at"] is not None and east["training_error"] == ""
    assert (west["training_api"], west["training_api_discovered"], west["training_checked_at"]) == (
        PYTORCHJOB,
        None,
        None,
    )
    assert api_client_for(staff).get("/api/v1/clusters/east/").json()["training_api"] == TRAINJOB


def test_only_staff_allowed_to_change_clusters_override_one(kube_api, member, api_client_for):
    Cluster.objects.create(name="east")
    reader = make_user("reader")
    reader.is_staff = True
    reader.save(update_fields=["is_staff"])
    body = {"training_api_override": NONE}
    assert api_client_for(member).patch("/api/v1/clusters/east/", body, format="json").status_code == 404
    refused = api_client_for(reader).patch("/api/v1/clusters/east/", body, format="json")
    assert refused.status_code == 403 and "fleet.change_cluster" in json.dumps(refused.json())
    assert Cluster.objects.get(name="east").training_api_override == ""
    reader.user_permissions.add(Permission.objects.get(codename="change_cluster"))
    assert api_client_for(reader).patch("/api/v1/clusters/east/", body, format="json").status_code == 200
    assert Cluster.objects.get(name="east").effective_training_api == NONE


def test_staff_override_it_in_the_admin_console_audited_with_the_other_fields(kube_api, client):
    from tests.fleet.test_clusters import edit_form

    cluster = Cluster.objects.create(name="east", training_api=PYTORCHJOB)
    editor = make_user("cleo")
    editor.is_staff = True
    editor.save(update_fields=["is_staff"])
    editor.user_permissions.add(*Permission.objects.filter(codename__in=["change_cluster", "view_cluster"]))
    client.force_login(editor)
    url = f"/admin/fleet/cluster/{cluster.pk}/change/"
    page = client.get(url).content.decode()
    assert 'name="training_api_override"' in page and 'name="training_api"' not in page  # discovery's is read-only
    assert client.post(url, edit_form(cluster, training_api_override=NONE)).status_code == 302
    cluster.refresh_from_db()
    assert (cluster.training_api, cluster.effective_training_api) == (PYTORCHJOB, NONE)
    event = AuditEvent.objects.get(action=AuditEvent.Action.CLUSTER_CHANGED, actor=editor)
    assert "training_api_override" in event.details["fields"]
