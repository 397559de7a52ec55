"""A workload's pods in words: which ones have logs to read, and which attempt a retried Job is on (pure).

Both backends return the same Kubernetes-shaped pods (:meth:`ClusterBackend.pods`), so one
module names them for the log picker and for the run's reason:

* a **Job** runs with ``restartPolicy: Never``, so every attempt is a pod of its own and the
  Job controller keeps the failed ones (it counts them against ``backoffLimit``). Earlier
  attempts' logs are therefore read like any pod's, on a real cluster and in the sandbox
  alike — by the workload label, not with ``previous=true``, which only reaches the one
  container restart before the current one of the *same* pod;
* a **PyTorchJob** has a Master and Workers, named by the training-operator's
  ``training.kubeflow.org/replica-type`` and ``replica-index`` labels ("master-0", "worker-1").
  Its replicas run with ``restartPolicy: OnFailure``: the training-operator does not make a new
  pod for a failed attempt, the kubelet restarts the container in place (``restartCount``,
  ``lastState.terminated``). The earlier attempt's log is therefore the container's
  *previous* log (``previous=true``) — the kubelet keeps only the one run before the current
  one, so of a replica restarted twice the first attempt's log is gone. Each restarted replica
  is offered twice: its current run and that previous one ("master-0, attempt 1 (Error (exit 1))");
* a **TrainJob** (Kubeflow Trainer v2) runs a JobSet: each replicated job is one indexed Job, so its
  pods carry JobSet's ``jobset.sigs.k8s.io/replicatedjob-name`` and the Job's
  ``batch.kubernetes.io/job-completion-index``, and are named by them ("node-0", "node-1"; an MPI
  runtime's "launcher-0" first, it is node 0). They are one attempt's nodes, not a Job's attempts,
  although the Job controller's labels are on them too: the JobSet label is read first. A restart
  makes new pods (the old ones go with their Jobs), so there is no previous run to offer;
* anything else (an endpoint's replicas) is listed by pod name, oldest first.

The first source is the one shown when the user picked none: a PyTorchJob's Master, a TrainJob's
rank 0, a Job's newest attempt, the oldest replica. A source's :attr:`LogSource.key` is what the picker and
``?pod=`` carry: the pod's name, or ``<pod>:previous`` for a replica's earlier attempt (``:``
is never part of a pod name).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Manifest = dict[str, Any]

#: Labels the training-operator puts on PyTorchJob pods (and the older ``pytorch-`` spelling).
REPLICA_TYPE_LABELS = ("training.kubeflow.org/replica-type", "pytorch-replica-type")
REPLICA_INDEX_LABELS = ("training.kubeflow.org/replica-index", "pytorch-replica-index")
#: Labels the Job controller puts on its pods.
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
#: Labels JobSet (a TrainJob's) and its indexed Jobs put on their pods: the replicated job, the node's index.
REPLICATED_JOB_LABELS = ("jobset.sigs.k8s.io/replicatedjob-name",)
COMPLETION_INDEX_LABELS = ("batch.kubernetes.io/job-completion-index",)
#: The replicated job that is rank 0 when a runtime has it (MPI's launcher); the others come after it.
LAUNCHER_JOB = "launcher"


#: What ``?pod=`` appends to a pod's name for its container's previous run.
PREVIOUS_SUFFIX = ":previous"


@dataclass(frozen=True)
class LogSource:
    """One pod whose log can be read: its name, what the picker calls it, and whether it is the
    container's previous run (before its last restart) rather than the current one."""

    pod: str
    label: str
    previous: bool = False

    @property
    def key(self) -> str:
        """What the picker's option and ``?pod=`` carry: unique among a workload's sources."""
        return f"{self.pod}{PREVIOUS_SUFFIX}" if self.previous else self.pod


def _meta(pod: Manifest) -> Manifest:
    return pod.get("metadata") or {}


def _label(pod: Manifest, keys: tuple[str, ...]) -> str:
    labels = _meta(pod).get("labels") or {}
    return next((str(labels[key]) for key in keys if labels.get(key) not in (None, "")), "")


def _oldest_first(pods: list[Manifest]) -> list[Manifest]:
    return sorted(pods, key=lambda p: (_meta(p).get("creationTimestamp") or "", _meta(p).get("name") or ""))


def _phase(pod: Manifest) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def terminated_reason(terminated: Manifest) -> str:
    """A container's ``state.terminated`` in words: "OOMKilled (exit 137)", "Error (exit 1)"."""
    try:
        code = int(terminated.get("exitCode") or 0)
    except (TypeError, ValueError):
        code = 0
    return f"{terminated.get('reason') or 'Error'} (exit {code})"


