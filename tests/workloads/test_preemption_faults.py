"""A preemption cut short — the cluster refusing the notice and the delete, as when the worker
dies right after choosing its victim — is finished by later cycles: one preemption logged, the
notice and the graceful delete given again with what is left of the grace (or, the cluster
still unreachable, the victim deleted at once once its grace has passed), queued again once,
nothing billed twice. tests/e2e/test_preemption_kill_e2e.py kills a real worker there."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from django.utils import timezone

from billing.models import PreemptionEvent, UsageRecord
from cluster.backends.base import NOTICE_ANNOTATION
from cluster.errors import Transient
from cluster.status import parse_time
from fleet.services import default_cluster
from jobs.constants import RunState
from jobs.models import TrainingRun
from jobs.services import submit_run
from sandbox.backend import SandboxBackend
from teams.models import Role
from tests.factories import add_member, cohort_pair, make_user, member_api
from tests.jobs.test_reconcile import iso
from tests.workloads.timeline import INTERVAL, scripted_timeline
from workloads.cycle import reconcile as rec
from workloads.models import Attempt

pytestmark = pytest.mark.django_db

START = datetime(2026, 11, 24, 9, 0, 0, tzinfo=UTC)


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
        # What the apply task does: place the run, then apply its objects.
        TrainingRun.objects.filter(pk=run.pk).update(cluster=default_cluster())
        fake_backend.apply([{"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": run.object_name, "namespace": run.namespace,
            "labels": {"app.kubernetes.io/managed-by": "slipway", "slipway.dev/workload": run.object_name}}}])
        fake_backend.set_running(run.namespace, run.object_name, units=4, started=iso(t0))
    rec.reconcile(fake_backend, now=t0 + timedelta(seconds=5))
    victim = runs[1]
    assert TrainingRun.objects.get(pk=victim.pk).state == RunState.RUNNING
    submit_run(noor, nlp, spec("mine"))

    # From the cycle that chooses the victim to the grace's end the cluster cannot be reached: the
    # notice and the delete are lost, and so are the ones later cycles give again.
    fake_backend.fail_with = Transient("connection reset")
    now = t0 + timedelta(seconds=10)
    report = rec.reconcile(fake_backend, now=now)
    assert report.preempted == [victim.ref]
    assert TrainingRun.objects.get(pk=victim.pk).preempting_since == now

    # Its pods still run: its quota stays held through the grace, nothing is chosen again.
    for seconds in (15, 20, 25, 30, 35):
        report = rec.reconcile(fake_backend, now=t0 + timedelta(seconds=seconds))
        assert report.preempted == [] and report.requeued == []
        assert TrainingRun.objects.get(pk=victim.pk).state == RunState.RUNNING
    # Past the grace the cycle deletes it again; the next one sees it gone and queues it.
    fake_backend.fail_with = None
    rec.reconcile(fake_backend, now=t0 + timedelta(seconds=45))
    report = rec.reconcile(fake_backend, now=t0 + timedelta(seconds=50))
    assert report.requeued == [victim.ref]
    run = TrainingRun.objects.get(pk=victim.pk)
    assert (run.state, run.preemptions) == (RunState.QUEUED, 1)
    assert PreemptionEvent.objects.filter(ref=victim.ref).count() == 1
    rows = list(UsageRecord.objects.filter(ref=victim.ref).order_by("start"))
    assert rows and all(a.end <= b.start for a, b in pairwise(rows))
    assert max(r.end for r in rows) == t0 + timedelta(seconds=50)  # billed to the cycle that saw its pods gone


class LosingSandbox(SandboxBackend):
    """The sandbox, whose notice and delete calls are lost while ``losing`` (as with a worker
    killed right after the preemption's commit, or the API server unreachable for a moment)."""

    losing = False

    def annotate_pods(self, address, annotations, **kwargs):
        if self.losing:
            raise Transient("connection reset")
        return super().annotate_pods(address, annotations, **kwargs)

    def delete(self, address, resources, **kwargs):
        if self.losing:
            raise Transient("connection reset")
        return super().delete(address, resources, **kwargs)


@pytest.mark.django_db(transaction=True)
def test_a_lost_notice_and_delete_are_given_again_with_what_is_left_of_the_grace(published, monkeypatch, settings,
                                                                                 flavors, staff):
    """The next cycle sees the victim's pods running without the notice or a deletion: it gives both
    again, with the deadline the preemption set. The pods get to save before it, they stop at it,
    and the run is queued and billed as if nothing had been lost."""
    timeline = scripted_timeline(published, monkeypatch, settings, START, backend=LosingSandbox())
    cohort_pair(staff, reclaim="any", min_runtime_minutes=0, preemption_delay_seconds=0)
    alice, noor = member_api("vision", "alice")[0], member_api("nlp-platform", "noor")[0]
    base = {"image": "registry.example.com/ml/trainer:1.4", "command": ["python", "t.py"], "flavor": "a100-80gb",
            "gpus_per_worker": 4, "env": {"SLIPWAY_SIM_DURATION": "2h"}}
    assert alice.post("/api/v1/runs/", {**base, "team": "vision", "name": "own"}, format="json").status_code == 201
    borrowed = alice.post("/api/v1/runs/", {**base, "team": "vision", "name": "borrowed",
                                            "checkpoint": {"grace_seconds": 60}}, format="json").json()["id"]
    timeline.cycles(6)
    run = TrainingRun.objects.get(pk=borrowed)
    assert run.state == RunState.RUNNING
    assert noor.post("/api/v1/runs/", {**base, "team": "nlp-platform", "name": "mine"}, format="json").status_code == 201

    timeline.backend.losing = True
    timeline.cycle()
    timeline.backend.losing = False
    run = TrainingRun.objects.get(pk=borrowed)
    deadline = run.preempting_since + timedelta(seconds=60)
    pods = timeline.backend.pods(run.address)
    assert pods and not any(NOTICE_ANNOTATION in (p["metadata"].get("annotations") or {}) for p in pods)
    assert not any("deletionTimestamp" in p["metadata"] for p in pods)

    timeline.cycle()
    pods = timeline.backend.pods(run.address)
    assert all(p["metadata"]["annotations"][NOTICE_ANNOTATION] == deadline.isoformat() for p in pods)
    assert {parse_time(p["metadata"]["deletionTimestamp"]) for p in pods} == {deadline}
    for _ in range(20):
        timeline.cycle()
        if TrainingRun.objects.get(pk=borrowed).state == RunState.QUEUED:
            break
    run = TrainingRun.objects.get(pk=borrowed)
    assert (run.state, run.preemptions, run.attempt) == (RunState.QUEUED, 1, 2)
    assert PreemptionEvent.objects.filter(ref=run.ref).count() == 1
    rows = list(UsageRecord.objects.filter(ref=run.ref).order_by("start"))
    assert rows and all(a.end <= b.start for a, b in pairwise(rows))
    assert deadline <= max(r.end for r in rows) <= deadline + timedelta(seconds=INTERVAL)  # to the grace's end


class BusyCluster(SandboxBackend):
    """The sandbox whose controllers run between the notice and the next call (a loaded worker, or a cluster's
    own controllers, which wait for no one): the pods act on the notice before that call lands."""

    def annotate_pods(self, address, annotations, **kwargs):
        count = super().annotate_pods(address, annotations, **kwargs)
        for seconds in (1, 2):  # the pods read the notice and exit; their controller sees them exit
            self.tick(timezone.now() + timedelta(seconds=seconds))
        return count


@pytest.mark.django_db(transaction=True)
def test_a_notice_acted_on_at_once_stops_a_distributed_run_for_good_and_it_resumes_from_what_it_saved(
        published, monkeypatch, settings, flavors, staff):
    """The graceful delete goes before the notice: a node that checkpoints and exits at the notice then fails a
    job already marked for deletion, which its controller leaves alone. Notice first, the PyTorchJob restarted
    (its backoff), its new pods started from the beginning and read the notice at once (this test, on the old
    order: "PyTorchJobRestarting"; a TrainJob's e2e under load once kept such a pod's log as attempt 1's)."""
    timeline = scripted_timeline(published, monkeypatch, settings, START, backend=BusyCluster())
    cohort_pair(staff, reclaim="any", min_runtime_minutes=0, preemption_delay_seconds=0)
    alice, noor = member_api("vision", "alice")[0], member_api("nlp-platform", "noor")[0]
    base = {"image": "registry.example.com/ml/trainer:1.4", "command": ["python", "t.py"], "flavor": "a100-80gb",
            "gpus_per_worker": 2, "env": {"SLIPWAY_SIM_DURATION": "2h"}}
    assert alice.post("/api/v1/runs/", {**base, "team": "vision", "name": "own", "gpus_per_worker": 4},
                      format="json").status_code == 201
    borrowed = alice.post("/api/v1/runs/", {
        **base, "team": "vision", "name": "borrowed", "workers": 2, "checkpoint": {"grace_seconds": 60},
        "env": {"SLIPWAY_SIM_DURATION": "2h", "SLIPWAY_SIM_CHECKPOINT_EVERY": "20s",
                "SLIPWAY_SIM_HONOUR_NOTICE": "1"}}, format="json").json()["id"]
    timeline.cycles(12)
    run = TrainingRun.objects.get(pk=borrowed)
    assert (run.state, run.resource_kind) == (RunState.RUNNING, "PyTorchJob")
    assert noor.post("/api/v1/runs/", {**base, "team": "nlp-platform", "name": "mine", "gpus_per_worker": 4},
                     format="json").status_code == 201

    for _ in range(10):
        timeline.cycle()
        if TrainingRun.objects.get(pk=borrowed).state == RunState.QUEUED:
            break
    run = TrainingRun.objects.get(pk=borrowed)
    assert (run.state, run.attempt) == (RunState.QUEUED, 2), run.reason
    events = [(e.reason, e.message) for e in timeline.backend.events(run.address)]
    assert not [e for e in events if "Restarting" in e[0]], events
    # Attempt 1's logs are its first pods' (no restart's), rank 0 first; the next attempt resumes from the newest
    # checkpoint it printed that was read. (Its last words at the notice went with its pods here: two ticks of the
    # cluster passed before the next cycle read them. The API's checkpoint report does not depend on that read.)
    logs = Attempt.objects.get(ref=run.ref, number=1).logs
    assert [entry["label"] for entry in logs] == ["master-0", "worker-0"], [entry["label"] for entry in logs]
    assert {entry["pod"] for entry in logs} == {f"{run.object_name}-master-0", f"{run.object_name}-worker-0"}
    saved = [line.split(" path=", 1)[1] for line in logs[0]["lines"] if "SLIPWAY_CHECKPOINT" in line]
    assert saved and run.last_checkpoint_path == saved[-1], (run.last_checkpoint_path, saved)
