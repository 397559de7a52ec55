"""Benchmark: CPU time of one sandbox tick at 100 / 1,000 / 10,000 workloads.

Run as ``.venv/bin/python bench/sandbox_tick.py``. It configures Django against a throw-away
on-disk SQLite database in a temp dir (a copy of ``SLIPWAY_BENCH_SQLITE_TEMPLATE``, a migrated SQLite
file, when that is set: the suite's smoke gives it one), migrates it, and for each size populates that many
workloads (70% single-node Jobs, 10% two-worker PyTorchJobs, 20% endpoints: Deployment +
Service + ScaledObject) across 50 team namespaces. Objects are validated and compiled by the
same code as ``apply()`` but inserted in bulk, so populating 10,000 takes seconds.

It prints ``time.process_time()`` of three ticks per size:

* first  — every controller creates its pods, the scheduler binds what fits (the cluster has
  28 GPUs, so most pods go Pending with a FailedScheduling message);
* steady — 5 s later, nothing new to do (the common case for a reconcile every 5 s);
* churn  — 3 minutes later, when running work finishes and pending work is bound;

then the CPU time of ``observe()`` (cold, then with this process's manifest cache warm).

``--shared`` adds shared GPUs to the cluster and the mix: a node of four T4s time-sliced x4 and
one of four A10Gs shared by MPS x2 (its pods kept to one team per node by anti-affinity), with
workloads of those two flavors among the others (the time-slicing model and the inter-pod
anti-affinity filter at scale).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from admission import scratch_dir  # noqa: E402 - bench/admission.py

TMP = str(scratch_dir("slipway-bench-"))
if os.environ.get("SLIPWAY_BENCH_SQLITE_TEMPLATE"):
    shutil.copyfile(os.environ["SLIPWAY_BENCH_SQLITE_TEMPLATE"], f"{TMP}/bench.sqlite3")
os.environ["DATABASE_URL"] = f"sqlite:///{TMP}/bench.sqlite3"
os.environ["SLIPWAY_VAR_DIR"] = TMP
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
# The simulation's own cost: no real engine process for its thousands of endpoint replicas (sandbox/engines.py).
os.environ.setdefault("SLIPWAY_SANDBOX_ENGINES", "false")
# One cluster of 28 GPUs, as measured before the sandbox had several (BENCHMARKS.md compares).
os.environ.setdefault("SLIPWAY_SANDBOX_INVENTORY", str(ROOT / "tests" / "inventory.yaml"))

import django  # noqa: E402

django.setup()

from datetime import UTC, datetime, timedelta  # noqa: E402

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from cluster.manifests import build_team  # noqa: E402
from cluster.specs import ClusterConfig, FlavorSpec, TeamSpec  # noqa: E402
from inference.manifests import build_endpoint  # noqa: E402
from inference.specs import EndpointSpec  # noqa: E402
from jobs.manifests import build_training  # noqa: E402
from jobs.specs import TrainingSpec  # noqa: E402
from sandbox.backend import SandboxBackend  # noqa: E402
from sandbox.models import SimEvent, SimObject, SimPod  # noqa: E402
from sandbox.names import new_uid  # noqa: E402
from sandbox.validation import admit, compile_plan  # noqa: E402
from workloads.registry import resource_kinds  # noqa: E402

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
CONFIG = ClusterConfig()
FLAVORS = [
    FlavorSpec(name="h100", resource_name="nvidia.com/gpu", gpu_model="NVIDIA-H100-80GB-HBM3"),
    FlavorSpec(name="a100", resource_name="nvidia.com/gpu", gpu_model="NVIDIA-A100-SXM4-80GB"),
    FlavorSpec(name="l4", resource_name="nvidia.com/gpu", gpu_model="NVIDIA-L4"),
    FlavorSpec(
        name="mig",
        resource_name="nvidia.com/mig-1g.10gb",
        gpu_model="NVIDIA-A100-SXM4-80GB",
        mig_profile="1g.10gb",
        gpu_fraction=1 / 7,
    ),
]
TEAMS = 50
#: What --shared adds to the inventory: 16 time-sliced T4 units, 8 MPS A10G units.
SHARED_POOLS = """
  - prefix: gpu-t4-ts
    cpu: "96"
    memory: 384Gi
    gpu: {product: Tesla-T4, count: 4, memory_mib: 15360, family: turing}
    sharing: {strategy: time-slicing, replicas: 4}
  - prefix: gpu-a10g-mps
    cpu: "96"
    memory: 384Gi
    gpu: {product: NVIDIA-A10G, count: 4, memory_mib: 23028, family: ampere}
    sharing: {strategy: mps, replicas: 2}
