"""One contract, three backends: what the portal relies on from any cluster backend.

The same scenarios run against the shared fake (:class:`tests.fakes.FakeBackend`), the sandbox
(on the test database) and the Kubernetes backend over real HTTP against the API fake
(:mod:`tests.cluster.fakeapi`), chosen through the setting as the portal chooses it. Every
registered kind runs through them, the test-only Notebook kind too: its custom resource is
known to the backends only from its registration (the API fake installs its CRD from it).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import core.backend
from cluster.backends.base import (
    MANAGED_BY_LABEL,
    TEAM_LABEL,
    ClusterAddress,
    ClusterBackend,
    NodeCapacity,
    ResourceKind,
)
from cluster.backends.kubernetes import KubernetesBackend
from cluster.errors import NotFound
from cluster.manifests import build_env_secret, build_team, labels, team_workload
from cluster.manifests.provisioning import build_provisioning, consuming, pod_sets
from inference.manifests import build_endpoint
from inference.specs import CanarySpec
from jobs.manifests import build_training
from sandbox.backend import SandboxBackend
from tests.backends import use_backend
from tests.cluster import samples
from tests.cluster.fakeapi import FakeKubeAPI
from tests.fakes import FakeBackend
from tests.workloads.tinykind.kind import build_notebook
from workloads.registry import kind_for, resource_kinds

pytestmark = pytest.mark.django_db

NS, TEAM = "team-vision", "vision"
#: A kind no workload kind declares observed: asking for it shows the team's own objects.
QUOTAS = ResourceKind("", "v1", "ResourceQuota", "resourcequotas", observed=True)


@dataclass(frozen=True)
class Case:
    """One kind of workload: its registered kind's prefix and how to render one."""

    label: str
    prefix: str
    workers: int = 1
    #: On an atomic pool: its ProvisioningRequest and PodTemplates, then its objects consuming the request.
    atomic: bool = False

    def objects(self, name: str) -> list[dict]:
        if self.prefix == "run" and self.atomic:
            run = build_training(samples.training(object_name=name, workers=self.workers), samples.CONFIG)
            return [*build_provisioning(name, NS, labels(TEAM, name), pod_sets(run)), *consuming(run, name)]
        if self.prefix == "run":
            return build_training(samples.training(object_name=name, workers=self.workers), samples.CONFIG)
        if self.prefix == "ep":
            return build_endpoint(samples.endpoint(object_name=name), samples.CONFIG)
        return [build_notebook(name, NS, TEAM, 1)]

    @property
    def resources(self) -> tuple[ResourceKind, ...]:
        return kind_for(self.prefix).resources

    def declared(self, objects: list[dict], flag: str) -> list[dict]:
        """``objects`` of the kinds this kind declares ``observed`` or ``deleted``."""
        return [o for o in objects if any(r.kind == o["kind"] and r.api_version == o["apiVersion"] and getattr(r, flag)
                                          for r in self.resources)]


CASES = [Case("job", "run"), Case("pytorchjob", "run", workers=2), Case("atomic-pytorchjob", "run", workers=2, atomic=True),
         Case("endpoint", "ep"), Case("notebook", "nb")]


@pytest.fixture(params=["fake", "sandbox", "kubernetes"])
def backend(request, settings) -> ClusterBackend:
    if request.param == "fake":
        chosen: ClusterBackend = FakeBackend()
    elif request.param == "sandbox":
        chosen = SandboxBackend()
    else:
        api = FakeKubeAPI().start()
        request.addfinalizer(api.stop)
        for resource in resource_kinds():  # a CRD a kind declares, installed as a cluster admin would
            if resource.plural not in api.resources:
                api.install(resource)
        api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-a100-0", "labels": {}},
                 "status": {"allocatable": {"cpu": "96", "nvidia.com/gpu": "8"},
                            "conditions": [{"type": "Ready", "status": "True"}]}})
        chosen = KubernetesBackend(host=api.url, qps=1000, burst=1000, timeout=2)
    use_backend(settings, chosen)
    return core.backend.backend_for(core.backend.BackendSpec("default"))  # what the portal reaches through the setting


@pytest.fixture(params=CASES, ids=[c.label for c in CASES])
def case(request) -> Case:
    return request.param


def team_objects() -> list[dict]:
    return build_team(samples.team(), samples.CONFIG)


def observed(backend: ClusterBackend, resources=None) -> dict[str, object]:
    return {o.object_name: o for o in backend.observe(resource_kinds() if resources is None else resources)}


def kinds(objects: list[dict]) -> list[tuple[str, str]]:
    """Sorted (kind, name) of ``objects``, KEDA's autoscalers left out (only some backends run KEDA)."""
    return sorted((o["kind"], o["metadata"]["name"]) for o in objects if o["kind"] != "HorizontalPodAutoscaler")


def test_apply_then_observe_groups_a_workloads_objects_with_its_team(backend, case):
    objects = case.objects("wl-1")
    backend.apply(team_objects() + objects, case.resources)
    seen = observed(backend)
    assert list(seen) == ["wl-1"]  # the team's own objects are no workload's
    group = seen["wl-1"]
    assert (group.namespace, group.team) == (NS, TEAM)
    assert kinds(group.objects) == kinds(case.declared(objects, "observed"))
    assert all(o["metadata"]["labels"][TEAM_LABEL] == TEAM for o in group.objects)


