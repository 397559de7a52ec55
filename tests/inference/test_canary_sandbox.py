"""A canary on the simulated cluster, through the real apply task, reconcile cycle and sandbox controllers.

The candidate runs as a second Deployment beside the stable one, with its own replicas and pods; the
endpoint's state and ready replicas are the stable Deployment's, its bill counts both; rolled back, the
candidate's objects and pods go and its unit returns to the team; a replace rolls the one Deployment and
its revision is stable once the sandbox shows it rolled out.
"""

from __future__ import annotations

import pytest

from billing.models import QuotaHold
from inference import revisions, routing, services
from inference.constants import EndpointState
from inference.models import EndpointRevision, InferenceEndpoint
from sandbox.models import SimObject, SimPod
from workloads.registry import kind_of

pytestmark = pytest.mark.django_db(transaction=True)


def endpoint(pk) -> InferenceEndpoint:
    return InferenceEndpoint.objects.select_related("team", "flavor", "created_by").get(pk=pk)


def deployments() -> dict[str, dict]:
    return {o.name: o.status for o in SimObject.objects.filter(resource_kind="Deployment")}


def live_pods(prefix: str) -> list[str]:
    return sorted(p.name for p in SimPod.objects.all() if p.name.startswith(prefix) and p.phase == "Running")


def until(cluster, condition, cycles: int = 20) -> None:
    for _ in range(cycles):
        if condition():
            return
        cluster.cycle()
    assert condition()


def ready_endpoint(cluster, member, team, replicas: int = 1) -> InferenceEndpoint:
    """An endpoint "chat" of vllm:0.6 at ``replicas`` fixed replicas, ready on the sandbox."""
    created = services.create_endpoint(member, team, {
        "name": "chat", "image": "registry.example.com/serving/vllm:0.6", "flavor": "a100-80gb",
        "min_replicas": replicas, "max_replicas": replicas, "env": {"SLIPWAY_SIM_LOAD_SECONDS": "10"}})
    until(cluster, lambda: endpoint(created.pk).state == EndpointState.READY
          and endpoint(created.pk).replicas == replicas)
    return created


def live_canary(cluster, member, created: InferenceEndpoint, change: dict, weight: int = 20) -> None:
    """A canary of ``change`` at ``weight``, its one replica ready beside the stable Deployment."""
    services.update_endpoint(member, endpoint(created.pk), {**change, "rollout": "canary", "weight": weight})
    until(cluster, lambda: (deployments().get(f"{created.object_name}-canary") or {}).get("readyReplicas") == 1)


def test_a_canary_runs_beside_the_stable_revision_is_billed_and_goes_when_rolled_back(cluster, member, team, ep_quota):
    created = ready_endpoint(cluster, member, team, replicas=2)
    name = created.object_name

    services.update_endpoint(member, endpoint(created.pk), {"image": "registry.example.com/serving/vllm:0.7",
                                                            "rollout": "canary", "weight": 20})
    rev = EndpointRevision.objects.get(endpoint_id=created.pk, number=2)
    assert rev.replicas == 1  # 20 % of 2 ready replicas, rounded up
    until(cluster, lambda: (deployments().get(f"{name}-canary") or {}).get("readyReplicas") == 1)

    ep = endpoint(created.pk)
    assert (ep.state, ep.replicas) == (EndpointState.READY, 2)  # the stable Deployment's figures
    assert len(live_pods(name)) == 3 and len(live_pods(f"{name}-canary")) == 1
    assert QuotaHold.objects.held().get(ref=ep.ref).units == 3
    cluster.cycle()
    assert endpoint(created.pk).open_units == 3  # both Deployments' running pods are billed
    canary = SimObject.objects.get(resource_kind="Deployment", name=f"{name}-canary")
    assert canary.manifest["spec"]["template"]["spec"]["containers"][0]["image"].endswith("vllm:0.7")
    stable = SimObject.objects.get(resource_kind="Deployment", name=name)
    assert stable.manifest["spec"]["template"]["spec"]["containers"][0]["image"].endswith("vllm:0.6")
    assert revisions.live_targets(ep) == [(1, 80, name), (2, 20, f"{name}-canary")]

    services.rollback_endpoint(member, ep)
    cluster.run_tasks()
    assert f"{name}-canary" not in deployments()
    assert not SimObject.objects.filter(name=f"{name}-canary").exists()  # its Service too
    until(cluster, lambda: len(live_pods(name)) == 2)
    assert QuotaHold.objects.held().get(ref=ep.ref).units == 2
    until(cluster, lambda: endpoint(created.pk).open_units == 2)
    assert endpoint(created.pk).state == EndpointState.READY
    # Nothing routes to the rolled-back revision: the rendered objects have no candidate and the Service selects
    # no candidate's pods; the route table sends everything to the stable revision's two replicas.
    rendered = kind_of(ep).manifests(endpoint(created.pk))
    assert not [m for m in rendered if m["metadata"]["name"].endswith("-canary")]
    selector = SimObject.objects.get(resource_kind="Service", name=name).manifest["spec"]["selector"].items()
    selected = {pod.owner.name for pod in SimPod.objects.filter(phase="Running").select_related("owner")
                if selector <= pod.owner.manifest["spec"]["template"]["metadata"]["labels"].items()}
    assert selected == {name}
    route = routing.routes()[(team.slug, "chat")]
    assert [(t.revision, t.weight) for t in route.targets] == [(1, 100)]

    # A replace rolls the one Deployment; the revision is stable once the sandbox shows it rolled out.
    services.update_endpoint(member, endpoint(created.pk), {"image": "registry.example.com/serving/vllm:0.8"})
    assert EndpointRevision.objects.get(endpoint_id=created.pk, number=3).state == "rolling"
    until(cluster, lambda: EndpointRevision.objects.get(endpoint_id=created.pk, number=3).state == "stable")
    assert list(EndpointRevision.objects.filter(endpoint_id=created.pk).order_by("number").values_list(
        "state", flat=True)) == ["retired", "rolled_back", "stable"]
    ready = [p for p in SimPod.objects.all() if p.name.startswith(name)]
    assert ready and all(p.phase == "Running" for p in ready)


