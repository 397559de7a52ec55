"""jobs.status: a run's Job or PyTorchJob and its pods -> the run's state and plain-words reasons.

Payloads are trimmed copies of what the API server returns (tests/cluster/observations.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from cluster.status import IMAGE_PULL_CODES, WorkloadStatus, parse_time
from jobs.status import TrainingPhase, training_status
from tests.cluster.observations import PULL_HINT, PULL_LIMIT, T0, T1
from tests.cluster.observations import condition as _cond
from tests.cluster.observations import observed as _obs
from tests.cluster.observations import pulling as _pulling
from tests.cluster.samples import UNSCHEDULABLE, pod, running_container, terminated, waiting


def _job(status: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "run-42"}, "spec": {}, "status": status}


def _pytorchjob(conditions: list[dict[str, Any]], **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "run-42"},
        "spec": {},
        "status": {"conditions": conditions, "startTime": T0, **status},
    }


def test_it_reports_nothing_when_the_job_is_gone() -> None:
    assert training_status(_obs([], [pod("run-42-x", "run-42")])) is None


def test_it_explains_an_unschedulable_job() -> None:
    stuck = pod("run-42-abcde", "run-42", phase="Pending", node=None, conditions=[UNSCHEDULABLE])
    status = training_status(_obs([_job({"active": 1, "startTime": T0})], [stuck]))
    # Nothing ran yet: no start, whatever the Job's startTime says (billing cannot begin).
    assert status == WorkloadStatus(
        TrainingPhase.PENDING,
        "Unschedulable: 0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
        started_at=None,
    )


def test_it_explains_an_image_pull_failure() -> None:
    message = 'Back-off pulling image "registry.example.com/vision/train:typo"'
    pulling = pod("run-42-abcde", "run-42", phase="Pending", container_statuses=[waiting("ImagePullBackOff", message)])
    status = training_status(_obs([_job({"active": 1, "startTime": T0})], [pulling]))
    assert status.state == TrainingPhase.PENDING
    assert status.reason == f"ImagePullBackOff: {message}"
    assert status.running_units == 0


def test_it_fails_a_run_whose_image_cannot_be_pulled_past_the_limit() -> None:
    obs = _obs([_job({"active": 1, "startTime": T0})], [_pulling()])
    t0 = parse_time(T0)
    within = training_status(obs, t0 + timedelta(seconds=PULL_LIMIT), PULL_LIMIT)
    assert (within.state, within.abandoned) == (TrainingPhase.PENDING, False)
    assert (within.waiting.code, within.waiting.since, within.waiting.image) == ("ImagePullBackOff", t0, "img")
    past = t0 + timedelta(seconds=PULL_LIMIT + 1)
    status = training_status(obs, past, PULL_LIMIT)
    assert (status.state, status.reason, status.finished_at) == (TrainingPhase.FAILED, PULL_HINT, past)
    assert status.abandoned  # its pod holds a node and retries forever: the reconciler deletes it
    # Without a limit (or a time to measure it at) nothing is given up.
    assert training_status(obs).state == TrainingPhase.PENDING
    assert "ErrImagePull" in IMAGE_PULL_CODES


def test_it_fails_a_run_with_an_invalid_image_name_on_sight() -> None:
    # A malformed reference: the kubelet never pulls, and no retry cures it — no limit to wait for.
    message = 'Failed to apply default image tag "Img": couldn\'t parse image name "Img": invalid reference format'
    obs = _obs([_job({"active": 1, "startTime": T0})], [_pulling(code="InvalidImageName", message=message)])
    t0 = parse_time(T0)
    status = training_status(obs, t0, PULL_LIMIT)
    assert (status.state, status.abandoned, status.finished_at) == (TrainingPhase.FAILED, True, t0)
    assert status.reason == 'InvalidImageName: "img" is not a valid image reference — check the image name and tag'
    # The same pod read with no clock to judge by stays pending with the kubelet's words.
    assert training_status(obs).reason == f"InvalidImageName: {message}"


def test_a_stuck_pull_of_one_pytorchjob_worker_fails_the_run() -> None:
    master = pod("run-42-master-0", "run-42", container_statuses=[running_container()])
    worker = _pulling("run-42-worker-0", code="ErrImagePull", message="manifest unknown")
    status = training_status(_obs([_pytorchjob([_cond("Created")])], [master, worker]),
                             parse_time(T1), PULL_LIMIT)
    assert (status.state, status.abandoned) == (TrainingPhase.FAILED, True)
    assert status.reason.startswith('ErrImagePull: image "img" not found')


def test_the_pull_limit_goes_by_the_waiting_code_not_the_words() -> None:
    # Stuck for hours on a missing Secret: not a pull failure, whatever its message says.
    config = _pulling(code="CreateContainerConfigError", message="ImagePullBackOff? no: secret not found")
    status = training_status(_obs([_job({"active": 1, "startTime": T0})], [config]), parse_time(T1), PULL_LIMIT)
    assert (status.state, status.abandoned) == (TrainingPhase.PENDING, False)
    assert status.waiting.code == "CreateContainerConfigError"
    # An older pod stuck on something else does not hide a pull that is past the limit.
    pulling = _pulling("run-42-b", started="2026-01-01T10:30:00Z")
    status = training_status(_obs([_job({"active": 2, "startTime": T0})], [config, pulling]), parse_time(T1),
                             PULL_LIMIT)
    assert (status.state, status.waiting.code) == (TrainingPhase.FAILED, "ImagePullBackOff")
    # A finished run stays what it was, whatever an old pod says.
    done = _job({"succeeded": 1, "conditions": [_cond("Complete")]})
    assert training_status(_obs([done], [_pulling()]), parse_time(T1), PULL_LIMIT).state == TrainingPhase.SUCCEEDED


def test_it_says_a_starting_container_is_being_created() -> None:
    creating = pod("run-42-abcde", "run-42", phase="Pending", container_statuses=[waiting("ContainerCreating")])
    assert training_status(_obs([_job({"active": 1})], [creating])).reason == "ContainerCreating"


def test_it_bills_the_gpus_of_running_pods() -> None:
    running = pod("run-42-abcde", "run-42", gpus=4, container_statuses=[running_container()])
    status = training_status(_obs([_job({"active": 1, "startTime": T0})], [running]))
    assert (status.state, status.reason, status.running_units) == (TrainingPhase.RUNNING, "", 4)


def test_it_reports_a_completed_job() -> None:
    done = pod("run-42-abcde", "run-42", phase="Succeeded", gpus=4, container_statuses=[terminated("Completed", 0)])
    job = _job(
        {
            "succeeded": 1,
            "startTime": T0,
            "completionTime": T1,
            "conditions": [_cond("SuccessCriteriaMet"), _cond("Complete")],
        }
    )
    status = training_status(_obs([job], [done]))
    assert status.state == TrainingPhase.SUCCEEDED
    # It started when its container did (10:01), not at the Job's startTime (10:00).
    assert (status.started_at, status.finished_at) == (parse_time("2026-01-01T10:01:00Z"), parse_time(T1))
    assert status.running_units == 0  # finished pods hold no GPU


def test_it_names_oom_as_the_cause_of_a_failed_job() -> None:
    oom = pod("run-42-abcde", "run-42", phase="Failed", container_statuses=[terminated("OOMKilled", 137)])
    job = _job(
        {
            "failed": 3,
            "startTime": T0,
            "conditions": [
                _cond("FailureTarget", "BackoffLimitExceeded"),
                _cond("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
            ],
        }
    )
    status = training_status(_obs([job], [oom]))
    assert status.state == TrainingPhase.FAILED
    assert (
        status.reason
        == "BackoffLimitExceeded: Job has reached the specified backoff limit (last attempt: OOMKilled (exit 137): "
        "the container ran out of memory — raise memory_gb or lower the batch size)"
    )
    assert status.finished_at == parse_time(T1)


def test_a_termination_message_says_why_instead_of_the_generic_oom_hint() -> None:
    """A shared GPU's OOM is not the container's own memory: the words it left say what happened."""
    shared = terminated("OOMKilled", 137)
    shared["state"]["terminated"]["message"] = "GPU memory is shared with 3 other pods on this time-sliced GPU"
    oom = pod("run-42-abcde", "run-42", phase="Failed", container_statuses=[shared])
    job = _job({"failed": 1, "startTime": T0, "conditions": [
        _cond("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")]})
    assert training_status(_obs([job], [oom])).reason == (
        "BackoffLimitExceeded: Job has reached the specified backoff limit (last attempt: OOMKilled (exit 137): "
        "GPU memory is shared with 3 other pods on this time-sliced GPU)")


def test_it_names_a_pod_the_kubelet_refused_at_admission() -> None:
    refused = pod("run-42-abcde", "run-42", phase="Failed")
    refused["status"].update(reason="UnexpectedAdmissionError", message="Allocate failed due to …")
    job = _job({"startTime": T0})
    assert training_status(_obs([job], [refused])).reason == "UnexpectedAdmissionError: Allocate failed due to …"


def test_it_reports_a_deadline_exceeded_job() -> None:
    job = _job(
        {
            "startTime": T0,
            "conditions": [_cond("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")],
        }
    )
    status = training_status(_obs([job]))
    assert (status.state, status.reason) == (
        TrainingPhase.FAILED,
        "DeadlineExceeded: Job was active longer than specified deadline",
    )


def test_it_reports_a_non_zero_exit() -> None:
    failed = pod("run-42-abcde", "run-42", phase="Failed", container_statuses=[terminated("Error", 1)])
    job = _job({"failed": 1, "active": 1, "startTime": T0})  # a retry is on its way
    status = training_status(_obs([job], [failed]))
    assert (status.state, status.reason) == (TrainingPhase.PENDING, "Error (exit 1)")


def test_it_forgets_an_earlier_attempts_failure_once_a_retry_runs() -> None:
    failed = pod("run-42-aaaaa", "run-42", phase="Failed", container_statuses=[terminated("Error", 1)])
    retry = pod("run-42-bbbbb", "run-42", container_statuses=[running_container()])
    status = training_status(_obs([_job({"failed": 1, "active": 1, "startTime": T0})], [failed, retry]))
    assert (status.state, status.reason, status.running_units) == (TrainingPhase.RUNNING, "", 1)


def test_it_reports_a_suspended_job_as_pending() -> None:
    job = _job({"conditions": [_cond("Suspended", "JobSuspended", "Job suspended")]})
    assert training_status(_obs([job])).state == TrainingPhase.PENDING


def test_it_maps_pytorchjob_conditions() -> None:
    created = _pytorchjob([_cond("Created", "PyTorchJobCreated")])
    assert training_status(_obs([created])).state == TrainingPhase.PENDING

    master = pod("run-42-master-0", "run-42", gpus=8, container_statuses=[running_container()])
    worker = pod("run-42-worker-0", "run-42", gpus=8, container_statuses=[running_container()])
    running = _pytorchjob([_cond("Created", when=T0), _cond("Running", "PyTorchJobRunning")])
    status = training_status(_obs([running], [master, worker]))
    assert (status.state, status.running_units) == (TrainingPhase.RUNNING, 16)

    succeeded = _pytorchjob(
        [_cond("Created"), _cond("Running", status="False"), _cond("Succeeded", "PyTorchJobSucceeded")],
        completionTime=T1,
    )
    status = training_status(_obs([succeeded]))
    assert (status.state, status.finished_at) == (TrainingPhase.SUCCEEDED, parse_time(T1))


def test_it_explains_a_failed_pytorchjob_with_its_pods() -> None:
    master = pod("run-42-master-0", "run-42", phase="Failed", container_statuses=[terminated("Error", 1)])
    failed = _pytorchjob(
        [
            _cond("Created"),
            _cond("Failed", "PyTorchJobFailed", "PyTorchJob run-42 is failed because 1 Master replica(s) failed."),
        ]
    )
    status = training_status(_obs([failed], [master]))
    assert status.state == TrainingPhase.FAILED
    assert (
        status.reason
        == "PyTorchJobFailed: PyTorchJob run-42 is failed because 1 Master replica(s) failed. (last attempt: Error (exit 1))"
    )


def test_it_reports_a_crash_looping_pytorchjob_with_the_exit_code() -> None:
    crashing = pod(
        "run-42-master-0",
        "run-42",
        container_statuses=[
            waiting("CrashLoopBackOff", "back-off 40s", last=terminated("Error", 1)["state"]["terminated"], restarts=3)
        ],
    )
    restarting = _pytorchjob(
        [_cond("Created"), _cond("Restarting", "PyTorchJobRestarting", "replica master restarted")]
    )
    status = training_status(_obs([restarting], [crashing]))
    assert (status.state, status.reason) == (TrainingPhase.RUNNING, "CrashLoopBackOff (exit 1)")
    assert status.running_units == 1  # the crashing pod still holds its GPU


def test_it_keeps_oom_visible_after_a_restart_in_place() -> None:
    oom = terminated("OOMKilled", 137)["state"]["terminated"]
    crashing = pod("run-42-master-0", "run-42", container_statuses=[waiting("CrashLoopBackOff", last=oom, restarts=1)])
    running = _pytorchjob([_cond("Running")])
    assert training_status(_obs([running], [crashing])).reason == (
        "CrashLoopBackOff after OOMKilled (exit 137): the container ran out of memory — raise memory_gb or lower "
        "the batch size")


def test_it_waits_for_the_gang_with_the_schedulers_words() -> None:
    waiting_pods = [
        pod(f"run-42-worker-{i}", "run-42", phase="Pending", node=None, conditions=[UNSCHEDULABLE]) for i in range(2)
    ]
    status = training_status(_obs([_pytorchjob([_cond("Created")])], waiting_pods))
    assert status.state == TrainingPhase.PENDING
    assert status.reason.startswith("Unschedulable: 0/8 nodes")


def test_it_survives_empty_payloads() -> None:
    status = training_status(_obs([{"kind": "Job"}], [{"kind": "Pod"}]))
    assert status == WorkloadStatus(TrainingPhase.PENDING, "")


def test_a_failed_job_ends_at_its_condition_and_a_failed_pytorchjob_at_its_completion_time() -> None:
    # Kubernetes sets a Job's completionTime only when it succeeds (a stray one on a failed Job is
    # not its end); the training operator sets a PyTorchJob's whichever way it ends.
    condition_time, completion = "2026-01-01T11:00:00Z", T1
    job = _job({"failed": 1, "startTime": T0, "completionTime": completion,
                "conditions": [_cond("Failed", "BackoffLimitExceeded", when=condition_time)]})
    assert training_status(_obs([job])).finished_at == parse_time(condition_time)
    failed = _pytorchjob([_cond("Failed", "PyTorchJobFailed", when=condition_time)], completionTime=completion)
    assert training_status(_obs([failed])).finished_at == parse_time(completion)
    unstamped = _pytorchjob([_cond("Failed", "PyTorchJobFailed", when=condition_time)])
    assert training_status(_obs([unstamped])).finished_at == parse_time(condition_time)


def _trainjob(conditions: list[dict[str, Any]], **status: Any) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "run-42"},
            "spec": {}, "status": {"conditions": conditions, **status}}


def test_it_maps_trainjob_conditions_and_reads_the_trainers_status() -> None:
    """Trainer v2 (issue 51 point 5): Created → pending; its nodes' pods running → running; Complete / Failed at
    their condition's time (a TrainJob has no completionTime); Suspended → pending; trainerStatus rides along."""
    created = _trainjob([_cond("Created", "JobSetCreated")])
    assert training_status(_obs([created])).state == TrainingPhase.PENDING
    nodes = [pod(f"run-42-node-0-{i}", "run-42", gpus=4, container_statuses=[running_container()]) for i in range(2)]
    trainer = {"progressPercentage": 40, "estimatedRemainingSeconds": 600, "lastUpdatedTime": T1,
               "metrics": [{"name": "loss", "value": "0.71"}, {"name": "eval_accuracy", "value": "0.82"}]}
    running = _trainjob([_cond("Created")], trainerStatus=trainer,
                        jobsStatus=[{"name": "node", "active": 1, "ready": 1, "succeeded": 0, "failed": 0}])
    status = training_status(_obs([running], nodes))
    assert (status.state, status.running_units, status.reason) == (TrainingPhase.RUNNING, 8, "")
    assert (status.trainer.percent, status.trainer.remaining_seconds, status.trainer.at) == (40, 600, parse_time(T1))
    assert status.trainer.metrics == (("loss", "0.71"), ("eval_accuracy", "0.82"))
    done = training_status(_obs([_trainjob([_cond("Created"), _cond("Complete", "JobSetCompleted", when=T1)])]))
    assert (done.state, done.finished_at) == (TrainingPhase.SUCCEEDED, parse_time(T1))
    suspended = training_status(_obs([_trainjob([_cond("Suspended", "Suspended")])]))
    assert (suspended.state, suspended.reason) == (TrainingPhase.PENDING, "Suspended")


