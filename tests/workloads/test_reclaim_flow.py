"""Reclaim end to end on the simulated cluster, through the public API (docs/design.md "Sharing, preemption, clusters", issue #23).

Vision borrows nlp-platform's idle A100s; nlp-platform submits; after the cohort's preemption
delay vision's borrowed run gets its notice, its pods stop, it goes back to the queue at its
old place with a reason naming who reclaimed what, and nlp-platform's run starts. At every
cycle no team holds more than its nominal quota plus what the cohort lends, the cohort never
more than the sum of its nominal quotas, the cluster never runs more GPUs than it has, and the
ledger holds no piece of time twice.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import pairwise

import pytest

from billing.models import PreemptionEvent, QuotaHold, UsageRecord
from cluster.backends.base import NOTICE_ANNOTATION
from jobs.constants import RunState
from jobs.models import TrainingRun
from quotas.demo import seed_team_quotas
from quotas.models import QueuedRequest
from sandbox import faults
from teams.models import AuditEvent
from tests.factories import cohort_pair, make_team, member_api
from tests.jobs.conftest import post_share_run
from tests.workloads.timeline import INTERVAL, scripted_timeline

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 11, 24, 9, 0, 0, tzinfo=UTC)


@pytest.fixture
def timeline(published, monkeypatch, settings):
    settings.SLIPWAY_PREEMPTION_GRACE_SECONDS = 30
    return scripted_timeline(published, monkeypatch, settings, START)


def held() -> dict[str, int]:
    totals: dict[str, int] = {}
    for team, units in QuotaHold.objects.held().values_list("team__slug", "units"):
        totals[team] = totals.get(team, 0) + units
    return totals


def running_gpus() -> int:
    return sum(run.total_units for run in TrainingRun.objects.filter(state=RunState.RUNNING))


def test_a_lender_takes_its_quota_back_from_a_borrower(timeline, flavors, staff):
    _nlp, vision = cohort_pair(staff, reclaim="any", min_runtime_minutes=1, preemption_delay_seconds=30)
    alice, alice_user = member_api("vision", "alice")
    alice.force_login(alice_user)
    noor, _ = member_api("nlp-platform", "noor")
    samples: list[dict[str, int]] = []

    def cycle(count: int = 1) -> None:
        for _ in range(count):
            timeline.cycle()
            totals = held()
            samples.append(totals)
            assert all(units <= 8 for units in totals.values()), totals  # nominal 4 + what the cohort lends
            assert sum(totals.values()) <= 8, totals  # never above the sum of the nominal quotas
            assert running_gpus() <= 8  # the cluster's A100s

    # 1. Vision runs 4 of its own and borrows nlp-platform's 4 idle units.
    own = post_share_run(alice, "vision", "own", "3h")
    borrowed = post_share_run(alice, "vision", "borrowed", "3h")
    for _ in range(12):
        cycle()
        if TrainingRun.objects.filter(pk__in=[own, borrowed], state=RunState.RUNNING).count() == 2:
            break
    assert alice.get(f"/api/v1/runs/{borrowed}/").json()["borrowed_units"] == 4
    assert TrainingRun.objects.get(pk=borrowed).state == RunState.RUNNING, TrainingRun.objects.get(pk=borrowed).reason

    # 2. Past the cohort's min runtime nlp-platform submits: it waits (its units are lent) ...
    timeline.advance(90)
    mine = post_share_run(noor, "nlp-platform", "mine", "3h")
    assert noor.get(f"/api/v1/runs/{mine}/").json()["state"] == "queued"
    cycle(1)
    assert TrainingRun.objects.get(pk=borrowed).preemptions == 0  # the preemption delay: capacity may free itself

    # 3. ... and after the delay takes them back: the notice, then the pods stop (the sandbox keeps
    # them through the 30 s grace, as a cluster does), then the queue.
    notice_seen = pod_notice = False
    for _ in range(24):
        cycle()
        victim = TrainingRun.objects.get(pk=borrowed)
        notice_seen |= victim.reason.startswith("being preempted: team nlp-platform reclaims 4\u00d7 a100-80gb")
        if victim.preempting_since is not None:  # its pods carry the deadline while they stop
            annotations = [p["metadata"].get("annotations") or {} for p in timeline.backend.pods(victim.address)]
            pod_notice |= any(NOTICE_ANNOTATION in a for a in annotations)
        if TrainingRun.objects.get(pk=mine).state == RunState.RUNNING:
            break
    victim = TrainingRun.objects.get(pk=borrowed)
    assert notice_seen and pod_notice
    assert victim.state == RunState.QUEUED and victim.preemptions == 1 and victim.last_preempted_at is not None
    assert victim.reason.startswith("preempted: team nlp-platform reclaimed 4\u00d7 a100-80gb of its quota; ")
    assert TrainingRun.objects.get(pk=mine).state == RunState.RUNNING
    assert TrainingRun.objects.get(pk=own).state == RunState.RUNNING  # vision's own quota was never touched

    # Back at its old place: the entry is dated from its first submission, ahead of anything later.
    entry = QueuedRequest.objects.get(ref=victim.ref)
    assert entry.created_at == victim.created_at
    later = post_share_run(alice, "vision", "later", "3h")
    body = alice.get(f"/api/v1/runs/{borrowed}/").json()
    assert (body["state"], body["queue_position"], body["preemptions"]) == ("queued", 1, 1)
    assert alice.get(f"/api/v1/runs/{later}/").json()["queue_position"] == 2

    # The preemption log (API and page) and the audit trail say who took what.
    log = alice.get(f"/api/v1/runs/{borrowed}/preemptions/").json()
    assert len(log) == 1 and log[0]["by_team"] == "nlp-platform" and log[0]["units"] == 4
    assert log[0]["grace_seconds"] == 30 and Decimal(log[0]["lost_gpu_hours"]) > 0
    assert noor.get(f"/api/v1/runs/{borrowed}/preemptions/").status_code == 404  # another team's run
    audit = AuditEvent.objects.get(action=AuditEvent.Action.WORKLOAD_PREEMPTED)
    assert audit.target == victim.ref and audit.team == vision
    assert PreemptionEvent.objects.get().for_ref == f"run:{mine}"
    page = alice.get(f"/runs/{borrowed}/").content.decode()  # the run's page (a session works too)
    assert 'id="preemptions"' in page
    assert "preempted: team nlp-platform reclaimed 4\u00d7 a100-80gb of its quota" in page
    assert 'id="preemptions"' not in alice.get(f"/runs/{own}/").content.decode()  # never preempted: no card

    # 4. No piece of time is billed twice, and the victim's attempt was billed up to its stop.
    for ref in set(UsageRecord.objects.values_list("ref", flat=True)):
        rows = list(UsageRecord.objects.filter(ref=ref).order_by("start"))
        assert all(a.end <= b.start for a, b in pairwise(rows)), ref
    # The victim was billed through its grace, to the cycle that saw its pods gone; the units it
    # gave back were billed to nlp-platform only from then on: never to both at once.
    victim_end = max(r.end for r in UsageRecord.objects.filter(ref=victim.ref))
    assert victim.last_preempted_at <= victim_end <= victim.last_preempted_at + timedelta(seconds=30 + INTERVAL)
    reclaimer = TrainingRun.objects.get(pk=mine)
    starts = [r.start for r in UsageRecord.objects.filter(ref=reclaimer.ref)] + [reclaimer.billed_until]
    assert reclaimer.open_units == 4 and min(starts) >= victim_end  # its open segment, if nothing closed yet
    # A cycle later nothing moves: no preemption loop (nlp-platform is within its nominal quota).
    cycle(6)
    assert PreemptionEvent.objects.count() == 1
    assert TrainingRun.objects.get(pk=borrowed).state == RunState.QUEUED


def test_a_preempted_run_returns_when_the_units_free_up(timeline, flavors, staff):
    cohort_pair(staff, reclaim="any", min_runtime_minutes=0, preemption_delay_seconds=0)
    alice, _ = member_api("vision", "alice")
    noor, _ = member_api("nlp-platform", "noor")
    post_share_run(alice, "vision", "own", "2h")
    borrowed = post_share_run(alice, "vision", "borrowed", "2h")
    timeline.cycles(6)
    assert TrainingRun.objects.get(pk=borrowed).state == RunState.RUNNING
    mine = post_share_run(noor, "nlp-platform", "short", "2m")
    for _ in range(12):  # the preemption, then its 30 s grace
        timeline.cycle()
    run = TrainingRun.objects.get(pk=borrowed)
    assert (run.state, run.preemptions) == (RunState.QUEUED, 1)
    assert "; now waiting for quota: needs 4\u00d7 a100-80gb, 4 of 4 in use" in run.reason
    # nlp-platform's short run ends; the freed units are lent again and the victim runs on.
    for _ in range(40):
        timeline.cycle()
        if TrainingRun.objects.get(pk=mine).state == RunState.SUCCEEDED and \
                TrainingRun.objects.get(pk=borrowed).state == RunState.RUNNING:
            break
    run = TrainingRun.objects.get(pk=borrowed)
    assert (run.state, run.preemptions) == (RunState.RUNNING, 1)
    assert QuotaHold.objects.get(ref=run.ref, released_at=None).borrowed_units == 4


def test_a_spot_run_on_a_reclaimed_node_waits_again_and_runs_elsewhere_later(timeline, flavors):
    """The provider takes a spot node (``manage.py sandbox reclaim-node``): the run on it is not
    failed, it queues again with "interrupted: spot capacity reclaimed", and once the node is
    back it runs again."""
    team = make_team("vision")
    seed_team_quotas(team, {"l4": 1}, Decimal("100000"))
    alice, _ = member_api("vision", "alice")
    response = alice.post("/api/v1/runs/", {
        "team": "vision", "name": "cheap", "image": "registry.example.com/ml/trainer:1.4", "command": ["python", "t.py"],
        "flavor": "l4", "gpus_per_worker": 1, "spot": True, "max_retries": 0, "env": {"SLIPWAY_SIM_DURATION": "3h"},
    }, format="json")
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]
    for _ in range(12):
        timeline.cycle()
        if TrainingRun.objects.get(pk=run_id).state == RunState.RUNNING:
            break
    node = timeline.backend.pods(TrainingRun.objects.get(pk=run_id).address)[0]["spec"]["nodeName"]
    assert node.startswith("gpu-l4-spot")
    faults.reclaim_node(timeline.backend, node, now=timeline.now)
    seen = set()
    for _ in range(6):
        timeline.cycle()
        seen.add(TrainingRun.objects.get(pk=run_id).state)
    run = TrainingRun.objects.get(pk=run_id)
    assert RunState.FAILED not in seen and run.state != RunState.FAILED
    event = PreemptionEvent.objects.get(ref=run.ref)
    assert event.cause == "spot" and event.reason.startswith("interrupted: spot capacity reclaimed (TerminationByKubelet)")
    # The other spot node had room: it was admitted again at once and runs there.
    for _ in range(12):
        timeline.cycle()
        if TrainingRun.objects.get(pk=run_id).state == RunState.RUNNING:
            break
    run = TrainingRun.objects.get(pk=run_id)
    assert run.state == RunState.RUNNING
    assert timeline.backend.pods(run.address)[0]["spec"]["nodeName"] != node
