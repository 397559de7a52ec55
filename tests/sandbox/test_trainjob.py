"""The sandbox's TrainJob controller (Kubeflow Trainer v2, issue 51 point 7): a TrainJob built by the portal's
builder runs on a Trainer v2 cluster's runtime as a JobSet — its nodes gang-started, ranked, logged rank 0
first, its progress in ``trainerStatus``; a failed node restarts the set until the runtime's restarts are
spent; deadlines, missing runtimes and the other API's kind are refused or failed as upstream does."""

from __future__ import annotations

import pytest

from cluster.errors import Invalid, NotFound
from cluster.pods import log_sources
from cluster.training import PYTORCHJOB, TRAINJOB, Runtime, TrainingOffer
from jobs.manifests import build_training
from jobs.specs import TrainingSpec
from sandbox.backend import SandboxBackend
from tests.sandbox.helpers import CONFIG, H100, NS, TEAM, at, observed, ref, run_until, team_objects
from workloads.registry import resource_kinds

pytestmark = pytest.mark.django_db

#: east on Trainer v2, west on the v1 Training Operator, south on neither; nodes of 8 H100s.
INVENTORY = """
clusters:
  - name: east
    training: trainjob
    pools:
      - {prefix: gpu-h100, count: 3, cpu: "192", memory: 2048Gi, gpu: {product: NVIDIA-H100-80GB-HBM3, count: 8}}
  - name: west
    training: pytorchjob
    pools:
      - {prefix: gpu-h100, count: 2, cpu: "192", memory: 2048Gi, gpu: {product: NVIDIA-H100-80GB-HBM3, count: 8}}
  - name: south
    training: none
    pools:
      - {prefix: gpu-h100, count: 1, cpu: "192", memory: 2048Gi, gpu: {product: NVIDIA-H100-80GB-HBM3, count: 8}}
"""


@pytest.fixture
def east(db, settings, tmp_path) -> SandboxBackend:
    path = tmp_path / "training.yaml"
    path.write_text(INVENTORY)
    settings.SLIPWAY_SANDBOX_INVENTORY = str(path)
    return SandboxBackend("east")


def trainjob(name: str = "run-1", *, workers: int = 2, gpus: int = 8, env: tuple = (), framework: str = "pytorch",
             api: str = TRAINJOB, runtime: str = "", deadline_seconds: int | None = None) -> list[dict]:
    spec = TrainingSpec(object_name=name, team=TEAM, namespace=NS, name=f"{name} run",
                        image="registry.example.com/ml/train:1.0", command=("python", "train.py"), flavor=H100,
                        env=(("SLIPWAY_SIM_DURATION", "60s"), *env), gpus_per_worker=gpus, workers=workers,
                        framework=framework, training_api=api, runtime=runtime or f"slipway-{framework}",
                        active_deadline_seconds=deadline_seconds)
    return build_training(spec, CONFIG)


def start(backend: SandboxBackend, objects: list[dict]) -> None:
    backend.apply(team_objects(quotas=(("nvidia.com/gpu", 32),)) + objects, resource_kinds(), now=at(0))


def env_of(pod: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0].get("env") or []}


def the_trainjob(backend: SandboxBackend, name: str = "run-1") -> dict:
    return observed(backend, name).first("TrainJob")


