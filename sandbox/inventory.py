"""The sandbox's clusters and their nodes, read from the YAML inventory (``settings.SLIPWAY_SANDBOX_INVENTORY``).

Clusters and nodes are configuration, not state: every process reads the same file, so web,
worker and beat agree on the clusters' shape while pods and objects live in the database.

Two formats (docs/operations.md, "The sandbox cluster"):

* top-level ``pools:`` — one cluster, named ``default``;
* ``clusters:`` — a list of ``{name, region, labels, prices, spot_prices, training, pools}``: independent
  clusters, each with its own nodes, the prices its GPUs cost there (per flavor name and
  hour, overriding the flavor's list price) and the training API it has (``training:``, below).

A cluster's ``training:`` is the training API its discovery finds (:mod:`cluster.training`): ``pytorchjob``
(the default: the v1 Training Operator, the sandbox's PyTorchJob controller), ``trainjob`` (Kubeflow Trainer
v2: the sandbox's TrainJob controller, with the ClusterTrainingRuntimes Slipway ships, :mod:`sandbox.trainer`)
or ``none``. A cluster serves the training kind of its API only: it refuses the other one (and ``none`` both)
as an API server without the CRD does.

A pool's GPUs may be shared, as the NVIDIA device plugin shares them (``sharing: {strategy:
time-slicing|mps, replicas: N, rename: false, config: <name>}``): its nodes advertise ``count ×
replicas`` of ``nvidia.com/gpu`` (``nvidia.com/gpu.shared`` when renamed) and carry the labels
GPU Feature Discovery sets on such a node (:func:`_sharing_labels`); :mod:`sandbox.sharing`
simulates what sharing does to the pods.

A pool may be *elastic* (``elastic: {min, max, mode, …}``, :class:`ElasticPool`): an autoscaler adds and removes
its nodes between ``min`` and ``max`` (:mod:`sandbox.pools`); its nodes are named ``<prefix>-<i>`` for ``i < max``,
and which of them exist is state, not configuration (``count`` is not given). Its GPUs are whole (no MIG, no
sharing).

Either may have a top-level ``registry:`` — repository → the tags it holds — the image
registry all its clusters pull from (:mod:`sandbox.registry`).

The first cluster listed is the one a :class:`~sandbox.backend.SandboxBackend` without a name
works on. A malformed file raises :class:`InventoryError` naming the cluster at fault.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from pathlib import Path

import yaml
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from cluster.images import parse_image
from cluster.pools import ATOMIC, DEFAULT_UNNEEDED_MINUTES, MODES
from cluster.specs import SHARING_MPS, SHARING_NONE, SHARING_TIME_SLICING
from cluster.training import NONE, PYTORCHJOB, TRAINJOB
from sandbox.quantity import to_units

#: Compute and memory slices of each A100-80GB MIG profile (a GPU has 7 and 8).
MIG_PROFILES: dict[str, tuple[int, int]] = {
    "1g.10gb": (1, 1),
    "1g.20gb": (1, 2),
    "2g.20gb": (2, 2),
    "3g.40gb": (3, 4),
    "4g.40gb": (4, 4),
    "7g.80gb": (7, 8),
}
GPU_RESOURCE = "nvidia.com/gpu"
#: What the device plugin advertises shared GPUs as when its config renames them (``renameByDefault``).
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"
#: The device plugin's sharing strategies a pool may declare (``sharing.strategy``).
SHARING_STRATEGIES = (SHARING_TIME_SLICING, SHARING_MPS)
SHARING_KEYS = frozenset({"strategy", "replicas", "rename", "config"})
REGION_LABEL = "topology.kubernetes.io/region"
#: The one cluster of an inventory in the top-level ``pools:`` format.
DEFAULT_CLUSTER = "default"
DEFAULT_TAINT = {"key": GPU_RESOURCE, "value": "", "effect": "NoSchedule"}
MAX_PODS = 110


@dataclass(frozen=True)
class GpuSharing:
    """How a node's device plugin shares its GPUs: each of its ``gpus`` physical GPUs is
    advertised as ``replicas`` units of ``resource``, one per pod (``failRequestsGreaterThanOne``)."""

    strategy: str  # time-slicing | mps
    replicas: int
    resource: str  # nvidia.com/gpu, or nvidia.com/gpu.shared when renamed
    gpus: int
    memory_mib: int  # one GPU's memory: what its pods share (time-slicing) or split (MPS)
    config: str  # the device plugin config the node's nvidia.com/device-plugin.config label names

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    @property
    def client_gib(self) -> float:
        """The memory one MPS client may use: the GPU's divided by its replicas (the device plugin's limit)."""
        return self.memory_gib / self.replicas


@dataclass(frozen=True)
class Node:
    """One simulated node: labels, taints and allocatable resources (cpu in millicores)."""

    name: str
    labels: dict[str, str] = field(hash=False)
    taints: tuple[tuple[str, str, str], ...]  # (key, value, effect)
    allocatable: dict[str, int] = field(hash=False)
    #: None: every GPU is one pod's (or MIG-sliced).
    sharing: GpuSharing | None = field(default=None, hash=False)
    #: The prefix of its elastic pool ("" : a node of a fixed pool, which always exists).
    pool: str = ""

    @property
    def gpu_resources(self) -> list[str]:
        return sorted(r for r in self.allocatable if r.startswith("nvidia.com/"))


#: An elastic pool's provisioning delays when it does not say (seconds): the median, and the tail (the 0.99
#: quantile of the delays drawn, and the most any draw takes: sandbox.pools.provisioning_delay).
DEFAULT_DELAY_MEDIAN_SECONDS = 210.0
DEFAULT_DELAY_TAIL_SECONDS = 900.0
#: The most nodes an elastic pool may have (its inventory's ``max`` or a live change's).
MAX_POOL_NODES = 100
ELASTIC_KEYS = frozenset({"min", "max", "mode", "delay_median_seconds", "delay_tail_seconds", "failure_probability",
                          "revoke_probability", "unneeded_minutes", "limit_units"})


@dataclass(frozen=True)
class PoolSettings:
    """How an elastic pool grows and shrinks: the inventory's ``elastic:``, or a live change of it
    (``manage.py sandbox pool``, :mod:`sandbox.pools`)."""

    min_nodes: int
    max_nodes: int
    mode: str = ATOMIC
    delay_median_seconds: float = DEFAULT_DELAY_MEDIAN_SECONDS
    delay_tail_seconds: float = DEFAULT_DELAY_TAIL_SECONDS
    failure_probability: float = 0.0
    revoke_probability: float = 0.0
    unneeded_minutes: int = DEFAULT_UNNEEDED_MINUTES
    #: A Karpenter-style limit on the GPU units all its nodes together may have (None: none).
    limit_units: int | None = None

    def problems(self) -> list[str]:
        """What is wrong with these settings (empty: nothing), in the inventory's key names."""
        found = []
        if not 0 <= self.min_nodes <= self.max_nodes <= MAX_POOL_NODES:
            found.append(f"min and max must satisfy 0 <= min <= max <= {MAX_POOL_NODES}, got min {self.min_nodes}, "
                         f"max {self.max_nodes}")
        if self.mode not in MODES:
            found.append(f"mode must be {' or '.join(MODES)}, got {self.mode!r}")
        if not 0 < self.delay_median_seconds <= self.delay_tail_seconds <= 24 * 3600:
            found.append("delays must satisfy 0 < delay_median_seconds <= delay_tail_seconds <= 86400, got "
                         f"{self.delay_median_seconds:g} and {self.delay_tail_seconds:g}")
        for name in ("failure_probability", "revoke_probability"):
            if not 0 <= getattr(self, name) <= 1:
                found.append(f"{name} must be between 0 and 1, got {getattr(self, name):g}")
        if not 1 <= self.unneeded_minutes <= 24 * 60:
            found.append(f"unneeded_minutes must be between 1 and 1440, got {self.unneeded_minutes}")
        if self.limit_units is not None and self.limit_units < 0:
            found.append(f"limit_units must be at least 0, got {self.limit_units}")
        return found


