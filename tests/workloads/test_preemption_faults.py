"""A preemption cut short — the cluster refusing the notice and the delete, as when the worker
dies right after choosing its victim — is finished by later cycles: one preemption logged, the
victim stopped once its grace has passed and queued again once, nothing billed twice."""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise

import pytest
from django.utils import timezone

from cluster.errors import Transient
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.services import submit_run
from quotas.models import PreemptionEvent, UsageRecord
from teams.models import Role
from tests.factories import add_member, cohort_pair, make_user
from tests.jobs.test_reconcile import iso
from workloads import reconcile as rec

pytestmark = pytest.mark.django_db


def spec(name: str) -> dict:
    return {"name": name, "image": "registry.example.com/ml/trainer:1.4", "command": ["python", "t.py"],
            "flavor": "a100-80gb", "gpus_per_worker": 4}


def test_a_preemption_whose_delete_was_lost_is_finished_by_the_reconciler(flavors, staff, fake_backend, published,
                                                                          settings):
    settings.SLIPWAY_PREEMPTION_GRACE_SECONDS = 30
    nlp, vision = cohort_pair(staff, min_runtime_minutes=0, preemption_delay_seconds=0)
    alice, noor = make_user("alice"), make_user("noor")
    add_member(vision, alice, Role.MEMBER)
    add_member(nlp, noor, Role.MEMBER)
    t0 = timezone.now().replace(microsecond=0)
    runs = [submit_run(alice, vision, spec(name)) for name in ("own", "borrowed")]
    for run in runs:
        fake_backend.apply([{"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": run.cluster_name, "namespace": run.namespace,
            "labels": {"app.kubernetes.io/managed-by": "slipway", "slipway.dev/workload": run.cluster_name}}}])
        fake_backend.set_running(run.namespace, run.cluster_name, units=4, started=iso(t0))
    rec.reconcile(fake_backend, now=t0 + timedelta(seconds=5))
    victim = runs[1]
    assert TrainingRun.objects.get(pk=victim.pk).state == RunState.RUNNING
    submit_run(noor, nlp, spec("mine"))

    # The cycle that chooses the victim cannot reach the cluster: the notice and the delete are lost.
    fake_backend.fail_with = Transient("connection reset")
    now = t0 + timedelta(seconds=10)
    report = rec.reconcile(fake_backend, now=now)
    fake_backend.fail_with = None
    assert report.preempted == [victim.ref]
    assert TrainingRun.objects.get(pk=victim.pk).preempting_since == now

    # Its pods still run: its quota stays held through the grace, nothing is chosen again.
    for seconds in (15, 20, 25, 30, 35):
        report = rec.reconcile(fake_backend, now=t0 + timedelta(seconds=seconds))
        assert report.preempted == [] and report.requeued == []
        assert TrainingRun.objects.get(pk=victim.pk).state == RunState.RUNNING
    # Past the grace the cycle deletes it again; the next one sees it gone and queues it.
    rec.reconcile(fake_backend, now=t0 + timedelta(seconds=45))
    report = rec.reconcile(fake_backend, now=t0 + timedelta(seconds=50))
    assert report.requeued == [victim.ref]
    run = TrainingRun.objects.get(pk=victim.pk)
    assert (run.state, run.preemptions) == (RunState.QUEUED, 1)
    assert PreemptionEvent.objects.filter(ref=victim.ref).count() == 1
    rows = list(UsageRecord.objects.filter(ref=victim.ref).order_by("start"))
    assert rows and all(a.end <= b.start for a, b in pairwise(rows))
    assert max(r.end for r in rows) == t0 + timedelta(seconds=50)  # billed to the cycle that saw its pods gone
