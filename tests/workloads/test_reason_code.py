"""A workload's reason code sits beside its words; code reads the code, and old rows got theirs from their words once."""

from __future__ import annotations

import pytest

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
