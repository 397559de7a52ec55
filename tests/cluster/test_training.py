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


def test_only_the_pytorchjob_takes_distributed_training_until_the_trainjob_is_submitted():
    assert training.runs_distributed(PYTORCHJOB)
    assert not training.runs_distributed(TRAINJOB) and not training.runs_distributed(NONE)
    assert training.refusal(PYTORCHJOB) == ""
    assert "no training API" in training.refusal(NONE) and "Trainer v2" in training.refusal(TRAINJOB)


def test_the_field_error_names_the_clusters_that_take_distributed_training():
    every = {"east": NONE, "west": PYTORCHJOB, "south": TRAINJOB}
    assert training.distributed_refusal(every, every) == ""  # west takes it
    words = training.distributed_refusal({"east": NONE, "south": TRAINJOB}, every)
    assert words.startswith("Only west takes distributed training")
    assert "east has no training API" in words and "south has Trainer v2" in words
    none = {"east": NONE, "south": TRAINJOB}
    assert training.distributed_refusal(none, none).startswith("No cluster takes distributed training now: east has")
    assert training.distributed_refusal({}, every) == ""  # no cluster carries its selector: the selector's error


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
