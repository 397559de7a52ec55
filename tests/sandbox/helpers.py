"""Builders of sandbox test workloads: real builder output (the kinds' ``jobs.manifests`` and
``inference.manifests``, a team's ``cluster.manifests``) plus a few
hand-made malformed manifests, and a clock that ticks in steps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cluster.backends.base import ClusterAddress
from cluster.manifests import build_team
from cluster.specs import ClusterConfig, FlavorSpec, TeamSpec
from inference.manifests import build_endpoint
from inference.specs import EndpointSpec
from jobs.manifests import build_training
from jobs.specs import TrainingSpec
from sandbox.backend import SandboxBackend
from workloads.registry import resource_kinds

T0 = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)
CONFIG = ClusterConfig()
NS = "team-ml"
TEAM = "ml"

H100 = FlavorSpec(name="h100-80gb", resource_name="nvidia.com/gpu", gpu_model="NVIDIA-H100-80GB-HBM3")
A100 = FlavorSpec(name="a100-80gb", resource_name="nvidia.com/gpu", gpu_model="NVIDIA-A100-SXM4-80GB")
L4 = FlavorSpec(name="l4", resource_name="nvidia.com/gpu", gpu_model="NVIDIA-L4")
MIG_1G = FlavorSpec(name="a100-1g.10gb", resource_name="nvidia.com/mig-1g.10gb", gpu_model="NVIDIA-A100-SXM4-80GB",
                    mig_profile="1g.10gb", gpu_fraction=1 / 7)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def team_objects(quotas: tuple[tuple[str, int], ...] = (), namespace: str = NS, slug: str = TEAM) -> list[dict]:
    return build_team(TeamSpec(slug=slug, namespace=namespace, quotas=quotas), CONFIG)


def training(object_name: str = "run-1", *, flavor: FlavorSpec = H100, gpus: int = 1, workers: int = 1,
             duration: str | None = "60s", outcome: str | None = None, retries: int = 2,
             deadline_seconds: int | None = None, namespace: str = NS, extra_env: tuple = (),
             args: tuple[str, ...] = (), image: str = "registry.example.com/ml/train:1.0") -> list[dict]:
    env = []
    if duration:
        env.append(("SLIPWAY_SIM_DURATION", duration))
    if outcome:
        env.append(("SLIPWAY_SIM_OUTCOME", outcome))
    spec = TrainingSpec(object_name=object_name, team=TEAM, namespace=namespace, name=f"{object_name} run",
                        image=image, command=("python", "train.py"), flavor=flavor,
                        env=tuple(env) + tuple(extra_env), gpus_per_worker=gpus, workers=workers, max_retries=retries,
                        active_deadline_seconds=deadline_seconds, args=args)
    return build_training(spec, CONFIG)


def endpoint(object_name: str = "ep-1", *, flavor: FlavorSpec = L4, min_replicas: int = 1, max_replicas: int = 1,
             metric: str = "gpu_utilization", target: float = 70.0, outcome: str | None = None,
             initial_delay: int = 30, duration: str | None = None, port: int = 8080) -> list[dict]:
    env = [("SLIPWAY_SIM_LOAD_SECONDS", str(initial_delay))]
    if outcome:
        env.append(("SLIPWAY_SIM_OUTCOME", outcome))
    if duration:
        env.append(("SLIPWAY_SIM_DURATION", duration))
    spec = EndpointSpec(object_name=object_name, team=TEAM, namespace=NS, name=f"{object_name} endpoint",
                        image="registry.example.com/ml/serve:2.1", flavor=flavor, env=tuple(env),
                        min_replicas=min_replicas, max_replicas=max_replicas, metric=metric, target=target,
                        port=port)
    return build_endpoint(spec, CONFIG)


def observed(backend: SandboxBackend, workload: str, namespace: str = NS):
    for obs in backend.observe(resource_kinds()):
        if obs.object_name == workload and obs.namespace == namespace:
            return obs
    return None


def ref(workload: str, namespace: str = NS) -> ClusterAddress:
    return ClusterAddress(namespace, workload)


def run_until(backend: SandboxBackend, start: float, end: float, step: float = 5.0) -> None:
    """Tick every ``step`` seconds from ``start`` to ``end`` (inclusive) after T0."""
    t = start
    while t <= end:
        backend.tick(at(t))
        t += step
