"""The pure rules of elastic pools (cluster/pools.py)."""

from __future__ import annotations

import pytest

from cluster.pools import (
    BACKOFF_MAX_SECONDS,
    BOOKING_EXPIRED,
    DEFAULT_PROVISIONING_SECONDS,
    DEFAULT_PROVISIONING_TAIL_SECONDS,
    DO_NOT_DISRUPT,
    FAILED,
    MAX_TRIES,
    PENDING,
    PROVISIONED,
    backoff_seconds,
    disruption_annotations,
    nodes_needed,
    provisioning_seconds,
    provisioning_state,
)


@pytest.mark.parametrize(("free", "per_node", "workers", "needed"), [
    ([], 8, 4, 4),            # an empty pool: a node per worker
    ([8, 8], 8, 4, 2),        # two ready nodes hold two of them
    ([8, 3], 4, 3, 1),        # 2 blocks of 4 on the first, none on the second
    ([16], 4, 3, 0),          # one big node holds them all
    ([8, 8, 8, 8], 8, 4, 0),
    ([8], 0, 4, 0),           # nothing asked
])
def test_nodes_needed_counts_what_the_ready_nodes_cannot_hold(free, per_node, workers, needed):
    assert nodes_needed(free, per_node, workers) == needed


def test_backoff_is_kueues_60_s_doubling_to_30_min_over_3_tries():
    assert [backoff_seconds(t) for t in (1, 2, 3, 4, 10)] == [60, 120, 240, 480, BACKOFF_MAX_SECONDS]
    assert [backoff_seconds(t, base=5, cap=15) for t in (1, 2, 3, 4)] == [5, 10, 15, 15]
    assert MAX_TRIES == 3 and BACKOFF_MAX_SECONDS == 1800


def condition(kind: str, status: str = "True", message: str = "") -> dict:
    return {"type": kind, "status": status, "reason": kind, "message": message}


@pytest.mark.parametrize(("conditions", "state", "message"), [
    ([], PENDING, ""),
    ([condition("Accepted", message="queued in the autoscaler")], PENDING, "queued in the autoscaler"),
    ([condition("Accepted"), condition("Provisioned", "False")], PENDING, ""),
    ([condition("Accepted"), condition("Provisioned", message="ok")], PROVISIONED, "ok"),
    ([condition("Provisioned"), condition("BookingExpired", message="not used in 10m")], BOOKING_EXPIRED,
     "not used in 10m"),
    ([condition("Failed", message="quota exceeded"), condition("Provisioned", "False")], FAILED, "quota exceeded"),
])
def test_a_requests_state_is_read_from_its_conditions(conditions, state, message):
    found = provisioning_state({"status": {"conditions": conditions}})
    assert (found.state, found.message) == (state, message)


def test_only_work_that_saves_and_resumes_may_be_evicted_by_scale_down():
    assert disruption_annotations(preemptible=False) == DO_NOT_DISRUPT
    assert DO_NOT_DISRUPT == {"karpenter.sh/do-not-disrupt": "true",
                              "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
    assert disruption_annotations(preemptible=True) == {}


def test_provisioning_times_are_the_defaults_until_a_pool_has_three_of_its_own():
    assert provisioning_seconds([]) == (DEFAULT_PROVISIONING_SECONDS, DEFAULT_PROVISIONING_TAIL_SECONDS)
    assert provisioning_seconds([100, 200]) == (DEFAULT_PROVISIONING_SECONDS, DEFAULT_PROVISIONING_TAIL_SECONDS)
    history = [float(s) for s in range(10, 110, 10)]  # 10 … 100
    assert provisioning_seconds(history) == (50.0, 90.0)
