"""What the reconciler makes of each observation of an endpoint: its reason, never left stale.

A scripted sequence of observations (tests/inference/scripted.py) goes through the real
reconcile cycle on the fake backend.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from inference import services
from inference.chart import replicas_chart
from inference.constants import EndpointState, ScalingDecision
from inference.models import InferenceEndpoint
from tests.inference.conftest import endpoint_payload
from tests.inference.scripted import show
from workloads.cycle import reconcile as rec
from workloads.tasks import apply_workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def deployed(member, team, ep_quota, published, fake_backend):
    """``deployed(**fields)``: an endpoint created and applied to the fake cluster."""

    def make(**overrides) -> InferenceEndpoint:
        endpoint = services.create_endpoint(member, team, endpoint_payload(**overrides))
        assert apply_workload("ep", endpoint.pk) == "applied"
        return fetch(endpoint)

    return make


def fetch(endpoint) -> InferenceEndpoint:
    return InferenceEndpoint.objects.select_related("team", "flavor").get(pk=endpoint.pk)


class Observer:
    """Shows the fake cluster something, runs one reconcile cycle a few seconds later."""

    def __init__(self, backend, endpoint):
        self.backend, self.endpoint, self.now = backend, endpoint, timezone.now()

    def see(self, **shown) -> InferenceEndpoint:
        self.now += timedelta(seconds=5)
        show(self.backend, self.endpoint, at=self.now, **shown)
        rec.reconcile(self.backend, now=self.now)
        self.endpoint = fetch(self.endpoint)
        return self.endpoint


def test_the_reason_is_derived_again_from_every_observation(deployed, fake_backend, member):
    observer = Observer(fake_backend, deployed(min_replicas=1, max_replicas=4))
    seen = observer.see(desired=1, ready=0)
    assert seen.state == EndpointState.DEPLOYING
    seen = observer.see(desired=1, ready=1)
    assert (seen.state, seen.reason) == (EndpointState.READY, "")
    seen = observer.see(desired=4, ready=3)
    assert (seen.state, seen.reason) == (EndpointState.READY, "scaling up: 3 of 4 replicas ready")
    # All four ready: the words of the last observation are gone, not kept because the state held.
    seen = observer.see(desired=4, ready=4)
    assert (seen.state, seen.replicas, seen.reason) == (EndpointState.READY, 4, "")
    # The same after an edit (a new image rolls) and across observations that repeat.
    services.update_endpoint(member, seen, {"image": "registry.example.com/serving/vllm:0.7"})
    seen = observer.see(desired=4, ready=2, running=4)
    assert seen.reason == "scaling up: 2 of 4 replicas ready"
    for _ in range(3):
        seen = observer.see(desired=4, ready=4)
        assert seen.reason == ""


def test_a_capped_reason_holds_while_capped_and_goes_when_demand_falls(deployed, fake_backend,
                                                                       django_capture_on_commit_callbacks):
    observer = Observer(fake_backend, deployed(min_replicas=1, max_replicas=6))  # the team may hold 4 A100s
    for replicas in (1, 2, 3, 4):
        seen = observer.see(desired=replicas, ready=replicas, wants_more=True)
        assert seen.replica_ceiling == min(replicas + 1, 4)
    capped = "capped at 4 replicas by the team quota (a100-80gb 4 of 4 in use)"
    for _ in range(3):  # still wanting more: the refusal's words hold, cycle after cycle
        seen = observer.see(desired=4, ready=4, wants_more=True)
        assert (seen.state, seen.reason) == (EndpointState.READY, capped)
    # The autoscaler no longer wants more than the ceiling: the capped words go.
    seen = observer.see(desired=4, ready=4, wants_more=False)
    assert seen.reason == ""


# -- the replica samples the chart draws ------------------------------------------------------


def samples(endpoint) -> list[tuple[int, int, int]]:
    return list(endpoint.replica_samples.order_by("at", "pk").values_list("ready", "desired", "ceiling"))


def test_observed_counts_are_sampled_on_change_only(deployed, fake_backend, api):
    observer = Observer(fake_backend, deployed(min_replicas=1, max_replicas=4))
    assert samples(observer.endpoint) == [(0, 0, 1)]  # from its creation
    observer.see(desired=1, ready=0)
    ready_at = observer.now + timedelta(seconds=5)
    observer.see(desired=1, ready=1)
    assert samples(observer.endpoint) == [(0, 0, 1), (0, 1, 1), (1, 1, 1)]

    # An endpoint that stays as it is writes nothing, cycle after cycle.
    for _ in range(3):
        with CaptureQueriesContext(connection) as queries:
            observer.see(desired=1, ready=1)
        writes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith(("INSERT", "UPDATE"))]
        assert not [sql for sql in writes if "inference_" in sql], writes
    assert len(samples(observer.endpoint)) == 3

    # Burst granted: the ceiling's move and the new counts are sampled too.
    observer.see(desired=1, ready=1, wants_more=True)
    observer.see(desired=2, ready=1)
    observer.see(desired=2, ready=2)
    assert samples(observer.endpoint)[3:] == [(1, 1, 2), (1, 2, 2), (2, 2, 2)]

    # The chart draws what was observed: ready is 1 from when it was ready, not 0 until now.
    endpoint = observer.endpoint
    rows = list(reversed(endpoint.replica_samples.values_list("at", "ready", "desired", "ceiling")))
    chart = replicas_chart(rows, observer.now, (2, 2, 2), 1, 4)
    ready_line = [tuple(map(float, p.split(","))) for p in chart.lines[0].points.split()]
    zero = ready_line[0][1]
    after_ready = _x_of(chart, rows[0][0], observer.now, ready_at) + 1
    assert [y for x, y in ready_line if x <= after_ready][-1] < zero  # drawn at 1 from then on, not at 0

    # The API: replicas/ gives the samples, scaling/ keeps Slipway's decisions only.
    replicas = api.get(f"/api/v1/endpoints/{endpoint.pk}/replicas/").json()["results"]
    assert [(r["ready"], r["desired"], r["ceiling"]) for r in replicas] == list(reversed(samples(endpoint)))
    decisions = [r["decision"] for r in api.get(f"/api/v1/endpoints/{endpoint.pk}/scaling/").json()["results"]]
    assert decisions == [ScalingDecision.BURST_GRANTED, ScalingDecision.ADMITTED]


def _x_of(chart, start, now, at) -> float:
    from inference.chart import LEFT, RIGHT

    span = (now - start).total_seconds()
    return LEFT + (chart.width - LEFT - RIGHT) * (at - start).total_seconds() / span


def test_the_charts_time_labels_stay_inside_it(deployed):
    start = timezone.now()
    rows = [(start, 0, 0, 1), (start + timedelta(minutes=3), 1, 1, 1)]
    chart = replicas_chart(rows, start + timedelta(minutes=30), (1, 1, 1), 1, 4)
    anchors = [(x, anchor) for x, _label, anchor in chart.x_ticks]
    # The last label ends at the plot's right end rather than being centred on it (half outside).
    assert anchors[0][1] == "start" and anchors[-1] == (chart.width - 12, "end")
    week = replicas_chart([(start - timedelta(days=6), 0, 0, 1), *rows], start + timedelta(minutes=30), (1, 1, 1), 1, 4)
    assert all(" " in label for _x, label, _a in week.x_ticks)  # over days, labels name the day
