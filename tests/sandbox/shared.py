"""Builders of pods of shared GPUs, shaped as issue 37's contract says a time-sliced or MPS flavor's
pods are (docs/flavors.md "The four ways to get a GPU").

Real builder output (:mod:`jobs.manifests`, :mod:`inference.manifests`), with the contract's parts put on the pod template
by :func:`contract_shape`: the shared nodes' selector, and for an MPS flavor kept to one team per
GPU the ``slipway.dev/flavor`` label and the required anti-affinity term. Where the builders
already render them the result is the same.
"""

from __future__ import annotations

from cluster.specs import FlavorSpec
from inference.manifests import build_endpoint
from inference.specs import EndpointSpec
from jobs.manifests import build_training
from jobs.specs import TrainingSpec
from tests.sandbox.helpers import CONFIG, team_objects

GPU_TOLERATION = (("nvidia.com/gpu", "Exists", "", "NoSchedule"),)


def shared_flavor(name: str, model: str, sharing: str, replicas: int, *, renamed: bool = False,
                  one_team_per_gpu: bool = False) -> FlavorSpec:
    """A time-sliced or MPS flavor selecting the labels GPU Feature Discovery puts on its nodes."""
    selector = (("nvidia.com/gpu.product", model if renamed else f"{model}-SHARED"),
                ("nvidia.com/gpu.sharing-strategy", sharing), ("nvidia.com/gpu.replicas", str(replicas)))
    return FlavorSpec(name=name, resource_name="nvidia.com/gpu.shared" if renamed else "nvidia.com/gpu",
                      gpu_model=model, node_selector=selector, tolerations=GPU_TOLERATION, gpu_fraction=1 / replicas,
                      sharing=sharing, replicas=replicas, one_team_per_gpu=one_team_per_gpu)


#: The demo's two shared flavors (contract values).
T4_TS4 = shared_flavor("t4-ts4", "Tesla-T4", "time-slicing", 4)
A10G_MPS2 = shared_flavor("a10g-mps2", "NVIDIA-A10G", "mps", 2, one_team_per_gpu=True)


def anti_affinity_term(flavor: str, team: str, *, all_namespaces: bool = True) -> dict:
    """The contract's required anti-affinity term of an MPS flavor kept to one team per GPU.

    ``all_namespaces``: with ``namespaceSelector: {}``. Without it Kubernetes applies the term to
    the pod's own namespace only — each team's own — so it would never see another team's pods.
    """
    term = {"labelSelector": {"matchExpressions": [
        {"key": "slipway.dev/flavor", "operator": "In", "values": [flavor]},
        {"key": "slipway.dev/team", "operator": "NotIn", "values": [team]},
    ]}, "topologyKey": "kubernetes.io/hostname"}
    if all_namespaces:
        term["namespaceSelector"] = {}
    return term


def contract_shape(objects: list[dict], flavor: FlavorSpec, team: str, *, all_namespaces: bool = True) -> list[dict]:
    """``objects`` with their pod templates shaped as the contract says (in place; returned)."""
    for obj in objects:
        template = (obj.get("spec") or {}).get("template")
        if obj["kind"] not in ("Job", "Deployment") or template is None:
            continue
        template["spec"]["nodeSelector"] = dict(flavor.node_selector)
        if flavor.one_team_per_gpu:
            template["metadata"]["labels"]["slipway.dev/flavor"] = flavor.name
            template["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                anti_affinity_term(flavor.name, team, all_namespaces=all_namespaces)]}}
    return objects


def env_of(duration: str | None, memory_gb: float | None, util: float | None, outcome: str | None) -> tuple:
    env = []
    if duration:
        env.append(("SLIPWAY_SIM_DURATION", duration))
    if memory_gb is not None:
        env.append(("SLIPWAY_SIM_GPU_MEMORY_GB", str(memory_gb)))
    if util is not None:
        env.append(("SLIPWAY_SIM_GPU_UTIL", str(util)))
    if outcome:
        env.append(("SLIPWAY_SIM_OUTCOME", outcome))
    return tuple(env)


def shared_run(name: str, flavor: FlavorSpec = T4_TS4, *, team: str = "ml", duration: str = "60s",
               memory_gb: float | None = None, util: float | None = None, retries: int = 0,
               all_namespaces: bool = True) -> list[dict]:
    """A single-node run's Job in ``team``'s namespace (``team-<team>``), one unit of ``flavor``."""
    spec = TrainingSpec(object_name=name, team=team, namespace=f"team-{team}", name=name,
                        image="registry.example.com/ml/train:1.0", command=("python", "train.py"), flavor=flavor,
                        env=env_of(duration, memory_gb, util, None), gpus_per_worker=1, max_retries=retries)
    return contract_shape(build_training(spec, CONFIG), flavor, team, all_namespaces=all_namespaces)


def shared_endpoint(name: str, flavor: FlavorSpec = T4_TS4, *, team: str = "ml", memory_gb: float | None = None,
                    util: float | None = None) -> list[dict]:
    """An endpoint of one replica of ``flavor`` in ``team``'s namespace."""
    env = (("SLIPWAY_SIM_LOAD_SECONDS", "20"), *env_of(None, memory_gb, util, None))
    spec = EndpointSpec(object_name=name, team=team, namespace=f"team-{team}", name=name,
                        image="registry.example.com/ml/serve:2.1", flavor=flavor, env=env, min_replicas=1,
                        max_replicas=1)
    return contract_shape(build_endpoint(spec, CONFIG), flavor, team)


def teams(*slugs: str) -> list[dict]:
    """The namespaces (and their objects) of ``slugs``."""
    return [obj for slug in slugs for obj in team_objects(namespace=f"team-{slug}", slug=slug)]
