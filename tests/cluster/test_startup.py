"""A replica's start as a real cluster shows it (cluster/startup.py), and the Kubernetes backend's part of it over
HTTP against the API fake: the pods' conditions and container starts come with the pods' LIST, the kubelet's
``Pulled`` events with one more LIST while a pod is starting, none otherwise."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cluster.backends.base import ObservedWorkload
from cluster.backends.kubernetes import KubernetesBackend
from cluster.startup import READ_AFTER_READY, replica_starts, starting
from tests.cluster import samples
from tests.cluster.fakeapi import FakeKubeAPI
from tests.cluster.test_kubernetes_backend import RESOURCES


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(kind: str, status: str, t: datetime) -> dict:
    return {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": stamp(t)}


def replica(name: str, created: datetime, *, ready_after: float | None = None, restarted: bool = False,
            workload: str = "ep-7", namespace: str = "team-vision") -> dict:
    """An endpoint's pod as the API server returns it: bound 4 s after its creation, its container started
    at 31 s, its model loaded (ContainersReady) at 71 s and the pod Ready at 72 s when ``ready_after``."""
    scheduled, started = created + timedelta(seconds=4), created + timedelta(seconds=31)
    conditions = [condition("PodScheduled", "True", scheduled), condition("Initialized", "True", scheduled)]
    ready = ready_after is not None
    loaded = created + timedelta(seconds=ready_after - 1) if ready else started
    became = created + timedelta(seconds=ready_after) if ready else started
    conditions += [condition("ContainersReady", str(ready), loaded), condition("Ready", str(ready), became)]
    status = {"name": "main", "ready": ready, "restartCount": 0, "started": True,
              "state": {"running": {"startedAt": stamp(started)}}}
    if restarted:  # its first run began at 31 s and died; the current one began at 95 s
        status.update(restartCount=1, state={"running": {"startedAt": stamp(created + timedelta(seconds=95))}},
                      lastState={"terminated": {"startedAt": stamp(started), "exitCode": 1,
                                                "finishedAt": stamp(created + timedelta(seconds=90))}})
    pod = samples.pod(name, workload, namespace=namespace, conditions=conditions, container_statuses=[status],
                      extra_labels={"slipway.dev/revision": "3"})
    pod["metadata"]["creationTimestamp"] = stamp(created)
    return pod


def pulled(pod: str, t: datetime, *, namespace: str = "team-vision", reason: str = "Pulled", kind: str = "Pod",
           first: bool = True) -> dict:
    event = {"apiVersion": "v1", "kind": "Event",
             "metadata": {"name": f"{pod}.{reason.lower()}.{t.timestamp():.0f}", "namespace": namespace},
             "involvedObject": {"kind": kind, "name": pod, "namespace": namespace}, "reason": reason, "type": "Normal",
             "message": 'Successfully pulled image "img" in 25.9s', "count": 1}
    # Old-style events carry first/lastTimestamp; events.k8s.io ones only eventTime.
    event.update({"firstTimestamp": stamp(t), "lastTimestamp": stamp(t)} if first else {"eventTime": stamp(t)})
    return event


def deployment(name: str = "ep-7") -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "team-vision", "labels": {**samples.LABELS,
                                                                               "slipway.dev/workload": name}},
            "spec": {"replicas": 2}, "status": {}}


def test_a_starting_replica_is_observed_with_its_pull_events_over_http(backend: KubernetesBackend,
                                                                       kube_api: FakeKubeAPI) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    created = now - timedelta(seconds=80)
    kube_api.put(deployment())
    kube_api.put(replica("ep-7-aaa", created, ready_after=72))
    kube_api.put(replica("ep-7-bbb", created + timedelta(seconds=20)))  # still loading its model
    kube_api.put(pulled("ep-7-aaa", created + timedelta(seconds=30)))
    kube_api.put(pulled("ep-7-bbb", created + timedelta(seconds=49), first=False))
    kube_api.put(pulled("someone-elses-pod", created))  # not Slipway's: not on any workload
    kube_api.put(pulled("ep-7-aaa", created, reason="Pulling"))  # not a pull's end
    kube_api.put(pulled("ep-7", created, kind="Deployment"))  # not a pod's
    kube_api.reset_requests()

    [observed] = backend.observe(RESOURCES)

    assert sorted((e.object, e.time) for e in observed.pod_events) == [
        ("Pod/ep-7-aaa", stamp(created + timedelta(seconds=30))), ("Pod/ep-7-bbb", stamp(created + timedelta(seconds=49)))]
    events = [r for r in kube_api.requests if r.path.endswith("/events")]
    assert len(events) == 1 and events[0].path == "/api/v1/events"  # one LIST, all namespaces
    assert events[0].query["fieldSelector"] == ["involvedObject.kind=Pod,reason=Pulled"]
    starts = {s.pod: s for s in replica_starts(observed, now)}
    offsets = {stage: (t - created).total_seconds() for stage, t in starts["ep-7-aaa"].stages.items()}
    assert offsets == {"scheduled": 4, "image_pulled": 30, "container_started": 31, "model_loaded": 71, "ready": 72}
    assert starts["ep-7-aaa"].revision == 3 and starts["ep-7-aaa"].created == created
    loading = {stage: (t - created).total_seconds() for stage, t in starts["ep-7-bbb"].stages.items()}
    assert loading == {"scheduled": 24, "image_pulled": 49, "container_started": 51}


def test_replicas_running_steadily_cost_no_event_list(backend: KubernetesBackend, kube_api: FakeKubeAPI) -> None:
    now = datetime.now(UTC)
    kube_api.put(deployment())
    kube_api.put(replica("ep-7-aaa", now - READ_AFTER_READY - timedelta(minutes=5), ready_after=72))
    kube_api.put(pulled("ep-7-aaa", now - timedelta(hours=1)))
    kube_api.reset_requests()
    [observed] = backend.observe(RESOURCES)
    assert observed.pod_events == [] and replica_starts(observed, now) == ()
    assert not [r for r in kube_api.requests if r.path.endswith("/events")]


def test_a_restarted_container_counts_its_first_start_and_an_expired_pull_event_its_start() -> None:
    created = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)
    pod = replica("ep-7-ccc", created, restarted=True)
    [found] = replica_starts(ObservedWorkload("team-vision", "ep-7", pods=[pod]), created + timedelta(seconds=100))
    # No Pulled event seen (expired after an hour, or never listed): the container's start stands for the pull.
    assert found.stages["container_started"] == found.stages["image_pulled"] == created + timedelta(seconds=31)
    assert "ready" not in found.stages and "model_loaded" not in found.stages


def test_which_pods_are_starting() -> None:
    now = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    assert starting(replica("a", now - timedelta(minutes=1)), now)  # loading
    assert starting(replica("b", now - timedelta(seconds=80), ready_after=72), now)  # just ready
    assert not starting(replica("c", now - timedelta(hours=1), ready_after=72), now)  # ready long ago
    assert not starting(replica("d", now - timedelta(hours=5)), now)  # never ready: given up on
    gone = replica("e", now - timedelta(minutes=1))
    gone["metadata"]["deletionTimestamp"] = stamp(now)
    assert not starting(gone, now)