def test_a_two_node_trainjob_gang_starts_ranks_its_nodes_reports_progress_and_completes(east):
    start(east, trainjob())
    east.tick(at(0))
    seen = observed(east, "run-1")
    pods = sorted(seen.pods, key=lambda p: p["metadata"]["name"])
    assert [p["metadata"]["name"][:-6] for p in pods] == ["run-1-node-0-0", "run-1-node-0-1"]
    assert {p["spec"]["nodeName"] for p in pods} == {"gpu-h100-0", "gpu-h100-1"}  # bound together, one node each
    for index, pod in enumerate(pods):
        labels, env = pod["metadata"]["labels"], env_of(pod)
        assert labels["slipway.dev/workload"] == "run-1" and labels["slipway.dev/team"] == TEAM  # the patch's
        assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
        assert labels["jobset.sigs.k8s.io/job-index"] == "0"
        assert labels["batch.kubernetes.io/job-completion-index"] == str(index)
        assert pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == str(index)
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "Job"
        container = pod["spec"]["containers"][0]
        assert (container["name"], container["image"]) == ("node", "registry.example.com/ml/train:1.0")
        assert container["command"][:2] == ["torchrun", "--nnodes=2"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert {m["name"] for m in container["volumeMounts"]} == {"dshm"}  # the patch's mount
        assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
        assert pod["spec"]["restartPolicy"] == "Never"  # the runtime's
        assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"], env["PET_MASTER_ADDR"]) == ("2", "8",
                                                                                         "run-1-node-0-0.run-1")
        assert env["PET_NODE_RANK"] == {"fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
        assert env["SLIPWAY_SIM_DURATION"] == "60s" and env["NCCL_DEBUG"] == "WARN"  # the trainer's env
    job = the_trainjob(east)
    assert [(c["type"], c["reason"]) for c in job["status"]["conditions"]] == [("Created", "JobsCreationSucceeded")]

    run_until(east, 5, 50)
    seen = observed(east, "run-1")
    sources = log_sources(seen.pods)
    assert [s.label for s in sources] == ["node-0", "node-1"]  # rank 0 first
    rank0 = east.logs(ref("run-1"), sources[0].pod, tail=None)
    assert "torch.distributed initialised: world_size=2 backend=nccl" in "\n".join(rank0)
    job = the_trainjob(east)
    assert job["status"]["jobsStatus"] == [{"name": "node", "active": 1, "ready": 1, "succeeded": 0, "failed": 0,
                                            "suspended": 0}]
    report = job["status"]["trainerStatus"]
    last_step = next(line for line in reversed(rank0) if " step=" in line and "SLIPWAY_PROGRESS" not in line)
    assert report["lastUpdatedTime"] == last_step.split(" ")[0]
    assert {m["name"]: m["value"] for m in report["metrics"]} == dict(
        word.split("=") for word in last_step.split("INFO  ")[1].split()[1:])
    step = int(last_step.split("step=")[1].split()[0])
    assert report["progressPercentage"] == int(100 * step / 120)  # 60 s: 6 lines of 20 steps... of the run's total
    assert report["estimatedRemainingSeconds"] == (120 - step) // 2

    run_until(east, 55, 80)
    job = the_trainjob(east)
    conditions = {c["type"]: c for c in job["status"]["conditions"]}
    assert (conditions["Complete"]["reason"], conditions["Complete"]["message"]) == (
        "AllJobsCompleted", "jobset completed successfully")
    assert job["status"]["jobsStatus"][0]["succeeded"] == 1
    assert job["status"]["trainerStatus"]["progressPercentage"] == 100
    assert {p["status"]["phase"] for p in observed(east, "run-1").pods} == {"Succeeded"}


def test_a_failed_node_restarts_the_whole_set_until_the_runtimes_restarts_are_spent(east):
    start(east, trainjob(env=(("SLIPWAY_SIM_OUTCOME", "oom"),)))
    east.tick(at(0))
    first = {p["metadata"]["name"] for p in observed(east, "run-1").pods}
    run_until(east, 5, 75)  # 10 s to start, 60 s to the OOM: the first attempt fails
    second = observed(east, "run-1").pods
    assert {p["metadata"]["name"] for p in second}.isdisjoint(first)  # new pods, the old ones went with their Jobs
    assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for p in second} == {"1"}
    assert any(e.reason == "Restarting" for e in east.events(ref("run-1")))
    assert not any(c["type"] == "Failed" for c in the_trainjob(east)["status"]["conditions"])

    run_until(east, 80, 240)  # two restarts (the runtime's maxRestarts), then the third failure is final
    job = the_trainjob(east)
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "ReachedMaxRestarts"
    assert failed["message"] == ("jobset failed due to reaching max number of restarts "
                                 "(first failed job: run-1-node-0)")
    assert job["status"]["jobsStatus"][0]["failed"] == 1
    pods = observed(east, "run-1").pods
    assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for p in pods} == {"2"}
    terminated = [p["status"]["containerStatuses"][0]["state"]["terminated"] for p in pods]
    assert {(t["reason"], t["exitCode"]) for t in terminated} == {("OOMKilled", 137)}  # the pods say why


def test_it_fails_a_trainjob_past_its_active_deadline_and_stops_its_nodes(east):
    start(east, trainjob(env=(("SLIPWAY_SIM_DURATION", "10m"),), deadline_seconds=60))
    run_until(east, 0, 65)
    job = the_trainjob(east)
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "DeadlineExceeded"
    assert observed(east, "run-1").pods == []  # the JobSet's Jobs went, and their pods
    assert sum(row.in_use for row in east.capacity()) == 0


def test_a_trainjob_naming_a_runtime_the_cluster_lacks_is_refused_by_the_webhook(east):
    east.apply(team_objects(), resource_kinds(), now=at(0))
    with pytest.raises(Invalid, match=r'spec.RuntimeRef: Invalid value: "slipway-tfjob": .*specified '
                                      r"clusterTrainingRuntime must be created before the TrainJob is created"):
        east.apply(trainjob(runtime="slipway-tfjob"), resource_kinds(), now=at(1))
    assert observed(east, "run-1") is None  # nothing written


