"""A workload with a parent (issue 48, point 3): what a sweep's trials need, on the one Workload table.

Any workload may name another as its parent (``Workload.parent``): a notebook (tests/workloads/tinykind)
under a block of units (tests/workloads/holdkind) — two kinds that know nothing of each other. The child goes
through admission, apply, observation and billing as any work; the parent's children are one query of the
one table, whatever their kinds; a parent is never another team's, and is not deleted under its children.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.db.models import ProtectedError
from django.utils import timezone

from billing.models import QuotaHold, UsageRecord
from tests.factories import make_team
from tests.workloads.holdkind.models import UnitBlock
from tests.workloads.test_second_kind import NS, iso, script
from tests.workloads.tinykind.models import Notebook, NotebookState
from workloads import services
from workloads.cycle import reconcile as rec
from workloads.models import Workload
from workloads.tasks import apply_workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def submitted(member, team, quota, flavors, published, django_capture_on_commit_callbacks):
    """``submitted(model, **fields)``: the member's workload of ``model``, recorded and admitted as a kind's service would."""
    def make(model, **fields):
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            workload = model.objects.create(team=team, created_by=member, flavor=flavors["a100-80gb"], **fields)
            services.admit_new(workload)
        workload.refresh_from_db()
        return workload

    return make


def test_a_child_of_another_kind_is_admitted_run_and_billed_and_its_parent_lists_it(submitted, fake_backend):
    now = timezone.now().replace(microsecond=0)
    sweep = submitted(UnitBlock, name="sweep", units=1, starts_at=now + timedelta(days=1), minutes=60)
    trial = submitted(Notebook, name="sweep-t001", gpus=2, parent=sweep)
    assert trial.state == NotebookState.ADMITTED and trial.parent_id == sweep.uid
    assert QuotaHold.objects.held().get(ref=trial.ref).units == 2  # admitted against the quota as any work

    assert apply_workload("nb", trial.pk) == "applied"
    assert (NS, "Notebook", trial.object_name) in fake_backend.objects
    script(fake_backend, trial, "Running", units=2, startTime=iso(now))
    rec.reconcile(fake_backend, now=now + timedelta(minutes=5))
    script(fake_backend, trial, "Done", units=0, startTime=iso(now))
    rec.reconcile(fake_backend, now=now + timedelta(minutes=65))
    trial.refresh_from_db()
    assert trial.state == NotebookState.DONE
    assert sum(r.unit_hours for r in UsageRecord.objects.filter(ref=trial.ref)) > 0  # billed as any work

    # The parent's children across kinds: one query of the one table, each named by its kind and number.
    assert [child.identity.ref for child in sweep.children.all()] == [trial.ref]
    assert list(Workload.objects.filter(parent=sweep).values_list("kind", "number")) == [("nb", trial.pk)]


def test_a_parent_is_never_another_teams_and_is_not_deleted_under_its_children(submitted, member, flavors):
    now = timezone.now()
    sweep = submitted(UnitBlock, name="sweep", units=1, starts_at=now + timedelta(days=1), minutes=60)
    other = make_team("elsewhere")
    with pytest.raises(ValueError, match="another team's"):
        Notebook.objects.create(team=other, created_by=member, flavor=flavors["a100-80gb"], name="stray", parent=sweep)
    assert not Notebook.objects.filter(name="stray").exists()
    submitted(Notebook, name="sweep-t001", gpus=1, parent=sweep)
    with pytest.raises(ProtectedError):
        sweep.delete()
