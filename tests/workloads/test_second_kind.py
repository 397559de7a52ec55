"""A second workload kind, defined only for the tests, goes through the whole shared machinery.

The notebook kind (tests/workloads/tinykind) has its own model, builder and status mapping and
registers itself; nothing outside it knows of notebooks. Admission, apply, observation,
billing, ending, re-drive and cleanup all come from ``workloads/`` — the proof that inference
endpoints are added without copying any of it.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone

from billing.models import QuotaHold, UsageRecord
from notifications import vocabulary
from notifications.forms import EmailForm
from notifications.models import Event
from notifications.services import set_email_kinds
from quotas.models import QueuedRequest
from sandbox.backend import SandboxBackend
from sandbox.models import SimObject
from tests.backends import use_backend
from tests.workloads.tinykind.models import Notebook, NotebookState
from workloads import services
from workloads.cycle import reconcile as rec
from workloads.registry import kinds, resource_kinds
from workloads.tasks import apply_workload, delete_workload

pytestmark = pytest.mark.django_db
NS = "team-ml-research"


def iso(dt) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def open_notebook(member, team, quota, flavors, published, django_capture_on_commit_callbacks):
    def make(name: str, gpus: int) -> Notebook:
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            notebook = Notebook.objects.create(team=team, created_by=member, name=name, flavor=flavors["a100-80gb"],
                                               gpus=gpus)
            services.admit_new(notebook)
        notebook.refresh_from_db()
        return notebook

    return make


def script(backend, notebook: Notebook, phase: str, units: int = 0, **status) -> None:
    """Say what the cluster shows for ``notebook``: its object's phase and ``units`` running."""
    backend.objects[(NS, "Notebook", notebook.object_name)]["status"] = {"phase": phase, **status}
    backend.pod_lists[(NS, notebook.object_name)] = [{
        "kind": "Pod", "metadata": {"name": f"{notebook.object_name}-0"},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": str(units)}}}]},
        "status": {"phase": "Running"}}] if units else []


def test_it_admits_applies_observes_bills_and_ends_a_kind_it_does_not_know(open_notebook, fake_backend, published):
    # Admitted against the team's quota like any workload, the apply task published after commit.
    notebook = open_notebook("explore", 2)
    assert notebook.state == NotebookState.ADMITTED
    assert QuotaHold.objects.held().get(ref=f"nb:{notebook.pk}").units == 2
    assert published == [("workloads.tasks.apply_workload", ("nb", notebook.pk))]

    # Applied through the kind's builder, with the team's namespace objects.
    assert apply_workload("nb", notebook.pk) == "applied"
    assert (NS, "Notebook", notebook.object_name) in fake_backend.objects
    assert {"Namespace", "ResourceQuota"} <= {kind for _ns, kind, _name in fake_backend.objects}
    notebook.refresh_from_db()
    assert notebook.state == NotebookState.STARTING

    # Observed through the kind's status mapping, billed as an open segment.
    t0 = timezone.now().replace(microsecond=0)
    script(fake_backend, notebook, "Running", units=2, startTime=iso(t0))
    report = rec.reconcile(fake_backend, now=t0 + timedelta(seconds=5))
    assert (notebook.ref, "starting", "running") in report.transitions
    notebook.refresh_from_db()
    assert (notebook.state, notebook.started_at, notebook.open_units) == (NotebookState.RUNNING, t0, 2)
    assert notebook.cost_at(t0 + timedelta(hours=1)) == Decimal("8.2")  # 2 × 4.10 for an hour

    # It finishes on its own: billed to its end, its quota released.
    end = t0 + timedelta(hours=2)
    script(fake_backend, notebook, "Done", startTime=iso(t0), endTime=iso(end))
    rec.reconcile(fake_backend, now=end + timedelta(seconds=5))
    notebook.refresh_from_db()
    assert (notebook.state, notebook.finished_at) == (NotebookState.DONE, end)
    assert notebook.cost_to_date == Decimal("16.4")
    assert sum(r.cost for r in UsageRecord.objects.filter(ref=notebook.ref)) == Decimal("16.4")
    assert not QuotaHold.objects.held().filter(ref=notebook.ref).exists()
    # Objects of work that finished by itself are kept (logs, events).
    assert rec.reconcile(fake_backend).orphans_deleted == []