def test_a_promoted_canary_becomes_the_stable_deployment_and_its_objects_go(cluster, member, team, ep_quota):
    created = ready_endpoint(cluster, member, team)
    name = created.object_name
    live_canary(cluster, member, created, {"args": ["--quantization", "awq"]}, weight=50)

    services.promote_endpoint(member, endpoint(created.pk))
    until(cluster, lambda: f"{name}-canary" not in deployments())
    assert EndpointRevision.objects.get(endpoint_id=created.pk, number=2).state == "stable"
    stable = SimObject.objects.get(resource_kind="Deployment", name=name)
    assert stable.manifest["spec"]["template"]["spec"]["containers"][0]["args"] == ["--quantization", "awq"]
    assert stable.manifest["metadata"]["annotations"]["slipway.dev/revision"] == "2"
    assert QuotaHold.objects.held().get(ref=created.ref).units == 1


def test_a_rollback_then_a_new_canary_keeps_the_new_ones_objects_whatever_order_the_tasks_run(
        cluster, member, team, ep_quota):
    """The candidate's objects are named for the endpoint, not the revision: a rollback's delete and the next
    canary's apply, published a moment apart, may run in either order on a worker's pool."""
    created = ready_endpoint(cluster, member, team)
    name = created.object_name
    live_canary(cluster, member, created, {"image": "registry.example.com/serving/vllm:0.7"})

    services.rollback_endpoint(member, endpoint(created.pk))
    services.update_endpoint(member, endpoint(created.pk), {"image": "registry.example.com/serving/vllm:0.8",
                                                            "rollout": "canary", "weight": 20})
    late = [task for task in cluster.published if task[0] == "inference.cleanup.delete_candidate"]
    assert late, "the rollback published its delete"
    cluster.published[:] = [task for task in cluster.published if task not in late] + late  # the delete runs last
    cluster.run_tasks()

    def canary_image() -> str | None:
        found = SimObject.objects.filter(resource_kind="Deployment", name=f"{name}-canary").first()
        return found and found.manifest["spec"]["template"]["spec"]["containers"][0]["image"]

    assert canary_image() == "registry.example.com/serving/vllm:0.8"  # revision 3's, not deleted
    until(cluster, lambda: (deployments().get(f"{name}-canary") or {}).get("readyReplicas") == 1)

    # Gone all the same (a delete that slipped between its check and the apply, a kubectl delete): the reconcile
    # cycle sees an admitted candidate without its Deployment and applies it again.
    assert cluster.backend.delete_objects(
        endpoint(created.pk).namespace,
        [(r, f"{name}-canary") for r in kind_of(endpoint(created.pk)).resources if r.kind in ("Deployment", "Service")],
    ) == 2
    until(cluster, lambda: (deployments().get(f"{name}-canary") or {}).get("readyReplicas") == 1)
    assert canary_image() == "registry.example.com/serving/vllm:0.8"
    assert EndpointRevision.objects.get(endpoint_id=created.pk, number=3).state == "canary"
    assert QuotaHold.objects.held().get(ref=created.ref).units == 2


def test_an_endpoint_deleted_with_its_canary_live_ends_it_too_and_leaves_nothing_on_the_cluster(
        cluster, member, team, ep_quota):
    created = ready_endpoint(cluster, member, team)
    name = created.object_name
    live_canary(cluster, member, created, {"image": "registry.example.com/serving/vllm:0.7"})
    assert QuotaHold.objects.held().get(ref=created.ref).units == 2

    services.delete_endpoint(member, endpoint(created.pk))
    until(cluster, lambda: endpoint(created.pk).state == EndpointState.DELETED)
    assert not SimObject.objects.filter(name__startswith=name).exists()
    assert live_pods(name) == []
    assert not QuotaHold.objects.held().filter(ref=created.ref).exists()
    # The candidate ended with its endpoint: taken out, holding nothing, serving nothing.
    assert list(EndpointRevision.objects.filter(endpoint_id=created.pk).order_by("number").values_list(
        "number", "state", "weight", "replicas")) == [(1, "stable", 100, 0), (2, "rolled_back", 0, 0)]
    assert EndpointRevision.objects.get(endpoint_id=created.pk, number=2).ended_at is not None
    assert revisions.held_replicas(endpoint(created.pk)) == 0