@dataclass(frozen=True)
class ElasticPool:
    """One elastic pool of a cluster: its nodes' shape (``template``, its node 0) and its settings."""

    prefix: str
    template: Node = field(hash=False)
    settings: PoolSettings

    @property
    def resource(self) -> str:
        return self.template.gpu_resources[0]

    @property
    def units_per_node(self) -> int:
        return self.template.allocatable[self.resource]

    def node(self, index: int) -> Node:
        """Its node ``index`` (``<prefix>-<index>``), shaped like all of them."""
        name = f"{self.prefix}-{index}"
        return Node(name=name, labels={**self.template.labels, "kubernetes.io/hostname": name},
                    taints=self.template.taints, allocatable=dict(self.template.allocatable), pool=self.prefix)

    def index(self, node: str) -> int:
        return int(node.rsplit("-", 1)[1])


@dataclass(frozen=True)
class SandboxCluster:
    """One simulated cluster: its name, where it is, and what a GPU costs there.

    ``prices``/``spot_prices`` map a flavor name to its price per unit and hour on this
    cluster (on-demand and spot); a flavor left out costs its list price.
    """

    name: str
    region: str = ""
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    prices: dict[str, Decimal] = field(default_factory=dict, hash=False)
    spot_prices: dict[str, Decimal] = field(default_factory=dict, hash=False)
    #: The training API its discovery finds (:data:`SANDBOX_TRAINING_APIS`).
    training: str = PYTORCHJOB
    #: Its elastic pools (:class:`ElasticPool`), in the inventory's order.
    elastic: tuple[ElasticPool, ...] = field(default=(), hash=False)