def test_a_failed_trainjob_says_why_with_its_nodes_pods() -> None:
    oom = pod("run-42-node-0-1", "run-42", phase="Failed", container_statuses=[terminated("OOMKilled", 137)])
    failed = _trainjob([_cond("Created"), _cond("Failed", "JobSetFailed", "jobset failed: node-0 failed", when=T1)])
    status = training_status(_obs([failed], [oom]))
    assert (status.state, status.finished_at) == (TrainingPhase.FAILED, parse_time(T1))
    assert status.reason.startswith("JobSetFailed: jobset failed: node-0 failed (last attempt: OOMKilled (exit 137)")
    stuck = [pod(f"run-42-node-0-{i}", "run-42", phase="Pending", node=None, conditions=[UNSCHEDULABLE])
             for i in range(2)]
    waiting_gang = training_status(_obs([_trainjob([_cond("Created")])], stuck))
    assert waiting_gang.state == TrainingPhase.PENDING and waiting_gang.reason.startswith("Unschedulable: 0/8 nodes")


def test_a_trainer_status_without_its_timestamp_or_with_values_out_of_range_says_nothing_of_them() -> None:
    unstamped = _trainjob([_cond("Created")], trainerStatus={"progressPercentage": 10})
    assert training_status(_obs([unstamped])).trainer is None
    odd = _trainjob([_cond("Created")], trainerStatus={"progressPercentage": 140, "estimatedRemainingSeconds": "soon",
                                                       "lastUpdatedTime": T1, "metrics": [{"name": "loss"}]})
    found = training_status(_obs([odd])).trainer
    assert (found.percent, found.remaining_seconds, found.metrics) == (None, None, ())
