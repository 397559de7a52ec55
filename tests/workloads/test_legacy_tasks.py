"""Task names of the previous release still route and run, so messages queued before an upgrade are not lost."""

from __future__ import annotations

import pytest

from jobs.models import TrainingRun
from jobs.services import submit_run
from portal.celery import app
from tests.jobs.conftest import run_payload

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def worker_tasks():
    """Import every app's tasks module, as a worker does at startup (autodiscovery)."""
    app.loader.import_default_modules()


@pytest.mark.parametrize(("name", "queue"), [
    ("jobs.tasks.create_run_resources", "cluster"),
    ("jobs.tasks.delete_run_resources", "cluster"),
    ("jobs.tasks.reconcile", "reconcile"),
    ("workloads.tasks.apply_workload", "cluster"),
    ("workloads.tasks.delete_workload", "cluster"),
    ("workloads.tasks.reconcile", "reconcile"),
])
def test_it_routes_old_and_new_task_names_to_their_queues(name, queue):
    assert name in app.tasks
    assert app.amqp.router.route({}, name)["queue"].name == queue


def test_a_message_of_the_old_name_still_applies_and_deletes_a_run(member, team, quota, published, fake_backend):
    run = submit_run(member, team, {k: v for k, v in run_payload().items() if k != "team"})
    assert app.tasks["jobs.tasks.create_run_resources"](run.pk) == "applied"
    assert TrainingRun.objects.get(pk=run.pk).state == "pending"
    assert app.tasks["jobs.tasks.delete_run_resources"](run.pk) > 0
    assert not any(kind == "Job" for _ns, kind, _name in fake_backend.objects)