@dataclass(frozen=True)
class Inventory:
    """The parsed file: the clusters in the order listed, and each one's nodes."""

    clusters: tuple[SandboxCluster, ...]
    nodes: dict[str, tuple[Node, ...]] = field(hash=False)
    #: the image registry: repository (``host/path``) → its tags; empty: it knows no host
    registry: dict[str, frozenset[str]] = field(default_factory=dict, hash=False)


class InventoryError(ValueError):
    """The inventory file is malformed (raised at load, so a bad file fails loudly)."""


class UnknownCluster(ImproperlyConfigured):
    """A cluster name the inventory does not list (the message names the ones it does)."""


#: A cluster's name: a DNS-1123 label, like the namespace names it sits beside in the tables.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
CLUSTER_KEYS = frozenset({"name", "region", "labels", "prices", "spot_prices", "training", "pools"})
#: The training APIs a sandbox cluster may declare (module docstring): those it has a controller for, or none.
SANDBOX_TRAINING_APIS = (TRAINJOB, PYTORCHJOB, NONE)


def _mig_allocatable(mig: dict, gpu_count: int) -> tuple[dict[str, int], int]:
    """The slices the layout cuts, per ``nvidia.com/mig-<profile>`` resource, and how many GPUs it leaves whole.

    A group with ``mig_enabled: false`` keeps its GPUs whole: under the mixed strategy the device
    plugin exposes them as ``nvidia.com/gpu`` beside the slices (mig-parted's ``mig-enabled``).
    """
    totals: dict[str, int] = {}
    covered = whole = 0
    for group in mig.get("layout", []):
        gpus = int(group["gpus"])
        covered += gpus
        if group.get("mig_enabled", True) is False:
            whole += gpus
            continue
        compute = memory = 0
        for profile, count in group["slices"].items():
            if profile not in MIG_PROFILES:
                raise InventoryError(f"unknown A100-80GB MIG profile {profile!r}")
            compute += MIG_PROFILES[profile][0] * int(count)
            memory += MIG_PROFILES[profile][1] * int(count)
            totals[f"nvidia.com/mig-{profile}"] = totals.get(f"nvidia.com/mig-{profile}", 0) + gpus * int(count)
        if compute > 7 or memory > 8:
            raise InventoryError(f"MIG geometry {group['slices']} needs {compute}/7 compute and {memory}/8 memory slices")
    if covered != gpu_count:
        raise InventoryError(f"MIG layout covers {covered} GPUs, the node has {gpu_count}")
    return totals, whole


