"""Within-team priority (issue #24 point 7): a team that allows it lets a queued high-priority run
stop its own low-priority work when it is full — off by default, by the same rules as reclaim."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import PreemptionEvent
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.services import submit_run
from quotas import services as quota_services
from teams.models import Role
from tests.factories import add_member, cohort_pair, make_user
from tests.jobs.conftest import submit_run_as
from workloads.cycle import preemption
from workloads.cycle import reconcile as rec

pytestmark = pytest.mark.django_db


def test_a_full_team_s_high_run_stops_its_own_low_work_when_the_team_allows_it(member, team, quota, staff,
                                                                                fake_backend, published):
    low = submit_run_as(member, team, name="sweep", gpus_per_worker=8, priority="low")
    high = submit_run_as(member, team, name="deadline", gpus_per_worker=4, priority="high")
    assert (low.state, high.state) == (RunState.ADMITTED, RunState.QUEUED)
    later = timezone.now() + timedelta(minutes=11)  # past the default min runtime (10) and delay (30 s)

    assert preemption.reclaim(later) == []  # off by default
    quota_services.set_team_sharing(staff, team, within_team_preemption=True)
    assert preemption.reclaim(later) == [low.ref]
    low.refresh_from_db()
    assert low.preempting_since is not None and low.preemptions == 1
    # The work it makes room for by name, not by ref (issue 34.7); the sentence names the team already.
    assert low.reason == f"being preempted: the team's high-priority run deadline (#{high.pk}) needs its 8\u00d7 a100-80gb; " \
                         "its pods stop within 30 s"
    event = PreemptionEvent.objects.get(ref=low.ref)
    assert (event.cause, event.by_team, event.for_ref) == ("within_team", team, high.ref)
    assert preemption.reclaim(later) == []  # stopping: not taken twice


def test_normal_priority_never_preempts_its_team(member, team, quota, staff, fake_backend, published):
    quota_services.set_team_sharing(staff, team, within_team_preemption=True)
    submit_run_as(member, team, name="sweep", gpus_per_worker=8, priority="low")
    submit_run_as(member, team, name="normal", gpus_per_worker=4, priority="normal")
    assert preemption.reclaim(timezone.now() + timedelta(hours=1)) == []


def test_work_preempted_before_its_first_apply_queues_again_at_the_next_cycle(flavors, fake_backend, published):
    """Placed nowhere yet, so no cluster's cycle follows it: the queue's step requeues it."""
    staff = make_user("root", staff=True)
    nlp, vision = cohort_pair(staff, min_runtime_minutes=0, preemption_delay_seconds=0)
    alice, noor = make_user("alice"), make_user("noor")
    add_member(vision, alice, Role.MEMBER)
    add_member(nlp, noor, Role.MEMBER)
    spec = {"image": "registry.example.com/ml/trainer:1.4", "command": ["python", "t.py"], "flavor": "a100-80gb",
            "gpus_per_worker": 4}
    submit_run(alice, vision, {**spec, "name": "own"})
    borrowed = submit_run(alice, vision, {**spec, "name": "borrowed"})
    submit_run(noor, nlp, {**spec, "name": "mine"})
    assert preemption.reclaim(timezone.now()) == [borrowed.ref]
    report = rec.reconcile(fake_backend)
    assert report.requeued == [borrowed.ref]
    assert TrainingRun.objects.get(pk=borrowed.pk).state == "queued"
    assert TrainingRun.objects.get(name="mine").state == "admitted"