def test_it_queues_ends_and_cleans_up_a_kind_it_does_not_know(open_notebook, fake_backend, published,
                                                             django_capture_on_commit_callbacks):
    big = open_notebook("big", 8)
    waiting = open_notebook("waiting", 4)
    assert waiting.state == NotebookState.QUEUED
    assert waiting.reason == "waiting for quota: needs 4× a100-80gb, 8 of 8 in use"
    apply_workload("nb", big.pk)

    # The user ends the big one: its quota goes to the queued one at once.
    with django_capture_on_commit_callbacks(execute=True):
        assert services.end_by_user(big, "stopped by mia")
    big.refresh_from_db()
    waiting.refresh_from_db()
    assert big.state == NotebookState.STOPPED
    assert waiting.state == NotebookState.ADMITTED and not QueuedRequest.objects.exists()
    assert ("workloads.tasks.delete_workload", ("nb", big.pk)) in published
    assert ("workloads.tasks.apply_workload", ("nb", waiting.pk)) in published  # admitted from the queue
    assert not services.end_by_user(big, "again")  # nothing left to end

    # Its delete task was lost: the reconciler removes what is left on the cluster.
    report = rec.reconcile(fake_backend)
    assert report.orphans_deleted == [big.object_name]
    assert delete_workload("nb", big.pk) == 0


def test_it_redrives_and_fails_a_kind_it_does_not_know(open_notebook, fake_backend):
    notebook = open_notebook("lost", 1)  # admitted; its apply task was "lost"
    later = timezone.now() + timedelta(minutes=1)
    assert rec.reconcile(fake_backend, now=later).redriven == [notebook.identity]
    Notebook.objects.filter(pk=notebook.pk).update(apply_attempts=10)
    rec.reconcile(fake_backend, now=later + timedelta(minutes=5))
    notebook.refresh_from_db()
    assert notebook.state == NotebookState.FAILED
    assert "could not be reached after 10 attempts" in notebook.reason
    assert not QuotaHold.objects.held().filter(ref=notebook.ref).exists()


@pytest.mark.urls("tests.workloads.tinykind.site_urls")  # the project's URLs plus the kind's, as portal/urls.py would
def test_its_pages_nav_and_end_come_from_what_it_declares(open_notebook, client, member, outsider, staff):
    """Its package declares an end, a nav item and a state template and routes ``read_urls``: that is all it takes
    for the shared read views, the navigation, the staff list's end and the admin's "End selected"."""
    running, waiting = open_notebook("explore", 8), open_notebook("later", 2)  # the second waits for the first's GPUs
    assert waiting.state == NotebookState.QUEUED
    client.force_login(member)
    nav = client.get("/tokens/").content.decode()
    # Its item, in its declared order between the runs' and the endpoints'.
    assert nav.index('<a href="/runs/">Runs</a>') < nav.index('<a href="/notebooks/">Notebooks</a>') \
        < nav.index('<a href="/endpoints/">Endpoints</a>')

    # The generated state cell: its template, its queue position, polled (200) until it ends.
    state = client.get(f"/notebooks/{waiting.pk}/state/")
    assert state.status_code == 200 and "queued (#1 in the queue)" in state.content.decode()
    assert client.get(f"/notebooks/{waiting.pk}/events/").status_code == 200
    outside = Client()
    outside.force_login(outsider)
    assert outside.get(f"/notebooks/{waiting.pk}/state/").status_code == 404

    # Staff end it from the staff list with its verb: its own end runs, and the state cell stops polling (286).
    staff_client = Client()
    staff_client.force_login(staff)
    listed = staff_client.get("/admin/workloads/").content.decode()
    assert f'href="/admin/workloads/nb/{running.pk}/end/?next=' in listed and ">Stop…</a>" in listed
    done = staff_client.post(f"/admin/workloads/nb/{running.pk}/end/", follow=True).content.decode()
    assert f"Notebook explore (#{running.pk}) of team ml-research stopped." in done
    running.refresh_from_db()
    assert (running.state, running.reason) == (NotebookState.STOPPED, f"stopped by {staff.username}")
    assert client.get(f"/notebooks/{running.pk}/state/").status_code == 286

    # The admin's one "End selected" action: the kind's end again.
    staff.is_superuser = True
    staff.save()
    chosen = {"action": "end_selected", "_selected_action": [waiting.pk], "confirmed": "yes"}
    ended = staff_client.post("/admin/tinykind/notebook/", chosen, follow=True).content.decode()
    assert f"Stopped: notebook later (#{waiting.pk}) of team ml-research." in ended
    assert Notebook.objects.get(pk=waiting.pk).state == NotebookState.STOPPED
