"""The frozen description of a training run that its pure builders (:mod:`jobs.manifests`) render.

Like the shared specs (:mod:`cluster.specs`, whose flavor and volume it holds): no Django objects,
tuples rather than lists, so the same spec always renders the same manifests. The builders assume
the portal has validated it (:mod:`jobs.validation`); they do not re-validate it.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.specs import FlavorSpec, VolumeSpec
from cluster.training import DEFAULT_FRAMEWORK, PYTORCHJOB


@dataclass(frozen=True)
class CheckpointSpec:
    """A run's checkpoint contract (docs/api.md "The checkpoint contract (runs)"), as its pods see it.

    ``claim`` is the PersistentVolumeClaim mounted at ``mount_path`` in every pod; when
    ``provided`` Slipway creates it itself (``<object name>-checkpoints``, of ``storage`` and
    ``storage_class``), else it is the team's own. ``attempt`` and ``resume_from`` change from one
    attempt to the next (a preempted run is applied anew); the run token is never here, only the
    name of the Secret key the pods read it from.
    """

    claim: str
    provided: bool = True
    grace_seconds: int = 60
    attempt: int = 1
    resume_from: str = ""
    mount_path: str = "/slipway/checkpoints"
    storage: str = "100Gi"
    storage_class: str | None = None
    #: Where the pods POST a checkpoint (SLIPWAY_CHECKPOINT_URL); "" when the portal's address
    #: for pods is not configured (they print the SLIPWAY_CHECKPOINT line instead).
    report_url: str = ""


@dataclass(frozen=True)
class TrainingSpec:
    """A training run: a Job when ``workers == 1``; otherwise a TrainJob on a cluster whose ``training_api`` is
    Trainer v2's (referring to its ``runtime`` for the ``framework``), else a PyTorchJob."""

    object_name: str  # "run-42": the object name and the slipway.dev/workload label value
    team: str  # team slug
    namespace: str
    name: str  # the user's run name, an annotation only
    image: str
    command: tuple[str, ...]
    flavor: FlavorSpec
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    #: Names of the secret env variables: taken from the Secret ``<object_name>-env`` (values never here).
    secret_env: tuple[str, ...] = ()
    gpus_per_worker: int = 1
    workers: int = 1
    cpu: float | None = None
    memory_gb: float | None = None
    shm_gb: float | None = None
    max_retries: int = 2
    #: The current attempt's ``activeDeadlineSeconds``: what its runtime limit leaves it after its earlier
    #: attempts (:meth:`workloads.registry.WorkloadKind.runtime_left`); None: no limit.
    active_deadline_seconds: int | None = None
    spot: bool = False
    volumes: tuple[VolumeSpec, ...] = ()
    #: The checkpoint contract, when the run opted in (None: pods exactly as without it).
    checkpoint: CheckpointSpec | None = None
    #: What its distributed training runs (:data:`cluster.training.FRAMEWORKS`).
    framework: str = DEFAULT_FRAMEWORK
    #: The training API of the cluster it lands on (:data:`cluster.training.TRAINING_APIS`), and there the
    #: ClusterTrainingRuntime for its framework (:func:`cluster.training.runtime_for`; TrainJob only).
    training_api: str = PYTORCHJOB
    runtime: str = ""
