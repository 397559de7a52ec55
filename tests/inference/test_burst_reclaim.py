"""Reclaim takes an endpoint's borrowed burst back first, by shrinking it (its minimum never borrows)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import PreemptionEvent, QuotaHold
from inference import scaling
from inference.constants import EndpointState, ScalingDecision
from inference.models import InferenceEndpoint
from jobs.services import submit_run
from quotas import admission
from quotas import services as quota_services
from quotas.demo import seed_team_quotas
from teams.models import Role
from tests.factories import add_member, make_team, make_user
from tests.inference.test_scaling import ready, wants
from workloads.cycle import preemption

pytestmark = pytest.mark.django_db


def test_a_borrowed_burst_shrinks_for_the_lender_and_its_run_is_admitted(create, team, staff, fake_backend,
                                                                         django_capture_on_commit_callbacks):
    vision = make_team("vision")
    seed_team_quotas(vision, {"a100-80gb": 4}, Decimal("100000"))
    quota_services.set_cohort(staff, "research", teams=[team, vision], min_runtime_minutes=0,
                              preemption_delay_seconds=0)
    endpoint = ready(create(min_replicas=1, max_replicas=8))
    now = timezone.now()
    for step in range(7):  # 4 of its own team's A100s, then vision's 4 idle ones
        scaling.follow(endpoint, wants(1 + step, 1 + step, limited=True), now)
        endpoint = ready(endpoint)
    held = QuotaHold.objects.held().get(ref=endpoint.ref)
    assert (endpoint.replica_ceiling, held.units, held.borrowed_units) == (8, 8, 4)

    vera = make_user("vera")
    add_member(vision, vera, Role.MEMBER)
    run = submit_run(vera, vision, {"name": "train", "image": "registry.example.com/ml/t:1",
                                    "command": ["python", "t.py"], "flavor": "a100-80gb", "gpus_per_worker": 4})
    assert run.state == "queued"

    with django_capture_on_commit_callbacks(execute=True):
        assert preemption.reclaim(timezone.now()) == [endpoint.ref]
    endpoint = InferenceEndpoint.objects.get(pk=endpoint.pk)
    held = QuotaHold.objects.held().get(ref=endpoint.ref)
    assert (endpoint.replica_ceiling, held.units, held.borrowed_units) == (4, 4, 0)
    assert endpoint.state == EndpointState.READY and endpoint.preemptions == 1 and endpoint.preempting_since is None
    event = PreemptionEvent.objects.get(ref=endpoint.ref)
    assert (event.by_team, event.units, event.grace_seconds, event.lost_gpu_hours) == (vision, 4, 0, 0)
    assert event.reason == "preempted: team vision reclaimed 4\u00d7 a100-80gb of its quota; no work lost"
    assert endpoint.scaling_events.first().decision == ScalingDecision.BURST_RECLAIMED
    assert "delete" not in fake_backend.calls  # a burst shrinks; nothing is stopped

    assert admission.admit_waiting(vision) == [run.ref]