_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def _sharing(pool: dict, gpu: dict, gpu_count: int) -> GpuSharing | None:
    """The pool's ``sharing:`` checked against the device plugin's rules (None when it has none)."""
    raw = pool.get("sharing")
    if raw is None:
        return None
    where = f"pool {pool['prefix']}: sharing"
    if not isinstance(raw, dict):
        raise InventoryError(f"{where} must be a mapping {{strategy, replicas, rename, config}}, got {raw!r}")
    unknown = sorted(set(raw) - SHARING_KEYS)
    if unknown:
        raise InventoryError(f"{where} has an unknown key {unknown[0]!r} (known: {', '.join(sorted(SHARING_KEYS))})")
    strategy = raw.get("strategy")
    if strategy not in SHARING_STRATEGIES:
        raise InventoryError(f"{where}.strategy must be {' or '.join(SHARING_STRATEGIES)}, got {strategy!r}")
    replicas = raw.get("replicas")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 2:
        raise InventoryError(f"{where}.replicas must be a whole number of at least 2 (how many pods share one "
                             f"GPU), got {replicas!r}")
    rename = raw.get("rename", False)
    if not isinstance(rename, bool):
        raise InventoryError(f"{where}.rename must be true or false, got {rename!r}")
    config = raw.get("config", pool["prefix"])
    if not isinstance(config, str) or len(config) > 63 or not _LABEL_VALUE.fullmatch(config):
        raise InventoryError(f"{where}.config must name a device plugin config (a label value), got {config!r}")
    if pool.get("mig"):
        raise InventoryError(f"{where} cannot be combined with mig: the sandbox shares whole GPUs (and the device "
                             "plugin refuses MPS on MIG devices)")
    if not gpu_count:
        raise InventoryError(f"{where} needs GPUs to share (gpu.count)")
    memory = gpu.get("memory_mib")
    if isinstance(memory, bool) or not isinstance(memory, int) or memory <= 0:
        raise InventoryError(f"{where} needs gpu.memory_mib, the memory its pods share, got {memory!r}")
    return GpuSharing(strategy=strategy, replicas=replicas, resource=SHARED_GPU_RESOURCE if rename else GPU_RESOURCE,
                      gpus=gpu_count, memory_mib=memory, config=config)


def _sharing_labels(product: str, sharing: GpuSharing | None) -> dict[str, str]:
    """What GPU Feature Discovery labels about sharing (its ``internal/lm/resource.go``).

    On a shared node the product gains ``-SHARED`` unless the shared resource is renamed, so a
    whole-GPU selector (``nvidia.com/gpu.product: Tesla-T4``) matches no shared T4 node.
    """
    if sharing is None:
        return {"nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": SHARING_NONE,
                "nvidia.com/mps.capable": "false"}
    return {
        "nvidia.com/gpu.product": product if sharing.resource == SHARED_GPU_RESOURCE else f"{product}-SHARED",
        "nvidia.com/gpu.replicas": str(sharing.replicas),
        "nvidia.com/gpu.sharing-strategy": sharing.strategy,
        "nvidia.com/mps.capable": str(sharing.strategy == SHARING_MPS).lower(),
        "nvidia.com/device-plugin.config": sharing.config,
    }


