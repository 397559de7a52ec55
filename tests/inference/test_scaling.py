"""Burst replicas: granted step by step from free quota, capped with a reason, reclaimed, released."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.ledger import record_usage
from billing.models import QuotaHold, TeamBudget
from cluster.status import WorkloadStatus
from inference import scaling, services
from inference.constants import EndpointState, ScalingDecision
from inference.models import InferenceEndpoint
from jobs.services import submit_run

pytestmark = pytest.mark.django_db


def wants(replicas: int, desired: int, limited: bool, metric: float | None = None) -> WorkloadStatus:
    return WorkloadStatus("ready", "", replicas=replicas, desired_replicas=desired, scaling_limited=limited,
                          metric_value=metric)


def ready(endpoint) -> InferenceEndpoint:
    InferenceEndpoint.objects.filter(pk=endpoint.pk).update(state=EndpointState.READY)
    return InferenceEndpoint.objects.select_related("team", "flavor").get(pk=endpoint.pk)


def reserved(endpoint) -> int:
    return QuotaHold.objects.held().get(ref=endpoint.ref).units


def test_it_grants_burst_one_replica_at_a_time_then_caps_it_by_the_team_quota(
        create, published, django_capture_on_commit_callbacks):
    endpoint = ready(create(min_replicas=1, max_replicas=6))
    now = timezone.now()
    published.clear()
    for step in range(3):  # the quota is 4 A100s
        with django_capture_on_commit_callbacks(execute=True):
            assert scaling.follow(endpoint, wants(1 + step, 1 + step, limited=True, metric=95.0), now) is False
        endpoint = ready(endpoint)
        assert (endpoint.replica_ceiling, reserved(endpoint)) == (2 + step, 2 + step)
    # Full: the next step is refused, with the reason, and recorded once however often it is asked.
    for _ in range(3):
        scaling.follow(endpoint, wants(4, 4, limited=True), now)
    endpoint = ready(endpoint)
    assert (endpoint.replica_ceiling, reserved(endpoint)) == (4, 4)
    decisions = list(endpoint.scaling_events.values_list("decision", flat=True))
    assert decisions == [ScalingDecision.CAPPED_BY_QUOTA, ScalingDecision.BURST_GRANTED, ScalingDecision.BURST_GRANTED,
                         ScalingDecision.BURST_GRANTED, ScalingDecision.ADMITTED]
    assert endpoint.reason == "capped at 4 replicas by the team quota (a100-80gb 4 of 4 in use)"
    assert endpoint.scaling_events.filter(decision=ScalingDecision.BURST_GRANTED).last().metric_value == 95.0
    # Each granted step re-applies the ScaledObject's ceiling.
    assert published == [("workloads.tasks.apply_workload", ("ep", endpoint.pk))] * 3


def test_it_never_grows_past_the_maximum(create):
    endpoint = ready(create(min_replicas=1, max_replicas=2))
    now = timezone.now()
    scaling.follow(endpoint, wants(1, 1, limited=True), now)
    endpoint = ready(endpoint)
    scaling.follow(endpoint, wants(2, 2, limited=True), now)
    assert ready(endpoint).replica_ceiling == 2 and reserved(endpoint) == 2


def test_it_caps_burst_by_the_budget_once_the_alert_threshold_is_crossed(create, member):
    endpoint = ready(create(min_replicas=1, max_replicas=4))
    now = timezone.now()
    TeamBudget.objects.filter(team=endpoint.team).update(monthly_limit=Decimal("0.10"))  # alert at 80%
    record_usage(endpoint.team, "run:old", "a100-80gb", member, now - timedelta(minutes=2), now, 1, False)  # 0.14
    scaling.follow(endpoint, wants(1, 1, limited=True), now)
    endpoint = ready(endpoint)
    assert endpoint.replica_ceiling == 1 and reserved(endpoint) == 1
    assert endpoint.scaling_events.first().decision == ScalingDecision.CAPPED_BY_BUDGET
    assert "by the budget" in endpoint.reason


def test_queued_work_of_the_team_reclaims_the_burst_first(create, member, team):
    endpoint = ready(create(min_replicas=1, max_replicas=4))
    now = timezone.now()
    for step in range(3):
        scaling.follow(endpoint, wants(1 + step, 1 + step, limited=True), now)
        endpoint = ready(endpoint)
    run = submit_run(member, team, {"name": "train", "image": "registry.example.com/ml/t:1",
                                    "command": ["python", "t.py"], "flavor": "a100-80gb", "gpus_per_worker": 2})
    assert run.state == "queued"
    assert scaling.follow(endpoint, wants(4, 4, limited=False), now) is True  # units given back
    endpoint = ready(endpoint)
    assert (endpoint.replica_ceiling, reserved(endpoint)) == (1, 1)
    assert endpoint.scaling_events.first().decision == ScalingDecision.BURST_RECLAIMED
    # While the queue waits for the flavor, the endpoint does not grow again.
    scaling.follow(endpoint, wants(1, 1, limited=True), now)
    assert ready(endpoint).replica_ceiling == 1


# -- a cycle's copy of the row is older than the row ---------------------------------------------------
# The reconcile cycle reads the endpoints before it asks the cluster: a PATCH or a delete may land in between,
# and every move is decided again on the row as it is under the team's lock.


def test_a_cycle_with_a_stale_row_reclaims_no_burst_below_a_minimum_raised_meanwhile(create, member, team):
    endpoint = ready(create(min_replicas=1, max_replicas=4))
    scaling.follow(endpoint, wants(1, 2, limited=True), timezone.now())  # burst: ceiling 2
    stale = ready(endpoint)  # what the cycle read: min 1, ceiling 2
    assert (stale.ceiling, reserved(endpoint)) == (2, 2)
    services.update_endpoint(member, ready(endpoint), {"min_replicas": 3})
    assert (ready(endpoint).ceiling, reserved(endpoint)) == (3, 3)
    # Queued work of the team waits for the flavor (2 A100s, 1 left): burst would be reclaimed first.
    queued = create(name="other", min_replicas=2, max_replicas=2)
    assert queued.state == EndpointState.QUEUED
    assert scaling.follow(stale, wants(2, 2, limited=False), timezone.now()) is False
    now = ready(endpoint)
    # The raised minimum is guaranteed: no burst is left to reclaim, the ceiling and the hold stay at it.
    assert (now.min_replicas, now.ceiling, reserved(endpoint)) == (3, 3, 3)
    assert stale.ceiling == 3  # what the cycle samples next is the ceiling now


def test_a_cycle_with_a_stale_row_grows_no_burst_past_a_maximum_lowered_meanwhile(create, member):
    endpoint = ready(create(min_replicas=1, max_replicas=4))
    scaling.follow(endpoint, wants(1, 2, limited=True), timezone.now())
    stale = ready(endpoint)  # max 4, ceiling 2
    services.update_endpoint(member, ready(endpoint), {"max_replicas": 2})
    assert ready(endpoint).ceiling == 2
    scaling.follow(stale, wants(2, 3, limited=True), timezone.now())
    now = ready(endpoint)
    assert (now.max_replicas, now.ceiling, reserved(endpoint)) == (2, 2, 2)
    assert now.scaling_events.first().decision == ScalingDecision.MINIMUM_CHANGED  # nothing granted after it


@pytest.mark.parametrize("wanted", [3, 1], ids=["grow", "release"])
def test_a_cycle_with_a_stale_row_moves_nothing_of_an_endpoint_deleted_meanwhile(create, member, wanted):
    endpoint = ready(create(min_replicas=1, max_replicas=4, scale_down_delay_seconds=60))
    now = timezone.now()
    scaling.follow(endpoint, wants(1, 2, limited=True), now)
    scaling.follow(ready(endpoint), wants(2, 1, limited=False), now)  # demand below the ceiling since now
    stale = ready(endpoint)
    services.delete_endpoint(member, ready(endpoint))
    events = endpoint.scaling_events.count()
    # The cycle grows (wants 3) or releases (wants 1 for the whole delay) on its copy: nothing to do, no LookupError.
    assert scaling.follow(stale, wants(2, wanted, limited=wanted > 2), now + timedelta(seconds=60)) is False
    assert not QuotaHold.objects.held().filter(ref=endpoint.ref).exists()
    assert endpoint.scaling_events.count() == events


def test_a_cycle_with_a_stale_row_starts_no_scale_down_clock_over_a_patch_that_restarted_it(create, member):
    """A PATCH of the sizes moves the ceiling and restarts the scale-down clock (None): the cycle's observation, of
    the ceiling before it, started it again at its own instant (it wrote unconditionally), for the new ceiling."""
    endpoint = ready(create(min_replicas=2, max_replicas=4, scale_down_delay_seconds=300))
    now = timezone.now()
    scaling.follow(endpoint, wants(2, 3, limited=True), now)  # burst: ceiling 3
    stale = ready(endpoint)  # what the cycle read: min 2, ceiling 3, no clock
    services.update_endpoint(member, ready(endpoint), {"min_replicas": 1})  # ceiling 2, the clock restarted
    assert (ready(endpoint).ceiling, ready(endpoint).demand_below_ceiling_since) == (2, None)
    scaling.follow(stale, wants(3, 1, limited=False), now)  # 1 wanted, below the ceiling it read
    assert ready(endpoint).demand_below_ceiling_since is None
    # The next observation, of the ceiling now, starts it; and clears it as it did.
    later = now + timedelta(seconds=5)
    scaling.follow(ready(endpoint), wants(2, 1, limited=False), later)
    assert ready(endpoint).demand_below_ceiling_since == later
    scaling.follow(ready(endpoint), wants(2, 2, limited=False), later + timedelta(seconds=5))
    assert ready(endpoint).demand_below_ceiling_since is None


@pytest.mark.parametrize("patch", [{"max_replicas": 3}, {"scale_down_delay_seconds": 3600}],
                         ids=["clock-restarted", "delay-lengthened"])
def test_a_cycle_with_a_stale_row_releases_no_burst_on_a_clock_a_patch_restarted_or_lengthened(create, member, patch):
    """The release was judged on the cycle's copy: its clock and its delay. A PATCH meanwhile that restarted the clock
    (the sizes) or lengthened the delay still saw the burst released at the old clock's end."""
    endpoint = ready(create(min_replicas=1, max_replicas=4, scale_down_delay_seconds=300))
    now = timezone.now()
    scaling.follow(endpoint, wants(1, 2, limited=True), now)
    scaling.follow(ready(endpoint), wants(2, 3, limited=True), now)  # burst: ceiling 3
    scaling.follow(ready(endpoint), wants(3, 1, limited=False), now)  # demand below it: the clock starts now
    stale = ready(endpoint)
    assert (stale.ceiling, stale.demand_below_ceiling_since) == (3, now)
    services.update_endpoint(member, ready(endpoint), patch)
    assert ready(endpoint).ceiling == 3  # the burst kept by the PATCH
    assert scaling.follow(stale, wants(3, 1, limited=False), now + timedelta(seconds=300)) is False
    assert ready(endpoint).ceiling == 3
    assert not endpoint.scaling_events.filter(decision=ScalingDecision.BURST_RELEASED).exists()


