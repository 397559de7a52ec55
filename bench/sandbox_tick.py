"""Benchmark: CPU time of one sandbox tick at 100 / 1,000 / 10,000 workloads.

Run as ``.venv/bin/python bench/sandbox_tick.py``. It configures Django against a throw-away
on-disk SQLite database in a temp dir, migrates it, and for each size populates that many
workloads (70% single-node Jobs, 10% two-worker PyTorchJobs, 20% endpoints: Deployment +
Service + ScaledObject) across 50 team namespaces. Objects are validated and compiled by the
same code as ``apply()`` but inserted in bulk, so populating 10,000 takes seconds.

It prints ``time.process_time()`` of three ticks per size:

* first  — every controller creates its pods, the scheduler binds what fits (the cluster has
  28 GPUs, so most pods go Pending with a FailedScheduling message);
* steady — 5 s later, nothing new to do (the common case for a reconcile every 5 s);
* churn  — 3 minutes later, when running work finishes and pending work is bound;

then the CPU time of ``observe()`` (cold, then with this process's manifest cache warm).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TMP = tempfile.mkdtemp(prefix="slipway-bench-")
os.environ["DATABASE_URL"] = f"sqlite:///{TMP}/bench.sqlite3"
os.environ["SLIPWAY_VAR_DIR"] = TMP
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
# One cluster of 28 GPUs, as measured before the sandbox had several (BENCHMARKS.md compares).
os.environ.setdefault("SLIPWAY_SANDBOX_INVENTORY", str(ROOT / "tests" / "inventory.yaml"))

import django  # noqa: E402

django.setup()

from datetime import UTC, datetime, timedelta  # noqa: E402

from django.core.management import call_command  # noqa: E402

from cluster.manifests import build_endpoint, build_team, build_training  # noqa: E402
from cluster.specs import ClusterConfig, EndpointSpec, FlavorSpec, TeamSpec, TrainingSpec  # noqa: E402
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


def manifests(count: int) -> list[dict]:
    out: list[dict] = []
    for t in range(TEAMS):
        out += build_team(TeamSpec(slug=f"t{t}", namespace=f"team-t{t}"), CONFIG)
    for i in range(count):
        team = i % TEAMS
        flavor = FLAVORS[i % len(FLAVORS)]
        common = {"team": f"t{team}", "namespace": f"team-t{team}", "name": f"w{i}", "flavor": flavor}
        kind = i % 10
        if kind < 7:
            out += build_training(
                TrainingSpec(object_name=f"run-{i}", image="img:1", command=("python", "t.py"), **common), CONFIG
            )
        elif kind == 7:
            out += build_training(
                TrainingSpec(object_name=f"run-{i}", image="img:1", command=("python", "t.py"), workers=2, **common),
                CONFIG,
            )
        else:
            out += build_endpoint(
                EndpointSpec(object_name=f"ep-{i}", image="srv:1", min_replicas=1, max_replicas=2, **common), CONFIG
            )
    return out


def populate(count: int, cluster: str) -> None:
    rows = []
    for obj in manifests(count):
        clean = admit(obj, resource_kinds())  # the same validation and compilation as apply()
        meta = clean["metadata"]
        labels = meta.get("labels") or {}
        rows.append(
            SimObject(
                cluster=cluster,
                kind=clean["kind"],
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
    sizes = [int(size) for size in parser.parse_args().sizes.split(",")]
    call_command("migrate", verbosity=0)
    backend = SandboxBackend()
    print(f"sandbox tick CPU time (time.process_time), SQLite at {TMP}")
    print(f"{'workloads':>10} {'tick':>7} {'cpu s':>8}  changes")
    for count in sizes:
        backend.reset()
        populate(count, backend.cluster)
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