def parse_pools(pools: list, region: str = "") -> list[Node]:
    """Expand one cluster's pools into nodes (a ``region`` also labels them, as a cloud's nodes are)."""
    if not isinstance(pools, list):
        raise InventoryError("pools must be a list")
    nodes: list[Node] = []
    for pool in pools:
        if not isinstance(pool, dict) or not pool.get("prefix"):
            raise InventoryError(f"every pool needs a prefix, got {pool!r}")
        gpu = pool.get("gpu") or {}
        gpu_count = int(gpu.get("count", 0))
        sharing = _sharing(pool, gpu, gpu_count)
        elastic = _elastic_settings(pool, gpu_count)
        for index in range(elastic.max_nodes if elastic else int(pool.get("count", 1))):
            name = f"{pool['prefix']}-{index}"
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": str(pool.get("instance_type", "")),
            }
            if region:
                labels[REGION_LABEL] = region
            allocatable = {
                "cpu": to_units("cpu", pool.get("cpu", "8")),
                "memory": to_units("memory", pool.get("memory", "32Gi")),
                "ephemeral-storage": to_units("ephemeral-storage", pool.get("ephemeral_storage", "1500Gi")),
                "pods": MAX_PODS,
            }
            taints: list[tuple[str, str, str]] = []
            if gpu_count:
                if not gpu.get("product"):
                    raise InventoryError(f"pool {pool['prefix']}: its GPUs need a product (gpu.product)")
                product = str(gpu["product"])
                labels.update({
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": product,
                    "nvidia.com/gpu.count": str(gpu_count),
                    "nvidia.com/gpu.memory": str(gpu.get("memory_mib", "")),
                    "nvidia.com/gpu.family": str(gpu.get("family", "")),
                    "nvidia.com/mig.capable": str(product.startswith(("NVIDIA-A100", "NVIDIA-H100"))).lower(),
                    "nvidia.com/mig.strategy": "mixed",
                })
                mig = pool.get("mig")
                if mig:
                    slices, whole = _mig_allocatable(mig, gpu_count)
                    allocatable.update(slices)
                    allocatable[GPU_RESOURCE] = whole  # mixed strategy: only GPUs left out of MIG are whole
                    labels["nvidia.com/mig.config"] = str(mig.get("config", "custom"))
                    labels["nvidia.com/mig.config.state"] = "success"
                    for resource, count in slices.items():
                        labels[f"{resource}.count"] = str(count)
                else:
                    labels["nvidia.com/mig.config"] = "all-disabled"
                    if sharing is None:
                        allocatable[GPU_RESOURCE] = gpu_count
                    else:  # the device plugin advertises each GPU as its replicas
                        allocatable[sharing.resource] = gpu_count * sharing.replicas
                labels.update(_sharing_labels(product, sharing))
                taints.append((DEFAULT_TAINT["key"], DEFAULT_TAINT["value"], DEFAULT_TAINT["effect"]))
            labels.update({str(k): str(v) for k, v in (pool.get("labels") or {}).items()})
            for taint in pool.get("taints") or []:
                taints.append((str(taint["key"]), str(taint.get("value", "")), str(taint.get("effect", "NoSchedule"))))
            nodes.append(Node(name=name, labels=labels, taints=tuple(taints), allocatable=allocatable,
                              sharing=sharing, pool=pool["prefix"] if elastic else ""))
    if not nodes:
        raise InventoryError("it has no nodes")
    names = [node.name for node in nodes]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise InventoryError(f"node {twice[0]} is listed twice (two pools with one prefix?)")
    return nodes


def _number(raw: dict, key: str, default: float, where: str, *, whole: bool = False) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or (whole and not isinstance(value, int)):
        raise InventoryError(f"{where}.{key} must be a {'whole ' if whole else ''}number, got {value!r}")
    return value