def test_reapplying_is_idempotent(backend, case):
    objects = case.objects("wl-1")
    backend.apply(team_objects() + objects, case.resources)
    first = observed(backend)["wl-1"]
    backend.apply(team_objects() + case.objects("wl-1"), case.resources)
    again = observed(backend)["wl-1"]
    assert kinds(again.objects) == kinds(first.objects) == kinds(case.declared(objects, "observed"))
    uids = [o["metadata"].get("uid") for o in again.objects if o["kind"] != "HorizontalPodAutoscaler"]
    assert uids == [o["metadata"].get("uid") for o in first.objects if o["kind"] != "HorizontalPodAutoscaler"]


def test_delete_removes_exactly_the_declared_objects_of_that_workload(backend, case):
    gone, kept = case.objects("wl-1"), case.objects("wl-2")
    backend.apply(team_objects() + gone + kept, case.resources)
    backend.apply_secret(build_env_secret(NS, TEAM, "wl-1", (("TOKEN", "s3cret"),)))
    backend.apply_secret(build_env_secret(NS, TEAM, "wl-2", (("TOKEN", "s3cret"),)))

    count = backend.delete(ClusterAddress(NS, "wl-1"), case.resources)

    assert count == len(case.declared(gone, "deleted")) + 1  # and its env Secret
    seen = observed(backend)
    assert list(seen) == ["wl-2"]
    assert kinds(seen["wl-2"].objects) == kinds(case.declared(kept, "observed"))
    assert list(observed(backend, (QUOTAS,))) == [team_workload(TEAM)]  # the team's objects stay
    assert backend.delete(ClusterAddress(NS, "wl-1"), case.resources) == 0  # gone already: not an error
    assert backend.delete(ClusterAddress(NS, "wl-2"), case.resources) == len(case.declared(kept, "deleted")) + 1


def test_observe_lists_only_managed_objects(backend, case):
    unmanaged = case.objects("wl-2")
    for obj in unmanaged:
        del obj["metadata"]["labels"][MANAGED_BY_LABEL]
    backend.apply(team_objects() + case.objects("wl-1") + unmanaged, case.resources)
    assert list(observed(backend)) == ["wl-1"]


def test_observe_lists_only_the_kinds_it_is_given(backend, case):
    backend.apply(team_objects() + case.objects("wl-1"), case.resources)
    others = [r for r in resource_kinds() if r not in case.resources]
    assert observed(backend, others) == {}
    [team] = observed(backend, (QUOTAS,)).values()
    assert [o["kind"] for o in team.objects] == ["ResourceQuota"]


def test_a_workload_without_pods_has_no_pods_events_or_logs(backend, case):
    backend.apply(team_objects() + case.objects("wl-1"), case.resources)
    ref = ClusterAddress(NS, "wl-1")
    assert backend.pods(ref) == []
    assert backend.events(ref) == []
    with pytest.raises(NotFound):  # no such pod: the documented error
        backend.logs(ref, "wl-1-0")
    assert observed(backend)["wl-1"].pods == []


def test_annotating_a_workload_without_pods_annotates_none(backend, case):
    backend.apply(team_objects() + case.objects("wl-1"), case.resources)
    assert backend.annotate_pods(ClusterAddress(NS, "wl-1"), {"slipway.dev/notice": "2026-11-22T10:05:00Z"}) == 0
    assert backend.annotate_pods(ClusterAddress(NS, "wl-404"), {"slipway.dev/notice": None}) == 0


def test_a_custom_resource_without_a_controller_stays_as_applied(backend):
    notebook = build_notebook("nb-1", NS, TEAM, 2)
    backend.apply([*team_objects(), notebook], kind_for("nb").resources)
    backend.tick()
    [stored] = observed(backend)["nb-1"].objects
    assert (stored["apiVersion"], stored["kind"], stored["spec"]) == ("tiny.slipway.dev/v1", "Notebook", {"gpus": 2})
    assert backend.pods(ClusterAddress(NS, "nb-1")) == []


def test_capacity_reports_gpu_units_per_node_and_resource(backend):
    rows = backend.capacity()
    assert rows and all(isinstance(row, NodeCapacity) for row in rows)
    assert all(row.resource_name.startswith("nvidia.com/") and 0 <= row.in_use <= row.allocatable for row in rows)
    assert all(row.free == row.allocatable - row.in_use for row in rows)
    assert not any(row.provisioning for row in rows)  # every node is up: none is still being provisioned


def test_a_canary_is_observed_with_its_endpoint_and_deleted_alone_by_name(backend):
    """An endpoint's candidate (``<name>-canary``) is its endpoint's: observed in its group and deleted with it;
    ``delete_objects`` deletes it alone, and deleting what is gone is no error."""
    resources = kind_for("ep").resources
    spec = samples.endpoint(object_name="ep-1", canary=CanarySpec(revision=2, image="serve:2", replicas=1))
    backend.apply(team_objects() + build_endpoint(spec, samples.CONFIG), resources)
    names = [("Deployment", "ep-1"), ("Deployment", "ep-1-canary"), ("ScaledObject", "ep-1")]
    assert kinds(observed(backend)["ep-1"].objects) == names
    canary = [(r, "ep-1-canary") for r in resources if r.kind in ("Deployment", "Service")]

    assert backend.delete_objects(NS, canary) == 2
    assert kinds(observed(backend)["ep-1"].objects) == [("Deployment", "ep-1"), ("ScaledObject", "ep-1")]
    assert backend.delete_objects(NS, canary) == 0
    backend.apply(build_endpoint(spec, samples.CONFIG), resources)
    assert backend.delete(ClusterAddress(NS, "ep-1"), resources) == 5  # the endpoint's three and the candidate's two
    assert observed(backend) == {}