def test_the_ceiling_comes_down_after_the_scale_down_delay(create):
    endpoint = ready(create(min_replicas=1, max_replicas=4, scale_down_delay_seconds=300))
    now = timezone.now()
    for step in range(2):
        scaling.follow(endpoint, wants(1 + step, 1 + step, limited=True), now)
        endpoint = ready(endpoint)
    assert endpoint.replica_ceiling == 3
    # Demand falls to one replica: nothing moves before the delay...
    assert scaling.follow(endpoint, wants(3, 1, limited=False), now) is False
    endpoint = ready(endpoint)
    assert endpoint.demand_below_ceiling_since == now
    scaling.follow(endpoint, wants(2, 1, limited=False), now + timedelta(seconds=299))
    assert ready(endpoint).replica_ceiling == 3
    # ...and after it, the ceiling and the hold fall to what is wanted.
    assert scaling.follow(ready(endpoint), wants(1, 1, limited=False), now + timedelta(seconds=300)) is True
    endpoint = ready(endpoint)
    assert (endpoint.replica_ceiling, reserved(endpoint)) == (1, 1)
    assert endpoint.scaling_events.first().decision == ScalingDecision.BURST_RELEASED


def test_demand_rising_again_resets_the_scale_down_delay(create):
    endpoint = ready(create(min_replicas=1, max_replicas=4))
    now = timezone.now()
    scaling.follow(endpoint, wants(1, 1, limited=True), now)
    endpoint = ready(endpoint)
    scaling.follow(endpoint, wants(2, 1, limited=False), now)
    assert ready(endpoint).demand_below_ceiling_since == now
    scaling.follow(ready(endpoint), wants(2, 2, limited=False), now + timedelta(seconds=10))
    assert ready(endpoint).demand_below_ceiling_since is None


def test_cost_per_hour_range_spans_minimum_to_maximum(create):
    endpoint = create(min_replicas=1, max_replicas=3, flavor="a100-1g.10gb")
    low, high = endpoint.cost_per_hour_range
    assert (low, high) == (Decimal("0.5857"), Decimal("1.7571"))