def _elastic_settings(pool: dict, gpu_count: int) -> PoolSettings | None:
    """The pool's ``elastic:`` checked (None: a fixed pool of ``count`` nodes)."""
    raw = pool.get("elastic")
    if raw is None:
        return None
    where = f"pool {pool['prefix']}: elastic"
    if not isinstance(raw, dict):
        raise InventoryError(f"{where} must be a mapping {{min, max, mode, …}}, got {raw!r}")
    unknown = sorted(set(raw) - ELASTIC_KEYS)
    if unknown:
        raise InventoryError(f"{where} has an unknown key {unknown[0]!r} (known: {', '.join(sorted(ELASTIC_KEYS))})")
    if "count" in pool:
        raise InventoryError(f"{where}: an elastic pool has no count (its nodes come and go between min and max)")
    if pool.get("mig") or pool.get("sharing") or not gpu_count:
        raise InventoryError(f"{where}: an elastic pool's nodes have whole GPUs (gpu.count, no mig, no sharing)")
    if "max" not in raw:
        raise InventoryError(f"{where}.max is required (the most nodes it may have)")
    limit = raw.get("limit_units")
    settings = PoolSettings(
        min_nodes=int(_number(raw, "min", 0, where, whole=True)), max_nodes=int(_number(raw, "max", 0, where, whole=True)),
        mode=raw.get("mode", ATOMIC),
        delay_median_seconds=float(_number(raw, "delay_median_seconds", DEFAULT_DELAY_MEDIAN_SECONDS, where)),
        delay_tail_seconds=float(_number(raw, "delay_tail_seconds", DEFAULT_DELAY_TAIL_SECONDS, where)),
        failure_probability=float(_number(raw, "failure_probability", 0.0, where)),
        revoke_probability=float(_number(raw, "revoke_probability", 0.0, where)),
        unneeded_minutes=int(_number(raw, "unneeded_minutes", DEFAULT_UNNEEDED_MINUTES, where, whole=True)),
        limit_units=None if limit is None else int(_number(raw, "limit_units", 0, where, whole=True)))
    problems = settings.problems() + ([] if settings.max_nodes >= 1 else ["max must be at least 1"])
    if problems:
        raise InventoryError(f"{where}: {problems[0]}")
    return settings


def elastic_pools(pools: list, nodes: list[Node]) -> tuple[ElasticPool, ...]:
    """The elastic pools among ``pools`` (already expanded into ``nodes`` by :func:`parse_pools`)."""
    by_name = {node.name: node for node in nodes}
    return tuple(ElasticPool(prefix=pool["prefix"], template=by_name[f"{pool['prefix']}-0"],
                             settings=_elastic_settings(pool, 1))
                 for pool in pools if isinstance(pool, dict) and pool.get("elastic") is not None)


def _prices(entry: dict, key: str) -> dict[str, Decimal]:
    raw = entry.get(key) or {}
    if not isinstance(raw, dict):
        raise InventoryError(f"{key} must map flavor names to prices per hour")
    prices = {}
    for flavor, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise InventoryError(f"{key}.{flavor} must be a price per hour, got {value!r}")
        try:
            price = Decimal(str(value))
        except ArithmeticError:
            raise InventoryError(f"{key}.{flavor} must be a price per hour, got {value!r}") from None
        if not price.is_finite() or price < 0:
            raise InventoryError(f"{key}.{flavor} must be a price per hour of at least 0, got {value!r}")
        prices[str(flavor)] = price
    return prices


def _training(value: object) -> str:
    """A cluster's ``training:`` (module docstring)."""
    if value not in SANDBOX_TRAINING_APIS:
        raise InventoryError(f"training must be {', '.join(SANDBOX_TRAINING_APIS[:-1])} or {SANDBOX_TRAINING_APIS[-1]}, "
                             f"got {value!r}")
    return str(value)