def test_it_runs_a_kind_it_does_not_know_on_the_sandbox(open_notebook, settings, published,
                                                        django_capture_on_commit_callbacks):
    # The sandbox knows notebooks only from the kind's registration: it stores the custom
    # resource as applied (no controller), observes it and deletes it when the user ends it.
    sandbox = use_backend(settings, SandboxBackend())
    notebook = open_notebook("on-sandbox", 1)
    assert apply_workload("nb", notebook.pk) == "applied"
    report = rec.reconcile(sandbox)
    assert report.observed == 1 and report.redriven == []
    notebook.refresh_from_db()
    assert notebook.state == NotebookState.STARTING  # no controller: the object says nothing yet
    with django_capture_on_commit_callbacks(execute=True):
        assert services.end_by_user(notebook, "stopped by mia")
    assert delete_workload("nb", notebook.pk) == 1
    assert rec.reconcile(sandbox).observed == 0
    assert SimObject.objects.filter(resource_kind="ResourceQuota", namespace=NS).exists()  # the team's objects stay


def test_the_registry_hands_the_backends_every_kinds_resource_kinds():
    resources = resource_kinds()
    declared = [r for kind in kinds() for r in kind.resources]
    assert sorted(resources, key=repr) == sorted(set(declared), key=repr)  # each once
    names = [r.kind for r in resources]
    assert {"Job", "PyTorchJob", "PersistentVolumeClaim", "Deployment", "ScaledObject", "Service", "Notebook"} <= set(names)
    assert names.index("ScaledObject") < names.index("Deployment")  # deleted first: KEDA stops scaling
    observed = {r.kind for kind in kinds() for r in kind.resources if r.observed}
    assert [r.kind for r in resources if r.observed] == [n for n in names if n in observed]
    assert "Service" not in observed
    # A run's checkpoint claim outlives its attempts: deleted with the run, not with a preempted attempt.
    assert [r.kind for r in resources if r.kept_across_attempts] == ["PersistentVolumeClaim"]


def test_its_event_kinds_come_from_what_it_declares(open_notebook, fake_backend, member, team):
    """Subscribable (the form, the service's validation) and recorded when the move happens."""
    assert vocabulary.event_kinds()["notebook_done"] == "Notebook done"
    assert ("notebook_done", "Notebook done") in EmailForm().fields["kinds"].choices
    assert set_email_kinds(member, team, ["notebook_done"]) == ["notebook_done"]
    notebook = open_notebook("explore", 2)
    apply_workload("nb", notebook.pk)
    t0 = timezone.now().replace(microsecond=0)
    script(fake_backend, notebook, "Done", startTime=iso(t0), endTime=iso(t0 + timedelta(minutes=5)))
    rec.reconcile(fake_backend, now=t0 + timedelta(minutes=6))
    event = Event.objects.get(event_kind="notebook_done")
    assert (event.ref, event.title) == (notebook.ref, f"Notebook explore (#{notebook.pk}) of team ml-research is done")