"""
GPU_TOLERATION = (("nvidia.com/gpu", "Exists", "", "NoSchedule"),)
SHARED_FLAVORS = [
    FlavorSpec(name="t4-ts4", resource_name="nvidia.com/gpu", gpu_model="Tesla-T4", gpu_fraction=0.25,
               sharing="time-slicing", replicas=4, tolerations=GPU_TOLERATION,
               node_selector=(("nvidia.com/gpu.product", "Tesla-T4-SHARED"),
                              ("nvidia.com/gpu.sharing-strategy", "time-slicing"), ("nvidia.com/gpu.replicas", "4"))),
    FlavorSpec(name="a10g-mps2", resource_name="nvidia.com/gpu", gpu_model="NVIDIA-A10G", gpu_fraction=0.5,
               sharing="mps", replicas=2, one_team_per_gpu=True, tolerations=GPU_TOLERATION,
               node_selector=(("nvidia.com/gpu.product", "NVIDIA-A10G-SHARED"),
                              ("nvidia.com/gpu.sharing-strategy", "mps"), ("nvidia.com/gpu.replicas", "2"))),
]


def one_team_per_node(objects: list[dict], flavor: FlavorSpec, team: str) -> list[dict]:
    """An MPS flavor's pods as the issue 37 contract shapes them: the flavor's label and a required
    anti-affinity to other teams' pods of the flavor on the node."""
    if not flavor.one_team_per_gpu:
        return objects
    for obj in objects:
        specs = ([r["template"] for r in obj["spec"]["pytorchReplicaSpecs"].values()] if obj["kind"] == "PyTorchJob"
                 else [obj["spec"]["template"]] if obj["kind"] in ("Job", "Deployment") else [])
        for template in specs:
            template["metadata"]["labels"]["slipway.dev/flavor"] = flavor.name
            template["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchExpressions": [
                    {"key": "slipway.dev/flavor", "operator": "In", "values": [flavor.name]},
                    {"key": "slipway.dev/team", "operator": "NotIn", "values": [team]}]},
                "namespaceSelector": {}, "topologyKey": "kubernetes.io/hostname"}]}}
    return objects


def manifests(count: int, flavors: list[FlavorSpec]) -> list[dict]:
    out: list[dict] = []
    for t in range(TEAMS):
        out += build_team(TeamSpec(slug=f"t{t}", namespace=f"team-t{t}"), CONFIG)
    for i in range(count):
        team = i % TEAMS
        flavor = flavors[i % len(flavors)]
        common = {"team": f"t{team}", "namespace": f"team-t{team}", "name": f"w{i}", "flavor": flavor}
        kind = i % 10
        if kind < 7:
            objects = build_training(
                TrainingSpec(object_name=f"run-{i}", image="img:1", command=("python", "t.py"), **common), CONFIG
            )
        elif kind == 7:
            objects = build_training(
                TrainingSpec(object_name=f"run-{i}", image="img:1", command=("python", "t.py"), workers=2, **common),
                CONFIG,
            )
        else:
            objects = build_endpoint(
                EndpointSpec(object_name=f"ep-{i}", image="srv:1", min_replicas=1, max_replicas=2, **common), CONFIG
            )
        out += one_team_per_node(objects, flavor, f"t{team}")
    return out


def populate(count: int, cluster: str, flavors: list[FlavorSpec]) -> None:
    rows = []
    for obj in manifests(count, flavors):
        clean = admit(obj, resource_kinds())  # the same validation and compilation as apply()
        meta = clean["metadata"]
        labels = meta.get("labels") or {}
        rows.append(
            SimObject(
                cluster=cluster,
                resource_kind=clean["kind"],
                api_version=clean["apiVersion"],
                namespace=meta.get("namespace") or meta["name"],
                name=meta["name"],
                workload=labels.get("slipway.dev/workload", ""),
                team=labels.get("slipway.dev/team", ""),
                uid=new_uid(),
                manifest={k: v for k, v in clean.items() if k not in ("apiVersion", "kind")},
                plan=compile_plan(clean),
                created_at=T0,
            )
        )
    SimObject.objects.bulk_create(rows, batch_size=500)


def measure(backend: SandboxBackend, at: datetime) -> tuple[float, dict]:
    start = time.process_time()
    summary = backend.tick(at)
    return time.process_time() - start, summary or {}


def main() -> None:
    parser = argparse.ArgumentParser(description="CPU time of one sandbox tick by the number of workloads.")
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--shared", action="store_true",
                        help="add a time-sliced T4 node and an MPS A10G node, and their flavors to the mix")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    flavors = FLAVORS
    if args.shared:
        inventory = Path(TMP) / "inventory.yaml"
        inventory.write_text(Path(settings.SLIPWAY_SANDBOX_INVENTORY).read_text() + SHARED_POOLS)
        settings.SLIPWAY_SANDBOX_INVENTORY = str(inventory)
        flavors = FLAVORS + SHARED_FLAVORS
    call_command("migrate", verbosity=0)
    backend = SandboxBackend()
    print(f"sandbox tick CPU time (time.process_time), SQLite at {TMP}{', with shared GPUs' if args.shared else ''}")
    print(f"{'workloads':>10} {'tick':>7} {'cpu s':>8}  changes")
    for count in sizes:
        backend.reset()
        populate(count, backend.cluster, flavors)
        for label, offset in (("first", 0), ("steady", 5), ("churn", 185)):
            cpu, summary = measure(backend, T0 + timedelta(seconds=offset))
            print(f"{count:>10} {label:>7} {cpu:>8.3f}  {summary}")
        for label in ("observe", "again"):  # the second call finds the decoded manifests cached
            start = time.process_time()
            observed = backend.observe(resource_kinds())
            print(
                f"{count:>10} {label:>7} {time.process_time() - start:>8.3f}  {len(observed)} workloads, "
                f"{SimPod.objects.count()} pods, {SimEvent.objects.count()} events"
            )


if __name__ == "__main__":
    main()
