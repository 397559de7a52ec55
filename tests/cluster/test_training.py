"""A cluster's training API: the pure rules (cluster.training) and discovery by the real backend over HTTP."""

from __future__ import annotations

import pytest

from cluster import training
from cluster.backends.base import ResourceKind
from cluster.backends.kubernetes import KubernetesBackend
from cluster.errors import Transient
from cluster.training import NONE, PYTORCHJOB, TRAINJOB, Runtime, TrainingOffer
from tests.cluster.fakeapi import FakeKubeAPI

TRAINJOBS = ResourceKind("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs")
RUNTIMES = ResourceKind(
    "trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime", "clustertrainingruntimes", namespaced=False
)


def runtime(name: str, framework: str | None = None, policy: str = "torch") -> dict:
    """A ClusterTrainingRuntime as upstream ships them: a framework label (or none) and an ``mlPolicy``."""
    labels = {training.FRAMEWORK_LABEL: framework} if framework else {}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": labels},
        "spec": {"mlPolicy": {"numNodes": 1, policy: {}}, "template": {"spec": {"replicatedJobs": []}}},
    }


def install_trainer(api: FakeKubeAPI, *runtimes: dict) -> None:
    """Kubeflow Trainer v2 as a cluster admin installs it: its CRDs, and the runtimes they ship."""
    api.install(TRAINJOBS)
    api.install(RUNTIMES)
    for item in runtimes:
        api.put(item)


# -- the pure rules ----------------------------------------------------------------------------


def test_trainer_v2_wins_over_v1_and_neither_is_none():
    assert training.discovered(True, True).api == TRAINJOB  # both installed: what the cluster moves to
    assert training.discovered(False, True) == TrainingOffer(PYTORCHJOB)
    assert training.discovered(False, False) == TrainingOffer(NONE)
    # Runtimes count only with Trainer v2 (a v1 cluster's PyTorchJob is PyTorch's).
    assert training.discovered(False, True, [runtime("torch-distributed", "torch")]).runtimes == ()


def test_a_runtimes_framework_is_its_label_else_its_ml_policy_in_slipways_words():
    assert training.runtime_of(runtime("torch-distributed", "torch")) == Runtime("torch-distributed", "pytorch")
    # DeepSpeed's runtime is an MPI policy: its label says more.
    assert training.runtime_of(runtime("deepspeed-distributed", "deepspeed", "mpi")).framework == "deepspeed"
    assert training.runtime_of(runtime("jax-plain", None, "jax")).framework == "jax"
    assert training.runtime_of({"metadata": {"name": "bare"}, "spec": {"mlPolicy": {"numNodes": 2}}}).framework == ""
    offer = training.discovered(
        True, False, [runtime("b", "xgboost", "xgboost"), runtime("a", "torch"), runtime("c", "torch")]
    )
    assert offer.runtimes == (Runtime("a", "pytorch"), Runtime("b", "xgboost"), Runtime("c", "pytorch"))
    assert offer.frameworks == ("pytorch", "xgboost")


def test_the_override_wins_and_an_unchecked_cluster_is_taken_to_have_what_slipway_assumed_before():
    assert training.effective(NONE, TRAINJOB) == TRAINJOB
    assert training.effective(NONE) == NONE
    assert training.effective("") == training.ASSUMED == PYTORCHJOB


def test_frameworks_follow_the_api():
    runtimes = (Runtime("torch-distributed", "pytorch"), Runtime("mpi", "mpi"), Runtime("odd", ""))
    assert training.frameworks(TRAINJOB, runtimes) == ("mpi", "pytorch")
    assert training.frameworks(PYTORCHJOB, runtimes) == ("pytorch",)  # v1: PyTorch only, whatever it lists
    assert training.frameworks(NONE, runtimes) == ()