def _cluster(entry: object) -> tuple[SandboxCluster, list[Node]]:
    if not isinstance(entry, dict):
        raise InventoryError(f"every cluster must be a mapping, got {entry!r}")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InventoryError(f"a cluster's name must be a DNS-1123 label (a-z, 0-9, -; at most 63), got {name!r}")
    try:
        unknown = sorted(set(entry) - CLUSTER_KEYS)
        if unknown:
            raise InventoryError(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(CLUSTER_KEYS))})")
        labels = entry.get("labels") or {}
        if not isinstance(labels, dict):
            raise InventoryError("labels must be a mapping")
        region = str(entry.get("region") or "")
        nodes = parse_pools(entry.get("pools") or [], region)
        cluster = SandboxCluster(name=name, region=region, labels={str(k): str(v) for k, v in labels.items()},
                                 prices=_prices(entry, "prices"), spot_prices=_prices(entry, "spot_prices"),
                                 training=_training(entry.get("training", PYTORCHJOB)),
                                 elastic=elastic_pools(entry.get("pools") or [], nodes))
        return cluster, nodes
    except (InventoryError, KeyError, TypeError, ValueError) as exc:
        raise InventoryError(f"cluster {name}: {exc}") from exc


def parse_registry(data: object) -> dict[str, frozenset[str]]:
    """The ``registry:`` section: repository (with its host) → the tags it holds."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InventoryError("registry: must map repositories to their tags")
    catalog: dict[str, frozenset[str]] = {}
    for repository, tags in data.items():
        ref = parse_image(str(repository))
        if ref is None or ref.repository != repository:  # a tag or digest makes it another name
            raise InventoryError(f"registry: {repository!r} must be a repository with its host, without a tag")
        if not isinstance(tags, list) or not tags:
            raise InventoryError(f"registry: {repository} must list its tags")
        catalog[repository] = frozenset(str(tag) for tag in tags)
    return catalog


def parse_inventory(data: object) -> Inventory:
    """The clusters and nodes of an inventory in either format (see the module's docstring)."""
    if not isinstance(data, dict) or ("pools" in data) == ("clusters" in data):
        raise InventoryError("the inventory needs either top-level pools: (one cluster) or clusters: (a list)")
    entries = data["clusters"] if "clusters" in data else [{"name": DEFAULT_CLUSTER, "pools": data["pools"]}]
    if not isinstance(entries, list) or not entries:
        raise InventoryError("clusters: must list at least one cluster")
    parsed = [_cluster(entry) for entry in entries]
    names = [cluster.name for cluster, _ in parsed]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise InventoryError(f"cluster {twice[0]} is listed twice")
    return Inventory(clusters=tuple(cluster for cluster, _ in parsed),
                     nodes={cluster.name: tuple(nodes) for cluster, nodes in parsed},
                     registry=parse_registry(data.get("registry")))


@lru_cache(maxsize=4)
def _load(path: str) -> Inventory:
    with Path(path).open() as handle:
        return parse_inventory(yaml.safe_load(handle) or {})


def inventory() -> Inventory:
    """The configured inventory (cached per path: the file is read once per process)."""
    return _load(str(settings.SLIPWAY_SANDBOX_INVENTORY))


def clusters() -> list[SandboxCluster]:
    """The configured clusters, in the inventory's order (the first is the default one)."""
    return list(inventory().clusters)


def cluster(name: str | None = None) -> SandboxCluster:
    """The cluster called ``name`` (None: the first); :class:`UnknownCluster` when there is none."""
    listed = inventory().clusters
    if name is None:
        return listed[0]
    for candidate in listed:
        if candidate.name == name:
            return candidate
    raise UnknownCluster(f"no sandbox cluster {name!r} in the inventory {settings.SLIPWAY_SANDBOX_INVENTORY}; "
                         f"it has {', '.join(c.name for c in listed)}")


def nodes(name: str | None = None) -> tuple[Node, ...]:
    """The nodes of the cluster called ``name`` (None: the first cluster's): an elastic pool's as its
    inventory's ``max`` names them, whether they exist now or not (:func:`sandbox.pools.present` says which do)."""
    return inventory().nodes[cluster(name).name]


def fixed_nodes(name: str | None = None) -> tuple[Node, ...]:
    """The nodes of the cluster's fixed pools: they always exist (unless reclaimed)."""
    return tuple(node for node in nodes(name) if not node.pool)
