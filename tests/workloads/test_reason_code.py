"""A workload's reason code sits beside its words; code reads the code, and old rows got theirs from their words once."""

from __future__ import annotations

import pytest

from tests.db_template import database_at, early_rows
from workloads.constants import Message
from workloads.migrations._reason_codes import code_of
from workloads.models import ReasonCode


@pytest.mark.parametrize(("reason", "state", "code"), [
    ("", "running", ReasonCode.NONE),
    ("waiting for capacity: needs 4\u00d7 a100-80gb on one node; every a100-80gb node is full", "pending",
     ReasonCode.WAITING_FOR_CAPACITY),
    (Message.WAITING_FOR_WORKER, "admitted", ReasonCode.WAITING_FOR_WORKER),
    (Message.SUBMITTED_TO_CLUSTER, "pending", ReasonCode.SUBMITTED),
    (Message.CANCELLED_BY.format(user="ada"), "cancelled", ReasonCode.ENDED_BY_USER),
    (Message.DELETED_BY.format(user="ada"), "deleted", ReasonCode.ENDED_BY_USER),
    (Message.STOPPED_BY_BUDGET, "cancelled", ReasonCode.STOPPED_BY_BUDGET),
    ("capped at 4 replicas by the team quota (a100-80gb 4 of 4 in use)", "ready", ReasonCode.BURST_CAPPED),
    (Message.CLUSTER_REJECTED.format(noun="run", message="spec: Invalid value"), "failed",
     ReasonCode.CLUSTER_REJECTED),
    (Message.CLUSTER_UNREACHABLE.format(attempts=10, message="timeout"), "failed", ReasonCode.CLUSTER_UNREACHABLE),
    (Message.OBJECTS_VANISHED.format(noun="endpoint"), "failed", ReasonCode.OBJECTS_VANISHED),
    ("waiting for quota: needs 4\u00d7 a100-80gb, 6 of 8 in use", "queued", ReasonCode.QUEUED),
    ("waiting for budget: est. 120.00 would exceed the 80.00 USD left this month", "queued", ReasonCode.QUEUED),
    ("Unschedulable: 0/8 nodes are available: 8 Insufficient nvidia.com/gpu.", "pending", ReasonCode.CLUSTER),
    ("OOMKilled (exit 137): the container ran out of memory", "failed", ReasonCode.CLUSTER),
])
def test_the_data_migration_derives_each_code_from_the_words_the_portal_wrote(reason, state, code):
    """Today's messages: the frozen words of the migration still recognise every one of them."""
    assert code_of(reason, state) == code


@pytest.mark.django_db(transaction=True)
def test_the_migration_gives_existing_rows_the_code_of_their_words():
    before, after = [("jobs", "0004_workload_idle")], [("jobs", "0005_workload_reason_code")]
    with database_at(before) as executor:
        old = executor.loader.project_state(before).apps
        team, user, flavor = early_rows(old)
        words = {"capacity": ("pending", "waiting for capacity: needs 2\u00d7 a100-80gb on one node; every a100-80gb "
                                         "node is full"),
                 "queued": ("queued", "waiting for quota: needs 4\u00d7 a100-80gb, 6 of 8 in use"),
                 "cancelled": ("cancelled", "cancelled by vera"),
                 "quiet": ("running", "")}
        for name, (state, reason) in words.items():
            old.get_model("jobs", "TrainingRun").objects.create(
                team_id=team.pk, created_by_id=user.pk, flavor_id=flavor.pk, name=name, state=state, reason=reason,
                image="registry.example.com/t:1", command=["python"])

        executor.migrate(after)
        run_then = executor.loader.project_state(after).apps.get_model("jobs", "TrainingRun")  # its table then

        assert dict(run_then.objects.values_list("name", "reason_code")) == {
            "capacity": ReasonCode.WAITING_FOR_CAPACITY, "queued": ReasonCode.QUEUED,
            "cancelled": ReasonCode.ENDED_BY_USER, "quiet": ReasonCode.NONE}
