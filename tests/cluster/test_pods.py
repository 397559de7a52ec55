"""A workload's pods in words: the log picker's sources and a retried Job's attempt."""

from __future__ import annotations

from cluster.pods import attempt_words, log_sources
from tests.cluster.samples import pod, running_container, terminated

JOB = {"batch.kubernetes.io/job-name": "run-42"}


def attempt(name: str, created: str, phase: str, container: dict) -> dict:
    p = pod(name, "run-42", phase=phase, container_statuses=[container], extra_labels=JOB)
    p["metadata"]["creationTimestamp"] = created
    return p


FIRST = attempt("run-42-bcdfg", "2026-01-01T10:00:00Z", "Failed", terminated("Error", 1))
SECOND = attempt("run-42-hjklm", "2026-01-01T10:00:50Z", "Failed", terminated("OOMKilled", 137))
THIRD = attempt("run-42-npqrs", "2026-01-01T10:01:50Z", "Running", running_container())


def test_it_lists_a_jobs_attempts_newest_first():
    sources = log_sources([FIRST, THIRD, SECOND])
    assert [(s.pod, s.label) for s in sources] == [
        ("run-42-npqrs", "attempt 3 (running)"), ("run-42-hjklm", "attempt 2 (OOMKilled (exit 137))"),
        ("run-42-bcdfg", "attempt 1 (Error (exit 1))")]


def test_it_names_a_pytorchjobs_master_first_then_workers_by_index():
    def replica(role: str, index: int) -> dict:
        return pod(f"run-7-{role}-{index}", "run-7", extra_labels={
            "training.kubeflow.org/replica-type": role, "training.kubeflow.org/replica-index": str(index)})

    sources = log_sources([replica("worker", 10), replica("worker", 2), replica("master", 0)])
    assert [s.label for s in sources] == ["master-0", "worker-2", "worker-10"]


def test_it_lists_other_pods_by_name_oldest_first():
    assert [s.label for s in log_sources([pod("ep-7-b", "ep-7"), pod("ep-7-a", "ep-7")])] == ["ep-7-a", "ep-7-b"]
    assert log_sources([]) == []


def test_it_says_which_attempt_a_retried_job_is_on():
    assert attempt_words([FIRST, THIRD], max_retries=2) == "attempt 2 of 3; attempt 1 ended: Error (exit 1)"
    assert attempt_words([FIRST, SECOND, THIRD], max_retries=2) == (
        "attempt 3 of 3; attempt 2 ended: OOMKilled (exit 137)")


def test_it_says_a_retry_is_due_between_attempts():
    assert attempt_words([FIRST], max_retries=2) == "attempt 1 of 3 ended: Error (exit 1); retrying after a back-off"


def test_it_says_nothing_on_the_first_attempt_or_once_the_retries_are_spent():
    assert attempt_words([THIRD], max_retries=2) == ""
    assert attempt_words([FIRST], max_retries=0) == ""  # no retry is coming: the failure speaks for itself
    assert attempt_words([pod("run-7-master-0", "run-7")], max_retries=2) == ""  # not a Job's pods


def test_a_restarted_pytorchjob_replica_offers_its_previous_run_after_its_current_one():
    """OnFailure: the kubelet restarts the container in place; its previous run is one attempt back."""
    def replica(role: str, restarts: int, last: dict | None) -> dict:
        container = {**running_container(), "restartCount": restarts}
        if last is not None:
            container["lastState"] = {"terminated": last}
        return pod(f"run-7-{role}-0", "run-7", container_statuses=[container], extra_labels={
            "training.kubeflow.org/replica-type": role, "training.kubeflow.org/replica-index": "0"})

    oom = {"reason": "OOMKilled", "exitCode": 137}
    sources = log_sources([replica("worker", 0, None), replica("master", 2, oom)])
    assert [(s.key, s.label, s.previous) for s in sources] == [
        ("run-7-master-0", "master-0", False),
        ("run-7-master-0:previous", "master-0, attempt 2 (OOMKilled (exit 137))", True),
        ("run-7-worker-0", "worker-0", False)]
    assert sources[1].pod == "run-7-master-0"  # the backend reads the same pod, with previous=true


def jobset_node(trainjob: str, replicated_job: str, index: int) -> dict:
    """A TrainJob's pod as JobSet and its indexed Job label it (the Job's own labels too)."""
    job = f"{trainjob}-{replicated_job}-0"
    return pod(f"{job}-{index}-bcdfg", trainjob, extra_labels={
        "jobset.sigs.k8s.io/replicatedjob-name": replicated_job, "batch.kubernetes.io/job-completion-index": str(index),
        "batch.kubernetes.io/job-name": job, "job-name": job})


def test_it_names_a_trainjobs_nodes_by_completion_index_rank_0_first():
    sources = log_sources([jobset_node("run-9", "node", 10), jobset_node("run-9", "node", 2),
                           jobset_node("run-9", "node", 0)])
    assert [(s.pod, s.label) for s in sources] == [
        ("run-9-node-0-0-bcdfg", "node-0"), ("run-9-node-0-2-bcdfg", "node-2"), ("run-9-node-0-10-bcdfg", "node-10")]


def test_an_mpi_trainjobs_launcher_is_rank_0_and_comes_first():
    sources = log_sources([jobset_node("run-9", "node", 1), jobset_node("run-9", "node", 0),
                           jobset_node("run-9", "launcher", 0)])
    assert [s.label for s in sources] == ["launcher-0", "node-0", "node-1"]


def test_a_trainjobs_nodes_are_not_a_jobs_attempts():
    """Their Jobs are JobSet's: the Job controller's labels on them do not make them retries."""
    nodes = [jobset_node("run-9", "node", 0), jobset_node("run-9", "node", 1)]
    assert attempt_words(nodes, max_retries=2) == ""
