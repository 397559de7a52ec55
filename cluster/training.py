"""Which training API a cluster has, and what it means for distributed training (pure; docs/training.md).

Kubeflow has two APIs for distributed training: the Training Operator v1's per-framework CRDs, of
which Slipway submits ``kubeflow.org/v1 PyTorchJob``, and Kubeflow Trainer v2's one
``trainer.kubeflow.org/v1alpha1 TrainJob``, which refers to a ``ClusterTrainingRuntime`` (its
``mlPolicy`` says which framework, its ``template`` the JobSet to run). A cluster has one of them,
or neither: the vocabulary is :data:`TRAINING_APIS`.

A backend finds out by API discovery (:meth:`cluster.backends.base.ClusterBackend.training`): the
Trainer v2 group serving ``trainjobs`` wins, else the v1 group serving ``pytorchjobs``, else none;
with Trainer v2 it also lists the ClusterTrainingRuntimes, the runtimes the cluster offers. This
module holds the decisions taken on what discovery read — :func:`discovered`, :func:`runtime_of` — and
the rules the layers above ask: :func:`effective` (a staff override wins over discovery),
:func:`frameworks`, and :func:`runs_distributed` (which API takes distributed training today).
No I/O, no Django: the real backend, the sandbox and the portal ask the same functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

TRAINJOB = "trainjob"  #: Kubeflow Trainer v2: TrainJob, with its runtimes
PYTORCHJOB = "pytorchjob"  #: Kubeflow Training Operator v1: PyTorchJob
NONE = "none"  #: neither is installed
#: The one vocabulary of a cluster's training API (the fleet's choices and the API's enum come from it).
TRAINING_APIS = (TRAINJOB, PYTORCHJOB, NONE)
#: How people read each.
LABELS = {TRAINJOB: "Trainer v2 (TrainJob)", PYTORCHJOB: "Training Operator v1 (PyTorchJob)", NONE: "no training API"}

#: What a cluster not checked yet is taken to have: what Slipway submitted distributed training to on every
#: cluster before it asked. So an upgrade changes nothing until a cluster's first discovery says otherwise.
ASSUMED = PYTORCHJOB

#: The training APIs Slipway submits distributed training to: the v1 PyTorchJob and Trainer v2's TrainJob.
DISTRIBUTED_APIS = (PYTORCHJOB, TRAINJOB)

#: The frameworks a run's spec may name (``framework``; docs/training.md "Frameworks"), in the order forms list
#: them: PyTorch (``torchrun``), DeepSpeed, JAX, MPI (TensorFlow/Horovod style) and XGBoost.
PYTORCH = "pytorch"
FRAMEWORKS = (PYTORCH, "deepspeed", "jax", "mpi", "xgboost")
#: What a run that names none runs: what every distributed run was before frameworks.
DEFAULT_FRAMEWORK = PYTORCH
#: The ClusterTrainingRuntimes Slipway ships (deploy/training-runtimes/) are named this, then the framework:
#: ``slipway-pytorch`` …; a cluster's runtime of that name wins over any other of the framework (:func:`runtime_for`).
RUNTIME_PREFIX = "slipway-"
#: The JobSet replicated jobs of a runtime that run the trainer, per framework (the rest: ``node``). An MPI
#: runtime (MPI, DeepSpeed) runs its launcher as node 0 (``runLauncherAsNode``), so it has both; the TrainJob
#: builder patches each (labels, volumes, secret env) and Slipway's runtimes are built with these names.
TRAINER_JOBS = {"mpi": ("launcher", "node"), "deepspeed": ("launcher", "node")}
NODE_JOB = "node"
#: The trainer container's name in every replicated job of a runtime (upstream's runtimes name it so too).
TRAINER_CONTAINER = "node"

#: Where discovery looks: the group version and resource of each API (``GET /apis/<group version>``).
TRAINJOB_API = ("trainer.kubeflow.org/v1alpha1", "trainjobs")
PYTORCHJOB_API = ("kubeflow.org/v1", "pytorchjobs")
#: The runtimes a Trainer v2 cluster offers: cluster-scoped ones only (a namespaced TrainingRuntime is one team's).
RUNTIMES_API = ("trainer.kubeflow.org/v1alpha1", "clustertrainingruntimes")

#: The label a runtime names its framework with (upstream's runtimes carry it: ``torch``, ``deepspeed`` …).
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
#: ``mlPolicy``'s members that name a framework (``numNodes`` is a count, not one).
ML_POLICIES = ("torch", "mpi", "jax", "xgboost", "flux")
#: Upstream's framework words that Slipway says otherwise: its runs' framework is ``pytorch``.
FRAMEWORK_WORDS = {"torch": "pytorch"}
#: What a v1 cluster offers: the PyTorchJob is PyTorch's (its TFJob, MPIJob … Slipway never submits).
V1_FRAMEWORKS = ("pytorch",)


@dataclass(frozen=True, order=True)
class Runtime:
    """One ClusterTrainingRuntime: its name (what a TrainJob's ``runtimeRef`` names) and its framework
    in Slipway's words ("" when it says none)."""

    name: str
    framework: str = ""


@dataclass(frozen=True)
class TrainingOffer:
    """What discovery found on one cluster: its training API and, with Trainer v2, its runtimes."""

    api: str
    runtimes: tuple[Runtime, ...] = ()

    @property
    def frameworks(self) -> tuple[str, ...]:
        return frameworks(self.api, self.runtimes)


def serves(resources: Mapping[str, Any] | None, plural: str) -> bool:
    """Whether an API discovery document (the ``APIResourceList`` of ``GET /apis/<group>/<version>``;
    None: the group version is not served) lists the resource ``plural``."""
    return any(isinstance(r, dict) and r.get("name") == plural for r in (resources or {}).get("resources") or [])


def runtime_of(manifest: Mapping[str, Any]) -> Runtime:
    """A ClusterTrainingRuntime as :class:`Runtime`. Its framework is its label's, which says more than its
    ``mlPolicy`` (DeepSpeed's runtime is an ``mpi`` policy labelled ``deepspeed``), else its policy's."""
    meta = manifest.get("metadata") or {}
    framework = str((meta.get("labels") or {}).get(FRAMEWORK_LABEL) or "")
    if not framework:
        policy = ((manifest.get("spec") or {}).get("mlPolicy")) or {}
        framework = next((name for name in ML_POLICIES if name in policy), "")
    return Runtime(str(meta.get("name") or ""), FRAMEWORK_WORDS.get(framework, framework))


def discovered(trainjob: bool, pytorchjob: bool, runtimes: Iterable[Mapping[str, Any]] = ()) -> TrainingOffer:
    """The offer of a cluster that serves the TrainJob (``trainjob``) and the PyTorchJob (``pytorchjob``), with
    ``runtimes`` (its ClusterTrainingRuntimes, read only when it serves the TrainJob).

    Trainer v2 wins when both are there: it is what a cluster moves to, and the v1 operator left beside
    it finishes what it runs. A cluster whose staff want the v1 API meanwhile say so by the override.
    """
    if trainjob:
        return TrainingOffer(TRAINJOB, tuple(sorted({runtime_of(m) for m in runtimes if runtime_of(m).name})))
    return TrainingOffer(PYTORCHJOB if pytorchjob else NONE)


def effective(discovered_api: str, override: str = "") -> str:
    """The API a cluster is taken to have: staff's override, else what discovery found, else (not checked
    yet: "") :data:`ASSUMED`. The one rule placement, the API and the admin console read."""
    return override or discovered_api or ASSUMED


def frameworks(api: str, runtimes: Iterable[Runtime] = ()) -> tuple[str, ...]:
    """The frameworks a cluster of ``api`` offers: a Trainer v2 cluster those its runtimes name, a v1 cluster
    PyTorch (:data:`V1_FRAMEWORKS`), a cluster without a training API none."""
    if api == TRAINJOB:
        return tuple(sorted({r.framework for r in runtimes if r.framework}))
    return V1_FRAMEWORKS if api == PYTORCHJOB else ()


def runs_distributed(api: str) -> bool:
    """Whether a cluster of ``api`` takes distributed training of some framework (:data:`DISTRIBUTED_APIS`)."""
    return api in DISTRIBUTED_APIS


def takes(api: str, offered: Iterable[str], framework: str) -> bool:
    """Whether a cluster of ``api`` offering the frameworks ``offered`` (:func:`frameworks`) takes work of
    ``framework``: "" is work that is no distributed training (a plain Job, an endpoint …), which needs no
    training API; else the cluster's API must take distributed training and offer the framework.
    The one rule placement, the price quote, admission's wait and a submission's field error ask."""
    return not framework or (runs_distributed(api) and framework in tuple(offered))


def trainer_jobs(framework: str) -> tuple[str, ...]:
    """The replicated jobs of ``framework``'s runtime that run the trainer (:data:`TRAINER_JOBS`)."""
    return TRAINER_JOBS.get(framework, (NODE_JOB,))


def runtime_for(runtimes: Iterable[Runtime], framework: str) -> str:
    """The ClusterTrainingRuntime a TrainJob of ``framework`` refers to on a cluster offering ``runtimes``:
    Slipway's own (``slipway-<framework>``) when the cluster has it, else the first by name of the framework's,
    else Slipway's name (what the manifest of work not placed yet shows: the runtime deploy/ ships)."""
    of = sorted(r.name for r in runtimes if r.framework == framework)
    own = f"{RUNTIME_PREFIX}{framework}"
    return own if own in of or not of else of[0]


def refusal(api: str, framework: str = PYTORCH, offered: Iterable[str] = ()) -> str:
    """Why a cluster of ``api`` offering ``offered`` takes no distributed training of ``framework``, in words
    ("" when it does)."""
    if takes(api, offered, framework):
        return ""
    if api == PYTORCHJOB:
        return f"has the v1 Training Operator (PyTorchJob), which runs pytorch only, not {framework}"
    if api == TRAINJOB:
        return f"has Trainer v2 (TrainJob) with no runtime for {framework}"
    return "has no training API (neither Trainer v2's TrainJob nor the v1 PyTorchJob)"


@dataclass(frozen=True)
class ClusterTraining:
    """What a cluster is taken to have for training: its effective API and the frameworks it offers."""

    api: str = ASSUMED
    frameworks: tuple[str, ...] = V1_FRAMEWORKS

    def takes(self, framework: str) -> bool:
        return takes(self.api, self.frameworks, framework)

    def refusal(self, framework: str) -> str:
        return refusal(self.api, framework, self.frameworks)


def distributed_refusal(selected: Mapping[str, ClusterTraining], every: Mapping[str, ClusterTraining],
                        framework: str = PYTORCH) -> str:
    """Why distributed training of ``framework`` can go to no cluster of ``selected`` (name → what it has: those
    its cluster selector leaves it), naming the clusters of ``every`` (all of them) that take it; "" when one
    of ``selected`` does. What a submission's field error says: such work could never be placed."""
    if not selected or any(c.takes(framework) for c in selected.values()):
        return ""  # no cluster carries its selector's labels: the selector's own field error says so
    able = sorted(name for name, c in every.items() if c.takes(framework))
    why = "; ".join(f"{name} {c.refusal(framework)}" for name, c in sorted(selected.items()))
    if not able:
        return f"No cluster takes distributed {framework} training now: {why}."
    takers = f"{able[0]} takes" if len(able) == 1 else f"{', '.join(able[:-1])} and {able[-1]} take"
    them = "it" if len(able) == 1 else "them"
    return f"Only {takers} distributed {framework} training, and the cluster selector leaves {them} out: {why}."