def ended(pod: Manifest) -> str:
    """How a finished pod's container ended ("Error (exit 1)", "OOMKilled (exit 137)"), else ""."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            return terminated_reason(terminated)
    return "Failed" if _phase(pod) == "Failed" else ""


def _restarted(pod: Manifest) -> tuple[int, Manifest] | None:
    """A container restarted in place: its ``restartCount`` and how its previous run ended; else None."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        last = (container.get("lastState") or {}).get("terminated")
        try:
            restarts = int(container.get("restartCount") or 0)
        except (TypeError, ValueError):
            restarts = 0
        if last and restarts > 0:
            return restarts, last
    return None


def job_attempts(pods: list[Manifest]) -> list[Manifest]:
    """A Job's pods, one per attempt, oldest first ([] when ``pods`` are not a Job's: a TrainJob's nodes, whose
    Jobs are JobSet's, are not attempts)."""
    return _oldest_first([p for p in pods if _label(p, JOB_NAME_LABELS) and not _label(p, REPLICATED_JOB_LABELS)])


def _replica_order(pod: Manifest) -> tuple[int, int, str]:
    role = _label(pod, REPLICA_TYPE_LABELS).lower()
    index = _label(pod, REPLICA_INDEX_LABELS)
    return (0 if role == "master" else 1, int(index) if index.isdigit() else 0, _meta(pod).get("name") or "")


def _node_order(pod: Manifest) -> tuple[int, str, int, str]:
    job = _label(pod, REPLICATED_JOB_LABELS)
    index = _label(pod, COMPLETION_INDEX_LABELS)
    return (0 if job == LAUNCHER_JOB else 1, job, int(index) if index.isdigit() else 0, _meta(pod).get("name") or "")


def log_sources(pods: list[Manifest], ended_as: str = "") -> list[LogSource]:
    """Every pod with a log, in picker order; the first is shown when the user picked none.

    ``ended_as`` is how the workload ended ("cancelled"), once it has: an attempt whose pod has
    not caught up (still "running" while its deletion is under way) is labelled with that instead,
    so the picker never says "(running)" about a run that is over.
    """
    replicas = [p for p in pods if _label(p, REPLICA_TYPE_LABELS)]
    if replicas:
        sources = []
        for pod in sorted(replicas, key=_replica_order):
            name = _meta(pod).get("name", "")
            replica = f"{_label(pod, REPLICA_TYPE_LABELS).lower()}-{_label(pod, REPLICA_INDEX_LABELS) or 0}"
            sources.append(LogSource(name, replica))
            restarted = _restarted(pod)
            if restarted is not None:  # its run before the last restart: attempt <restartCount>
                restarts, last = restarted
                sources.append(LogSource(name, f"{replica}, attempt {restarts} ({terminated_reason(last)})",
                                         previous=True))
        return sources
    nodes = [p for p in pods if _label(p, REPLICATED_JOB_LABELS)]
    if nodes:
        return [LogSource(_meta(p).get("name", ""),
                          f"{_label(p, REPLICATED_JOB_LABELS)}-{_label(p, COMPLETION_INDEX_LABELS) or 0}")
                for p in sorted(nodes, key=_node_order)]
    attempts = job_attempts(pods)
    if attempts:
        sources = []
        for number, pod in enumerate(attempts, start=1):
            state = ended(pod) or ended_as or _phase(pod).lower()
            sources.append(LogSource(_meta(pod).get("name", ""), f"attempt {number} ({state})"))
        return sources[::-1]  # the newest attempt first: it is the one that matters now
    return [LogSource(_meta(p).get("name", ""), _meta(p).get("name", "")) for p in _oldest_first(pods)]


def attempt_words(pods: list[Manifest], max_retries: int) -> str:
    """Where a retried Job is: "attempt 2 of 3; attempt 1 ended: Error (exit 1)"; "" on its first attempt.

    Between attempts (the controller's back-off) it says the last one ended and a retry is due.
    """
    attempts = job_attempts(pods)
    total = max_retries + 1
    last = attempts[-1] if attempts else None
    if last is not None and _phase(last) == "Failed" and len(attempts) < total:
        return f"attempt {len(attempts)} of {total} ended: {ended(last)}; retrying after a back-off"
    if len(attempts) < 2:
        return ""
    return f"attempt {len(attempts)} of {total}; attempt {len(attempts) - 1} ended: {ended(attempts[-2])}"