def test_each_cluster_serves_the_training_kind_of_its_api_only(east):
    west, south = SandboxBackend("west"), SandboxBackend("south")
    for backend in (east, west, south):
        backend.apply(team_objects(), resource_kinds(), now=at(0))
    with pytest.raises(NotFound, match=r"cluster west has Training Operator v1 .*no TrainJob CRD"):
        west.apply(trainjob(), resource_kinds(), now=at(1))
    with pytest.raises(NotFound, match=r"cluster east has Trainer v2 \(TrainJob\) \(no PyTorchJob CRD\)"):
        east.apply(trainjob(api=PYTORCHJOB), resource_kinds(), now=at(1))
    for objects in (trainjob(), trainjob(api=PYTORCHJOB)):
        with pytest.raises(NotFound, match="cluster south has no training API"):
            south.apply(objects, resource_kinds(), now=at(1))
    west.apply(trainjob(api=PYTORCHJOB), resource_kinds(), now=at(1))  # each takes its own
    east.apply(trainjob(), resource_kinds(), now=at(1))


def test_discovery_finds_trainer_v2_with_slipways_runtimes_on_east_only(east):
    offer = east.training()
    assert offer.api == TRAINJOB
    assert offer.runtimes == (Runtime("slipway-deepspeed", "deepspeed"), Runtime("slipway-jax", "jax"),
                              Runtime("slipway-mpi", "mpi"), Runtime("slipway-pytorch", "pytorch"),
                              Runtime("slipway-xgboost", "xgboost"))
    assert offer.frameworks == ("deepspeed", "jax", "mpi", "pytorch", "xgboost")
    assert SandboxBackend("west").training() == TrainingOffer(PYTORCHJOB)


def test_an_mpi_trainjobs_launcher_is_node_0_and_its_success_completes_the_set(east):
    start(east, trainjob(workers=3, framework="mpi"))
    east.tick(at(0))
    pods = observed(east, "run-1").pods
    assert sorted(p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] for p in pods) == [
        "launcher", "node", "node"]  # numNodes 3: the launcher and two more
    assert [s.label for s in log_sources(pods)] == ["launcher-0", "node-0", "node-1"]
    run_until(east, 5, 80)
    job = the_trainjob(east)
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"]["conditions"])
    assert [j["name"] for j in job["status"]["jobsStatus"]] == ["launcher", "node"]


def test_a_deleted_trainjobs_nodes_get_their_grace_and_rank_0_checkpoints_at_the_notice(east):
    honours = (("SLIPWAY_SIM_CHECKPOINT_EVERY", "20s"), ("SLIPWAY_SIM_HONOUR_NOTICE", "1"),
               ("SLIPWAY_SIM_DURATION", "300s"))
    start(east, trainjob(env=honours))
    run_until(east, 0, 40)
    assert east.annotate_pods(ref("run-1"), {"slipway.dev/notice": "2026-11-22T10:01:30Z"}, now=at(42)) == 2
    assert east.delete(ref("run-1"), resource_kinds(), grace_seconds=45, now=at(42)) == 1
    seen = observed(east, "run-1")
    assert seen.first("TrainJob")["metadata"]["deletionGracePeriodSeconds"] == 45
    assert {p["status"]["phase"] for p in seen.pods} == {"Running"}  # terminating, still running
    assert sum(1 for e in east.events(ref("run-1")) if e.reason == "Killing") == 2  # SIGTERM to each node
    rank0 = log_sources(seen.pods)[0].pod
    east.tick(at(45))  # they read the notice: rank 0 saves a last checkpoint, every node exits
    log = "\n".join(east.logs(ref("run-1"), rank0, tail=None))
    assert "SLIPWAY_CHECKPOINT step=" in log and "preemption notice received: checkpoint saved, exiting" in log
    other = log_sources(observed(east, "run-1").pods)[1].pod
    assert "SLIPWAY_CHECKPOINT" not in "\n".join(east.logs(ref("run-1"), other, tail=None))  # only rank 0 saves
    east.tick(at(50))
    assert observed(east, "run-1") is None  # its pods exited: the delete is over before the grace's end


def test_a_reclaimed_nodes_pods_stop_with_the_disruption_condition_and_the_set_fails_at_once_for_it(east):
    """Slipway's runtimes fail the set on a disrupted pod (the pod failure policy's FailJob, the JobSet's FailJobSet
    rule) instead of restarting it: the portal sees why and requeues the run (tests/fleet/test_training_apis_e2e.py)."""
    from sandbox.faults import reclaim_node

    start(east, trainjob(gpus=4, env=(("SLIPWAY_SIM_DURATION", "300s"),)))  # both nodes fit on one machine
    run_until(east, 0, 20)
    [machine] = {p["spec"]["nodeName"] for p in observed(east, "run-1").pods}
    reclaim_node(east, machine, now=at(21))
    east.tick(at(25))
    job = the_trainjob(east)
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "FailJobSetFailurePolicyRule" and "TerminationByKubelet" in failed["message"]
    assert not any(e.reason == "Restarting" for e in east.events(ref("run-1")))
    for pod in observed(east, "run-1").pods:
        disruption = next(c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget")
        assert (disruption["status"], disruption["reason"]) == ("True", "TerminationByKubelet")
