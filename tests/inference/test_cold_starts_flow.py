"""Cold-start timelines on the simulated cluster, through the real reconcile cycle and apply task
(docs/serving.md "Cold starts"): every stage a replica reaches is recorded in order, with the delays its
revision's ``SLIPWAY_SIM_*`` env scripts, and at least 95 % of its elapsed seconds go to named stages; a
wake from zero makes a ``from_zero`` timeline that the gateway's first byte completes; a burst replica's
timeline starts at the burst grant that decided it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from cluster.backends.base import ClusterAddress
from inference import coldstarts, services
from inference.constants import COLD_START_STAGES, EndpointState, ScalingDecision
from inference.models import ColdStart, InferenceEndpoint
from workloads.registry import resource_kinds

# Real commits: the tasks the portal publishes after commit are run as a worker would run them.
pytestmark = pytest.mark.django_db(transaction=True)

KNOBS = {"SLIPWAY_SIM_SCHEDULE_SECONDS": "3", "SLIPWAY_SIM_PULL_SECONDS": "7", "SLIPWAY_SIM_START_SECONDS": "2",
         "SLIPWAY_SIM_LOAD_SECONDS": "20"}


def make(member, team, **fields) -> InferenceEndpoint:
    payload = {"name": "chat", "image": "registry.example.com/serving/vllm:0.6", "flavor": "a100-80gb",
               "min_replicas": 1, "max_replicas": 1, "autoscale": {"metric": "gpu_utilization", "target": 70},
               "env": dict(KNOBS)}
    payload.update(fields)
    return services.create_endpoint(member, team, payload)


def endpoint(pk) -> InferenceEndpoint:
    return InferenceEndpoint.objects.get(pk=pk)


def run_until(cluster, predicate, what: str, cycles: int = 60):
    """Reconcile cycles of 5 simulated seconds until ``predicate()`` holds (at most ``cycles``)."""
    for _ in range(cycles):
        cluster.cycle()
        found = predicate()
        if found:
            return found
    raise AssertionError(f"{what}: not after {cycles} cycles")


def pods_of(cluster, ep: InferenceEndpoint) -> dict[str, dict]:
    observed = next(o for o in cluster.backend.observe(resource_kinds()) if o.object_name == ep.object_name)
    return {pod["metadata"]["name"]: pod for pod in observed.pods}


def in_order(instants: dict) -> bool:
    times = [instants[stage] for stage in COLD_START_STAGES if stage in instants]
    return times == sorted(times)


def test_a_new_replica_records_every_stage_in_order_with_its_revisions_delays(cluster, member, team, ep_quota):
    created = make(member, team)
    row = run_until(cluster, lambda: ColdStart.objects.filter(endpoint_id=created.pk, complete=True).first(),
                    "a complete timeline")
    ep = endpoint(created.pk)
    assert ep.state == EndpointState.READY
    assert ColdStart.objects.filter(endpoint=ep).count() == 1
    assert row.pod in pods_of(cluster, ep)
    instants = coldstarts.instants_of(row.stages)
    # Every stage of a replica that was not woken from zero: no first byte to wait for.
    assert list(instants) == list(COLD_START_STAGES[:-1]) and in_order(instants)
    # Its first replica: the timeline starts at the endpoint's admission.
    assert row.started_at == instants["admitted"] == ep.admitted_at
    assert (row.from_zero, row.revision) == (False, 1)
    durations = coldstarts.attribute(instants).durations
    # The revision's env scripted each stage (SLIPWAY_SIM_PULL/START/LOAD_SECONDS); the binding waited at
    # least SLIPWAY_SIM_SCHEDULE_SECONDS after the pod's creation, and the pod came after the admission.
    assert (durations["image_pulled"], durations["container_started"], durations["model_loaded"]) == (7, 2, 20)
    assert durations["scheduled"] >= 3 and durations["ready"] >= 0
    attribution = coldstarts.attribute(instants)
    assert attribution.unattributed == 0 and attribution.attributed_share >= 0.95
    assert attribution.elapsed == pytest.approx(sum(durations.values()))
    # The next cycles add nothing: the replica is steady.
    for _ in range(3):
        cluster.cycle()
    assert ColdStart.objects.get(pk=row.pk).stages == row.stages


def test_a_wake_from_zero_is_a_from_zero_timeline_the_gateways_first_byte_completes(cluster, member, team,
                                                                                      ep_quota):
    created = make(member, team, min_replicas=0, scale_down_delay_seconds=0,
                   autoscale={"metric": "requests_per_second", "target": 10},
                   env={**KNOBS, "SLIPWAY_SIM_LOAD_SECONDS": "10"})
    ref = ClusterAddress(created.namespace, created.object_name)
    cluster.backend.set_load(ref, 50)
    run_until(cluster, lambda: endpoint(created.pk).state == EndpointState.READY, "its first replica ready")
    cluster.backend.set_load(ref, 0)  # nobody calls it: down to zero
    run_until(cluster, lambda: endpoint(created.pk).state == EndpointState.SCALED_TO_ZERO, "scaled to zero")
    assert not ColdStart.objects.filter(endpoint_id=created.pk, from_zero=True).exists()

    cluster.backend.set_load(ref, 50)  # a request is held at the gateway: the endpoint wakes
    woke = run_until(cluster, lambda: ColdStart.objects.filter(endpoint_id=created.pk, from_zero=True,
                                                               stages__has_key="ready").first(), "the woken replica")
    # Ready, but not complete: the first answer has not reached anyone yet.
    assert not woke.complete and "first_byte" not in woke.stages
    pod = pods_of(cluster, endpoint(created.pk))[woke.pod]
    instants = coldstarts.instants_of(woke.stages)
    # The wake is the pod's creation (KEDA's activation scaled the Deployment from zero).
    assert instants["admitted"].isoformat().replace("+00:00", "Z") == pod["metadata"]["creationTimestamp"]

    answered = instants["ready"] + timedelta(seconds=1, milliseconds=250)
    coldstarts.record_first_byte(created.pk, answered)
    woke.refresh_from_db()
    instants = coldstarts.instants_of(woke.stages)
    assert woke.complete and list(instants) == list(COLD_START_STAGES) and in_order(instants)
    assert instants["first_byte"] == answered
    attribution = coldstarts.attribute(instants)
    assert attribution.durations["first_byte"] == 1.25 and attribution.attributed_share >= 0.95
    # A second call (another gateway replica's first answer) and the next cycles change nothing.
    coldstarts.record_first_byte(created.pk, answered + timedelta(seconds=5))
    cluster.cycle()
    woke.refresh_from_db()
    assert coldstarts.instants_of(woke.stages)["first_byte"] == answered
    # The endpoint's first replica, before it ever slept, was no wake.
    assert ColdStart.objects.filter(endpoint_id=created.pk, from_zero=False, complete=True).count() == 1


def test_a_burst_replicas_timeline_starts_at_its_grant(cluster, member, team, ep_quota):
    created = make(member, team, max_replicas=2, env={**KNOBS, "SLIPWAY_SIM_LOAD_SECONDS": "5"})
    ref = ClusterAddress(created.namespace, created.object_name)
    cluster.backend.set_load(ref, 10)
    run_until(cluster, lambda: endpoint(created.pk).state == EndpointState.READY, "its first replica ready")
    cluster.backend.set_load(ref, 1000)
    run_until(cluster, lambda: ColdStart.objects.filter(endpoint_id=created.pk, complete=True).count() == 2,
              "the burst replica ready")
    grant = endpoint(created.pk).scaling_events.get(decision=ScalingDecision.BURST_GRANTED)
    first, burst = ColdStart.objects.filter(endpoint_id=created.pk).order_by("started_at")
    assert first.started_at == endpoint(created.pk).admitted_at
    assert burst.started_at == grant.at and not burst.from_zero
    instants = coldstarts.instants_of(burst.stages)
    assert in_order(instants) and coldstarts.attribute(instants).attributed_share >= 0.95
    # Over its history, each stage's median is what its revision scripted.
    figures = {f.stage: f for f in coldstarts.history(endpoint(created.pk)).stages}
    assert (figures["image_pulled"].p50, figures["model_loaded"].p50, figures["model_loaded"].samples) == (7, 5, 2)