def test_a_cluster_takes_the_frameworks_its_api_offers():
    runtimes = (Runtime("slipway-pytorch", "pytorch"), Runtime("slipway-jax", "jax"))
    v2 = training.ClusterTraining(TRAINJOB, training.frameworks(TRAINJOB, runtimes))
    v1 = training.ClusterTraining(PYTORCHJOB, training.frameworks(PYTORCHJOB))
    none = training.ClusterTraining(NONE, ())
    assert v2.takes("pytorch") and v2.takes("jax") and not v2.takes("mpi")
    assert v1.takes("pytorch") and not v1.takes("jax")
    assert not none.takes("pytorch")
    assert all(c.takes("") for c in (v1, v2, none))  # no distributed training: no training API needed
    assert v1.refusal("pytorch") == "" and "pytorch only, not jax" in v1.refusal("jax")
    assert "no runtime for mpi" in v2.refusal("mpi") and "no training API" in none.refusal("pytorch")


def test_a_trainjob_refers_to_slipways_runtime_for_its_framework_else_the_first_of_it():
    ours = (Runtime("a-torch", "pytorch"), Runtime("slipway-pytorch", "pytorch"), Runtime("b-jax", "jax"))
    assert training.runtime_for(ours, "pytorch") == "slipway-pytorch"
    assert training.runtime_for(ours, "jax") == "b-jax"
    assert training.runtime_for((), "mpi") == "slipway-mpi"  # not placed yet: the runtime deploy/ ships
    assert training.trainer_jobs("mpi") == ("launcher", "node") and training.trainer_jobs("jax") == ("node",)


def test_the_field_error_names_the_clusters_that_take_the_framework():
    v1, v2 = training.ClusterTraining(PYTORCHJOB, ("pytorch",)), training.ClusterTraining(TRAINJOB, ("jax", "pytorch"))
    none = training.ClusterTraining(NONE, ())
    every = {"east": v2, "west": v1, "south": none}
    assert training.distributed_refusal(every, every) == ""  # east and west take pytorch
    words = training.distributed_refusal({"west": v1, "south": none}, every, "jax")
    assert words.startswith("Only east takes distributed jax training, and the cluster selector leaves it out")
    assert "west has the v1 Training Operator (PyTorchJob), which runs pytorch only, not jax" in words
    assert "south has no training API" in words
    alone = {"west": v1}
    assert training.distributed_refusal(alone, alone, "jax").startswith("No cluster takes distributed jax training now")
    assert training.distributed_refusal({}, every, "jax") == ""  # no cluster carries its selector: the selector's error


# -- discovery by the real backend, over HTTP (tests/cluster/conftest.py: the API fake, a backend on it) ---------


def test_a_cluster_with_trainer_v2_has_the_trainjob_and_its_runtimes(backend: KubernetesBackend, kube_api):
    install_trainer(
        kube_api, runtime("torch-distributed", "torch"), runtime("deepspeed-distributed", "deepspeed", "mpi")
    )
    offer = backend.training()
    assert offer == TrainingOffer(
        TRAINJOB, (Runtime("deepspeed-distributed", "deepspeed"), Runtime("torch-distributed", "pytorch"))
    )
    asked = [(r.method, r.path) for r in kube_api.requests]
    assert asked == [
        ("GET", "/apis/trainer.kubeflow.org/v1alpha1"),
        ("GET", "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes"),
    ]


def test_a_cluster_with_only_the_v1_operator_has_the_pytorchjob(backend, kube_api):
    assert backend.training() == TrainingOffer(PYTORCHJOB)  # the fake serves PyTorchJobs by default
    assert [r.path for r in kube_api.requests] == ["/apis/trainer.kubeflow.org/v1alpha1", "/apis/kubeflow.org/v1"]


def test_a_cluster_with_neither_has_none(backend, kube_api):
    kube_api.uninstalled.add("pytorchjobs")
    assert backend.training() == TrainingOffer(NONE)


def test_trainer_v2_without_its_runtimes_crd_offers_no_runtime(backend, kube_api):
    kube_api.install(TRAINJOBS)
    assert backend.training() == TrainingOffer(TRAINJOB)


def test_a_server_that_does_not_answer_raises_for_the_caller_to_keep_what_it_knew(backend, kube_api):
    kube_api.fail(503, times=5)
    with pytest.raises(Transient):
        backend.training()
