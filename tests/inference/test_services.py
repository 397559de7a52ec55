"""Creating, changing and deleting endpoints: quota admission of the minimum, re-admission on PATCH."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404

from billing.models import QuotaHold
from inference import services
from inference.constants import EndpointState, ScalingDecision
from inference.models import InferenceEndpoint
from jobs.services import submit_run
from quotas.models import QueuedRequest
from tests.inference.conftest import endpoint_payload
from workloads.cycle import reconcile as rec

pytestmark = pytest.mark.django_db


def reserved(endpoint) -> int:
    hold = QuotaHold.objects.held().filter(ref=endpoint.ref).first()
    return hold.units if hold else 0


def test_it_admits_an_endpoint_at_its_guaranteed_minimum(create):
    endpoint = create(min_replicas=2, max_replicas=4, gpus_per_replica=1)
    assert endpoint.state == EndpointState.DEPLOYING
    assert reserved(endpoint) == 2  # the minimum, not the maximum
    assert endpoint.replica_ceiling == 2
    event = endpoint.scaling_events.get()
    assert event.decision == ScalingDecision.ADMITTED and event.replica_ceiling == 2


def test_an_endpoint_that_scales_to_zero_reserves_one_replica_to_wake_with(create):
    endpoint = create(min_replicas=0, max_replicas=3, flavor="a100-1g.10gb",
                      autoscale={"metric": "queue_length", "engine": "vllm", "target": 5})
    assert reserved(endpoint) == 1
    assert endpoint.replica_ceiling == 1


def test_it_queues_an_endpoint_whose_minimum_does_not_fit(create):
    create(name="first", min_replicas=3)
    second = create(name="second", min_replicas=2)
    assert second.state == EndpointState.QUEUED
    assert second.reason == "waiting for quota: needs 2× a100-80gb, 3 of 4 in use"
    assert reserved(second) == 0 and QueuedRequest.objects.filter(ref=second.ref).exists()


@pytest.mark.parametrize(("overrides", "field"), [
    ({"flavor": "h100-80gb"}, "flavor"),  # no quota for it
    ({"min_replicas": 5, "max_replicas": 5}, "min_replicas"),  # more than the limit, ever
    ({"min_replicas": 0}, "min_replicas"),  # zero needs a request-driven metric
    ({"min_replicas": 3, "max_replicas": 2}, "max_replicas"),
    ({"flavor": "a100-1g.10gb", "gpus_per_replica": 2}, "gpus_per_replica"),  # a MIG slice is one unit
    ({"name": "9lives"}, "name"),  # DNS-1035: starts with a letter
    ({"autoscale": {"metric": "queue_length", "target": 4}}, "autoscale"),  # needs an engine
    ({"autoscale": {"metric": "prometheus", "target": 4}}, "autoscale"),  # needs a query
    ({"replicas": 3}, "non_field_errors"),  # not a field one may set
])
def test_it_refuses_bad_requests_with_field_errors_and_writes_nothing(create, overrides, field):
    with pytest.raises(ValidationError) as caught:
        create(**overrides)
    assert field in caught.value.message_dict
    assert not InferenceEndpoint.objects.exists() and not QuotaHold.objects.exists()


def test_it_refuses_a_second_live_endpoint_of_the_same_name(create):
    create()
    with pytest.raises(ValidationError) as caught:
        create()
    assert "name" in caught.value.message_dict


def test_viewers_and_outsiders_cannot_create(viewer, outsider, team, ep_quota):
    with pytest.raises(PermissionDenied):
        services.create_endpoint(viewer, team, endpoint_payload())
    with pytest.raises(Http404):
        services.create_endpoint(outsider, team, endpoint_payload())


def test_a_higher_minimum_must_fit_now_else_nothing_changes(create, member):
    endpoint = create(min_replicas=1, max_replicas=4)
    create(name="other", min_replicas=2)
    grown = services.update_endpoint(member, endpoint, {"min_replicas": 2})
    assert (grown.min_replicas, grown.replica_ceiling, reserved(grown)) == (2, 2, 2)
    with pytest.raises(ValidationError) as caught:
        services.update_endpoint(member, grown, {"min_replicas": 3, "image": "registry.example.com/serving/vllm:0.7"})
    assert "waiting for quota" in caught.value.message_dict["min_replicas"][0]
    grown.refresh_from_db()
    assert (grown.min_replicas, grown.image, reserved(grown)) == (2, "registry.example.com/serving/vllm:0.6", 2)


def test_burst_units_the_endpoint_holds_count_towards_a_higher_minimum(create, member):
    endpoint = create(min_replicas=1, max_replicas=4)
    QuotaHold.objects.filter(ref=endpoint.ref).update(units=3)  # two burst replicas granted
    InferenceEndpoint.objects.filter(pk=endpoint.pk).update(replica_ceiling=3)
    create(name="other", min_replicas=1)  # the team is full now: 3 + 1 of 4
    endpoint.refresh_from_db()
    grown = services.update_endpoint(member, endpoint, {"min_replicas": 3})
    assert (grown.min_replicas, reserved(grown)) == (3, 3)


def test_a_lower_minimum_releases_units_at_once_and_admits_the_queue(create, member, team):
    endpoint = create(min_replicas=3, max_replicas=4)
    queued = submit_run(member, team, {"name": "train", "image": "registry.example.com/ml/t:1",
                                       "command": ["python", "t.py"], "flavor": "a100-80gb", "gpus_per_worker": 2})
    assert queued.state == "queued"
    services.update_endpoint(member, endpoint, {"min_replicas": 1})
    assert reserved(endpoint) == 1
    assert rec.reconcile().admitted == [queued.ref]


def test_a_patch_reapplies_the_objects(create, member, published, django_capture_on_commit_callbacks):
    endpoint = create()
    published.clear()
    with django_capture_on_commit_callbacks(execute=True):
        services.update_endpoint(member, endpoint, {"image": "registry.example.com/serving/vllm:0.7"})
    assert published == [("workloads.tasks.apply_workload", ("ep", endpoint.pk))]


def test_a_queued_endpoint_cannot_be_resized(create, member):
    create(name="first", min_replicas=4)
    queued = create(name="second")
    with pytest.raises(services.EndpointConflict):
        services.update_endpoint(member, queued, {"min_replicas": 2})


def test_delete_releases_the_quota_and_ends_deleted_once_the_objects_are_gone(
        create, member, fake_backend, published, django_capture_on_commit_callbacks):
    endpoint = create(min_replicas=2)
    with django_capture_on_commit_callbacks(execute=True):
        deleted = services.delete_endpoint(member, endpoint)
    assert deleted.state == EndpointState.DELETING
    assert reserved(endpoint) == 0
    assert ("workloads.tasks.delete_workload", ("ep", endpoint.pk)) in published
    with pytest.raises(services.EndpointConflict):
        services.delete_endpoint(member, deleted)
    report = rec.reconcile(fake_backend)  # nothing of it is on the cluster any more
    assert (endpoint.ref, "deleting", "deleted") in report.transitions
    endpoint.refresh_from_db()
    assert endpoint.state == EndpointState.DELETED
